"""The audit study's Dagster assets (issue 16; SPEC section 10): ``audit_protocol`` locks a protocol
(:mod:`.protocol`), ``audit_sample`` draws its stratified sample of the frame (:mod:`.design`). The check on the
sample is in :mod:`.checks`. Inputs are named by asset key; no other stage's assets module is imported."""

from dataclasses import asdict

import dagster as dg
from pydantic import Field

from ..meta import counts_markdown, table_metadata
from ..storage import MetacanStorage
from ..student.roles import SAMPLE, direct_labels_key
from ..tables.audit import AUDIT_SAMPLE_SCHEMA, PROTOCOLS_SCHEMA
from . import design
from .protocol import (
    DECISION_RULES,
    TRAINED_WORKS,
    AuditProtocol,
    GateThresholds,
    current_protocol,
    load_instructions,
    record_protocol,
)


class AuditProtocolConfig(dg.Config):
    """What a protocol locks (SPEC section 10). Any change makes a new protocol; the old ones stay."""

    heads: list[str] = Field(
        default=[], description="Binary heads evaluated; empty: every category head with decisions, plus metaresearch."
    )
    decision_rule: str = Field(default="consensus", description=f"The decision under test: one of {DECISION_RULES}.")
    precision_lower: float = Field(default=0.80, description="Gate: lower 95% bound on precision.")
    recall_lower: float = Field(default=0.70, description="Gate: lower 95% bound on recall.")
    min_coded_positives: int = Field(default=30, description="Gate: fewest adjudicated human positives.")
    stratum_fractions: dict[str, float] = Field(
        default={p.name: p.fraction for p in design.DEFAULT_PLANS},
        description="Per stratum, the fraction of N_h drawn (n_h = max(min size, round(fraction N_h)), capped at N_h); "
        "a stratum left out keeps its default.",
    )
    stratum_min_sizes: dict[str, int] = Field(
        default={p.name: p.min_n for p in design.DEFAULT_PLANS},
        description="Per stratum, the fewest works drawn (>= 1).",
    )
    expected_positive_rates: dict[str, float] = Field(
        default={p.name: p.expected_positive_rate for p in design.DEFAULT_PLANS},
        description="Per stratum, the positive rate expected (a prior for the power note; it changes no draw).",
    )
    near_band: float = Field(default=0.5, description="A negative is near when score >= (1 - near_band) x threshold.")
    salt: str = Field(default="metacan-audit-v1", description="Hash salt of the draw; a new salt draws a new sample.")
    instructions_version: str = Field(default="v1", description="Coder instructions: audit/instructions/<version>.md.")
    trained_works: str = Field(
        default="own_stratum", description=f"Works that trained or calibrated the classifier: one of {TRAINED_WORKS}."
    )


@dg.asset(
    group_name="audit",
    kinds={"python", "duckdb"},
    code_version="1",
    owners=["team:metacan"],
    deps=["frame", "predictions", "prediction_thresholds", "student_heads"],
)
def audit_protocol(
    context: dg.AssetExecutionContext, config: AuditProtocolConfig, storage: MetacanStorage
) -> dg.MaterializeResult:
    """Lock the audit protocol (SPEC section 10) before a single work is coded: the classifier version under test
    (the one model version of predictions, prediction_thresholds and student_heads), the decision rule, the heads
    evaluated with their gate, rate, k and near/far threshold, the gate thresholds, the sample design (frame build,
    strata, sizes, expected rates, near band, salt, trained works) and the coder instructions (version and SHA-256).
    Appended to the DuckDB table audit_protocols only when its id protocol-<12 hex of the content SHA-256> is new;
    a stored protocol is never updated. Every run is logged in audit_protocol_runs: its newest row is the current
    protocol, which audit_sample draws."""
    instructions = load_instructions(config.instructions_version)
    with design.scratch(storage, ["frame", "predictions", "prediction_thresholds", "student_heads"]) as con:
        version = design.classifier_version(con)
        heads, notes = design.heads_under_test(con, version, config.heads)
        frame_build = design.frame_build_id(con)
    protocol = AuditProtocol(
        classifier_version=version,
        decision_rule=config.decision_rule,
        heads=heads,
        gate=GateThresholds(config.precision_lower, config.recall_lower, config.min_coded_positives),
        strata=design.stratum_plans(config.stratum_fractions, config.stratum_min_sizes, config.expected_positive_rates),
        near_band=config.near_band,
        salt=config.salt,
        trained_works=config.trained_works,
        frame_build_id=frame_build,
        instructions_version=instructions.version,
        instructions_sha256=instructions.sha256,
    )
    created = record_protocol(storage, protocol, context.run.run_id)
    context.log.info(
        f"audit_protocol {protocol.protocol_id} ({'new' if created else 'already locked: unchanged'}): {version}, "
        f"{protocol.decision_rule} rule, heads {protocol.head_names}; instructions {instructions.version}"
    )
    return dg.MaterializeResult(metadata=_protocol_metadata(protocol, created, notes))


