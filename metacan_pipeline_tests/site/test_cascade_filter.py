"""The cascade's decision on the served site: the ``cascade_decision`` filter and facet (counts against DuckDB and
against the planted decisions), the API and its OpenAPI enum, the home page's facet in English and French, and the
work page's sentence served from the release database.

The site world (:func:`metacan_pipeline_tests.builders.site.site_world`) gets a planted cascade: decisions on the
metaresearch head by a rule on the work's index, a research_integrity decision on some works (which the filter
ignores: it reads the metaresearch head), thresholds for both heads; then ``work_records`` (with its blocking checks)
and ``site_database`` are materialized.
"""

from __future__ import annotations

import datetime as dt
import html

import duckdb
import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.site.build.release import Release, current_release_id, database_path
from metacan_pipeline.site.query.cohort import parse_request
from metacan_pipeline.site.query.cohort_query import CohortQuery
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.student import CASCADE_DECISIONS_SCHEMA, CASCADE_THRESHOLDS_SCHEMA
from metacan_pipeline.vocab import CASCADE_DECISIONS
from metacan_pipeline_tests.builders.common import root_error
from metacan_pipeline_tests.builders.site import build_site, site_world

VERSION = "metacan-v0-hybrid-000000000000"
#: The planted decision of work i on the metaresearch head (None: not planned).
RULE = ("positive", "negative", "teacher", "unsettled", None, "negative", "unsettled")


def planted_decision(i: int) -> str | None:
    return RULE[i % len(RULE)]


def _threshold_row(head: str) -> dict:
    return {
        "run_id": "r",
        "computed_at": dt.datetime(2026, 12, 7),
        "model_version": VERSION,
        "teacher": "gemma",
        "target": head,
        "precision_target": 0.9,
        "npv_target": 0.9,
        "recall_target": None,
        "bound_level": 0.95,
        "bound_method": "clopper-pearson",
        "calibration_n": 140,
        "calibration_positives": 40,
        "positive_threshold": 0.8,
        "positive_bound": 0.91,
        "negative_threshold": 0.2,
        "negative_bound": 0.95,
        "negative_vacuous": False,
        "works_planned": 0,
        "decided_positive": 0,
        "decided_negative": 0,
        "sent_to_teacher": 0,
        "added_to_batch": 0,
        "unsettled": 0,
    }


SCORES = {"positive": 0.9, "negative": 0.1, "teacher": 0.5, "unsettled": 0.6}


@pytest.fixture(scope="module")
def site(tmp_path_factory, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("cascade-site") / "data"))
    frame = site_world(storage, openalex_dir)
    decisions = []
    for i, row in enumerate(frame):
        if (d := planted_decision(i)) is not None:
            decisions.append(
                {"id": row["id"], "model_version": VERSION, "target": "metaresearch", "score": SCORES[d], "decision": d}
            )
        if i % 2 == 0:  # another head's decision never enters the metaresearch filter
            decisions.append(
                {
                    "id": row["id"],
                    "model_version": VERSION,
                    "target": "research_integrity",
                    "score": 0.9,
                    "decision": "positive",
                }
            )
    rows = [_threshold_row("metaresearch"), _threshold_row("research_integrity")]
    storage.write_table("cascade_thresholds", pa.Table.from_pylist(rows, schema=CASCADE_THRESHOLDS_SCHEMA))
    storage.write_table("cascade_decisions", pa.Table.from_pylist(decisions, schema=CASCADE_DECISIONS_SCHEMA))
    result = build_site(storage)
    assert result.success, root_error(result)
    return storage, frame


def release_sql(storage, query, params=()):
    con = duckdb.connect(str(database_path(storage.root, current_release_id(storage.root))), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def cohort(storage, params):
    rel = Release(storage.root)
    try:
        parsed, _ = parse_request(params, rel.info)
        with CohortQuery(rel, parsed) as q:
            return q.count(), q.facets()
    finally:
        rel.close()


@pytest.mark.parametrize("decision", CASCADE_DECISIONS)
def test_the_filter_and_facet_count_the_planted_decisions_as_duckdb_does(site, decision):
    storage, frame = site
    planted = [r["id"] for i, r in enumerate(frame) if (planted_decision(i) or "not_planned") == decision]
    count, facets = cohort(storage, [("cascade_decision", decision)])
    assert count == len(planted)
    assert count == release_sql(storage, "SELECT count(*) FROM works WHERE cascade_decision = ?", [decision])[0][0]
    want = {}
    for i in range(len(frame)):
        d = planted_decision(i) or "not_planned"
        want[d] = want.get(d, 0) + 1
    assert {f["value"]: f["count"] for f in facets["cascade_decision"]} == want  # its own filter left out
    assert want["positive"] == 9 and want["not_planned"] == 8  # 60 works, a rule of 7


def test_the_filter_combines_with_another_and_the_facet_follows_the_cohort(site):
    storage, frame = site
    count, facets = cohort(storage, [("cascade_decision", "negative"), ("language", "fr")])
    planted = [i for i, r in enumerate(frame) if planted_decision(i) == "negative" and r["language"] == "fr"]
    assert count == len(planted) > 0
    french = [i for i, r in enumerate(frame) if r["language"] == "fr"]
    want = {}
    for i in french:
        d = planted_decision(i) or "not_planned"
        want[d] = want.get(d, 0) + 1
    assert {f["value"]: f["count"] for f in facets["cascade_decision"]} == want


def test_the_api_the_home_page_and_the_work_page_in_english_and_french(site):
    storage, frame = site
    positive = sorted(r["id"] for i, r in enumerate(frame) if planted_decision(i) == "positive")
    with TestClient(create_app(storage.root, rate_limit="off")) as c:
        api = c.get("/api/v1/works", params={"cascade_decision": "positive", "limit": 100}).json()
        assert sorted(w["id"] for w in api["works"]) == positive
        assert {w["cascade_decision"] for w in api["works"]} == {"positive"}
        bad = c.get("/api/v1/works", params={"cascade_decision": "validated"})
        assert bad.status_code == 400
        spec = c.get("/api/v1/openapi.json").json()
        (enum,) = [
            p["schema"]["enum"]
            for p in spec["paths"]["/api/v1/works"]["get"]["parameters"]
            if p["name"] == "cascade_decision"
        ]
        assert enum[:-1] == list(CASCADE_DECISIONS)
        home = html.unescape(c.get("/", params={"cascade_decision": "positive"}).text)
        assert 'id="facet-cascade-decision"' in home and "certified positive (machine decision)" in home
        home_fr = html.unescape(c.get("/fr/", params={"cascade_decision": "positive"}).text)
        assert "positif certifié (décision automatique)" in home_fr
        path = release_sql(storage, "SELECT page_path FROM works WHERE id = ?", [positive[0]])[0][0]
        page = html.unescape(c.get(f"/{path}").text)
        assert (
            "The student settled this work as Metaresearch: certified at precision ≥ 0.90 (lower bound 0.91, "
            "Clopper-Pearson, n = 140 held-out teacher labels)." in page
        )
        page_fr = html.unescape(c.get(f"/fr/{path}").text)
        assert "Le modèle élève a tranché : cette publication relève de « Métarecherche »" in page_fr
