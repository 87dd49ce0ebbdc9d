"""Tests of metacan_pipeline.audit.assets: audit_protocol and audit_sample materialized with Dagster on a small store.

The store is written with ``storage.write_table``: 40 frame works built from a real OpenAlex record (the choxos
Canadian-funders file in ../shared/data), with the predictions, thresholds, heads, training set, sample design and
sample-teacher labels a student run would leave. A real student run (``builders.student.write_inputs`` + ``run_student``)
takes about 40 s on this machine, so these tables are written by hand with the columns the audit reads.
"""

from __future__ import annotations

import dagster as dg
import pyarrow as pa
import pytest

from metacan_pipeline.audit.assets import audit_protocol, audit_sample
from metacan_pipeline.audit.checks import audit_sample_partitions_frame
from metacan_pipeline.audit.protocol.locked import load_instructions
from metacan_pipeline.student.roles import CENSUS, SAMPLE
from metacan_pipeline.tables.audit import AUDIT_SAMPLE_SCHEMA
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline.tables.sampling import DESIGN_SCHEMA
from metacan_pipeline.tables.student import HEADS_SCHEMA, PRED_SCHEMA, THRESHOLDS_SCHEMA, TRAINING_SET_SCHEMA
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.vocab import BINARY_TARGETS, CATEGORIES
from metacan_pipeline_tests.builders.common import check_evaluation, root_error, sql
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.student import prediction_row
from metacan_pipeline_tests.builders.teachers import label_row

MV = "metacan-v0-hybrid-0a1b2c3d4e5f"
BUILD = "frame-5e6f7a8b9c0d"
N = 40
GATED = {"metaresearch": 0.5, "bibliometrics": 0.6}
#: Small sizes, so that the draw is not a census: negative_far takes max(3, round(0.25 x 18)) = 4 of 18.
CONFIG = {"stratum_fractions": {"negative_far": 0.25}, "stratum_min_sizes": {"negative_far": 3, "consensus": 1}}


def _wid(i: int) -> str:
    return f"W{8000 + i}"


def write_world(storage, openalex_dir) -> None:
    """Works 0-3 consensus on metaresearch, 4-7 candidate only on bibliometrics (the census teacher's label), 8-11
    near the metaresearch threshold, the rest far; French every tenth from 3, no abstract every fourth from 1, only
    the about_ca route every tenth from 7. Works 0 and 20 trained the sample teacher's heads, 21 calibrated them
    (a sample-teacher label in the teachers' sample), 22 trained only the census teacher's heads."""
    base = real_frame_row(openalex_dir)
    frame, preds = [], []
    for i in range(N):
        frame.append(
            {
                **base,
                "id": _wid(i),
                "language": "fr" if i % 10 == 3 else "en",
                "has_abstract": i % 4 != 1,
                "route_key": "about_ca" if i % 10 == 7 else "ca_aff",
                "frame_build_id": BUILD,
            }
        )
        p = {**prediction_row(_wid(i)), "model_version": MV}
        scores = [0.1] * len(CATEGORIES)
        if i < 4:
            scores[0], p["consensus_categories"], p["candidate_categories"] = 0.9, ["metaresearch"], ["metaresearch"]
        elif i < 8:
            scores[3], p["candidate_categories"] = 0.3, ["bibliometrics"]
        elif i < 12:
            scores[0] = 0.3  # >= (1 - 0.5) x 0.5
        p["category_scores_codex"] = scores
        preds.append(p)
    thresholds = [
        {"model_version": MV, "target": t, "gate_passed": t in GATED, "gate_reason": "passed" if t in GATED else
         "codex positives 2 < 20", "rate": 0.1, "n": N, "k": 4 if t in GATED else None,
         "threshold": GATED.get(t), "boundary_id": _wid(3) if t in GATED else None}
        for t in BINARY_TARGETS
    ]  # fmt: skip
    heads = [{"model_version": MV, "teacher": t, "target": h} for t in (SAMPLE, CENSUS) for h in BINARY_TARGETS]
    training = [(SAMPLE, 0), (SAMPLE, 20), (CENSUS, 0), (CENSUS, 22)]
    labels = [label_row(_wid(i), SAMPLE, []) for i in (0, 21, 30)]
    labels[-1]["status"] = "failed"  # a failed label calibrates nothing
    tables = {
        "frame": (frame, FRAME_SCHEMA),
        "predictions": (preds, PRED_SCHEMA),
        "prediction_thresholds": (thresholds, THRESHOLDS_SCHEMA),
        "student_heads": (heads, HEADS_SCHEMA),
        "student_training_set": (
            [{"model_version": MV, "teacher": t, "work_id": _wid(i), "venue_key": "v"} for t, i in training],
            TRAINING_SET_SCHEMA,
        ),
        "sample_design": ([{"id": _wid(i), "in_sample": i in (0, 21, 30)} for i in range(N)], DESIGN_SCHEMA),
        f"direct_labels_{SAMPLE}": ([{**r, "source": "teacher_call"} for r in labels], LABELS_SCHEMA),
    }
    for name, (rows, schema) in tables.items():
        storage.write_table(name, pa.Table.from_pylist(rows, schema=schema))


