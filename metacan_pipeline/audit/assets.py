"""The audit study's Dagster assets (SPEC section 10): ``audit_protocol`` locks a protocol (:mod:`.protocol.locked`),
``audit_sample`` draws its stratified sample of the frame (:mod:`.protocol.design`), ``coding_tasks`` loads the sample
into the coding store (:mod:`.coding.loading`), ``validation_report`` estimates and gates against the codes
(:mod:`.estimates.validation`, :mod:`.estimates.report`). The check on the sample is in :mod:`.checks`. Inputs are
named by asset key; no other stage's assets module is imported."""

import datetime as dt
from dataclasses import asdict

import dagster as dg
import pandas as pd
from pydantic import Field

from .. import settings
from ..meta import counts_markdown, table_metadata
from ..storage import MetacanStorage
from ..student.roles import SAMPLE, direct_labels_key
from ..tables.audit import (
    AUDIT_SAMPLE_SCHEMA,
    FILTER_RECALL_SCHEMA,
    HUMAN_VALIDATION_SCHEMA,
    PROTOCOLS_SCHEMA,
    TABLES,
    VENUE_RECALL_SCHEMA,
)
from ..tables.coding import CODING_TASKS_SCHEMA
from .coding.loading import load_coding_tasks
from .coding.store import CodingStore
from .estimates import study, summary, validation
from .estimates.design_based import kish_n_effective
from .instruments.filters import DEFAULT_TOPICS
from .instruments.measure import measure_filter_recall, measure_known_item_recall
from .instruments.summary import filter_recall_markdown, instruments_pointer_markdown, known_item_markdown
from .instruments.venues import load_venue_list
from .medline.asset import medline_report_markdown
from .protocol import classifier, design, power
from .protocol.locked import (
    DECISION_RULES,
    TRAINED_WORKS,
    AuditProtocol,
    GateThresholds,
    current_protocol,
    load_instructions,
    record_protocol,
)
from .protocol.scratch import scratch


class AuditProtocolConfig(dg.Config):
    """What a protocol locks (SPEC section 10). Any change makes a new protocol; the old ones stay."""

    heads: list[str] = Field(
        default=[], description="Binary heads evaluated; empty: every category head with decisions, plus metaresearch."
    )
    decision_rule: str = Field(default="consensus", description=f"The decision under test: one of {DECISION_RULES}.")
    precision_lower: float = Field(default=0.80, description="Gate: lower 95% bound on precision.")
    recall_lower: float = Field(default=0.70, description="Gate: lower 95% bound on recall.")
    min_coded_positives: int = Field(default=30, description="Gate: fewest adjudicated human positives.")
    min_n: int = Field(
        default=30, description="Minimum-n rule: no rate, interval or PPI estimate reported on fewer coded cases."
    )
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
    deps=["audit_inputs"],
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
    with scratch(storage, ["frame", "predictions", "prediction_thresholds", "student_heads"]) as con:
        version = classifier.classifier_version(con)
        heads, notes = classifier.heads_under_test(con, version, config.heads)
        frame_build = classifier.frame_build_id(con)
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
        min_n=config.min_n,
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
        min_n=protocol.min_n,
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
    deps=["audit_protocol", "audit_inputs"],
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
    with scratch(storage, [*names, direct_labels_key(SAMPLE)]) as con:
        current = (classifier.classifier_version(con), classifier.frame_build_id(con))
        if current != (protocol.classifier_version, protocol.frame_build_id):
            raise ValueError(
                f"protocol {pid} is of {protocol.classifier_version} on frame build {protocol.frame_build_id}, the "
                f"warehouse holds {current[0]} on {current[1]}: materialize audit_protocol first"
            )
        sample = design.drawn_sample(storage, pid)
        reused = sample.works > 0
        if not reused:
            trained, trained_counts = classifier.trained_ids(con, protocol.classifier_version)
            design.machine_state_view(con, protocol, trained)
            design.write_sample(storage, pid, design.draw_audit_sample(con, protocol))
            sample = design.drawn_sample(storage, pid)
    note = power.power_note(sample.sizes, protocol)
    context.log.info(
        f"audit_sample {pid}: {sample.works} frame works, {len(sample.drawn)} drawn in {len(note.strata)} strata"
        + (" (already drawn: kept)" if reused else "")
    )
    extra = {} if reused else dict(trained_counts)
    return dg.MaterializeResult(metadata=_sample_metadata(protocol, sample, note, reused, extra))


