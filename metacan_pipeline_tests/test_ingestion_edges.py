"""Edge cases of frame ingestion found by trying to break it: each test failed before its fix.

Inputs are built in ``tmp_path`` from real OpenAlex work records (../shared/data/openalex), in the
snapshot layout where it matters, as in ``test_bad_input``.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json

import dagster as dg
import duckdb
import pytest

from metacan_pipeline.definitions import all_partitions_run_tags, build_resources, defs, materialize_in_process
from metacan_pipeline.frame.merge import removed_work_ids
from metacan_pipeline.openalex.staging import ReadStats, read_work_batches
from metacan_pipeline.openalex.windows import Window, next_window

from .test_bad_input import _copy_funders, _is_canadian, _write_part, real_works  # noqa: F401 (a fixture)


def _failure_messages(result) -> list[str]:
    return [e.event_specific_data.error.message for e in result.all_events if e.is_step_failure]


def _ca(works: dict[str, dict]) -> list[str]:
    return sorted(k for k, w in works.items() if _is_canadian(w))


def test_an_empty_input_folder_fails_the_inventory_naming_the_folder(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    instance = dg.DagsterInstance.ephemeral()
    result = materialize_in_process(instance, build_resources(str(tmp_path / "data"), str(inp)), through="frame")
    assert not result.success
    [msg] = _failure_messages(result)
    assert "no OpenAlex input files" in msg and str(inp) in msg and "METACAN_OPENALEX_DIR" in msg
    # no materialization of the inventory: the sensor does not fire, no partition key is removed
    assert instance.get_latest_materialization_event(dg.AssetKey("openalex_inventory")) is None


@pytest.mark.parametrize("change", ["rewritten", "gone"])
def test_a_file_changed_after_the_inventory_is_not_built_under_its_old_key(tmp_path, openalex_dir, real_works, change):
    """The inventory lists a part; before frame_build reads it, it is rewritten (other works, other
    size) or removed. The build must not record the new content under the old size and mtime (a part
    that would never be read again if the old file came back with its old mtime, as ``aws s3 sync``
    restores it) and must say what to do; a frame_refresh + frame_build then picks the file up."""
    ca = _ca(real_works)
    inp, data = tmp_path / "in", tmp_path / "data"
    _copy_funders(openalex_dir, inp)
    _write_part(inp, "2025-01-01", 0, [real_works[k] for k in ca[:2]])
    changed = _write_part(inp, "2025-01-01", 1, [real_works[k] for k in ca[2:4]])
    instance, resources = dg.DagsterInstance.ephemeral(), build_resources(str(data), str(inp))
    assert defs.resolve_job_def("frame_refresh").execute_in_process(instance=instance, resources=resources).success
    if change == "rewritten":
        _write_part(inp, "2025-01-01", 1, [real_works[k] for k in ca[4:7]])
    else:
        (inp / changed).unlink()
    build = defs.resolve_job_def("frame_build").execute_in_process(
        instance=instance, resources=resources, raise_on_error=False, tags=all_partitions_run_tags(instance)
    )
    assert not build.success
    [msg] = _failure_messages(build)
    assert changed in msg and "changed since openalex_inventory" in msg and "frame_refresh" in msg
    assert not list((data / "warehouse" / "frame_parts").glob("updated_date=2025-01-01/*/manifest.json"))[
        1:
    ]  # only the unchanged part
    again = materialize_in_process(instance, resources, through="frame")
    assert again.success
    with duckdb.connect(str(data / "metacan.duckdb"), read_only=True) as con:
        frame_ids = {r[0] for r in con.execute("SELECT id FROM frame").fetchall()}
    assert frame_ids == set(ca[:2]) | (set(ca[4:7]) if change == "rewritten" else set())


@pytest.mark.parametrize("name", ["part_000.gz", "works.jsonl.gz", "page.json.gz"])
def test_an_empty_gz_file_is_quarantined_not_read_as_no_records(tmp_path, name):
    """A 0-byte ``.gz`` is no gzip stream (an empty one is 20 bytes): an interrupted download, whose
    works would otherwise vanish without a trace when no manifest covers the file."""
    path = tmp_path / "data" / "works" / "updated_date=2025-01-01" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    stats = ReadStats()
    assert [
        b
        for b in read_work_batches(path, name, {"institution": [], "funder": [], "source": []}, stats)
        if b is not None
    ] == []
    [q] = stats.quarantine
    assert q["source_file"] == name and "empty file" in q["reason"] and "re-download" in q["reason"]
    assert stats.counts["file_errors"] == 1  # the file, not a record: not counted as a record read
    # a real gzip of nothing is still read quietly as an empty part
    path.write_bytes(gzip.compress(b""))
    stats = ReadStats()
    assert [
        b
        for b in read_work_batches(path, name, {"institution": [], "funder": [], "source": []}, stats)
        if b is not None
    ] == []
    assert stats.quarantine == []


@pytest.mark.parametrize("header", ["id,merge_into_id,merge_date", "date,old,new", None])
def test_a_merged_ids_file_with_another_header_fails_naming_the_file(tmp_path, header):
    """read_csv with explicit columns renames by position: a file whose columns are in another order
    removed the merge targets (W2) instead of the merged ids (W1), and a file without header lost its
    first merge. The header must be the snapshot's, or the frame fails naming the file."""
    f = tmp_path / "data" / "merged_ids" / "works" / "2025-01-01.csv.gz"
    f.parent.mkdir(parents=True)
    row = {"merge_date": "2025-01-01", "id": "W1", "merge_into_id": "W2"}
    cols = (header or "merge_date,id,merge_into_id").split(",")
    body = "".join(
        f"{','.join(row.get(c, v) for c, v in zip(cols, ('2025-01-01', 'W1', 'W2'), strict=False))}\n" for _ in range(1)
    )
    f.write_bytes(gzip.compress(((header + "\n") if header else "").encode() + body.encode()))
    with pytest.raises(dg.Failure) as err:
        removed_work_ids(tmp_path)
    assert "2025-01-01.csv.gz" in err.value.description and "merge_date,id,merge_into_id" in err.value.description
    f.write_bytes(
        gzip.compress(b"merge_date,id,merge_into_id\n2025-01-01,https://openalex.org/W1,W2\n2025-01-02,W3,\n")
    )
    assert removed_work_ids(tmp_path) == ({"W1": "W2", "W3": ""}, ["data/merged_ids/works/2025-01-01.csv.gz"])