def _protocol_metadata(protocol: AuditProtocol, created: bool, notes: list[str]) -> dict:
    plans = "| stratum | fraction | min n | expected rate |\n|---|---|---|---|\n" + "".join(
        f"| {p.name} | {p.fraction} | {p.min_n} | {p.expected_positive_rate} |\n" for p in protocol.strata
    )
    return table_metadata(
        PROTOCOLS_SCHEMA,
        1,
        None,
        None,
        protocol_id=protocol.protocol_id,
        content_sha256=protocol.content_sha256,
        created=created,
        classifier_version=protocol.classifier_version,
        decision_rule=protocol.decision_rule,
        heads=dg.MetadataValue.json([asdict(h) for h in protocol.heads]),
        heads_without_decisions=dg.MetadataValue.md("\n\n".join(notes) or "_(every evaluated head has decisions)_"),
        gate=dg.MetadataValue.json(asdict(protocol.gate)),
        strata_plan=dg.MetadataValue.md(plans),
        frame_build_id=protocol.frame_build_id,
        instructions=f"{protocol.instructions_version} (SHA-256 {protocol.instructions_sha256})",
        protocol_json=dg.MetadataValue.json(protocol.content()),
    )


@dg.asset(
    group_name="audit",
    kinds={"python", "parquet"},
    code_version="1",
    owners=["team:metacan"],
    deps=["audit_protocol", "frame", "predictions", "student_training_set", "sample_design", direct_labels_key(SAMPLE)],
)
def audit_sample(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """The audit sample of the current protocol (SPEC section 10): one row per frame work with its stratum (by the
    machine's state on the evaluated heads, first match: trained_on, consensus, candidate_only, negative_near, french,
    no_abstract, about_ca_only, negative_far), N_h, n_h, salted-hash rank, selection probability n_h / N_h, design
    weight 1 / pi, in_sample, trained_on, language, has_abstract and route_key. Drawn once per protocol: a protocol
    already in the table keeps its rows; other protocols' rows stay. Refuses a protocol whose classifier version or
    frame build is not the current one. Metadata: N_h, n_h, pi and expected positives per stratum, the power note."""
    protocol = current_protocol(storage)
    pid = protocol.protocol_id
    names = ["frame", "predictions", "prediction_thresholds", "student_heads", "student_training_set", "sample_design"]
    with design.scratch(storage, [*names, direct_labels_key(SAMPLE)]) as con:
        current = (design.classifier_version(con), design.frame_build_id(con))
        if current != (protocol.classifier_version, protocol.frame_build_id):
            raise ValueError(
                f"protocol {pid} is of {protocol.classifier_version} on frame build {protocol.frame_build_id}, the "
                f"warehouse holds {current[0]} on {current[1]}: materialize audit_protocol first"
            )
        sample = design.drawn_sample(storage, pid)
        reused = sample is not None
        if not reused:
            trained, trained_counts = design.trained_ids(con, protocol.classifier_version)
            sample = design.draw_audit_sample(design.machine_state_rows(con, protocol, trained), protocol)
            design.write_sample(storage, pid, sample)
    note = design.power_note(design.stratum_sizes(sample), protocol)
    drawn = sum(r["in_sample"] for r in sample)
    context.log.info(
        f"audit_sample {pid}: {len(sample)} frame works, {drawn} drawn in {len(note.strata)} strata"
        + (" (already drawn: kept)" if reused else "")
    )
    extra = {} if reused else dict(trained_counts)
    return dg.MaterializeResult(metadata=_sample_metadata(protocol, sample, note, reused, extra))


def _sample_metadata(protocol: AuditProtocol, sample: list[dict], note: design.PowerNote, reused: bool, extra: dict):
    drawn = [r for r in sample if r["in_sample"]]
    return table_metadata(
        AUDIT_SAMPLE_SCHEMA,
        len(sample),
        drawn,
        ["id", "stratum", "selection_probability", "design_weight", "trained_on"],
        protocol_id=protocol.protocol_id,
        already_drawn=reused,
        sample_size=len(drawn),
        trained_on_works=sum(r["trained_on"] for r in sample),
        strata=dg.MetadataValue.json(note.strata),
        stratum_sizes=counts_markdown({r["stratum"]: r["N_h"] for r in note.strata}, "stratum", "N_h"),
        expected_coded_positives=round(note.expected_coded_positives, 2),
        power_note=dg.MetadataValue.md(design.power_markdown(note, protocol)),
        **extra,
    )
