"""Tests of the coders and coding commands of metacan_pipeline.cli (typer's CliRunner, real SQLite files)."""

from __future__ import annotations

import json
import logging
import re

from typer.testing import CliRunner

from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.cli import app
from metacan_pipeline.settings import coding_store_path
from metacan_pipeline_tests.audit.test_coding import P, work_row
from metacan_pipeline_tests.audit.test_labelstudio import label_studio_export
from metacan_pipeline_tests.builders.openalex import LoopbackOpenAlex


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_coders_add_prints_the_token_once_and_list_never_shows_it(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    data = str(tmp_path / "data")
    added = run("coders", "add", "alice", "--data-dir", data)
    assert added.exit_code == 0, added.output
    token = re.search(r"Token of coder alice: (\S+)", added.output).group(1)
    assert "shown only now" in added.output and "metacan serve --coding" in added.output
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
    # names match ignoring case, in revoke as in add: 'revoke BOB' revokes the coder Bob
    run("coders", "add", "Bob", "--data-dir", data)
    shouted = run("coders", "revoke", "BOB", "--data-dir", data)
    assert shouted.exit_code == 0 and "Coder Bob revoked" in shouted.output, shouted.output


def test_coding_export_then_import_labelstudio_prints_counts_and_each_refusal(tmp_path, monkeypatch):
    data = str(tmp_path / "data")
    assert run("coding", "export-labelstudio", P, str(tmp_path / "ls"), "--data-dir", data).exit_code == 1
    with CodingStore(coding_store_path(data)) as store:
        store.load_tasks(P, [work_row(i) for i in range(3)])
    # the abstracts come from OpenAlex ($METACAN_OPENALEX_API_URL): here a loopback one that has W100's
    index = {w: None for w in ("W101", "W102")} | {"W100": {"Peer": [0], "review": [1], "audited.": [2]}}
    openalex = LoopbackOpenAlex(
        lambda path, q: [{"id": w, "abstract_inverted_index": index[w]} for w in q["filter"].split(":")[1].split("|")]
    )
    monkeypatch.setenv("METACAN_OPENALEX_API_URL", openalex.base_url)
    try:
        exported = run("coding", "export-labelstudio", P, str(tmp_path / "ls"), "--data-dir", data)
    finally:
        openalex.shutdown()
    assert exported.exit_code == 0, exported.output
    assert "3 tasks: " in exported.output
    tasks = json.loads((tmp_path / "ls" / f"{P}-tasks.json").read_text())
    assert [t["data"]["abstract"] for t in tasks][:2] == [
        "Peer review audited.",
        "OpenAlex holds no abstract of this work.",
    ]
    config = (tmp_path / "ls" / f"{P}-labeling-config.xml").read_text()
    assert '<Choice value="Reporting (how research is reported)" alias="reporting"' in config
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


def _files(folder) -> dict[str, str]:
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_read_commands_open_the_store_read_only_and_write_nothing(tmp_path):
    """Opening the store always wrote (the folder, the tables, the journal mode), even for ``metacan coders list``."""
    data = tmp_path / "data"
    assert run("coders", "list", "--data-dir", str(data)).output.startswith("No coders yet (no coding store at")
    assert not data.exists()  # a read creates nothing
    assert run("coding", "export-labelstudio", P, str(tmp_path / "ls"), "--data-dir", str(data)).exit_code == 1
    with CodingStore(coding_store_path(str(data))) as store:
        store.load_tasks(P, [work_row(0)])
        store.add_coder("alice")
    folder = coding_store_path(str(data)).parent
    before = _files(folder)
    assert "alice" in run("coders", "list", "--data-dir", str(data)).output
    exported = run("coding", "export-labelstudio", P, str(tmp_path / "ls"), "--no-abstracts", "--data-dir", str(data))
    assert exported.exit_code == 0, exported.output
    after = _files(folder)
    # the store's bytes are unchanged; a WAL-mode reader leaves only SQLite's shared-memory index and an empty log
    assert after["coding.sqlite"] == before["coding.sqlite"]
    assert set(after) <= {"coding.sqlite", "coding.sqlite-shm", "coding.sqlite-wal"}
    assert (folder / "coding.sqlite-wal").stat().st_size == 0 if "coding.sqlite-wal" in after else True


def test_a_corrupt_store_is_a_clear_error_naming_the_file_and_is_left_as_it_is(tmp_path):
    """A file that is not SQLite gave a traceback ("DatabaseError: file is not a database") for every command."""
    data = tmp_path / "data"
    path = coding_store_path(str(data))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database, but someone's coding work? " * 100)
    before = path.read_bytes()
    export = tmp_path / "export.json"
    export.write_text("[]")
    for args in (
        ("coders", "list"),
        ("coders", "add", "bob"),
        ("coders", "revoke", "bob"),
        ("coding", "export-labelstudio", P, str(tmp_path / "ls")),
        ("coding", "import-labelstudio", str(export)),
    ):
        result = run(*args, "--data-dir", str(data))
        assert result.exit_code == 1, (args, result.output)
        assert f"metacan {' '.join(args[:2])}: coding store {path} is not a readable SQLite database" in result.output
        assert "restore it from your backup" in result.output and result.exception.__class__ is SystemExit
    assert path.read_bytes() == before


def test_a_read_only_store_can_be_listed_and_a_write_is_a_clear_error(tmp_path):
    """A read-only store (a backup on a read-only medium, a file of another user) gave a traceback for every command."""
    import os
    import shutil
    import subprocess

    data = tmp_path / "data"
    with CodingStore(coding_store_path(str(data))) as store:
        store.add_coder("alice")
    folder = coding_store_path(str(data)).parent
    if os.geteuid() == 0:  # root writes through permission bits: make the folder and the file immutable instead
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)]).returncode != 0:
            import pytest

            pytest.skip("running as root without chattr +i: no way to make a file read-only")
        undo = ["chattr", "-i", str(folder)]
    else:
        folder.chmod(0o555)
        undo = ["chmod", "755", str(folder)]
    try:
        listed = run("coders", "list", "--data-dir", str(data))
        assert listed.exit_code == 0 and "alice" in listed.output, listed.output
        added = run("coders", "add", "bob", "--data-dir", str(data))
        assert (
            added.exit_code == 1
            and f"metacan coders add: cannot open coding store {folder / 'coding.sqlite'}" in added.output
        )
        assert "Traceback" not in added.output
    finally:
        subprocess.run(undo, check=True)


