"""Retraction Watch from the file to the served site: the records, the filter and facet (counts against DuckDB), the
OpenAlex-missed flag, the statistics figure, the API and the work page in English and French."""

from __future__ import annotations

import html
import json
import re

import dagster as dg
import duckdb
import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.publish.assets import work_records
from metacan_pipeline.publish.checks import records_may_ship
from metacan_pipeline.publish.records import schema_violation
from metacan_pipeline.retraction.assets import retraction_watch, work_retractions
from metacan_pipeline.site.assets import site_database
from metacan_pipeline.site.build.release import Release, current_release_id, database_path
from metacan_pipeline.site.query.cohort import parse_request
from metacan_pipeline.site.query.cohort_query import CohortQuery
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline_tests.builders.common import XSS, root_error
from metacan_pipeline_tests.builders.site import site_world
from metacan_pipeline_tests.retraction.rw_files import rw_row, write_rw

#: The planted works of the site world: id -> (DOI as OpenAlex writes it, PubMed id). W7003 is one of the world's
#: works OpenAlex marks retracted (every 17th from the 4th), so its retraction is not "missed".
PLANTED = {
    "W7001": ("https://doi.org/10.1016/j.cell.2019.01.001", None),
    "W7002": ("https://doi.org/10.1000/concern.2", "31234567"),
    "W7003": ("https://doi.org/10.1000/known.3", None),
    "W7004": ("https://doi.org/10.1000/reinstated.4", None),
    "W7005": ("https://doi.org/10.1000/corrected.5", "29000005"),
}


def rw_file(path):
    return write_rw(
        path,
        [
            rw_row(1, "Retraction", "HTTPS://DOI.ORG/10.1016/J.CELL.2019.01.001", "0"),
            rw_row(2, "Expression of concern", "unavailable", "31234567", date="1/2/2020 0:00", Reason=f"+{XSS};"),
            rw_row(3, "Retraction", "10.1000/KNOWN.3"),
            rw_row(4, "Retraction", "10.1000/reinstated.4", date="3/1/2019 0:00"),
            rw_row(5, "Reinstatement", "10.1000/reinstated.4", date="6/30/2020 0:00", Reason=""),
            rw_row(6, "Correction", "10.1000/other", "29000005", Reason="+Error in Data;"),
            rw_row(7, "Retraction", "10.9999/not-in-the-frame", "40000000"),
            rw_row(8, "Retraction", "10.1000/bad-date", date="13/45/2020 0:00"),
        ],
    )


