"""Tables of a release database (:mod:`metacan_pipeline.site`): one DuckDB file per release,
``data/site/releases/<release_id>.duckdb``, written by the asset ``site_database`` from what ``work_records``
publishes, and opened read-only by the served site.

Every work is keyed by ``work_key`` (the digits of its OpenAlex id as a BIGINT: the rowid of the full-text
index too). The one-to-many tables hold one row per value; direct labels and classifier decisions carry
their source and status verbatim (SPEC section 8), so every count the site shows can say what it counts.
No abstract text is stored (SPEC section 2): ``has_abstract`` only.
"""

from __future__ import annotations

import pyarrow as pa

from .fields import column, columns
from .student import PREVALENCE_SCHEMA
from .table import Table

RELEASE_INFO_SCHEMA = columns(
    "release_id",
    "schema_version",
    column("built_at", pa.timestamp("s"), description="when the release database was built (UTC)"),
    "records_sha256",
    column("n_works", description="works in the release"),
    "frame_build_ids",
    "classifier_versions",
    "teachers",
    "score_arms",
    "fts_engine",
    "page_context",
)

SITE_WORKS_SCHEMA = columns(
    "work_key",
    "id",
    column("title", description="the work's title"),
    "year",
    "language",
    "type",
    "venue",
    "field",
    "topic",
    "doi",
    "cited_by",
    "has_abstract",
    "is_retracted",
    "retraction_state",
    "openalex_missed",
    "ca_aff",
    "ca_fund",
    "ca_venue",
    "about_ca",
    "invisible_to_affiliation_only",
    "in_sampling_frame",
    "classification_kind",
    "release_layer",
    "cascade_decision",
    column("model_version", description="the classifier version of the work's decisions (null: none)"),
    "prediction_status",
    "candidate_categories",
    "consensus_categories",
    column(
        "scored",
        pa.bool_(),
        "the classifier gave the work at least one category score (a head trained on one class gives none: null)",
    ),
    "score_spread",
    "validation_status",
    "page_path",
    "record_json",
)

NAMES_SCHEMA = columns("work_key", "name")

SITE_LABELS_SCHEMA = columns(
    "work_key",
    "teacher",
    "model",
    "prompt_version",
    "record_view",
    column("status", description="labelled | failed"),
    "label_status",
    "qualification",
    "qualified",
    "categories",
    "domain",
    "study_design",
    "genre",
    "confidence",
)

DECISIONS_SCHEMA = columns(
    "work_key",
    "model_version",
    "mode",
    column("category", description="the category decided"),
    "prediction_status",
    column("score_codex", description="the student's codex head score on the category"),
    column("score_gemma", description="the student's gemma head score on the category"),
)

MACHINE_LONG_SCHEMA = columns(
    "work_key", "arm", column("score", description="the arm's score of the work"), "validation_status"
)

CLASSIFIER_HEADS_SCHEMA = columns(
    "model_version",
    "teacher",
    "target",
    "gate_passed",
    "gate_reason",
)

FACET_CODES_SCHEMA = columns(
    "facet",
    "code",
    column("value", pa.string(), description="the facet's value the code stands for"),
    column("model_version", description="for a classifier decision: its classifier version"),
    column("mode", description="for a classifier decision: candidate | consensus"),
    column("prediction_status", description="for a classifier decision: its prediction_status"),
    column(
        "norm",
        pa.string(),
        "the value folded as a text filter compares it: lower(strip_accents(value)) (null for a classifier decision)",
    ),
)

#: The text columns of ``works`` that ``facet_codes`` numbers and ``work_facets`` holds as codes (site/sql/facets.sql
#: joins them in this order, as ``k1`` ... ``k9``).
CODED_FACETS: tuple[str, ...] = (
    "language",
    "type",
    "field",
    "topic",
    "venue",
    "classification_kind",
    "release_layer",
    "retraction_state",
    "cascade_decision",
)

