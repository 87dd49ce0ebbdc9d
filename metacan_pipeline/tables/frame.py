"""Tables of the frame stage (:mod:`metacan_pipeline.frame`, SPEC section 2): the Canadian entity lists,
the parts built per input file, the frame itself and its build records."""

from __future__ import annotations

from .fields import column, columns
from .openalex import WORKS_SCHEMA
from .table import Table

#: The columns a frame row takes over from the staged work record unchanged.
BIBLIOGRAPHIC_COLUMNS = (
    "id",
    "doi",
    "pmid",
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

ENTITY_SCHEMA = columns(
    column("kind", description="institution | funder | venue"),
    column("id", description="OpenAlex short id of the entity (I123, F456, S789)"),
    "display_name",
    "country_code",
    column("updated_date", description="when OpenAlex last updated the entity (ISO 8601)"),
    column("source_file", description="the entity list file the entity was read from"),
    "list_version",
)

#: The frame: the bibliographic columns as the staged works have them, then the routes and their evidence.
FRAME_SCHEMA = columns(
    *(WORKS_SCHEMA.field(name) for name in BIBLIOGRAPHIC_COLUMNS),
    "ca_aff",
    "ca_fund",
    "ca_venue",
    "about_ca",
    "invisible_to_affiliation_only",
    "ca_aff_evidence",
    "ca_fund_evidence",
    "ca_venue_evidence",
    "about_ca_evidence",
    "route_key",
    "in_sampling_frame",
    "sampling_frame_exclusion",
    "has_abstract",
    "is_authors_truncated",
    "ca_institutions",
    "funder_names",
    "other_institutions",
    "ca_funder_names",
    "ca_authors",
    "authorships",
    "keywords",
    "source_file",
    "source_locator",
    "entity_list_versions",
    "lexicon_version",
    "frame_build_id",
)

#: A part's routed works: the frame's columns but the build id (given when the parts are merged).
ROUTED_SCHEMA = columns(*(f for f in FRAME_SCHEMA if f.name != "frame_build_id"))

QUARANTINE_SCHEMA = columns(
    "source_file",
    "locator",
    "line",
    "reason",
    "excerpt",
)

MANIFEST_SCHEMA = columns(
    "partition_key",
    "source_file",
    "bytes",
    "mtime_ns",
    "etag",
    column("sha256", description="SHA-256 of the part's routed works file (null: the file could not be read)"),
    "build_key",
    "manifest_record_count",
    "records_read",
    "work_records",
    "routed",
    "quarantined",
    "count_check",
    "read_path",
    "fallback_reason",
    "started_at",
    "finished_at",
    "seconds",
    "run_id",
)

BUILD_MANIFEST_SCHEMA = columns(*MANIFEST_SCHEMA, "admitted")

FRAME_BUILDS_SCHEMA = columns(
    "frame_build_id",
    "run_id",
    "built_at",
    "works",
    "parts",
)

FRAME_BUILD_RUNS_SCHEMA = columns(
    "frame_build_id",
    "run_id",
    "built_at",
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
    Table(
        "frame_build_runs",
        "one run that produced a frame build (a re-run over unchanged inputs produces the same build again)",
        "frame",
        FRAME_BUILD_RUNS_SCHEMA,
        ("frame_build_id", "run_id"),
        store="duckdb",
    ),
]

#: One authorship of one frame work (every authorship, Canadian or not, in the record's order).
WORK_AUTHORS_SCHEMA = columns(
    "work_id",
    "author_position",
    "author_id",
    "author_id_status",
    "orcid",
    "author_name",
    "is_canadian",
    "institution_ids",
    "publication_year",
)

#: One OpenAlex author of the frame's works (authorships with a valid author id only).
AUTHORS_SCHEMA = columns(
    "author_id",
    "orcid",
    column("display_name", description="the author's name as OpenAlex gives it on their newest work in the frame"),
    column("is_canadian", description="at least one of the author's authorships in the frame is Canadian"),
    "works_in_frame",
    "first_year",
    "last_year",
)

#: One OpenAlex institution of the frame's authorships (resolved institutions only: an id).
INSTITUTIONS_SCHEMA = columns(
    "institution_id",
    "ror",
    column("display_name", description="the institution's name as OpenAlex gives it on its newest work in the frame"),
    "country_code",
    "works_in_frame",
    "first_year",
    "last_year",
)

#: An author's Canadian institution in one publication year, from their Canadian authorships of that year.
AUTHOR_INSTITUTION_YEARS_SCHEMA = columns(
    "author_id",
    "institution_id",
    "publication_year",
    column("works_in_frame", description="frame works of that year on which the author lists the institution"),
)

TABLES += [
    Table(
        "work_authors",
        "one authorship of one frame work, in the record's order, with its author id (or why there is none)",
        "frame_authors",
        WORK_AUTHORS_SCHEMA,
        ("work_id", "author_position"),
    ),
    Table(
        "authors",
        "one OpenAlex author of the frame's works: ids and name as OpenAlex gives them, works and years",
        "frame_authors",
        AUTHORS_SCHEMA,
        ("author_id",),
    ),
    Table(
        "institutions",
        "one OpenAlex institution of the frame's authorships: ROR, name, country, works and years",
        "frame_authors",
        INSTITUTIONS_SCHEMA,
        ("institution_id",),
    ),
    Table(
        "author_institution_years",
        "one author's Canadian institution in one publication year, with the frame works that list it",
        "frame_authors",
        AUTHOR_INSTITUTION_YEARS_SCHEMA,
        ("author_id", "institution_id", "publication_year"),
    ),
]
