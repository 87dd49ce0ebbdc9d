"""The author page and the network reached and used from the keyboard only, in headless Chromium, on the people
world's release (builders.people) served by uvicorn on loopback."""

from __future__ import annotations

import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline_tests.builders.people import people_world
from metacan_pipeline_tests.builders.site import build_site
from metacan_pipeline_tests.site.test_site_browser import served

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def people_data(tmp_path_factory, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("people_browser") / "data"))
    people_world(storage, openalex_dir)
    assert build_site(storage).success
    return storage.root


def _tab_to(page, selector: str, most: int = 80) -> None:
    """Press Tab until the element ``selector`` has the focus; fail after ``most`` presses."""
    for _ in range(most):
        page.keyboard.press("Tab")
        if page.evaluate(f"document.activeElement === document.querySelector({selector!r})"):
            return
    pytest.fail(f"{selector} never took the keyboard focus")


def test_from_the_network_to_an_author_page_and_a_collaborator_by_keyboard(people_data, browser):
    with served(people_data) as base:
        page = browser.new_page()
        page.goto(base + "/network")
        # the skip link comes first and takes the focus to the network's data tables
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.getAttribute('href')") == "#network-data"
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.id") == "network-data"
        # a node of the drawing is a link: Tab to Ada's and follow it
        _tab_to(page, 'svg a[href="/authors/A100"]')
        page.keyboard.press("Enter")
        page.wait_for_url(base + "/authors/A100")
        assert page.locator("h1").inner_text() == "Ada Lovelace"
        _tab_to(page, 'td a[href="/authors/A200"]')
        page.keyboard.press("Enter")
        page.wait_for_url(base + "/authors/A200")
        assert page.locator("h1").inner_text() == "Jean Tremblay"
        page.close()


def test_the_author_box_offers_ids_for_a_typed_name(people_data, browser):
    with served(people_data) as base:
        page = browser.new_page()
        page.goto(base + "/")
        page.locator('input[name="author"]').press_sequentially("trembl", delay=20)
        option = page.locator('#suggest-author option[value="A200"]')
        option.wait_for(state="attached", timeout=5000)
        assert option.get_attribute("label") == "Jean Tremblay (20)"
        page.locator('input[name="author"]').fill("A200")
        page.locator('input[name="author"]').press("Enter")
        page.wait_for_url(lambda url: "author=A200" in url)
        assert page.locator(".count").first.inner_text().startswith("20")
        page.close()
