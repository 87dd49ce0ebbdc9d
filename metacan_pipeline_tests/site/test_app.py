"""Tests of metacan_pipeline.site.web.app through Starlette's TestClient on a real release: the pages, the /q/ links,
exports, the JSON API (strict parameters, the OpenAPI document and page, CORS, ETag and 304, the rate limit),
start-up errors; counts checked against direct DuckDB queries."""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
import os
import re
import shutil
import socket

import duckdb
import fastjsonschema
import pandas as pd
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from metacan_pipeline import __version__, settings
from metacan_pipeline.cli import app as cli
from metacan_pipeline.publish.pages import environment, render_work
from metacan_pipeline.site.build.release import ReleaseUnavailable, current_release_id, manifest_path, releases_dir
from metacan_pipeline.site.query.cohort import encode_cursor
from metacan_pipeline.site.query.params import FILTERS, LISTING
from metacan_pipeline.site.web.app import DEFAULT_ROW_CAP, create_app
from metacan_pipeline.site.web.guide import link_first_uses
from metacan_pipeline.site.web.middleware import client_limiter
from metacan_pipeline.site.web.openapi import API_ROUTES
from metacan_pipeline.vocab import CATEGORIES
from metacan_pipeline_tests.builders.site import metacan_serve


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


def _count(html: str) -> int:
    return int(re.search(r'id="count">([\d,]+)<', html).group(1).replace(",", ""))


def test_the_home_page_counts_lists_and_links_without_javascript(client, site_release):
    storage = site_release[0]
    r = client.get("/", params={"language": "en", "ca_aff": "yes", "label_agreement": "any", "venue": ""})
    # the only script is the typeahead's, from this site (test_statistics.py); the page works without it
    main = r.text.split("<main>")[1].split("</main>")[0].replace('<script src="/static/typeahead.js" defer>', "")
    assert r.status_code == 200 and "<script" not in main.replace("&lt;script", "")
    assert (
        "script-src 'self';" in r.headers["content-security-policy"]
        and "default-src 'none'" in r.headers["content-security-policy"]
    )
    want = _sql(storage, "SELECT count(*) FROM works WHERE language = 'en' AND ca_aff")[0][0]
    assert _count(r.text) == want > 0
    assert "Direct labels cover" in r.text and "absence of a label or a decision is not a negative" in r.text
    # every listed work says the source and status of each category it shows
    for item in re.findall(r"<li><a href=\"/works/.*?</ul></li>", r.text, flags=re.S):
        for badge in re.findall(r'<span class="badge">([^<]+)</span>([^<]*)', item):
            assert badge[0] in (
                "direct label",
                "candidate prediction",
                "consensus prediction",
                "prediction",
                "machine scores",
            )
            assert "(" in badge[1] or badge[0] == "machine scores"
    assert "teacher not qualified: not tested yet" in r.text and "machine_predicted_unvalidated" in r.text
    # following the next-page links reaches every work of the cohort exactly once
    seen, url = [], "/?language=en&ca_aff=yes&limit=4"
    while url:
        page = client.get(url.replace("&amp;", "&"))
        assert page.status_code == 200
        seen += re.findall(r'<a href="https://openalex.org/W\d+"><code>(W\d+)</code></a>', page.text)
        m = re.search(r'href="([^"]+)" rel="next"', page.text)
        url = m.group(1) if m else None
    assert len(seen) == len(set(seen)) == want


def test_facet_links_narrow_the_cohort_to_the_counted_value(client, site_release):
    r = client.get("/", params={"field": "Medicine"})
    link = re.search(r'<a href="(/\?[^"]*institution=[^"]*)">McGill University</a>: (\d+)', r.text)
    narrowed = client.get(link.group(1).replace("&amp;", "&"))
    assert (
        _count(narrowed.text)
        == int(link.group(2))
        == _sql(
            site_release[0],
            "SELECT count(*) FROM works WHERE field = 'Medicine' AND work_key IN (SELECT work_key FROM work_institutions WHERE name = 'McGill University')",
        )[0][0]
    )


def test_a_query_link_recounts_and_cites_the_release(client, site_release):
    storage = site_release[0]
    r = client.get(
        "/", params={"classifier_category": "metaresearch", "classifier_mode": "candidate", "sort": "cited_by"}
    )
    h = re.search(r'id="query-link">[^<]*/q/([0-9a-f]{12})', r.text).group(1)
    again = client.get(
        "/", params={"classifier_mode": "candidate", "classifier_category": "metaresearch", "limit": "3"}
    )
    assert re.search(r"/q/([0-9a-f]{12})", again.text).group(1) == h  # sort and page are not in the hash
    q = client.get(f"/q/{h}")
    want = _sql(storage, "SELECT count(*) FROM work_decisions WHERE mode = 'candidate' AND category = 'metaresearch'")[
        0
    ][0]
    assert q.status_code == 200 and _count(q.text) == want > 0
    rid = current_release_id(storage.root)
    citation = re.search(r'id="citation">([^<]+)<', q.text).group(1)
    assert f"cohort {h} ({want} works), release {rid}" in citation and f"/q/{h}" in citation
    api = client.get(f"/api/v1/queries/{h}").json()
    assert api["release_id"] == rid and api["filters"]["classifier_category"] == "metaresearch"
    assert client.get("/q/0123456789ab").status_code == 404 and client.get("/q/nothex").status_code == 404


