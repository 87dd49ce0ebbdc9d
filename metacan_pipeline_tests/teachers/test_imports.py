"""Tests of metacan_pipeline.teachers.imports.importing: importing label files (failed rows, duplicates, re-imports, format
errors)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import duckdb
import pytest

from metacan_pipeline.tables import create_tables
from metacan_pipeline.teachers.imports.importing import ImportSpec, canonical_json, current_imported_sql, import_file
from metacan_pipeline_tests.builders.teachers import GOOD_LABEL

IMPORT_SPEC = ImportSpec(teacher="ext", model="m", prompt_version="p1", record_view="title_abstract", source="test")


def _label(wid: str, meta: bool) -> dict:
    return {
        "id": wid,
        "categories": ["metaresearch"] if meta else [],
        "domain": "methods" if meta else None,
        "study_design": "observational",
        "genre": "empirical",
        "about_ca_system": False,
        "about_ca_topic": False,
        "confidence": "high",
        "reason": "r",
    }


def _current_import(tmp_path, wid):
    with duckdb.connect(str(tmp_path / "metacan.duckdb")) as con:
        create_tables(con)
        return con.execute(f"SELECT categories FROM ({current_imported_sql()}) WHERE work_id = ?", [wid]).fetchone()


def test_a_label_file_reverted_to_an_earlier_version_wins_again(tmp_path):
    """labels.json v1 says W1 is metaresearch; v2 corrects it to []; v3 reverts the correction (v3 == v1).
    A later import wins: the current imported label of W1 is what the file says now (metaresearch), although
    v3's SHA was recorded before."""
    path = tmp_path / "labels.json"
    con = duckdb.connect(str(tmp_path / "metacan.duckdb"))
    create_tables(con)
    for meta in (True, False, True):
        path.write_text(json.dumps([_label("W1", meta), _label("W2", False)]))
        import_file(con, path, IMPORT_SPEC, "r")
        time.sleep(0.01)
    got = con.execute(f"SELECT categories FROM ({current_imported_sql()}) WHERE work_id = 'W1'").fetchone()[0]
    con.close()
    assert got == ["metaresearch"], f"the file says metaresearch; imported_labels says {got}"


@pytest.mark.parametrize(
    "wid", ["W1 ", " W1", "https://openalex.org/W1", "W1\n", "w1", "A1", "https://openalex.org/A1"]
)
def test_an_imported_id_that_names_no_work_is_not_stored_as_a_good_label(tmp_path, wid):
    """Ids with stray whitespace or in OpenAlex URL form never become a ``labelled`` row for a work id no
    frame work has.

    The rule (importing.py docstring, "ids"): the OpenAlex URL form is normalised (it is the id OpenAlex
    publishes); whitespace around an id is refused, not trimmed (a padded or split key is the mark of a
    broken export, which a silent trim would hide). A refused id is a failed row with work_id NULL (only
    work ids go in work_id) and the raw id in the cause."""
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps(_label(wid, True)) + "\n")
    con = duckdb.connect(str(tmp_path / "metacan.duckdb"))
    create_tables(con)
    import_file(con, path, IMPORT_SPEC, "r")
    rows = con.execute("SELECT work_id, status, error FROM teacher_labels").fetchall()
    con.close()
    if wid == "https://openalex.org/W1":
        assert [r[:2] for r in rows] == [("W1", "labelled")], f"stored {rows}"
    else:
        assert [r[:2] for r in rows] == [(None, "failed")], f"stored {rows}"
        assert repr(wid) in rows[0][2] and ("whitespace" in rows[0][2] or "not an OpenAlex work id" in rows[0][2]), (
            rows[0][2]
        )


