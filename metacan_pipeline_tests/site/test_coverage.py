"""Coverage on the served site: the labelled / classified / minimum-citation filters (count, coverage, facets, pages,
the API, the OpenAPI document and the form, in English and French) and the coverage figures of the statistics page
and its API, every count checked against a query a person would write over the same release."""

from __future__ import annotations

import re

import duckdb
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.site.build.coverage_figures import TOP
from metacan_pipeline.site.query.cohort import CohortError, Listing, parse_request
from metacan_pipeline.site.query.cohort_query import CohortQuery
from metacan_pipeline.site.web.app import create_app

LABELLED = "work_key IN (SELECT work_key FROM work_labels WHERE status = 'labelled')"
CLASSIFIED = (
    "(work_key IN (SELECT work_key FROM work_labels WHERE status = 'labelled' AND len(categories) > 0) "
    "OR work_key IN (SELECT work_key FROM work_decisions))"
)

#: cohorts, each with the SQL a person would write for it over ``works``
CASES = [
    ([("labelled", "yes")], LABELLED),
    ([("labelled", "no")], f"NOT {LABELLED}"),
    ([("classified", "yes"), ("language", "en")], f"{CLASSIFIED} AND language = 'en'"),
    ([("classified", "no")], f"NOT {CLASSIFIED}"),
    ([("cited_by_min", "5")], "cited_by >= 5"),
    ([("cited_by_min", "3"), ("labelled", "no"), ("ca_aff", "yes")], f"cited_by >= 3 AND NOT {LABELLED} AND ca_aff"),
    ([("classified", "no"), ("labelled", "yes")], f"NOT {CLASSIFIED} AND {LABELLED}"),
]
IDS = ["labelled", "unlabelled", "classified+language", "unclassified", "cited", "cited+unlabelled+aff", "judged-none"]