def test_links_the_site_writes_name_the_configured_site_never_the_requests_host(site_release, monkeypatch):
    def addresses(client) -> tuple[str, list[str], list[str]]:
        h = re.search(r"/q/([0-9a-f]{12})", client.get("/", params={"has_abstract": "no"}).text).group(1)
        page = client.get(f"/q/{h}", headers={"Host": "evil.example"})
        citation = html.unescape(re.search(r'id="citation">([^<]+)<', page.text).group(1))
        docs = client.get("/api/v1/docs", headers={"Host": "evil.example"}).text
        hrefs = re.findall(r'hreflang="[^"]+" href="([^"]+)"', page.text + docs)
        return citation, hrefs, re.findall(r"https?://[^\s\"<]+/q/[0-9a-f]{12}", citation)

    monkeypatch.delenv(settings.SITE_URL_ENV, raising=False)
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as client:
        citation, hrefs, links = addresses(client)
    assert "evil.example" not in citation + " ".join(hrefs)
    assert links and all(u.startswith("http://testserver/q/") for u in links)  # where the server listens
    monkeypatch.setenv(settings.SITE_URL_ENV, "https://metacan.example.org/site/")
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as client:
        citation, hrefs, links = addresses(client)
    assert (
        "evil.example" not in citation + " ".join(hrefs) and len(hrefs) == 5
    )  # the page: en, fr, x-default; the docs: en, x-default
    assert links and all(u.startswith("https://metacan.example.org/site/q/") for u in links)
    assert all(u.startswith("https://metacan.example.org/site/") for u in hrefs), hrefs
    for bad in ("ftp://x", 'https://exa"mple.org/p>a<th', "https://x.org/{a}"):  # not a URL, or one a header breaks on
        monkeypatch.setenv(settings.SITE_URL_ENV, bad)
        with pytest.raises(ValueError, match=settings.SITE_URL_ENV):
            create_app(site_release[0].root, rate_limit="off")


