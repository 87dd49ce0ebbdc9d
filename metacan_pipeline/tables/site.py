"""Tables of a release database (:mod:`metacan_pipeline.site`, issue 15): one DuckDB file per release,
``data/site/releases/<release_id>.duckdb``, written by the asset ``site_database`` from what ``work_records``
publishes, and opened read-only by the served site.

Every work is keyed by ``work_key`` (the digits of its OpenAlex id as a BIGINT: the rowid of the full-text
index too). The one-to-many tables hold one row per value; direct labels and classifier decisions carry
their source and status verbatim (SPEC section 8), so every count the site shows can say what it counts.
No abstract text is stored (SPEC section 2): ``has_abstract`` only.
"""

from __future__ import annotations

import pyarrow as pa

from . import Table
from .student import PREVALENCE_SCHEMA

RELEASE_INFO_SCHEMA = pa.schema(
    [
        ("release_id", pa.string()),
        ("schema_version", pa.int32()),
        ("built_at", pa.timestamp("s")),
        ("records_sha256", pa.string()),
        ("n_works", pa.int64()),
        ("frame_build_ids", pa.list_(pa.string())),
        ("classifier_versions", pa.list_(pa.string())),
        ("teachers", pa.list_(pa.string())),
        ("score_arms", pa.list_(pa.string())),
        ("fts_engine", pa.string()),
        ("page_context", pa.string()),
    ]
)

SITE_WORKS_SCHEMA = pa.schema(
    [
        ("work_key", pa.int64()),
        ("id", pa.string()),
        ("title", pa.string()),
        ("year", pa.int32()),
        ("language", pa.string()),
        ("type", pa.string()),
        ("venue", pa.string()),
        ("field", pa.string()),
        ("topic", pa.string()),
        ("doi", pa.string()),
        ("cited_by", pa.int64()),
        ("has_abstract", pa.bool_()),
        ("is_retracted", pa.bool_()),
        ("ca_aff", pa.bool_()),
        ("ca_fund", pa.bool_()),
        ("ca_venue", pa.bool_()),
        ("about_ca", pa.bool_()),
        ("invisible_to_affiliation_only", pa.bool_()),
        ("in_sampling_frame", pa.bool_()),
        ("classification_kind", pa.string()),
        ("model_version", pa.string()),
        ("prediction_status", pa.string()),
        ("candidate_categories", pa.list_(pa.string())),
        ("consensus_categories", pa.list_(pa.string())),
        ("score_spread", pa.float64()),
        ("validation_status", pa.string()),
        ("page_path", pa.string()),
        ("record_json", pa.string()),
    ]
)

NAMES_SCHEMA = pa.schema([("work_key", pa.int64()), ("name", pa.string())])

SITE_LABELS_SCHEMA = pa.schema(
    [
        ("work_key", pa.int64()),
        ("teacher", pa.string()),
        ("model", pa.string()),
        ("prompt_version", pa.string()),
        ("record_view", pa.string()),
        ("status", pa.string()),
        ("label_status", pa.string()),
        ("qualification", pa.string()),
        ("qualified", pa.bool_()),
        ("categories", pa.list_(pa.string())),
        ("domain", pa.string()),
        ("study_design", pa.string()),
        ("genre", pa.string()),
        ("confidence", pa.string()),
    ]
)

DECISIONS_SCHEMA = pa.schema(
    [
        ("work_key", pa.int64()),
        ("model_version", pa.string()),
        ("mode", pa.string()),
        ("category", pa.string()),
        ("prediction_status", pa.string()),
        ("score_codex", pa.float64()),
        ("score_gemma", pa.float64()),
    ]
)

MACHINE_LONG_SCHEMA = pa.schema(
    [("work_key", pa.int64()), ("arm", pa.string()), ("score", pa.float64()), ("validation_status", pa.string())]
)

CLASSIFIER_HEADS_SCHEMA = pa.schema(
    [
        ("model_version", pa.string()),
        ("teacher", pa.string()),
        ("target", pa.string()),
        ("gate_passed", pa.bool_()),
        ("gate_reason", pa.string()),
    ]
)

FACET_CODES_SCHEMA = pa.schema(
    [
        ("facet", pa.string()),
        ("code", pa.int32()),
        ("value", pa.string()),
        ("model_version", pa.string()),
        ("mode", pa.string()),
        ("prediction_status", pa.string()),
    ]
)

#: The facet and filter columns of ``works`` (text values as ``facet_codes`` codes) and the name lists and
#: classifier decisions as code lists, one narrow row per work: what a cohort's count, coverage and facets read.
WORK_FACETS_SCHEMA = pa.schema(
    [
        ("work_key", pa.int64()),
        ("year", pa.int32()),
        *((name, pa.int32()) for name in ("language", "type", "field", "topic", "venue", "classification_kind")),
        *(
            (name, pa.bool_())
            for name in ("ca_aff", "ca_fund", "ca_venue", "about_ca", "invisible_to_affiliation_only")
            + ("has_abstract", "is_retracted", "scored", "labelled", "decided")
        ),
        *((name, pa.list_(pa.int32())) for name in ("institution", "funder", "keyword", "classifier")),
    ]
)

