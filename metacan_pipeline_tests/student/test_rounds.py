"""Tests of metacan_pipeline.student.rounds: the maturity gate and the machine-score rounds."""

import datetime as dt
import json
import math

import numpy as np
import pyarrow as pa
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student import rounds
from metacan_pipeline.student.assets import machine_scores
from metacan_pipeline.student.rounds import ACTIVE_BATCH, maturity_gate
from metacan_pipeline.tables.student import ROUND_SCORES_SCHEMA
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.teachers.assets import label_batches
from metacan_pipeline.vocab import SCORE_ONLY_IMMATURE, SCORE_ONLY_MATURE
from metacan_pipeline_tests.builders.common import root_error, sql
from metacan_pipeline_tests.builders.student import (
    N_WORKS,
    move_holdout_works,
    run_student,
    student_label,
    write_inputs,
)
from metacan_pipeline_tests.builders.teachers import labels, write_labels
from metacan_pipeline_tests.student import rounds_before as before


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


def _gates(storage: MetacanStorage, history: dict, labels: dict) -> tuple[rounds.GateReport, rounds.GateReport]:
    """Store ``history`` ({round: {arm: {work id: score}}}) as the rounds' holdout scores, then the gate over them
    twice: as machine_scores computes it (``labels``, {arm: {work id: 0/1}}, as an Arrow table) and as the reference
    dict code computes it (:mod:`.rounds_before`, over the stored rounds read back into dicts)."""
    rows = [
        {"round": r, "arm": a, "work_id": w, "score": s}
        for r, arms in history.items()
        for a, scores in arms.items()
        for w, s in scores.items()
    ]
    scores = pa.Table.from_pylist(rows, schema=ROUND_SCORES_SCHEMA)  # noqa: F841 (DuckDB replacement scan)
    with storage.connect() as con:
        con.execute("DELETE FROM machine_round_scores")
        con.execute("INSERT INTO machine_round_scores SELECT * FROM scores")
    flat = [(a, w, y) for a, lab in labels.items() for w, y in lab.items()]
    table = pa.table(
        {
            "arm": pa.array([a for a, _, _ in flat], pa.string()),
            "work_id": pa.array([w for _, w, _ in flat], pa.string()),
            "positive": pa.array([y for _, _, y in flat], pa.int8()),
        }
    )
    return maturity_gate(storage, table), before.maturity_gate(before.round_history(storage), labels)


def test_maturity_gate_needs_five_still_rounds_on_the_frozen_holdout(storage):
    labels = {arm: {f"W{i}": int(i % 3 == 0) for i in range(200)} for arm in ("codex", "gemma")}
    still, _ = _gates(storage, _history(5), labels)
    assert still.passed and still.reason == "passed"
    assert still.series["codex"]["churn"] == [0.0] * 4 and still.series["codex"]["rho"] == [1.0] * 4
    four, _ = _gates(storage, _history(4), labels)
    assert not four.passed and "4 round(s) of the 5" in four.reason
    moving, _ = _gates(storage, _history(6, drift=0.05), labels)
    assert not moving.passed and "churn" in moving.reason and "Spearman" in moving.reason
    one_class, _ = _gates(storage, _history(5), {arm: {f"W{i}": 0 for i in range(200)} for arm in ("codex", "gemma")})
    assert not one_class.passed and "AP not evaluable" in one_class.reason
    none, _ = _gates(storage, {}, labels)
    assert not none.passed and none.series["codex"] == {"ap": [], "churn": [], "rho": []}


