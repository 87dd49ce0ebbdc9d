"""Tests of metacan_pipeline.audit.protocol.locked: the locked protocol, its content hash and id, the coder instructions
and the append-only protocol store."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from metacan_pipeline.audit.protocol.design import DEFAULT_PLANS
from metacan_pipeline.audit.protocol.locked import (
    STRATA,
    AuditProtocol,
    GateThresholds,
    HeadUnderTest,
    StratumPlan,
    canonical_json,
    current_protocol,
    current_protocol_id,
    instructions_lock,
    load_instructions,
    load_protocol,
    record_protocol,
)
from metacan_pipeline.vocab import CATEGORIES, DOMAINS, GENRES, LABEL_FIELDS, STUDY_DESIGNS

INSTRUCTIONS_DIR = Path(__file__).resolve().parents[2] / "metacan_pipeline/audit/instructions"


def protocol(**changes) -> AuditProtocol:
    v1 = load_instructions("v1")
    base = AuditProtocol(
        classifier_version="metacan-v0-hybrid-0123456789ab",
        decision_rule="consensus",
        heads=(
            HeadUnderTest("metaresearch", True, "passed", 0.05, 12, 0.41, "quota"),
            HeadUnderTest("open_science", False, "codex positives 3 < 20", 0.01, 2, 0.2, "score_quantile"),
        ),
        gate=GateThresholds(),
        strata=DEFAULT_PLANS,
        near_band=0.5,
        salt="metacan-audit-v1",
        trained_works="own_stratum",
        frame_build_id="frame-0123456789ab",
        instructions_version=v1.version,
        instructions_sha256=v1.sha256,
    )
    return dataclasses.replace(base, **changes)


def test_the_v1_instructions_match_their_lock_and_cover_every_field_a_coder_answers():
    v1 = load_instructions("v1")
    raw = (INSTRUCTIONS_DIR / "v1.md").read_bytes()
    assert v1.sha256 == hashlib.sha256(raw).hexdigest() == instructions_lock()["v1"] and len(v1.sha256) == 64
    text = v1.text
    # the section 3 fields but the teacher's reason (a coder writes a note), plus unresolved and the note
    for field in [f for f in LABEL_FIELDS if f != "reason"] + ["unresolved", "note"]:
        assert f"### {field}" in text, field
    for value in (*CATEGORIES, *DOMAINS[1:], *STUDY_DESIGNS, *GENRES):
        assert value in text, value
    assert "masking" in text.lower() and "Do not open the MetaCan site" in text
    assert "Code a French work exactly as you would code the same work in English" in text
    assert "1,000 characters" in text  # the coding store's note limit


def test_an_edited_or_unlocked_instructions_file_is_refused(tmp_path):
    shutil.copy(INSTRUCTIONS_DIR / "v1.md", tmp_path / "v1.md")
    shutil.copy(INSTRUCTIONS_DIR / "versions.toml", tmp_path / "versions.toml")
    assert load_instructions("v1", tmp_path) == load_instructions("v1")
    (tmp_path / "v1.md").write_text((INSTRUCTIONS_DIR / "v1.md").read_text() + "\nOne more rule.\n")
    with pytest.raises(ValueError, match="a published version is never edited"):
        load_instructions("v1", tmp_path)
    shutil.copy(tmp_path / "v1.md", tmp_path / "v2.md")
    with pytest.raises(ValueError, match="have no line in versions.toml"):
        load_instructions("v2", tmp_path)
    with pytest.raises(FileNotFoundError, match="'v9' not found"):
        load_instructions("v9")


def test_the_id_is_a_content_hash_stable_for_equal_content_and_new_for_any_change(tmp_path):
    p = protocol()
    assert re.fullmatch(r"protocol-[0-9a-f]{12}", p.protocol_id)
    assert p.protocol_id == protocol().protocol_id == f"protocol-{p.content_sha256[:12]}"
    assert p.content_sha256 == hashlib.sha256(p.canonical_json().encode()).hexdigest()
    assert AuditProtocol.from_json(p.canonical_json()) == p  # the stored JSON is the whole protocol
    assert " " not in p.canonical_json().split('"gate_reason"')[0]  # canonical: no whitespace between tokens
    # a changed gate threshold, rule, plan, salt or classifier is a new protocol
    changed = [
        protocol(gate=GateThresholds(precision_lower=0.85)),
        protocol(decision_rule="candidate"),
        protocol(strata=(dataclasses.replace(DEFAULT_PLANS[0], min_n=21), *DEFAULT_PLANS[1:])),
        protocol(salt="another"),
        protocol(classifier_version="metacan-v0-hybrid-ba9876543210"),
        protocol(trained_works="exclude"),
        protocol(min_n=20),
    ]
    assert len({p.protocol_id, *(c.protocol_id for c in changed)}) == 1 + len(changed)
    # an edited instructions file, published as a new locked version, is a new protocol
    edited = (INSTRUCTIONS_DIR / "v1.md").read_text() + "\nAlso code the funder's country.\n"
    (tmp_path / "v2.md").write_text(edited)
    (tmp_path / "versions.toml").write_text(f'v2 = "{hashlib.sha256(edited.encode()).hexdigest()}"\n')
    v2 = load_instructions("v2", tmp_path)
    other = protocol(instructions_version=v2.version, instructions_sha256=v2.sha256)
    assert other.protocol_id != p.protocol_id and other.instructions_sha256 != p.instructions_sha256


def test_the_minimum_n_is_locked_in_the_protocol_and_a_format_1_protocol_keeps_its_id():
    p = protocol(min_n=40)
    assert json.loads(p.canonical_json())["min_n"] == 40 and json.loads(p.canonical_json())["protocol_format"] == 2
    assert AuditProtocol.from_json(p.canonical_json()).min_n == 40
    # a protocol locked before min_n existed: its stored JSON has no min_n; it loads with the constant its reports
    # used (30), and its hash and id are those of the stored text, so the codes made under it still point to it
    old_content = {k: v for k, v in protocol().content().items() if k != "min_n"} | {"protocol_format": 1}
    old_text = canonical_json(old_content)
    old = AuditProtocol.from_json(old_text)
    assert (old.protocol_format, old.min_n) == (1, 30) and old.canonical_json() == old_text
    assert old.protocol_id == "protocol-" + hashlib.sha256(old_text.encode()).hexdigest()[:12] != protocol().protocol_id
    with pytest.raises(ValueError, match="a format-1 protocol has no min_n of its own"):
        dataclasses.replace(old, min_n=20)
    with pytest.raises(ValueError, match="min_n 0 must be >= 1"):
        protocol(min_n=0)
    with pytest.raises(ValueError, match="protocol format 3 not in"):
        AuditProtocol.from_json(canonical_json({**old_content, "protocol_format": 3}))


def test_a_protocol_refuses_what_it_could_not_honour():
    with pytest.raises(ValueError, match="decision_rule 'majority'"):
        protocol(decision_rule="majority")
    with pytest.raises(ValueError, match="vocabulary order"):
        protocol(heads=tuple(reversed(protocol().heads)))
    with pytest.raises(ValueError, match="is not a binary head"):
        HeadUnderTest("domain", True, "", 0.1, 1, 0.5, "quota")
    with pytest.raises(ValueError, match="min_n 0 < 1 would give its works selection probability 0"):
        StratumPlan("negative_far", 0.0, 0, 0.01)
    with pytest.raises(ValueError, match="must plan each of"):
        protocol(strata=DEFAULT_PLANS[1:])
    with pytest.raises(ValueError, match="precision_lower must be in"):
        GateThresholds(precision_lower=1.2)
    assert tuple(p.name for p in DEFAULT_PLANS) == STRATA


def test_a_stored_protocol_is_appended_once_never_updated_and_the_newest_run_names_the_current_one(storage):
    first, second = protocol(), protocol(gate=GateThresholds(recall_lower=0.75))
    assert record_protocol(storage, first, "run-1") is True
    assert record_protocol(storage, first, "run-2") is False  # same content: no new row
    with storage.connect() as con:
        rows = con.execute(
            "SELECT protocol_id, created_at, heads, protocol_json::VARCHAR FROM audit_protocols"
        ).fetchall()
        assert [(r[0], r[2], r[3]) for r in rows] == [
            (first.protocol_id, ["metaresearch", "open_science"], first.canonical_json())
        ]
        created = rows[0][1]
    assert record_protocol(storage, second, "run-3") is True
    assert current_protocol(storage) == second
    assert record_protocol(storage, first, "run-4") is False  # back to the first configuration: it is current again
    with storage.connect() as con:
        stored = con.execute("SELECT protocol_id, created_at FROM audit_protocols ORDER BY created_at").fetchall()
        assert [r[0] for r in stored] == [first.protocol_id, second.protocol_id] and stored[0][1] == created
        runs = con.execute(
            "SELECT run_id, protocol_id, created FROM audit_protocol_runs ORDER BY materialized_at"
        ).fetchall()
        assert runs == [
            ("run-1", first.protocol_id, True),
            ("run-2", first.protocol_id, False),
            ("run-3", second.protocol_id, True),
            ("run-4", first.protocol_id, False),
        ]
        assert current_protocol_id(con) == first.protocol_id
        # a row altered by hand no longer hashes to its id: refused, never used
        con.execute(
            "UPDATE audit_protocols SET protocol_json = replace(protocol_json::VARCHAR, '0.8', '0.6') WHERE protocol_id = ?",
            [first.protocol_id],
        )
        with pytest.raises(ValueError, match="no longer hashes to its id"):
            load_protocol(con, first.protocol_id)
