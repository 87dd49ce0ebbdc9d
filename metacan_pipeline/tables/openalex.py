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
    # the manifest's content_length for a listed part (a present part of another size is cut or replaced)
    "manifest_bytes",
    "manifest_status",  # listed | not_in_manifest | no_manifest | missing_locally | not_snapshot
    "manifest_file",
    # the object's version (ETag) of a file read from object storage, in place of mtime_ns (null for a local file)
    "etag",
)

WORKS_SCHEMA = columns(
    "id",
    "doi",
    "title",  # as OpenAlex has it, inline markup included
    "title_text",  # markup reduced to text
    "publication_year",
    "publication_date",
    "updated_date",
    "language",
    "type",  # an OpenAlex work type (a Crossref-only type is mapped: openalex/works.py)
    "type_crossref",  # Crossref's type, when the record gives it or its type can only be Crossref's
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