def test_exports_stream_every_row_of_the_cohort_and_declare_the_cap(client, site_release):
    storage = site_release[0]
    want = _sql(storage, "SELECT count(*) FROM works WHERE NOT has_abstract")[0][0]
    r = client.get("/export.csv", params={"has_abstract": "no"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert r.headers["x-metacan-rows"] == str(want) and r.headers["x-metacan-truncated"] == "false"
    # a header row and the rows, nothing else: pandas reads it with its defaults
    frame = pd.read_csv(io.StringIO(r.text))
    assert len(frame) == want and set(frame["has_abstract"]) == {False}
    assert r.headers["x-metacan-filters"] == '{"has_abstract": "no"}'
    assert r.headers["x-metacan-classifier-version"] == frame["classifier_version"].iloc[0]
    sidecar = client.get("/export.csv", params={"has_abstract": "no", "meta": "1"})
    assert sidecar.headers["content-type"] == "application/json" and "content-disposition" not in sidecar.headers
    assert sidecar.json()["_export"] == {
        "query_hash": r.headers["x-metacan-query-hash"],
        "release_id": current_release_id(storage.root),
        "classifier_version": r.headers["x-metacan-classifier-version"],
        "filters": {"has_abstract": "no"},
        "cohort_count": want,
        "row_cap": DEFAULT_ROW_CAP,
        "rows": want,
        "truncated": False,
    }
    assert client.get("/export.csv", params={"meta": "yes"}).status_code == 400
    empty = client.get("/export.csv", params={"language": "xx"}).text
    assert empty.splitlines() == [r.text.splitlines()[0]]  # an empty cohort: the header row alone
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert len(rows) == want and {row["has_abstract"] for row in rows} == {"false"}
    assert {row["release_id"] for row in rows} == {current_release_id(storage.root)}
    assert {row["validation_status"] for row in rows} == {"score_only:v0-immature-baseline"}
    labelled = [row for row in rows if row["direct_labels"]]
    assert labelled and all(
        lab["label_status"] or lab["status"] == "failed" for row in labelled for lab in json.loads(row["direct_labels"])
    )
    jl = client.get("/api/v1/export", params={"format": "jsonl", "has_abstract": "no"})
    objs = [json.loads(line) for line in jl.text.splitlines()]
    assert objs[0]["_export"]["rows"] == want and len(objs) - 1 == want
    assert {o["id"] for o in objs[1:]} == {row["id"] for row in rows}
    assert isinstance(objs[1]["direct_labels"], list) and isinstance(objs[1]["machine_scores"], list)


def test_a_capped_export_says_it_was_cut(site_release):
    with TestClient(create_app(site_release[0].root, row_cap=5)) as c:
        r = c.get("/export.csv")
        assert r.headers["x-metacan-truncated"] == "true" and r.headers["x-metacan-row-cap"] == "5"
        assert r.headers["x-metacan-rows"] == "5" and r.headers["x-metacan-cohort-count"] == "60"
        assert len([line for line in r.text.splitlines() if line.startswith("W")]) == 5
        meta = json.loads(c.get("/export.jsonl").text.splitlines()[0])["_export"]
        assert meta["truncated"] is True and meta["rows"] == 5 and meta["cohort_count"] == 60


def test_the_work_page_is_the_static_template_and_escapes_payloads(client, site_release):
    storage = site_release[0]
    r = client.get("/works/W7000", follow_redirects=False)
    path = _sql(storage, "SELECT page_path FROM works WHERE id = 'W7000'")[0][0]
    assert r.status_code == 307 and r.headers["location"] == "/" + path
    page = client.get("/" + path)
    record = json.loads(_sql(storage, "SELECT record_json FROM works WHERE id = 'W7000'")[0][0])
    ctx = {
        "n_codex_labels": 0,
        "gated_heads": 0,
        "total_heads": 0,
        "rendered_at": "served live from the release database",
        "page_run_id": "none",
    }
    # the static page byte for byte, plus what only the served page has: hreflang links and the language switch
    alternates = [
        {"hreflang": lang, "href": f"http://testserver{prefix}/{path}"}
        for lang, prefix in (("en", ""), ("fr", "/fr"), ("x-default", ""))
    ]
    switch = {"href": f"/language/fr?next=/fr/{path}", "lang": "fr", "name": "Français"}
    guide = {"about": "/about", "methods": "/methods", "glossary": "/glossary"}
    served = {**ctx, "lang": "en", "alternates": alternates, "switch": switch, "explore": "", "served": True}
    served["guide"] = guide
    # the abstract was fetched live from the loopback OpenAlex (conftest; it holds no W7000: "missing"), kept in the
    # fetcher's memory, so asking again gives the same answer without a request
    abstract = client.app.state.site.abstract_of(record)
    assert abstract.status == "missing" and "OpenAlex returned no record for this id" in page.text
    # ... with the first use of each glossary term in its article linked to the glossary
    assert page.text == link_first_uses(render_work(environment(), record, abstract, served), "en", "article")
    assert page.text.count('<a class="term" href="/glossary#') >= 5
    served_only = (
        r'<link rel="alternate"[^>]*>\n| · <a href="/language/[^"]*"[^>]*>[^<]*</a>'
        r'|\n<section aria-labelledby="explore">.*?</section>\n| <a href="/models/[^"]*" id="model-card">[^<]*</a>\.'
        r'| · <a href="/(?:about|methods|glossary)">[^<]*</a>'
    )
    unlinked = re.sub(r'<a class="term" href="/glossary#[^"]+" title="[^"]*">([^<]*)</a>', r"\1", page.text)
    assert re.sub(served_only, "", unlinked, flags=re.S) == render_work(environment(), record, abstract, ctx)
    assert "<script>alert" not in page.text and "&lt;script&gt;" in page.text
    assert "<script>alert" not in client.get("/", params={"q": "drop"}).text
    assert client.get("/records/W7000.json").json() == record
    assert client.get("/fr/works/w7000", follow_redirects=False).headers["location"] == "/fr/works/W7000"
    assert client.get("/records/w7000.json", follow_redirects=False).headers["location"] == "/records/W7000.json"
    assert client.get("/records/W7000.JSON", follow_redirects=False).headers["location"] == "/records/W7000.json"
    assert client.get("/works/wx7000", follow_redirects=False).status_code == 404
    assert client.get("/api/v1/works/W7000").json()["record"] == record
    assert client.get("/api/v1/works/w7000").json()["record"] == record  # the letter's case is forgiven, as by authors
    forged = encode_cursor("relevance", 10**26, 1)  # a huge number in a relevance cursor: a page, not a 500
    assert client.get("/api/v1/works", params={"q": "drop", "sort": "relevance", "after": forged}).status_code == 200
    assert client.get("/works/other-version/W7000.html").status_code == 404
    assert client.get("/works/W99999999").status_code == 404 and client.get("/works/x'--").status_code == 404
    assert client.get("/index.html", follow_redirects=False).headers["location"] == "/"


def test_the_api_is_strict_and_answers_errors_in_json(client, site_release):
    r = client.get("/api/v1/works", params={"language": "fr", "colour": "red"})
    assert (
        r.status_code == 400
        and r.json()["error"]["status"] == 400
        and "unknown parameter 'colour'" in r.json()["error"]["message"]
    )
    r = client.get("/api/v1/count", params={"classifier_mode": "consensus"})
    assert r.status_code == 400 and "give classifier_category as well" in r.json()["error"]["message"]
    html = client.get("/", params={"score_min": "0.4"})
    assert html.status_code == 400 and "score_min needs score_arm" in html.text
    assert client.get("/api/v1/export", params={"format": "xlsx"}).status_code == 400
    assert client.get("/api/v1/nowhere").json() == {"error": {"status": 404, "message": "Not Found"}}
    body = client.get("/api/v1/count", params={"language": "fr"}).json()
    assert body["count"] == _sql(site_release[0], "SELECT count(*) FROM works WHERE language = 'fr'")[0][0]
    assert {f["value"] for f in body["facets"]["language"]} == {"en", "fr", "de"}  # a facet leaves its own filter out
    works = client.get("/api/v1/works", params={"language": "fr", "limit": "4"}).json()
    assert len(works["works"]) == 4 and works["next_url"].startswith("/api/v1/works?")
    rest = client.get(works["next_url"]).json()
    assert not {w["id"] for w in works["works"]} & {w["id"] for w in rest["works"]}
    assert all("model_version" in w["classifier"] and "direct_labels" in w for w in works["works"])
    assert client.get("/api/v1/").json()["release_id"] == current_release_id(site_release[0].root)


@pytest.mark.parametrize("payload", ["' OR 1=1 --", "<script>alert(1)</script>", "'; DROP TABLE works; --", "%00%27"])
def test_payloads_in_every_parameter_answer_200_or_400(client, site_release, payload):
    for name in FILTERS + LISTING:
        for path in ("/", "/api/v1/count", "/export.csv"):
            r = client.get(path, params={name: payload})
            assert r.status_code in (200, 400), (name, path, r.status_code)
            assert r.headers["x-content-type-options"] == "nosniff"  # data files carry raw data: never sniffed as HTML
            if r.headers["content-type"].startswith("text/html"):  # pages escape it
                assert "<script>alert" not in r.text
    assert _sql(site_release[0], "SELECT count(*) FROM works")[0][0] == 60


def test_the_release_is_opened_read_only(client):
    con = client.app.state.site.release.cursor()
    with pytest.raises(duckdb.Error, match="read-only"):
        con.execute("CREATE TABLE intruder (a INTEGER)")
    con.close()


def test_a_missing_or_corrupt_release_is_a_start_up_error_naming_file_and_asset(tmp_path, site_release):
    with pytest.raises(ReleaseUnavailable, match=r"current\.json does not exist.*'site_database'"):
        create_app(tmp_path / "empty")
    copy = tmp_path / "copy"
    shutil.copytree(releases_dir(site_release[0].root), copy / "site" / "releases")
    rid = current_release_id(copy)
    (copy / "site" / "releases" / f"{rid}.fts.sqlite").unlink()
    with pytest.raises(
        ReleaseUnavailable, match=rf"{rid}\.fts\.sqlite is missing; materialize the asset 'site_database'"
    ):
        create_app(copy)
    shutil.copy(releases_dir(site_release[0].root) / f"{rid}.fts.sqlite", copy / "site" / "releases")
    damaged = copy / "site" / "releases" / f"{rid}.duckdb"  # same size as built: the size check passes
    damaged.write_bytes((b"not a database" * (damaged.stat().st_size // 14 + 1))[: damaged.stat().st_size])
    with pytest.raises(ReleaseUnavailable, match=rf"{rid}\.duckdb has SHA-256 .*'site_database' again"):
        create_app(copy)
    shutil.copy(releases_dir(site_release[0].root) / f"{rid}.duckdb", damaged)  # whole again
    manifest = json.loads(manifest_path(copy, rid).read_text())  # one that records no checksum checks nothing
    for key in ("database_sha256", "fts_index_sha256"):
        for value in (None, "x"):
            manifest_path(copy, rid).write_text(json.dumps({**manifest, key: value}))
            with pytest.raises(ReleaseUnavailable, match=rf"records no SHA-256 of {rid}\..*'site_database' again"):
                create_app(copy)
    manifest_path(copy, rid).write_text(json.dumps({k: v for k, v in manifest.items() if "sha256" not in k}))
    with pytest.raises(ReleaseUnavailable, match=rf"records no SHA-256 of {rid}\.duckdb \(written by an older"):
        create_app(copy)
    result = CliRunner().invoke(cli, ["serve", "--data-dir", str(tmp_path / "empty")])
    assert result.exit_code == 1 and "site_database" in result.output and "current.json" in result.output


def test_serve_on_a_port_in_use_says_so_before_announcing_an_address(site_release):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        for args in ([], ["--coding"]):
            result = CliRunner().invoke(
                cli, ["serve", *args, "--data-dir", str(site_release[0].root), "--port", str(port)]
            )
            assert result.exit_code == 1 and "Serving" not in result.output, result.output
            assert f"listening on 127.0.0.1:{port} is in use" in result.output and "--port" in result.output


def test_a_link_made_on_an_earlier_release_says_so(tmp_path, openalex_dir):
    import pyarrow as pa

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.tables.teachers import LABELS_SCHEMA
    from metacan_pipeline_tests.builders.site import build_site, site_world

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=9)
    assert build_site(storage).success
    first = current_release_id(storage.root)
    with TestClient(create_app(storage.root)) as c:
        h = re.search(r"/q/([0-9a-f]{12})", c.get("/", params={"language": "fr"}).text).group(1)
    labels = storage.read_table("direct_labels_gemma").to_pylist()
    labels[0]["categories"] = ["sts"]
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(labels, schema=LABELS_SCHEMA))
    assert build_site(storage).success and current_release_id(storage.root) != first
    with TestClient(create_app(storage.root)) as c:
        page = c.get(f"/q/{h}")
        assert page.status_code == 200 and f"This link was made on release {first}" in page.text
        assert 'href="/?language=fr"' in page.text and 'id="count"' not in page.text
        assert re.search(r"/q/([0-9a-f]{12})", c.get("/", params={"language": "fr"}).text).group(1) != h


def test_the_openapi_document_describes_every_route_and_every_cohort_filter(client):
    doc = client.get("/api/v1/openapi.json").json()
    assert doc["openapi"] == "3.1.0" and "English only" in doc["info"]["description"]
    served = {r.path for r in client.app.routes if r.path.startswith("/api/v1/")}
    assert set(doc["paths"]) == served == {r.path for r in API_ROUTES}
    for path, names in (
        ("/api/v1/works", FILTERS + LISTING),
        ("/api/v1/count", FILTERS),
        ("/api/v1/export", FILTERS + ("format", "meta")),
    ):
        assert [p["name"] for p in doc["paths"][path]["get"]["parameters"]] == list(names)
    params = {p["name"]: p for p in doc["paths"]["/api/v1/works"]["get"]["parameters"]}
    assert params["year_min"]["schema"] == {"type": "integer", "minimum": 1000, "maximum": 2100}
    assert params["ca_aff"]["schema"] == {"type": "string", "enum": ["yes", "no", "any", ""], "default": "any"}
    assert params["label_category"]["schema"]["enum"] == [*CATEGORIES, ""]  # "": an empty value is unset
    assert params["label_teacher"]["schema"]["enum"] == ["codex", "gemma", ""]  # the served release's own vocabulary
    assert params["limit"]["schema"]["default"] == 20 and all(p["description"] for p in params.values())
    for p in params.values():  # every schema is JSON Schema, and its enum and default satisfy it
        check = fastjsonschema.compile(p["schema"])
        for value in p["schema"].get("enum", []) + ([p["schema"]["default"]] if "default" in p["schema"] else []):
            check(value)
    # what the document allows the parser accepts, what it forbids the parser refuses
    assert (
        client.get("/api/v1/count", params={"year_min": "1000", "score_arm": "gemma", "score_max": "1"}).status_code
        == 200
    )
    assert client.get("/api/v1/count", params={"year_min": "999"}).status_code == 400
    work = doc["paths"]["/api/v1/works/{id}"]["get"]
    assert work["parameters"][0]["in"] == "path" and "404" in work["responses"] and "429" in work["responses"]
    assert client.get("/api/v1/", params={"colour": "red"}).status_code == 400  # routes without parameters refuse any
    docs = client.get("/api/v1/docs")
    assert (
        docs.status_code == 200
        and "<script" not in docs.text
        and "script-src" not in docs.headers["content-security-policy"]
    )
    for name in FILTERS + LISTING + ("format",):
        assert f"<td><code>{name}</code></td>" in docs.text, name
    for path, item in doc["paths"].items():
        for method in item:
            assert f"<code>{method.upper()} {path}</code>" in docs.text


def test_the_api_answers_any_origin_read_only_and_pages_stay_same_origin(client):
    origin = {"Origin": "https://example.org"}
    r = client.get("/api/v1/count", params={"language": "fr"}, headers=origin)
    assert r.headers["access-control-allow-origin"] == "*" and "access-control-allow-credentials" not in r.headers
    assert {"ETag", "Retry-After", "X-Metacan-Rows"} <= set(r.headers["access-control-expose-headers"].split(", "))
    pre = client.options(
        "/api/v1/works",
        headers={**origin, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "If-None-Match"},
    )
    assert pre.status_code == 200 and pre.headers["access-control-allow-methods"] == "GET"
    assert (
        client.options("/api/v1/works", headers={**origin, "Access-Control-Request-Method": "POST"}).status_code == 400
    )
    refused = client.get("/api/v1/count", params={"colour": "red"}, headers=origin)
    assert refused.status_code == 400 and refused.headers["access-control-allow-origin"] == "*"  # readable errors
    assert client.get("/api/v1/nowhere", headers=origin).headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-origin" not in client.get("/", headers=origin).headers
    assert "access-control-allow-origin" not in client.get("/export.csv", headers=origin).headers


def test_api_answers_carry_an_etag_and_a_conditional_get_is_304(client, site_release):
    rid = current_release_id(site_release[0].root)
    r = client.get("/api/v1/count", params={"language": "fr", "ca_aff": "yes"})
    tag = r.headers["etag"]
    want = "\n".join((__version__, rid, str(DEFAULT_ROW_CAP), "/api/v1/count", "ca_aff=yes&language=fr"))
    assert tag == '"' + hashlib.sha256(want.encode()).hexdigest()[:32] + '"'
    assert r.headers["cache-control"] == "public, max-age=300"
    assert client.get("/api/v1/count", params=[("ca_aff", "yes"), ("language", "fr")]).headers["etag"] == tag
    assert client.get("/api/v1/count", params={"language": "en"}).headers["etag"] != tag
    again = client.get(
        "/api/v1/count", params={"language": "fr", "ca_aff": "yes"}, headers={"If-None-Match": f'"other", W/{tag}'}
    )
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
    assert again.headers["cache-control"] == "public, max-age=300"
    stale = client.get("/api/v1/count", params={"language": "fr", "ca_aff": "yes"}, headers={"If-None-Match": '"x"'})
    assert stale.status_code == 200 and stale.json() == r.json()
    export = client.get("/api/v1/export", params={"format": "jsonl", "language": "fr"})
    assert export.headers["etag"] and export.headers["cache-control"].startswith("public")
    assert (
        client.get(
            "/api/v1/export",
            params={"format": "jsonl", "language": "fr"},
            headers={"If-None-Match": export.headers["etag"]},
        ).status_code
        == 304
    )
    for path, params in (("/api/v1/count", {"colour": "red"}), ("/api/v1/works/W1", {}), ("/api/v1/nowhere", {})):
        err = client.get(path, params=params)
        assert (
            err.status_code in (400, 404) and err.headers["cache-control"] == "no-store" and "etag" not in err.headers
        )


def test_a_client_over_its_bucket_gets_429_with_retry_after(site_release, monkeypatch):
    app = create_app(site_release[0].root, rate_limit="1/m burst 2")
    with TestClient(app) as c:
        assert [c.get("/api/v1/").status_code for _ in range(2)] == [200, 200]
        r = c.get("/api/v1/count", headers={"Origin": "https://example.org"})
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
        assert r.headers["cache-control"] == "no-store" and r.headers["access-control-allow-origin"] == "*"
        message = r.json()["error"]["message"]
        assert message == (
            f"too many requests from testclient: this API answers 1 requests per 60 s, in bursts of at most 2 per "
            f"client; retry in {r.headers['retry-after']} s."
        )
        assert c.get("/").status_code == 200  # pages are not limited
    with TestClient(app, client=("192.0.2.7", 50000)) as other:  # another address has its own bucket
        assert other.get("/api/v1/").status_code == 200
    with pytest.raises(ValueError, match=r"rate_limit='twice a day' is not a rate"):
        create_app(site_release[0].root, rate_limit="twice a day")
    monkeypatch.setenv("METACAN_SITE_RATE_LIMIT", "off")
    assert settings.site_rate_limit() == "off" and client_limiter(settings.site_rate_limit()) is None
    monkeypatch.setenv("METACAN_SITE_RATE_LIMIT", "")
    assert settings.site_rate_limit() == "120/m burst 60"


def test_a_method_a_route_does_not_take_answers_405_with_the_allow_header(client):
    for route in API_ROUTES:
        path = route.path.replace("{id}", "W1").replace("{hash}", "0" * 12).replace("{facet}", "venue")
        wrong = "GET" if route.method == "POST" else "DELETE"
        r = client.request(wrong, path)
        assert r.status_code == 405, (wrong, path)
        assert set(r.headers["allow"].replace(" ", "").split(",")) >= {route.method}, (path, r.headers)
        assert r.json()["error"]
    page = client.delete("/statistics")
    assert page.status_code == 405 and "GET" in page.headers["allow"] and "<html" in page.text


def test_every_text_box_accepts_exactly_what_the_server_accepts(client):
    from metacan_pipeline.site.query.params import PARAMS

    for path in ("/", "/fr/", "/dossier"):
        boxes = dict(re.findall(r'<input name="([a-z_]+)" value="[^"]*" maxlength="(\d+)"', client.get(path).text))
        assert "q" in boxes and len(boxes) >= 5, path
        for name, length in boxes.items():
            limit = PARAMS[name].max_length
            assert int(length) == limit, (path, name)
            assert client.get("/api/v1/count", params={name: "a" * limit}).status_code == 200, name
            assert client.get("/api/v1/count", params={name: "a" * (limit + 1)}).status_code == 400, name


def test_the_site_has_an_icon_every_page_names(client):
    import xml.etree.ElementTree as ET

    for path in ("/favicon.svg", "/favicon.ico"):
        r = client.get(path)
        assert r.status_code == 200 and r.headers["content-type"] == "image/svg+xml"
        assert ET.fromstring(r.content).tag == "{http://www.w3.org/2000/svg}svg"
    for path in ("/", "/fr/", "/statistics", "/api/v1/docs", "/nowhere"):
        assert '<link rel="icon" href="/favicon.svg" type="image/svg+xml">' in client.get(path).text, path


def test_a_refused_cohort_goes_back_to_the_builder_with_the_filters_it_accepts(client):
    def back(path: str, params: dict) -> str:
        r = client.get(path, params=params)
        assert r.status_code == 400
        return html.unescape(
            re.search(r'<a href="([^"]*)">(?:Back to the cohort builder|Retour au constructeur)', r.text)[1]
        )

    # the mode comes before its category: kept once the category is; the bad year is left out
    asked = {"classifier_mode": "candidate", "year_min": "abc", "classifier_category": "metaresearch", "venue": "X"}
    assert back("/", asked) == "/?classifier_mode=candidate&classifier_category=metaresearch&venue=X"
    assert back("/fr/", asked) == "/fr/?classifier_mode=candidate&classifier_category=metaresearch&venue=X"
    assert back("/export.csv", {"language": "en", "format": "csv", "year_max": "9999"}) == "/?language=en"
    assert back("/", {"year_min": "abc"}) == "/"  # nothing it accepts: the builder as it opens
    repeated = client.get("/export.csv?language=en&language=fr&venue=X")  # which language? neither is kept
    assert repeated.status_code == 400 and 'href="/?venue=X"' in repeated.text
    assert "(with the filters it accepts)" in client.get("/", params=asked).text


def test_robots_sitemaps_and_cite_as_links_name_every_work_page(client, site_release, monkeypatch):
    import xml.etree.ElementTree as ET

    from metacan_pipeline.site.web import discovery

    storage = site_release[0]
    robots = client.get("/robots.txt").text
    assert "Disallow: /api/\n" in robots and robots.endswith("Sitemap: http://testserver/sitemap.xml\n")
    ns = {"s": discovery.NS}
    monkeypatch.setattr(discovery, "SITEMAP_URLS", 25)  # 14 pages and 60 works: files of 25, 25 and 24 URLs
    index = ET.fromstring(client.get("/sitemap.xml").content)
    files = [e.text for e in index.findall("s:sitemap/s:loc", ns)]
    assert files == [f"http://testserver/sitemaps/{n}.xml" for n in range(3)]
    urls = []
    for n in range(3):
        r = client.get(f"/sitemaps/{n}.xml")
        assert r.headers["content-type"] == "application/xml; charset=utf-8"
        listed = [e.text for e in ET.fromstring(r.content).findall("s:url/s:loc", ns)]
        assert len(listed) == [25, 25, 24][n]  # never past the protocol's limit per file
        urls += listed
    want = {f"http://testserver/{p}" for (p,) in _sql(storage, "SELECT page_path FROM works")}
    assert len(want) == 60 and {u for u in urls if "/works/" in u} == want and len(urls) == len(set(urls)) == 60 + 14
    assert "http://testserver/fr/statistics" in urls
    for page in ("/about", "/methods", "/glossary"):  # the plain-words pages, in both languages
        assert {f"http://testserver{page}", f"http://testserver/fr{page}"} <= set(urls)
    assert client.get("/sitemaps/3.xml").status_code == 404 and client.get("/sitemaps/00.xml").status_code == 404
    # every listed work page answers, and names what to cite: its DOI, else its OpenAlex id
    wid, doi = _sql(storage, "SELECT id, json_extract_string(record_json, '$.doi') FROM works WHERE doi <> '' LIMIT 1")[
        0
    ]
    page = client.get(next(u for u in urls if u.endswith(f"/{wid}.html")))
    assert page.status_code == 200 and page.headers["link"] == f'<{doi}>; rel="cite-as"'
    h = re.search(r"/q/([0-9a-f]{12})", client.get("/", params={"has_abstract": "no"}).text).group(1)
    assert client.get(f"/q/{h}").headers["link"] == f'<http://testserver/q/{h}>; rel="cite-as"'


def test_cite_as_links_and_sitemaps_never_take_their_host_from_the_request(site_release, monkeypatch):
    """A client chooses the Host header: the addresses the site writes (cite-as, sitemaps, robots.txt) come from
    METACAN_SITE_URL, else from the address the server listens on, never from that header."""
    storage = site_release[0]
    forged = {"Host": "attacker.example"}
    monkeypatch.setenv("METACAN_SITE_URL", "https://metacan.example.org/map")
    with TestClient(create_app(storage.root, rate_limit="off")) as configured:
        h = re.search(r"/q/([0-9a-f]{12})", configured.get("/", params={"has_abstract": "yes"}).text).group(1)
        assert configured.get(f"/q/{h}", headers=forged).headers["link"] == (
            f'<https://metacan.example.org/map/q/{h}>; rel="cite-as"'
        )
        assert configured.get(f"/fr/q/{h}", headers=forged).headers["link"] == (
            f'<https://metacan.example.org/map/fr/q/{h}>; rel="cite-as"'
        )
        robots = configured.get("/robots.txt", headers=forged).text
        assert robots.endswith("Sitemap: https://metacan.example.org/map/sitemap.xml\n")
        index = configured.get("/sitemap.xml", headers=forged).text
        assert "https://metacan.example.org/map/sitemaps/0.xml" in index and "attacker" not in index
        assert "attacker" not in configured.get("/sitemaps/0.xml", headers=forged).text
    monkeypatch.delenv("METACAN_SITE_URL")
    with TestClient(create_app(storage.root, rate_limit="off")) as unconfigured:
        link = unconfigured.get(f"/q/{h}", headers=forged).headers["link"]
        assert link == f'<http://testserver/q/{h}>; rel="cite-as"'  # the server's own address


def test_the_cohort_form_answers_every_combination_it_offers_and_says_what_it_changed(client, site_release):
    storage = site_release[0]

    def page(params: dict) -> tuple[int, list[str]]:
        r = client.get("/", params=params)
        assert r.status_code == 200, (params, r.text[:300])
        return _count(r.text), [  # a notice's text (a glossary term in it is a link)
            html.unescape(re.sub(r"<[^>]+>", "", n))
            for n in re.findall(r'<p class="notice" role="status">(.+?)</p>', r.text)
        ]

    # relevance without words: sorted by year, said so; the API keeps refusing the same request
    count, notes = page({"sort": "relevance", "language": "en"})
    assert notes == ["Relevance sorting needs search words: the works are sorted by year (newest first)."]
    assert count == _sql(storage, "SELECT count(*) FROM works WHERE language = 'en'")[0][0]
    assert client.get("/api/v1/count", params={"sort": "relevance"}).status_code == 400
    # a mode without a category: left out
    count, notes = page({"classifier_mode": "consensus"})
    assert count == 60 and notes[0].startswith("A classifier mode or version qualifies a category")
    # a category without a mode: candidate decisions, said so
    count, notes = page({"classifier_category": "metaresearch"})
    want = _sql(storage, "SELECT count(*) FROM work_decisions WHERE mode = 'candidate' AND category = 'metaresearch'")
    assert count == want[0][0] and notes[0].startswith("Shown: candidate decisions")
    fr = client.get("/fr/", params={"classifier_category": "metaresearch"}).text
    assert "Affichées\u00a0: les décisions candidates" in html.unescape(re.sub(r"<[^>]+>", "", fr))
    assert page({"language": "en"})[1] == []  # nothing changed: nothing said


def test_listed_works_link_their_openalex_id_and_doi(client, site_release):
    wid, doi = _sql(site_release[0], "SELECT id, doi FROM works WHERE doi <> '' ORDER BY year DESC, work_key LIMIT 1")[
        0
    ]
    assert doi.startswith("https://doi.org/10.")
    text = client.get("/", params={"limit": "100"}).text
    assert f'<a href="https://openalex.org/{wid}"><code>{wid}</code></a> · <a href="{html.escape(doi)}">DOI</a>' in text


def test_a_trailing_slash_redirect_never_names_the_host_a_client_sent(client):
    for path, to in (("/fr", "/fr/"), ("/statistics/", "/statistics"), ("/api/v1/works/", "/api/v1/works")):
        r = client.get(path, headers={"Host": "evil.example"}, follow_redirects=False)
        assert r.status_code in (301, 302, 307, 308) and r.headers["location"] == to, (path, r.headers)
    assert client.get("/fr", follow_redirects=True).status_code == 200  # the relative redirect still leads there


def test_metacan_serve_rate_limits_a_local_client_whatever_address_it_forwards(site_release):
    """``metacan serve`` keys the rate limit on the connection's address: an ``X-Forwarded-For`` a local client makes
    up is not trusted (uvicorn would trust it from 127.0.0.1 by default), so it cannot buy a fresh bucket."""
    import httpx

    env = {**os.environ, "METACAN_DATA_DIR": str(site_release[0].root), "METACAN_SITE_RATE_LIMIT": "3/m burst 3"}
    with metacan_serve(env, ready="/") as served:
        statuses = [httpx.get(served.url + "/api/v1/").status_code for _ in range(4)]
        assert statuses[:3] == [200] * 3 and statuses[3] == 429
        forged = httpx.get(served.url + "/api/v1/", headers={"X-Forwarded-For": "10.0.0.1"})
        assert forged.status_code == 429 and "10.0.0.1" not in forged.text
