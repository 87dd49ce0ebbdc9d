"""Tests of metacan_pipeline.publish.records: the published record, its schema and its card."""

import json

import pytest

from metacan_pipeline.publish.pages import environment, index_row, render_work
from metacan_pipeline.publish.records import (
    SCHEMA_PATH,
    RecordBatches,
    RecordInputError,
    build_record,
    classification_card,
    record_row,
    schema_violation,
    ship_violations,
)
from metacan_pipeline.tables.student import PRED_SCHEMA
from metacan_pipeline.vocab import CATEGORIES, GENRES, SCORE_ONLY_IMMATURE, STUDY_DESIGNS
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.site import CTX
from metacan_pipeline_tests.builders.student import machine_row, prediction_row
from metacan_pipeline_tests.builders.teachers import label_row


def test_schema_vocabularies_are_the_spec_vocabularies_and_it_rejects_what_may_not_ship(openalex_dir):
    schema = json.loads(SCHEMA_PATH.read_text())
    label = schema["properties"]["direct_labels"]["items"]["properties"]
    assert label["categories"]["items"]["enum"] == list(CATEGORIES)
    assert label["study_design"]["enum"][:-1] == list(STUDY_DESIGNS) and label["genre"]["enum"][:-1] == list(GENRES)
    pred = schema["properties"]["prediction"]["properties"]
    assert set(pred) == set(PRED_SCHEMA.names) - {"id", "gemma_label_status"}
    row = real_frame_row(openalex_dir)
    lineage = {
        "frame_build_id": "b",
        "frame_run_id": "r",
        "input_kind": "input_file",
        "source_file": "f.json",
        "source_locator": "payload.results[0]",
        "part_run_id": "r",
        "entity_list_versions": "funder=f",
        "lexicon_version": "l",
        "teacher_calls": [
            {
                "teacher": "gemma",
                "model": "m",
                "prompt_version": "v1",
                "prompt_sha": "s",
                "record_view": "title_only",
                "label_status": "labelled",
                "source": "teacher_call",
                "call_id": "c1",
                "request_hash": "h",
                "called_at": "2026-11-30T12:00:00Z",
                "run_id": "r",
                "archive": None,
            }
        ],
        "model_version": "metacan-v0-hybrid-000000000000",
        "student_run_id": "r",
        "machine_round": 1,
        "machine_scores_run_id": "r",
        "machine_validation_status": SCORE_ONLY_IMMATURE,
    }
    good = json.loads(
        json.dumps(
            build_record(
                row,
                [label_row(row["id"], "gemma", ["sts"])],
                prediction_row(row["id"]),
                machine_row(row["id"]),
                lineage,
            )
        )
    )
    assert schema_violation(good) is None
    assert schema_violation({**good, "prediction": None, "machine_scores": None}) is None  # a work nothing scored yet
    breaks = {
        "machine_scores": lambda r: r["machine_scores"].update(categories=["metaresearch"]),
        "ca_aff must be boolean": lambda r: r["routes"].update(ca_aff="yes"),
        "id must match pattern": lambda r: r.update(id="W1/../x"),
        "categories": lambda r: r["direct_labels"][0].update(categories=["not_a_category"]),
        "prediction_status": lambda r: r["prediction"].update(prediction_status="validated"),
        "category_scores_codex": lambda r: r["prediction"].update(category_scores_codex=[0.1] * 8),
        "validation_status": lambda r: r["machine_scores"].update(validation_status="mature"),
        "request_hash": lambda r: r["lineage"]["teacher_calls"][0].pop("request_hash"),
        "model_version must match pattern": lambda r: r["prediction"].update(model_version=".."),
    }
    for version in ("unscored", ".hidden", "-x", "x" * 129, "a/b"):  # what page_path refuses, the schema refuses
        assert "model_version must match pattern" in schema_violation(
            {**good, "prediction": {**good["prediction"], "model_version": version}}
        )
    for expected, breaker in breaks.items():
        bad = json.loads(json.dumps(good))
        breaker(bad)
        message = schema_violation(bad)
        assert message is not None and expected in message, (expected, message)


def test_ship_violations_and_card_precedence(openalex_dir):
    row = real_frame_row(openalex_dir)
    good = build_record(
        row, [label_row(row["id"], "gemma", [])], prediction_row(row["id"]), machine_row(row["id"]), None
    )
    assert ship_violations(good) == []
    assert classification_card(good)["kind"] == "direct"
    bad = json.loads(json.dumps(good))
    bad["machine_scores"]["categories"] = ["metaresearch"]
    bad["direct_labels"][0].update(status=None, categories=["sts"])
    bad["prediction"]["candidate_categories"] = ["sts"]
    bad["prediction"]["prediction_status"] = None
    assert len(ship_violations(bad)) == 3
    nothing = build_record(row, [], None, None, None)
    assert classification_card(nothing) == {"kind": "none"}
    html = render_work(environment(), nothing, None, CTX)
    assert "Not classified yet" in html and "absence is not a negative" in html.lower()
    # a rule label (out of the sampling frame, no model call) is a direct label: it comes before a candidate prediction
    rule = {**label_row(row["id"], "gemma", ["insufficient_payload"]), "source": "frame_rule", "call_id": None}
    candidate = {**prediction_row(row["id"]), "candidate_categories": ["sts"]}
    card = classification_card(build_record(row, [rule], candidate, machine_row(row["id"]), None))
    assert card["kind"] == "direct" and card["labels"][0]["source"] == "frame_rule"
    # scored, and no category called on either side: a machine prediction, never "not classified yet"
    scored = build_record(row, [], prediction_row(row["id"]), machine_row(row["id"]), None)
    assert classification_card(scored) == {
        "kind": "no_category",
        "categories": [],
        "model_version": "metacan-v0-hybrid-000000000000",
    }
    html = render_work(environment(), scored, None, CTX)
    assert "Machine prediction (no category)" in html and "Not classified yet" not in html
    assert (index_row(scored)["source"], index_row(scored)["mode"]) == ("classifier", None)


