"""The home page's trend chart (site/query/trend.py, site/web/trend_view.py, site/web/charts.py): works per year and
per direct-label category for the current filters, every year of the range listed (0 where no work), against counts
made here from the warehouse inputs the release was built from; the chart an SVG with its title, description and
data table; a cohort above the bound is not drawn and says so."""

from __future__ import annotations

import html
import re
from collections import defaultdict

import pytest
from starlette.testclient import TestClient

from metacan_pipeline.site.query import trend
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.vocab import CATEGORY_DISPLAY
from metacan_pipeline_tests.builders.site import site_venue


@pytest.fixture(scope="module")
def client(site_release):
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as c:
        yield c


def _expected(storage, frame, keep) -> tuple[dict[int, int], dict[str, dict[int, int]]]:
    """Works per year, and per category of a labelled direct label (any teacher, each work once), over the frame rows
    ``keep`` accepts, read from the warehouse tables the release was built from."""
    year = {r["id"]: r["publication_year"] for r in frame if keep(r)}
    totals: dict[int, int] = defaultdict(int)
    for y in year.values():
        totals[y] += 1
    labelled: dict[str, set[str]] = defaultdict(set)
    for table in ("direct_labels_gemma", "direct_labels_codex"):
        for label in storage.read_table(table).to_pylist():
            if label["status"] == "labelled" and label["work_id"] in year:
                for c in label["categories"] or []:
                    labelled[c].add(label["work_id"])
    per: dict[str, dict[int, int]] = {}
    for c, ids in labelled.items():
        per[c] = defaultdict(int)
        for i in ids:
            per[c][year[i]] += 1
    return totals, per


def _table(page: str) -> tuple[list[str], list[list[str]]]:
    block = page.split('<section id="trend"')[1].split("</section>")[0]
    header = re.findall(r'<th scope="col">([^<]*)</th>', block)
    rows = [re.findall(r"<t[hd][^>]*>([^<]*)</t[hd]>", r) for r in block.split("<tbody>")[1].split("</tr>")[:-1]]
    return header, rows


def test_the_trend_lists_every_year_of_the_cohort_with_zeros_and_each_category(client, site_release):
    storage, frame, _ = site_release
    page = html.unescape(client.get("/?venue=journal+2").text)
    totals, per = _expected(storage, frame, lambda r: site_venue(int(r["id"][1:]) - 7000) == "Journal 2")
    header, rows = _table(page)
    years = list(range(min(totals), max(totals) + 1))
    assert any(totals.get(y, 0) == 0 for y in years)  # a year without works inside the range: shown as 0
    assert [r[0] for r in rows] == [str(y) for y in years]
    assert [int(r[1]) for r in rows] == [totals.get(y, 0) for y in years]
    categories = [c for c in CATEGORY_DISPLAY if c in per]
    assert categories and header == ["Year", "All works of the cohort", *(CATEGORY_DISPLAY[c] for c in categories)]
    for j, c in enumerate(categories):
        assert [int(r[2 + j]) for r in rows] == [per[c].get(y, 0) for y in years], c
    block = page.split('<section id="trend"')[1].split("</section>")[0]
    assert re.search(r'<svg [^>]*role="img" aria-labelledby="trend-title trend-desc">', block)
    assert (
        '<title id="trend-title">Works per year in this cohort, and per category of their direct labels</title>'
        in block
    )
    peak = max(totals.values())
    assert (
        f"{sum(totals.values())} works of this cohort have a publication year, from {years[0]} to {years[-1]}" in block
    )
    assert f"the most in one year: {peak} in {min(y for y in years if totals.get(y) == peak)}" in block


def test_the_year_filters_set_the_range_and_french_names_the_columns(client, site_release):
    storage, frame, _ = site_release
    page = html.unescape(client.get("/fr/?year_min=2003&year_max=2006").text)
    totals, _ = _expected(storage, frame, lambda r: 2003 <= r["publication_year"] <= 2006)
    header, rows = _table(page)
    assert [r[0] for r in rows] == ["2003", "2004", "2005", "2006"]
    assert [int(r[1]) for r in rows] == [0, 0, totals[2005], totals[2006]]
    assert header[:2] == ["Année", "Toutes les publications de la cohorte"]


def test_a_cohort_above_the_bound_is_not_drawn_and_says_so(client, monkeypatch):
    monkeypatch.setattr(trend, "TREND_MAX_WORKS", 10)
    page = html.unescape(client.get("/").text)
    block = page.split('<section id="trend"')[1].split("</section>")[0]
    assert "The trend is drawn for cohorts of at most 10 works; this one holds 60. Add a filter to see it." in block
    assert "<svg" not in block


def test_a_word_search_has_its_trend_too(client):
    works = client.get("/api/v1/works?q=integrity&limit=100").json()["works"]
    by_year: dict[int, int] = defaultdict(int)
    for w in works:
        by_year[w["year"]] += 1
    _, rows = _table(html.unescape(client.get("/?q=integrity").text))
    years = list(range(min(by_year), max(by_year) + 1))
    assert works and [(int(r[0]), int(r[1])) for r in rows] == [(y, by_year.get(y, 0)) for y in years]
