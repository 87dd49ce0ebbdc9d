"""Quota calibration, support gate and the derived prediction scores (SPEC section 6)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    return GateResult(not fails, gemma_positives, codex_positives, kish_ess_positive,
                      "passed" if not fails else "scores only, no decision: " + "; ".join(fails))


@dataclass(frozen=True)
class Quota:
    """Result of quota calibration for one head: ``k`` positives, the threshold and boundary work."""

    k: int
    threshold: float | None
    boundary_id: str | None
    positive_ids: frozenset[str]


def quota_calibrate(ids: list[str], scores: np.ndarray, rate: float) -> Quota:
    """``k = round(rate * n)``; the top k works by (score desc, id asc) are positive (SPEC section 6).

    The threshold is the k-th work's score and the boundary id that work's id (None when k = 0).
    """
    n = len(ids)
    k = int(round(rate * n))
    k = max(0, min(k, n))
    if k == 0:
        return Quota(0, None, None, frozenset())
    order = sorted(range(n), key=lambda i: (-float(scores[i]), ids[i]))
    top = order[:k]
    b = top[-1]
    return Quota(k, float(scores[b]), ids[b], frozenset(ids[i] for i in top))


def threshold_uncertainty(score: float, threshold: float) -> float:
    """clamp01(1 - |s - t| / (t if s < t else 1 - t)) (SPEC section 6); 1 at the threshold."""
    denom = threshold if score < threshold else 1.0 - threshold
    if denom <= 0:
        return 1.0 if score == threshold else 0.0
    return float(min(1.0, max(0.0, 1.0 - abs(score - threshold) / denom)))
