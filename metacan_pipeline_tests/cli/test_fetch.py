"""Tests of ``metacan fetch``: the harvest archives every route, and the frame reads the archive."""

import json

import dagster as dg
import duckdb
from typer.testing import CliRunner

from metacan_pipeline.cli import app
from metacan_pipeline.definitions import build_resources, materialize_in_process
from metacan_pipeline_tests.builders.openalex import LoopbackOpenAlex


def test_fetch_archives_routes_and_the_frame_reads_the_archive(tmp_path, openalex_dir):
    nserc = json.loads((openalex_dir / "choxos__MetaCan__funder_NSERC_F4320334593.json").read_text())["payload"][
        "results"
    ][0]
    lme4 = json.loads((openalex_dir / "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json").read_text())[
        "payload"
    ]["results"][0]

    def routes(path, flt):
        if path == "/funders":
            return [nserc]
        if path == "/works" and flt.startswith("funders.id:F4320334593"):
            return [lme4]
        return []

    server = LoopbackOpenAlex(lambda path, q: routes(path, q.get("filter", "")))
    hits = server.hits
    out = tmp_path / "archive"
    base = server.base_url
    try:
        res = CliRunner().invoke(app, ["fetch", "--out", str(out), "--base-url", base, "--api-key-env", ""])
        assert res.exit_code == 0, res.output
        assert "funders: 1 Canadian" in res.output and "funders.id:F4320334593: 1 works" in res.output
        n_hits = len(hits)
        again = CliRunner().invoke(app, ["fetch", "--out", str(out), "--base-url", base, "--api-key-env", ""])
        assert again.exit_code == 0 and len(hits) == n_hits and "0 calls made" in again.output
        budget = CliRunner().invoke(
            app, ["fetch", "--out", str(tmp_path / "b"), "--base-url", base, "--api-key-env", "", "--max-calls", "2"]
        )
        assert budget.exit_code == 3 and "resume later at" in budget.output
    finally:
        server.shutdown()
    resources = build_resources(str(tmp_path / "data"), str(out / "pages"))
    assert materialize_in_process(dg.DagsterInstance.ephemeral(), resources, through="frame").success
    con = duckdb.connect(str(tmp_path / "data" / "metacan.duckdb"), read_only=True)
    assert con.execute("SELECT id, ca_fund FROM frame").fetchall() == [("W1951724000", True)]
