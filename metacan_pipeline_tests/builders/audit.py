"""Audit builders for tests: a locked audit protocol with its sample, and audit draws from machine-state rows."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from metacan_pipeline.audit.protocol.design import draw_audit_sample
from metacan_pipeline.audit.protocol.locked import (
    STRATA,
    AuditProtocol,
    GateThresholds,
    HeadUnderTest,
    StratumPlan,
    load_instructions,
    record_protocol,
)
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.audit import AUDIT_SAMPLE_SCHEMA


def lock_audit_sample(storage: MetacanStorage, frame: list[dict], drawn: list[str], run_id: str = "run-audit") -> str:
    """Record a small audit protocol (``record_protocol``, coder instructions v1) as the current one and write its
    ``audit_sample``: one row per frame work, ``drawn`` in the sample (pi 0.5) and the rest not (pi 0.5, not drawn).
    What ``audit_protocol`` + ``audit_sample`` leave for the coding step, without a student run. Returns its id."""
    instructions = load_instructions("v1")
    protocol = AuditProtocol(
        classifier_version="metacan-v0-hybrid-0a1b2c3d4e5f",
        decision_rule="consensus",
        heads=(HeadUnderTest("metaresearch", False, "codex positives 2 < 20", 0.1, 4, None, "none"),),
        gate=GateThresholds(),
        strata=tuple(StratumPlan(name, 0.5, 1, 0.1) for name in STRATA),
        near_band=0.5,
        salt="metacan-audit-test",
        trained_works="own_stratum",
        frame_build_id="frame-5e6f7a8b9c0d",
        instructions_version=instructions.version,
        instructions_sha256=instructions.sha256,
    )
    record_protocol(storage, protocol, run_id)
    rows = [
        {
            "protocol_id": protocol.protocol_id,
            "id": f["id"],
            "stratum": "negative_far",
            "stratum_size": len(frame),
            "stratum_sample_size": len(drawn),
            "hash_rank": i,
            "selection_probability": 0.5,
            "design_weight": 2.0,
            "in_sample": f["id"] in drawn,
            "trained_on": False,
            "language": f.get("language"),
            "has_abstract": bool(f.get("has_abstract")),
            "route_key": f.get("route_key") or "ca_aff",
        }
        for i, f in enumerate(frame)
    ]
    storage.write_table("audit_sample", pa.Table.from_pylist(rows, schema=AUDIT_SAMPLE_SCHEMA))
    return protocol.protocol_id


def audit_draw(states: list[dict], protocol) -> list[dict]:
    """The ``audit_sample`` rows ``metacan_pipeline.audit.protocol.design.draw_audit_sample`` draws under ``protocol`` from
    machine-state rows (dicts of the columns of the ``machine_state`` view: id, language, has_abstract, route_key,
    trained_on, any_consensus, any_candidate, any_near), in its order."""
    with duckdb.connect() as con:
        con.register("machine_state", pa.Table.from_pylist(states))
        return [row for batch in draw_audit_sample(con, protocol) for row in batch.to_pylist()]


def audit_sizes(sample: list[dict]) -> dict[str, tuple[int, int]]:
    """``{stratum: (N_h, n_h)}`` of ``audit_sample`` rows."""
    return {r["stratum"]: (r["stratum_size"], r["stratum_sample_size"]) for r in sample}
