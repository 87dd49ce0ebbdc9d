"""Tests of the forgiving search of the served site (metacan_pipeline.site.query: params, cohort, clauses, suggest;
site/web: /api/v1/suggest, did you mean, the home form): text filters that ignore case and accents, several values
of one filter (a|b) and exclusions (not_<filter>), quoted phrases and OR in the words, the query hash over the folded
filters, suggestions and did-you-mean answers, and the refusals of the new syntax. The release is the site world
(builders.site.site_world), whose venues include "Revue de Montréal" and two spellings of "Journal 1"; every expected
count is computed here from the release's own rows, folding values in Python."""

from __future__ import annotations

import re
import unicodedata

import duckdb
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.site.build.fts import parse_query, query_text, tokens
from metacan_pipeline.site.query.clauses import clauses, cohort_key
from metacan_pipeline.site.query.cohort import Cohort, parse_filters, parse_request
from metacan_pipeline.site.query.cohort_query import CohortQuery
from metacan_pipeline.site.query.params import CohortError
from metacan_pipeline.site.query.stored_counts import frequent_filters
from metacan_pipeline.site.web.app import create_app

NAME_TABLES = {"institution": "work_institutions", "funder": "work_funders", "keyword": "work_keywords"}


def _fold(value: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", value) if not unicodedata.combining(c)).lower()


def _sql(release, query: str, params=()):
    con = duckdb.connect(str(release.db_path), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def _values_by_work(release, facet: str) -> dict[int, list[str]]:
    """Every work's values of a text facet (its names for a name facet), from the release's own tables."""
    out: dict[int, list[str]] = {k: [] for (k,) in _sql(release, "SELECT work_key FROM works")}
    if facet in NAME_TABLES:
        rows = _sql(release, f"SELECT work_key, name FROM {NAME_TABLES[facet]}")
    else:
        rows = _sql(release, f"SELECT work_key, {facet} FROM works WHERE {facet} IS NOT NULL")
    for key, value in rows:
        out[key].append(value)
    return out


def _selected(release, filters: list[tuple[str, str]]) -> set[int]:
    """The works a list of text filters and exclusions selects, read as the contract says: a value matches when it
    folds (case and accents ignored) to one of the filter's |-separated values; an exclusion keeps every other work."""
    keep = {k for (k,) in _sql(release, "SELECT work_key FROM works")}
    for name, value in filters:
        facet = name.removeprefix("not_")
        wanted = {_fold(v.strip()) for v in value.split("|")} - {""}
        hit = {k for k, vs in _values_by_work(release, facet).items() if any(_fold(v) in wanted for v in vs)}
        keep &= hit if facet == name else keep - hit
    return keep


CASES = [
    [("venue", "revue de montreal")],
    [("venue", "journal 1")],
    [("venue", "REVUE DE MONTRÉAL")],
    [("institution", "UNIVERSITE LAVAL")],
    [("language", "EN"), ("keyword", "Ecology")],
    [("venue", "journal 0 | Revue de Montreal")],
    [("not_venue", "JOURNAL 1")],
    [("not_institution", "mcgill university|university of toronto")],
    [("institution", "dalhousie university"), ("not_institution", "Mcgill University")],
    [("not_funder", "nobody funds this")],
    [("type", "ARTICLE|Review"), ("not_language", "de"), ("not_keyword", "KW0|kw1")],
]


@pytest.mark.parametrize("filters", CASES, ids=["|".join(f"{k}={v}" for k, v in c) for c in CASES])
def test_folded_or_and_not_filters_count_the_works_they_name(release, filters):
    want = _selected(release, filters)
    assert want, "a planted case selects some works"
    for extra in ([], [("year_min", "2012")]):  # alone (the coded and cube paths) and with another filter group
        cohort, listing = parse_request(filters + extra, release.info)
        keys = want & {k for (k,) in _sql(release, "SELECT work_key FROM works WHERE year >= 2012")} if extra else want
        with CohortQuery(release, cohort) as q:
            assert q.count() == len(keys)
            facets = q.facets()
            rows = [r for b in q.export_batches(cap=1000, batch_rows=17) for r in b.to_pylist()]
        assert {r["id"] for r in rows} == {
            i for (i,) in _sql(release, "SELECT id FROM works WHERE work_key IN (SELECT unnest(?))", [sorted(keys)])
        }
        # the facet of a filtered field lists the alternatives to its filter: counted without it
        for facet in ("venue", "institution"):
            others = _selected(release, [(n, v) for n, v in filters if n.removeprefix("not_") != facet])
            if extra:
                others &= {k for (k,) in _sql(release, "SELECT work_key FROM works WHERE year >= 2012")}
            counts: dict[str, int] = {}
            for k, vs in _values_by_work(release, facet).items():
                for v in set(vs) if k in others else ():
                    counts[v] = counts.get(v, 0) + 1
            assert {f["value"]: f["count"] for f in facets[facet] if f["value"] is not None} == counts, facet


def test_the_planted_spellings_exist(release):
    venues = {v for (v,) in _sql(release, "SELECT DISTINCT venue FROM works")}
    assert {"Revue de Montréal", "JOURNAL 1", "Journal 1"} <= venues
    assert _sql(release, "SELECT count(*) FROM works WHERE venue IN ('JOURNAL 1', 'Journal 1')")[0][0] == 10


def test_two_spellings_of_one_filter_are_one_query_hash(release):
    a = parse_filters({"venue": "Revue de Montréal|journal 0", "not_institution": "McGill University"}, release.info)
    b = parse_filters(
        {"venue": " JOURNAL 0 | revue de montreal |", "not_institution": "MCGILL UNIVERSITY"}, release.info
    )
    assert a.filters == b.filters == {"venue": "journal 0|revue de montreal", "not_institution": "mcgill university"}
    assert a.query_hash() == b.query_hash()
    assert parse_filters({"venue": "journal 0"}, release.info).query_hash() != a.query_hash()
    # a filter and its exclusion are different cohorts
    assert (
        parse_filters({"venue": "journal 0"}, release.info).query_hash()
        != parse_filters({"not_venue": "journal 0"}, release.info).query_hash()
    )
    q1 = parse_filters({"q": '"Peer Review" OR Replication  integrity'}, release.info)
    q2 = parse_filters({"q": 'replication | "peer   review" INTEGRITY'}, release.info)
    assert q1.filters["q"] == q2.filters["q"] == '"peer review" OR replication integrity'
    assert q1.query_hash() == q2.query_hash()


def test_a_stored_one_filter_cohort_is_found_under_any_spelling(release):
    con = duckdb.connect(str(release.db_path), read_only=True)
    try:
        found = frequent_filters(con, 5)
    finally:
        con.close()
    venues = [f["venue"] for f in found if "venue" in f]
    assert sorted(venues) == ["journal 0", "journal 1", "journal 2", "journal 3", "journal 4", "revue de montreal"]
    stored = {cohort_key(clauses(Cohort(f, None), coded=True)) for f in found}
    for spelling in ("JOURNAL 1", "Journal 1", "journal 1"):
        assert cohort_key(clauses(parse_filters({"venue": spelling}, release.info), coded=True)) in stored


def _matches(release, query: str) -> int:
    groups = parse_query(query)
    n = 0
    for title, kws in _sql(
        release,
        "SELECT w.title, (SELECT list(name) FROM work_keywords k WHERE k.work_key = w.work_key) FROM works w",
    ):
        fields = [tokens(title)] + [tokens(k) for k in kws or []]

        def has(phrase, fields=fields):
            return any(tuple(f[i : i + len(phrase)]) == phrase for f in fields for i in range(len(f) - len(phrase) + 1))

        n += all(any(has(p) for p in g) for g in groups)
    return n


@pytest.mark.parametrize(
    "q, groups",
    [
        ('"peer review"', ((("peer", "review"),),)),
        ("cardiology OR oncology", ((("cardiology",), ("oncology",)),)),
        (
            '"research integrity" | bibliometric nursing',
            ((("bibliometric",), ("research", "integrity")), (("nursing",),)),
        ),
        ('"integrity research"', ((("integrity", "research"),),)),
        ("OR physics OR", ((("physics",),),)),
        ('"soil nitrogen', ((("soil", "nitrogen"),),)),
    ],
)
def test_quoted_phrases_and_or_in_the_words(release, q, groups):
    assert parse_query(q) == groups and parse_query(query_text(groups)) == groups
    cohort, _ = parse_request([("q", q)], release.info)
    want = _matches(release, q)
    with CohortQuery(release, cohort) as query:
        assert query.count() == want
    cohort, _ = parse_request([("q", q), ("language", "EN")], release.info)
    with CohortQuery(release, cohort) as query:
        n = query.count()
    assert n <= want and (want == 0 or q == '"integrity research"' or n > 0)
    if q == '"integrity research"':  # the words, but never in that order
        assert want == 0 and _matches(release, "integrity research") > 0


@pytest.fixture(scope="module")
def client(site_release):
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as c:
        yield c


def _folded_counts(release, facet: str, keep: set[int] | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, vs in _values_by_work(release, facet).items():
        if keep is None or k in keep:
            for f in {_fold(v) for v in vs}:
                out[f] = out.get(f, 0) + 1
    return out


def test_suggest_gives_folded_values_that_begin_with_the_prefix_with_exact_counts(client, release):
    r = client.get("/api/v1/suggest", params={"facet": "venue", "prefix": "JOURN"})
    assert r.status_code == 200 and r.json()["scope"] == "release" and r.json()["prefix"] == "JOURN"
    got = [(v["value"], v["count"]) for v in r.json()["values"]]
    counts = _folded_counts(release, "venue")
    want = sorted(((f, n) for f, n in counts.items() if f.startswith("journ")), key=lambda t: (-t[1], t[0]))
    assert [(_fold(v), n) for v, n in got] == want and len(want) == 5
    # the value shown is the most frequent spelling (a tie: the smallest), its count every spelling's works
    spellings = dict(_sql(release, "SELECT venue, count(*) FROM works WHERE lower(venue) = 'journal 1' GROUP BY 1"))
    shown = min(spellings, key=lambda s: (-spellings[s], s))
    assert (shown, sum(spellings.values())) in got
    accented = client.get("/api/v1/suggest", params={"facet": "venue", "prefix": "revue de montr"}).json()
    assert accented["values"] == [{"value": "Revue de Montréal", "count": counts["revue de montreal"]}]
    # under a cohort (the facet's own filter and exclusion left out), a name facet, limit
    r = client.get(
        "/api/v1/suggest",
        params={"facet": "institution", "prefix": "univ", "language": "FR", "not_institution": "x", "limit": "1"},
    ).json()
    keep = _selected(release, [("language", "fr")])
    counts = _folded_counts(release, "institution", keep)
    best = sorted(((f, n) for f, n in counts.items() if f.startswith("univ")), key=lambda t: (-t[1], t[0]))[0]
    assert r["scope"] == "cohort" and [(_fold(v["value"]), v["count"]) for v in r["values"]] == [best]
    kw = client.get("/api/v1/suggest", params={"facet": "keyword", "prefix": "KW", "q": "ecology"}).json()
    keep = {k for (k,) in _sql(release, "SELECT work_key FROM works")}
    keep = {k for k in keep if _matches_key(release, k, "ecology")}
    counts = _folded_counts(release, "keyword", keep)
    want = sorted(((f, n) for f, n in counts.items() if f.startswith("kw")), key=lambda t: (-t[1], t[0]))
    assert [(v["value"], v["count"]) for v in kw["values"]] == want and want


def _matches_key(release, key: int, word: str) -> bool:
    title, kws = _sql(
        release,
        "SELECT title, (SELECT list(name) FROM work_keywords k WHERE k.work_key = w.work_key) FROM works w "
        "WHERE work_key = ?",
        [key],
    )[0]
    return word in tokens(title) or any(word in tokens(k) for k in kws or [])


def test_did_you_mean_offers_the_nearest_values_when_nothing_matches(client, release):
    r = client.get("/api/v1/count", params={"venue": "jurnal 1", "institution": "McGill University"}).json()
    assert r["count"] == 0
    assert list(r["did_you_mean"]) == ["venue"]
    [entry] = r["did_you_mean"]["venue"]
    assert entry["given"] == "jurnal 1" and 1 <= len(entry["values"]) <= 3
    assert _fold(entry["values"][0]["value"]) == "journal 1" and entry["values"][0]["count"] == 10
    # a known value in an empty combination, or an unknown value near nothing: no suggestion
    none = client.get("/api/v1/count", params={"venue": "Journal 1", "year_min": "2100"}).json()
    assert none["count"] == 0 and none["did_you_mean"] == {}
    far = client.get("/api/v1/count", params={"venue": "zzzz qqqq"}).json()
    assert far["count"] == 0 and far["did_you_mean"] == {}
    assert client.get("/api/v1/count", params={"venue": "Journal 1"}).json()["did_you_mean"] == {}
    # the home page shows it as a link to the same cohort with the value replaced, in French too
    page = client.get("/", params={"venue": "revue de montrel|jornal 0", "ca_aff": "yes"})
    assert page.status_code == 200 and 'id="did-you-mean"' in page.text
    link = page.text.split('id="did-you-mean"')[1].split('href="')[1].split('"')[0].replace("&amp;", "&")
    assert "ca_aff=yes" in link
    followed = client.get(link)
    ca_aff = {k for (k,) in _sql(release, "SELECT work_key FROM works WHERE ca_aff")}
    want = len(_selected(release, [("venue", "revue de montreal|jornal 0")]) & ca_aff)
    assert int(followed.text.split('id="count">')[1].split("<")[0].replace(",", "")) == want
    fr = client.get("/fr/", params={"venue": "revue de montrel"})
    assert "aucun travail n'a cette valeur" in fr.text and "Revue de Montréal" in fr.text


@pytest.mark.parametrize(
    "params, status, words",
    [
        ({"prefix": "nat"}, 400, "facet is required"),
        ({"facet": "nowhere", "prefix": "nat"}, 400, "facet 'nowhere' is not one of"),
        ({"facet": "venue", "prefix": "n" * 301}, 400, "prefix is 301 characters long"),
        ({"facet": "venue", "limit": "0"}, 400, "limit 0 is outside"),
        ({"facet": "venue", "venue": " | "}, 400, "venue holds no value between its | separators"),
    ],
)
def test_suggest_refuses_bad_input_naming_the_parameter(client, params, status, words):
    r = client.get("/api/v1/suggest", params=params)
    assert r.status_code == status and words in r.json()["error"]["message"], r.json()


@pytest.mark.parametrize(
    "query, words",
    [
        ("venue=|", "venue holds no value between its | separators"),
        ("not_keyword=" + "|".join(f"k{i}" for i in range(21)), "not_keyword holds 21 values; at most 20"),
        ("venue=Nature&venue=Science", "the parameter 'venue' is given twice"),
        ("not_venue=" + "x" * 301, "not_venue is 301 characters long"),
        ("venue!=Nature", "unknown parameter 'venue!'"),
        ("q=%22%22%20OR", "the text query q holds no word"),
    ],
)
def test_the_new_syntax_is_refused_with_a_sentence_naming_the_parameter(client, query, words):
    r = client.get("/api/v1/count?" + query)
    assert r.status_code == 400 and words in r.json()["error"]["message"], r.json()
    page = client.get("/?" + query)
    assert page.status_code == 400


def test_the_parser_refuses_what_the_api_refuses(release):
    with pytest.raises(CohortError, match="not_venue holds no value"):
        parse_filters({"not_venue": "||"}, release.info)


def test_the_openapi_document_describes_or_not_and_suggest(client):
    doc = client.get("/api/v1/openapi.json").json()
    count = {p["name"]: p for p in doc["paths"]["/api/v1/count"]["get"]["parameters"]}
    assert "case and accents ignored" in count["venue"]["description"]
    assert "separated by |" in count["venue"]["description"]
    assert {
        f"not_{n}" for n in ("language", "type", "field", "topic", "venue", "institution", "funder", "keyword")
    } <= set(count)
    assert "Leave out" in count["not_venue"]["description"] and "OR" in count["q"]["description"]
    # the schema's pattern accepts exactly the values the server accepts
    pattern = count["not_venue"]["schema"]["pattern"]
    for value in ("a", "a|", "|", " | ", "x|y", "||", "  "):
        accepted = client.get("/api/v1/count", params={"not_venue": value}).status_code == 200
        assert accepted == bool(re.search(pattern, value)), value
    suggest = {p["name"]: p for p in doc["paths"]["/api/v1/suggest"]["get"]["parameters"]}
    assert suggest["facet"]["required"] is True and "keyword" in suggest["facet"]["schema"]["enum"]
    assert suggest["prefix"]["schema"]["maxLength"] == 300 and "not_venue" in suggest


def test_the_home_form_offers_choices_with_counts_exclusions_and_a_skip_link(client, release):
    page = client.get("/", params={"language": "EN", "not_venue": "journal 1"}).text
    assert page.index('class="skip" href="#results"') < page.index("<form")
    assert 'id="results" tabindex="-1"' in page
    n_en = _sql(release, "SELECT count(*) FROM works WHERE language = 'en'")[0][0]
    assert f'<option value="en">English ({n_en})</option>' in page  # the code chosen, its name shown
    assert '<option value="EN" selected>EN</option>' in page  # a value typed in the URL stays chosen
    assert 'name="not_venue" value="journal 1"' in page
    for name in ("type", "field"):
        for (value,) in _sql(release, f"SELECT DISTINCT {name} FROM works WHERE {name} IS NOT NULL"):
            assert f'<option value="{value}">' in page or f'<option value="{value}" selected>' in page
    fr = client.get("/fr/").text
    assert "Aller aux résultats" in fr and "Exclure les travaux qui ont ces valeurs" in fr
