"""Masking of the coding server (metacan_pipeline/site/web/coding_app.py): a coder signed in on it reaches no machine
output and no other coder's answer, by any link of the pages or any address of the public site; the public server
(site/web/app.py) serves no coding page; the coding server needs the coding store only.

The world is the site tests' release (60 works with direct labels, predictions and machine scores in the warehouse
and the release database), an audit protocol drawing 8 of its works, ``coding_tasks`` materialized into a real SQLite
coding store, and a loopback OpenAlex serving the abstracts."""

from __future__ import annotations

import html
import re
import sqlite3
from collections import deque
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from metacan_pipeline import settings
from metacan_pipeline.audit.protocol.locked import load_instructions
from metacan_pipeline.publish.abstracts import AbstractFetcher
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.site.web.coding_app import create_coding_app
from metacan_pipeline.site.web.icon import FAVICON
from metacan_pipeline.vocab import CATEGORIES, CONFIDENCES, DOMAINS, GENRES, STUDY_DESIGNS
from metacan_pipeline_tests.builders.coding import coding_app as coding_app_of
from metacan_pipeline_tests.builders.coding import coding_world
from metacan_pipeline_tests.builders.site import metacan_serve

REPO = Path(__file__).resolve().parents[2]
ABSTRACT = "Trial registrations of Canadian surgical studies were compared with their published reports."
#: The coder the crawl signs in as, and the other coder of the same works (whose answers must stay hidden).
CODER, OTHER = "annika", "bartholomew"
MINE = {
    "categories": ["metaresearch", "metaepi_broad"],
    "domain": "reporting",
    "study_design": "observational",
    "genre": "empirical",
    "about_ca_system": "no",
    "about_ca_topic": "yes",
    "confidence": "medium",
    "note": "annika's own note: reporting of registered trials",
}
#: The other coder's answer differs from MINE in every field but ``metaresearch`` (a domain needs it), and its note is a
#: sentence found nowhere else.
THEIRS = {
    "categories": ["metaresearch", "bibliometrics"],
    "domain": "incentives",
    "study_design": "systematic_review",
    "genre": "review",
    "about_ca_system": "yes",
    "about_ca_topic": "no",
    "confidence": "low",
    "note": "zanzibar quokka marmalade: the second coder's private reasoning",
}
INSTRUCTIONS = load_instructions("v1").text
#: The fields of an answer (SPEC section 3, ``unresolved`` and a note): the coder's form names them.
ANSWER_FIELDS = (*MINE, "unresolved")
#: Words the public site and the records use for machine outputs (English and French): none belongs on a coder's page.
MACHINE_WORDS = (
    "prediction",
    "prédiction",
    "predicted",
    "consensus",
    "candidate",
    "candidat",
    "score",
    "teacher",
    "annotateur",
    "gemma",
    "codex",
    "direct label",
    "étiquette directe",
    "qualification",
    "qualified",
    "classifier",
    "classificateur",
    "classification",
    "human-validated",
    "model card",
    "release",
    "stratum",
    "design weight",
    "selection probability",
)


@pytest.fixture(scope="module")
def world(site_release):
    storage, frame, _ = site_release
    with coding_world(storage, frame, [f["id"] for f in frame[1:9]], (CODER, OTHER), ABSTRACT) as w:
        yield w


@pytest.fixture(scope="module")
def coding_app(world):
    with coding_app_of(world) as asgi:
        yield asgi


@pytest.fixture(scope="module")
def public_app(world):
    asgi = create_app(world["storage"].root, rate_limit="off", abstracts=AbstractFetcher(world["openalex"].base_url))
    yield asgi
    asgi.state.site.abstracts.close()


