"""Author and institution pages, the author and institution_id filters, and the collaboration network, on a release
built through Dagster from the people world (builders.people: the site world with planted authorships)."""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections import Counter

import duckdb
import networkx as nx
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline_tests.builders.common import XSS
from metacan_pipeline_tests.builders.people import people_world
from metacan_pipeline_tests.builders.site import build_site


@pytest.fixture(scope="module")
def people(tmp_path_factory, openalex_dir):
    """``(storage, frame rows)`` of the people world whose ``site_database`` was materialized."""
    storage = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("people") / "data"))
    frame = people_world(storage, openalex_dir)
    assert build_site(storage).success
    return storage, frame


@pytest.fixture(scope="module")
def client(people):
    with TestClient(create_app(people[0].root, rate_limit="off")) as c:
        yield c


def _pairs(frame: list[dict], key) -> Counter:
    """Shared works per pair of Canadian nodes, counted from the frame rows (``key``: an authorship's node ids)."""
    out: Counter = Counter()
    for row in frame:
        nodes = sorted({n for a in row["authorships"] for n in key(a)})
        out.update(itertools.combinations(nodes, 2))
    return out


def _author_key(a: dict) -> list[str]:
    return [a["author_id"]] if a["is_canadian"] and a["author_id"] else []


def _institution_key(a: dict) -> list[str]:
    return [i["id"] for i in a["institutions"] if i["country_code"] == "CA"]


def test_the_planted_pair_and_every_edge_weigh_the_works_they_share(client, people):
    frame = people[1]
    net = client.get("/api/v1/network").json()
    edges = {(e["source"], e["target"]): e["weight"] for e in net["edges"]}
    # by hand: Ada writes the even works, Jean every third: they share i % 6 == 0, 10 of the 60 works
    assert edges[("A100", "A200")] == 10
    # José (Canadian by country, i % 10 == 1) meets Jean on i = 21 and 51; Noor (Oxford) is in no Canadian network
    assert edges[("A200", "A400")] == 2 and not any("A300" in pair for pair in edges)
    assert edges == dict(_pairs(frame, _author_key))
    works = {n["id"]: n["works"] for n in net["nodes"]}
    assert works == {"A100": 30, "A200": 20, "A400": 6, "A500": 12} and net["candidates"] == 4
    inst = client.get("/api/v1/network", params={"kind": "institutions"}).json()
    assert {(e["source"], e["target"]): e["weight"] for e in inst["edges"]} == {("I10", "I20"): 10}
    assert {(e["source"], e["target"]): e["weight"] for e in inst["edges"]} == dict(_pairs(frame, _institution_key))
    # the cohort's filters narrow it: 2005-2010 holds the works with (i * 7) % 20 < 6
    years = client.get("/api/v1/network", params={"year_max": "2010"}).json()
    kept = [r for r in frame if r["publication_year"] <= 2010]
    assert {(e["source"], e["target"]): e["weight"] for e in years["edges"]} == dict(_pairs(kept, _author_key))


def test_the_network_is_bounded_and_says_so(client):
    one = client.get("/api/v1/network", params={"nodes": "1"}).json()
    assert [n["id"] for n in one["nodes"]] == ["A100"] and one["edges"] == [] and one["candidates"] == 4
    page = client.get("/network", params={"nodes": "2"})
    assert page.status_code == 200
    assert "Shown: the 2 of 4 with the most works in this cohort" in page.text
    assert client.get("/api/v1/network", params={"nodes": "0"}).status_code == 400
    assert client.get("/api/v1/network", params={"kind": "funders"}).status_code == 400


def test_the_network_page_draws_an_svg_with_its_data_table(client):
    page = client.get("/network").text
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert 'role="img"' in svg and "Co-authorship among Canadian authors" in svg
    assert svg.count("<circle") == 4 and svg.count("<line") == 2
    assert '<a href="/authors/A100">' in svg
    assert XSS not in page and "&lt;script&gt;" in page  # a name is data, escaped in the drawing and the table
    table = page[page.index('id="network-data"') :]
    assert "<caption>" in table and "Ada Lovelace" in table and "Jean Tremblay" in table
    assert "<title>Ada Lovelace: 30</title>" in svg  # a node's whole name and works
    fr = client.get("/fr/network").text
    assert "Cosignature entre auteurs canadiens" in fr and '<a href="/fr/authors/A100">' in fr
    assert "<title>Ada Lovelace\u00a0: 30</title>" in fr  # French typography: a (no-break) space before the colon


