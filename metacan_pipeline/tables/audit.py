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