#: The facet and filter columns of ``works`` (text values as ``facet_codes`` codes) and the name lists and
#: classifier decisions as code lists, one narrow row per work: what a cohort's count, coverage and facets read.
WORK_FACETS_SCHEMA = columns(
    "work_key",
    "year",
    *(column(name, pa.int32(), f"facet_codes code of the work's {name}") for name in CODED_FACETS),
    "ca_aff",
    "ca_fund",
    "ca_venue",
    "about_ca",
    "invisible_to_affiliation_only",
    "has_abstract",
    "is_retracted",
    "openalex_missed",
    column("scored", pa.bool_(), "the classifier gave the work at least one category score (works.scored)"),
    column("labelled", pa.bool_(), "a teacher labelled the work"),
    "decided",
    "classified",
    "cited_by",
    "institution",
    "funder",
    "keyword",
    "classifier",
)

#: Another OpenAlex id of the same work (site/build/versions.py): one row per ordered pair of works grouped together.
WORK_VERSIONS_SCHEMA = columns(
    "work_key",
    column("other_key", pa.int64(), "the work_key of another OpenAlex work that is the same work"),
    column(
        "basis",
        pa.string(),
        "why they are grouped: doi (the same DOI) or title_year (the same normalised title and year); both, "
        "comma-separated, when both hold",
    ),
)

FACET_COUNTS_SCHEMA = columns("facet", "items")
COHORT_FACET_COUNTS_SCHEMA = columns("cohort_key", "filters", "facet", "items")

#: The facets of ``work_facets`` counted per year and language code (``site/build/cube.py``): ``code`` is a
#: ``facet_codes`` code (the year for ``year``, 1/0 for a boolean, 0-3 for ``_coverage``); the direct-label facet's
#: rows (``label``) have no code but a teacher, a category and the labels' qualification sentence.
YEAR_LANGUAGE_COUNTS_SCHEMA = columns(
    column("year", description="the works' year of publication (null: any)"),
    column("language", pa.int32(), description="facet_codes code of the works' language (null: any)"),
    "facet",
    column("code", description="the facet value's code (the year for year, 1/0 for a flag, 0-3 for _coverage)"),
    column("teacher", description="the direct-label facet's teacher"),
    column("category", description="the direct-label facet's category"),
    column("qualification", description="the direct labels' qualification sentence"),
    column("n", description="works counted"),
)

STATISTICS_SCHEMA = columns("figure", "items")

#: The pipeline's ``prevalence`` rows (:data:`metacan_pipeline.tables.student.PREVALENCE_SCHEMA`) in their table
#: order (``position``), copied at build time (``teacher`` is null for the classifier's and the swap's rows).
RELEASE_PREVALENCE_SCHEMA = columns(
    column("position", description="the row's position in the pipeline's prevalence table, from 0"), *PREVALENCE_SCHEMA
)

DISAGREEMENT_SCHEMA = columns(
    "work_key",
    "pair",
    "teacher_a",
    "teacher_b",
    column("heads", description="the heads the two teachers' labels differ on"),
)

#: The works of the rolling layer (SPEC section 8: in the frame after the newest frozen release), one row each, in
#: work_key order, with the input they arrived through (``site/sql/recent.sql``).
RECENT_WORKS_SCHEMA = columns(
    "work_key",
    "arrived_in",
    "updated_date",
)

SAVED_QUERIES_SCHEMA = columns(
    "query_hash",
    "filters",
    "release_id",
    column("classifier_version", description="the classifier version the cohort was counted with"),
    column("created_at", pa.string(), description="when the link was first made (ISO 8601, UTC)"),
)

#: One authorship of a released work (the frame's ``authorships``, every one, in the record's order).
SITE_WORK_AUTHORS_SCHEMA = columns(
    "work_key",
    "author_position",
    "author_id",
    "author_id_status",
    "orcid",
    "author_name",
    "is_canadian",
    "institution_ids",
)
#: One institution (with an OpenAlex id) of a released work's authorships.
SITE_WORK_INSTITUTION_IDS_SCHEMA = columns(
    "work_key",
    "institution_id",
    column("display_name", description="the institution's name as OpenAlex gives it on the work"),
    "ror",
    "country_code",
    column("is_canadian", description="the institution is Canadian: country code CA or on the pinned list"),
)
#: One author of the release's works (authorships with a valid author id).
SITE_AUTHORS_SCHEMA = columns(
    "author_id",
    "orcid",
    column("display_name", description="the author's name as OpenAlex gives it on their newest work in the release"),
    column("is_canadian", description="at least one of the author's authorships in the release is Canadian"),
    column("works_in_frame", description="works of the release listing the author"),
    "first_year",
    "last_year",
)
#: One institution of the release's works.
SITE_INSTITUTIONS_SCHEMA = columns(
    "institution_id",
    "ror",
    column("display_name", description="the institution's name as OpenAlex gives it on its newest work in the release"),
    "country_code",
    column("is_canadian", description="the institution is Canadian: country code CA or on the pinned list"),
    column("works_in_frame", description="works of the release listing the institution"),
    "first_year",
    "last_year",
)


