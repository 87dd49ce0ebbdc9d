"""Tables of the OpenAlex input stage (:mod:`metacan_pipeline.openalex`): the inventory of input files,
and the typed rows and id index each input file is staged into."""

from __future__ import annotations

from .fields import columns
from .table import Table

INVENTORY_SCHEMA = columns(
    "partition_key",
    "source_file",
    "present",
    "bytes",
    "mtime_ns",
    "manifest_record_count",
    "manifest_bytes",
    "manifest_status",
    "manifest_file",
    "etag",
)

WORKS_SCHEMA = columns(
    "id",
    "doi",
    "pmid",
    "title",
    "title_text",
    "publication_year",
    "publication_date",
    "updated_date",
    "language",
    "type",
    "type_crossref",
    "is_paratext",
    "is_retracted",
    "cited_by_count",
    "venue_id",
    "venue_name",
    "topic",
    "field",
    "institutions",
    "author_countries",
    "authors",
    "funders",
    "keywords",
    "is_authors_truncated",
    "n_authorships",
    "has_abstract",
    "lexicon_hits",
    "source_file",
    "source_locator",
)

INDEX_SCHEMA = columns(
    "id",
    "updated_date",
    "source_file",
    "source_locator",
    "ordinal",
)

TABLES = [
    Table(
        "openalex_inventory",
        "one input file of one partition: present or not, size, mtime, and what the snapshot manifest says of it",
        "openalex_inventory",
        INVENTORY_SCHEMA,
        ("partition_key", "source_file"),
    ),
    Table(
        "staged_works",
        "one work record of an input file as typed columns (no abstract text), before routing (in memory only)",
        "frame_parts",
        WORKS_SCHEMA,
        ("id",),
        store="batch",
    ),
    Table(
        "frame_parts.index",
        "one work record of one input file (any route or none): id, updated_date and where it is",
        "frame_parts",
        INDEX_SCHEMA,
        ("id", "source_file", "ordinal"),
        store="part",
    ),
]