def test_an_api_page_gzipped_as_a_snapshot_part_is_read_not_lost(tmp_path, real_works):
    """``{meta, results}`` on one line, gzip-compressed and named ``part_000.gz``: each result is a
    work (before, the whole page was one 'missing id' quarantine row and its works were lost)."""
    ids = _ca(real_works)[:2]
    path = tmp_path / "data" / "works" / "updated_date=2025-01-01" / "part_000.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(
        gzip.compress(json.dumps({"meta": {"count": 2}, "results": [real_works[k] for k in ids]}).encode())
    )
    stats = ReadStats()
    batches = [
        b for b in read_work_batches(path, "p", {"institution": [], "funder": [], "source": []}, stats) if b is not None
    ]
    assert [r for b in batches for r in b.index.column("id").to_pylist()] == ids
    assert stats.quarantine == [] and stats.counts["W"] == 2
    assert [r["source_locator"] for b in batches for r in b.candidates] == [
        "record 1.results[0]",
        "record 1.results[1]",
    ]


def test_an_api_refresh_window_cannot_end_after_today(tmp_path):
    """A window ending in the future would be marked complete with that end; every later default window
    starts at it (from > today) and fails, and the works updated in between are never harvested."""
    today = dt.date(2026, 11, 30)
    with pytest.raises(ValueError, match="to_updated_date 2026-12-31 is after today"):
        next_window(tmp_path, today, "2026-11-25", "2026-12-31")
    assert next_window(tmp_path, today, "2026-11-25", "2026-11-30")[0] == Window("2026-11-25", "2026-11-30")


def test_the_inventory_lists_unsupported_files_and_the_quarantine_names_them(small_input):
    """An unsupported file is an inventory row (partition ``files``), a warning and a quarantine row,
    never a part to build."""
    from metacan_pipeline.frame.merge import UNSUPPORTED_REASON, quarantine_table
    from metacan_pipeline.frame.parts import part_jobs
    from metacan_pipeline.openalex.inventory import take_inventory
    from metacan_pipeline.tables.frame import QUARANTINE_SCHEMA

    (small_input / "x.json.bz2").write_bytes(b"BZh9")
    inv = take_inventory(small_input)
    rows = inv.table_rows()
    unsupported = [r for r in rows if r["manifest_status"] == "unsupported"]
    assert [(r["source_file"], r["partition_key"], r["bytes"]) for r in unsupported] == [("x.json.bz2", "files", 4)]
    assert any(w.startswith("not read: x.json.bz2 (unsupported file type") for w in inv.warnings())
    jobs = part_jobs(rows, lambda f: small_input / f)
    assert sorted(j.source_file for j in jobs) == sorted(r["source_file"] for r in inv.rows)
    assert all(j.manifest_status == "no_manifest" for j in jobs)  # loose files: no snapshot manifest covers them
    q = quarantine_table(QUARANTINE_SCHEMA.empty_table(), rows).to_pylist()
    assert q == [
        {"source_file": "x.json.bz2", "locator": "file", "line": None, "excerpt": "", "reason": UNSUPPORTED_REASON}
    ]


def test_the_build_manifest_has_one_row_per_part_by_file_with_its_admitted_count():
    from metacan_pipeline.frame.merge import build_manifest_table

    t = build_manifest_table([{"source_file": "b.json"}, {"source_file": "a.json"}], {"b.json": 3})
    assert [(r["source_file"], r["admitted"]) for r in t.to_pylist()] == [("a.json", 0), ("b.json", 3)]
