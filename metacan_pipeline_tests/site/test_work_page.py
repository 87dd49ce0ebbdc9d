"""The served work page's additions on a real release: explore links that open the cohorts of the same venue, topic
and category (counts checked against DuckDB), the "report a problem" link, both in English and French; the abstract
fetched live from the loopback OpenAlex stub, never stored, and "abstract unavailable" when OpenAlex fails (httpx
MockTransport)."""

from __future__ import annotations

import re

import duckdb
import httpx
from markupsafe import escape
from starlette.testclient import TestClient

from metacan_pipeline.openalex.abstract import deinvert, tidy_abstract
from metacan_pipeline.publish.abstracts import AbstractFetcher
from metacan_pipeline.site.build.release import current_release_id, database_path
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.site.web.coding_pages import default_abstracts
from metacan_pipeline_tests.openalex_stub import StubOpenAlex, real_index


def _sql(root, query, params=()):
    con = duckdb.connect(str(database_path(root, current_release_id(root))), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def test_explore_links_open_the_cohorts_of_the_works_venue_topic_and_category(site_release, monkeypatch):
    root = site_release[0].root
    monkeypatch.setenv("METACAN_REPORT_URL", "https://issues.example.org/new?template=record")
    wid, path, venue, topic = _sql(root, "SELECT id, page_path, venue, topic FROM works WHERE id = 'W7006'")[0]
    with TestClient(create_app(root, rate_limit="off")) as c:
        for prefix in ("", "/fr"):
            page = c.get(f"{prefix}/{path}")
            assert page.status_code == 200
            report = re.search(r'<a href="([^"]+)" id="report-problem">([^<]+)</a>', page.text)
            assert report.group(1) == f"https://issues.example.org/new?template=record&amp;work={wid}"
            section = page.text.split('<section aria-labelledby="explore">')[1].split("</section>")[0]
            links = re.findall(r'<a href="([^"]+)">', section)
            assert all(link.startswith(prefix + "/?") for link in links) and len(links) == 3
            venue_page, topic_page, label_page = (c.get(link.replace("&amp;", "&")) for link in links)
            count = lambda r: int(
                re.search(r'id="count">([\d\s\u202f,]+)<', r.text)
                .group(1)
                .replace(",", "")
                .replace("\u202f", "")
                .replace(" ", "")
            )  # noqa: E731
            assert count(venue_page) == _sql(root, "SELECT count(*) FROM works WHERE venue = ?", [venue])[0][0] > 1
            assert count(topic_page) == _sql(root, "SELECT count(*) FROM works WHERE topic = ?", [topic])[0][0] > 1
            want = _sql(
                root,
                "SELECT count(DISTINCT work_key) FROM work_labels WHERE teacher = 'gemma' AND list_contains(categories, 'metaepi_broad')",
            )[0][0]
            assert count(label_page) == want > 0
        assert "Report a problem with this record" in c.get(f"/{path}").text
        assert "Signaler un problème dans cette notice" in c.get(f"/fr/{path}").text
    monkeypatch.delenv("METACAN_REPORT_URL")
    with TestClient(create_app(root, rate_limit="off")) as c:
        assert 'id="report-problem"' not in c.get(f"/{path}").text  # no setting, no link


def _files(root):
    """``{path: (size, mtime_ns)}`` of every file under ``root``."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_served_work_page_shows_the_abstract_fetched_live_from_openalex_and_stores_it_nowhere(site_release):
    root = site_release[0].root
    wid, path = _sql(root, "SELECT id, page_path FROM works WHERE id = 'W7000' AND has_abstract")[0]
    other = _sql(root, "SELECT page_path FROM works WHERE id = 'W7001' AND NOT has_abstract")[0][0]
    index = real_index("W1951724000")  # the lme4 abstract, served by the loopback OpenAlex under this work's id
    text = tidy_abstract(deinvert(index))
    stub = StubOpenAlex({wid: {"id": f"https://openalex.org/{wid}", "abstract_inverted_index": index}})
    before = _files(root)
    app = create_app(root, rate_limit="off", abstracts=AbstractFetcher(stub.base_url, timeout_s=3.0))
    try:
        with TestClient(app) as c:
            en, fr = c.get(f"/{path}"), c.get(f"/fr/{path}")
            none = c.get(f"/{other}")
    finally:
        app.state.site.abstracts.close()
        stub.shutdown()
    for page in (en, fr):
        assert page.status_code == 200 and str(escape(text)) in page.text
    assert "Fetched live from OpenAlex at" in en.text and "Récupéré en direct auprès d'OpenAlex" in fr.text
    # one request for the two languages (the answer is kept in the fetcher's memory), none for a work the frame saw
    # without an abstract: its page says so from the record
    assert [h["filter"] for h in stub.hits] == [f"ids.openalex:{wid}"]
    assert "its record carried no abstract_inverted_index" in none.text
    # nothing written under the data folder but the served site's own stores (the coding pages' and the saved
    # queries' SQLite files, which the app opens, and creates when missing), and the abstract in no file at all
    stores = lambda files: {
        f: v for f, v in files.items() if not f.name.startswith(("coding.sqlite", "queries.sqlite"))
    }  # noqa: E731
    assert stores(_files(root)) == stores(before)
    snippet = text[:60].encode()
    assert not [f for f in root.rglob("*") if f.is_file() and snippet in f.read_bytes()]


def _failing(exc: Exception | None = None, status: int = 503):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        if exc is not None:
            raise exc
        return httpx.Response(status, text="upstream down")

    return httpx.MockTransport(handler), calls


def test_a_work_page_says_the_abstract_is_unavailable_when_openalex_fails_and_still_answers(site_release):
    root = site_release[0].root
    path = _sql(root, "SELECT page_path FROM works WHERE id = 'W7000'")[0][0]
    cases = (
        (None, 503, "HTTP 503 (gave up after 2 attempts)"),
        (httpx.ConnectTimeout("timed out"), 200, "timeout (ConnectTimeout, limit 3 s) (gave up after 2 attempts)"),
        (httpx.ConnectError("connection refused"), 200, "ConnectError: connection refused"),
        (None, 404, "HTTP 404 from OpenAlex /works (not retried)"),
    )
    for exc, status, why in cases:
        transport, calls = _failing(exc, status)
        fetcher = AbstractFetcher(
            "http://openalex.invalid", timeout_s=3.0, max_attempts=2, breaker_after=0, retry_wait_max_s=0,
            transport=transport,
        )  # fmt: skip
        app = create_app(root, rate_limit="off", abstracts=fetcher)
        try:
            with TestClient(app) as c:
                en, fr = c.get(f"/{path}"), c.get(f"/fr/{path}")
        finally:
            app.state.site.abstracts.close()
        assert en.status_code == fr.status_code == 200
        unavailable = re.search(r'<p id="abstract-unavailable"><em>([^<]+)</em></p>', en.text).group(1)
        assert unavailable.startswith("Abstract unavailable: OpenAlex did not answer just now (") and why in unavailable
        assert "Reload this page to try again" in unavailable and "retry_failed_abstracts" not in en.text
        assert "Résumé indisponible : OpenAlex n'a pas répondu" in fr.text
        assert len(calls) == (1 if status == 404 else 2) * 2  # a failure is never cached: the French page asked again


def test_the_served_pages_fetcher_has_short_timeouts_and_no_breaker():
    fetcher = default_abstracts()
    try:
        assert (fetcher.timeout_s, fetcher.max_attempts, fetcher.breaker_after) == (3.0, 2, 0)
        assert fetcher.retry_wait_max_s <= 0.5 and fetcher.retry_after_max_s <= 1.0
    finally:
        fetcher.close()


def test_a_served_app_closes_its_abstract_fetcher_at_shutdown(site_release):
    """The app's lifespan closes the coding store and the live-abstract fetcher, whose event loop has a thread of its
    own: 5 app lifecycles leave no thread behind."""
    import threading

    def loops() -> int:
        return sum(t.name == "abstracts-http" for t in threading.enumerate())

    root = site_release[0].root
    before = loops()
    for _ in range(5):
        with TestClient(create_app(root, rate_limit="off")) as c:
            assert c.get("/api/v1/count").status_code == 200
            assert loops() == before + 1
    assert loops() == before


def test_a_work_with_nothing_to_explore_has_no_explore_section():
    from metacan_pipeline.publish.pages import explore_links

    assert (
        explore_links({"venue": None, "topic": None}, {"kind": "none"}, "") is None
    )  # was an empty list under a heading
    assert explore_links({"venue": "PLOS ONE", "topic": None}, {"kind": "none"}, "/fr") == {
        "venue": "/fr/?venue=PLOS+ONE",
        "topic": None,
        "categories": [],
    }
