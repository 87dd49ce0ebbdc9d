"""Tables of the frame stage (:mod:`metacan_pipeline.frame`, SPEC section 2): the Canadian entity lists,
the parts built per input file, the frame itself and its build records."""

from __future__ import annotations

import pyarrow as pa

from . import Table
from .openalex import WORKS_SCHEMA

#: The columns a frame row takes over from the staged work record unchanged.
BIBLIOGRAPHIC_COLUMNS = (
    "id",
    "doi",
    "title",
    "title_text",
    "publication_year",
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
    "updated_date",
)

ENTITY_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("id", pa.string()),
        ("display_name", pa.string()),
        ("country_code", pa.string()),
        ("updated_date", pa.string()),
        ("source_file", pa.string()),
        ("list_version", pa.string()),
    ]
)

FRAME_SCHEMA = pa.schema(
    [
        # the bibliographic columns, as the staged works have them
        *(WORKS_SCHEMA.field(name) for name in BIBLIOGRAPHIC_COLUMNS),
        ("ca_aff", pa.bool_()),
        ("ca_fund", pa.bool_()),
        ("ca_venue", pa.bool_()),
        ("about_ca", pa.bool_()),
        ("invisible_to_affiliation_only", pa.bool_()),
        ("ca_aff_evidence", pa.list_(pa.string())),
        ("ca_fund_evidence", pa.list_(pa.string())),
        ("ca_venue_evidence", pa.list_(pa.string())),
        ("about_ca_evidence", pa.list_(pa.string())),
        ("route_key", pa.string()),
        ("in_sampling_frame", pa.bool_()),
        ("sampling_frame_exclusion", pa.string()),
        ("has_abstract", pa.bool_()),
        ("is_authors_truncated", pa.bool_()),
        ("ca_institutions", pa.list_(pa.string())),
        ("funder_names", pa.list_(pa.string())),
        # institutions of the work outside Canada, and the funders of funder_names on the Canadian funder list
        # (the record views mark which are Canadian, SPEC section 4)
        ("other_institutions", pa.list_(pa.string())),
        ("ca_funder_names", pa.list_(pa.string())),
        ("keywords", pa.list_(pa.string())),
        ("source_file", pa.string()),
        ("source_locator", pa.string()),
        ("entity_list_versions", pa.string()),
        ("lexicon_version", pa.string()),
        ("frame_build_id", pa.string()),
    ]
)

#: A part's routed works: the frame's columns but the build id (given when the parts are merged).
ROUTED_SCHEMA = pa.schema([f for f in FRAME_SCHEMA if f.name != "frame_build_id"])

QUARANTINE_SCHEMA = pa.schema(
    [
        ("source_file", pa.string()),
        ("locator", pa.string()),
        ("line", pa.int64()),
        ("reason", pa.string()),
        ("excerpt", pa.string()),
    ]
)

MANIFEST_SCHEMA = pa.schema(
    [
        ("partition_key", pa.string()),
        ("source_file", pa.string()),
        ("bytes", pa.int64()),
        ("mtime_ns", pa.int64()),
        ("etag", pa.string()),  # the object's version (ETag) of a file read from object storage (null: a local file)
        ("sha256", pa.string()),
        ("build_key", pa.string()),
        ("manifest_record_count", pa.int64()),  # what the snapshot manifest lists for this part (null: not listed)
        ("records_read", pa.int64()),  # records of any entity plus unreadable lines
        ("work_records", pa.int64()),
        ("routed", pa.int64()),
        ("quarantined", pa.int64()),
        ("count_check", pa.string()),  # ok | mismatch | not_in_manifest | no_manifest
        ("read_path", pa.string()),
        ("fallback_reason", pa.string()),
        ("started_at", pa.string()),
        ("finished_at", pa.string()),
        ("seconds", pa.float64()),
        ("run_id", pa.string()),
    ]
)

BUILD_MANIFEST_SCHEMA = pa.schema(list(MANIFEST_SCHEMA) + [pa.field("admitted", pa.int64())])

FRAME_BUILDS_SCHEMA = pa.schema(
    [
        ("frame_build_id", pa.string()),
        ("run_id", pa.string()),
        ("built_at", pa.timestamp("us")),
        ("works", pa.int64()),
        ("parts", pa.int64()),
    ]
)

TABLES = [
    Table(
        "canadian_entities",
        "one Canadian institution, funder or venue of the pinned entity lists, with its list version",
        "canadian_entities",
        ENTITY_SCHEMA,
        ("kind", "id"),
    ),
    Table(
        "frame_parts.routed",
        "one work of one input file with at least one route (SPEC section 2), before the merge",
        "frame_parts",
        ROUTED_SCHEMA,
        ("id", "source_file", "source_locator"),
        store="part",
    ),
    Table(
        "frame_parts.quarantine",
        "one unreadable record of one input file: where it is and why it was refused",
        "frame_parts",
        QUARANTINE_SCHEMA,
        store="part",
    ),
    Table(
        "frame_parts.manifest",
        "one finished part (manifest.json): its build key, counts, read path and timing",
        "frame_parts",
        MANIFEST_SCHEMA,
        ("source_file",),
        store="part",
    ),
    Table(
        "frame",
        "one admitted Canada-linked work (newest version), its routes with their evidence, no abstract text",
        "frame",
        FRAME_SCHEMA,
        ("id",),
    ),
    Table(
        "openalex_quarantine",
        "one input record refused by any part of the frame (file, locator, line, reason, excerpt)",
        "openalex_quarantine",
        QUARANTINE_SCHEMA,
    ),
    Table(
        "frame_build_manifest",
        "one part used by the current frame build, with its counts and how many of its works were admitted",
        "frame_build_manifest",
        BUILD_MANIFEST_SCHEMA,
        ("source_file",),
    ),
    Table(
        "frame_builds",
        "one frame build id and the run that first produced it",
        "frame",
        FRAME_BUILDS_SCHEMA,
        ("frame_build_id",),
        store="duckdb",
    ),
]
