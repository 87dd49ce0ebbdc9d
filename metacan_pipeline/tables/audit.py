"""Tables of the audit study (:mod:`metacan_pipeline.audit`, SPEC section 10): the locked protocols, which protocol
each materialization named, and the audit sample of every protocol."""

from __future__ import annotations

import pyarrow as pa

from . import Table

PROTOCOLS_SCHEMA = pa.schema(
    [
        ("protocol_id", pa.string()),
        ("content_sha256", pa.string()),
        ("created_at", pa.timestamp("us")),
        ("classifier_version", pa.string()),
        ("decision_rule", pa.string()),
        ("heads", pa.list_(pa.string())),
        ("instructions_version", pa.string()),
        ("instructions_sha256", pa.string()),
        ("protocol_json", pa.string()),
    ]
)

PROTOCOL_RUNS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("protocol_id", pa.string()),
        ("materialized_at", pa.timestamp("us")),
        ("created", pa.bool_()),
    ]
)

#: The audit draw's plan (``audit/design.py``, registered in its private DuckDB, never written): one row per stratum in
#: report order (``pos``) with ``N_h``, ``n_h``, the selection probability and the design weight (NULL: excluded).
AUDIT_PLAN_SCHEMA = pa.schema(
    [
        ("stratum", pa.string()),
        ("pos", pa.int64()),
        ("big_n", pa.int64()),
        ("n", pa.int64()),
        ("pi", pa.float64()),
        ("weight", pa.float64()),
    ]
)

#: A contract: the coding pages and the validation report read these columns by name.
AUDIT_SAMPLE_SCHEMA = pa.schema(
    [
        ("protocol_id", pa.string()),
        ("id", pa.string()),
        ("stratum", pa.string()),
        ("stratum_size", pa.int64()),
        ("stratum_sample_size", pa.int64()),
        ("hash_rank", pa.int64()),
        ("selection_probability", pa.float64()),
        ("design_weight", pa.float64()),
        ("in_sample", pa.bool_()),
        ("trained_on", pa.bool_()),
        ("language", pa.string()),
        ("has_abstract", pa.bool_()),
        ("route_key", pa.string()),
    ]
)

#: A contract: the records, the pages, the release and the rolling layer read whether a head passed from here.
HUMAN_VALIDATION_SCHEMA = pa.schema(
    [
        ("protocol_id", pa.string()),
        ("classifier_version", pa.string()),
        ("head", pa.string()),
        ("passed", pa.bool_()),
        ("precision", pa.float64()),
        ("precision_lower", pa.float64()),
        ("recall", pa.float64()),
        ("recall_lower", pa.float64()),
        ("coded_positives", pa.int64()),
        ("n_coded", pa.int64()),
        ("reason", pa.string()),
        ("run_id", pa.string()),
        ("computed_at", pa.timestamp("us")),
    ]
)

TABLES = [
    Table(
        "audit_protocols",
        "one locked audit protocol (append-only, never updated): classifier version, decision rule, heads, coder "
        "instructions and the canonical JSON its id hashes",
        "audit_protocol",
        PROTOCOLS_SCHEMA,
        ("protocol_id",),
        store="duckdb",
        json_columns=frozenset({"protocol_json"}),
    ),
    Table(
        "audit_protocol_runs",
        "one materialization of audit_protocol: the protocol it named (the newest row is the current protocol) "
        "and whether that run created it",
        "audit_protocol",
        PROTOCOL_RUNS_SCHEMA,
        ("run_id",),
        store="duckdb",
    ),
    Table(
        "audit_sample",
        "one frame work under one protocol: its stratum, N_h, n_h, salted-hash rank, selection probability, design "
        "weight, in the audit sample or not, trained on or not, and its language, abstract and route groups",
        "audit_sample",
        AUDIT_SAMPLE_SCHEMA,
        ("protocol_id", "id"),
    ),
    Table(
        "human_validation",
        "the gate's result for one head of one classifier version under one protocol, from one materialization of "
        "validation_report (append-only; the newest row per protocol, version and head counts): passed or not, the "
        "estimates and lower bounds behind it, coded positives, coded works, and why",
        "validation_report",
        HUMAN_VALIDATION_SCHEMA,
        ("protocol_id", "classifier_version", "head", "run_id"),
        store="duckdb",
    ),
]

# ---- the validation report (issue 16, "Estimates"): what one materialization of validation_report computed -------
#: Every report table starts with these: which protocol, classifier version and codes it rests on, and which run.
#: ``code_source`` is ``human`` (adjudicated or agreed human codes of two coders) or ``machine-adjudicator:<name>``
#: (an imported machine adjudicator, e.g. the frame1k verdicts): estimates from the latter are machine-adjudicated,
#: never human validation.
_REPORT_KEY = [
    ("protocol_id", pa.string()),
    ("classifier_version", pa.string()),
    ("code_source", pa.string()),
]
_RUN = [("run_id", pa.string()), ("computed_at", pa.timestamp("us"))]

