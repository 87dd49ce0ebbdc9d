"""Tests of metacan_pipeline.cli: the fetch and import-labels commands."""

import json

import dagster as dg
import duckdb
from typer.testing import CliRunner

from metacan_pipeline.cli import app
from metacan_pipeline.definitions import build_resources, materialize_in_process
from metacan_pipeline_tests.builders import LoopbackOpenAlex


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


def test_import_labels_refuses_a_registry_teachers_name(tmp_path):
    from typer.testing import CliRunner

    from metacan_pipeline.cli import app

    labels = tmp_path / "l.jsonl"
    labels.write_text(
        '{"id": "W1", "categories": [], "domain": null, "study_design": "observational", "genre": "empirical", '
        '"about_ca_system": false, "about_ca_topic": false, "confidence": "high", "reason": "x"}\n'
    )
    result = CliRunner().invoke(
        app,
        [
            "import-labels",
            str(labels),
            "--teacher",
            "gemma",
            "--model",
            "m",
            "--prompt-version",
            "p",
            "--source",
            "s",
            "--data-dir",
            str(tmp_path / "data"),
        ],
    )
    assert result.exit_code == 2 and "registry teacher's name" in result.output
    assert not (tmp_path / "data" / "metacan.duckdb").exists()


def test_llama_threads_come_from_the_environment_and_a_bad_value_stops_metacan_run_in_one_sentence(
    tmp_path, monkeypatch
):
    from metacan_pipeline import settings
    from metacan_pipeline.teachers.calling.server import EmbeddedLlamaServer

    monkeypatch.delenv(settings.LLAMA_THREADS_ENV, raising=False)
    assert EmbeddedLlamaServer().threads() == 2
    monkeypatch.setenv(settings.LLAMA_THREADS_ENV, "1")
    assert EmbeddedLlamaServer().threads() == 1 and EmbeddedLlamaServer(n_threads=3).threads() == 3
    assert build_resources(str(tmp_path / "data"))["llm_server"].threads() == 1
    for bad in ("0", "two", "-1", "257", "²", "٣"):
        monkeypatch.setenv(settings.LLAMA_THREADS_ENV, bad)
        # the definitions still load (the schedules and the other jobs stay); only the teacher's server refuses
        assert build_resources(str(tmp_path / "data"))["llm_server"].n_threads == 0
        res = CliRunner().invoke(app, ["run", "--data-dir", str(tmp_path / "data")])
        assert res.exit_code == 2
        assert res.output.strip() == (
            f"metacan run: METACAN_LLAMA_THREADS={bad!r} must be a whole number from 1 to 256 (CPU threads)"
        )
        assert not (tmp_path / "data").exists()  # nothing ran
    monkeypatch.setenv(settings.LLAMA_THREADS_ENV, "1")
    monkeypatch.setenv(settings.PARTS_URL_ENV, "s3:alice:hunter2@bucket")
    res = CliRunner().invoke(app, ["run", "--data-dir", str(tmp_path / "data")])
    assert res.exit_code == 2 and res.output.startswith(
        "metacan run: METACAN_PARTS_URL carries a user name or password"
    )
    assert "hunter2" not in res.output and not (tmp_path / "data").exists()
    monkeypatch.delenv(settings.PARTS_URL_ENV)
    monkeypatch.setenv(settings.RECORD_WORKERS_ENV, "0")  # read by work_records, near the end of a run
    res = CliRunner().invoke(app, ["run", "--data-dir", str(tmp_path / "data")])
    assert res.exit_code == 2 and res.output.strip() == (
        "metacan run: METACAN_RECORD_WORKERS='0' must be a whole number from 1 to 64 (worker processes)"
    )
    assert not (tmp_path / "data").exists()


def test_the_busy_cores_hint_names_the_setting_only_when_the_cores_are_busy(monkeypatch):
    from metacan_pipeline.teachers.calling import server

    monkeypatch.setattr(server.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(server.os, "getloadavg", lambda: (4.8, 4.2, 3.7))
    hint = server.busy_cores_hint(2)
    assert hint.startswith("the machine is busy (load average 4.8 on 2 cores)") and "METACAN_LLAMA_THREADS=1" in hint
    assert server.busy_cores_hint(1) is None  # already one thread
    monkeypatch.setattr(server.os, "getloadavg", lambda: (0.4, 0.5, 0.6))
    assert server.busy_cores_hint(2) is None  # quiet cores