def _csrf(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def sign_in(app, token: str) -> TestClient:
    c = TestClient(app, follow_redirects=False)
    form = c.get("/coding/sign-in")
    r = c.post("/coding/sign-in", data={"csrf_token": _csrf(form.text), "token": token})
    assert r.status_code == 303 and r.headers["location"] == "/coding/", r.text
    return c


def code_next(c: TestClient, answer: dict) -> str:
    """Take the coder's next work and submit ``answer`` on it; returns the work's id."""
    r = c.get("/coding/next")
    assert r.status_code == 303 and "/coding/works/" in r.headers["location"]
    wid = r.headers["location"].rsplit("/", 1)[1]
    page = c.get(r.headers["location"]).text
    sha = re.search(r'name="evidence_sha256" value="([0-9a-f]{64})"', page).group(1)
    done = c.post(f"/coding/works/{wid}", data={**answer, "csrf_token": _csrf(page), "evidence_sha256": sha})
    assert done.status_code == 303, re.findall(r'<li><a href="#field-[^"]*">[^<]*', done.text)
    return wid


def _numbers(value) -> set[str]:
    """The ways a machine score is written on a page or in a record: as stored, and to 2 and 3 decimals."""
    if isinstance(value, bool) or not isinstance(value, float):
        return set()
    return {repr(value), f"{value:.2f}", f"{value:.3f}"}


def machine_outputs(storage, works: list[str]) -> tuple[set[str], set[str]]:
    """``(texts, numbers)`` the warehouse holds as machine output for ``works``: the column names of their predictions
    and machine scores, the string values of those and of their direct labels (the vocabulary codes and the answer
    fields aside: every one is on the coder's form), and every score written as a page would write it."""
    on_the_form = {*ANSWER_FIELDS, *CATEGORIES, *DOMAINS, *STUDY_DESIGNS, *GENRES, *CONFIDENCES}
    texts: set[str] = set()
    numbers: set[str] = set()
    for table, key in (
        ("predictions", "id"),
        ("machine_scores", "id"),
        ("direct_labels_gemma", "work_id"),
        ("direct_labels_codex", "work_id"),
    ):
        for row in storage.read_table(table).to_pylist():
            if row[key] not in works:
                continue
            if not table.startswith("direct_labels"):
                texts.update(c for c in row if c != key)
            for col, value in row.items():
                for v in value if isinstance(value, list) else [value]:
                    numbers |= _numbers(v)
                    if isinstance(v, str) and col not in (key, "label_id", "call_id", "run_id", "model"):
                        texts.add(v)
    # one- to three-letter values (a prompt version "v1", an arm "x") say nothing by themselves
    return {t for t in texts if len(t) > 3 and t not in on_the_form}, numbers


def leaks(body: str, texts: set[str], numbers: set[str]) -> list[str]:
    """Every machine output or machine word found in a response body (HTML unescaped, case ignored), the coder
    instructions the protocol locked aside (they tell the coder what they will never see, in those words)."""
    text = html.unescape(body).replace(INSTRUCTIONS, "").lower()
    found = [t for t in texts if re.search(rf"(?<!\w){re.escape(t.lower())}(?!\w)", text)]
    found += [w for w in MACHINE_WORDS if w in text]
    found += [n for n in numbers if re.search(rf"(?<![\w.]){re.escape(n)}(?![\d])", text)]
    return found


def _links(base: str, body: str) -> list[str]:
    """Every address a page links to (href, form action, src) on this server, as a path with its query string."""
    out = []
    for raw in re.findall(r'(?:href|action|src)="([^"]*)"', body):
        url = urlsplit(urljoin(base, html.unescape(raw)))
        if url.scheme in ("http", "https") and url.netloc == "testserver":
            out.append(url.path + (f"?{url.query}" if url.query else ""))
    return out


def _checked(page: str) -> set[tuple[str, str]]:
    return set(re.findall(r'<input type="(?:radio|checkbox)" name="(\w+)" value="([^"]*)" checked', page))


def _public_paths(app, wid: str, version: str, query_hash: str) -> list[tuple[str, str]]:
    """``(method, path)`` of every route of the public app, its parameters filled with a real work of the study."""
    values = {
        "wid": wid,
        "id": wid,
        "version": version,
        "query_hash": query_hash,
        "hash": query_hash,
        "lang": "fr",
        "facet": "venue",
        "name": "model_card.json",
        "n": "0",
        "author_id": "A5017898742",
        "institution_id": "I4210116052",
    }
    out = []
    for route in app.routes:
        assert isinstance(route, Route), route
        path = route.path
        if path.startswith(("/coding", "/fr/coding")):  # the coding pages are not the public site's
            continue
        if "{file}" in path:
            path = path.replace("{file}", f"{wid}.json" if "/records/" in path else f"{wid}.html")
        path = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values[m.group(1)], path)
        for method in sorted(route.methods - {"HEAD"}):
            out.append((method, path))
    return out