def run(storage, config: dict | None = None, instance=None, raise_on_error: bool = True):
    return dg.materialize(
        [audit_protocol, audit_sample, audit_sample_partitions_frame],
        resources={"storage": storage},
        run_config={"ops": {"audit_protocol": {"config": {**CONFIG, **(config or {})}}}},
        instance=instance or dg.DagsterInstance.ephemeral(),
        raise_on_error=raise_on_error,
    )


def meta(result, asset: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(asset)[0].metadata.items()}


@pytest.fixture()
def world(storage, openalex_dir):
    write_world(storage, openalex_dir)
    return storage


def test_protocol_and_sample_on_a_small_store(world):
    storage = world
    result = run(storage)
    assert check_evaluation(result, "audit_sample_partitions_frame").passed
    pm, sm = meta(result, "audit_protocol"), meta(result, "audit_sample")
    pid = pm["protocol_id"]
    [(stored_id, version, rule, heads, inst, inst_sha)] = sql(
        storage,
        "SELECT protocol_id, classifier_version, decision_rule, heads, instructions_version, instructions_sha256 "
        "FROM audit_protocols",
    )
    # the default heads: the category heads with decisions, metaresearch first
    assert (stored_id, version, rule, heads) == (pid, MV, "consensus", ["metaresearch", "bibliometrics"])
    assert (inst, inst_sha) == ("v1", load_instructions("v1").sha256) and pm["created"] is True
    assert pm["frame_build_id"] == BUILD and sm["protocol_id"] == pid and sm["already_drawn"] is False
    rows = {r["id"]: r for r in storage.read_table("audit_sample").to_pylist()}
    assert len(rows) == N and {r["protocol_id"] for r in rows.values()} == {pid}
    sizes = {r["stratum"]: (r["stratum_size"], r["stratum_sample_size"]) for r in rows.values()}
    assert sizes == {
        "trained_on": (3, 3),  # works 0, 20 (training) and 21 (calibration); 22 trained the census heads only
        "consensus": (3, 1),
        "candidate_only": (4, 4),
        "negative_near": (4, 4),
        "french": (3, 3),  # 13, 23, 33
        "no_abstract": (4, 4),  # 17, 25, 29, 37
        "about_ca_only": (1, 1),  # 27
        "negative_far": (18, 4),
    }
    assert {w for w, r in rows.items() if r["trained_on"]} == {_wid(0), _wid(20), _wid(21)}
    assert rows[_wid(22)]["stratum"] == "negative_far" and rows[_wid(1)]["selection_probability"] == 1 / 3
    far = [r for r in rows.values() if r["stratum"] == "negative_far"]
    assert {r["selection_probability"] for r in far} == {4 / 18} and {r["design_weight"] for r in far} == {4.5}
    assert sum(r["in_sample"] for r in far) == 4 and sm["sample_size"] == 24
    assert rows[_wid(13)]["language"] == "fr" and rows[_wid(17)]["has_abstract"] is False
    assert rows[_wid(27)]["route_key"] == "about_ca"
    assert sm["sample_teacher_training_works"] == 2 and sm["calibration_works_not_in_training"] == 1
    assert sm["census_teacher_training_works_not_counted"] == 2
    assert "Expected coded positives" in sm["power_note"] and "| negative_far | 18 | 4 |" in sm["power_note"]


