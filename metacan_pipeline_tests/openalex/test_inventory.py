"""Tests of metacan_pipeline.openalex.inventory: the inventory of the input folder."""

from __future__ import annotations

import dagster as dg

from metacan_pipeline.definitions import build_resources, materialize_in_process
from metacan_pipeline_tests.builders.common import failure_messages


def test_an_empty_input_folder_fails_the_inventory_naming_the_folder(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    instance = dg.DagsterInstance.ephemeral()
    result = materialize_in_process(instance, build_resources(str(tmp_path / "data"), str(inp)), through="frame")
    assert not result.success
    [msg] = failure_messages(result)
    assert "no OpenAlex input files" in msg and str(inp) in msg and "METACAN_OPENALEX_DIR" in msg
    # no materialization of the inventory: the sensor does not fire, no partition key is removed
    assert instance.get_latest_materialization_event(dg.AssetKey("openalex_inventory")) is None


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