def test_a_json_object_file_is_refused_with_a_clear_error(tmp_path):
    """A pretty-printed JSON object (``{"labels": [...]}``, the teacher reply format) given as a label
    file is refused with a ValueError naming the file ("a JSON object; give a JSON array or JSON Lines"),
    like a broken array, rather than read as JSON Lines."""
    path = tmp_path / "labels.json"
    con = duckdb.connect(str(tmp_path / "metacan.duckdb"))
    create_tables(con)
    # Pretty-printed (whole and cut short), and the one-line reply form.
    for text in (
        json.dumps({"labels": [_label("W1", True), _label("W2", False)]}, indent=2),
        json.dumps({"labels": [_label("W1", True), _label("W2", False)]}, indent=2)[:-40],
        json.dumps({"labels": [_label("W1", True)]}),
    ):
        path.write_text(text)
        try:
            report = import_file(con, path, IMPORT_SPEC, "r")
        except ValueError as exc:
            assert str(path) in str(exc) and "JSON array" in str(exc) and "JSON Lines" in str(exc), str(exc)
            continue
        stored = con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0]
        con.close()
        pytest.fail(
            f"imported as {report.failed} failed rows ({stored} stored rows), first cause: {report.invalid[0][3]}"
        )
    # nothing stored: no label row, no import record (the tables exist: storage creates them when it opens)
    assert con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM label_imports").fetchone()[0] == 0
    con.close()


def test_an_empty_label_file_is_reported(tmp_path):
    """An empty file (an export that failed) is reported: an error, or at least the file recorded in
    label_imports with 0 rows; never a silent success."""
    path = tmp_path / "labels.jsonl"
    path.write_text("")
    con = duckdb.connect(str(tmp_path / "metacan.duckdb"))
    create_tables(con)
    try:
        report = import_file(con, path, IMPORT_SPEC, "r")
    except ValueError as exc:
        # The decision (imports.py docstring): an empty file is refused, naming the file; '[]' is the
        # explicit "no labels", recorded in label_imports with 0 rows.
        assert str(path) in str(exc) and "empty" in str(exc), str(exc)
        empty = tmp_path / "none.json"
        empty.write_text("[]")
        report = import_file(con, empty, IMPORT_SPEC, "r")
        assert report.files == [(str(empty), hashlib.sha256(b"[]").hexdigest())] and not report.already_imported
        assert con.execute("SELECT file, rows FROM label_imports").fetchall() == [(str(empty), 0)]
        assert import_file(con, empty, IMPORT_SPEC, "r").already_imported
        assert con.execute("SELECT count(*) FROM label_imports").fetchone()[0] == 1
        return
    finally:
        con.close()
    assert report.files, (
        f"empty file: report.files = {report.files}, labelled {report.labelled}, failed {report.failed}"
    )


SPEC = ImportSpec(
    teacher="ext", model="some-model", prompt_version="ext-v1", record_view="title_abstract", source="test file"
)