def test_a_coder_on_the_coding_server_reaches_no_machine_output_and_no_other_coders_answer(
    world, coding_app, public_app
):
    me, other = sign_in(coding_app, world["tokens"][CODER]), sign_in(coding_app, world["tokens"][OTHER])
    # both code the same two works (two coders a work); the other coder's answers differ in every field
    mine = [code_next(me, MINE), code_next(me, MINE)]
    theirs = [code_next(other, THEIRS), code_next(other, THEIRS)]
    assert sorted(mine) == sorted(theirs)
    texts, numbers = machine_outputs(world["storage"], world["drawn"])
    assert {"candidate_categories", "score_gemma", "machine_predicted_unvalidated"} <= texts and len(numbers) > 20

    # the same searches find the machine outputs on the public server (so a leak would be seen)
    public = TestClient(public_app)
    record = public.get(f"/records/{mine[0]}.json")
    page = public.get(f"/works/{mine[0]}")
    assert record.status_code == page.status_code == 200
    assert {"candidate_categories", "score_gemma"} <= set(leaks(record.text, texts, numbers))
    assert len([n for n in leaks(record.text, texts, numbers) if n in numbers]) > 5
    assert {"consensus", "prediction"} <= set(leaks(page.text, texts, numbers))

    # every page the coder can reach by a link from the queue, in both languages
    seen: dict[str, httpx.Response] = {}
    todo = deque(["/coding/", "/fr/coding/"])
    while todo and len(seen) < 300:
        path = todo.popleft()
        if path in seen:
            continue
        r = seen[path] = me.get(path)
        if r.is_redirect:
            todo.append(r.headers["location"])
        todo.extend(_links(str(r.url), r.text))
    pages = {p: r for p, r in seen.items() if r.status_code == 200}
    assert len(seen) < 300
    for wid in mine:  # the crawl reached both coded works, the queue, the instructions and the French twins
        assert {f"/coding/works/{wid}", f"/fr/coding/works/{wid}"} <= set(pages)
    assert {"/coding/", "/coding/instructions", "/fr/coding/", "/fr/coding/instructions"} <= set(pages)
    assert any(p.startswith("/language/") for p in seen)
    assert INSTRUCTIONS in html.unescape(pages["/coding/instructions"].text)
    for path, r in seen.items():
        assert r.status_code in (200, 303, 307, 404), (path, r.status_code)
        assert leaks(r.text, texts, numbers) == [], (path, leaks(r.text, texts, numbers))
        assert OTHER not in r.text and THEIRS["note"] not in html.unescape(r.text), path
    for wid in mine:  # the form shows the coder's own answer, never the other coder's values
        for prefix in ("", "/fr"):
            page = pages[f"{prefix}/coding/works/{wid}"].text
            assert ABSTRACT in page and MINE["note"] in html.unescape(page)
            assert _checked(page) == {
                ("categories", "metaresearch"),
                ("categories", "metaepi_broad"),
                ("domain", "reporting"),
                ("study_design", "observational"),
                ("genre", "empirical"),
                ("about_ca_system", "no"),
                ("about_ca_topic", "yes"),
                ("confidence", "medium"),
            }

    # every route of the public site, asked of the coding server: the coding pages' 404, or a redirect into them
    version = record.json()["prediction"]["model_version"]
    query_hash = re.search(r"/q/([0-9a-f]{12})", public.get("/").text).group(1)
    routes = _public_paths(public_app, mine[0], version, query_hash)
    assert len(routes) >= 35 and ("GET", f"/records/{mine[0]}.json") in routes
    for method, path in routes:
        if method == "POST":
            r = me.post(path, json={"works": [{"id": mine[0], "title": "A title"}]})
        else:
            r = me.get(path, follow_redirects=True)
        assert r.status_code in (200, 404), (method, path, r.status_code)
        if path in ("/favicon.svg", "/favicon.ico"):  # the one thing both servers serve: the icon
            assert r.content == FAVICON
            continue
        assert urlsplit(str(r.url)).path.startswith(("/coding/", "/fr/coding/", path)), (path, str(r.url))
        assert r.status_code == 404 or urlsplit(str(r.url)).path.startswith(("/coding/", "/fr/coding/")), path
        # the 404 page's language links repeat the address asked for (a model version in it is the asker's own)
        echoed = r.text
        for twin in (path, "/fr" + path, path.removeprefix("/fr")):
            echoed = echoed.replace(twin, "/the-address-asked-for")
        assert leaks(echoed, texts, numbers) == [], (method, path, leaks(echoed, texts, numbers))
        assert OTHER not in r.text and THEIRS["note"] not in html.unescape(r.text), path
    # the filled addresses are real ones: the public server answers them
    for path in (f"/records/{mine[0]}.json", f"/works/{version}/{mine[0]}.html", f"/api/v1/works/{mine[0]}"):
        assert ("GET", path) in routes and public.get(path).status_code == 200, path
    assert public.get(f"/q/{query_hash}").status_code == 200 and public.get("/statistics").status_code == 200