def test_coding_backup_copies_the_answers_still_in_the_write_ahead_log(tmp_path):
    """A plain copy of coding.sqlite while the store is open holds none of the answers its WAL has not checkpointed
    (0 of 17 here); `metacan coding backup` copies them all, and never overwrites a file."""
    import shutil
    import sqlite3

    from metacan_pipeline_tests.audit.test_coding import META

    data = str(tmp_path / "data")
    path = coding_store_path(data)
    with CodingStore(path) as writer:  # held open, as `metacan serve` holds it: nothing is checkpointed on close
        writer.load_tasks(P, [work_row(1), work_row(2)])
        writer.add_coder("ann")
        for wid in ("W101", "W102"):
            writer.submit(P, wid, "ann", META)
        shutil.copy(path, tmp_path / "plain.sqlite")
        copy = sqlite3.connect(tmp_path / "plain.sqlite")
        has_table = copy.execute("SELECT count(*) FROM sqlite_master WHERE name = 'coding_answers'").fetchone()[0]
        plain = copy.execute("SELECT count(*) FROM coding_answers").fetchone()[0] if has_table else 0
        out = run("coding", "backup", str(tmp_path / "backup.sqlite"), "--data-dir", data)
        assert out.exit_code == 0 and "2 answers" in out.output, out.output
    assert plain == 0  # what the README's old advice gave
    with CodingStore(tmp_path / "backup.sqlite") as restored:
        assert sorted(a["id"] for a in restored.latest_answers(P)) == ["W101", "W102"]
    again = run("coding", "backup", str(tmp_path / "backup.sqlite"), "--data-dir", data)
    assert again.exit_code == 2 and "exists" in again.output