def _sql(release, query: str, params=()):
    con = duckdb.connect(str(release.db_path), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def client(site_release):
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as c:
        yield c


def test_the_site_world_has_works_on_both_sides_of_every_coverage_filter(release):
    (n,) = _sql(release, "SELECT count(*) FROM works")[0]
    for where in (LABELLED, CLASSIFIED, "cited_by >= 5", f"NOT {CLASSIFIED} AND {LABELLED}"):
        (k,) = _sql(release, f"SELECT count(*) FROM works WHERE {where}")[0]
        assert 0 < k < n, where  # a filter that keeps all or nothing would test nothing


@pytest.mark.parametrize("params, where", CASES, ids=IDS)
def test_count_coverage_facets_and_pages_equal_direct_duckdb_queries(release, params, where):
    cohort, _ = parse_request(params, release.info)
    with CohortQuery(release, cohort) as q:
        count, cov, facets = q.count(), q.coverage(), q.facets()
        ids, after = [], None
        while True:
            rows, after = q.page(Listing("year", after, 7))
            ids += [r["id"] for r in rows]
            if after is None:
                break
            _, listing = parse_request([*params, ("after", after)], release.info)
            after = listing.after
    assert count == _sql(release, f"SELECT count(*) FROM works WHERE {where}")[0][0]
    assert sorted(ids) == sorted(r[0] for r in _sql(release, f"SELECT id FROM works WHERE {where}"))
    assert cov == {
        "works": count,
        "direct": _sql(release, f"SELECT count(*) FROM works WHERE {where} AND {LABELLED}")[0][0],
        # a category score is a number in either score list of the record (a list of nulls holds no digit)
        "scored": _sql(
            release,
            f"SELECT count(*) FROM works WHERE {where} AND (regexp_matches(coalesce(record_json->>'$.prediction."
            "category_scores_codex', ''), '[0-9]') OR regexp_matches(coalesce(record_json->>'$.prediction."
            "category_scores_gemma', ''), '[0-9]'))",
        )[0][0],
        "decided": _sql(
            release, f"SELECT count(*) FROM works WHERE {where} AND work_key IN (SELECT work_key FROM work_decisions)"
        )[0][0],
    }
    want = _sql(release, f"SELECT type, count(*) FROM works WHERE {where} GROUP BY 1")
    assert sorted((f["value"], f["count"]) for f in facets["type"]) == sorted(want, key=lambda r: (r[0] is None, r))


def test_an_unset_or_zero_coverage_filter_is_no_filter_and_bad_values_are_refused(release):
    plain, _ = parse_request([], release.info)
    for params in ([("labelled", "any")], [("classified", "any")], [("cited_by_min", "0")]):
        cohort, _ = parse_request(params, release.info)
        assert cohort.query_hash() == plain.query_hash()
    for params, message in (
        ([("labelled", "maybe")], "labelled 'maybe' is not one of yes, no, any."),
        ([("cited_by_min", "-1")], "cited_by_min -1 is outside 0-999999."),
        ([("cited_by_min", "many")], "cited_by_min 'many' is not a whole number."),
    ):
        with pytest.raises(CohortError, match=re.escape(message)):
            parse_request(params, release.info)


def test_the_api_the_openapi_document_and_the_form_carry_the_filters(client, release):
    body = client.get("/api/v1/count", params={"labelled": "no", "cited_by_min": "2"}).json()
    assert body["count"] == _sql(release, f"SELECT count(*) FROM works WHERE NOT {LABELLED} AND cited_by >= 2")[0][0]
    works = client.get("/api/v1/works", params={"classified": "yes", "limit": "100"}).json()["works"]
    assert sorted(w["id"] for w in works) == sorted(
        r[0] for r in _sql(release, f"SELECT id FROM works WHERE {CLASSIFIED}")
    )
    r = client.get("/api/v1/count", params={"cited_by_min": "1000000"})
    assert r.status_code == 400 and "cited_by_min" in r.json()["error"]["message"]
    spec = client.get("/api/v1/openapi.json").json()
    params = {p["name"]: p for p in spec["paths"]["/api/v1/count"]["get"]["parameters"]}
    assert params["labelled"]["schema"]["enum"] == ["yes", "no", "any", ""]
    assert params["classified"]["schema"]["enum"] == ["yes", "no", "any", ""]
    assert params["cited_by_min"]["schema"] == {"type": "integer", "minimum": 0, "maximum": 999_999}
    assert "direct label" in params["labelled"]["description"] and "category" in params["classified"]["description"]
    home = client.get("/", params={"labelled": "yes", "cited_by_min": "4"}).text
    assert '<select name="labelled">' in home and '<select name="classified">' in home
    assert '<input name="cited_by_min" value="4"' in home
    assert re.search(r'<select name="labelled">.*?<option value="yes" selected>', home, flags=re.S)
    (n,) = _sql(release, f"SELECT count(*) FROM works WHERE {LABELLED} AND cited_by >= 4")[0]
    assert f'<span class="count" id="count">{n}</span>' in home
    fr = client.get("/fr/", params={"classified": "no"}).text
    assert "Étiquetée par un annotateur" in fr and "Porte une catégorie" in fr and "Citée au moins" in fr


def _figure(client, name: str) -> list[dict]:
    return client.get("/api/v1/statistics").json()[name]


def test_the_top_venues_funders_and_institutions_equal_the_release(client, release):
    counts = f"count(*), count(*) FILTER (WHERE {LABELLED}), count(*) FILTER (WHERE NOT coalesce(has_abstract, false))"
    venues = _sql(release, f"SELECT venue, {counts} FROM works WHERE venue IS NOT NULL GROUP BY 1 ORDER BY 2 DESC, 1")
    names = {}
    for facet, table in (("funder", "work_funders"), ("institution", "work_institutions")):
        names[facet] = _sql(
            release,
            f"SELECT x.name, {counts.replace('has_abstract', 'w.has_abstract')} FROM {table} x JOIN works w "
            "USING (work_key) GROUP BY 1 ORDER BY 2 DESC, 1",
        )
    for figure, want in (
        ("top_venues", venues),
        ("top_funders", names["funder"]),
        ("top_institutions", names["institution"]),
    ):
        got = [(r["value"], r["works"], r["labelled"], r["no_abstract"]) for r in _figure(client, figure)]
        assert got == [tuple(r) for r in want[:TOP]] and got, figure
    assert len(names["institution"]) > 1 and any(r[2] for r in venues)


def test_the_abstract_gap_by_type_and_the_labelled_works_by_year_and_language_equal_the_release(client, release):
    gap = _sql(
        release,
        "SELECT type, count(*), count(*) FILTER (WHERE NOT coalesce(has_abstract, false)) FROM works GROUP BY 1 "
        "ORDER BY 2 DESC, 1 NULLS LAST",
    )
    assert [(r["value"], r["works"], r["no_abstract"]) for r in _figure(client, "abstract_gap_by_type")] == gap
    cov = f"count(*), count(*) FILTER (WHERE {LABELLED}), count(*) FILTER (WHERE {CLASSIFIED})"
    by_year = _sql(release, f"SELECT year, {cov} FROM works GROUP BY 1 ORDER BY 1 NULLS LAST")
    assert [
        (r["value"], r["works"], r["labelled"], r["classified"]) for r in _figure(client, "labelled_by_year")
    ] == by_year
    by_lang = _sql(release, f"SELECT language, {cov} FROM works GROUP BY 1 ORDER BY 2 DESC, 1 NULLS LAST")
    got = [(r["value"], r["works"], r["labelled"], r["classified"]) for r in _figure(client, "labelled_by_language")]
    assert got == by_lang


def test_the_statistics_page_shows_the_coverage_figures_in_english_and_french(client, release):
    main = client.get("/statistics").text.split("<main>")[1]
    for fid in ("top-venues", "top-funders", "top-institutions", "abstract-gap-by-type", "labelled-by-year",
                "labelled-by-language"):  # fmt: skip
        section = main.split(f'<section id="{fid}"')[1].split("</section>")[0]
        assert '<p class="summary">' in section and "<table>" in section and "<svg" in section, fid
    n, labelled, classified = _sql(
        release, f"SELECT count(*), count(*) FILTER (WHERE {LABELLED}), count(*) FILTER (WHERE {CLASSIFIED}) FROM works"
    )[0]
    year = main.split('<section id="labelled-by-year"')[1].split("</section>")[0]
    assert f"{labelled} of {n} works ({100 * labelled / n:.1f}%) carry a teacher's direct label" in year.replace(
        "&#39;", "'"
    )
    assert f"and {classified} ({100 * classified / n:.1f}%) ship a category" in year
    # every year between the first and the last is a row of the table, with no work or with some
    first, last = _sql(release, "SELECT min(year), max(year) FROM works")[0]
    rows = re.findall(r'<tr><th scope="row">(\d+)</th>', year)
    assert [int(y) for y in rows] == list(range(first, last + 1))
    fr = client.get("/fr/statistics").text.split("<main>")[1]
    assert "Principaux lieux de publication" in fr and "Publications étiquetées par année" in fr
    assert "portent une étiquette directe d&#39;un annotateur" in fr and "Top venues" not in fr
