"""Tests of metacan_pipeline.student.rounds: the maturity gate and the machine-score rounds."""

import json

import numpy as np
import pyarrow as pa
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.assets import machine_scores
from metacan_pipeline.student.rounds import ACTIVE_BATCH, maturity_gate
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.teachers.batches import label_batches
from metacan_pipeline.vocab import SCORE_ONLY_IMMATURE, SCORE_ONLY_MATURE
from metacan_pipeline_tests.builders import (
    N_WORKS,
    labels,
    move_holdout_works,
    root_error,
    run_student,
    sql,
    student_label,
    write_inputs,
    write_labels,
)


def test_path_with_a_quote_does_not_break_machine_scores(tmp_path):
    """A data folder named O'Brien: propose_next_batch pasted the Parquet globs into SQL unquoted
    (ParserException after machine_scores and the round's holdout scores were already written)."""
    storage = MetacanStorage(data_dir=str(tmp_path / "O'Brien" / "data"))
    write_inputs(storage)
    md = (
        run_student(storage, machine_scores, label_batches)
        .asset_materializations_for_node("machine_scores")[0]
        .metadata
    )
    assert md["rounds_run"].value == 1
    assert sql(storage, "SELECT count(*) FROM machine_rounds")[0][0] == 1
    assert sql(storage, "SELECT count(*) FROM label_batches WHERE batch = 'active_learning'")[0][0] == 25


def test_frozen_holdout_work_whose_venue_changed_never_trains_the_machine_arms(storage):
    """machine_scores: the arms trained on works whose holdout scores then fed the maturity gate (no check
    catches it there)."""
    write_inputs(storage)
    run_student(storage, machine_scores)
    held = {r[0] for r in sql(storage, "SELECT work_id FROM student_holdout")}
    move_holdout_works(storage)
    run_student(storage, machine_scores)
    labels = json.loads(sql(storage, "SELECT training_labels FROM machine_rounds WHERE round = 2")[0][0])
    assert labels["gemma"] == N_WORKS - len(held)  # gemma labels every work: all but the frozen holdout


def test_teacher_with_only_failures_does_not_crash_machine_scores(storage):
    write_inputs(storage)
    codex = labels(storage, "codex")
    for r in codex:
        r.update(status="failed", categories=None, domain=None, study_design=None, genre=None, error="timeout")
    write_labels(storage, "codex", codex)
    result = run_student(storage, machine_scores, raise_on_error=False)
    assert result.success, root_error(result)
    assert len(storage.read_table("machine_scores")) == N_WORKS


def _history(rounds: int, drift: float = 0.0, seed: int = 1):
    rng = np.random.default_rng(seed)
    base = {f"W{i}": float(s) for i, s in enumerate(rng.random(200))}
    return {
        r: {arm: {w: min(1.0, s + drift * r * (int(w[1:]) % 7)) for w, s in base.items()} for arm in ("codex", "gemma")}
        for r in range(1, rounds + 1)
    }


def test_maturity_gate_needs_five_still_rounds_on_the_frozen_holdout():
    labels = {arm: {f"W{i}": int(i % 3 == 0) for i in range(200)} for arm in ("codex", "gemma")}
    still = maturity_gate(_history(5), labels)
    assert still.passed and still.reason == "passed"
    assert still.series["codex"]["churn"] == [0.0] * 4 and still.series["codex"]["rho"] == [1.0] * 4
    four = maturity_gate(_history(4), labels)
    assert not four.passed and "4 round(s) of the 5" in four.reason
    moving = maturity_gate(_history(6, drift=0.05), labels)
    assert not moving.passed and "churn" in moving.reason and "Spearman" in moving.reason
    one_class = maturity_gate(_history(5), {arm: {f"W{i}": 0 for i in range(200)} for arm in ("codex", "gemma")})
    assert not one_class.passed and "AP not evaluable" in one_class.reason