def build(storage):
    return dg.materialize(
        [retraction_watch, work_retractions, work_records, records_may_ship, site_database],
        resources={"storage": storage},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


@pytest.fixture(scope="module")
def checked(tmp_path_factory, openalex_dir):
    """A site world whose planted works have Retraction Watch notices, built through records to a release."""
    tmp = tmp_path_factory.mktemp("rw-site")
    storage = MetacanStorage(data_dir=str(tmp / "data"))
    frame = site_world(storage, openalex_dir)
    for row in frame:
        row["doi"], row["pmid"] = PLANTED.get(row["id"], (f"https://doi.org/10.1000/plain.{row['id']}", None))
    storage.write_table("frame", pa.Table.from_pylist(frame, schema=FRAME_SCHEMA))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("METACAN_RETRACTION_WATCH_FILE", str(rw_file(tmp / "retraction_watch.csv")))
        mp.delenv("METACAN_RETRACTION_WATCH_URL", raising=False)
        result = build(storage)
    assert result.success, root_error(result)
    return storage, {r["id"]: r for r in frame}


def records(storage) -> dict[str, dict]:
    with storage.connect() as con:
        return {i: json.loads(j) for i, j in con.execute("SELECT id, record_json FROM work_records").fetchall()}


def release_sql(storage, query, params=()):
    con = duckdb.connect(str(database_path(storage.root, current_release_id(storage.root))), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def test_records_carry_the_state_reasons_dates_and_missed_flag(checked):
    storage, frame = checked
    recs = records(storage)
    version = recs["W7001"]["retraction_watch"]["version"]
    assert re.fullmatch(r"rw-[0-9a-f]{12}", version)
    first = recs["W7001"]["retraction_watch"]
    assert first == {
        "state": "retraction",
        "version": version,
        "openalex_missed": True,  # W7001 is not retracted in OpenAlex
        "notices": [
            {
                "record_id": 1,
                "nature": "Retraction",
                "state": "retraction",
                "reasons": ["Concerns/Issues About Data", "Unreliable Results"],
                "date": "2023-08-16",
                "notice_doi": "10.1155/2023/981",
                "notice_pmid": None,
                "matched_by": "doi",
            }
        ],
    }
    assert frame["W7001"]["is_retracted"] is False and frame["W7003"]["is_retracted"] is True
    got = {w: (recs[w]["retraction_watch"]["state"], recs[w]["retraction_watch"]["openalex_missed"]) for w in PLANTED}
    assert got == {
        "W7001": ("retraction", True),
        "W7002": ("expression_of_concern", False),
        "W7003": ("retraction", False),  # OpenAlex knows
        "W7004": ("reinstatement", False),  # retracted in 2019, reinstated in 2020
        "W7005": ("correction", False),  # by PubMed id alone (its DOI differs)
    }
    assert recs["W7002"]["retraction_watch"]["notices"][0]["matched_by"] == "pmid"
    assert [n["record_id"] for n in recs["W7004"]["retraction_watch"]["notices"]] == [4, 5]
    checked_none = [w for w in recs if w not in PLANTED]
    assert {recs[w]["retraction_watch"]["state"] for w in checked_none} == {"none"}
    assert all(schema_violation(r) is None for r in recs.values())
    # the notice of a work outside the frame admitted nothing
    assert len(recs) == len(frame) == 60


def filter_count(storage, params) -> int:
    rel = Release(storage.root)
    try:
        cohort, _ = parse_request(params, rel.info)
        with CohortQuery(rel, cohort) as q:
            return q.count(), q.facets()
    finally:
        rel.close()


@pytest.mark.parametrize(
    "state", ["retraction", "expression_of_concern", "correction", "reinstatement", "none", "not_checked"]
)
def test_the_filter_and_facet_count_as_duckdb_does(checked, state):
    storage, _ = checked
    count, facets = filter_count(storage, [("retraction_state", state)])
    want = release_sql(storage, "SELECT count(*) FROM works WHERE retraction_state = ?", [state])[0][0]
    assert count == want
    assert count == {"retraction": 2, "expression_of_concern": 1, "correction": 1, "reinstatement": 1, "none": 55}.get(
        state, 0
    )
    # the facet counts every state under the other filters (none here): the same numbers
    facet = {f["value"]: f["count"] for f in facets["retraction_state"]}
    assert facet == dict(release_sql(storage, "SELECT retraction_state, count(*) FROM works GROUP BY 1"))


def test_the_missed_filter_and_a_combined_cohort(checked):
    storage, _ = checked
    count, facets = filter_count(storage, [("openalex_missed", "yes")])
    assert count == 1 == release_sql(storage, "SELECT count(*) FROM works WHERE openalex_missed")[0][0]
    count, facets = filter_count(storage, [("retraction_state", "retraction"), ("retracted", "no")])
    assert count == 1
    # the state facet under retracted=no counts every state among the works OpenAlex does not mark
    want = dict(release_sql(storage, "SELECT retraction_state, count(*) FROM works WHERE NOT is_retracted GROUP BY 1"))
    assert {f["value"]: f["count"] for f in facets["retraction_state"]} == want


def test_statistics_api_and_work_page_in_english_and_french(checked):
    storage, _ = checked
    path = release_sql(storage, "SELECT page_path FROM works WHERE id = 'W7001'")[0][0]
    with TestClient(create_app(storage.root, rate_limit="off")) as c:
        api = c.get("/api/v1/works", params={"retraction_state": "retraction", "sort": "year"}).json()
        assert sorted(w["id"] for w in api["works"]) == ["W7001", "W7003"]
        assert {w["retraction_state"] for w in api["works"]} == {"retraction"}
        assert c.get("/api/v1/works", params={"retraction_state": "retracted"}).status_code == 400
        spec = c.get("/api/v1/openapi.json").json()
        enum = [
            p["schema"]["enum"]
            for p in spec["paths"]["/api/v1/works"]["get"]["parameters"]
            if p["name"] == "retraction_state"
        ]
        assert enum == [
            ["retraction", "expression_of_concern", "correction", "reinstatement", "none", "not_checked", ""]
        ]
        en, fr = html.unescape(c.get(f"/{path}").text), html.unescape(c.get(f"/fr/{path}").text)
        assert 'data-state="retraction"' in en and 'data-state="retraction"' in fr
        assert "OpenAlex missed it" in en and "OpenAlex l'a manquée" in fr
        assert "Concerns/Issues About Data; Unreliable Results" in en  # reasons are data: the same in French
        assert "Retraction, dated 2023-08-16" in en and "Rétractation, datée du 2023-08-16" in fr
        concern = c.get("/" + release_sql(storage, "SELECT page_path FROM works WHERE id = 'W7002'")[0][0]).text
        assert "<script>" not in concern and "&lt;script&gt;alert" in concern  # a reason is data, escaped
        home = c.get("/", params={"retraction_state": "retraction"}).text
        assert 'id="facet-retraction-state"' in home and "expression of concern" in home
        assert "expression de préoccupation" in c.get("/fr/", params={"retraction_state": "retraction"}).text
        stats_en, stats_fr = html.unescape(c.get("/statistics").text), html.unescape(c.get("/fr/statistics").text)
        assert 'id="retraction-watch"' in stats_en
        assert "lists 2 works of the release as retracted" in stats_en
        assert "OpenAlex does not mark 1 of the retracted works" in stats_en
        assert "recense 2 publications de l'édition comme rétractées" in stats_fr


def test_without_a_file_every_work_is_not_checked_never_not_retracted(tmp_path, openalex_dir, monkeypatch):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=12)
    monkeypatch.delenv("METACAN_RETRACTION_WATCH_FILE", raising=False)
    monkeypatch.delenv("METACAN_RETRACTION_WATCH_URL", raising=False)
    result = build(storage)
    assert result.success, root_error(result)
    recs = records(storage)
    assert {r["retraction_watch"]["state"] for r in recs.values()} == {"not_checked"}
    assert release_sql(storage, "SELECT retraction_state, count(*) FROM works GROUP BY 1") == [("not_checked", 12)]
    path = release_sql(storage, "SELECT page_path FROM works LIMIT 1")[0][0]
    with TestClient(create_app(storage.root, rate_limit="off")) as c:
        page = c.get(f"/{path}").text
        assert 'data-state="not_checked"' in page and "Not checked: no Retraction Watch file was read" in page
        assert "No notice" not in page
        assert "are not checked, which does not mean" in c.get("/statistics").text
