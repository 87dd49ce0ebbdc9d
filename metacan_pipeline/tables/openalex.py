"""Tables of the OpenAlex input stage (:mod:`metacan_pipeline.openalex`): the inventory of input files,
and the typed rows and id index each input file is staged into."""

from __future__ import annotations

import pyarrow as pa

from . import Table

INVENTORY_SCHEMA = pa.schema(
    [
        ("partition_key", pa.string()),
        ("source_file", pa.string()),
        ("present", pa.bool_()),
        ("bytes", pa.int64()),
        ("mtime_ns", pa.int64()),
        ("manifest_record_count", pa.int64()),
        # the manifest's content_length for a listed part (a present part of another size is cut or replaced)
        ("manifest_bytes", pa.int64()),
        ("manifest_status", pa.string()),  # listed | not_in_manifest | no_manifest | missing_locally | not_snapshot
        ("manifest_file", pa.string()),
        # the object's version (ETag) of a file read from object storage, in place of mtime_ns (null for a local file)
        ("etag", pa.string()),
    ]
)

INSTITUTION_TYPE = pa.struct([("id", pa.string()), ("name", pa.string()), ("country_code", pa.string())])
FUNDER_TYPE = pa.struct([("id", pa.string()), ("name", pa.string()), ("via", pa.string())])
LEXICON_HIT_TYPE = pa.struct([("term", pa.string()), ("tier", pa.string()), ("field", pa.string())])

WORKS_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("doi", pa.string()),
        ("title", pa.string()),  # as OpenAlex has it, inline markup included
        ("title_text", pa.string()),  # markup reduced to text
        ("publication_year", pa.int32()),
        ("publication_date", pa.string()),
        ("updated_date", pa.string()),
        ("language", pa.string()),
        ("type", pa.string()),  # an OpenAlex work type (a Crossref-only type is mapped: openalex/works.py)
        ("type_crossref", pa.string()),  # Crossref's type, when the record gives it or its type can only be Crossref's
        ("is_paratext", pa.bool_()),
        ("is_retracted", pa.bool_()),
        ("cited_by_count", pa.int64()),
        ("venue_id", pa.string()),
        ("venue_name", pa.string()),
        ("topic", pa.string()),
        ("field", pa.string()),
        ("institutions", pa.list_(INSTITUTION_TYPE)),
        ("author_countries", pa.list_(pa.string())),
        ("funders", pa.list_(FUNDER_TYPE)),
        ("keywords", pa.list_(pa.string())),
        ("is_authors_truncated", pa.bool_()),
        ("n_authorships", pa.int32()),
        ("has_abstract", pa.bool_()),
        ("lexicon_hits", pa.list_(LEXICON_HIT_TYPE)),
        ("source_file", pa.string()),
        ("source_locator", pa.string()),
    ]
)

INDEX_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("updated_date", pa.string()),
        ("source_file", pa.string()),
        ("source_locator", pa.string()),
        ("ordinal", pa.int64()),
    ]
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
