"""Tests of ``metacan lineage`` on a small database (the whole pipeline's lineage: integration/test_pipeline.py)."""

import json

import duckdb
from typer.testing import CliRunner

from metacan_pipeline.cli import app


def test_lineage_prints_each_work_with_its_page_and_names_the_works_not_in_the_frame(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    con = duckdb.connect(str(data / "metacan.duckdb"))
    con.execute("CREATE TABLE work_lineage AS SELECT 'W1' AS id, 'frame-1' AS frame_build_id")
    con.execute(
        "CREATE TABLE page_manifest AS SELECT 'W1' AS id, 'works/v1/W1.html' AS page_path, "
        "TIMESTAMP '2026-01-02 03:04:05' AS rendered_at, 'run-9' AS run_id"
    )
    con.close()
    result = CliRunner().invoke(app, ["lineage", "W1", "W2", "--json", "--data-dir", str(data)])
    assert result.exit_code == 1  # W2 is not in the frame
    first = json.loads(result.output.splitlines()[0])
    assert first == {
        "id": "W1",
        "frame_build_id": "frame-1",
        "page_path": "works/v1/W1.html",
        "rendered_at": "2026-01-02 03:04:05",
        "page_run_id": "run-9",
    }
    assert f"W2: not in the frame of {data / 'metacan.duckdb'}" in result.output


def test_lineage_before_work_records_says_what_to_materialize(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    duckdb.connect(str(data / "metacan.duckdb")).close()
    result = CliRunner().invoke(app, ["lineage", "W1", "--data-dir", str(data)])
    assert result.exit_code == 1 and "has no work_lineage table yet: materialize work_records" in result.output
    result = CliRunner().invoke(app, ["lineage", "X1", "--data-dir", str(data)])
    assert result.exit_code == 2 and "not a work id or DOI: 'X1'" in result.output
