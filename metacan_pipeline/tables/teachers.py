"""Tables of the teacher stage (:mod:`metacan_pipeline.teachers`, SPEC section 4): the append-only call
and label store, the call archives, label imports, named batches, direct labels and teacher agreement."""

from __future__ import annotations

import pyarrow as pa

from . import Table

CALLS_SCHEMA = pa.schema(
    [
        ("call_id", pa.string()),
        ("run_id", pa.string()),
        ("teacher", pa.string()),
        ("model", pa.string()),
        ("prompt_version", pa.string()),
        ("prompt_sha", pa.string()),
        ("record_view", pa.string()),
        ("work_ids", pa.list_(pa.string())),
        ("n_works", pa.int32()),
        ("request_hash", pa.string()),
        ("http_status", pa.int32()),
        ("error", pa.string()),
        ("latency_s", pa.float64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("logprob_mean", pa.float64()),
        ("archive_path", pa.string()),
        ("archive_line", pa.int64()),
        ("created_at", pa.timestamp("us")),
        # the endpoint that answered (its name: the base URL without credentials or query, or the registry's
        # name for it; never a key); last, as a column added to a store of an older layout is (migrations.py)
        ("endpoint", pa.string()),
    ]
)

LABELS_SCHEMA = pa.schema(
    [
        ("label_id", pa.string()),
        ("work_id", pa.string()),
        ("teacher", pa.string()),
        ("model", pa.string()),
        ("prompt_version", pa.string()),
        ("prompt_sha", pa.string()),
        ("record_view", pa.string()),
        ("view_hash", pa.string()),
        ("status", pa.string()),
        ("categories", pa.list_(pa.string())),
        ("domain", pa.string()),
        ("study_design", pa.string()),
        ("genre", pa.string()),
        ("about_ca_system", pa.bool_()),
        ("about_ca_topic", pa.bool_()),
        ("confidence", pa.string()),
        ("reason", pa.string()),
        ("error", pa.string()),
        ("attempts", pa.int32()),
        ("call_id", pa.string()),
        ("run_id", pa.string()),
        ("source", pa.string()),
        ("source_ref", pa.string()),
        ("created_at", pa.timestamp("us")),
    ]
)

ARCHIVES_SCHEMA = pa.schema(
    [
        ("archive_path", pa.string()),
        ("teacher", pa.string()),
        ("run_id", pa.string()),
        ("lines", pa.int64()),
        ("calls", pa.int64()),
        ("labels", pa.int64()),
        ("recovered", pa.bool_()),
        ("closed_at", pa.timestamp("us")),
        ("note", pa.string()),
    ]
)

LABEL_IMPORTS_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("sha256", pa.string()),
        ("teacher", pa.string()),
        ("model", pa.string()),
        ("prompt_version", pa.string()),
        ("prompt_sha", pa.string()),
        ("source", pa.string()),
        ("rows", pa.int64()),
        ("imported_at", pa.timestamp("us")),
        ("run_id", pa.string()),
    ]
)

IMPORTED_DESIGN_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("work_id", pa.string()),
        ("stratum", pa.string()),
        ("sel_prob", pa.float64()),
        ("design_weight", pa.float64()),
    ]
)

LABEL_BATCHES_SCHEMA = pa.schema(
    [("batch", pa.string()), ("work_id", pa.string()), ("added_at", pa.timestamp("us")), ("source", pa.string())]
)

AGREEMENT_SCHEMA = pa.schema(
    [
        ("pair", pa.string()),
        ("head", pa.string()),
        ("n", pa.int64()),
        ("agreement", pa.float64()),
        ("kappa", pa.float64()),
        ("n_weighted", pa.float64()),
        ("weighted_agreement", pa.float64()),
        ("weighted_kappa", pa.float64()),
        ("n_with_weight", pa.int64()),
        ("config_a", pa.string()),
        ("config_b", pa.string()),
        ("weights", pa.string()),
    ]
)

DISAGREEMENTS_SCHEMA = pa.schema(
    [
        ("pair", pa.string()),
        ("work_id", pa.string()),
        ("head", pa.string()),
        ("value_a", pa.string()),
        ("value_b", pa.string()),
    ]
)