def test_the_public_server_serves_no_coding_page(world, public_app):
    c = TestClient(public_app, follow_redirects=False)
    for path in ("/coding/", "/coding", "/fr/coding/", "/coding/sign-in", f"/coding/works/{world['drawn'][0]}"):
        r = c.get(path)
        assert r.status_code == 404, path
        assert 'name="token"' not in r.text and 'type="password"' not in r.text
    token = world["tokens"][CODER]
    assert c.post("/coding/sign-in", data={"csrf_token": "x" * 64, "token": token}).status_code in (404, 405)


def test_the_coding_server_needs_the_coding_store_only(world, tmp_path):
    data = tmp_path / "data"
    path = settings.coding_store_path(str(data))
    path.parent.mkdir(parents=True)
    with sqlite3.connect(world["path"]) as src, sqlite3.connect(path) as dst:  # every committed row, WAL included
        src.backup(dst)
    assert sorted(p.name for p in data.rglob("*") if p.is_file()) == ["coding.sqlite"]  # no release, no warehouse
    app = create_coding_app(data, abstracts=AbstractFetcher(world["openalex"].base_url))
    try:
        c = sign_in(app, world["tokens"][CODER])
        queue = c.get("/coding/")
        assert queue.status_code == 200 and f"Signed in as {CODER}" in queue.text
        r = c.get("/coding/next")
        wid = r.headers["location"].rsplit("/", 1)[1]
        page = c.get(r.headers["location"])
        assert page.status_code == 200 and wid in world["drawn"] and ABSTRACT in page.text
        assert c.get("/").headers["location"] == "/coding/" and c.get("/fr/").headers["location"] == "/fr/coding/"
    finally:
        app.state.coding.close()


def test_metacan_serve_coding_starts_the_coding_server_on_a_data_folder_without_a_release(tmp_path):
    data = tmp_path / "data"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "METACAN_DATA_DIR": str(data), "HOME": str(tmp_path)}
    with metacan_serve(env, "--coding", ready="/coding/sign-in") as served:
        form = httpx.get(served.url + "/coding/sign-in", timeout=5)
        assert 'type="password"' in form.text
        for path in ("/works/W7001", "/records/W7001.json", "/api/v1/works", "/statistics", "/export.csv"):
            assert httpx.get(served.url + path, timeout=5).status_code == 404, path
    out = served.output
    assert f"on {served.url}/coding/" in out and str(settings.coding_store_path(str(data))) in out
    assert settings.coding_store_path(str(data)).exists() and not (data / "site").exists()