def test_record_batches_refuse_bad_and_repeated_ids_and_count_changes(openalex_dir):
    row = real_frame_row(openalex_dir)
    wid = row["id"]
    inputs = {"work": row, "labels": [label_row(wid, "gemma", ["sts"])], "pred": None, "machine": None, "lineage": None}
    first = record_row(inputs)
    assert json.loads(first["record_json"])["id"] == wid and len(first["record_hash"]) == 16
    unchanged = RecordBatches({wid: first["record_hash"]})
    assert unchanged.table([inputs]).num_rows == 1 and unchanged.changed == 0 and unchanged.preview == [first]
    assert RecordBatches({}).table([inputs]).num_rows == 1
    with pytest.raises(RecordInputError, match=f"work {wid} appears twice"):
        RecordBatches({}).table([inputs, inputs])
    with pytest.raises(RecordInputError, match="which is not"):
        RecordBatches({}).table([{**inputs, "work": {**row, "id": "../W1"}}])


@pytest.mark.parametrize(
    ("cores", "memory_gib", "workers"), [(1, 64, 1), (2, 64, 2), (4, 64, 4), (64, 64, 4), (4, 8, 3), (4, 2, 1)]
)
def test_record_workers_follow_the_cores_and_memory_and_stop_at_four(monkeypatch, cores, memory_gib, workers):
    """One record worker per core dask counts (CPU affinity and a container's CPU quota), at most four, and at most one
    per 2.5 GB of the memory distributed sees: each may hold 2 GB of DuckDB memory, so a 64-core host does not start
    64, and an 8 GB machine with 4 cores starts 3 (4 would be OOM-killed)."""
    import dask.system
    import distributed.system

    from metacan_pipeline.publish.record_build import record_workers

    monkeypatch.delenv("METACAN_RECORD_WORKERS", raising=False)
    monkeypatch.setattr(dask.system, "cpu_count", lambda: cores)
    monkeypatch.setattr(distributed.system, "MEMORY_LIMIT", memory_gib * 2**30)
    assert record_workers() == workers
    monkeypatch.setenv("METACAN_RECORD_WORKERS", "1")
    assert record_workers() == 1
    for bad in ("0", "65", "two", "-1"):
        monkeypatch.setenv("METACAN_RECORD_WORKERS", bad)
        with pytest.raises(ValueError, match=f"METACAN_RECORD_WORKERS='{bad}' must be a whole number from 1 to 64"):
            record_workers()


def test_the_ship_check_gives_the_same_answer_in_worker_processes_as_in_one(tmp_path, openalex_dir):
    """``check_records`` over a table of several files: two worker processes count the same records and violations,
    and show the first violations in record order, as one process does; a record with a NaN (json.dumps writes it,
    orjson refuses it) is still read."""
    import dagster as dg
    import pyarrow as pa

    from metacan_pipeline.publish.assets import work_records
    from metacan_pipeline.publish.record_check import SHOWN_VIOLATIONS, check_records
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.tables.publish import RECORDS_SCHEMA
    from metacan_pipeline_tests.builders.site import site_world

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=30)
    dg.materialize([work_records], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    rows = storage.read_table("work_records").to_pylist()
    assert check_records(storage, frozenset(), 2) == (30, 0, [])
    bad_ids = []
    for i in (4, 11, 12, 25):  # a category outside the vocabulary on four works of three files
        record = json.loads(rows[i]["record_json"])
        record["title"] = float("nan") if i == 25 else record["title"]  # the schema wants a string
        record["routes"]["ca_aff"] = "yes"
        rows[i]["record_json"] = json.dumps(record)
        bad_ids.append(record["id"])
    assert "NaN" in rows[25]["record_json"]
    files = [pa.Table.from_pylist(rows[k : k + 10], schema=RECORDS_SCHEMA) for k in (0, 10, 20)]
    storage.write_table("work_records", files)
    assert len(list(storage.table_dir("work_records").glob("*.parquet"))) == 3
    one, two = check_records(storage, frozenset(), 1), check_records(storage, frozenset(), 2)
    assert one == two
    checked, bad, shown = two
    assert (checked, bad) == (30, 4) and 4 <= len(shown) <= SHOWN_VIOLATIONS
    order = [next(k for k, w in enumerate(bad_ids) if w in v) for v in shown]  # which bad work each one names
    assert order == sorted(order) and set(order) == {0, 1, 2, 3}  # every bad work, in record order
