"""The facet counts by year and language stored at build time (site/build/cube.py, ``year_language_counts``): a cohort
filtered by a year range and/or a language answers from them exactly what it computes from ``work_facets``
(count, coverage, every facet, byte for byte as JSON), and its count and facet counts equal direct DuckDB queries of
``works`` on the same release; a facet whose other filters are year and language only (year + funder: the funder
facet) reads them too; a release without the table counts as before."""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest

from metacan_pipeline.site.build import cube
from metacan_pipeline.site.query import facets
from metacan_pipeline.site.query.clauses import clauses
from metacan_pipeline.site.query.cohort import parse_filters
from metacan_pipeline.site.query.cohort_query import CohortQuery
from metacan_pipeline.site.query.facets import FacetCounter
from metacan_pipeline_tests.site.test_cohort_store import _computed

#: year ranges (closed, open-ended on either side, one year, empty: no work of the site world before 2005) and
#: languages, alone and together
COHORTS = [
    {"year_min": "2010", "year_max": "2020"},
    {"year_min": "2015"},
    {"year_max": "2012"},
    {"year_min": "2019", "year_max": "2019"},
    {"year_min": "1990", "year_max": "2000"},
    {"language": "fr"},
    {"language": "de"},
    {"year_min": "2010", "year_max": "2020", "language": "en"},
    {"year_min": "2018", "language": "fr"},
    {"year_max": "2009", "language": "en"},
    {"year_min": "1990", "year_max": "2000", "language": "en"},
]


def _works_where(params: dict, exclude: str | None = None) -> str:
    """The cohort as a WHERE clause over ``works`` written by hand (``exclude``: leave that facet's filter out)."""
    conds = []
    if exclude != "year":
        conds += [f"year >= {int(params['year_min'])}"] if "year_min" in params else []
        conds += [f"year <= {int(params['year_max'])}"] if "year_max" in params else []
    if "language" in params and exclude != "language":
        conds.append(f"language = '{params['language']}'")
    return " AND ".join(conds) or "true"


def _answer(release, cohort, monkeypatch):
    """``(count, coverage, facets)`` as the site answers the cohort, and the number of reads of the table."""
    reads = []

    def spy(con, selections, minus=None):
        rows = real(con, selections, minus)
        reads.append(rows is not None)
        return rows

    real = cube.cube_rows
    monkeypatch.setattr(cube, "cube_rows", spy)
    with CohortQuery(release, cohort) as q:
        q.stored = None  # not the one-filter cohorts stored by cohort_store: the table of this module
        got = (q.count(), q.coverage(), q.facets())
    return got, reads


