"""Tables of the Retraction Watch stage (:mod:`metacan_pipeline.retraction`): the notices of the Crossref Labs
Retraction Watch export, the rows refused when reading it, the file that was read, and the notices joined to frame
works."""

from __future__ import annotations

import pyarrow as pa

from .fields import column, columns
from .table import Table

NOTICES_SCHEMA = columns(
    "rw_record_id",
    column("title", description="the original paper's title as Retraction Watch gives it"),
    "journal",
    "publisher",
    "retraction_nature",
    "retraction_state",
    "retraction_reasons",
    "retraction_date",
    "notice_doi",
    "notice_pmid",
    "original_date",
    "original_doi",
    "original_pmid",
    "rw_version",
)

QUARANTINE_SCHEMA = columns(
    column("line", description="the row's line in the Retraction Watch file (1: the header)"),
    column("rw_record_id", type=pa.string(), description="the row's Record ID cell as written (null: empty)"),
    "reason",
    column("excerpt", description="the first 200 characters of the refused row"),
    "rw_version",
)

SOURCE_SCHEMA = columns(
    "rw_version",
    column("status", description="loaded | not_configured"),
    column("source", description="the file or URL read (a URL without its query string); null when not configured"),
    column("file", description="the archived copy read, under the data folder (null: not configured)"),
    "sha256",
    column("bytes", description="size of the file read, in bytes"),
    "retrieved_at",
    "file_date",
    "data_through",
    column("rows", description="notices read"),
    column(
        "quarantined",
        description="rows of the file refused, each in retraction_watch_quarantine with its row number and why",
    ),
)

WORK_RETRACTIONS_SCHEMA = columns(
    "id",
    "rw_record_id",
    "retraction_nature",
    "retraction_state",
    "retraction_reasons",
    "retraction_date",
    "notice_doi",
    "notice_pmid",
    "matched_by",
    column("is_retracted", description="OpenAlex's is_retracted of the work, as the frame has it"),
    "openalex_missed",
    "rw_version",
)

TABLES = [
    Table(
        "retraction_watch",
        "one notice of the Retraction Watch file (retraction, expression of concern, correction, reinstatement)",
        "retraction_watch",
        NOTICES_SCHEMA,
        ("rw_record_id",),
    ),
    Table(
        "retraction_watch_quarantine",
        "one row of the Retraction Watch file that could not be read: its line and why",
        "retraction_watch",
        QUARANTINE_SCHEMA,
        ("line",),
    ),
    Table(
        "retraction_watch_source",
        "the Retraction Watch file read (or that none is configured): version, date, hash, counts",
        "retraction_watch",
        SOURCE_SCHEMA,
    ),
    Table(
        "work_retractions",
        "one Retraction Watch notice of one frame work, joined by normalised DOI or PubMed id",
        "work_retractions",
        WORK_RETRACTIONS_SCHEMA,
        ("id", "rw_record_id"),
    ),
]