def test_graphml_parses_back_and_csv_lists_the_edges(client, people):
    g = nx.read_graphml(io.BytesIO(client.get("/network.graphml").content))
    assert set(g.nodes) == {"A100", "A200", "A400", "A500"}
    assert g.edges["A100", "A200"]["weight"] == 10 and g.nodes["A100"]["name"] == "Ada Lovelace"
    assert g.nodes["A100"]["works"] == 30 and g.nodes["A100"]["ref"] == "https://orcid.org/0000-0001-0000-0100"
    res = client.get("/network.csv", params={"kind": "institutions"})
    assert res.headers["content-type"].startswith("text/csv") and "attachment" in res.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(res.text)))
    assert rows == [
        {
            "source": "I10",
            "source_name": "McGill University",
            "source_works": str(
                sum(any(i["id"] == "I10" for a in r["authorships"] for i in a["institutions"]) for r in people[1])
            ),
            "target": "I20",
            "target_name": "Université Laval",
            "target_works": "20",
            "shared_works": "10",
        }
    ]
    authors = list(csv.DictReader(io.StringIO(client.get("/network.csv").text)))
    alone = [r for r in authors if not r["target"]]  # a node without an edge is a row of its own
    assert {r["source"] for r in alone} == set(g.nodes) - {n for e in g.edges for n in e} and alone
    assert all(r["shared_works"] == "" and r["source_works"] == str(g.nodes[r["source"]]["works"]) for r in alone)
    assert len(authors) - len(alone) == g.number_of_edges()


def test_network_downloads_are_rate_limited_like_every_export(people):
    with TestClient(create_app(people[0].root, rate_limit="1/m burst 1")) as c:
        assert c.get("/network.csv").status_code == 200
        refused = c.get("/network.graphml")
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0


def test_the_author_and_institution_id_filters_select_their_works(client, people):
    frame = people[1]
    n = lambda **p: client.get("/api/v1/count", params=p).json()["count"]  # noqa: E731
    assert n(author="A100") == sum(i % 2 == 0 for i in range(60)) == 30
    assert n(author="a100|A200") == sum(i % 2 == 0 or i % 3 == 0 for i in range(60)) == 40
    # one set of ids is one cohort: one query hash whatever their order and case
    h = lambda **p: client.get("/api/v1/count", params=p).json()["query_hash"]  # noqa: E731
    assert h(author="A100|A200") == h(author="a200|A100|A200") != h(author="A100")
    # the saved cohort's page links each id to its page
    saved = client.get(f"/q/{h(author='A200|A100', institution_id='I20')}").text
    assert '<a href="/authors/A100"><code>A100</code></a> | <a href="/authors/A200"><code>A200</code></a>' in saved
    assert '<a href="/institutions/I20"><code>I20</code></a>' in saved
    assert '<a href="/fr/authors/A100">' in client.get(f"/fr/q/{h(author='A100')}").text
    assert n(institution_id="I30") == 15  # Oxford, through Noor on i % 4 == 0
    assert n(author="A100", institution_id="I20") == 10
    assert n(author="A100", year_max="2010") == sum(
        r["publication_year"] <= 2010 and any(a["author_id"] == "A100" for a in r["authorships"]) for r in frame
    )
    # the cohort builder's id boxes take what the server takes: ids up to the parameter's length, checked in the
    # browser by their pattern too
    home = client.get("/").text
    assert 'pattern="[Aa][0-9]{1,19}(\\|[Aa][0-9]{1,19})*" maxlength="300"' in home
    assert n(author="|".join(["A100"] * 60)) == 30  # 299 characters, one id
    assert n(author=" A100 ") == 30  # spaces around a value are dropped, as of every value
    assert client.get("/api/v1/count", params={"author": "A100 |A200"}).status_code == 400
    bad = client.get("/api/v1/count", params={"author": "I10"})
    assert bad.status_code == 400
    assert "is not an OpenAlex id" in bad.json()["error"]["message"]
    fr = client.get("/fr/", params={"author": "W1"})
    assert fr.status_code == 400 and "n&#39;est pas un identifiant OpenAlex" in fr.text


