"""The counts, coverage and facets of frequent one-filter cohorts stored at build time (site/query/stored_counts.py) are the
ones computed from ``work_facets``, and a cohort whose facets read them (one filter, or two filters of which one is
stored) answers exactly what it answers without them; counts checked against direct DuckDB queries."""

from __future__ import annotations

import json

import pytest

from metacan_pipeline.site.query import cohort_query, facets
from metacan_pipeline.site.query.clauses import clauses, cohort_key, stored_items
from metacan_pipeline.site.query.cohort import Cohort, parse_filters
from metacan_pipeline.site.query.cohort_query import CohortQuery
from metacan_pipeline.site.query.facets import FacetCounter
from metacan_pipeline.site.query.stored_counts import frequent_filters
from metacan_pipeline_tests.site.conftest import MIN_WORKS


def _computed(release, cohort):
    """``(count, coverage, facets)`` counted from ``work_facets`` without any stored answer."""
    con = release.cursor()
    try:
        coded = clauses(cohort, coded=True)
        where = " AND ".join(f"({c.sql})" for c in coded) or "true"
        params = [p for c in coded for p in c.params]
        row = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE w.labelled), count(*) FILTER (WHERE w.scored), "
            f"count(*) FILTER (WHERE w.decided) FROM work_facets w WHERE {where}",
            params,
        ).fetchone()
        coverage = dict(zip(("works", "direct", "scored", "decided"), row, strict=True))
        return row[0], coverage, FacetCounter(con, coded, stored=False).facets()
    finally:
        con.close()


def test_every_frequent_one_filter_cohort_is_stored_as_computed(stored):
    release, n = stored
    con = release.cursor()
    try:
        filters = frequent_filters(con, MIN_WORKS)
        rows = con.execute("SELECT DISTINCT cohort_key, filters FROM cohort_facet_counts").fetchall()
    finally:
        con.close()
    kinds = {next(iter(f)) for f in filters}
    assert n == len(filters) == len(rows) > 10 and {"language", "ca_aff", "classifier_category"} <= kinds
    for key, text in rows:
        cohort = parse_filters(json.loads(text), release.info)
        assert cohort_key(clauses(cohort, coded=True)) == key  # the request's own key finds the row
        with CohortQuery(release, cohort) as q:
            assert q.stored is not None
            got = (q.count(), q.coverage(), q.facets())
        assert got == _computed(release, cohort)


@pytest.mark.parametrize(
    "params",
    [
        {"year_min": "2010", "year_max": "2020", "language": "en"},
        {"language": "en", "ca_aff": "yes"},
        {"funder": "Canadian Institutes of Health Research", "label_category": "metaresearch"},
        {"classifier_category": "metaresearch", "classifier_mode": "candidate", "type": "article"},
        {"q": "trial", "ca_aff": "no"},
    ],
)
def test_a_cohort_reading_stored_facets_answers_what_it_computes(stored, params, monkeypatch):
    release, _ = stored
    cohort = parse_filters(params, release.info)
    read = []

    def spy(con, keys):
        found = stored_items(con, keys)
        read.extend(found)
        return found

    monkeypatch.setattr(cohort_query, "stored_items", spy)
    monkeypatch.setattr(facets, "stored_items", spy)
    with CohortQuery(release, cohort) as q:
        got = (q.count(), q.coverage(), q.facets())
    if "q" in params:  # the filters but a facet's own always hold the text query: nothing stored is read
        assert not read and got[0] == _computed_with_hits(release, cohort)
        return
    assert read  # at least one facet came from a stored one-filter cohort
    assert got == _computed(release, cohort)
    con = release.cursor()
    try:  # and the count against a direct query of works
        where = " AND ".join(
            {
                "year_min": "year >= 2010",
                "year_max": "year <= 2020",
                "language": "language = 'en'",
                "ca_aff": "ca_aff",
                "type": "type = 'article'",
                "funder": "work_key IN (SELECT work_key FROM work_funders WHERE name = 'Canadian Institutes of Health Research')",
                "label_category": "work_key IN (SELECT work_key FROM work_labels WHERE status = 'labelled' AND list_contains(categories, 'metaresearch'))",
                "classifier_category": "work_key IN (SELECT work_key FROM work_decisions WHERE mode = 'candidate' AND category = 'metaresearch')",
                "classifier_mode": "true",
            }[k]
            for k in params
        )
        assert got[0] == con.execute(f"SELECT count(*) FROM works WHERE {where}").fetchone()[0]
    finally:
        con.close()


def _computed_with_hits(release, cohort):
    con = release.cursor()
    try:
        return con.execute(
            "SELECT count(*) FROM works w WHERE NOT ca_aff AND (lower(title) LIKE '%trial%' OR work_key IN "
            "(SELECT work_key FROM work_keywords WHERE lower(name) LIKE '%trial%'))"
        ).fetchone()[0]
    finally:
        con.close()


def test_a_cohort_that_is_not_stored_is_counted_as_before(stored):
    release, _ = stored
    cohort = Cohort({"language": "xx"}, release.info)
    with CohortQuery(release, cohort) as q:
        assert q.stored is None and q.count() == 0