FACET_COUNTS_SCHEMA = pa.schema([("facet", pa.string()), ("items", pa.string())])
COHORT_FACET_COUNTS_SCHEMA = pa.schema(
    [("cohort_key", pa.string()), ("filters", pa.string()), ("facet", pa.string()), ("items", pa.string())]
)

#: The facets of ``work_facets`` counted per year and language code (``site/build/cube.py``): ``code`` is a
#: ``facet_codes`` code (the year for ``year``, 1/0 for a boolean, 0-3 for ``_coverage``); the direct-label facet's
#: rows (``label``) have no code but a teacher, a category and the labels' qualification sentence.
YEAR_LANGUAGE_COUNTS_SCHEMA = pa.schema(
    [
        ("year", pa.int32()),
        ("language", pa.int32()),
        ("facet", pa.string()),
        ("code", pa.int32()),
        ("teacher", pa.string()),
        ("category", pa.string()),
        ("qualification", pa.string()),
        ("n", pa.int64()),
    ]
)

STATISTICS_SCHEMA = pa.schema([("figure", pa.string()), ("items", pa.string())])

#: The pipeline's ``prevalence`` rows (:data:`metacan_pipeline.tables.student.PREVALENCE_SCHEMA`) in their table
#: order (``position``), copied at build time (``teacher`` is null for the classifier's and the swap's rows).
RELEASE_PREVALENCE_SCHEMA = pa.schema([("position", pa.int64()), *PREVALENCE_SCHEMA])

DISAGREEMENT_SCHEMA = pa.schema(
    [
        ("work_key", pa.int64()),
        ("pair", pa.string()),
        ("teacher_a", pa.string()),
        ("teacher_b", pa.string()),
        ("heads", pa.list_(pa.string())),
    ]
)

SAVED_QUERIES_SCHEMA = pa.schema(
    [
        ("query_hash", pa.string()),
        ("filters", pa.string()),
        ("release_id", pa.string()),
        ("classifier_version", pa.string()),
        ("created_at", pa.string()),
    ]
)

#: Written by the asset ``site_database``; ``store="release"``: a table of each release database file.
TABLES = [
    Table(
        "release_info",
        "the release itself (one row): id, build time, SHA-256 of the records, classifier versions",
        "site_database",
        RELEASE_INFO_SCHEMA,
        ("release_id",),
        store="release",
        json_columns=frozenset({"page_context"}),
    ),
    Table(
        "works",
        "one published work: the bibliographic columns a cohort filters on, routes, card kind, its record JSON",
        "site_database",
        SITE_WORKS_SCHEMA,
        ("work_key",),
        store="release",
    ),
    Table(
        "work_institutions",
        "one Canadian institution of a work",
        "site_database",
        NAMES_SCHEMA,
        ("work_key", "name"),
        store="release",
    ),
    Table("work_funders", "one funder of a work", "site_database", NAMES_SCHEMA, ("work_key", "name"), store="release"),
    Table(
        "work_keywords", "one keyword of a work", "site_database", NAMES_SCHEMA, ("work_key", "name"), store="release"
    ),
    Table(
        "work_labels",
        "one teacher's direct label of a work (labelled or failed), with its status and qualification sentence",
        "site_database",
        SITE_LABELS_SCHEMA,
        ("work_key", "teacher"),
        store="release",
    ),
    Table(
        "work_decisions",
        "one category the classifier called for a work in one mode (candidate or consensus), with both scores",
        "site_database",
        DECISIONS_SCHEMA,
        ("work_key", "model_version", "mode", "category"),
        store="release",
    ),
    Table(
        "work_scores",
        "one machine-score arm's score of a work, with the validation_status the record carries",
        "site_database",
        MACHINE_LONG_SCHEMA,
        ("work_key", "arm"),
        store="release",
    ),
    Table(
        "facet_codes",
        "one value of a facet as a small integer: a text column's value, a name, or a classifier decision "
        "(model_version, mode, category, with its prediction_status)",
        "site_database",
        FACET_CODES_SCHEMA,
        ("facet", "code"),
        store="release",
    ),
    Table(
        "work_facets",
        "one work's filter and facet values in codes (flags scored, labelled, decided; names and decisions as "
        "code lists): what cohort counts, coverage and facets scan",
        "site_database",
        WORK_FACETS_SCHEMA,
        ("work_key",),
        store="release",
    ),
    Table(
        "facet_counts",
        "one facet of the whole release, as the site lists it (JSON items): the facets of the cohort with no filter",
        "site_database",
        FACET_COUNTS_SCHEMA,
        ("facet",),
        store="release",
        json_columns=frozenset({"items"}),
    ),
    Table(
        "cohort_facet_counts",
        "one facet (or _count, _coverage) of a frequent one-filter cohort (its filters as JSON; the key hashes its "
        "coded clauses), counted at build time: site/query/stored_counts.py",
        "site_database",
        COHORT_FACET_COUNTS_SCHEMA,
        ("cohort_key", "facet"),
        store="release",
        json_columns=frozenset({"filters", "items"}),
    ),
    Table(
        "year_language_counts",
        "the works of one year and language code (either may be NULL) with one facet code (or one teacher and "
        "category of the direct-label facet, or one coverage count), counted at build time: site/build/cube.py",
        "site_database",
        YEAR_LANGUAGE_COUNTS_SCHEMA,
        (),  # no key constraint: year, language, code and teacher may be NULL (unique per the six columns)
        store="release",
    ),
    Table(
        "classifier_heads",
        "one student head of a classifier version: whether it passed the support gate",
        "site_database",
        CLASSIFIER_HEADS_SCHEMA,
        ("model_version", "teacher", "target"),
        store="release",
    ),
]