def test_the_author_page_in_english_and_french(client):
    en = client.get("/authors/A100")
    assert en.status_code == 200
    t = en.text
    assert "<h1>Ada Lovelace</h1>" in t and "https://orcid.org/0000-0001-0000-0100" in t
    assert '<p class="count">30 works</p>' in t
    # Canadian institutions by year: McGill on every year Ada published (the site world's years of the even works)
    assert t.count('<a href="/institutions/I10">McGill University</a>') == 10
    collab = t[t.index("Top collaborators") : t.index("Counts by year")]
    assert '<a href="/authors/A200">Jean Tremblay</a></td><td>10</td>' in collab and "A300" not in collab
    assert t.count('<li><a href="/works/') == 30 and "direct label" in t  # each work with its labels' source and status
    fr = client.get("/fr/authors/A100").text
    assert '<p class="count">30 publications</p>' in fr and "Principaux collaborateurs" in fr and 'lang="fr"' in fr
    lower = client.get("/fr/authors/a100?sort=year", follow_redirects=False)  # the id's case is forgiven, once
    assert lower.status_code == 308 and lower.headers["location"] == "/fr/authors/A100?sort=year"
    assert client.get("/institutions/i20", follow_redirects=False).headers["location"] == "/institutions/I20"
    long = client.get("/authors/A" + "9" * 400)
    assert long.status_code == 404 and long.text.count("9" * 39) == 1 and "9" * 40 not in long.text  # cut, not linked
    assert 'hreflang="fr" href="http://testserver/fr/"' in long.text
    refused = client.get("/fr/network", params={"year_min": "9" * 5000})  # a refused long query: no twin either
    assert refused.status_code == 400 and "9" * 41 not in refused.text and 'href="http://testserver/"' in refused.text
    assert client.get("/authors/A999").status_code == 404 and client.get("/authors/W1").status_code == 404
    odd = client.get("/api/v1/authors/A100", params={"x": "1"})
    assert odd.status_code == 400 and "'x': this address takes no parameters" in odd.json()["error"]["message"]
    solo = client.get("/authors/A500").text
    assert XSS not in solo and "Solo &lt;b&gt;&lt;script&gt;" in solo


def test_the_institution_page_and_the_api_twins(client):
    page = client.get("/institutions/I20")
    assert page.status_code == 200 and "<h1>Université Laval</h1>" in page.text
    assert "https://ror.org/04sjchr03" in page.text
    assert '<a href="/institutions/I10">McGill University</a></td><td>10</td>' in page.text
    # Laval's Canadian authors: Jean (every third work); José is on two of Laval's works without an institution, so
    # he is not one of Laval's authors
    authors = page.text[page.text.index("Canadian authors with the most works") : page.text.index("Top collaborators")]
    assert '<a href="/authors/A200">Jean Tremblay</a></td><td>20</td>' in authors
    assert "A400" not in authors and "A300" not in authors
    assert "Établissement" in client.get("/fr/institutions/I20").text
    a = client.get("/api/v1/authors/A200").json()
    assert a["author_id"] == "A200" and a["display_name"] == "Jean Tremblay" and a["works_in_release"] == 20
    assert a["top_collaborators"][0] == {"id": "A100", "name": "Ada Lovelace", "works": 10}
    assert sum(y["count"] for y in a["by_year"]) == 20 and a["works_url"] == "/api/v1/works?author=A200"
    assert {y["institution_id"] for y in a["canadian_institutions_by_year"]} == {"I20"}
    i = client.get("/api/v1/institutions/I30").json()
    assert i["country_code"] == "GB" and i["works_in_release"] == 15
    # Oxford's works (i % 4 == 0) are all even (Ada, McGill); Laval is on those that are also i % 3 == 0
    assert [(c["id"], c["works"]) for c in i["top_collaborators"]] == [("I10", 15), ("I20", 5)]
    assert client.get("/api/v1/authors/A999").status_code == 404
    assert client.get("/api/v1/authors/A999").json()["error"]["status"] == 404


