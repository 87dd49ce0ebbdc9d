"""Tests of ``metacan run``: the settings it checks before anything runs."""

from pathlib import Path

from typer.testing import CliRunner

from metacan_pipeline import settings
from metacan_pipeline.cli import app
from metacan_pipeline.cli.run import unwritable
from metacan_pipeline.definitions import build_resources
from metacan_pipeline.teachers.calling import server
from metacan_pipeline.teachers.calling.server import EmbeddedLlamaServer


def test_llama_threads_come_from_the_environment_and_a_bad_value_stops_metacan_run_in_one_sentence(
    tmp_path, monkeypatch
):
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
    monkeypatch.delenv(settings.RECORD_WORKERS_ENV)
    monkeypatch.setenv(settings.DAGSTER_UI_URL_ENV, "https://ui.example.org/?x=1")  # read by work_pages, at the end
    res = CliRunner().invoke(app, ["run", "--data-dir", str(tmp_path / "data")])
    assert res.exit_code == 2 and res.output.startswith(
        "metacan run: METACAN_DAGSTER_UI_URL='https://ui.example.org/?x=1' carries a query string or a fragment"
    )
    assert not (tmp_path / "data").exists()
    monkeypatch.delenv(settings.DAGSTER_UI_URL_ENV)
    missing = tmp_path / "venues.toml"  # read by venue_known_item_recall, in the audit stage
    monkeypatch.setenv(settings.REFERENCE_VENUES_FILE_ENV, str(missing))
    res = CliRunner().invoke(app, ["run", "--data-dir", str(tmp_path / "data")])
    assert res.exit_code == 2 and res.output.startswith(f"metacan run: venue reference set {missing}: cannot be read")
    assert not (tmp_path / "data").exists()
    monkeypatch.delenv(settings.REFERENCE_VENUES_FILE_ENV)
    monkeypatch.setenv("METACAN_ABSTRACT_SOURCES", "openalex,bogus")  # read by work_pages, at the end
    res = CliRunner().invoke(app, ["run", "--data-dir", str(tmp_path / "data")])
    assert (
        res.exit_code == 2 and res.output.startswith("metacan run: METACAN_ABSTRACT_SOURCES") and "bogus" in res.output
    )
    assert not (tmp_path / "data").exists()
    monkeypatch.delenv("METACAN_ABSTRACT_SOURCES")
    for name, bad in (("METACAN_PAGE_ENCODING", "zip"), ("METACAN_REPORT_URL", "javascript:alert(1)")):
        monkeypatch.setenv(name, bad)  # read by work_pages, at the end
        res = CliRunner().invoke(app, ["run", "--data-dir", str(tmp_path / "data")])
        assert res.exit_code == 2 and res.output.startswith(f"metacan run: {name}"), res.output
        assert not (tmp_path / "data").exists()
        monkeypatch.delenv(name)


def test_a_data_folder_that_cannot_be_written_stops_metacan_run_in_one_sentence(tmp_path):
    a_file = tmp_path / "data.json"
    a_file.write_text("{}")
    res = CliRunner().invoke(app, ["run", "--data-dir", str(a_file)])
    assert res.exit_code == 2 and res.output.strip() == (
        f"metacan run: the data folder {a_file} is a file, not a folder: choose a folder this user can write with "
        "--data-dir or METACAN_DATA_DIR"
    )
    assert unwritable(tmp_path / "new" / "data") is None and (tmp_path / "new" / "data").is_dir()
    assert unwritable(Path("/proc/metacan-data")).startswith("cannot be written (")  # /proc takes no new folder


def test_the_busy_cores_hint_names_the_setting_only_when_the_cores_are_busy(monkeypatch):
    monkeypatch.setattr(server.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(server.os, "getloadavg", lambda: (4.8, 4.2, 3.7))
    hint = server.busy_cores_hint(2)
    assert hint.startswith("the machine is busy (load average 4.8 on 2 cores)") and "METACAN_LLAMA_THREADS=1" in hint
    assert server.busy_cores_hint(1) is None  # already one thread
    monkeypatch.setattr(server.os, "getloadavg", lambda: (0.4, 0.5, 0.6))
    assert server.busy_cores_hint(2) is None  # quiet cores
