"""Counts, coverage and facets of frequent one-filter cohorts, stored when a release is built.

A cohort's facets are counted under every filter but the facet's own, so a cohort of two filters needs, for each
of the two facets, the counts of a one-filter cohort (year 2015-2022 + language en: its year facet is the year
facet of language en alone); when that cohort holds a large share of the release, each such statement scans most of
``work_facets``. :func:`write_cohort_facet_counts` counts, once per release, every one-filter cohort of at least
:data:`STORE_MIN_WORKS` works: each value of ``language``, ``type``, ``field``, ``topic``, ``venue``, ``release_layer``, each name of
``institution``, ``funder``, ``keyword``, each Retraction Watch state, ``yes`` and ``no`` of each boolean filter, and each classifier decision
(version, mode, category). It writes ``cohort_facet_counts``: per cohort (:func:`.clauses.cohort_key` of its coded
clauses) its ``_count``, ``_coverage`` and every facet as :class:`.facets.FacetCounter` gives it, so a stored answer
is the computed one, byte for byte. :class:`.cohort_query.CohortQuery` reads them for a one-filter cohort, and
:class:`.facets.FacetCounter` for each facet whose other filters are one stored cohort. Counts stay exact: a cohort
that is not stored is counted as before. Year ranges are not stored here but in ``year_language_counts`` (:mod:`..build.cube`:
any year range and/or language, and any facet whose other filters are only those); direct labels, score ranges and
text queries are never stored (the first two have too many forms, the last are per request).
"""

from __future__ import annotations

import json

from ..build.facet_columns import BOOLEAN_COLUMNS, NAME_TABLES
from .clauses import clauses, cohort_key, where_sql
from .cohort import Cohort
from .facets import FacetCounter

#: The smallest one-filter cohort whose facets are stored (smaller cohorts are copied into a temporary table and
#: counted there: :attr:`.facets.FacetCounter.MATERIALIZE_MAX`).
STORE_MIN_WORKS = 100_000
#: The text filters counted per value (a column of ``work_facets`` each); the name filters are code lists.
COLUMN_FILTERS = (
    "language",
    "type",
    "field",
    "topic",
    "venue",
    "release_layer",
    "retraction_state",
    "cascade_decision",
)


def frequent_filters(con, min_works: int) -> list[dict[str, str]]:
    """The filters (as :func:`.cohort.parse_filters` gives them: a text filter's value folded) of every one-filter
    cohort of at least ``min_works`` works, largest first within each filter."""
    out: list[dict[str, str]] = []
    for name in (*COLUMN_FILTERS, *NAME_TABLES):
        codes = f"unnest(w.{name})" if name in NAME_TABLES else f"w.{name}"
        # by folded value: the cohort of a filter is every value that folds alike (.clauses._text_clause)
        rows = con.execute(
            f"SELECT k.norm FROM (SELECT {codes} AS code FROM work_facets w) x "
            f"JOIN facet_codes k ON k.facet = '{name}' AND k.code = x.code "
            "GROUP BY k.norm HAVING count(*) >= ? ORDER BY count(*) DESC, k.norm",
            [min_works],
        ).fetchall()
        out += [{name: value} for (value,) in rows]
    for name, column in BOOLEAN_COLUMNS.items():
        yes, no = con.execute(
            f"SELECT count(*) FILTER (WHERE {column}), count(*) FILTER (WHERE NOT {column}) FROM work_facets"
        ).fetchone()
        out += [{name: word} for word, n in (("yes", yes), ("no", no)) if n >= min_works]
    rows = con.execute(
        "SELECT k.model_version, k.mode, k.value FROM (SELECT unnest(classifier) AS code FROM work_facets) x "
        "JOIN facet_codes k ON k.facet = 'classifier' AND k.code = x.code "
        "GROUP BY 1, 2, 3 HAVING count(*) >= ? ORDER BY count(*) DESC, 1, 2, 3",
        [min_works],
    ).fetchall()
    out += [{"classifier_category": c, "classifier_mode": m, "classifier_version": v} for v, m, c in rows]
    return out


def write_cohort_facet_counts(con, min_works: int = STORE_MIN_WORKS) -> int:
    """Count every frequent one-filter cohort (:func:`frequent_filters`) into ``cohort_facet_counts`` (the build, after
    ``facet_counts``); returns the number of cohorts stored."""
    stored = 0
    for filters in frequent_filters(con, min_works):
        coded = clauses(Cohort(filters, None), coded=True)
        key = cohort_key(coded)
        where, params = where_sql(coded)
        row = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE w.labelled), count(*) FILTER (WHERE w.scored), "
            f"count(*) FILTER (WHERE w.decided) FROM work_facets w WHERE {where}",
            params,
        ).fetchone()
        items = FacetCounter(con, coded, stored=True).facets()
        items["_count"] = row[0]
        items["_coverage"] = dict(zip(("works", "direct", "scored", "decided"), row, strict=True))
        con.executemany(
            "INSERT INTO cohort_facet_counts VALUES (?, ?, ?, ?)",
            [(key, json.dumps(filters, sort_keys=True), facet, json.dumps(v)) for facet, v in items.items()],
        )
        stored += 1
    return stored


def write_facet_counts(con) -> int:
    """Count every facet of the whole release, and its coverage (``_coverage``), into ``facet_counts`` (the build,
    after ``sql/facets.sql``)."""
    facets = FacetCounter(con, [], stored=False).facets()
    row = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE labelled), count(*) FILTER (WHERE scored), "
        "count(*) FILTER (WHERE decided) FROM work_facets"
    ).fetchone()
    facets["_coverage"] = dict(zip(("works", "direct", "scored", "decided"), row, strict=True))
    con.executemany("INSERT INTO facet_counts VALUES (?, ?)", [(k, json.dumps(v)) for k, v in facets.items()])
    return len(facets)


def write_stored_counts(con) -> None:
    """Write every count the queries read back from a release (``facet_counts``, then ``cohort_facet_counts``),
    after ``sql/facets.sql`` and ``year_language_counts``: what :func:`..build.build.build_release` takes as its
    ``stored_counts`` step."""
    write_facet_counts(con)
    write_cohort_facet_counts(con)