def _sample_metadata(
    protocol: AuditProtocol, sample: design.DrawnSample, note: power.PowerNote, reused: bool, extra: dict
):
    return table_metadata(
        AUDIT_SAMPLE_SCHEMA,
        sample.works,
        sample.drawn,
        ["id", "stratum", "selection_probability", "design_weight", "trained_on"],
        protocol_id=protocol.protocol_id,
        already_drawn=reused,
        sample_size=len(sample.drawn),
        trained_on_works=sample.trained_on,
        strata=dg.MetadataValue.json(note.strata),
        stratum_sizes=counts_markdown({r["stratum"]: r["N_h"] for r in note.strata}, "stratum", "N_h"),
        expected_coded_positives=round(note.expected_coded_positives, 2),
        power_note=dg.MetadataValue.md(power.power_markdown(note, protocol)),
        **extra,
    )


TABLE_BY_NAME = {t.name: t for t in TABLES}
_AUDIT = {"group_name": "audit", "code_version": "1", "owners": ["team:metacan"]}
_REPORT_DEPS = ["audit_sample", "audit_inputs"]


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "validation_report",
            deps=_REPORT_DEPS,
            kinds={"python", "duckdb"},
            description="The gate of the current protocol (SPEC section 10): one human_validation row per evaluated "
            "head, appended, and a Markdown summary per head and code source.",
            **_AUDIT,
        ),
        *(
            dg.AssetSpec(
                name,
                deps=_REPORT_DEPS,
                kinds={"python", "parquet"},
                description=f"A table of the validation report of the current protocol (SPEC section 10), written "
                f"by validation_report. A row is {t.row}.",
                **_AUDIT,
            )
            for name, t in ((n, TABLE_BY_NAME[n]) for n in study.VALIDATION_TABLES)
        ),
    ]
)
def validation_report(context: dg.AssetExecutionContext, storage: MetacanStorage):
    """The validation report of the current protocol (SPEC section 10):
    reads the coding store's final human codes and coders' answers, its machine adjudicators' codes, the audit
    sample's design weights, every registry teacher's direct labels and the classifier version's decisions; writes the
    error rates (precision, recall, F1 with 95% intervals, overall and by language, route, genre, abstract), the
    confusion matrices, the prevalence (human and prediction-powered), the inter-coder agreement, the gate of every
    system and code source, and the human codes the records show; appends one human_validation row per evaluated
    head (human codes only: a machine adjudicator never validates anything). With no codes it materializes and says
    so: every head not passed, reason "no coded works"."""
    protocol = current_protocol(storage)
    run_id, now = context.run.run_id, dt.datetime.now(dt.UTC).replace(tzinfo=None)
    with CodingStore(settings.coding_store_path(str(storage.root))) as store:
        inputs = study.report_inputs(storage, store, protocol)  # coders under their pseudonyms from here on
    reports = validation.run_report(inputs)
    for name, table in study.report_tables(inputs, reports, run_id, now).items():
        n = storage.write_table(name, table)
        yield dg.MaterializeResult(asset_key=name, metadata=table_metadata(table.schema, n, None, None))
    rows = validation.human_validation_rows(inputs, reports[validation.HUMAN], run_id, now)
    appended = validation.append_human_validation(storage, rows)
    context.log.info(
        f"validation_report {protocol.protocol_id}: {len(inputs.human)} human-coded works, "
        f"{sum(r['passed'] for r in rows)} of {len(rows)} heads passed"
        + ("" if appended else " (the gate says what it said last run: human_validation unchanged)")
    )
    metadata = _report_metadata(inputs, reports, rows, appended)
    metadata["study_design_medline"] = dg.MetadataValue.md(medline_report_markdown(storage))
    yield dg.MaterializeResult(asset_key="validation_report", metadata=metadata)


def _table_value(frame: pd.DataFrame) -> dg.MetadataValue:
    """A report table as Dagster table metadata (numbers as numbers, a missing value as null)."""
    kinds = {"f": "float", "i": "int", "b": "bool"}
    schema = dg.TableSchema(
        columns=[dg.TableColumn(c, kinds.get(frame[c].dtype.kind, "string")) for c in frame.columns]
    )
    records = [
        dg.TableRecord({k: None if v is None or (isinstance(v, float) and pd.isna(v)) else v for k, v in r.items()})
        for r in frame.astype(object).to_dict("records")
    ]
    return dg.MetadataValue.table(records=records, schema=schema)


