"""Tests of metacan_pipeline.audit.coding.adjudicators and the coding store's machine codes: the frame1k verdicts of the
real pilot folder are recorded as a MACHINE adjudicator, never as human codes."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from metacan_pipeline.audit.coding.adjudicators import frame1k_codes
from metacan_pipeline.audit.coding.errors import CodingError
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.cli import app
from metacan_pipeline_tests.builders.common import PILOT


def test_frame1k_verdicts_become_machine_metaresearch_codes():
    rows = frame1k_codes(PILOT, "protocol-000000000000")
    verdicts = [v for p in sorted((PILOT / "frame1k" / "adjudication").glob("verdict_*.json"))
                for v in json.loads(p.read_text(encoding="utf-8"))]  # fmt: skip
    assert len(rows) == len(verdicts) == 179 and len({r["id"] for r in rows}) == 179
    assert {r["adjudicator"] for r in rows} == {"machine-adjudicator:frame1k"} and {r["head"] for r in rows} == {
        "metaresearch"
    }
    tiers = Counter(v["tier"] for v in verdicts)
    assert sum(r["code"] == 1 for r in rows) == tiers["T1"] + tiers["T2"]
    assert {r["source_file"] for r in rows} == {
        "frame1k/adjudication/verdict_01.json",
        "frame1k/adjudication/verdict_02.json",
    }


def test_machine_codes_are_appended_once_and_never_become_human_codes(tmp_path):
    rows = frame1k_codes(PILOT, "protocol-000000000000")
    with CodingStore(tmp_path / "coding.sqlite") as store:
        assert store.append_machine_codes(rows) == {"added": 179, "already_present": 0}
        assert store.append_machine_codes(rows) == {"added": 0, "already_present": 179}
        assert len(store.machine_codes("protocol-000000000000")) == 179
        assert store.adjudicated_codes("protocol-000000000000") == []  # no human layer from a machine
        for name in ("frame1k", "alice", "labelstudio:bob"):
            with pytest.raises(CodingError, match="machine-adjudicator:<name>"):
                store.append_machine_codes([{**rows[0], "adjudicator": name}])
        with pytest.raises(CodingError, match="is not 0, 1 or None"):
            store.append_machine_codes([{**rows[0], "code": 2}])


def test_import_adjudicator_without_a_protocol_says_what_to_do(tmp_path):
    result = CliRunner().invoke(app, ["coding", "import-adjudicator", "frame1k", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "no audit protocol is locked yet" in result.output
    result = CliRunner().invoke(app, ["coding", "import-adjudicator", "opus", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "'opus' unknown" in result.output


def test_import_adjudicator_refuses_a_protocol_that_was_never_locked(tmp_path):
    """`--protocol bogus` names a protocol that was never locked: it is refused, and the append-only store gets
    nothing (not 179 codes under a protocol that does not exist)."""
    from metacan_pipeline.storage import MetacanStorage

    with MetacanStorage(data_dir=str(tmp_path)).connect() as con:  # a catalog with its tables, no protocol locked
        assert con.execute("SELECT count(*) FROM audit_protocols").fetchone()[0] == 0
    for bogus in ("bogus", "protocol-000000000000"):
        result = CliRunner().invoke(
            app, ["coding", "import-adjudicator", "frame1k", "--protocol", bogus, "--data-dir", str(tmp_path)]
        )
        assert result.exit_code == 2 and "is not in audit_protocols: materialize audit_protocol" in result.output
    assert not (tmp_path / "audit" / "coding.sqlite").exists()