def test_maturity_gate_breaks_score_ties_by_work_id_and_ranks_ties_by_their_mean(storage):
    """Six works, two rounds, ties in both: k = round(2/4 x 6) = 3. Round 1's top 3 is W1 then, of the three tied
    at 0.5, W2 and W3 (lowest ids); round 2's is W1, W3, W4: churn = |{W2, W4}| / |{W1..W4}| = 0.5 (breaking the
    tie by highest id would give 0). Spearman on tied ranks: sqrt(6/7). AP 0.75 in both rounds."""
    one = {"W1": 0.9, "W2": 0.5, "W3": 0.5, "W4": 0.5, "W5": 0.1, "W6": 0.1}
    two = {"W1": 0.9, "W2": 0.4, "W3": 0.6, "W4": 0.5, "W5": 0.1, "W6": 0.2}
    labels = {arm: {"W1": 1, "W2": 1, "W3": 0, "W4": 0} for arm in ("codex", "gemma")}
    new, old = _gates(storage, {1: {"codex": one, "gemma": one}, 2: {"codex": two, "gemma": two}}, labels)
    assert new.series["codex"] == {"ap": [0.75, 0.75], "churn": [0.5], "rho": [pytest.approx(math.sqrt(6 / 7))]}
    assert new.series["codex"]["rho"][0] != 1.0
    assert new == old and not new.passed and "2 round(s) of the 5" in new.reason


@pytest.mark.parametrize(
    "case",
    ["ties_and_drift", "works_and_arms_come_and_go", "half_way_k", "tiny_and_constant_rounds", "still_with_ties"],
)
def test_maturity_gate_on_stored_rounds_is_the_gate_of_the_dict_code(storage, case):
    """The gate reads the stored rounds in DuckDB, one round pair at a time, as numpy arrays; its series
    and verdict are exactly those of the code that read every round into dicts (rounds_before), on ties (scores
    rounded to 2 decimals, clamped at 1.0), rounds that scored other works or no arm, labels of works no round
    scored, k at a half (Python's round: to even), rounds of 0-2 works and constant rounds (Spearman NaN)."""
    rng = np.random.default_rng(17)
    ids = [f"W{i:04d}" for i in range(400)]
    base = np.round(rng.random(len(ids)), 2)
    labels = {
        "codex": {w: int(b > 0.7) for w, b in zip(ids[::2], base[::2], strict=True)},
        "gemma": {w: int(rng.random() < 0.3) for w in ids + ["W9998", "W9999"]},
    }

    def scores(r: int, drift: float, keep=ids) -> dict[str, float]:
        moved = np.minimum(1.0, np.round(base + drift * r * rng.random(len(ids)), 2))
        return {w: float(s) for w, s in zip(ids, moved, strict=True) if w in set(keep)}

    if case == "ties_and_drift":
        history = {r: {a: scores(r, 0.08) for a in ("codex", "gemma")} for r in range(1, 7)}
    elif case == "works_and_arms_come_and_go":
        history = {
            1: {"codex": scores(1, 0.01), "gemma": scores(1, 0.01)},
            2: {"codex": scores(2, 0.01, ids[:300]), "gemma": scores(2, 0.01, ids[50:])},
            3: {"codex": scores(3, 0.01, ids[100:])},
            4: {"codex": scores(4, 0.01), "gemma": scores(4, 0.01)},
            6: {"codex": scores(6, 0.01), "gemma": scores(6, 0.01, ids[::3])},
        }
    elif case == "half_way_k":
        # codex: 1 positive in 4 labels, so k = round(0.25 x n): n = 10 gives 2.5 -> 2, n = 6 gives 1.5 -> 2
        labels = {"codex": {"W0000": 1, "W0001": 0, "W0002": 0, "W0003": 0}, "gemma": labels["gemma"]}
        sizes = {1: 10, 2: 10, 3: 6, 4: 6, 5: 10}  # works both rounds scored: 10, 6, 6, 6
        history = {r: {a: scores(r, 0.2, ids[:n]) for a in ("codex", "gemma")} for r, n in sizes.items()}
    elif case == "tiny_and_constant_rounds":
        flat = {w: 0.5 for w in ids[:50]}
        history = {
            1: {"codex": scores(1, 0.0, ids[:2]), "gemma": flat},
            2: {"codex": scores(2, 0.3, ids[:2]), "gemma": scores(2, 0.3, ids[:50])},
            3: {"codex": scores(3, 0.3, ids[:3]), "gemma": flat},
            4: {"codex": {}, "gemma": flat},
            5: {"codex": scores(5, 0.3, ids[:3]), "gemma": flat},
        }
    else:
        history = {r: {a: scores(1, 0.001) for a in ("codex", "gemma")} for r in range(1, 6)}
    new, old = _gates(storage, history, labels)
    assert json.dumps(new.series) == json.dumps(old.series)  # JSON: NaN (a constant round's rho) equals itself
    assert (new.passed, new.reason) == (old.passed, old.reason)
    if case == "ties_and_drift":
        assert len({s for sc in history[3].values() for s in sc.values()}) < 150  # 800 scores, many tied
        assert 0 < new.series["codex"]["churn"][-1] < 1 and 0.5 < new.series["codex"]["rho"][-1] < 0.99
    elif case == "half_way_k":
        assert new.series["codex"]["ap"][0] is not None and len(new.series["codex"]["churn"]) == 4
    elif case == "tiny_and_constant_rounds":
        assert new.series["codex"]["rho"][:3] == [None, None, 1.0]  # 2 works, then 2 in common, then none
        assert math.isnan(new.series["gemma"]["rho"][1])  # round 3 constant against round 2
    elif case == "still_with_ties":
        assert new.passed and new.reason == "passed"


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


