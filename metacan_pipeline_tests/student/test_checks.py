"""Tests of metacan_pipeline.student.checks: the prediction checks and the holdout leak check."""

import duckdb
import pyarrow as pa

from metacan_pipeline.student.assets import student_heads
from metacan_pipeline.student.checks import (
    coverage_problems,
    decisions_without_gate,
    holdout_leaks,
    scores_out_of_range,
)
from metacan_pipeline.tables.student import PRED_SCHEMA
from metacan_pipeline.vocab import CATEGORICAL_TARGETS, CATEGORIES
from metacan_pipeline_tests.builders.common import sql
from metacan_pipeline_tests.builders.student import run_student, write_inputs


def _pred(wid: str, candidate: list[str], consensus: list[str] | None = None, score: float = 0.4) -> dict:
    row = {f.name: None for f in PRED_SCHEMA}
    row.update(
        {
            "id": wid,
            "model_version": "mv",
            "candidate_categories": candidate,
            "consensus_categories": consensus or [],
            "category_scores_codex": [score] * len(CATEGORIES),
            "category_scores_gemma": [0.1] * len(CATEGORIES),
            "teacher_disagreement_score": 0.6,
            "threshold_uncertainty_score": 0.0,
            "prediction_status": "machine_predicted_unvalidated",
        }
    )
    for t, classes in CATEGORICAL_TARGETS.items():
        row[f"{t}_scores_codex"] = [1 / len(classes)] * len(classes)
    return row


def _con(preds: list[dict]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    predictions = pa.Table.from_pylist(preds, schema=PRED_SCHEMA)  # noqa: F841
    frame = pa.table({"id": ["W1", "W2", "W3"]})  # noqa: F841
    student_heads = pa.table(  # noqa: F841
        {
            "model_version": ["mv", "mv", "mv"],
            "teacher": ["codex", "codex", "gemma"],
            "target": ["metaresearch", "genre", "metaresearch"],
            "gate_passed": [False, False, None],
        }
    )
    direct_labels_gemma = pa.table({"work_id": ["W1", "W2", "W3"], "categories": [["metaresearch"], [], []]})  # noqa: F841
    for name in ("predictions", "frame", "student_heads", "direct_labels_gemma"):
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}")
    return con


GOOD = [_pred("W1", ["metaresearch"]), _pred("W2", []), _pred("W3", [])]


def test_good_predictions_pass_every_check():
    con = _con(GOOD)
    assert scores_out_of_range(con) == {} and decisions_without_gate(con) == {}
    assert coverage_problems(con) == {"frame_works_not_scored": 0, "ids_scored_twice": 0, "scored_ids_not_in_frame": 0}


def test_each_kind_of_bad_prediction_is_named():
    bad = [
        _pred("W1", ["metaresearch"], consensus=["metaresearch"], score=1.5),  # consensus by an ungated head, score > 1
        _pred("W2", ["metaresearch"]),  # candidate without a gemma label: a codex decision by an ungated head
        _pred("W2", []),
        _pred("W9", []),
    ]  # W2 twice, W9 not in the frame, W3 missing
    bad[2]["threshold_uncertainty_score"] = float("nan")
    bad[3]["genre_codex"] = "review"  # a categorical codex value from an ungated head
    con = _con(bad)
    assert scores_out_of_range(con) == {"category_scores_codex": 1, "threshold_uncertainty_score": 1}
    assert coverage_problems(con) == {"frame_works_not_scored": 1, "ids_scored_twice": 1, "scored_ids_not_in_frame": 1}
    assert decisions_without_gate(con) == {"metaresearch": 2, "genre": 1}


def test_holdout_check_catches_a_leak(storage):
    write_inputs(storage)
    run_student(storage, student_heads)
    with storage.connect() as con:
        assert holdout_leaks(con) == {"training_rows_in_frozen_holdout": 0, "training_rows_in_held_out_venues": 0}
    leak = sql(storage, "SELECT work_id FROM student_holdout LIMIT 1")[0][0]
    rows = storage.read_table("student_training_set").to_pylist()
    rows.append({**rows[0], "work_id": leak, "venue_key": "https://openalex.org/S-leak"})
    storage.write_table("student_training_set", pa.Table.from_pylist(rows))
    with storage.connect() as con:
        assert holdout_leaks(con)["training_rows_in_frozen_holdout"] == 1
