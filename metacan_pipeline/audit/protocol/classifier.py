"""The classifier under test, as the audit reads it from the warehouse: its one model version, the heads evaluated
and their thresholds, the frame build, the works that trained or calibrated it, and the SQL of a head's score and
state in a ``predictions`` row.

**Machine state on an evaluated head** (``predictions`` of the classifier version under test):

- *consensus*: the head's category (or about_ca flag) is in the work's consensus; *candidate*: in its candidate;
- *near*: the sample teacher's head score ``s >= (1 - near_band) * t`` for the head's threshold ``t > 0``: the
  relative distance of SPEC section 6's ``threshold_uncertainty_score``, so with the default band 0.5 a negative is
  near when its uncertainty on the head is at least 0.5. It decides the stratum of works that are candidate on no
  head only (the stratum rule of :mod:`.design` puts consensus and candidate first).
- A head that passed its support gate has its quota threshold (``prediction_thresholds``). A head that failed it has
  no decision: its consensus is never true, its candidate is the census teacher's label (as ``predictions`` records
  it), and its near/far split uses the *score at the quota it would have had*, the ``k``-th highest score with
  ``k = round(rate x works scored)`` (``threshold_source = score_quantile``); with no positive rate it adds nothing
  to *near* (``none``). The protocol records each head's source.
"""

from __future__ import annotations

import duckdb

from ...student.roles import SAMPLE, direct_labels_key
from ...vocab import BINARY_TARGETS, CATEGORIES
from .locked import HeadUnderTest


def _head(head: str) -> str:
    if head not in BINARY_TARGETS:
        raise ValueError(f"head {head!r} is not a binary head; expected one of {list(BINARY_TARGETS)}")
    return head


def score_sql(head: str) -> str:
    """The sample teacher's score of ``head`` in a ``predictions`` row ``p``."""
    if _head(head) in CATEGORIES:
        return f"p.category_scores_codex[{CATEGORIES.index(head) + 1}]"
    return f"p.{head}_score_codex"


def state_sql(head: str, state: str) -> str:
    """``consensus`` or ``candidate`` of ``head`` in a ``predictions`` row ``p`` (false without a prediction)."""
    if _head(head) in CATEGORIES:
        return f"coalesce(list_contains(p.{state}_categories, '{head}'), false)"
    return f"coalesce(p.{head}_{state}, false)"


def classifier_version(con: duckdb.DuckDBPyConnection) -> str:
    """The one model version of ``predictions``, checked against ``prediction_thresholds`` and ``student_heads``.
    Raises ValueError when they disagree (a stage was re-run and the next not yet) or predictions are missing."""
    versions = {}
    for table in ("predictions", "prediction_thresholds", "student_heads"):
        try:
            versions[table] = sorted(
                r[0] for r in con.execute(f"SELECT DISTINCT model_version FROM {table}").fetchall()
            )
        except duckdb.CatalogException:
            raise ValueError(f"table {table!r} not found: materialize predictions before the audit protocol") from None
    if len(versions["predictions"]) != 1 or any(v != versions["predictions"] for v in versions.values() if v):
        raise ValueError(
            f"the classifier under test must be one model version; found {versions}: materialize predictions again"
        )
    return versions["predictions"][0]


def default_heads(threshold_rows: list[dict]) -> list[str]:
    """Every binary category head that got decisions (support gate passed), plus ``metaresearch`` always."""
    gated = {r["target"] for r in threshold_rows if r["gate_passed"]}
    return [c for c in CATEGORIES if c == "metaresearch" or c in gated]


