"""Tests of the coders and coding commands of metacan_pipeline.cli (typer's CliRunner, real SQLite files)."""

from __future__ import annotations

import json
import logging
import re

from typer.testing import CliRunner

from metacan_pipeline.audit.coding import CodingStore
from metacan_pipeline.cli import app
from metacan_pipeline.settings import coding_store_path
from metacan_pipeline_tests.audit.test_coding import P, work_row
from metacan_pipeline_tests.audit.test_labelstudio import label_studio_export


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_coders_add_prints_the_token_once_and_list_never_shows_it(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    data = str(tmp_path / "data")
    added = run("coders", "add", "alice", "--data-dir", data)
    assert added.exit_code == 0, added.output
    token = re.search(r"Token of coder alice: (\S+)", added.output).group(1)
    assert "shown only now" in added.output
    path = coding_store_path(data)
    assert path == tmp_path / "data" / "audit" / "coding.sqlite"
    with CodingStore(path) as store:
        assert store.coder_for_token(token) == "alice"
    listed = run("coders", "list", "--data-dir", data)
    assert listed.exit_code == 0 and "alice" in listed.output and "active" in listed.output
    assert token not in listed.output and not re.search(r"[0-9a-f]{64}", listed.output)
    assert token not in caplog.text
    again = run("coders", "add", "alice", "--data-dir", data)
    assert again.exit_code == 2 and "exists already" in again.output
    revoked = run("coders", "revoke", "alice", "--data-dir", data)
    assert revoked.exit_code == 0 and "revoked" in revoked.output
    assert "revoked 20" in run("coders", "list", "--data-dir", data).output
    with CodingStore(path) as store:
        assert store.coder_for_token(token) is None
    assert run("coders", "revoke", "bob", "--data-dir", data).exit_code == 2


def test_coding_export_then_import_labelstudio_prints_counts_and_each_refusal(tmp_path):
    data = str(tmp_path / "data")
    assert run("coding", "export-labelstudio", P, str(tmp_path / "ls"), "--data-dir", data).exit_code == 1
    with CodingStore(coding_store_path(data)) as store:
        store.load_tasks(P, [work_row(i) for i in range(3)])
    exported = run("coding", "export-labelstudio", P, str(tmp_path / "ls"), "--data-dir", data)
    assert exported.exit_code == 0, exported.output
    assert "3 tasks: " in exported.output
    tasks = json.loads((tmp_path / "ls" / f"{P}-tasks.json").read_text())
    assert (tmp_path / "ls" / f"{P}-labeling-config.xml").read_text().startswith("<View>")
    export = tmp_path / "export.json"
    export.write_text(json.dumps(label_studio_export(tasks)))
    cmap = tmp_path / "coders.json"
    cmap.write_text(json.dumps({"alice@uni.ca": "alice", "12": "bob"}))
    args = ("coding", "import-labelstudio", str(export), "--coder-map", str(cmap), "--data-dir", data)
    first = run(*args)
    assert first.exit_code == 0, first.output
    assert "5 annotations in 3 tasks: 3 appended, 0 already present, 2 refused" in first.output
    assert "task 502 (W101), annotation 9004 by 12: annotation was cancelled" in first.output
    assert "annotation 9005 by 12: domain" in first.output
    second = run(*args)
    assert "0 appended, 3 already present, 2 refused" in second.output
    with CodingStore(coding_store_path(data)) as store:
        assert {(a["id"], a["coder"]) for a in store.latest_answers(P)} == {
            ("W100", "alice"),
            ("W100", "bob"),
            ("W101", "alice"),
        }
    cmap.write_text(json.dumps({"x": "not a name"}))
    bad = run(*args)
    assert bad.exit_code == 2 and "not valid" in bad.output


def test_a_bad_coder_map_is_refused_naming_the_file_and_the_entry(tmp_path):
    """``metacan coding import-labelstudio --coder-map`` said "coder name ... is not valid" without naming the file."""
    data = str(tmp_path / "data")
    with CodingStore(coding_store_path(data)) as store:
        store.load_tasks(P, [work_row(0)])
    export = tmp_path / "export.json"
    export.write_text("[]")
    cmap = tmp_path / "coders.json"
    cmap.write_text(json.dumps({"alice@uni.ca": "alice", "12": "x" * 100_000}))
    bad = run("coding", "import-labelstudio", str(export), "--coder-map", str(cmap), "--data-dir", data)
    assert bad.exit_code == 2
    assert f"coder map {cmap}: the entry '12': coder name 'xxx" in bad.output and len(bad.output) < 1000