def test_machine_scores_rounds_count_only_new_labels_and_propose_fresh_batches(storage):
    frame = write_inputs(storage)
    design = storage.read_table("sample_design").to_pylist()
    outside = {r["id"] for r in design[1::4]}  # out of the sampling frame: a rule label, never a teacher call
    storage.write_table("sample_design", pa.Table.from_pylist([r for r in design if r["id"] not in outside]))
    md1 = (
        run_student(storage, machine_scores, label_batches)
        .asset_materializations_for_node("machine_scores")[0]
        .metadata
    )
    assert md1["rounds_run"].value == 1 and md1["new_round"].value is True
    ms = storage.read_table("machine_scores").to_pylist()
    assert len(ms) == N_WORKS and {r["validation_status"] for r in ms} == {SCORE_ONLY_IMMATURE}
    assert all(r["score_spread"] == pytest.approx(abs(r["score_codex"] - r["score_gemma"])) for r in ms)
    held = {r[0] for r in sql(storage, "SELECT work_id FROM student_holdout")}
    codex_labelled = {r["work_id"] for r in storage.read_table("direct_labels_codex").to_pylist()}
    batch1 = sql(storage, f"SELECT work_id, source FROM label_batches WHERE batch = '{ACTIVE_BATCH}'")
    ids1 = {w for w, _ in batch1}
    assert len(batch1) == len(ids1) == 25 and not ids1 & held and not ids1 & codex_labelled and not ids1 & outside
    assert {s.split(": ")[1] for _, s in batch1} == {"largest arm spread", "closest to 0.5", "random sentinel"}

    md2 = (
        run_student(storage, machine_scores, label_batches)
        .asset_materializations_for_node("machine_scores")[0]
        .metadata
    )
    assert md2["rounds_run"].value == 1 and md2["new_round"].value is False  # nothing new: not a round
    assert len(sql(storage, "SELECT * FROM label_batches")) == 25

    # the teacher labels the proposed batch: the next materialization is round 2, from a fresh reservoir
    titles = {r["id"]: r["title_text"] for r in frame}
    codex = storage.read_table("direct_labels_codex").to_pylist() + [student_label("codex", w, titles[w]) for w in ids1]
    storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    md3 = (
        run_student(storage, machine_scores, label_batches)
        .asset_materializations_for_node("machine_scores")[0]
        .metadata
    )
    assert md3["rounds_run"].value == 2 and md3["new_round"].value is True
    ids2 = {r[0] for r in sql(storage, "SELECT work_id FROM machine_round_proposals WHERE round = 2")}
    assert len(ids2) == 25 and not ids2 & ids1 and not ids2 & held
    assert sql(storage, "SELECT count(DISTINCT round) FROM machine_round_scores")[0][0] == 2
    assert {r["rounds_run"] for r in storage.read_table("machine_scores").to_pylist()} == {2}


def test_machine_scores_mature_after_five_still_rounds(storage):
    """Five rounds whose labels grow but whose holdout ranking barely moves pass the gate: 'stopped moving'.

    Codex labels the whole holdout here, so its positive set on the holdout is exactly the positive titles
    (k = their count) and does not churn; about 128 works outside the holdout are left for the proposals."""
    frame = write_inputs(storage, in_sample=lambda i, held: held or i % 3 != 1)
    titles = {r["id"]: r["title_text"] for r in frame}
    for round_no in range(1, 6):
        md = run_student(storage, machine_scores).asset_materializations_for_node("machine_scores")[0].metadata
        assert md["rounds_run"].value == round_no
        assert md["maturity_gate_passed"].value is (round_no == 5), md["maturity_gate_reason"].value
        # the teacher labels the first proposed work (its title decides it): a new round, the same ranking
        first = sql(storage, f"SELECT min(work_id) FROM machine_round_proposals WHERE round = {round_no}")[0][0]
        codex = storage.read_table("direct_labels_codex").to_pylist() + [student_label("codex", first, titles[first])]
        storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    rows = storage.read_table("machine_scores").to_pylist()
    assert {(r["validation_status"], r["rounds_run"], r["maturity_gate_passed"]) for r in rows} == {
        (SCORE_ONLY_MATURE, 5, True)
    }
    assert "stopped moving" in rows[0]["note"] and "never assert a category" in rows[0]["note"]


def test_the_census_arm_reads_the_census_subsample_and_the_sample_arm_all_its_labels(storage, monkeypatch):
    """Above CENSUS_LABELS_MAX labels the census teacher's arm trains on the subsample student_heads reads (the
    works of smallest salted hash), never on every label; the sample teacher's arm is not capped."""
    from metacan_pipeline.student import rounds
    from metacan_pipeline.student.training import teacher_call_labels

    write_inputs(storage)
    full = {a: teacher_call_labels(storage, a) for a in rounds.ARMS}
    monkeypatch.setattr(rounds, "CENSUS_LABELS_MAX", 10)
    got = rounds.load_arm_inputs(storage, "run-1")
    assert len(full["gemma"]) > 10 and len(got.labels["gemma"]) == 10
    assert got.labels["gemma"] == teacher_call_labels(storage, "gemma", 10)
    assert got.labels["codex"] == full["codex"]
    assert {r["work_id"] for r in got.train["gemma"]} <= {r["work_id"] for r in got.labels["gemma"]}