def _report_metadata(inputs: validation.ReportInputs, reports: dict, rows: list[dict], appended: bool) -> dict:
    sample = inputs.sample
    summaries = "\n\n".join(summary.summary_markdown(s, r, inputs.protocol) for s, r in reports.items())
    weights = sample["design_weight"].to_numpy()
    human, min_n = reports[validation.HUMAN], inputs.protocol.min_n
    return {
        **table_metadata(HUMAN_VALIDATION_SCHEMA, len(rows), rows, ["head", "passed", "reason"]),
        "protocol_id": inputs.protocol.protocol_id,
        "classifier_version": inputs.protocol.classifier_version,
        "sampled_works": len(sample),
        "sampled_effective_n": round(float(kish_n_effective(weights)), 2),
        "human_coded_works": len(inputs.human),
        "coding": dg.MetadataValue.md(summary.coding_markdown(inputs.status)),
        "human_validation_rows_appended": len(rows) if appended else 0,
        "single_coder_works_awaiting_second_coder": inputs.single_coder,
        "trained_works_left_out": inputs.trained_left_out,
        "trained_works_reported_apart": validation.TRAINED_APART in reports,
        "min_n": min_n,
        "machine_adjudicators": dg.MetadataValue.json(
            {
                name: {"codes_in_sample": len(f), "works_outside_sample": inputs.machine_outside.get(name, 0)}
                for name, f in inputs.machine.items()
            }
        ),  # fmt: skip
        "gate": dg.MetadataValue.md(
            summary.gate_markdown(rows)
            + "\n"
            + summary.apart_markdown(
                inputs.trained_left_out, validation.TRAINED_APART in reports, sorted(inputs.machine)
            )
        ),
        "summary": dg.MetadataValue.md(summaries),
        "agreement": dg.MetadataValue.md(summary.agreement_markdown(human)),
        "agreement_table": _table_value(human.agreement),
        "error_rates_table": _table_value(
            human.error_rates.loc[human.error_rates["group_by"] == "all"].drop(columns=["group_by", "group"])
        ),
        "prevalence_table": _table_value(human.prevalence),
        "prevalence": dg.MetadataValue.md(summary.prevalence_markdown(human, min_n)),
        "differential_error": dg.MetadataValue.md(summary.differential_markdown(human, min_n)),
        "recall_instruments": dg.MetadataValue.md(instruments_pointer_markdown()),
    }


