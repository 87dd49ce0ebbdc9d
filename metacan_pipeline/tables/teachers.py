"""Tables of the teacher stage (:mod:`metacan_pipeline.teachers`, SPEC section 4): the append-only call
and label store, the call archives, label imports, named batches, direct labels and teacher agreement."""

from __future__ import annotations

import pyarrow as pa

from .fields import column, columns
from .table import Table

CALLS_SCHEMA = columns(
    "call_id",
    "run_id",
    "teacher",
    "model",
    "prompt_version",
    "prompt_sha",
    "record_view",
    "work_ids",
    column("n_works", pa.int32(), description="works asked about in the call"),
    "request_hash",
    "http_status",
    column("error", description="why the call failed (null: it did not)"),
    "latency_s",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "logprob_mean",
    "archive_path",
    "archive_line",
    "created_at",
    # the endpoint that answered (its name: the base URL without credentials or query, or the registry's
    # name for it; never a key); last, as a column added to a store of an older layout is (migrations.py)
    "endpoint",
)

LABELS_SCHEMA = columns(
    "label_id",
    "work_id",
    "teacher",
    "model",
    "prompt_version",
    "prompt_sha",
    "record_view",
    "view_hash",
    column("status", description="labelled | failed: a failed label is unknown, never a negative"),
    "categories",
    "domain",
    "study_design",
    "genre",
    "about_ca_system",
    "about_ca_topic",
    "confidence",
    column("reason", description="the teacher's reason for its label (at most 400 characters)"),
    column("error", description="why the label failed (null: labelled)"),
    "attempts",
    "call_id",
    "run_id",
    column(
        "source", description="where the label came from: a registry teacher's calls, or the source of an imported file"
    ),
    "source_ref",
    "created_at",
)

ARCHIVES_SCHEMA = columns(
    "archive_path",
    "teacher",
    "run_id",
    "lines",
    "calls",
    column("labels", description="labels in the archive"),
    "recovered",
    "closed_at",
    column("note", description="what happened to the archive (e.g. how it was recovered)"),
)

LABEL_IMPORTS_SCHEMA = columns(
    column("file", description="path of the imported label file"),
    "sha256",
    "teacher",
    "model",
    "prompt_version",
    "prompt_sha",
    column("source", description="the label source the file was imported as"),
    "rows",
    "imported_at",
    "run_id",
)

IMPORTED_DESIGN_SCHEMA = columns(
    column("source", description="the imported label source whose design this is"),
    "work_id",
    column("stratum", description="the work's stratum in the imported source's design"),
    "sel_prob",
    column("design_weight", description="the work's design weight in the imported source's design"),
)

REFERENCE_TEXTS_SCHEMA = columns(
    "work_id",
    "title_text",
    "venue_name",
    "topic",
    "field",
    "keywords",
    "language",
    "type",
    column("file", description="the file the work's text was read from"),
)

LABEL_BATCHES_SCHEMA = columns(
    "batch", "work_id", "added_at", column("source", description="what added the work to the batch")
)

AGREEMENT_SCHEMA = columns(
    "pair",
    "head",
    column("n", description="works both teachers labelled on the head"),
    "agreement",
    "kappa",
    "n_weighted",
    "weighted_agreement",
    "weighted_kappa",
    "n_with_weight",
    "config_a",
    "config_b",
    "weights",
)

DISAGREEMENTS_SCHEMA = columns(
    "pair",
    "work_id",
    column("head", description="the label field the two teachers differ on"),
    "value_a",
    "value_b",
)

QUALIFICATION_SCHEMA = columns(
    "teacher",
    "model",
    "prompt_version",
    "prompt_sha",
    "record_view",
    "reference",
    "config_hash",
    "config",
    "reference_sha",
    column("status", description="the qualification's outcome (qualified or not, and why not)"),
    column("kappa", description="the teacher's kappa against the reference"),
    "needed_kappa",
    "frontier_kappa",
    "reference_works",
    "labelled",
    "failed",
    "reference_positives",
    "teacher_positives",
    "weighted_confusion",
    column("note", description="what the result rests on"),
    "run_id",
    "computed_at",
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
        # a row per frame work, written by many short transactions: each checkpoint would rewrite the index
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
        "reference_texts",
        "the student's text fields of an imported work, read from its import (works outside the frame included)",
        "imported_labels",
        REFERENCE_TEXTS_SCHEMA,
        ("work_id",),
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


#: A chunked census run's view hashes (``teachers/labelling.py``): a scratch Parquet file, one row per work, deleted
#: when the run ends.
VIEW_HASH_SCHEMA = columns("work_id", "view_hash")