# The statistics page, the disagreement dossier and the facet typeahead (site/build/figures.py, at build time).
TABLES += [
    Table(
        "release_statistics",
        "one figure of the statistics page over the whole release (JSON items: the rows of its data table)",
        "site_database",
        STATISTICS_SCHEMA,
        ("figure",),
        store="release",
        json_columns=frozenset({"items"}),
    ),
    Table(
        "release_prevalence",
        "one row of the pipeline's prevalence table (population, category, method, teacher), copied at build time",
        "site_database",
        RELEASE_PREVALENCE_SCHEMA,
        ("position",),
        store="release",
    ),
    Table(
        "work_disagreements",
        "one work on which a pair of teachers' labelled direct labels differ, with the heads they differ on",
        "site_database",
        DISAGREEMENT_SCHEMA,
        ("work_key", "pair"),
        store="release",
    ),
    Table(
        "dossier_works",
        "one work of work_disagreements: what the dossier lists of it (id, title, year, venue, page path) and every "
        "teacher's direct label as its record publishes it (JSON: verdict, reason, source and status)",
        "site_database",
        pa.schema(
            [
                ("work_key", pa.int64()),
                ("id", pa.string()),
                ("title", pa.string()),
                ("year", pa.int32()),
                ("venue", pa.string()),
                ("page_path", pa.string()),
                ("direct_labels", pa.string()),
            ]
        ),
        ("work_key",),
        store="release",
        json_columns=frozenset({"direct_labels"}),
    ),
    Table(
        "facet_value_counts",
        "one value of a typeahead facet (venue, institution, funder, topic) with its facet_codes code and its "
        "number of works in the whole release",
        "site_database",
        pa.schema([("facet", pa.string()), ("code", pa.int32()), ("value", pa.string()), ("n", pa.int64())]),
        ("facet", "code"),
        store="release",
    ),
]

#: The served site's own writable file, ``<data dir>/site/queries.sqlite`` (:mod:`metacan_pipeline.site.web.saved`).
SAVED_QUERIES = Table(
    "saved_queries",
    "one cohort a /q/<hash> link names: its canonical filters, release id and classifier version (never changed)",
    "metacan serve",
    SAVED_QUERIES_SCHEMA,
    ("query_hash",),
    store="sqlite",
)
TABLES.append(SAVED_QUERIES)


def release_tables() -> list[Table]:
    """The tables of a release database, in the order they are created."""
    return [t for t in TABLES if t.store == "release"]


def catalog_schema(name: str) -> pa.Schema:
    """The Arrow schema of the release table ``name``."""
    return next(t.schema for t in TABLES if t.name == name)


#: The full-text index's own tables (``site/build/fts.py``), in the release's ``.fts.sqlite`` file beside the FTS5 table
#: ``work_text`` (whose rowids are the works in impact order: the per-work bound of BM25, highest first).
#: ``work_keys``: each rowid's work key; ``work_bound``: the bound of every work from ``first_rowid`` up to the next
#: row's; ``term_docs``: the number of works holding each term in at least ``fts.TERM_DOCS_MIN`` works;
#: ``index_stats``: the works and tokens FTS5 averages.
FTS_TABLES_DDL = (
    "CREATE TABLE work_keys(rowid_ INTEGER PRIMARY KEY, work_key INTEGER NOT NULL)",
    "CREATE TABLE work_bound(first_rowid INTEGER PRIMARY KEY, bound REAL NOT NULL)",
    "CREATE TABLE term_docs(term TEXT PRIMARY KEY, docs INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE index_stats(works INTEGER NOT NULL, tokens INTEGER NOT NULL)",
)
#: The scratch tables of an index build (a ``.stage`` file beside the index, removed at the end): every work's
#: text with its token count and largest term frequency, then the works in impact order.
FTS_STAGE_DDL = (
    "CREATE TABLE stage.docs(work_key INTEGER PRIMARY KEY, tokens INTEGER NOT NULL, max_tf INTEGER NOT NULL, "
    "title TEXT, keywords TEXT)",
    "CREATE TABLE stage.ordered(position INTEGER PRIMARY KEY, work_key INTEGER NOT NULL, bound REAL NOT NULL)",
)
