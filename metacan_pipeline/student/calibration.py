"""Quota calibration, support gate and the derived prediction scores (SPEC section 6)."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from ..storage import sql_literal

MIN_POSITIVES = 20  # SPEC section 6: both teachers need >= 20 positives on a head
MIN_KISH_ESS = 10.0  # SPEC section 6: Kish ESS of the positive weights >= 10


@dataclass(frozen=True)
class GateResult:
    """Whether a head may carry decisions, and why (shown on pages and in asset metadata)."""

    passed: bool
    gemma_positives: int
    codex_positives: int
    kish_ess_positive: float
    reason: str


def support_gate(gemma_positives: int, codex_positives: int, kish_ess_positive: float) -> GateResult:
    """SPEC section 6 support gate: both teachers >= 20 positives and Kish ESS of positive weights >= 10."""
    fails = []
    if gemma_positives < MIN_POSITIVES:
        fails.append(f"gemma positives {gemma_positives} < {MIN_POSITIVES}")
    if codex_positives < MIN_POSITIVES:
        fails.append(f"codex positives {codex_positives} < {MIN_POSITIVES}")
    if kish_ess_positive < MIN_KISH_ESS:
        fails.append(f"Kish ESS of positive weights {kish_ess_positive:.1f} < {MIN_KISH_ESS:.0f}")
    return GateResult(
        not fails,
        gemma_positives,
        codex_positives,
        kish_ess_positive,
        "passed" if not fails else "scores only, no decision: " + "; ".join(fails),
    )


def double_sql(x: float) -> str:
    """A DuckDB DOUBLE literal equal to ``x`` bit for bit (a bare ``0.1`` would be a DECIMAL)."""
    return f"'{float(x)!r}'::DOUBLE"


@dataclass(frozen=True)
class Quota:
    """Quota calibration of one head: ``k`` positives of ``n`` scored, the threshold and boundary work."""

    target: str
    rate: float
    n: int
    k: int
    threshold: float | None
    boundary_id: str | None

    def decides_sql(self, score: str, id_col: str = "id") -> str:
        """A DuckDB boolean expression that is true exactly for the top ``k`` works by (score desc, id asc)."""
        if self.k == 0 or self.threshold is None:
            return "false"
        t = double_sql(self.threshold)
        return f"({score} > {t} OR ({score} = {t} AND {id_col} <= {sql_literal(self.boundary_id)}))"

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "rate": self.rate,
            "n": self.n,
            "k": self.k,
            "threshold": self.threshold,
            "boundary_id": self.boundary_id,
        }


def quota_calibrate(con: duckdb.DuckDBPyConnection, relation: str, score: str, rate: float, target: str = "") -> Quota:
    """``k = round(rate x n)`` over the ``n`` rows of ``relation``; the top k by (``score`` desc, ``id``
    asc) are decided positive (SPEC section 6). Returns the k-th work's score as the threshold and its id
    as the boundary (None when k = 0). Runs in DuckDB: a top-N, never the frame in Python memory.
    """
    n = con.execute(f"SELECT count(*) FROM {relation}").fetchone()[0]
    k = max(0, min(round(rate * n), n))
    if k == 0:
        return Quota(target, rate, n, 0, None, None)
    thr, bid = con.execute(
        f"SELECT {score}, id FROM {relation} ORDER BY {score} DESC, id ASC LIMIT 1 OFFSET {k - 1}"
    ).fetchone()
    return Quota(target, rate, n, k, float(thr), bid)


def threshold_uncertainty_sql(score: str, threshold: float) -> str:
    """DuckDB expression of clamp01(1 - |s - t| / (t if s < t else 1 - t)) (SPEC section 6): 1 at the
    threshold, falling linearly to 0 at 0 (below) or at 1 (above)."""
    t, ts = float(threshold), double_sql(threshold)
    below = f"greatest(0.0, least(1.0, 1.0 - abs({score} - {ts}) / {ts}))" if t > 0 else "0.0"
    above = (
        f"greatest(0.0, least(1.0, 1.0 - abs({score} - {ts}) / (1.0 - {ts})))"
        if t < 1
        else f"CASE WHEN {score} = {ts} THEN 1.0 ELSE 0.0 END"
    )
    return f"(CASE WHEN {score} < {ts} THEN {below} ELSE {above} END)"
