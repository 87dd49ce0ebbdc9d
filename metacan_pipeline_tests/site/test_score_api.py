"""Tests of ``POST /api/v1/score`` (metacan_pipeline.site.web.score_api): a bounded batch scored by the model version
the served release names, with the columns and values of ``metacan score``, and every bad body refused clearly."""

from __future__ import annotations

import csv
import json

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from metacan_pipeline.cli import app as cli
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.site.web.score_api import MAX_WORKS
from metacan_pipeline.student.list_input import MAX_TITLE_CHARS
from metacan_pipeline.student.models import model_path
from metacan_pipeline.vocab import PREDICTION_STATUS
from metacan_pipeline_tests.builders.student import list_rows


@pytest.fixture(scope="module")
def served(scoring_release):
    return scoring_release


@pytest.fixture()
def client(served):
    with TestClient(create_app(served[0].root, rate_limit="off")) as c:
        yield c


def _rows(frame, n=20):
    return list_rows(frame[:n])


def test_the_api_scores_a_batch_exactly_as_metacan_score_and_the_frame(served, client, tmp_path):
    storage, trained, frame, version = served
    works = _rows(frame)
    r = client.post("/api/v1/score", json={"works": works})
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    assert body["model_version"] == version and body["rejected"] == [] and body["percentile_note"] is None
    assert [w["id"] for w in body["works"]] == [w["id"] for w in works]
    assert list(body["works"][0]) == body["columns"]
    assert {w["validation_status"] for w in body["works"]} == {PREDICTION_STATUS}
    frame_scores = {s["id"]: s for s in trained.read_table("student_scores").to_pylist()}
    for w in body["works"]:
        assert w["codex:metaresearch"] == frame_scores[w["id"]]["codex__metaresearch"]
        assert w["gemma:about_ca_topic"] == frame_scores[w["id"]]["gemma__about_ca_topic"]
        assert w["codex:genre"] == frame_scores[w["id"]]["codex__genre__argmax"]
    # metacan score on the same data folder writes the same rows
    src = tmp_path / "list.jsonl"
    src.write_text("\n".join(json.dumps(w) for w in works))
    out = tmp_path / "o.jsonl"
    done = CliRunner().invoke(cli, ["score", str(src), "--out", str(out), "--data-dir", str(storage.root)])
    assert done.exit_code == 0, done.output
    assert [json.loads(x) for x in out.read_text().splitlines()] == body["works"]


