"""Blocking checks on ``predictions`` and ``student_training_set``: scores in [0, 1], every frame work
scored exactly once, no decision on a head that failed the support gate (SPEC section 6), and the
holdout disjoint from training.

Each check is a plain function over a DuckDB connection (tested on its own) wrapped as a Dagster asset
check attached, by key, to the table it reads; a failure blocks ``work_records`` and everything downstream.
"""

import dagster as dg
import duckdb

from ..storage import MetacanStorage
from ..tables.fields import PUBLISHED_TEACHERS
from ..vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS, CATEGORIES
from .holdout import venue_held_out
from .roles import CENSUS, SAMPLE, direct_labels_key

#: Lists of binary heads' scores (one per category): an element is NULL where its head gives no score.
_HEAD_SCORE_LISTS = ["category_scores_codex", "category_scores_gemma"]
#: Lists of a categorical head's class probabilities: never NULL.
_LIST_SCORES = [f"{t}_scores_{s}" for t in CATEGORICAL_TARGETS for s in PUBLISHED_TEACHERS]
_SCALAR_SCORES = [f"{t}_score_{s}" for t in ABOUT_CA_TARGETS for s in PUBLISHED_TEACHERS] + [
    "teacher_disagreement_score",
    "threshold_uncertainty_score",
]


def scores_out_of_range(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """``{column: rows with a score outside [0, 1] or NaN}`` for every score column of ``predictions``
    (lists: any element); columns with none are left out. NULL scalars and NULL elements of the category score
    lists are allowed (a binary head with no score); a categorical head's probabilities are never NULL."""
    bad = {}
    out_of_range = (
        [(col, f"len(list_filter({col}, x -> x IS NULL OR isnan(x) OR x < 0 OR x > 1)) > 0") for col in _LIST_SCORES]
        + [
            (col, f"len(list_filter({col}, x -> x IS NOT NULL AND (isnan(x) OR x < 0 OR x > 1))) > 0")
            for col in _HEAD_SCORE_LISTS
        ]
        + [(col, f"{col} IS NOT NULL AND (isnan({col}) OR {col} < 0 OR {col} > 1)") for col in _SCALAR_SCORES]
    )
    for col, condition in out_of_range:
        n = con.execute(f"SELECT count(*) FROM predictions WHERE {condition}").fetchone()[0]
        if n:
            bad[col] = n
    return bad


def coverage_problems(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Frame works not scored, ids scored more than once, and scored ids not in the frame."""
    return dict(
        zip(
            ("frame_works_not_scored", "ids_scored_twice", "scored_ids_not_in_frame"),
            con.execute("""
        SELECT (SELECT count(*) FROM frame WHERE id NOT IN (SELECT id FROM predictions)),
               (SELECT count(*) FROM (SELECT id FROM predictions GROUP BY id HAVING count(*) > 1)),
               (SELECT count(*) FROM predictions WHERE id NOT IN (SELECT id FROM frame))""").fetchone(),
            strict=False,
        )
    )


def decisions_without_gate(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """``{head: rows}`` where ``predictions`` carries a codex decision for a head whose codex head did not
    pass the support gate (``student_heads`` of the same model version): the category in
    ``consensus_categories``, or in ``candidate_categories`` without a gemma direct label for it; an
    about_ca consensus; a categorical codex value."""
    ungated = {
        r[0]
        for r in con.execute(
            """SELECT h.target FROM student_heads h WHERE h.teacher = ? AND NOT coalesce(h.gate_passed, false)
          AND h.model_version IN (SELECT DISTINCT model_version FROM predictions)""",
            [SAMPLE],
        ).fetchall()
    }
    bad = {}
    for head in sorted(ungated):
        if head in CATEGORIES:
            sql = f"""SELECT count(*) FROM predictions p LEFT JOIN {direct_labels_key(CENSUS)} g ON g.work_id = p.id
                      WHERE list_contains(p.consensus_categories, '{head}')
                         OR (list_contains(p.candidate_categories, '{head}') AND NOT coalesce(list_contains(g.categories, '{head}'), false))"""
        elif head in ABOUT_CA_TARGETS:
            sql = f"SELECT count(*) FROM predictions WHERE coalesce({head}_consensus, false)"
        else:
            sql = f"SELECT count(*) FROM predictions WHERE {head}_codex IS NOT NULL"
        n = con.execute(sql).fetchone()[0]
        if n:
            bad[head] = n
    return bad


@dg.asset_check(asset="predictions", blocking=True, description="Every score in predictions lies in [0, 1] (no NaN).")
def predictions_scores_in_unit_interval(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when any score column of ``predictions`` has a value outside [0, 1] or NaN (`scores_out_of_range`)."""
    with storage.connect() as con:
        bad = scores_out_of_range(con)
    return dg.AssetCheckResult(passed=not bad, metadata={"rows_out_of_range_by_column": dg.MetadataValue.json(bad)})


@dg.asset_check(
    asset="predictions", blocking=True, description="Every frame work is scored exactly once, and nothing else is."
)
def predictions_score_every_frame_work_once(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails on a frame work without a prediction, an id scored twice, or a prediction for a work not in the frame."""
    with storage.connect() as con:
        problems = coverage_problems(con)
    return dg.AssetCheckResult(passed=not any(problems.values()), metadata=problems)


@dg.asset_check(
    asset="predictions",
    blocking=True,
    description="No codex decision on a head that failed the support gate (SPEC section 6).",
)
def predictions_no_decision_without_gate(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when a head that failed the support gate still decides something (`decisions_without_gate`)."""
    with storage.connect() as con:
        bad = decisions_without_gate(con)
    return dg.AssetCheckResult(
        passed=not bad, metadata={"rows_with_a_decision_by_ungated_head": dg.MetadataValue.json(bad)}
    )


def holdout_leaks(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Training rows of the current ``student_training_set`` that touch the holdout: works of the frozen
    set (``student_holdout``), and works whose venue the holdout rule holds out (:func:`~.holdout.venue_held_out`,
    checked in Python over the distinct training venues)."""
    in_frozen = con.execute(
        "SELECT count(*) FROM student_training_set t SEMI JOIN student_holdout h ON h.work_id = t.work_id"
    ).fetchone()[0]
    venues = [r[0] for r in con.execute("SELECT DISTINCT venue_key FROM student_training_set").fetchall()]
    held = [v for v in venues if venue_held_out(v)]
    in_venue = (
        con.execute("SELECT count(*) FROM student_training_set WHERE list_contains(?, venue_key)", [held]).fetchone()[0]
        if held
        else 0
    )
    return {"training_rows_in_frozen_holdout": in_frozen, "training_rows_in_held_out_venues": in_venue}


@dg.asset_check(
    asset="student_training_set",
    blocking=True,
    description="The holdout never reaches training (SPEC section 6).",
)
def student_holdout_disjoint_from_training(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when a work of the frozen holdout, or of a held-out venue, is among the works that trained the
    current model version's heads (`holdout_leaks`): the leak that once showed AP 0.969 for an honest 0.152."""
    with storage.connect() as con:
        leaks = holdout_leaks(con)
        n_train = con.execute("SELECT count(*) FROM student_training_set").fetchone()[0]
    return dg.AssetCheckResult(passed=not any(leaks.values()), metadata={**leaks, "training_rows": n_train})


PREDICTION_CHECKS = [
    predictions_scores_in_unit_interval,
    predictions_score_every_frame_work_once,
    predictions_no_decision_without_gate,
    student_holdout_disjoint_from_training,
]