def test_file_import_failed_rows_duplicates_and_reimport(tmp_path: Path):
    lines = [
        json.dumps({**GOOD_LABEL, "sel_prob": 0.25, "stratum": "s1"}),  # 0: valid, design weight 1/0.25
        json.dumps(
            {**GOOD_LABEL, "id": "W2", "genre": "poem", "view_hash": "abc123"}
        ),  # 1: invalid genre -> failed row
        "{not json",  # 2: not JSON -> failed row, no work id
        json.dumps({**GOOD_LABEL, "reason": "second opinion"}),  # 3: duplicate of W1 -> reported, not stored
        json.dumps(
            {**GOOD_LABEL, "id": "W3", "categories": ["insufficient_payload", "sts"]}
        ),  # 4: rule broken -> failed row
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(lines) + "\n")
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    create_tables(con)
    report = import_file(con, path, SPEC, "run-1")
    assert (report.labelled, report.failed, report.duplicates) == (1, 3, [("W1", str(path), 3)])
    rows = {
        r["work_id"]: r
        for r in con.execute("SELECT * FROM teacher_labels ORDER BY work_id").to_arrow_table().to_pylist()
    }
    assert set(rows) == {"W1", "W2", "W3", None}
    assert all(
        r["source"] == "import" and r["prompt_sha"] == hashlib.sha256(b"import:ext-v1").hexdigest()[:16]
        for r in rows.values()
    )
    w1 = rows["W1"]
    assert (w1["status"], w1["categories"], w1["domain"], w1["reason"]) == (
        "labelled",
        ["metaresearch"],
        "reporting",
        GOOD_LABEL["reason"],
    )
    original = {**GOOD_LABEL, "sel_prob": 0.25, "stratum": "s1"}
    assert w1["view_hash"] == hashlib.sha256(canonical_json(original).encode()).hexdigest()[:16]
    ref = json.loads(w1["source_ref"])
    assert (ref["file"], ref["index"], ref["line"], ref["original"]) == (str(path), 0, 1, original)
    assert ref["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert rows["W2"]["status"] == "failed" and "genre='poem' is not in the vocabulary" in rows["W2"]["error"]
    assert rows["W2"]["view_hash"] == "abc123" and rows["W2"]["categories"] is None
    assert "not JSON" in rows[None]["error"] and "record 2 (line 3)" in rows[None]["error"]
    assert "insufficient_payload must be the only category" in rows["W3"]["error"]
    assert con.execute("SELECT * FROM imported_design").fetchall() == [("test file", "W1", "s1", 0.25, 4.0)]
    assert con.execute("SELECT file, teacher, rows, run_id FROM label_imports").fetchall() == [
        (str(path), "ext", 4, "run-1")
    ]

    # Same content again, also under another name: nothing is added.
    copy = tmp_path / "copy.json"
    copy.write_bytes(path.read_bytes())
    for p in (path, copy):
        again = import_file(con, p, SPEC, "run-2")
        assert again.already_imported and again.labelled == again.failed == 0
    assert con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0] == 4
    # A new file repeating a stored record adds only what is new; another teacher configuration is separate.
    more = tmp_path / "more.json"
    more.write_text(json.dumps([{**GOOD_LABEL, "sel_prob": 0.25, "stratum": "s1"}, {**GOOD_LABEL, "id": "W4"}]))
    r = import_file(con, more, SPEC, "run-3")
    assert (r.existing, r.labelled) == (1, 1)
    other = import_file(con, more, ImportSpec("ext", "some-model", "ext-v2", "title_abstract", "test file"), "run-3")
    assert other.labelled == 2
    current = con.execute(
        f"SELECT teacher, prompt_version, work_id, status FROM ({current_imported_sql()}) ORDER BY ALL"
    ).fetchall()
    assert current == [
        ("ext", "ext-v1", "W1", "labelled"),
        ("ext", "ext-v1", "W2", "failed"),
        ("ext", "ext-v1", "W3", "failed"),
        ("ext", "ext-v1", "W4", "labelled"),
        ("ext", "ext-v1", None, "failed"),
        ("ext", "ext-v2", "W1", "labelled"),
        ("ext", "ext-v2", "W4", "labelled"),
    ]


def test_a_later_import_wins_and_label_imports_counts_each_row_once(tmp_path: Path):
    # v1 -> v2 (W1 corrected, W2 unchanged) -> v3 == v1 -> v3 again. Each record is compared with the
    # current row of its work: v3 makes v1's W1 current again; the same file twice stores nothing.
    path = tmp_path / "labels.json"
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    create_tables(con)
    w2 = {**GOOD_LABEL, "id": "W2", "categories": [], "domain": None}
    versions = [
        [GOOD_LABEL, w2],
        [{**GOOD_LABEL, "categories": [], "domain": None}, w2],
        [GOOD_LABEL, w2],
        [GOOD_LABEL, w2],
    ]
    reports = []
    for i, records in enumerate(versions):
        path.write_text(json.dumps(records))
        reports.append(import_file(con, path, SPEC, f"run-{i}"))
    assert [(r.labelled, r.existing, r.already_imported) for r in reports] == [
        (2, 0, False),
        (1, 1, False),
        (1, 1, False),
        (0, 2, True),
    ]
    current = dict(con.execute(f"SELECT work_id, categories FROM ({current_imported_sql()})").fetchall())
    assert current == {"W1": ["metaresearch"], "W2": []}
    # label_imports: v1, v2, v3 (v1's content again, recorded as a re-import with the 1 row it stored);
    # the no-op 4th import is not recorded. Its rows add up to the stored rows.
    assert con.execute("SELECT run_id, rows FROM label_imports ORDER BY imported_at").fetchall() == [
        ("run-0", 2),
        ("run-1", 1),
        ("run-2", 1),
    ]
    assert (
        con.execute("SELECT sum(rows) FROM label_imports").fetchone()[0]
        == con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0]
        == 4
    )

    # A correction that keeps the given view_hash (the labeller saw the same thing) is still a new label.
    given = tmp_path / "given.jsonl"
    for cats, domain in ((["metaresearch"], "reporting"), ([], None)):
        given.write_text(
            json.dumps({**GOOD_LABEL, "id": "W7", "categories": cats, "domain": domain, "view_hash": "feedbeef"}) + "\n"
        )
        assert import_file(con, given, SPEC, "run-g").labelled == 1
    assert con.execute(f"SELECT categories FROM ({current_imported_sql()}) WHERE work_id = 'W7'").fetchone()[0] == []