def test_refused_works_are_listed_with_their_index_and_the_rest_scored(served, client):
    _, _, frame, _ = served
    works = _rows(frame, 2)
    r = client.post("/api/v1/score", json={"works": [works[0], {"title": "no id"}, works[0], 7, works[1]]})
    assert r.status_code == 200
    body = r.json()
    assert [w["id"] for w in body["works"]] == [works[0]["id"], works[1]["id"]]
    assert body["rejected"] == [
        {"index": 1, "id": None, "reason": "no id"},
        {"index": 2, "id": works[0]["id"], "reason": "duplicate id (first at row 1)"},
        {"index": 3, "id": None, "reason": "a JSON number, not an object"},
    ]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "the body is not JSON"),
        (b"[]", 400, 'a JSON object with a "works" list'),
        (b'{"works": {}}', 400, 'a JSON object with a "works" list'),
        (b'{"works": []}', 400, '"works" is empty'),
        (b'{"works": [{"id": "a", "title": "x"}], "colour": 1}', 400, "unknown body keys 'colour'"),
        (b'{"works": [{"id": "a", "title": "x"}], "model_version": "v9"}', 400, '"v9" is not a classifier version'),
        (b'{"works": [{"id": "a", "title": "x"}], "model_version": null}', 400, "null is not a classifier version"),
        (json.dumps({"works": [{"id": str(i), "title": "t"} for i in range(MAX_WORKS + 1)]}).encode(), 400, "at most"),
    ],
)
def test_a_bad_body_is_refused_with_one_clear_sentence(served, client, body, status, message):
    r = client.post("/api/v1/score", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert message in r.json()["error"]["message"]
    assert r.json()["error"]["status"] == status and r.headers["cache-control"] == "no-store"


def test_a_body_none_of_whose_works_can_be_scored_answers_each_refusal(served, client):
    r = client.post("/api/v1/score", json={"works": [{"id": "a"}, {"title": "b"}]})
    assert r.status_code == 200 and r.json()["works"] == []
    assert r.json()["rejected"] == [
        {"index": 0, "id": "a", "reason": "no title"},
        {"index": 1, "id": None, "reason": "no id"},
    ]


def test_a_title_over_the_bound_is_refused_naming_its_work(served, client):
    works = [{"id": "ok", "title": "A title"}, {"id": "long", "title": "é" * (MAX_TITLE_CHARS + 1)}]
    r = client.post("/api/v1/score", json={"works": works})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "the title of works[1] (id 'long') holds 2,001 characters" in message and "at most 2,000" in message
    at_bound = [{"id": "edge", "title": "é" * MAX_TITLE_CHARS}]
    assert client.post("/api/v1/score", json={"works": at_bound}).status_code == 200
    # what the request schema bounds, whether or not the object could be scored: an OpenAlex record's display_name,
    # an object without an id
    record = {"id": "https://openalex.org/W1", "display_name": "x" * (MAX_TITLE_CHARS + 1)}
    r = client.post("/api/v1/score", json={"works": [record]})
    assert r.status_code == 400 and "the display_name of works[0] (id 'https://openalex.org/W1')" in r.text
    r = client.post("/api/v1/score", json={"works": [{"title": None, "display_name": "0" * 2500}]})
    assert r.status_code == 400 and "the display_name of works[0] holds 2,500 characters" in r.text


def test_query_parameters_and_get_are_refused(client):
    assert client.post("/api/v1/score?x=1", json={"works": [{"id": "a", "title": "A title"}]}).status_code == 400
    assert client.get("/api/v1/score").status_code == 405


def test_the_rate_limit_applies_to_scoring(served):
    _, _, frame, _ = served
    with TestClient(create_app(served[0].root, rate_limit="1/m burst 1")) as c:
        assert c.post("/api/v1/score", json={"works": _rows(frame, 1)}).status_code == 200
        r = c.post("/api/v1/score", json={"works": _rows(frame, 1)})
        assert r.status_code == 429 and "too many requests" in r.json()["error"]["message"]


def test_an_altered_model_file_is_refused_with_503(served):
    storage, _, frame, version = served
    path = model_path(storage, version)
    original = path.read_bytes()
    try:
        path.write_bytes(original + b"\0")
        with TestClient(create_app(storage.root, rate_limit="off")) as c:
            r = c.post("/api/v1/score", json={"works": _rows(frame, 1)})
        assert r.status_code == 503
        assert "was altered after publication" in r.json()["error"]["message"]
        assert str(storage.root) not in r.text and "<data folder>" in r.json()["error"]["message"]
    finally:
        path.write_bytes(original)


def test_the_openapi_document_describes_the_post_route(client):
    doc = client.get("/api/v1/openapi.json").json()
    op = doc["paths"]["/api/v1/score"]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["works"]["maxItems"] == MAX_WORKS and schema["required"] == ["works"]
    release = client.get("/api/v1/").json()
    assert schema["properties"]["model_version"]["enum"] == release["classifier_versions"]
    assert {"200", "400", "413", "429", "503"} == set(op["responses"])
    docs = client.get("/api/v1/docs").text
    assert "<code>POST /api/v1/score</code>" in docs and "JSON body of" in docs


def test_the_csv_list_and_the_api_agree_on_percentiles(served, client, tmp_path):
    storage, _, frame, _ = served
    works = _rows(frame, 10)
    body = client.post("/api/v1/score", json={"works": works}).json()
    src = tmp_path / "l.csv"
    with open(src, "w", newline="") as fh:
        w = csv.DictWriter(fh, list(works[0]))
        w.writeheader()
        w.writerows(works)
    out = tmp_path / "o.csv"
    assert (
        CliRunner().invoke(cli, ["score", str(src), "--out", str(out), "--data-dir", str(storage.root)]).exit_code == 0
    )
    with open(out, newline="") as fh:
        listed = list(csv.DictReader(fh))
    assert [float(x["codex:metaresearch:percentile"]) for x in listed] == [
        w["codex:metaresearch:percentile"] for w in body["works"]
    ]
    assert all(w["codex:metaresearch:percentile"] is not None for w in body["works"])


def test_a_body_over_the_byte_bound_is_413(client, monkeypatch):
    from metacan_pipeline.site.web import score_api

    monkeypatch.setattr(score_api, "MAX_BODY_BYTES", 100)
    body = b'{"works": [' + b" " * 200 + b"]}"
    r = client.post("/api/v1/score", content=body)
    assert r.status_code == 413 and r.json()["error"]["message"] == (
        f"the body holds {len(body)} bytes; at most 100 are accepted."
    )

    def chunks():  # no Content-Length: the bound holds while reading
        yield body[:60]
        yield body[60:]

    r = client.post("/api/v1/score", content=chunks())
    assert r.status_code == 413 and "more than 100 bytes" in r.json()["error"]["message"]