def test_a_second_materialization_adds_no_protocol_and_keeps_the_sample_a_changed_threshold_adds_one(world):
    storage = world
    instance = dg.DagsterInstance.ephemeral()
    first = run(storage, instance=instance)
    pid = meta(first, "audit_protocol")["protocol_id"]
    before = storage.read_table("audit_sample").to_pylist()
    again = run(storage, instance=instance)
    assert meta(again, "audit_protocol")["protocol_id"] == pid and meta(again, "audit_protocol")["created"] is False
    assert meta(again, "audit_sample")["already_drawn"] is True
    assert sql(storage, "SELECT count(*) FROM audit_protocols") == [(1,)]
    assert storage.read_table("audit_sample").to_pylist() == before
    stricter = run(storage, {"precision_lower": 0.85}, instance=instance)
    new_id = meta(stricter, "audit_protocol")["protocol_id"]
    assert new_id != pid and check_evaluation(stricter, "audit_sample_partitions_frame").passed
    assert sql(storage, "SELECT protocol_id FROM audit_protocols ORDER BY created_at") == [(pid,), (new_id,)]
    assert sql(storage, "SELECT protocol_id, count(*) FROM audit_sample GROUP BY 1 ORDER BY 2, 1") == sorted(
        [(pid, N), (new_id, N)]
    )
    # the same salt and design: the new protocol draws the same works
    drawn = sql(storage, "SELECT protocol_id, list(id ORDER BY id) FROM audit_sample WHERE in_sample GROUP BY 1")
    assert len({tuple(ids) for _, ids in drawn}) == 1
    runs = sql(storage, "SELECT protocol_id, created FROM audit_protocol_runs ORDER BY materialized_at")
    assert runs == [(pid, True), (pid, False), (new_id, True)]
    # a stored sample is never redrawn: one that lost a row stays broken, and the blocking check says so
    kept = [
        r for r in storage.read_table("audit_sample").to_pylist() if (r["protocol_id"], r["id"]) != (new_id, _wid(5))
    ]
    storage.write_table("audit_sample", pa.Table.from_pylist(kept, schema=AUDIT_SAMPLE_SCHEMA))
    broken = run(storage, {"precision_lower": 0.85}, instance=instance, raise_on_error=False)
    check = check_evaluation(broken, "audit_sample_partitions_frame")
    assert not check.passed and check.metadata["frame_works_missing"].value == 1
    assert check.metadata["protocol_id"].value == new_id


def test_excluded_trained_works_and_a_stale_protocol_is_refused(world):
    storage = world
    result = run(storage, {"trained_works": "exclude"})
    assert check_evaluation(result, "audit_sample_partitions_frame").passed
    rows = [r for r in storage.read_table("audit_sample").to_pylist() if r["trained_on"]]
    assert {(r["stratum"], r["selection_probability"], r["design_weight"], r["in_sample"]) for r in rows} == {
        ("excluded:trained_on", 0.0, None, False)
    }
    # the classifier moved on (student and predictions re-run) but no new protocol was locked: no sample is drawn
    for name, schema in (
        ("predictions", PRED_SCHEMA),
        ("prediction_thresholds", THRESHOLDS_SCHEMA),
        ("student_heads", HEADS_SCHEMA),
    ):
        rows = [{**r, "model_version": "metacan-v0-hybrid-ffffffffffff"} for r in storage.read_table(name).to_pylist()]
        storage.write_table(name, pa.Table.from_pylist(rows, schema=schema))
    stale = dg.materialize(
        [audit_sample], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral(), raise_on_error=False
    )
    expected = (
        f"protocol {meta(result, 'audit_protocol')['protocol_id']} is of {MV} on frame build {BUILD}, the warehouse "
        f"holds metacan-v0-hybrid-ffffffffffff on {BUILD}: materialize audit_protocol first"
    )
    assert not stale.success and expected in root_error(stale)