def test_file_format_errors_name_the_file(tmp_path: Path):
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    create_tables(con)
    for name, text, says in (
        ("empty.jsonl", "  \n\n", "empty"),
        ("obj.json", json.dumps(GOOD_LABEL, indent=2), "one JSON object"),
        ("scalar.json", "[1, 2", "not a JSON array"),
        ("csv.csv", "id,categories\nW1,metaresearch\n", "not JSON Lines"),
    ):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ValueError, match=says) as exc:
            import_file(con, path, SPEC, "run-1")
        assert str(path) in str(exc.value) and "JSON Lines" in str(exc.value)
    # A one-line JSON Lines file is still one record, and a URL-form id is stored in the short form.
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({**GOOD_LABEL, "id": "https://openalex.org/W9"}))
    assert import_file(con, one, SPEC, "run-1").labelled == 1
    assert con.execute("SELECT work_id, status FROM teacher_labels").fetchall() == [("W9", "labelled")]


def test_prompt_text_keys_the_labels():
    spec = ImportSpec("ext", "m", "v1", "title_only", "s", prompt_text="Label this work.")
    assert spec.prompt_sha == hashlib.sha256(b"Label this work.").hexdigest()[:16]
    with pytest.raises(ValueError, match="not label fields"):
        ImportSpec("ext", "m", "v1", "title_only", "s", absent=frozenset({"colour"}))


def test_read_stored_and_record_row_say_what_an_import_would_add(tmp_path: Path):
    """After one import, read_stored holds its file SHA-256, the current content of each work and the design;
    record_row finds the same record unchanged, a changed reason changed, and an id naming no work failed with
    where the record is."""
    from metacan_pipeline.teachers.imports.importing import (
        import_provenance,
        read_stored,
        record_row,
        work_id_of,
    )
    from metacan_pipeline.teachers.imports.label_files import SourceRecord

    path = tmp_path / "labels.json"
    path.write_text(json.dumps([{**GOOD_LABEL, "sel_prob": 0.5}]))
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    create_tables(con)
    import_file(con, path, SPEC, "run-1")
    stored = read_stored(con, SPEC)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert stored.done == {sha} and set(stored.current) == {"W1"} and stored.placed == set()
    assert stored.design == {"W1": (None, 0.5, 2.0)}

    def row_of(obj: dict):
        rec = SourceRecord(str(path), sha, 0, obj, obj)
        return record_row(rec, *work_id_of(obj["id"]), SPEC, import_provenance(SPEC, "run-2", None), stored)

    same = row_of({**GOOD_LABEL, "sel_prob": 0.5})
    assert same.unchanged and same.error is None and same.design == (None, 0.5, 2.0)
    changed = row_of({**GOOD_LABEL, "reason": "another reason"})
    assert not changed.unchanged and changed.row["status"] == "labelled" and changed.design is None
    bad = row_of({**GOOD_LABEL, "id": "A1"})
    assert bad.work_id is None and bad.row["status"] == "failed"
    assert bad.row["error"].startswith(f"{path} record 0: id='A1' is not an OpenAlex work id")
    con.close()


def test_label_imports_names_the_file_by_its_absolute_path(tmp_path, monkeypatch):
    """An import run from another folder with a relative path still names the file it read."""
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "a.json").write_text(json.dumps([_label("W1", True)]))
    con = duckdb.connect(str(tmp_path / "metacan.duckdb"))
    create_tables(con)
    monkeypatch.chdir(tmp_path)
    import_file(con, Path("labels/a.json"), IMPORT_SPEC, "r")
    files = con.execute("SELECT file FROM label_imports").fetchall()
    con.close()
    assert files == [(str(tmp_path / "labels" / "a.json"),)]
