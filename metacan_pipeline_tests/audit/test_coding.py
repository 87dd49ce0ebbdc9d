"""Tests of metacan_pipeline.audit.coding.store: the coding store on real SQLite files."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import sqlite3
import threading

import pytest

from metacan_pipeline.audit.coding.errors import CodingError
from metacan_pipeline.audit.coding.evidence import EVIDENCE_FIELDS
from metacan_pipeline.audit.coding.rules import parse_time
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.audit.coding.validate import validate_answer
from metacan_pipeline.tables import catalog
from metacan_pipeline.tables.coding import TABLES

P = "audit-v1"
META = {
    "categories": ["metaresearch", "open_science"],
    "domain": "reproducibility",
    "study_design": "observational",
    "genre": "empirical",
    "about_ca_system": True,
    "about_ca_topic": False,
    "confidence": "medium",
    "note": "registered reports in Canadian journals",
}
NOT_META = {
    "categories": [],
    "domain": None,
    "study_design": "randomized_trial",
    "genre": "empirical",
    "about_ca_system": False,
    "about_ca_topic": True,
}

#: Machine fields a frame or audit-sample row carries that must never reach a coder.
MACHINE = {
    "score_codex_metaresearch": 0.91,
    "candidate_categories": ["metaresearch"],
    "consensus_categories": ["metaresearch"],
    "prediction_status": "machine_predicted_unvalidated",
    "label_categories": ["metaresearch"],
    "teacher": "codex",
    "reason": "the teacher said so",
    "ca_aff": True,
    "route_key": "ca_aff",
    "stratum": "consensus:metaresearch",
    "topic": "Meta-analysis and systematic reviews",
    "field": "Medicine",
}


def work_row(i: int, **extra) -> dict:
    return {
        "id": f"W{100 + i}",
        "title": f"<i>Work</i> {i}",
        "title_text": f"Work {i}",
        "publication_year": 2019 + i % 3,
        "language": "en",
        "type": "article",
        "venue_name": "Canadian Journal of Meta-Research",
        "ca_institutions": ["University of Toronto", "McGill University"],
        "funder_names": ["Natural Sciences and Engineering Research Council"],
        "keywords": ["reproducibility", "peer review"],
        "doi": f"https://doi.org/10.1234/w{i}",
        "position": i,
        **MACHINE,
        **extra,
    }


@pytest.fixture()
def store(tmp_path):
    s = CodingStore(tmp_path / "audit" / "coding.sqlite")
    yield s
    s.close()


@pytest.fixture()
def coded(store):
    """A store with 4 tasks and the coders alice, bob, carol (tokens by name)."""
    store.load_tasks(P, [work_row(i) for i in range(4)])
    return store, {n: store.add_coder(n) for n in ("alice", "bob", "carol")}


def test_the_store_file_has_the_catalog_tables_in_wal_mode_and_answers_cannot_change(coded, tmp_path):
    store, _ = coded
    store.submit(P, "W100", "alice", META)
    con = sqlite3.connect(store.path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert names == {t.name for t in TABLES} and all(catalog()[t.name].store == "sqlite" for t in TABLES)
    cols = [r[1] for r in con.execute("PRAGMA table_info(coding_answers)")]
    assert cols == catalog()["coding_answers"].schema.names
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        con.execute("UPDATE coding_answers SET domain = 'methods'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        con.execute("DELETE FROM coding_answers")
    assert con.execute("SELECT categories, typeof(categories) FROM coding_answers").fetchone() == (
        '["metaresearch", "open_science"]',
        "text",
    )


def test_a_token_signs_in_and_only_its_sha256_is_stored_never_logged(store, caplog):
    caplog.set_level(logging.DEBUG)
    token = store.add_coder("alice")
    assert len(token) >= 40 and store.coder_for_token(token) == "alice"
    assert store.coder_for_token(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert store.coder_for_token("") is None and store.coder_for_token(None) is None
    raw = store.path.read_bytes() + store.path.with_name("coding.sqlite-wal").read_bytes()
    assert token.encode() not in raw
    assert hashlib.sha256(token.encode()).hexdigest().encode() in raw
    stored = sqlite3.connect(store.path).execute("SELECT token_sha256 FROM coders").fetchone()[0]
    assert stored == hashlib.sha256(token.encode()).hexdigest()
    assert "alice" in caplog.text and token not in caplog.text
    assert store.list_coders()[0].keys() == {"coder", "created_at", "revoked_at"}


def test_a_name_present_is_refused_names_are_validated_and_a_revoked_token_stops_working(store):
    token = store.add_coder("alice")
    for name in ("alice", "ALICE"):
        with pytest.raises(CodingError, match="exists already") as exc:
            store.add_coder(name)
        assert exc.value.field == "coder"
    for bad in ("", "a b", "labelstudio:x@y.org", "-x", "x" * 65):
        with pytest.raises(CodingError, match="not valid"):
            store.add_coder(bad)
    store.revoke_coder("alice")
    assert store.coder_for_token(token) is None
    assert store.list_coders()[0]["revoked_at"] is not None
    with pytest.raises(CodingError, match="revoked already"):
        store.revoke_coder("alice")
    with pytest.raises(CodingError, match="exists already"):
        store.add_coder("alice")


def test_task_evidence_keeps_only_the_allow_list_and_drops_every_machine_field(store):
    store.load_tasks(P, [work_row(0)])
    (task,) = store.tasks(P)
    ev = task["evidence"]
    assert set(ev) == set(EVIDENCE_FIELDS) | {"full_text_url"}
    assert not set(MACHINE) & set(ev)
    assert ev["title"] == "Work 0" and ev["year"] == 2019 and ev["venue"] == "Canadian Journal of Meta-Research"
    assert ev["funders"] == ["Natural Sciences and Engineering Research Council"]
    assert ev["full_text_url"] == "https://doi.org/10.1234/w0"
    stored = sqlite3.connect(store.path).execute("SELECT evidence_json FROM coding_tasks").fetchone()[0]
    for word in ("0.91", "machine_predicted", "codex", "teacher said", "consensus", "Meta-analysis and", "Medicine"):
        assert word not in stored
    assert task["evidence_sha256"] == hashlib.sha256(stored.encode()).hexdigest()


def test_load_tasks_is_idempotent_and_a_changed_evidence_keeps_the_old_answers_version(coded):
    store, _ = coded
    assert store.load_tasks(P, [work_row(i) for i in range(4)]) == {
        "added": 0,
        "evidence_changed": 0,
        "moved": 0,
        "unchanged": 4,
    }
    old = store.tasks(P)[0]["evidence_sha256"]
    store.submit(P, "W100", "alice", META)
    counts = store.load_tasks(P, [work_row(0, title_text="Work 0 (corrected title)")])
    assert counts == {"added": 0, "evidence_changed": 1, "moved": 0, "unchanged": 0}
    new = store.tasks(P)[0]
    assert new["evidence_sha256"] != old and new["evidence"]["title"] == "Work 0 (corrected title)"
    (answer,) = store.latest_answers(P)
    assert answer["evidence_sha256"] == old and store.evidence(old)["title"] == "Work 0"
    store.submit(P, "W100", "bob", META)
    assert {a["coder"]: a["evidence_sha256"] for a in store.latest_answers(P)} == {
        "alice": old,
        "bob": new["evidence_sha256"],
    }


def test_two_coders_each_get_the_first_task_and_a_third_does_not(coded):
    store, _ = coded
    assert store.next_task(P, "alice")["id"] == "W100"
    assert store.next_task(P, "bob")["id"] == "W100"
    third = store.next_task(P, "carol")
    assert third["id"] == "W101" and set(third) == {"protocol_id", "id", "position", "evidence", "evidence_sha256"}
    store.submit(P, "W100", "alice", META)
    store.submit(P, "W100", "bob", META)
    with pytest.raises(CodingError, match="has its 2 coders already") as exc:
        store.submit(P, "W100", "carol", META)
    assert exc.value.field == "coder"


def test_a_coder_resumes_at_their_next_unanswered_task_after_a_restart(coded, tmp_path):
    store, _ = coded
    store.next_task(P, "alice")
    store.submit(P, "W100", "alice", META)
    assert store.next_task(P, "alice")["id"] == "W101"  # handed out, not answered: she stops here
    store.close()
    again = CodingStore(store.path)
    try:
        assert again.next_task(P, "alice")["id"] == "W101"
        again.submit(P, "W101", "alice", NOT_META)
        assert again.next_task(P, "alice")["id"] == "W102"
        assert again.my_answer(P, "W101", "alice")["categories"] == []
        assert again.my_answer(P, "W101", "bob") is None
    finally:
        again.close()


def test_an_expired_claim_frees_the_task_for_another_coder(tmp_path):
    store = CodingStore(tmp_path / "c.sqlite", claim_ttl=dt.timedelta(0))
    store.load_tasks(P, [work_row(0), work_row(1)])
    for n in ("alice", "bob", "carol"):
        store.add_coder(n)
    store.next_task(P, "alice")
    store.next_task(P, "bob")
    assert store.next_task(P, "carol")["id"] == "W100"
    store.close()


def test_a_resubmission_appends_a_row_and_the_latest_counts(coded):
    store, _ = coded
    first = store.submit(P, "W100", "alice", META)
    second = store.submit(P, "W100", "alice", {**META, "domain": "methods"})
    rows = sqlite3.connect(store.path).execute("SELECT answer_id, domain FROM coding_answers ORDER BY rowid").fetchall()
    assert rows == [(first, "reproducibility"), (second, "methods")]
    (latest,) = store.latest_answers(P)
    assert latest["answer_id"] == second and latest["domain"] == "methods" and latest["source"] == "site"
    assert latest["submitted_at"].endswith("Z") and latest["evidence_sha256"] == store.tasks(P)[0]["evidence_sha256"]


@pytest.mark.parametrize(
    ("answer", "field", "words"),
    [
        ({**NOT_META, "domain": "methods"}, "domain", "without the category 'metaresearch'"),
        ({**NOT_META, "categories": ["insufficient_payload", "sts"]}, "categories", "must be the only category"),
        ({**NOT_META, "categories": ["metascience"]}, "categories", "'metascience' is not in the vocabulary"),
        ({**NOT_META, "genre": "preprint"}, "genre", "genre='preprint' is not in the vocabulary"),
        ({**NOT_META, "about_ca_topic": "yes"}, "about_ca_topic", "is not a boolean"),
        ({**META, "domain": None}, "domain", "domain is missing"),
        ({k: v for k, v in NOT_META.items() if k != "study_design"}, "study_design", "mark the answer unresolved"),
        ({**NOT_META, "note": "x" * 1001}, "note", "at most 1000"),
        ({**NOT_META, "reason": "r"}, "reason", "not an answer field"),
        ({**NOT_META, "unresolved": "no"}, "unresolved", "not a boolean"),
    ],
)
def test_an_invalid_answer_is_refused_naming_the_field(coded, answer, field, words):
    store, _ = coded
    with pytest.raises(CodingError) as exc:
        store.submit(P, "W100", "alice", answer)
    assert exc.value.field == field and words in str(exc.value) and str(exc.value).startswith(field)
    assert store.latest_answers(P) == []


def test_unresolved_allows_empty_fields_but_what_it_gives_is_validated():
    assert validate_answer({"unresolved": True, "note": "title only, in Inuktitut"}, "W1") == {
        "categories": None,
        "domain": None,
        "study_design": None,
        "genre": None,
        "about_ca_system": None,
        "about_ca_topic": None,
        "confidence": None,
        "unresolved": True,
        "note": "title only, in Inuktitut",
    }
    assert validate_answer({"unresolved": True, "categories": ["metaresearch"]}, "W1")["categories"] == ["metaresearch"]
    with pytest.raises(CodingError, match="genre"):
        validate_answer({"unresolved": True, "genre": "blog"}, "W1")
    out = validate_answer({**META, "categories": ["open_science", "metaresearch", "open_science"]}, "W1")
    assert out["categories"] == ["metaresearch", "open_science"]  # vocabulary order, duplicates removed


def test_submit_refuses_unknown_coders_tasks_and_evidence_versions(coded):
    store, _ = coded
    with pytest.raises(CodingError, match="no coder named 'dave'"):
        store.submit(P, "W100", "dave", META)
    with pytest.raises(CodingError, match="not a task of protocol"):
        store.submit(P, "W999", "alice", META)
    with pytest.raises(
        CodingError, match="'0{64}' is a foreign evidence hash: this coding store never showed it for W100"
    ):
        store.submit(P, "W100", "alice", META, evidence_sha256="0" * 64)
    other = store.tasks(P)[1]
    with pytest.raises(
        CodingError, match=f"'{other['evidence_sha256']}' is the evidence of {other['id']}, not of W100"
    ):
        store.submit(P, "W100", "alice", META, evidence_sha256=other["evidence_sha256"])
    assert store.latest_answers(P) == []  # neither refused answer was stored
    store.revoke_coder("carol")
    with pytest.raises(CodingError, match="revoked"):
        store.next_task(P, "carol")


def test_disagreements_show_both_answers_and_an_adjudication_clears_them(coded):
    store, _ = coded
    store.submit(P, "W100", "alice", META)
    store.submit(P, "W100", "bob", {**META, "domain": "methods", "about_ca_system": False, "confidence": "high"})
    store.submit(P, "W101", "alice", NOT_META)
    store.submit(P, "W101", "bob", {**NOT_META, "confidence": "low", "note": "different note"})  # agree on outcomes
    store.submit(P, "W102", "alice", NOT_META)  # one coder so far
    with pytest.raises(CodingError, match="adjudication needs 2"):
        store.submit(P, "W102", "carol", NOT_META, role="adjudication")
    (d,) = store.disagreements(P)
    assert d["id"] == "W100" and d["fields"] == ["domain", "about_ca_system"]
    assert [(a["coder"], a["domain"], a["about_ca_system"]) for a in d["answers"]] == [
        ("alice", "reproducibility", True),
        ("bob", "methods", False),
    ]
    assert store.task_progress(P) == {
        "tasks": 4,
        "no_coder": 1,
        "one_coder": 1,
        "two_coders": 2,
        "agreed": 1,
        "disagreements": 1,
        "adjudicated": 0,
        "final_codes": 2,
        "answers": 5,
        "by_coder": {"alice": 3, "bob": 2},
    }
    store.submit(P, "W100", "carol", {"unresolved": True, "note": "ask the PI"}, role="adjudication")
    assert [x["id"] for x in store.disagreements(P)] == ["W100"]  # an unresolved adjudication settles nothing
    adj = store.submit(P, "W100", "carol", {**META, "domain": "methods"}, role="adjudication")
    assert store.disagreements(P) == []
    codes = {c["id"]: c for c in store.adjudicated_codes(P)}
    assert codes["W100"]["basis"] == "adjudicated" and codes["W100"]["domain"] == "methods"
    assert codes["W100"]["answer_ids"][-1] == adj and codes["W100"]["coders"] == ["alice", "bob"]
    assert (
        codes["W101"]["basis"] == "agreed" and codes["W101"]["categories"] == [] and not codes["W101"]["single_coder"]
    )
    assert codes["W102"]["basis"] == "single_coder" and codes["W102"]["single_coder"] is True
    assert set(codes) == {"W100", "W101", "W102"}
    assert json.loads(json.dumps(codes))  # plain JSON values, ready for the estimators


def test_an_unresolved_code_goes_to_adjudication_even_when_both_are_unresolved(coded):
    store, _ = coded
    store.submit(P, "W100", "alice", {"unresolved": True})
    store.submit(P, "W100", "bob", {"unresolved": True})
    assert [(d["id"], d["fields"]) for d in store.disagreements(P)] == [("W100", ["unresolved"])]
    assert store.adjudicated_codes(P) == []


def test_a_web_server_thread_and_a_second_connection_write_at_once(coded):
    store, _ = coded
    other = CodingStore(store.path)
    errors: list[Exception] = []

    def code(s: CodingStore, coder: str) -> None:
        try:
            for i in range(4):
                s.submit(P, f"W10{i}", coder, NOT_META)
        except Exception as exc:  # collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=code, args=(store, "alice")), threading.Thread(target=code, args=(other, "bob"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert errors == [] and store.task_progress(P)["agreed"] == 4


def test_parse_time_gives_the_store_format_or_none_for_a_time_without_a_utc_value():
    assert parse_time("2026-03-09T22:16:08.728378Z") == "2026-03-09T22:16:08.728378Z"
    assert parse_time("2026-03-09T17:16:08-05:00") == "2026-03-09T22:16:08.000000Z"
    # year 1 at +05:00 is before year 1 in UTC: unreadable, refused like any bad time, never a traceback
    assert parse_time("0001-01-01T00:00:00+05:00") is None
    assert parse_time("yesterday") is None


def test_a_read_only_store_refuses_writes_and_a_missing_one_is_named(coded, tmp_path):
    from metacan_pipeline.audit.coding.errors import CodingStoreError

    store, _ = coded
    with CodingStore(store.path, read_only=True) as ro:
        assert [c["coder"] for c in ro.list_coders()] == ["alice", "bob", "carol"]
        with pytest.raises(CodingStoreError, match=rf"coding store {store.path} was opened read-only"):
            ro.add_coder("dave")
    missing = tmp_path / "nowhere" / "coding.sqlite"
    with pytest.raises(CodingStoreError, match=rf"no coding store at {missing}: check --data-dir"):
        CodingStore(missing, read_only=True)
    assert not missing.parent.exists()
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(CodingStoreError, match=r"lacks the tables \['coders', .*not a metacan coding store"):
        CodingStore(other, read_only=True)