def test_the_id_boxes_suggest_names_with_their_ids(client):
    found = client.get("/api/v1/people", params={"kind": "authors", "prefix": "tremb"}).json()
    assert found["values"] == [{"id": "A200", "name": "Jean Tremblay", "works": 20}]
    # a word of the name, accents and case ignored
    assert [
        v["id"] for v in client.get("/api/v1/people", params={"kind": "authors", "prefix": "NUNEZ"}).json()["values"]
    ] == ["A400"]
    largest = client.get("/api/v1/people", params={"kind": "institutions", "limit": "2"}).json()["values"]
    # McGill: Ada's 30 even works and Solo's 12 (the works nobody else wrote)
    assert [(v["id"], v["works"]) for v in largest] == [("I10", 42), ("I20", 20)]
    assert client.get("/api/v1/people", params={"prefix": "a"}).status_code == 400
    home = client.get("/").text
    assert 'data-people="authors" list="suggest-author"' in home and '<datalist id="suggest-author">' in home


def _author_counts(rows: list[dict], frame: list[dict]) -> list[dict]:
    """The author facet of ``rows`` counted by hand: works per Canadian author id (Canadian on a work of the
    ``frame``), most first, ties by id, the first 20."""
    canadian = {a["author_id"] for r in frame for a in r["authorships"] if a["author_id"] and a["is_canadian"]}
    counts = Counter(a for r in rows for a in {a["author_id"] for a in r["authorships"]} & canadian)
    return [{"value": a, "count": n} for a, n in sorted(counts.items(), key=lambda t: (-t[1], t[0]))[:20]]


def _all_authors(frame: list[dict]) -> set[str]:
    return {a["author_id"] for r in frame for a in r["authorships"] if a["author_id"]}


def test_the_author_facet_counts_the_cohort_under_its_other_filters(client, people, monkeypatch):
    frame = people[1]

    def facet(**params):
        got = client.get("/api/v1/count", params=params).json()["facets"]["author"]
        return None if got is None else [{"value": i["value"], "count": i["count"]} for i in got]

    whole = facet()
    assert whole == _author_counts(frame, frame)
    # Noor (Oxford) writes works of the release and is Canadian on none: not listed
    assert "A300" not in {i["value"] for i in whole} and len(whole) < len(_all_authors(frame))
    assert whole[0] == {"value": "A100", "count": 30}  # Ada writes the even works
    assert facet(year_max="2010") == _author_counts([r for r in frame if r["publication_year"] <= 2010], frame)
    # its own filter left out: the alternatives to A100 among the works up to 2010
    assert facet(author="A100", year_max="2010") == facet(year_max="2010")
    assert facet(author="A100") == whole
    names = {i["value"]: i["name"] for i in client.get("/api/v1/count").json()["facets"]["author"]}
    assert names["A100"] and names["A100"] != "A100"
    home = client.get("/", params={"year_max": "2010"}).text
    assert 'href="/?year_max=2010&amp;author=A100"' in home
    # a cohort over the bound: no list, and the page says how to get one (in French too)
    monkeypatch.setattr("metacan_pipeline.site.query.people.AUTHOR_FACET_MAX", 5)
    assert facet(year_max="2010") is None
    assert facet() == whole  # the whole release's is stored
    assert "narrow the other filters to see who wrote them" in client.get("/", params={"year_max": "2010"}).text
    assert (
        "restreignez les autres filtres pour voir qui les a écrites"
        in client.get("/fr/", params={"year_max": "2010"}).text
    )