def test_machine_scores_rounds_store_and_gate_what_the_dict_code_did(storage):
    """On the real code path: four machine_scores rounds whose teacher labels move between rounds (flipped
    codex labels outside the holdout retrain the arms; flipped gemma labels on the holdout move its AP). After each
    round the gate in the metadata is the gate the dict code (rounds_before) computes from the stored rounds and
    the labels; the holdout scores, batch by batch, are the scores the dict code wrote, ties included."""
    frame = write_inputs(storage)
    titles = {r["id"]: r["title_text"] for r in frame}
    for round_no in range(1, 5):
        md = run_student(storage, machine_scores).asset_materializations_for_node("machine_scores")[0].metadata
        assert md["rounds_run"].value == round_no and md["new_round"].value is True
        held = before.frozen_holdout(storage)
        assert md["frozen_holdout_works"].value == len(held) > 40
        inputs = rounds.load_arm_inputs(storage, "check")
        old = before.maturity_gate(before.round_history(storage), before.holdout_labels(inputs.labels, held))
        assert md["gate_series"].value == old.series and md["maturity_gate_reason"].value == old.reason
        assert len(old.series["codex"]["ap"]) == round_no and old.series["gemma"]["ap"][0] is not None
        free = sorted(w for w in titles if w not in held)[round_no * 20 : round_no * 20 + 20]
        later = {"created_at": dt.datetime(2026, 12, round_no)}
        codex = labels(storage, "codex") + [{**student_label("codex", w, titles[w], flip=True), **later} for w in free]
        gemma = labels(storage, "gemma") + [
            {**student_label("gemma", w, titles[w], flip=True), **later} for w in sorted(held)[round_no::7]
        ]
        write_labels(storage, "codex", codex)
        write_labels(storage, "gemma", gemma)
    assert old.series["codex"]["churn"] != [0.0] * 3 and min(old.series["codex"]["rho"]) < 1.0  # the rounds moved
    n, distinct = sql(storage, "SELECT count(*), count(DISTINCT score) FROM machine_round_scores WHERE round = 4")[0]
    assert n == 2 * len(held) and distinct < 0.7 * n  # few distinct titles: many scores are tied

    inputs = rounds.load_arm_inputs(storage, "check")
    bundle = rounds.fit_arms(inputs.train, {w: info["text"] for w, info in inputs.frame_info.items()})
    assert rounds.store_holdout_scores(storage, bundle, 98, batch_size=25) == 2 * len(held)
    assert rounds.store_holdout_scores(storage, bundle, 98, batch_size=25) == 2 * len(held)  # replaces its rows
    assert before.store_holdout_scores(storage, bundle, held, 99) == 2 * len(held)
    got, want = (
        sql(storage, f"SELECT arm, work_id, score FROM machine_round_scores WHERE round = {r} ORDER BY arm, work_id")
        for r in (98, 99)
    )
    assert got == want and len(got) == 2 * len(held)


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