#: Written by the asset ``site_database``; ``store="release"``: a table of each release database file. Only ``works``
#: keeps its primary key as an index: a page of results joins its few works by work_key, which DuckDB answers from
#: the index (a scan of every work otherwise, 0.15-0.39 s at 4.3M works against 0.03-0.15 s). The other tables'
#: indexes (:func:`_release`'s default) were about 6 times the size of their data, and their reads are scans or lookups by
#: work_key, which their work_key order makes cheap. The build writes each key once (site/test_build.py checks it).
def _release(*args, key_index: bool = False, **kwargs) -> Table:
    """A table of each release database (``store="release"``), without its primary key as an index unless told."""
    return Table(*args, store="release", key_index=key_index, **kwargs)


TABLES = [
    _release(
        "site_work_authors",
        "one authorship of a work, in the record's order: author id (or why none), ORCID, name, Canadian or not",
        "site_database",
        SITE_WORK_AUTHORS_SCHEMA,
        ("work_key", "author_position"),
    ),
    _release(
        "site_work_institution_ids",
        "one institution of a work's authorships, by its OpenAlex id, with its ROR, name and country",
        "site_database",
        SITE_WORK_INSTITUTION_IDS_SCHEMA,
        ("work_key", "institution_id"),
    ),
    _release(
        "site_authors",
        "one author of the release's works: ORCID, name as OpenAlex gives it, works and years",
        "site_database",
        SITE_AUTHORS_SCHEMA,
        ("author_id",),
    ),
    _release(
        "site_institutions",
        "one institution of the release's works: ROR, name, country, works and years",
        "site_database",
        SITE_INSTITUTIONS_SCHEMA,
        ("institution_id",),
    ),
    _release(
        "release_info",
        "the release itself (one row): id, build time, SHA-256 of the records, classifier versions",
        "site_database",
        RELEASE_INFO_SCHEMA,
        ("release_id",),
        json_columns=frozenset({"page_context"}),
    ),
    _release(
        "works",
        "one published work: the bibliographic columns a cohort filters on, routes, card kind, its record JSON",
        "site_database",
        SITE_WORKS_SCHEMA,
        ("work_key",),
        key_index=True,
        zstd_columns=frozenset({"record_json"}),
    ),
    _release(
        "work_institutions",
        "one Canadian institution of a work",
        "site_database",
        NAMES_SCHEMA,
        ("work_key", "name"),
    ),
    _release(
        "work_funders",
        "one funder of a work",
        "site_database",
        NAMES_SCHEMA,
        ("work_key", "name"),
    ),
    _release(
        "work_keywords",
        "one keyword of a work",
        "site_database",
        NAMES_SCHEMA,
        ("work_key", "name"),
    ),
    _release(
        "work_labels",
        "one teacher's direct label of a work (labelled or failed), with its status and qualification sentence",
        "site_database",
        SITE_LABELS_SCHEMA,
        ("work_key", "teacher"),
    ),
    _release(
        "work_decisions",
        "one category the classifier called for a work in one mode (candidate or consensus), with both scores",
        "site_database",
        DECISIONS_SCHEMA,
        ("work_key", "model_version", "mode", "category"),
    ),
    _release(
        "work_scores",
        "one machine-score arm's score of a work, with the validation_status the record carries",
        "site_database",
        MACHINE_LONG_SCHEMA,
        ("work_key", "arm"),
    ),
    _release(
        "facet_codes",
        "one value of a facet as a small integer: a text column's value, a name, or a classifier decision "
        "(model_version, mode, category, with its prediction_status)",
        "site_database",
        FACET_CODES_SCHEMA,
        ("facet", "code"),
    ),
    _release(
        "work_facets",
        "one work's filter and facet values in codes (flags scored, labelled, decided; names and decisions as "
        "code lists): what cohort counts, coverage and facets scan",
        "site_database",
        WORK_FACETS_SCHEMA,
        ("work_key",),
    ),
    _release(
        "work_versions",
        "another OpenAlex id of the same work (the same DOI, or the same normalised title and year), for the search "
        "results to list the versions together: site/build/versions.py; counts never read it",
        "site_database",
        WORK_VERSIONS_SCHEMA,
        ("work_key", "other_key"),
    ),
    _release(
        "facet_counts",
        "one facet of the whole release, as the site lists it (JSON items): the facets of the cohort with no filter",
        "site_database",
        FACET_COUNTS_SCHEMA,
        ("facet",),
        json_columns=frozenset({"items"}),
    ),
    _release(
        "cohort_facet_counts",
        "one facet (or _count, _coverage) of a frequent one-filter cohort (its filters as JSON; the key hashes its "
        "coded clauses), counted at build time: site/query/stored_counts.py",
        "site_database",
        COHORT_FACET_COUNTS_SCHEMA,
        ("cohort_key", "facet"),
        json_columns=frozenset({"filters", "items"}),
    ),
    _release(
        "year_language_counts",
        "the works of one year and language code (either may be NULL) with one facet code (or one teacher and "
        "category of the direct-label facet, or one coverage count), counted at build time: site/build/cube.py",
        "site_database",
        YEAR_LANGUAGE_COUNTS_SCHEMA,
        (),  # no key constraint: year, language, code and teacher may be NULL (unique per the six columns)
    ),
    _release(
        "classifier_heads",
        "one student head of a classifier version: whether it passed the support gate",
        "site_database",
        CLASSIFIER_HEADS_SCHEMA,
        ("model_version", "teacher", "target"),
    ),
]

