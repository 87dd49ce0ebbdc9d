"""Tests of the coding store's methods for the coding pages (metacan_pipeline.audit.coding.store, on a real SQLite
file): sessions, the adjudicator role, a coder's own progress and answers, the adjudication queue, the served
protocol."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest

from metacan_pipeline.audit.coding.errors import CodingError
from metacan_pipeline.audit.coding.store import CodingStore

P = "protocol-0123456789ab"
ANSWER = {
    "categories": [],
    "study_design": "observational",
    "genre": "empirical",
    "about_ca_system": False,
    "about_ca_topic": True,
}


def row(i: int) -> dict:
    return {"id": f"W{500 + i}", "title_text": f"Work {i}", "language": "en", "position": i}


@pytest.fixture()
def store(tmp_path):
    s = CodingStore(tmp_path / "audit" / "coding.sqlite")
    s.load_tasks(P, [row(i) for i in range(4)])
    for name in ("ann", "bob", "cy"):
        s.add_coder(name)
    yield s
    s.close()


def test_a_session_names_its_coder_until_sign_out_expiry_or_revocation(store, tmp_path):
    session = store.open_session("ann")
    assert store.session_coder(session) == "ann" and store.session_coder("x" * 43) is None
    stored = sqlite3.connect(tmp_path / "audit" / "coding.sqlite").execute("SELECT * FROM coding_sessions").fetchall()
    assert session not in repr(stored)  # only its SHA-256
    store.end_session(session)
    assert store.session_coder(session) is None
    expired = store.open_session("bob", ttl=dt.timedelta(seconds=-1))
    assert store.session_coder(expired) is None
    live = store.open_session("bob")
    store.revoke_coder("bob")
    assert store.session_coder(live) is None  # revoking a coder ends their sessions at once
    with pytest.raises(CodingError, match="revoked"):
        store.open_session("bob")


def test_the_adjudicator_role_is_granted_checked_and_revoked(store):
    assert not store.has_role("cy")
    store.grant_role("cy")
    assert store.has_role("cy") and store.coder_roles() == {"cy": ["adjudicator"]}
    store.revoke_role("cy")
    assert not store.has_role("cy")
    with pytest.raises(CodingError, match="is not adjudicator"):
        store.revoke_role("cy")
    with pytest.raises(CodingError, match="role="):
        store.grant_role("cy", "editor")
    store.grant_role("cy")  # again after a revocation
    store.revoke_coder("cy")
    assert not store.has_role("cy")  # a revoked coder holds no role


def test_progress_and_answers_are_the_coders_own(store):
    a = store.next_task(P, "ann")
    store.submit(P, a["id"], "ann", ANSWER)
    b = store.next_task(P, "bob")
    assert b["id"] == a["id"]
    assert store.coder_progress(P, "ann") == {"tasks": 4, "done": 1, "to_do": 3}
    assert store.coder_progress(P, "bob") == {"tasks": 4, "done": 0, "to_do": 4}
    store.submit(P, b["id"], "bob", {**ANSWER, "genre": "review"})
    # cy cannot take the work two others coded
    assert store.coder_progress(P, "cy") == {"tasks": 4, "done": 0, "to_do": 3}
    assert [x["coder"] for x in store.coder_answers(P, "ann")] == ["ann"]
    assert store.holds_task(P, a["id"], "ann") and not store.holds_task(P, a["id"], "cy")
    held = store.next_task(P, "cy")
    assert store.holds_task(P, held["id"], "cy") and store.task(P, held["id"])["evidence"]["title"]
    assert store.task(P, "W1") is None


def test_an_adjudicator_settles_only_works_they_did_not_code(store):
    first = store.next_task(P, "ann")
    store.submit(P, first["id"], "ann", ANSWER)
    store.next_task(P, "bob")
    store.submit(P, first["id"], "bob", {**ANSWER, "genre": "review"})
    store.grant_role("ann")
    with pytest.raises(CodingError, match="not an adjudicator"):
        store.adjudicate(P, first["id"], "cy", ANSWER, evidence_sha256=first["evidence_sha256"])
    with pytest.raises(CodingError, match="another adjudicator"):
        store.adjudicate(P, first["id"], "ann", ANSWER, evidence_sha256=first["evidence_sha256"])
    assert store.adjudication_queue(P, "ann") == ([], 1)
    store.grant_role("cy")
    items, own = store.adjudication_queue(P, "cy")
    assert [d["id"] for d in items] == [first["id"]] and own == 0 and items[0]["fields"] == ["genre"]
    store.adjudicate(P, first["id"], "cy", ANSWER, evidence_sha256=first["evidence_sha256"])
    assert store.adjudication_queue(P, "cy") == ([], 0)
    assert store.adjudicated_codes(P)[0]["basis"] == "adjudicated"


def test_the_served_protocol_is_the_newest_load(store):
    assert store.serving_protocol() is None
    counts = {"added": 4, "evidence_changed": 0, "moved": 0, "unchanged": 0}
    store.record_load(P, counts, instructions_version="v1", source="cli", sample_works=4, missing=0)
    store.record_load(
        "protocol-ba9876543210", counts, instructions_version="v2", source="cli", sample_works=4, missing=0
    )
    assert store.serving_protocol()["protocol_id"] == "protocol-ba9876543210"
    assert store.serving_protocol()["instructions_version"] == "v2"


def test_an_agreed_code_cannot_be_adjudicated_over(store):
    """Two coders agree: the work is not a disagreement, and an adjudication posted for it (the page refuses to show
    it, a forged POST still reached the store) is refused, so the agreed code stays the human code."""
    first = store.next_task(P, "ann")
    store.submit(P, first["id"], "ann", ANSWER)
    store.next_task(P, "bob")
    store.submit(P, first["id"], "bob", ANSWER)
    store.grant_role("cy")
    with pytest.raises(CodingError, match="has no disagreement to settle"):
        store.adjudicate(P, first["id"], "cy", {**ANSWER, "genre": "review"}, evidence_sha256=first["evidence_sha256"])
    [code] = store.adjudicated_codes(P)
    assert code["basis"] == "agreed" and code["genre"] == ANSWER["genre"]
    # one coder so far: nothing to settle either
    second = store.next_task(P, "ann")
    store.submit(P, second["id"], "ann", ANSWER)
    with pytest.raises(CodingError, match="has no disagreement to settle"):
        store.adjudicate(P, second["id"], "cy", ANSWER, evidence_sha256=second["evidence_sha256"])
