"""The release layers on the served site, on the site world's release (builders.site.site_world): every work's layer
in the release database is the rule's over its record, the filter and the facet count what DuckDB counts (and the
world's inputs say), the API refuses a layer the protocol does not name and documents the four, every export carries
the column, the pages say the layer in English and French, and ``metacan summary`` counts the layers."""

from __future__ import annotations

import csv
import io
import json

import duckdb
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.cli.run_summary import release_layer_lines
from metacan_pipeline.release.release_layers import RELEASE_LAYERS, release_layer
from metacan_pipeline.site.build.release import current_release_id, releases_dir
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline_tests.builders.common import check_evaluation


@pytest.fixture(scope="module")
def client(site_release):
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as c:
        yield c


def _sql(storage, query, params=()):
    path = releases_dir(storage.root) / f"{current_release_id(storage.root)}.duckdb"
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def contested_by_hand(frame: list[dict]) -> set[str]:
    """The world's contested works, from how it was written: a category in the candidate (every fourth work) but not
    the consensus (every eighth), where there is a prediction (all but every eleventh); the teachers' direct labels
    never split on a work both labelled, and neither teacher is qualified in this world."""
    return {r["id"] for i, r in enumerate(frame) if i % 4 == 0 and i % 8 != 0 and i % 11 != 10}


def test_every_work_is_in_the_layer_the_rule_gives_and_the_check_counted_them(site_release):
    storage, frame, result = site_release
    rows = _sql(storage, "SELECT id, release_layer, record_json FROM works ORDER BY id")
    assert len(rows) == len(frame) == 60
    assert all(layer == release_layer(json.loads(text)) for _, layer, text in rows)
    contested = {wid for wid, layer, _ in rows if layer == "contested"}
    assert contested == contested_by_hand(frame) and len(contested) == 7
    assert {layer for _, layer, _ in rows} == {"contested", "provisional"}
    check = check_evaluation(result, "records_in_one_release_layer")
    assert check.passed and check.metadata["works_contested"].value == 7
    assert check.metadata["works_provisional"].value == 53 and check.metadata["works_in_no_layer"].value == 0


def test_the_layer_filter_and_facet_count_what_duckdb_counts(client, site_release):
    storage = site_release[0]
    whole = dict(_sql(storage, "SELECT release_layer, count(*) FROM works GROUP BY 1"))
    for params, where in (
        ({}, "true"),
        ({"language": "fr"}, "language = 'fr'"),
        ({"release_layer": "contested"}, "release_layer = 'contested'"),
        ({"release_layer": "contested", "ca_aff": "yes"}, "release_layer = 'contested' AND ca_aff"),
    ):
        answer = client.get("/api/v1/count", params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["count"] == _sql(storage, f"SELECT count(*) FROM works WHERE {where}")[0][0], params
        # the layer's facet counts under every filter but its own
        other = " AND ".join(f"({c})" for c in where.split(" AND ") if not c.startswith("release_layer")) or "true"
        want = dict(_sql(storage, f"SELECT release_layer, count(*) FROM works WHERE {other} GROUP BY 1"))
        assert {f["value"]: f["count"] for f in body["facets"]["release_layer"]} == want, params
    assert client.get("/api/v1/count", params={"release_layer": "contested"}).json()["count"] == whole["contested"]
    listed = client.get("/api/v1/works", params={"release_layer": "contested", "limit": "100"}).json()["works"]
    assert len(listed) == 7 and {w["release_layer"] for w in listed} == {"contested"}


def test_a_layer_the_protocol_does_not_name_is_refused_and_the_four_are_documented(client):
    bad = client.get("/api/v1/count", params={"release_layer": "certified"})
    assert bad.status_code == 400
    message = bad.json()["error"]["message"]
    assert "release_layer 'certified' is not one of human_verified, high_precision, provisional, contested" in message
    doc = client.get("/api/v1/openapi.json").json()
    count = doc["paths"]["/api/v1/count"]["get"]["parameters"]
    [param] = [p for p in count if p["name"] == "release_layer"]
    assert param["schema"]["enum"] == [*RELEASE_LAYERS, ""] and "human_verified" in param["description"]


def test_every_export_carries_the_layer(client, site_release):
    storage = site_release[0]
    want = dict(_sql(storage, "SELECT id, release_layer FROM works WHERE language = 'en'"))
    rows = list(csv.DictReader(io.StringIO(client.get("/export.csv", params={"language": "en"}).text)))
    assert {r["id"]: r["release_layer"] for r in rows} == want
    lines = client.get("/export.jsonl", params={"language": "en"}).text.splitlines()
    objs = [json.loads(line) for line in lines if not line.startswith('{"_export"')]
    assert {o["id"]: o["release_layer"] for o in objs} == want
    table = pq.read_table(io.BytesIO(client.get("/export.parquet", params={"language": "en"}).content))
    assert dict(zip(table.column("id").to_pylist(), table.column("release_layer").to_pylist(), strict=True)) == want


def test_the_pages_say_the_layer_in_english_and_french(client, site_release):
    storage, frame, _ = site_release
    wid = sorted(contested_by_hand(frame))[0]
    [(path,)] = _sql(storage, "SELECT page_path FROM works WHERE id = ?", [wid])
    en, fr = client.get(f"/{path}").text, client.get(f"/fr/{path}").text
    assert 'id="release-layer"' in en and "release layer · contested" in en
    assert "The machine sources split on this work (" in en
    assert "strate de diffusion · contestée" in fr and "Les sources automatiques divergent sur cette publication" in fr
    home = client.get("/", params={"release_layer": "contested"}).text
    assert "<h3>Release layer</h3>" in home and 'value="contested" selected' in home
    assert "<h3>Strate de diffusion</h3>" in client.get("/fr/", params={"release_layer": "contested"}).text


def test_the_summary_counts_the_works_of_each_layer(site_release):
    storage = site_release[0]
    with storage.connect(read_only=True) as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        lines = release_layer_lines(con, views)
    assert lines == [
        "Release layers (the protocol's; every work in one): human-verified 0 | high-precision 0 | provisional 53 | "
        "contested 7"
    ]
