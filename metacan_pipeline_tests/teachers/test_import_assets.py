"""Tests of the imported_labels asset (metacan_pipeline.teachers.assets; its sources in teachers.imports.sources)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline_tests.builders.common import metadata
from metacan_pipeline_tests.builders.teachers import GOOD_LABEL, materialize


def test_imported_labels_asset(tmp_path: Path, pilot_dir: Path):
    bad = tmp_path / "external.json"
    bad.write_text(
        json.dumps([{**GOOD_LABEL, "id": "W105148950"}, {**GOOD_LABEL, "id": "W108330266", "confidence": "certain"}])
    )
    config = {
        "pilot_dirs": [str(pilot_dir)],
        "files": [
            {
                "path": str(bad),
                "teacher": "ext",
                "model": "some-model",
                "prompt_version": "ext-v1",
                "record_view": "title_abstract",
                "source": "a test file",
            }
        ],
    }
    result = materialize(tmp_path, config)
    assert result.success
    md = metadata(result, "imported_labels")
    assert md["dagster/row_count"] == 1290 + 1928 + 3 * 750 + 2
    assert "| pilot_b / labelled | 1928 |" in md["rows_by_teacher_and_status"]
    assert "| ext / failed | 1 |" in md["rows_by_teacher_and_status"]
    assert (
        "confidence='certain' is not in the vocabulary" in md["invalid_records"]
        and "W108330266" in md["invalid_records"]
    )
    assert md["failed_this_run"] == 1 and "external.json" in md["files_imported_this_run"]
    table = MetacanStorage(data_dir=str(tmp_path / "data")).read_table("imported_labels").to_pylist()
    [failed] = [r for r in table if r["status"] == "failed"]
    assert failed["work_id"] == "W108330266" and "confidence='certain'" in failed["error"]

    again = materialize(tmp_path, config)
    md = metadata(again, "imported_labels")
    assert md["labelled_this_run"] == md["failed_this_run"] == 0 and md["files_imported_this_run"] == "_(none)_"
    assert "external.json" in md["files_already_imported"] and md["dagster/row_count"] == 1290 + 1928 + 3 * 750 + 2
    with MetacanStorage(data_dir=str(tmp_path / "data")).connect() as con:
        assert con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0] == 1290 + 1928 + 3 * 750 + 2
    # A run without sources still publishes every current imported label of the store.
    assert (
        metadata(materialize(tmp_path, {"pilot_dirs": []}), "imported_labels")["dagster/row_count"]
        == 1290 + 1928 + 3 * 750 + 2
    )


def test_missing_default_pilot_folder_is_skipped_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("METACAN_PILOT_DIR", str(tmp_path / "no-such-folder"))
    result = materialize(tmp_path)
    assert result.success
    md = metadata(result, "imported_labels")
    assert md["dagster/row_count"] == 0 and "no-such-folder" in md["notes"] and "not found" in md["notes"]
    assert metadata(result, "teacher_agreement")["note"].startswith("Nothing to compare: 0 teacher configuration(s)")
