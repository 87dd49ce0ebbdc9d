"""Tests of metacan_pipeline.audit.coding.loading and the asset coding_tasks: the current protocol's audit sample loaded
into the coding store (real DuckDB views over the warehouse Parquet, a real SQLite coding store, Dagster's in-process
executor, typer's CliRunner for ``metacan coding load-tasks``)."""

from __future__ import annotations

import re
import sqlite3

import dagster as dg
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from metacan_pipeline import settings
from metacan_pipeline.audit.assets import coding_tasks
from metacan_pipeline.audit.coding.evidence import EVIDENCE_FIELDS
from metacan_pipeline.audit.coding.loading import load_coding_tasks, queue_position
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.cli import app
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline_tests.builders.audit import lock_audit_sample
from metacan_pipeline_tests.builders.frame import real_frame_row

N = 12


@pytest.fixture()
def world(storage, openalex_dir):
    """12 frame works of a real record; the protocol drew W9000-W9005."""
    base = real_frame_row(openalex_dir)
    frame = [
        {
            **base,
            "id": f"W{9000 + i}",
            "title_text": f"Peer review in Canadian journals, part {i}",
            "language": "fr" if i % 4 == 1 else "en",
            "keywords": ["peer review", f"kw{i}"],
        }
        for i in range(N)
    ]
    storage.write_table("frame", pa.Table.from_pylist(frame, schema=FRAME_SCHEMA))
    pid = lock_audit_sample(storage, frame, [f"W{9000 + i}" for i in range(6)])
    return storage, frame, pid


def materialize(storage):
    result = dg.materialize([coding_tasks], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    return {k: v.value for k, v in result.asset_materializations_for_node("coding_tasks")[0].metadata.items()}


def test_the_asset_loads_the_drawn_works_with_evidence_only_in_a_hashed_order(world):
    storage, frame, pid = world
    meta = materialize(storage)
    assert (meta["protocol_id"], meta["sample_works"], meta["added"], meta["missing"]) == (pid, 6, 6, 0)
    assert meta["dagster/row_count"] == 6
    with CodingStore(settings.coding_store_path(storage.data_dir)) as store:
        tasks = store.tasks(pid)
        assert store.serving_protocol()["protocol_id"] == pid
        assert store.serving_protocol()["instructions_version"] == "v1"
    assert sorted(t["id"] for t in tasks) == [f"W{9000 + i}" for i in range(6)]  # drawn works only
    assert [t["position"] for t in tasks] == sorted(queue_position(pid, t["id"]) for t in tasks)
    first = next(t for t in tasks if t["id"] == "W9001")
    ev = first["evidence"]
    assert set(ev) == set(EVIDENCE_FIELDS) | {"full_text_url"}  # the allow-list, nothing else
    assert ev["title"] == "Peer review in Canadian journals, part 1" and ev["language"] == "fr"
    assert ev["keywords"] == ["peer review", "kw1"] and ev["full_text_url"].startswith("https://doi.org/10.")
    # the stored rows carry no route, stratum, weight or machine column at all
    with sqlite3.connect(settings.coding_store_path(storage.data_dir)) as con:
        stored = " ".join(r[0] for r in con.execute("SELECT evidence_json FROM coding_tasks"))
    for word in ("ca_aff", "route", "stratum", "design_weight", "selection_probability", "in_sampling_frame"):
        assert word not in stored, word
    assert all("abstract" not in t["evidence"] for t in tasks)  # fetched live by the page, never stored


def test_a_rerun_adds_only_new_works_and_never_touches_an_answer(world):
    storage, frame, pid = world
    materialize(storage)
    path = settings.coding_store_path(storage.data_dir)
    with CodingStore(path) as store:
        store.add_coder("ann")
        task = store.next_task(pid, "ann")
        answer = {"categories": [], "study_design": "observational", "genre": "empirical"}
        store.submit(pid, task["id"], "ann", {**answer, "about_ca_system": False, "about_ca_topic": True})
    again = materialize(storage)
    assert (again["added"], again["unchanged"], again["evidence_changed"]) == (0, 6, 0)
    # the sample now holds two more drawn works (as a larger draw of the same protocol would): only they are added
    lock_audit_sample(storage, frame, [f"W{9000 + i}" for i in range(8)], run_id="run-2")
    grown = materialize(storage)
    assert (grown["added"], grown["unchanged"]) == (2, 6)
    with CodingStore(path) as store:
        assert len(store.tasks(pid)) == 8
        assert [(a["id"], a["coder"]) for a in store.latest_answers(pid)] == [(task["id"], "ann")]
        loads = store._con.execute("SELECT added, unchanged, source FROM coding_loads ORDER BY rowid").fetchall()
    assert [tuple(r)[:2] for r in loads] == [(6, 0), (0, 6), (2, 6)]
    assert all(r[2].startswith("asset:") for r in loads)


def test_a_sampled_work_the_frame_lost_is_counted_missing_and_its_task_stays(world):
    storage, frame, pid = world
    materialize(storage)
    kept = [f for f in frame if f["id"] != "W9002"]
    storage.write_table("frame", pa.Table.from_pylist(kept, schema=FRAME_SCHEMA))
    meta = materialize(storage)
    assert meta["missing"] == 1 and meta["missing_ids"] == "W9002" and meta["unchanged"] == 5
    with CodingStore(settings.coding_store_path(storage.data_dir)) as store:
        assert "W9002" in {t["id"] for t in store.tasks(pid)}


def test_the_cli_loads_through_the_same_code_and_says_what_is_missing(world):
    storage, frame, pid = world
    runner = CliRunner()
    first = runner.invoke(app, ["coding", "load-tasks", "--data-dir", storage.data_dir])
    assert first.exit_code == 0, first.output
    assert f"{pid}: 6 sampled works; 6 tasks added, 0 unchanged" in first.output
    second = runner.invoke(app, ["coding", "load-tasks", "--data-dir", storage.data_dir])
    assert "0 tasks added, 6 unchanged" in second.output
    with CodingStore(settings.coding_store_path(storage.data_dir)) as store:
        assert store.serving_protocol()["source"] == "cli"
        assert load_coding_tasks(storage, store, "test")["unchanged"] == 6


def test_loading_before_any_sample_names_the_asset_to_materialize(storage, tmp_path):
    out = CliRunner().invoke(app, ["coding", "load-tasks", "--data-dir", storage.data_dir])
    assert out.exit_code == 1 and "materialize audit_protocol" in out.output


def test_adjudicator_role_is_granted_and_revoked_from_the_cli(tmp_path):
    data = str(tmp_path / "data")
    runner = CliRunner()
    runner.invoke(app, ["coders", "add", "cy", "--data-dir", data])
    granted = runner.invoke(app, ["coders", "adjudicator", "cy", "--data-dir", data])
    assert granted.exit_code == 0 and "Coder cy is an adjudicator" in granted.output
    with CodingStore(settings.coding_store_path(data)) as store:
        assert store.has_role("cy") and store.coder_roles() == {"cy": ["adjudicator"]}
    listed = runner.invoke(app, ["coders", "list", "--data-dir", data])
    assert re.search(r"cy\s+added \S+\s+active\s+adjudicator", listed.output), listed.output
    revoked = runner.invoke(app, ["coders", "adjudicator", "cy", "--revoke", "--data-dir", data])
    assert revoked.exit_code == 0 and "no longer" in revoked.output
    unknown = runner.invoke(app, ["coders", "adjudicator", "nobody", "--data-dir", data])
    assert unknown.exit_code == 2 and "no coder named 'nobody'" in unknown.output