def test_an_author_page_lists_a_few_institutions_a_year_and_counts_the_others(people, monkeypatch):
    """With one institution a year, each year's row is its institution with the most works, and ``more`` is the
    number of that year's other Canadian institutions, counted here from the release's authorships."""
    from metacan_pipeline.site.build.release import Release
    from metacan_pipeline.site.query import people as people_query

    monkeypatch.setattr(people_query, "INSTITUTIONS_PER_YEAR", 1)
    release = Release(people[0].root)
    con = release.cursor()
    try:
        authors = [a for (a,) in con.execute("SELECT author_id FROM site_authors ORDER BY 1").fetchall()]
        want = dict(
            ((a, y), n)
            for a, y, n in con.execute(
                "SELECT a.author_id, w.year, count(DISTINCT i.institution_id) FROM site_work_authors a, "
                "unnest(a.institution_ids) AS u(institution_id) JOIN site_work_institution_ids i "
                "ON i.work_key = a.work_key AND i.institution_id = u.institution_id JOIN works w ON w.work_key = a.work_key "
                "WHERE a.is_canadian AND i.is_canadian GROUP BY ALL"
            ).fetchall()
        )
        got = {}
        for a in authors:
            rows = people_query.author_institution_years(con, a)
            assert len({r["year"] for r in rows}) == len(rows)  # one a year
            got.update({(a, r["year"]): r["more"] + 1 for r in rows})
    finally:
        con.close()
        release.close()
    assert got == want
    # the people world's authors have one Canadian institution a year; one with three in 2020 and one in 2021
    mem = duckdb.connect()
    mem.execute(
        "CREATE TABLE site_work_authors AS SELECT * FROM (VALUES (1, 'A1', true, ['I1', 'I2']), "
        "(2, 'A1', true, ['I1', 'I3']), (3, 'A1', true, ['I2']), (4, 'A1', true, ['I4'])) "
        "t(work_key, author_id, is_canadian, institution_ids)"
    )
    mem.execute(
        "CREATE TABLE site_work_institution_ids AS SELECT work_key, institution_id, 'Inst ' || institution_id || "
        "work_key AS display_name, true AS is_canadian FROM (SELECT work_key, unnest(institution_ids) AS "
        "institution_id FROM site_work_authors)"
    )  # a name per work: the page names an institution once, as site_institutions does
    mem.execute(
        "CREATE TABLE site_institutions AS SELECT DISTINCT institution_id, 'Inst ' || institution_id AS display_name "
        "FROM site_work_institution_ids"
    )
    mem.execute(
        "CREATE TABLE works AS SELECT * FROM (VALUES (1, 2020), (2, 2020), (3, 2020), (4, 2021)) t(work_key, year)"
    )
    rows = [
        (r["year"], r["institution_id"], r["works"], r["more"])
        for r in people_query.author_institution_years(mem, "A1")
    ]
    assert rows == [(2021, "I4", 1, 0), (2020, "I1", 2, 2)]  # I1 and I2 tie on 2 works: the smaller id first
    assert [r["name"] for r in people_query.author_institution_years(mem, "A1")] == ["Inst I4", "Inst I1"]
    monkeypatch.setattr(people_query, "INSTITUTIONS_PER_YEAR", 5)
    assert [r["more"] for r in people_query.author_institution_years(mem, "A1")] == [0, 0, 0, 0]


def test_the_export_names_each_works_canadian_authors_in_record_order(client, people):
    rows = list(csv.DictReader(io.StringIO(client.get("/export.csv").text)))
    got = {r["id"]: r["ca_authors"] for r in rows}
    expected = {
        row["id"]: "; ".join(
            a["name"] + (f" ({a['author_id']})" if a["author_id"] else "")
            for a in sorted(row["authorships"], key=lambda a: a["position"])
            if a["is_canadian"]
        )
        for row in people[1]
    }
    assert len(got) == len(expected) == 60 and got == expected
    assert "Ada Lovelace (A100); Jean Tremblay (A200)" in got.values() and "Noor" not in "".join(got.values())
    jsonl = [json.loads(line) for line in client.get("/export.jsonl").text.splitlines()[1:]]
    assert {r["id"]: r["ca_authors"] or "" for r in jsonl} == expected
