"""Acceptance of the served site in headless Chromium: a release built through Dagster, served by uvicorn
on loopback; a cohort built by clicking, its /q/ link followed in a new browser context, its CSV downloaded and
compared with a direct DuckDB query on the release, the French twin, and a work page reached from the keyboard only.

Screenshots go to a folder under the test's tmp path (printed) and, when ``$METACAN_TEST_ARTIFACTS`` is set, are
kept under ``$METACAN_TEST_ARTIFACTS/site_acceptance/``."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest
import uvicorn

from metacan_pipeline.site.build.release import current_release_id, database_path
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline_tests.browser import REPO, PageWatch
from metacan_pipeline_tests.builders.site import CLI, metacan_serve

pytestmark = pytest.mark.browser

ARTIFACTS_ENV = "METACAN_TEST_ARTIFACTS"


@contextmanager
def served(data: Path) -> Iterator[str]:
    """uvicorn serving the site over ``data`` on a free loopback port, in a thread; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(data, rate_limit="off"), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("uvicorn did not start serving the site within 20 s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture()
def screenshots(tmp_path) -> Iterator[Path]:
    folder = tmp_path / "site_acceptance"
    folder.mkdir()
    print(f"\nscreenshots of the site acceptance test: {folder}")
    yield folder
    if os.environ.get(ARTIFACTS_ENV):
        keep = Path(os.environ[ARTIFACTS_ENV]) / "site_acceptance"
        shutil.copytree(folder, keep, dirs_exist_ok=True)
        print(f"kept under {keep}")


def _sql(data: Path, query: str) -> list[tuple]:
    con = duckdb.connect(str(database_path(data, current_release_id(data))), read_only=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _count(page) -> int:
    return int(re.sub(r"\D", "", page.inner_text("#count")))


def test_a_reader_builds_cites_downloads_and_reads_in_both_languages(site_release, browser, screenshots):
    data = Path(site_release[0].root)
    want_ids = {
        r[0] for r in _sql(data, "SELECT id FROM works WHERE ca_aff AND language = 'en' AND field = 'Medicine'")
    }
    assert want_ids
    with served(data) as base:
        reader = browser.new_context(viewport={"width": 1280, "height": 1000}, accept_downloads=True, locale="en-CA")
        page = reader.new_page()
        watch = PageWatch().attach(page)
        failed = []  # every answer >= 400 but the favicon Chromium asks for on its own (the site has none)
        page.on("response", lambda r: failed.append(r.url) if r.status >= 400 and "/favicon.ico" not in r.url else None)
        # the cohort, by clicking: a route in the form, then two facet links
        page.goto(base + "/")
        assert page.locator("html").get_attribute("lang") == "en" and _count(page) == 60
        page.select_option("select[name=ca_aff]", "yes")
        page.get_by_role("button", name="Count and list").click()
        page.wait_for_url(re.compile(r"ca_aff=yes"))
        language = page.locator("section", has=page.get_by_role("heading", name="Language", exact=True))
        language.get_by_role("link", name="English", exact=True).click()
        page.wait_for_url(re.compile(r"language=en"))
        field = page.locator("section", has=page.get_by_role("heading", name="Field", exact=True))
        facet = field.locator("li", has=page.get_by_role("link", name="Medicine", exact=True))
        shown = int(re.sub(r"\D", "", facet.inner_text().split(":")[-1]))
        facet.get_by_role("link", name="Medicine", exact=True).click()
        page.wait_for_url(re.compile(r"field=Medicine"))
        count = _count(page)
        assert count == shown == len(want_ids)
        assert page.locator("select[name=ca_aff]").input_value() == "yes"
        assert "Direct labels cover" in page.inner_text("#coverage")
        page.screenshot(path=str(screenshots / "cohort.png"), full_page=True)
        query_url = page.get_attribute("#query-link", "href")
        assert re.fullmatch(r"/q/[0-9a-f]{12}", query_url)

        # the /q/ link in a browser that has never seen the cohort: the same count, and a citation naming the release
        other = browser.new_context(viewport={"width": 1280, "height": 900})
        cited = other.new_page()
        cited.goto(base + query_url)
        assert _count(cited) == count
        citation = cited.inner_text("#citation")
        assert f"({count} works), release {current_release_id(data)}" in citation and query_url in citation
        cited.screenshot(path=str(screenshots / "query_link.png"), full_page=True)
        other.close()

        # the CSV download holds exactly the cohort's rows
        with page.expect_download() as download:
            page.get_by_role("link", name="CSV", exact=True).click()
        text = Path(download.value.path()).read_text(encoding="utf-8")
        assert text.startswith("id,") and f",{query_url[3:]}," in text  # every row names its cohort
        rows = list(csv.DictReader(io.StringIO(text)))
        assert {row["id"] for row in rows} == want_ids and len(rows) == count
        assert {(row["language"], row["field"]) for row in rows} == {("en", "Medicine")}

        # French: the same cohort, the same count, the interface in French
        page.click("#language-switch")
        page.wait_for_url(re.compile(r"/fr/\?"))
        assert page.locator("html").get_attribute("lang") == "fr" and _count(page) == count
        assert page.get_by_role("button", name="Compter et afficher").is_visible()
        page.screenshot(path=str(screenshots / "cohort_fr.png"), full_page=True)

        # a work page from the keyboard only: Tab to the first listed work, Enter
        first = page.locator("ol.works li a").first
        title, href = first.inner_text(), first.get_attribute("href")
        for _ in range(200):
            page.keyboard.press("Tab")
            if page.evaluate("() => document.activeElement.getAttribute('href')") == href:
                break
        else:
            pytest.fail(f"the work link {href} never took the keyboard focus")
        page.keyboard.press("Enter")
        page.wait_for_url(base + href)
        assert href.startswith("/fr/works/") and page.locator("h1").inner_text() == title
        assert page.locator("html").get_attribute("lang") == "fr"
        assert page.get_by_role("heading", name="Notice bibliographique").is_visible()
        page.screenshot(path=str(screenshots / "work_page_fr.png"), full_page=True)
        reader.close()
    assert failed == [] and watch.page_errors == [], failed + watch.page_errors
    assert all("404" in e for e in watch.console_errors), watch.console_errors  # only the favicon's 404
    assert sorted(p.name for p in screenshots.iterdir()) == [
        "cohort.png",
        "cohort_fr.png",
        "query_link.png",
        "work_page_fr.png",
    ]


# ---- the real frame: `metacan run` on the small real input through the stub teachers, then `metacan serve` ----------


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, openalex_dir):
    """``(data dir, env)`` after `metacan run` (a subprocess, so the registry naming the stub teachers is read when
    the definitions load) over a copy of the small real input, with both teachers on the loopback stub and live
    abstracts from the loopback OpenAlex stub: about a minute on a busy 2-core machine."""
    from metacan_pipeline_tests.builders.openalex import SMALL_INPUT_FILES
    from metacan_pipeline_tests.openalex_stub import StubOpenAlex, real_works
    from metacan_pipeline_tests.stub_teacher.app import DEFAULT_MODEL
    from metacan_pipeline_tests.stub_teacher.process import run_stub

    root = tmp_path_factory.mktemp("real_run")
    (root / "openalex").mkdir()
    for name in SMALL_INPUT_FILES:
        shutil.copy(openalex_dir / name, root / "openalex" / name)
    api = StubOpenAlex(real_works())
    try:
        with run_stub() as (url, _):
            (root / "teachers.toml").write_text(
                "".join(
                    f'[teachers.{name}]\nbase_url = "{url}"\nmodel = "{DEFAULT_MODEL}"\nrecord_view = "{view}"\n'
                    f'coverage = "{coverage}"\nworks_per_call = 5\n\n'
                    for name, view, coverage in (("gemma", "title_only", "all"), ("codex", "title_abstract", "sample"))
                )
            )
            env = {k: v for k, v in os.environ.items() if not k.startswith(("METACAN_", "DAGSTER_"))}
            env.update(
                METACAN_TEACHERS_FILE=str(root / "teachers.toml"),
                METACAN_OPENALEX_API_URL=api.base_url,
                METACAN_DATA_DIR=str(root / "data"),
                METACAN_OPENALEX_DIR=str(root / "openalex"),
                METACAN_REPORT_URL="https://issues.example.org/new",
                PYTHONPATH=str(REPO),
            )
            run = subprocess.run([sys.executable, *CLI, "run"], cwd=REPO, env=env, capture_output=True, text=True)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    finally:
        api.shutdown()
    return root / "data", env


@pytest.mark.slow
def test_metacan_serve_after_metacan_run_shows_the_real_frame_and_its_canadian_authors(real_run, browser, screenshots):
    data, env = real_run
    with duckdb.connect(str(data / "metacan.duckdb"), read_only=True) as con:
        frame = {r[0] for r in con.execute("SELECT id FROM frame").fetchall()}
    assert "W1951724000" in frame
    with metacan_serve(env) as served:
        base = served.url
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        page = context.new_page()
        page.goto(base + "/")
        assert _count(page) == len(frame)
        assert {t for t in re.findall(r"<code>(W\d+)</code>", page.content())} == frame
        page.get_by_role("link", name="Fitting Linear Mixed-Effects Models Using lme4").click()
        page.wait_for_url(re.compile(r"/works/.+/W1951724000\.html$"))
        bolker = page.locator("ul.authors li", has_text="Benjamin M. Bolker")
        assert bolker.get_by_role("link", name="ORCID 0000-0002-2127-0443").get_attribute("href") == (
            "https://orcid.org/0000-0002-2127-0443"
        )
        assert (
            bolker.get_by_role("link", name="McMaster University").get_attribute("href") == "https://ror.org/02fa3aq29"
        )
        assert page.locator("ul.authors li").count() == 2  # Bates (Wisconsin) and Mächler (ETH) are not Canadian
        report = page.get_by_role("link", name="Report a problem with this record")
        assert report.get_attribute("href") == "https://issues.example.org/new?work=W1951724000"
        page.screenshot(path=str(screenshots / "real_work_page.png"), full_page=True)
        page.get_by_role("link", name="Works in the same venue (Journal of Statistical Software)").click()
        page.wait_for_url(re.compile(r"venue=Journal"))
        want = _sql(data, "SELECT count(*) FROM works WHERE venue = 'Journal of Statistical Software'")[0][0]
        assert _count(page) == want == 1
        context.close()
