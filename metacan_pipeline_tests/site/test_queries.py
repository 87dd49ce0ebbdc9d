"""Tests of metacan_pipeline.site.query (CohortQuery, FacetCounter) on a release built by site_database: counts, facets and coverage
against direct DuckDB queries on the same release, keyset pagination, exports, inert injection payloads."""

from __future__ import annotations

import unicodedata

import duckdb
import pytest

from metacan_pipeline.site.build.fts import parse_query, tokens
from metacan_pipeline.site.query.cohort import FILTERS, LISTING, CohortError, parse_request
from metacan_pipeline.site.query.cohort_query import CohortQuery

LABELLED = "SELECT work_key, teacher, unnest(categories) AS c FROM work_labels WHERE status = 'labelled'"

#: cohorts, each with the SQL a person would write for it over the release, one fragment per filter group
CASES = [
    ([], {}),
    ([("language", "fr"), ("ca_aff", "yes")], {"language": "language = 'fr'", "ca_aff": "ca_aff"}),
    (
        [("year_min", "2010"), ("year_max", "2018"), ("has_abstract", "no"), ("type", "article")],
        {"year": "year BETWEEN 2010 AND 2018", "has_abstract": "NOT has_abstract", "type": "type = 'article'"},
    ),
    (
        [("institution", "McGill University"), ("funder", "NSERC")],
        {
            "institution": "work_key IN (SELECT work_key FROM work_institutions WHERE name = 'McGill University')",
            "funder": "work_key IN (SELECT work_key FROM work_funders WHERE name = 'NSERC')",
        },
    ),
    (
        [("keyword", "kw0"), ("invisible_to_affiliation_only", "no"), ("retracted", "no")],
        {
            "keyword": "work_key IN (SELECT work_key FROM work_keywords WHERE name = 'kw0')",
            "invisible_to_affiliation_only": "NOT invisible_to_affiliation_only",
            "retracted": "NOT is_retracted",
        },
    ),
    (
        [("label_category", "metaresearch")],
        {"label": f"work_key IN (SELECT work_key FROM ({LABELLED}) WHERE c = 'metaresearch')"},
    ),
    (
        [("label_category", "metaresearch"), ("label_agreement", "all")],
        {
            "label": f"work_key IN (SELECT work_key FROM ({LABELLED}) WHERE c = 'metaresearch' AND teacher = 'gemma') "
            f"AND work_key IN (SELECT work_key FROM ({LABELLED}) WHERE c = 'metaresearch' AND teacher = 'codex')"
        },
    ),
    (
        [("label_category", "metaepi_broad"), ("label_teacher", "codex"), ("field", "Medicine")],
        {
            "label": f"work_key IN (SELECT work_key FROM ({LABELLED}) WHERE c = 'metaepi_broad' AND teacher = 'codex')",
            "field": "field = 'Medicine'",
        },
    ),
    (
        [("classifier_category", "metaepi_narrow"), ("classifier_mode", "consensus")],
        {
            "classifier": "work_key IN (SELECT work_key FROM work_decisions WHERE mode = 'consensus' AND category = 'metaepi_narrow')"
        },
    ),
    (
        [("classifier_category", "metaresearch"), ("classifier_mode", "candidate"), ("about_ca", "yes")],
        {
            "classifier": "work_key IN (SELECT work_key FROM work_decisions WHERE mode = 'candidate' AND category = 'metaresearch')",
            "about_ca": "about_ca",
        },
    ),
    (
        [("score_arm", "gemma"), ("score_min", "0.25"), ("score_max", "0.6")],
        {"score": "work_key IN (SELECT work_key FROM work_scores WHERE arm = 'gemma' AND score BETWEEN 0.25 AND 0.6)"},
    ),
    (
        [("q", "peer review"), ("ca_venue", "no")],
        {
            "q": "((title ILIKE '%peer%' OR work_key IN (SELECT work_key FROM work_keywords WHERE name ILIKE '%peer%')) AND "
            "(title ILIKE '%review%' OR work_key IN (SELECT work_key FROM work_keywords WHERE name ILIKE '%review%')))",
            "ca_venue": "NOT ca_venue",
        },
    ),
]
IDS = ["all", "language+route", "years+abstract+type", "institution+funder", "keyword+flags", "label", "label-all",
       "label-teacher", "consensus", "candidate", "score", "text"]  # fmt: skip