@pytest.mark.parametrize("params", COHORTS, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_a_year_and_language_cohort_answers_from_the_table_what_it_computes(release, params, monkeypatch):
    cohort = parse_filters(params, release.info)
    got, reads = _answer(release, cohort, monkeypatch)
    assert reads and all(reads)  # count, coverage and facets: each statement read year_language_counts
    want = _computed(release, cohort)
    assert got == want
    assert json.dumps(got) == json.dumps(want)  # the same order of facets and items: byte for byte
    con = release.cursor()
    try:  # and against direct DuckDB queries of works on the same release
        count = con.execute(f"SELECT count(*) FROM works WHERE {_works_where(params)}").fetchone()[0]
        assert got[0] == got[1]["works"] == count
        labelled = con.execute(
            f"SELECT count(*) FROM works WHERE {_works_where(params)} AND work_key IN "
            "(SELECT work_key FROM work_labels WHERE status = 'labelled')"
        ).fetchone()[0]
        assert got[1]["direct"] == labelled
        years = con.execute(
            f"SELECT year, count(*) FROM works WHERE {_works_where(params, 'year')} GROUP BY 1 ORDER BY 1 DESC NULLS LAST"
        ).fetchall()
        assert [(i["value"], i["count"]) for i in got[2]["year"]] == years
        languages = dict(
            con.execute(
                f"SELECT language, count(*) FROM works WHERE {_works_where(params, 'language')} GROUP BY 1"
            ).fetchall()
        )
        assert {i["value"]: i["count"] for i in got[2]["language"]} == languages
        types = dict(
            con.execute(f"SELECT type, count(*) FROM works WHERE {_works_where(params)} GROUP BY 1").fetchall()
        )
        assert {i["value"]: i["count"] for i in got[2]["type"]} == types
        institutions = dict(
            con.execute(
                f"SELECT x.name, count(*) FROM work_institutions x JOIN works w USING (work_key) "
                f"WHERE {_works_where(params)} GROUP BY 1"
            ).fetchall()
        )
        assert {i["value"]: i["count"] for i in got[2]["institution"]} == institutions
        retracted = con.execute(f"SELECT count(*) FROM works WHERE {_works_where(params)} AND is_retracted").fetchone()
        assert got[2]["retracted"][0] == {"value": "yes", "count": retracted[0]}
    finally:
        con.close()
    if count == 0:  # the empty range: zeros, and facets of the other filters only
        assert got[1] == {"works": 0, "direct": 0, "scored": 0, "decided": 0}
        assert got[2]["type"] == got[2]["institution"] == got[2]["direct_label"] == got[2]["classifier"] == []


@pytest.mark.parametrize("params", [COHORTS[0], COHORTS[7], COHORTS[8]], ids=["years", "both", "open-both"])
def test_the_first_values_of_a_long_facet_and_their_ties_are_the_computed_ones(release, params, monkeypatch):
    """With 2 values a facet (the site world's facets are shorter than TOP_N), every listed facet is cut, among ties
    (a year range in each cohort: a language alone reads the release's own facets, stored with 20 values)."""
    monkeypatch.setattr(facets, "TOP_N", 2)
    monkeypatch.setattr(cube, "TOP_N", 2)
    cohort = parse_filters(params, release.info)
    got, reads = _answer(release, cohort, monkeypatch)
    assert reads and all(reads)
    assert json.dumps(got) == json.dumps(_computed(release, cohort))
    assert len(got[2]["venue"]) == len(got[2]["institution"]) == 2


def test_the_table_sums_to_the_release(release):
    con = release.cursor()
    try:
        works = con.execute("SELECT count(*) FROM works").fetchone()[0]
        stored = dict(
            con.execute(
                "SELECT facet, sum(n) FROM year_language_counts WHERE facet IN ('_coverage', 'year', 'venue', 'ca_aff') "
                "AND (facet <> '_coverage' OR code = 0) GROUP BY 1"
            ).fetchall()
        )
        assert stored == {"_coverage": works, "year": works, "venue": works, "ca_aff": works}
        keywords = con.execute("SELECT count(*) FROM work_keywords").fetchone()[0]
        assert con.execute("SELECT sum(n) FROM year_language_counts WHERE facet = 'keyword'").fetchone()[0] == keywords
    finally:
        con.close()


def test_a_facet_whose_other_filters_are_year_and_language_reads_the_table(release, monkeypatch):
    params = {"year_min": "2008", "language": "en", "funder": "Canadian Institutes of Health Research"}
    cohort = parse_filters(params, release.info)
    got, reads = _answer(release, cohort, monkeypatch)
    assert reads == [True]  # the funder facet (one statement); the others count the funder's works as before
    assert got == _computed(release, cohort)


def test_a_release_without_the_table_counts_as_before(release, tmp_path):
    """A database of layout 4 (no ``year_language_counts``): the facets are counted from ``work_facets``."""
    copy = tmp_path / "layout4.duckdb"
    shutil.copy(release.db_path, copy)
    con = duckdb.connect(str(copy))
    try:
        con.execute("DROP TABLE year_language_counts")
        for params in COHORTS[:1] + COHORTS[7:8]:
            coded = clauses(parse_filters(params, release.info), coded=True)
            assert cube.cube_rows(con, [(["_coverage"], "true", [])]) is None
            assert (
                FacetCounter(con, coded, stored=True).facets()
                == _computed(release, parse_filters(params, release.info))[2]
            )
    finally:
        con.close()


#: A year range and/or a language with one filter that leaves out few of their works (a venue excluded, the
#: unretracted works, the one Retraction Watch state of the site world, a funder excluded), and one that leaves out
#: most (a type: counted as before)
LARGE = [
    ({"language": "en", "not_venue": "Journal 3"}, True),
    ({"year_min": "2005", "retracted": "no"}, True),
    ({"retraction_state": "not_checked", "language": "en"}, True),
    ({"year_min": "2008", "language": "en", "not_funder": "sshrc"}, True),
    ({"language": "en", "type": "article"}, False),
    # the cohort is not subtracted (three groups), its direct-label facet is: language less a venue
    ({"language": "en", "not_venue": "Journal 3", "label_category": "metaepi_broad"}, True),
]


@pytest.mark.parametrize(
    ("params", "subtracted"),
    LARGE,
    ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()) if isinstance(p, dict) else str(p),
)
def test_a_large_cohort_counted_as_cells_less_its_complement_is_the_computed_one(
    stored, params, subtracted, monkeypatch
):
    """With every cohort "large" (MATERIALIZE_MAX 0), a cohort of year and/or language and one other filter (an
    exclusion, or a frequent one-filter cohort the build stored) is counted as the cells' sums less the works that
    filter leaves out, when those are fewer than the cohort's: the count, coverage and every facet are the computed
    ones, byte for byte."""
    release, _ = stored
    monkeypatch.setattr(FacetCounter, "MATERIALIZE_MAX", 0)
    complements = []
    real = cube.cube_rows

    def spy(con, selections, minus=None):
        complements.append(minus is not None)
        return real(con, selections, minus)

    monkeypatch.setattr(cube, "cube_rows", spy)
    cohort = parse_filters(params, release.info)
    with CohortQuery(release, cohort) as q:
        q.stored = None
        got = (q.count(), q.coverage(), q.facets())
    assert any(complements) is subtracted
    want = _computed(release, cohort)
    assert json.dumps(got) == json.dumps(want)
    assert got[0] > 0


@pytest.mark.parametrize(
    "params", [{}, COHORTS[7], {"language": "en", "funder": "NSERC"}], ids=["none", "both", "funder"]
)
def test_a_few_facets_asked_for_are_those_of_every_facet(release, params):
    cohort = parse_filters(params, release.info)
    with CohortQuery(release, cohort) as q:
        every = q.facets()
    with CohortQuery(release, cohort) as q:
        few = q.facets(only=("year", "direct_label", "classifier"))
    assert list(few) == ["year", "direct_label", "classifier"]
    assert few == {k: every[k] for k in few} and few["year"]