@dg.asset(
    group_name="audit",
    kinds={"python", "sqlite"},
    code_version="1",
    owners=["team:metacan"],
    deps=["audit_sample", "audit_inputs"],
)
def coding_tasks(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """The coding tasks of the current protocol in the coding store data/audit/coding.sqlite (SPEC section 10): one
    task per work the audit sample drew, carrying the protocol id, its queue position (a salted hash: strata
    interleaved) and an evidence version (title, year, language, type, venue, Canadian institutions, funders,
    keywords, DOI and full-text link; never a label, score, prediction, stratum or weight; the abstract is fetched
    live by the coding page). Works without a coder pair are assigned to pairs of the active coders (balanced, seeded
    by the protocol's hash). Idempotent: a re-run adds only works not loaded yet; answers and pairs are never touched.
    Also `metacan coding load-tasks` (the same code). Metadata: added, evidence_changed, moved, unchanged, missing,
    paired_now."""
    with CodingStore(settings.coding_store_path(storage.data_dir)) as store:
        out = load_coding_tasks(storage, store, source=f"asset:{context.run.run_id}")
        progress = store.task_progress(out["protocol_id"])
    context.log.info(
        f"coding_tasks {out['protocol_id']}: {out['added']} added, {out['unchanged']} unchanged, "
        f"{out['evidence_changed']} with new evidence, {len(out['missing'])} sampled works not in the frame"
    )
    return dg.MaterializeResult(
        metadata=table_metadata(
            CODING_TASKS_SCHEMA,
            progress["tasks"],
            None,
            None,
            protocol_id=out["protocol_id"],
            sample_works=out["sample_works"],
            added=out["added"],
            evidence_changed=out["evidence_changed"],
            moved=out["moved"],
            unchanged=out["unchanged"],
            missing=len(out["missing"]),
            missing_ids=", ".join(out["missing"][:50]) or "(none)",
            paired_now=0 if out["pairs"] is None else out["pairs"]["assigned"],
            works_with_two_coders=progress["two_coders"],
            answers=progress["answers"],
        )
    )


class FilterRecallConfig(dg.Config):
    """The filters of filter recall beyond the routes and the lexicon tiers."""

    topic_filter: list[str] = Field(
        default=list(DEFAULT_TOPICS),
        description="The OpenAlex topic filter a user might try instead of screening: the primary-topic display "
        "names it keeps.",
    )


@dg.asset(
    group_name="audit",
    kinds={"python", "duckdb"},
    code_version="1",
    owners=["team:metacan"],
    deps=["human_codes", "audit_inputs"],
)
def filter_recall(
    context: dg.AssetExecutionContext, config: FilterRecallConfig, storage: MetacanStorage
) -> dg.MaterializeResult:
    """Filter recall (the original protocol's instrument ii): every filter that could cut the frame or a cohort (each
    route, each about_ca lexicon tier, the configured OpenAlex topic filter) run over the reference positives of each
    category, per reference (each qualified teacher's direct labels, the final human codes), never mixed: positives
    kept and dropped, recall = kept / positives with a 95% Clopper-Pearson interval. With no reference (no teacher
    qualified, no human code yet) every filter has its rows with n = 0 and the note "no reference yet"."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    measured = measure_filter_recall(storage, config.topic_filter, context.run.run_id, now)
    n = storage.write_table("filter_recall", measured.table)
    context.log.info(f"filter_recall: {n} rows against {', '.join(measured.sources) or 'no reference yet'}")
    frame = measured.table.to_pandas()
    return dg.MaterializeResult(
        metadata=table_metadata(
            FILTER_RECALL_SCHEMA,
            n,
            None,
            None,
            references=", ".join(measured.sources) or "none: no reference yet",
            teacher_standing=dg.MetadataValue.json(
                {t: {"qualified": s["qualified"], "note": s["note"]} for t, s in measured.standings.items()}
            ),
            filter_recall=dg.MetadataValue.md(filter_recall_markdown(frame)),
            filter_recall_table=_table_value(frame.drop(columns=["filter_definition", "run_id", "computed_at"])),
        )
    )


@dg.asset(
    group_name="audit",
    kinds={"python", "duckdb"},
    code_version="1",
    owners=["team:metacan"],
    deps=["audit_inputs"],
)
def venue_known_item_recall(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """Known-item recall on the venue reference set (the original protocol's instrument iii): the frame's works in the
    meta-research venues of the versioned list (METACAN_REFERENCE_VENUES_FILE, else the packaged
    audit/instruments/reference_venues.toml) are the reference set; for candidate and consensus on metaresearch, each
    registry teacher's direct labels and each student head's top decile, overall and per language, abstract
    availability and venue: works decided on, detected, missed, undecided, recall with a 95% Clopper-Pearson
    interval. A non-probability bound on recall for the hard cases, kept apart from the design-based estimates."""
    venues = load_venue_list()
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    measured = measure_known_item_recall(storage, venues, context.run.run_id, now)
    n = storage.write_table("venue_known_item_recall", measured.table)
    context.log.info(
        f"venue_known_item_recall: {measured.reference_works} frame works in {len(venues.pinned)} pinned venues "
        f"({venues.version}); {len(venues.not_pinned)} venues not pinned"
    )
    frame = measured.table.to_pandas()
    return dg.MaterializeResult(
        metadata=table_metadata(
            VENUE_RECALL_SCHEMA,
            n,
            None,
            None,
            venue_list_version=venues.version,
            venue_list_sha256=venues.sha256,
            venue_list_file=venues.path,
            reference_works=measured.reference_works,
            venues_not_pinned=", ".join(venues.not_pinned) or "(none)",
            known_item_recall=dg.MetadataValue.md(known_item_markdown(frame, venues)),
            known_item_recall_table=_table_value(
                frame.drop(
                    columns=["venue_list_version", "venue_list_sha256", "estimate_kind", "run_id", "computed_at"]
                )
            ),
        )
    )