# The statistics page, the disagreement dossier and the facet typeahead (site/build/figures.py, at build time).
TABLES += [
    _release(
        "recent_works",
        "one work of the rolling layer (after the newest frozen release) and the input it arrived through: the "
        "/recent page",
        "site_database",
        RECENT_WORKS_SCHEMA,
        ("work_key",),
    ),
    _release(
        "release_statistics",
        "one figure of the statistics page over the whole release (JSON items: the rows of its data table)",
        "site_database",
        STATISTICS_SCHEMA,
        ("figure",),
        json_columns=frozenset({"items"}),
    ),
    _release(
        "release_prevalence",
        "one row of the pipeline's prevalence table (population, category, method, teacher), copied at build time",
        "site_database",
        RELEASE_PREVALENCE_SCHEMA,
        ("position",),
    ),
    _release(
        "work_disagreements",
        "one work on which a pair of teachers' labelled direct labels differ, with the heads they differ on",
        "site_database",
        DISAGREEMENT_SCHEMA,
        ("work_key", "pair"),
    ),
    _release(
        "dossier_works",
        "one work of work_disagreements: what the dossier lists of it (id, title, year, venue, page path) and every "
        "teacher's direct label as its record publishes it (JSON: verdict, reason, source and status)",
        "site_database",
        columns(
            "work_key",
            "id",
            "title",
            "year",
            "venue",
            "page_path",
            "direct_labels",
        ),
        ("work_key",),
        json_columns=frozenset({"direct_labels"}),
    ),
    _release(
        "facet_value_counts",
        "one folded value of a text filter (what the filter matches: case and accents ignored) with its most "
        "frequent spelling, that spelling's facet_codes code and the number of works with any spelling of it in "
        "the whole release",
        "site_database",
        columns(
            "facet",
            "code",
            column("value", pa.string(), "the value's most frequent spelling"),
            column("norm", pa.string(), "the folded value: lower(strip_accents(value))"),
            column("n", description="works of the release with any spelling of the value"),
        ),
        ("facet", "norm"),
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
