"""Tests of the abstract archive of the coding store (metacan_pipeline/audit/coding/abstracts.py): what a coder was
shown is appended once under the SHA-256 of its text, never changed, and an answer records that hash; a store written
before the archive existed is brought up to date in place."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from metacan_pipeline.audit.coding.errors import CodingError
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline_tests.audit.test_coding import META, P, work_row

SECTIONS = [("Background", "Coders read this."), ("Methods", "We archived it.")]
TEXT = "Background\nCoders read this.\n\nMethods\nWe archived it."


@pytest.fixture()
def store(tmp_path):
    s = CodingStore(tmp_path / "audit" / "coding.sqlite")
    s.load_tasks(P, [work_row(i) for i in range(2)])
    s.add_coder("alice")
    yield s
    s.close()


def test_an_abstract_shown_is_archived_once_under_the_sha256_of_its_text_and_never_changed(store):
    digest = store.archive_abstract("W100", TEXT, "europepmc", SECTIONS, "2026-12-07T12:00:00+00:00")
    assert digest == hashlib.sha256(TEXT.encode("utf-8")).hexdigest()
    again = store.archive_abstract("W100", TEXT, "europepmc", SECTIONS, "2026-12-07T13:00:00+00:00")
    assert again == digest
    rows = store._con.execute("SELECT * FROM coding_abstracts").fetchall()
    assert len(rows) == 1  # appended once: the first showing is kept
    row = store.archived_abstract(digest, "W100")
    assert (row["id"], row["source"], row["abstract_text"], row["fetched_at"]) == (
        "W100",
        "europepmc",
        TEXT,
        "2026-12-07T12:00:00+00:00",
    )
    assert row["abstract_sections"] == SECTIONS and row["first_shown_at"]
    assert store.archived_abstract(digest, "W101") is None  # archived for one work only
    for statement in ("UPDATE coding_abstracts SET abstract_text = 'x'", "DELETE FROM coding_abstracts"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            store._con.execute(statement)
    with pytest.raises(CodingError, match="expected one of"):
        store.archive_abstract("W100", TEXT, "pubmed", SECTIONS, None)
    with pytest.raises(CodingError, match="empty abstract"):
        store.archive_abstract("W100", "  ", "crossref", [], None)


def test_an_answer_records_the_abstract_it_was_given_and_a_foreign_hash_is_refused(store):
    digest = store.archive_abstract("W100", TEXT, "crossref", SECTIONS, None)
    store.submit(P, "W100", "alice", META, abstract_sha256=digest)
    store.submit(P, "W101", "alice", META)  # a page that showed no abstract records none
    got = dict(store._con.execute("SELECT id, abstract_sha256 FROM coding_answers ORDER BY rowid").fetchall())
    assert got == {"W100": hashlib.sha256(TEXT.encode()).hexdigest(), "W101": None}
    assert store.my_answer(P, "W100", "alice")["abstract_sha256"] == digest
    for foreign in ("0" * 64, digest):  # never archived; archived for another work
        with pytest.raises(CodingError, match="is not an abstract this coding store showed for W101") as err:
            store.submit(P, "W101", "alice", META, abstract_sha256=foreign)
        assert err.value.field == "abstract_sha256"
    assert store._con.execute("SELECT count(*) FROM coding_answers").fetchone()[0] == 2


def test_a_store_written_before_the_archive_gets_it_in_place_and_keeps_every_answer(tmp_path):
    path = tmp_path / "coding.sqlite"
    with CodingStore(path) as s:
        s.load_tasks(P, [work_row(0)])
        s.add_coder("alice")
        s.submit(P, "W100", "alice", META)
    con = sqlite3.connect(path)  # the layout of a store written before: no archive, no abstract_sha256
    con.execute("DROP TABLE coding_abstracts")
    con.execute("ALTER TABLE coding_answers DROP COLUMN abstract_sha256")
    con.commit()
    before = con.execute("SELECT * FROM coding_answers").fetchall()
    con.close()
    with CodingStore(path) as s:
        cols = [r[1] for r in s._con.execute("PRAGMA table_info(coding_answers)")]
        assert cols[-1] == "abstract_sha256"
        rows = s._con.execute("SELECT * FROM coding_answers").fetchall()
        assert [tuple(r)[:-1] for r in rows] == before and rows[0]["abstract_sha256"] is None
        digest = s.archive_abstract("W100", TEXT, "openalex", [(None, TEXT)], None)
        s.submit(P, "W100", "alice", {**META, "confidence": "high"}, abstract_sha256=digest)
        latest = s.my_answer(P, "W100", "alice")
        assert (latest["confidence"], latest["abstract_sha256"]) == ("high", digest)
        assert json.loads(s._con.execute("SELECT abstract_sections FROM coding_abstracts").fetchone()[0]) == [
            [None, TEXT]
        ]


def test_a_label_studio_export_archives_the_abstract_it_shows_and_the_import_records_its_hash(store, tmp_path):
    import datetime as dt

    from metacan_pipeline.audit.coding.labelstudio import export_tasks, labeling_config
    from metacan_pipeline.audit.coding.labelstudio_import import import_export
    from metacan_pipeline.publish.abstracts import Abstract
    from metacan_pipeline_tests.audit.test_labelstudio import label_studio_export

    when = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
    answers = {
        "W100": Abstract(
            "W100",
            "ok",
            TEXT,
            None,
            when,
            "crossref",
            tuple(SECTIONS),
            asked=(("openalex", "none"), ("crossref", "ok")),
        ),
        "W101": Abstract("W101", "none", None, None, when, asked=(("openalex", "none"), ("europepmc", "no_id"))),
    }
    asked_for: list[list[str]] = []
    tasks = export_tasks(store, P, lambda ids: asked_for.append(ids) or answers)
    assert asked_for == [["W100", "W101"]]
    data = {t["data"]["work_id"]: t["data"] for t in tasks}
    digest = hashlib.sha256(TEXT.encode("utf-8")).hexdigest()
    assert (data["W100"]["abstract"], data["W100"]["abstract_sha256"]) == (TEXT, digest)
    assert data["W100"]["abstract_source"] == "Abstract from Crossref, fetched when these tasks were exported."
    assert data["W101"]["abstract"].startswith("No abstract: OpenAlex has none, and the work has no DOI or PMID")
    assert data["W101"]["abstract_sha256"] is None
    assert store.archived_abstract(digest, "W100")["source"] == "crossref"
    assert '<Text name="abstract_source" value="$abstract_source"/>' in labeling_config()
    export = tmp_path / "project-7.json"
    export.write_text(json.dumps(label_studio_export(tasks)))
    report = import_export(store, export, {"alice@uni.ca": "alice"})
    assert report.appended == 3  # W100 by alice and by annotator 12, W101 by alice (label_studio_export's codes)
    got = {(a["id"], a["coder"]): a["abstract_sha256"] for a in store.latest_answers(P)}
    assert got == {("W100", "alice"): digest, ("W100", "labelstudio:12"): digest, ("W101", "alice"): None}
    # an export whose abstract hash was edited: the annotation is refused, naming the hash
    forged = label_studio_export(tasks)
    forged[0]["data"]["abstract_sha256"] = "0" * 64
    for t in forged:
        for a in t["annotations"]:
            a["id"] += 100
            a["updated_at"] = "2026-03-10T08:00:00.000000Z"
    export.write_text(json.dumps(forged))
    refused = [r.reason for r in import_export(store, export, {"alice@uni.ca": "alice"}).refusals]
    assert sum("is not an abstract this coding store showed for W100" in r for r in refused) == 2