def _sql(release, query: str, params=()):
    con = duckdb.connect(str(release.db_path), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def _where(parts: dict, exclude: str | None = None) -> str:
    kept = [f"({v})" for k, v in parts.items() if k != exclude]
    return " AND ".join(kept) or "true"


@pytest.mark.parametrize("params, parts", CASES, ids=IDS)
def test_count_facets_and_coverage_equal_direct_duckdb_queries(release, params, parts):
    cohort, _ = parse_request(params, release.info)
    with CohortQuery(release, cohort) as q:
        count, facets, cov = q.count(), q.facets(), q.coverage()
    assert count == _sql(release, f"SELECT count(*) FROM works WHERE {_where(parts)}")[0][0]
    for name in ("language", "type", "field", "topic", "venue", "classification_kind"):
        want = _sql(release, f"SELECT {name}, count(*) FROM works WHERE {_where(parts, name)} GROUP BY 1")
        assert sorted((f["value"], f["count"]) for f in facets[name]) == sorted(
            want, key=lambda r: (r[0] is None, r)
        ), name
    want = _sql(release, f"SELECT year, count(*) FROM works WHERE {_where(parts, 'year')} GROUP BY 1 ORDER BY 1 DESC")
    assert [(f["value"], f["count"]) for f in facets["year"]] == want
    for name, table in (("institution", "work_institutions"), ("funder", "work_funders"), ("keyword", "work_keywords")):
        want = _sql(
            release,
            f"SELECT name, count(*) FROM {table} WHERE work_key IN (SELECT work_key FROM works WHERE {_where(parts, name)}) GROUP BY 1",
        )
        assert sorted((f["value"], f["count"]) for f in facets[name]) == sorted(want), name
    for name, column in (("ca_aff", "ca_aff"), ("has_abstract", "has_abstract"), ("retracted", "is_retracted")):
        yes = _sql(release, f"SELECT count(*) FROM works WHERE {column} AND {_where(parts, name)}")[0][0]
        no = _sql(release, f"SELECT count(*) FROM works WHERE NOT {column} AND {_where(parts, name)}")[0][0]
        assert facets[name] == [{"value": "yes", "count": yes}, {"value": "no", "count": no}], name
    want = _sql(
        release,
        f"SELECT teacher, c, count(DISTINCT work_key) FROM ({LABELLED}) WHERE work_key IN "
        f"(SELECT work_key FROM works WHERE {_where(parts, 'label')}) GROUP BY 1, 2",
    )
    assert sorted((f["teacher"], f["value"], f["count"]) for f in facets["direct_label"]) == sorted(want)
    assert all(f["qualification"] == "teacher not qualified: not tested yet" for f in facets["direct_label"])
    want = _sql(
        release,
        f"SELECT mode, category, count(*) FROM work_decisions WHERE work_key IN "
        f"(SELECT work_key FROM works WHERE {_where(parts, 'classifier')}) GROUP BY 1, 2",
    )
    assert sorted((f["mode"], f["value"], f["count"]) for f in facets["classifier"]) == sorted(want)
    assert {f["prediction_status"] for f in facets["classifier"]} <= {"machine_predicted_unvalidated"}
    where = _where(parts)
    assert cov == {
        "works": count,
        "direct": _sql(
            release,
            f"SELECT count(*) FROM works WHERE {where} AND work_key IN (SELECT work_key FROM work_labels WHERE status = 'labelled')",
        )[0][0],
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


def test_counts_agree_with_the_inputs_themselves(release, site_release):
    """An oracle outside DuckDB: the frame rows the world was written from."""
    frame = site_release[1]
    cases = {
        (("language", "fr"), ("ca_aff", "yes")): [r for r in frame if r["language"] == "fr" and r["ca_aff"]],
        (("funder", "NSERC"),): [r for r in frame if "NSERC" in r["funder_names"]],
        (("invisible_to_affiliation_only", "yes"), ("retracted", "yes")): [
            r for r in frame if r["invisible_to_affiliation_only"] and r["is_retracted"]
        ],
        (("q", "bibliometric"),): [r for r in frame if "bibliometric" in r["title_text"].lower()],
    }
    for params, rows in cases.items():
        cohort, _ = parse_request(list(params), release.info)
        with CohortQuery(release, cohort) as q:
            assert q.count() == len(rows) > 0, params


def test_coverage_counts_as_scored_only_works_with_a_category_score(release, site_release):
    """The site world predicts every work but each eleventh, and gives works 3, 17, 31, 38, 45 and 59 a prediction
    with every category score null (heads trained on one class): those are predicted, not scored."""
    n = len(site_release[1])
    predicted = [i for i in range(n) if i % 11 != 10]
    without_score = [i for i in predicted if i % 7 == 3 and i % 4 != 0]
    assert without_score == [3, 17, 31, 38, 45, 59]
    cohorts = {(): range(n), (("language", "fr"),): [i for i in range(n) if site_release[1][i]["language"] == "fr"]}
    for params, members in cohorts.items():
        cohort, _ = parse_request(list(params), release.info)
        with CohortQuery(release, cohort) as q:
            cov = q.coverage()
        assert cov["works"] == len(members), params
        want = len([i for i in members if i in predicted and i not in without_score])
        assert cov["scored"] == want < len([i for i in members if i in predicted]), params


def _all_pages(release, params, sort, limit=7):
    seen, after, pages = [], None, 0
    while True:
        cohort, listing = parse_request(
            params + [("sort", sort), ("limit", str(limit))] + ([("after", after)] if after else []), release.info
        )
        with CohortQuery(release, cohort) as q:
            rows, after = q.page(listing)
        seen += [r["id"] for r in rows]
        pages += 1
        assert len(rows) <= limit
        if after is None:
            return seen, pages


@pytest.mark.parametrize(
    "params, sort, order",
    [
        ([], "year", "coalesce(year, -1) DESC, work_key"),
        ([], "cited_by", "cited_by DESC, work_key"),
        ([("ca_aff", "yes")], "year", "coalesce(year, -1) DESC, work_key"),
        ([("q", "meta research")], "relevance", None),
        ([("q", "review")], "year", "coalesce(year, -1) DESC, work_key"),
    ],
)
def test_keyset_pages_cover_every_row_exactly_once_in_order(release, params, sort, order):
    cohort, _ = parse_request(params, release.info)
    with CohortQuery(release, cohort) as q:
        count = q.count()
    seen, pages = _all_pages(release, params, sort)
    assert len(seen) == len(set(seen)) == count > 0 and pages == -(-count // 7)
    if order:
        where = {"ca_aff": "ca_aff"}.get(params[0][0], "true") if params and params[0][0] != "q" else "true"
        ids = {i for i in seen}
        want = [r[0] for r in _sql(release, f"SELECT id FROM works WHERE {where} ORDER BY {order}") if r[0] in ids]
        assert seen == want
    # each page's rows carry the source and status of every category they show
    cohort, listing = parse_request(params + [("sort", sort), ("limit", "100")], release.info)
    with CohortQuery(release, cohort) as q:
        rows, nxt = q.page(listing)
    assert nxt is None and [r["id"] for r in rows] == seen
    for r in rows:
        assert all(lab["teacher"] and lab["status"] for lab in r["labels"])
        assert all(
            d["mode"] in ("candidate", "consensus") and d["prediction_status"] and d["model_version"]
            for d in r["decisions"]
        )


def test_relevance_ranks_by_bm25(release):
    cohort, listing = parse_request([("q", "reproducibility")], release.info)
    with CohortQuery(release, cohort) as q:
        rows, _ = q.page(listing)
    ranks = [r["sort_value"] for r in rows]
    assert ranks == sorted(ranks) and len(rows) == q_count(release, [("q", "reproducibility")])


def q_count(release, params):
    cohort, _ = parse_request(params, release.info)
    with CohortQuery(release, cohort) as q:
        return q.count()


def test_export_rows_equal_the_count_and_carry_the_status_columns(release):
    for params in (
        [],
        [("language", "fr")],
        [("classifier_category", "metaresearch"), ("classifier_mode", "candidate")],
    ):
        cohort, _ = parse_request(params, release.info)
        with CohortQuery(release, cohort) as q:
            rows = [r for b in q.export_batches(cap=1000, batch_rows=7) for r in b.to_pylist()]
            assert len(rows) == q.count()
        assert {r["query_hash"] for r in rows} == {cohort.query_hash()}
        assert {r["release_id"] for r in rows} == {release.info.release_id}
        assert {r["validation_status"] for r in rows} == {"score_only:v0-immature-baseline"}
    with CohortQuery(release, parse_request([], release.info)[0]) as q:
        assert sum(b.num_rows for b in q.export_batches(cap=13)) == 13


def _folded(value: str) -> str:
    """Case and accents ignored: the letters without their combining marks, lower-cased."""
    return "".join(c for c in unicodedata.normalize("NFD", value) if not unicodedata.combining(c)).lower()


def _has_phrase(field: list[str], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return any(tuple(field[i : i + n]) == phrase for i in range(len(field) - n + 1))


INJECTIONS = [
    "' OR 1=1 --",
    "'; DROP TABLE works; --",
    '" OR ""="',
    "1; SELECT * FROM works",
    "%' OR '%'='",
    "W1' UNION SELECT record_json FROM works --",
    "NEAR(peer review)",
    'title:* OR "x"',
    "0) OR (1=1",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_payloads_in_every_parameter_are_inert(release, payload):
    total = release.info.n_works
    for name in FILTERS + LISTING:
        try:
            cohort, listing = parse_request([(name, payload)], release.info)
        except CohortError:
            continue  # refused: HTTP 400
        with CohortQuery(release, cohort) as q:
            n = q.count()
            q.facets()
            q.page(listing)
        if name == "q":  # the payload read as a text query (words, "phrases", OR), searched as words
            query = parse_query(payload)
            want = 0
            for title, kws in _sql(
                release,
                "SELECT w.title, (SELECT list(name) FROM work_keywords k WHERE k.work_key = w.work_key) FROM works w",
            ):
                fields = [tokens(title)] + [tokens(k) for k in kws or []]
                want += all(any(_has_phrase(f, p) for p in group for f in fields) for group in query)
        else:
            facet = name.removeprefix("not_")
            folded = {_folded(v.strip()) for v in payload.split("|")} - {""}
            table = {"institution": "work_institutions", "funder": "work_funders", "keyword": "work_keywords"}
            rows = (
                _sql(release, f"SELECT work_key, list(name) FROM {table[facet]} GROUP BY 1")
                if facet in table
                else _sql(release, f"SELECT work_key, [{facet}] FROM works WHERE {facet} IS NOT NULL")
            )
            hit = {k for k, values in rows if any(_folded(v) in folded for v in values)}
            want = len(hit) if facet == name else total - len(hit)
        assert n == want, name
    assert _sql(release, "SELECT count(*) FROM works")[0][0] == total  # and nothing was changed
