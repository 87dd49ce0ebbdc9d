"""Forgiving search in headless Chromium: the site served by uvicorn on loopback over the site world's release; a
venue typed in lower case (with a suggestion offered as it is typed), two venues in one box (OR) and an institution
left out (NOT) give the count DuckDB gives; its CSV (read by pandas with its defaults), RIS and BibTeX downloads hold
every work of it, and its French twin, reached through the language switch, says no interface sentence in English;
the first result is reached in at most 3 Tab presses through the skip
link; at 390 px wide no page scrolls sideways. Screenshots at 1,280 and 390 px go to a folder under the test's tmp
path (printed) and, when ``$METACAN_TEST_ARTIFACTS`` is set, are kept under ``$METACAN_TEST_ARTIFACTS/site_search/``."""

from __future__ import annotations

import io
import os
import re
import shutil
import unicodedata
from pathlib import Path

import bibtexparser
import duckdb
import pandas as pd
import pytest
import rispy
from starlette.testclient import TestClient

from metacan_pipeline.site.build.release import current_release_id, database_path
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline_tests.browser import PageWatch
from metacan_pipeline_tests.site.french import english_left
from metacan_pipeline_tests.site.test_site_browser import served

pytestmark = pytest.mark.browser


def _fold(value: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", value) if not unicodedata.combining(c)).lower()


def _sql(data: Path, query: str) -> list[tuple]:
    con = duckdb.connect(str(database_path(data, current_release_id(data))), read_only=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _count(page) -> int:
    return int(re.sub(r"\D", "", page.inner_text("#count")))


def _no_sideways_scroll(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= document.documentElement.clientWidth")


@pytest.fixture()
def shots(tmp_path):
    folder = tmp_path / "site_search"
    folder.mkdir()
    print(f"\nscreenshots of the forgiving search test: {folder}")
    yield folder
    if os.environ.get("METACAN_TEST_ARTIFACTS"):
        keep = Path(os.environ["METACAN_TEST_ARTIFACTS"]) / "site_search"
        shutil.copytree(folder, keep, dirs_exist_ok=True)


def test_a_reader_types_lower_case_uses_or_and_not_and_reaches_the_first_result_in_three_tabs(
    site_release, browser, shots
):
    data = Path(site_release[0].root)
    # the works the form's filters name, read from the release and folded here
    venues = {"journal 1", "revue de montreal"}
    left_out = {k for (k,) in _sql(data, "SELECT work_key FROM work_institutions WHERE name = 'McGill University'")}
    want = {
        k
        for k, venue, language in _sql(data, "SELECT work_key, venue, language FROM works")
        if venue and _fold(venue) in venues and language == "fr" and k not in left_out
    }
    assert want
    with served(data) as base:
        context = browser.new_context(viewport={"width": 1280, "height": 1000}, locale="en-CA")
        page = context.new_page()
        watch = PageWatch().attach(page)
        failed = []
        page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
        page.goto(base + "/")
        venue = page.locator('input[name="venue"]')
        with page.expect_response(lambda r: "/api/v1/suggest?" in r.url and "prefix=revue" in r.url):
            venue.press_sequentially("journal 1|revue", delay=20)
        page.wait_for_function("document.querySelectorAll('#suggest-venue option').length > 0")
        offered = page.eval_on_selector_all("#suggest-venue option", "els => els.map(e => e.value)")
        assert offered == ["journal 1|Revue de Montréal"]  # the last value completed, the first one kept
        venue.fill("journal 1|revue de montreal")
        page.locator('input[name="not_institution"]').fill("mcgill university")
        language = page.locator('select[name="language"]')
        fr = _sql(data, "SELECT count(*) FROM works WHERE language = 'fr'")[0][0]
        assert language.locator("option", has_text=f"French ({fr})").count() == 1
        language.select_option("fr")
        page.get_by_role("button", name="Count and list").click()
        page.wait_for_url(re.compile(r"not_institution=mcgill"))
        assert _count(page) == len(want)
        listed = page.locator("ol.works > li").count()
        assert listed == min(len(want), 20)
        page.screenshot(path=str(shots / "search_1280.png"), full_page=True)

        # the cohort's downloads, as a reader's tools read them: CSV with pandas' defaults, RIS, BibTeX
        got = {}
        for name in ("CSV", "RIS", "BibTeX"):
            with page.expect_download() as download:
                page.get_by_role("link", name=name, exact=True).click()
            got[name] = download.value.path().read_text(encoding="utf-8")
        frame = pd.read_csv(io.StringIO(got["CSV"]))
        ids = {i for k, i in _sql(data, "SELECT work_key, id FROM works") if k in want}
        assert len(frame) == len(want) and {str(i).rsplit("/", 1)[-1] for i in frame["id"]} == ids
        assert len(rispy.loads(got["RIS"])) == len(want)
        assert len(bibtexparser.parse_string(got["BibTeX"]).entries) == len(want)

        # the same cohort in French, through the page's language switch: no interface sentence left in English
        page.get_by_role("link", name="Français", exact=True).click()
        page.wait_for_url(re.compile(r"/fr/\?"))
        assert _count(page) == len(want)
        path = page.url.removeprefix(base).removeprefix("/fr")
        with TestClient(create_app(data, rate_limit="off")) as client:
            assert english_left(client, [path]) == []
        page.screenshot(path=str(shots / "search_1280_fr.png"), full_page=True)

        # from the top of the page: Tab to the skip link, Enter, Tab to the first result
        page.reload()
        first = page.locator("ol.works li a").first.get_attribute("href")
        presses = 0
        page.keyboard.press("Tab")
        presses += 1
        assert page.evaluate("() => document.activeElement.className") == "skip"
        assert page.locator("a.skip").is_visible()  # shown once it has the focus
        page.keyboard.press("Enter")
        for _ in range(2):
            page.keyboard.press("Tab")
            presses += 1
            if page.evaluate("() => document.activeElement.getAttribute('href')") == first:
                break
        assert page.evaluate("() => document.activeElement.getAttribute('href')") == first and presses <= 3

        # a value no work holds: the page offers the nearest one, and following it counts it
        page.goto(base + "/?venue=revue+de+montrel")
        assert _count(page) == 0
        page.locator("#did-you-mean").get_by_role("link", name="Revue de Montréal").click()
        page.wait_for_url(re.compile(r"venue=Revue"))
        assert _count(page) == _sql(data, "SELECT count(*) FROM works WHERE venue = 'Revue de Montréal'")[0][0]
        context.close()

        # 390 px wide: no page scrolls sideways (a wide table scrolls inside itself)
        narrow = browser.new_context(viewport={"width": 390, "height": 844}, locale="en-CA")
        page = narrow.new_page()
        page.goto(base + "/?venue=journal+1%7Crevue+de+montreal&not_institution=mcgill+university&language=fr")
        assert _count(page) == len(want) and _no_sideways_scroll(page)
        page.screenshot(path=str(shots / "search_390.png"), full_page=True)
        page.goto(base + "/fr/?venue=journal+1")
        assert _no_sideways_scroll(page)
        page.screenshot(path=str(shots / "search_390_fr.png"), full_page=True)
        work = page.locator("ol.works li a").first.get_attribute("href")
        for path in (work, "/dossier", "/statistics", "/api/v1/docs"):
            page.goto(base + path)
            assert _no_sideways_scroll(page), path
        page.screenshot(path=str(shots / "dossier_390.png"), full_page=True)
        narrow.close()
    assert failed == [] and watch.page_errors == [], failed + watch.page_errors
