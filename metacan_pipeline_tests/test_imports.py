"""Import of labels produced elsewhere (SPEC section 4): validation with absent fields, failed rows, duplicates,
idempotence, and the real MetaCan pilot labels in ../shared/data/metacan_pilot."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables import create_tables
from metacan_pipeline.teachers.agreement import kappa, teacher_agreement
from metacan_pipeline.teachers.import_assets import imported_labels
from metacan_pipeline.teachers.imports import (
    ImportSpec,
    canonical_json,
    current_imported_sql,
    import_file,
    import_records,
)
from metacan_pipeline.teachers.pilot import pilot_imports
from metacan_pipeline.teachers.validate import InvalidLabel, validate_label

from .conftest import SHARED

PILOT = SHARED / "data" / "metacan_pilot"

GOOD = {
    "id": "W1",
    "categories": ["metaresearch"],
    "domain": "reporting",
    "study_design": "observational",
    "genre": "empirical",
    "about_ca_system": False,
    "about_ca_topic": True,
    "confidence": "high",
    "reason": "Audits reporting of trials.",
}
SPEC = ImportSpec(
    teacher="ext", model="some-model", prompt_version="ext-v1", record_view="title_abstract", source="test file"
)


@pytest.fixture(scope="session")
def pilot_dir() -> Path:
    if not (PILOT / "labels_joined.json").exists():
        pytest.fail(f"real pilot data not found at {PILOT}: the tests need ../shared/data beside the checkout")
    return PILOT


def materialize(tmp_path: Path, config: dict | None = None) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [imported_labels, teacher_agreement],
        resources={"storage": MetacanStorage(data_dir=str(tmp_path / "data"))},
        run_config={"ops": {"imported_labels": {"config": config or {}}}},
        instance=dg.DagsterInstance.ephemeral(),
    )


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == asset]
    return {k: v.value for k, v in event.materialization.metadata.items()}


# ---- validate_label(absent=...) ----------------------------------------------------------------------


def test_absent_fields_are_none_and_must_not_be_given():
    lab = validate_label(
        {"id": "W1", "categories": ["metaresearch"], "confidence": "low", "genre": None},
        "W1",
        absent=frozenset({"domain", "study_design", "genre", "about_ca_system", "about_ca_topic", "reason"}),
    )
    assert (lab.categories, lab.confidence) == (("metaresearch",), "low")
    assert [lab.domain, lab.study_design, lab.genre, lab.about_ca_system, lab.about_ca_topic, lab.reason] == [None] * 6
    with pytest.raises(InvalidLabel, match="declared not to provide 'study_design'"):
        validate_label(GOOD, "W1", absent=frozenset({"study_design"}))
    # A field present is validated as before, and without 'absent' nothing changed.
    with pytest.raises(InvalidLabel, match="genre='poem'"):
        validate_label({**GOOD, "study_design": None, "genre": "poem"}, "W1", absent=frozenset({"study_design"}))
    with pytest.raises(InvalidLabel, match="missing field 'study_design'"):
        validate_label({k: v for k, v in GOOD.items() if k != "study_design"}, "W1")
    with pytest.raises(ValueError, match="can be absent"):
        validate_label(GOOD, "W1", absent=frozenset({"categories"}))


def test_domain_rule_only_when_domain_is_given():
    # Without 'metaresearch' a substantive domain is an error; with domain absent there is no domain to check.
    with pytest.raises(InvalidLabel, match="without the category 'metaresearch'"):
        validate_label({**GOOD, "categories": []}, "W1")
    assert validate_label({**GOOD, "categories": [], "domain": None}, "W1", absent=frozenset({"domain"})).domain is None


# ---- imports.py --------------------------------------------------------------------------------------


def test_file_import_failed_rows_duplicates_and_reimport(tmp_path: Path):
    lines = [
        json.dumps({**GOOD, "sel_prob": 0.25, "stratum": "s1"}),  # 0: valid, design weight 1/0.25
        json.dumps({**GOOD, "id": "W2", "genre": "poem", "view_hash": "abc123"}),  # 1: invalid genre -> failed row
        "{not json",  # 2: not JSON -> failed row, no work id
        json.dumps({**GOOD, "reason": "second opinion"}),  # 3: duplicate of W1 -> reported, not stored
        json.dumps({**GOOD, "id": "W3", "categories": ["insufficient_payload", "sts"]}),  # 4: rule broken -> failed row
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
        GOOD["reason"],
    )
    original = {**GOOD, "sel_prob": 0.25, "stratum": "s1"}
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
    more.write_text(json.dumps([{**GOOD, "sel_prob": 0.25, "stratum": "s1"}, {**GOOD, "id": "W4"}]))
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
    w2 = {**GOOD, "id": "W2", "categories": [], "domain": None}
    versions = [[GOOD, w2], [{**GOOD, "categories": [], "domain": None}, w2], [GOOD, w2], [GOOD, w2]]
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
            json.dumps({**GOOD, "id": "W7", "categories": cats, "domain": domain, "view_hash": "feedbeef"}) + "\n"
        )
        assert import_file(con, given, SPEC, "run-g").labelled == 1
    assert con.execute(f"SELECT categories FROM ({current_imported_sql()}) WHERE work_id = 'W7'").fetchone()[0] == []


def test_file_format_errors_name_the_file(tmp_path: Path):
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    create_tables(con)
    for name, text, says in (
        ("empty.jsonl", "  \n\n", "empty"),
        ("obj.json", json.dumps(GOOD, indent=2), "one JSON object"),
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
    one.write_text(json.dumps({**GOOD, "id": "https://openalex.org/W9"}))
    assert import_file(con, one, SPEC, "run-1").labelled == 1
    assert con.execute("SELECT work_id, status FROM teacher_labels").fetchall() == [("W9", "labelled")]


def test_prompt_text_keys_the_labels():
    spec = ImportSpec("ext", "m", "v1", "title_only", "s", prompt_text="Label this work.")
    assert spec.prompt_sha == hashlib.sha256(b"Label this work.").hexdigest()[:16]
    with pytest.raises(ValueError, match="not label fields"):
        ImportSpec("ext", "m", "v1", "title_only", "s", absent=frozenset({"colour"}))


# ---- the MetaCan pilot -------------------------------------------------------------------------------


def test_pilot_import_counts(tmp_path: Path, pilot_dir: Path):
    joined = json.loads((pilot_dir / "labels_joined.json").read_text())
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    create_tables(con)
    imports = pilot_imports(pilot_dir)
    reports = [import_records(con, imp.spec, imp.records, "run-1") for imp in imports]
    # SOURCES.md: 1290 double-screened works; 1435 codex labels of 1432 works (3 works in two files); the
    # 496 joined works without a codex label take tier_b from labels_joined.
    assert [(r.teacher, r.labelled, r.failed, len(r.duplicates)) for r in reports] == [
        ("pilot_a", 1290, 0, 0),
        ("pilot_b", 1432, 0, 3),
        ("pilot_b", 496, 0, 0),
    ]
    assert sorted(w for w, _, _ in reports[1].duplicates) == ["W1940863920", "W1974733467", "W2902615448"]
    # The duplicate kept is the stratified run's (codex/chunk_16.json pairs with chunks_b/chunk_16.json).
    rows = con.execute(f"SELECT * FROM ({current_imported_sql()})").to_arrow_table().to_pylist()
    b = {r["work_id"]: r for r in rows if r["teacher"] == "pilot_b"}
    a = {r["work_id"]: r for r in rows if r["teacher"] == "pilot_a"}
    assert json.loads(b["W2902615448"]["source_ref"])["file"].endswith("codex/chunk_16.json")
    assert (len(a), len(b)) == (1290, 1928)
    assert {r["model"] for r in a.values()} == {"claude-sonnet-4-6"} and {r["model"] for r in b.values()} == {
        "gpt-5.6-sol"
    }
    assert {r["prompt_version"] for r in rows} == {"pilot-rubric-v1.0"}

    # B's tier on the joined works: from the codex file for 794 works, from labels_joined for 496; equal to tier_b.
    from_codex = sum("/codex/" in json.loads(b[r["id"]]["source_ref"])["file"] for r in joined)
    assert from_codex == 794
    for r in joined:
        assert a[r["id"]]["categories"] == (["metaresearch"] if r["tier_a"] in ("T1", "T2") else [])
        assert b[r["id"]]["categories"] == (["metaresearch"] if r["tier_b"] in ("T1", "T2") else [])
        assert a[r["id"]]["confidence"] == r["conf_a"] and b[r["id"]]["confidence"] == r["conf_b"]
    # SOURCES.md screener table: in-scope A 58, B 88; confidence A 617/422/251, B 1087/87/116.
    assert sum(a[r["id"]]["categories"] == ["metaresearch"] for r in joined) == 58
    assert sum(b[r["id"]]["categories"] == ["metaresearch"] for r in joined) == 88
    assert Counter(a[r["id"]]["confidence"] for r in joined) == {"high": 617, "medium": 422, "low": 251}
    assert Counter(b[r["id"]]["confidence"] for r in joined) == {"high": 1087, "medium": 87, "low": 116}
    # Fields a screener did not give are None: A gives tier and confidence only; B's codex labels add genre,
    # about_ca (-> about_ca_system) and why (-> reason).
    assert all(r["genre"] is None and r["reason"] is None and r["about_ca_system"] is None for r in a.values())
    codex_b = [r for r in b.values() if "/codex/" in json.loads(r["source_ref"])["file"]]
    assert len(codex_b) == 1432 and all(
        r["genre"] and r["reason"] and r["about_ca_system"] is not None for r in codex_b
    )
    assert all(r["domain"] is None and r["study_design"] is None and r["about_ca_topic"] is None for r in rows)
    # Genre mapping of the 1432 stored codex labels (SOURCES.md over 1435 labels: empirical 1099,
    # conceptual 148, other 77, editorial/commentary 70, infrastructure/announcement 22, policy 19).
    originals = Counter(json.loads(r["source_ref"])["original"]["genre"] for r in codex_b)
    genres = Counter(r["genre"] for r in codex_b)
    assert genres == {
        "empirical": originals["empirical"],
        "commentary": originals["editorial/commentary"] + originals["policy"],
        "other": originals["conceptual"] + originals["other"] + originals["infrastructure/announcement"],
    }
    assert sum(r["about_ca_system"] for r in codex_b) == 6
    # Design: 1290 works; settled_out 600 at sel_prob 0.1249, weight 8.005 as published.
    design = con.execute(
        "SELECT stratum, sel_prob, design_weight, count(*) FROM imported_design GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert design == [
        ("boundary", 1.0, 1.0, 599),
        ("paratext", 1.0, 1.0, 33),
        ("positive", 1.0, 1.0, 58),
        ("settled_out", 0.1249, 8.005, 600),
    ]
    # SOURCES.md: exact 4-tier agreement 0.934, Cohen kappa 0.583, from the original values kept in source_ref.
    tiers_a = [json.loads(a[r["id"]]["source_ref"])["original"]["tier_a"] for r in joined]
    tiers_b = [r["tier_b"] for r in joined]
    assert round(sum(x == y for x, y in zip(tiers_a, tiers_b, strict=False)) / len(joined), 3) == 0.934
    assert round(kappa(tiers_a, tiers_b), 3) == 0.583

    again = [import_records(con, imp.spec, imp.records, "run-2") for imp in pilot_imports(pilot_dir)]
    assert all(r.already_imported for r in again)
    assert con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0] == 1290 + 1432 + 496


def test_imported_labels_asset(tmp_path: Path, pilot_dir: Path):
    bad = tmp_path / "external.json"
    bad.write_text(json.dumps([{**GOOD, "id": "W105148950"}, {**GOOD, "id": "W108330266", "confidence": "certain"}]))
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
    assert md["dagster/row_count"] == 1290 + 1928 + 2
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
    assert "external.json" in md["files_already_imported"] and md["dagster/row_count"] == 1290 + 1928 + 2
    with MetacanStorage(data_dir=str(tmp_path / "data")).connect() as con:
        assert con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0] == 1290 + 1928 + 2
    # A run without sources still publishes every current imported label of the store.
    assert (
        metadata(materialize(tmp_path, {"pilot_dirs": []}), "imported_labels")["dagster/row_count"] == 1290 + 1928 + 2
    )


def test_missing_default_pilot_folder_is_skipped_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("METACAN_PILOT_DIR", str(tmp_path / "no-such-folder"))
    result = materialize(tmp_path)
    assert result.success
    md = metadata(result, "imported_labels")
    assert md["dagster/row_count"] == 0 and "no-such-folder" in md["notes"] and "not found" in md["notes"]
    assert metadata(result, "teacher_agreement")["note"].startswith("Nothing to compare: 0 teacher configuration(s)")


def test_read_stored_and_record_row_say_what_an_import_would_add(tmp_path: Path):
    """After one import, read_stored holds its file SHA-256, the current content of each work and the design;
    record_row finds the same record unchanged, a changed reason changed, and an id naming no work failed with
    where the record is."""
    from metacan_pipeline.teachers.imports import (
        import_provenance,
        read_stored,
        record_row,
        work_id_of,
    )
    from metacan_pipeline.teachers.label_files import SourceRecord

    path = tmp_path / "labels.json"
    path.write_text(json.dumps([{**GOOD, "sel_prob": 0.5}]))
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

    same = row_of({**GOOD, "sel_prob": 0.5})
    assert same.unchanged and same.error is None and same.design == (None, 0.5, 2.0)
    changed = row_of({**GOOD, "reason": "another reason"})
    assert not changed.unchanged and changed.row["status"] == "labelled" and changed.design is None
    bad = row_of({**GOOD, "id": "A1"})
    assert bad.work_id is None and bad.row["status"] == "failed"
    assert bad.row["error"].startswith(f"{path} record 0: id='A1' is not an OpenAlex work id")
    con.close()