def heads_under_test(
    con: duckdb.DuckDBPyConnection, model_version: str, requested: list[str]
) -> tuple[tuple[HeadUnderTest, ...], list[str]]:
    """The evaluated heads (``requested``, or :func:`default_heads` when empty; vocabulary order) with their gate,
    rate, k and near/far threshold (module docstring), and one note per head without decisions."""
    rows = [
        dict(zip(("target", "gate_passed", "gate_reason", "rate", "n", "k", "threshold"), r, strict=True))
        for r in con.execute(
            "SELECT target, gate_passed, gate_reason, rate, n, k, threshold FROM prediction_thresholds "
            "WHERE model_version = ?",
            [model_version],
        ).fetchall()
    ]
    by_head = {r["target"]: r for r in rows}
    names = [_head(h) for h in requested] or default_heads(rows)
    if len(set(names)) != len(names):
        raise ValueError(f"heads {names} name a head twice")
    heads, notes = [], []
    for name in (t for t in BINARY_TARGETS if t in names):
        r = by_head.get(name) or {"gate_passed": False, "gate_reason": "no prediction_thresholds row", "rate": None}
        gated = bool(r["gate_passed"])
        k, threshold, source = r.get("k"), r.get("threshold"), "quota"
        if not gated:
            k = round(r["rate"] * r["n"]) if r["rate"] and r.get("n") else 0
            threshold = _score_at_rank(con, name, k) if k > 0 else None
            source = "score_quantile"
            notes.append(
                f"{name}: no decisions ({r['gate_reason']}); consensus never, candidate = the census teacher's label, "
                + (
                    f"near/far against the score at the quota it would have had (k = {k}, threshold {threshold:.4g})"
                    if threshold is not None
                    else "no positive rate: it adds nothing to negative_near"
                )
            )
        if threshold is None:
            source = "none"
        heads.append(HeadUnderTest(name, gated, r["gate_reason"] or "", r["rate"], k, threshold, source))
    return tuple(heads), notes


def _score_at_rank(con: duckdb.DuckDBPyConnection, head: str, k: int) -> float | None:
    """The ``k``-th highest sample-teacher score of ``head`` over ``predictions`` (ties by id, as the quota)."""
    row = con.execute(
        f"SELECT s FROM (SELECT {score_sql(head)} AS s, p.id FROM predictions p WHERE {score_sql(head)} IS NOT NULL) "
        f"ORDER BY s DESC, id LIMIT 1 OFFSET {int(k) - 1}"
    ).fetchone()
    return None if row is None else float(row[0])


def frame_build_id(con: duckdb.DuckDBPyConnection) -> str:
    """The frame's build id (several, comma-joined, if the frame mixes builds). Raises ValueError without a frame."""
    try:
        ids = [r[0] for r in con.execute("SELECT DISTINCT frame_build_id FROM frame ORDER BY 1").fetchall()]
    except duckdb.CatalogException:
        raise ValueError("table 'frame' not found: materialize the frame first") from None
    return ",".join(str(i) for i in ids) or "empty-frame"


# --- trained works ----------------------------------------------------------------------------------------------------


def trained_ids(con: duckdb.DuckDBPyConnection, model_version: str) -> tuple[set[str], dict[str, int]]:
    """The works that trained or calibrated the classifier version under test, and counts for the metadata.

    Trained: ``student_training_set`` rows of the sample teacher (its heads decide) for ``model_version``.
    Calibrated: every labelled sample-teacher call on a work of the teachers' sample (``sample_design.in_sample``):
    the quota rates are computed over all of them, frozen-holdout works included. The census teacher's training
    works are not counted: its heads decide nothing (its direct labels enter candidate and consensus as labels),
    and it labels nearly the whole frame. Labels added after the version was trained make this a superset.
    """
    trained = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT work_id FROM student_training_set WHERE model_version = ? AND teacher = ?",
            [model_version, SAMPLE],
        ).fetchall()
    }
    census = con.execute(
        "SELECT count(DISTINCT work_id) FROM student_training_set WHERE model_version = ? AND teacher <> ?",
        [model_version, SAMPLE],
    ).fetchone()[0]
    calibrated: set[str] = set()
    labels = direct_labels_key(SAMPLE)
    names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    if {labels, "sample_design"} <= names:
        calibrated = {
            r[0]
            for r in con.execute(
                f"SELECT DISTINCT l.work_id FROM {labels} l JOIN sample_design d ON d.id = l.work_id "
                "WHERE d.in_sample AND l.status = 'labelled' AND l.source = 'teacher_call'"
            ).fetchall()
        }
    return trained | calibrated, {
        "sample_teacher_training_works": len(trained),
        "calibration_works_not_in_training": len(calibrated - trained),
        "census_teacher_training_works_not_counted": census,
    }