QUALIFICATION_SCHEMA = pa.schema(
    [
        ("teacher", pa.string()),
        ("model", pa.string()),
        ("prompt_version", pa.string()),
        ("prompt_sha", pa.string()),
        ("record_view", pa.string()),
        ("reference", pa.string()),
        ("config_hash", pa.string()),
        ("config", pa.string()),
        ("reference_sha", pa.string()),
        ("status", pa.string()),
        ("kappa", pa.float64()),
        ("needed_kappa", pa.float64()),
        ("frontier_kappa", pa.float64()),
        ("reference_works", pa.int64()),
        ("labelled", pa.int64()),
        ("failed", pa.int64()),
        ("reference_positives", pa.int64()),
        ("teacher_positives", pa.int64()),
        ("weighted_confusion", pa.string()),
        ("note", pa.string()),
        ("run_id", pa.string()),
        ("computed_at", pa.timestamp("us")),
    ]
)

TABLES = [
    Table(
        "teacher_qualification",
        "one qualification result of one teacher configuration (teacher, model, prompt version and SHA, view) "
        "under one qualification configuration, against the frontier reference set; the newest one counts",
        "teacher_qualification",
        QUALIFICATION_SCHEMA,
        store="duckdb",
        json_columns=frozenset({"config", "weighted_confusion"}),
    ),
    Table(
        "teacher_calls",
        "one HTTP call to a teacher: configuration, work ids asked, status, latency, tokens, cost, archive line, "
        "the endpoint that answered",
        "direct_labels_<teacher>",
        CALLS_SCHEMA,
        ("call_id",),
        store="duckdb",
    ),
    Table(
        "teacher_labels",
        "one outcome (labelled or failed) of one label key: work, teacher, model, prompt version and SHA, view hash",
        "direct_labels_<teacher>, imported_labels",
        LABELS_SCHEMA,
        ("label_id",),
        store="duckdb",
        # a row per frame work, a flush every 2 s: the index's checkpoints wrote 42.5 GB at 4.3M works
        key_index=False,
    ),
    Table(
        "teacher_archives",
        "one gzip call archive closed after its run, or recovered after a run that died",
        "direct_labels_<teacher>",
        ARCHIVES_SCHEMA,
        ("archive_path",),
        store="duckdb",
    ),
    Table(
        "label_imports",
        "one imported label file: its SHA-256, the teacher configuration it labels and how many rows it gave",
        "imported_labels",
        LABEL_IMPORTS_SCHEMA,
        store="duckdb",
    ),
    Table(
        "imported_design",
        "the stratum, selection probability and design weight an imported label source gives one work",
        "imported_labels",
        IMPORTED_DESIGN_SCHEMA,
        ("source", "work_id"),
        store="duckdb",
    ),
    Table(
        "label_batches",
        "one work of a named batch a teacher may cover (coverage 'batch:<name>'), e.g. the active-learning proposals",
        "label_batches",
        LABEL_BATCHES_SCHEMA,
        store="duckdb",
    ),
    Table(
        "direct_labels_<teacher>",
        "the current direct label (or failure) of one work for one registry teacher (one table per teacher)",
        "direct_labels_<teacher>",
        LABELS_SCHEMA,
        ("work_id",),
    ),
    Table(
        "imported_labels",
        "the current imported direct label of one work for one imported teacher configuration",
        "imported_labels",
        LABELS_SCHEMA,
        ("teacher", "work_id"),
    ),
    Table(
        "teacher_agreement",
        "one teacher pair on one head: raw and design-weighted agreement and Cohen's kappa",
        "teacher_agreement",
        AGREEMENT_SCHEMA,
        ("pair", "head"),
    ),
    Table(
        "teacher_disagreements",
        "one work on which a teacher pair gives different values for one head",
        "teacher_disagreements",
        DISAGREEMENTS_SCHEMA,
        ("pair", "work_id", "head"),
    ),
]


#: A chunked census run's view hashes (``teachers/core/labelling.py``): a scratch Parquet file, one row per work, deleted
#: when the run ends.
VIEW_HASH_SCHEMA = pa.schema([("work_id", pa.string()), ("view_hash", pa.string())])