VALIDATION_ERROR_RATES_SCHEMA = pa.schema(
    [
        *_REPORT_KEY,
        ("system", pa.string()),
        ("head", pa.string()),
        ("group_by", pa.string()),
        ("group", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("lower", pa.float64()),
        ("upper", pa.float64()),
        ("se", pa.float64()),
        ("n", pa.int64()),
        ("n_effective", pa.float64()),
        ("unresolved", pa.int64()),
        ("note", pa.string()),
        *_RUN,
    ]
)

VALIDATION_CONFUSION_SCHEMA = pa.schema(
    [
        *_REPORT_KEY,
        ("system", pa.string()),
        ("head", pa.string()),
        ("group_by", pa.string()),
        ("group", pa.string()),
        ("cell", pa.string()),
        ("count", pa.int64()),
        ("weighted", pa.float64()),
        *_RUN,
    ]
)

VALIDATION_PREVALENCE_SCHEMA = pa.schema(
    [
        *_REPORT_KEY,
        ("head", pa.string()),
        ("method", pa.string()),
        ("value", pa.float64()),
        ("lower", pa.float64()),
        ("upper", pa.float64()),
        ("se", pa.float64()),
        ("width_ratio", pa.float64()),
        ("n", pa.int64()),
        ("n_effective", pa.float64()),
        ("unresolved", pa.int64()),
        ("note", pa.string()),
        *_RUN,
    ]
)

VALIDATION_AGREEMENT_SCHEMA = pa.schema(
    [
        *_REPORT_KEY,
        ("head", pa.string()),
        ("statistic", pa.string()),
        ("weighting", pa.string()),
        ("value", pa.float64()),
        ("n", pa.int64()),
        ("n_effective", pa.float64()),
        *_RUN,
    ]
)

VALIDATION_GATE_SCHEMA = pa.schema(
    [
        *_REPORT_KEY,
        ("system", pa.string()),
        ("head", pa.string()),
        ("passed", pa.bool_()),
        ("judged", pa.bool_()),
        ("reason", pa.string()),
        ("coded_positives", pa.int64()),
        ("n_effective", pa.float64()),  # Kish's effective n of the coded positives' design weights
        ("human_validation", pa.bool_()),
        *_RUN,
    ]
)

#: A contract: the records and pages read a work's human-coded layer from here (never from a machine adjudicator).
HUMAN_CODES_SCHEMA = pa.schema(
    [
        ("protocol_id", pa.string()),
        ("id", pa.string()),
        ("basis", pa.string()),  # agreed | adjudicated
        ("categories", pa.list_(pa.string())),
        ("domain", pa.string()),
        ("study_design", pa.string()),
        ("genre", pa.string()),
        ("about_ca_system", pa.bool_()),
        ("about_ca_topic", pa.bool_()),
        ("coders", pa.list_(pa.string())),
        ("answer_ids", pa.list_(pa.string())),
        ("run_id", pa.string()),
    ]
)

_REPORT = "validation_report"
TABLES += [
    Table(
        "validation_error_rates",
        "one design-weighted precision, recall or F1 of one system (teacher or classifier decision rule) on one head, "
        "overall or in one group (language, route, genre, abstract), against one code source of the current protocol: "
        "value, 95% interval, n, Kish n, why not reported",
        _REPORT,
        VALIDATION_ERROR_RATES_SCHEMA,
        ("protocol_id", "code_source", "system", "head", "group_by", "group", "metric"),
    ),
    Table(
        "validation_confusion",
        "one cell (tp, fp, fn, tn) of the confusion matrix of one system on one head and group: count and weighted",
        _REPORT,
        VALIDATION_CONFUSION_SCHEMA,
        ("protocol_id", "code_source", "system", "head", "group_by", "group", "cell"),
    ),
    Table(
        "validation_prevalence",
        "one prevalence estimate of one head: from the codes alone (method human) or prediction-powered with one "
        "system's frame-wide decisions (ppi:<system>), with its interval and its width over the codes-only one",
        _REPORT,
        VALIDATION_PREVALENCE_SCHEMA,
        ("protocol_id", "code_source", "head", "method"),
    ),
    Table(
        "validation_agreement",
        "one inter-coder agreement statistic (Cohen's kappa, Krippendorff's alpha; raw or design-weighted) of one head "
        "before adjudication",
        _REPORT,
        VALIDATION_AGREEMENT_SCHEMA,
        ("protocol_id", "code_source", "head", "statistic", "weighting"),
    ),
    Table(
        "validation_gate",
        "the gate applied to one system on one head for one code source: passed, judged, why; human_validation says "
        "whether the row counts towards human_validation (only the protocol's classifier rule on human codes)",
        _REPORT,
        VALIDATION_GATE_SCHEMA,
        ("protocol_id", "code_source", "system", "head"),
    ),
    Table(
        "human_codes",
        "the final human code of one coded work of the current protocol (two coders agreed, or an adjudication): the "
        "SPEC section 3 fields, the coders and the answers it rests on; the records' human-coded layer",
        _REPORT,
        HUMAN_CODES_SCHEMA,
        ("protocol_id", "id"),
    ),
]
