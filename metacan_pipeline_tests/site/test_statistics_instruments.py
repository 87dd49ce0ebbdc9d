"""The original protocol's instruments ii and iii on the statistics page (metacan_pipeline/site/web/statistics.py):
planted ``filter_recall`` and ``venue_known_item_recall`` rows go through the release build (site/build/figures.py)
to the page in English and French, each section marked for what it is, "no reference yet" rows shown as such; a
release built before either asset ran says it did not run; the works per release layer have their section."""

from __future__ import annotations

import html
import re

import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.audit.instruments.recall import (
    FILTER_RECALL_MEANS,
    KNOWN_ITEM_MEANS,
    NO_POSITIVES,
    NO_REFERENCE,
    NON_PROBABILITY,
)
from metacan_pipeline.site.web import statistics
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.audit import FILTER_RECALL_SCHEMA, VENUE_RECALL_SCHEMA
from metacan_pipeline_tests.builders.site import build_site, site_venue, site_world

RUN = {"run_id": "run-1", "computed_at": None}


def recall_row(source, name, category, n, kept, recall=None, lower=None, upper=None, note=None) -> dict:
    return {
        "reference_source": source,
        "filter_name": name,
        "filter_kind": name.split(":")[0],
        "filter_definition": f"the work has the {name.split(':')[1]} route",
        "category": category,
        "n": n,
        "kept": kept,
        "dropped": n - kept,
        "recall": recall,
        "lower": lower,
        "upper": upper,
        "interval_method": "clopper-pearson",
        "note": note,
        **RUN,
    }


FILTER_ROWS = [
    recall_row("teacher:codex", "route:ca_aff", "metaresearch", 40, 30, 0.75, 0.588, 0.873),
    recall_row("human", "route:ca_fund", "metaresearch", 0, 0, note=NO_POSITIVES),
    recall_row("none", "route:ca_venue", "metaresearch", 0, 0, note=NO_REFERENCE),
    recall_row("teacher:codex", "route:ca_aff", "sts", 9, 2, 2 / 9, 0.028, 0.6),  # another category: API only
]


def venue_row(system, group_by, group, works, n, detected, recall=None, lower=None, upper=None) -> dict:
    return {
        "venue_list_version": "venues-v1",
        "venue_list_sha256": "ab" * 32,
        "system": system,
        "category": "metaresearch",
        "group_by": group_by,
        "group": group,
        "reference_works": works,
        "n": n,
        "detected": detected,
        "missed": n - detected,
        "undecided": works - n,
        "recall": recall,
        "lower": lower,
        "upper": upper,
        "interval_method": "clopper-pearson",
        "estimate_kind": "known_item_non_probability",
        "note": NON_PROBABILITY,
        **RUN,
    }


VENUE_ROWS = [
    venue_row("candidate", "all", "all", 12, 10, 4, 0.4, 0.1216, 0.7376),
    venue_row("consensus", "language", "fr", 3, 0, 0),
    venue_row("candidate", "venue", "Scientometrics", 5, 5, 2, 0.4, 0.05, 0.85),  # per venue: API only
    # reference venues named as the venue list names them: the release's "Journal 1" and "JOURNAL 1", "Revue de Montréal"
    venue_row("candidate", "venue", "journal 1", 10, 8, 3, 0.375, 0.085, 0.755),
    venue_row("consensus", "venue", "journal 1", 10, 0, 0),
    venue_row("candidate", "venue", "Revue de Montreal", 10, 0, 0),
    venue_row("candidate", "venue", "Venue without frame works", 0, 0, 0),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("instruments") / "data"))
    site_world(storage, openalex_dir)
    storage.write_table("filter_recall", pa.Table.from_pylist(FILTER_ROWS, schema=FILTER_RECALL_SCHEMA))
    storage.write_table("venue_known_item_recall", pa.Table.from_pylist(VENUE_ROWS, schema=VENUE_RECALL_SCHEMA))
    assert build_site(storage).success
    with TestClient(create_app(storage.root, rate_limit="off")) as client:
        yield client


def section(page: str, fid: str) -> str:
    """A figure's section, its glossary links (a term's first use on the page) read as their words."""
    block = page.split(f'<section id="{fid}"')[1].split("</section>")[0]
    return html.unescape(re.sub(r'<a class="term" href="[^"]*" title="[^"]*">([^<]*)</a>', r"\1", block))


def cells(block: str) -> list[list[str]]:
    rows = block.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")[:-1]
    return [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r) for r in rows]


def test_each_instrument_has_its_section_marked_for_what_it_is(served):
    page = served.get("/statistics").text
    ii, iii = section(page, "filter-recall"), section(page, "venue-known-item-recall")
    pct = lambda x: statistics.percent(x, "en")  # noqa: E731
    assert "Instrument ii: the recall of each filter against qualified labels and human codes" in ii
    assert "2 filters against 2 references" in ii and "not a design-based estimate" in ii
    assert FILTER_RECALL_MEANS in ii and "The original protocol, section 6.1" in ii
    codex = ["route:ca_aff", "direct labels of codex (qualified)", "30 / 40", pct(0.75), f"{pct(0.588)} – {pct(0.873)}"]
    assert cells(ii) == [  # in the table's key order: reference, then filter
        ["route:ca_fund", "adjudicated human codes", "0 / 0", "no reference yet", "", NO_POSITIVES],
        ["route:ca_venue", "no reference yet", "0 / 0", "no reference yet", "", NO_REFERENCE],
        [*codex, ""],
    ]
    assert "<svg" in ii and "route:ca_aff (direct labels of codex (qualified))" in ii  # the interval chart
    assert "Instrument iii: known-item recall on the venue reference set (a non-probability bound)" in iii
    assert "frame works published in the pinned meta-research venues (list venues-v1): 12." in iii
    assert "kept apart from the design-based estimates" in iii and KNOWN_ITEM_MEANS in iii
    assert cells(iii) == [
        ["candidate", "all", "12", "4 / 10", pct(0.4), f"{pct(0.1216)} – {pct(0.7376)}", NON_PROBABILITY],
        ["consensus", "language: French", "3", "0 / 0", "no reference yet", "", NON_PROBABILITY],
    ]
    api = served.get("/api/v1/statistics").json()
    assert [r["category"] for r in api["filter_recall"]] == ["metaresearch", "metaresearch", "metaresearch", "sts"]
    assert "run_id" not in api["filter_recall"][0]
    assert {r["group_by"] for r in api["venue_known_item_recall"]} == {"all", "language", "venue"}
    assert api["release_layers"] == [
        {"layer": "human_verified", "works": 0},
        {"layer": "high_precision", "works": 0},
        {"layer": "provisional", "works": 53},
        {"layer": "contested", "works": 7},
    ]
    layers = section(page, "release-layers")
    assert "0 human-verified, 0 high-precision, 53 provisional and 7 contested, of 60 works" in layers


def test_the_french_sections_are_french_and_no_reference_yet_is_said_so(served):
    page = served.get("/fr/statistics").text
    ii, iii = section(page, "filter-recall"), section(page, "venue-known-item-recall")
    assert "Instrument ii : le rappel de chaque filtre contre les étiquettes qualifiées et les codes humains" in ii
    assert "pas encore de référence" in ii and "codes humains arbitrés" in ii
    assert "Le protocole d'origine, section 6.1" in ii and "aucun positif de référence dans cette catégorie" in ii
    assert "une borne non probabiliste" in iii and "langue : français" in iii.replace("\u202f", " ").replace(
        "\xa0", " "
    )
    assert "Strates de diffusion : chaque publication dans exactement une" in section(page, "release-layers")


def test_a_release_built_before_the_instruments_ran_says_so():
    stats = {
        "frame_by_year": [],
        "route_overlaps": [],
        "by_field": [],
        "by_language": [],
        "labels_by_teacher": [],
        "labels_by_category": [],
        "labels_by_study_design": [],
        "decisions_by_category": [],
        "prevalence": [],
    }
    figures = {f["id"]: f for f in statistics.view(stats, "en")}
    assert "release-layers" not in figures  # a release of an earlier layout has no layer to count
    for fid, asset in (("filter-recall", "filter_recall"), ("venue-known-item-recall", "venue_known_item_recall")):
        assert figures[fid]["summary"].startswith(f"The asset {asset} was not materialized")
        assert figures[fid]["rows"] == [[asset, "not run"]]
    only_none = [recall_row("none", "route:ca_aff", "metaresearch", 0, 0, note=NO_REFERENCE)]
    fig = {f["id"]: f for f in statistics.view({**stats, "filter_recall": only_none}, "fr")}["filter-recall"]
    assert fig["summary"].startswith("Instrument ii du protocole d'origine : pas encore de référence.")
    assert fig["intervals"] == []


def test_the_page_quotes_the_protocol_as_the_pipeline_does():
    assert statistics.FILTER_RECALL_MEANS == FILTER_RECALL_MEANS
    assert statistics.KNOWN_ITEM_MEANS == KNOWN_ITEM_MEANS
    assert {NO_REFERENCE, NO_POSITIVES, NON_PROBABILITY} <= set(statistics.INSTRUMENT_NOTES)


def _release_ids(venue_folded: str) -> list[str]:
    """The site world's works in a venue (builders.site.site_venue), compared case- and accent-insensitively."""
    fold = lambda v: v.lower().replace("é", "e")  # noqa: E731
    return sorted(f"W{7000 + i}" for i in range(60) if fold(site_venue(i)) == venue_folded)


@pytest.mark.parametrize("lang", ["en", "fr"])
def test_instrument_iii_names_its_reference_works_with_links(served, lang):
    prefix = "" if lang == "en" else "/fr"
    iii = section(served.get(f"{prefix}/statistics").text, "venue-known-item-recall")
    assert ("The reference works: the release's works in the pinned venues" if lang == "en" else
            "Les publications de référence : les publications de l'édition dans les lieux de publication épinglés") in iii  # fmt: skip
    items = re.findall(r"<li>(.*?)</li>", iii.split('<ul class="reference-works">')[1].split("</ul>")[0])
    venues = [re.match(r'<a href="([^"]+)">([^<]+)</a>', i).groups() for i in items]
    assert venues == [
        (f"{prefix}/?venue=Revue+de+Montreal", "Revue de Montreal"),
        (f"{prefix}/?venue=Scientometrics", "Scientometrics"),
        (f"{prefix}/?venue=journal+1", "journal 1"),
    ]
    for item, folded in zip(items, ("revue de montreal", None, "journal 1"), strict=True):
        want = _release_ids(folded) if folded else []
        assert re.findall(r"<code>(W\d+)</code>", item) == want[: statistics.REFERENCE_WORKS_SHOWN]
        assert (
            re.findall(r'<a href="[^"]*/works/[^"]+/(W\d+)\.html">', item) == want[: statistics.REFERENCE_WORKS_SHOWN]
        )
    assert len(_release_ids("journal 1")) == 10 and "Venue without frame works" not in iii
    # the venue's link opens the cohort of exactly those works
    count = served.get("/api/v1/count?venue=journal+1").json()["count"]
    assert count == len(_release_ids("journal 1"))


def test_more_reference_works_than_shown_are_counted_and_linked(served, monkeypatch):
    monkeypatch.setattr(statistics, "REFERENCE_WORKS_SHOWN", 3)
    con = served.app.state.site.release.cursor()
    try:
        (journal,) = statistics.reference_works(con, ["journal 1"])
    finally:
        con.close()
    assert journal["count"] == 10 and [w["id"] for w in journal["works"]] == _release_ids("journal 1")[:3]
    env = served.app.state.site.envs["en"]
    page = env.get_template("statistics.html.j2").render(
        figures=[{"id": "venue-known-item-recall", "title": "t", "summary": "", "bars": [], "rows": []}],
        reference=[journal], prefix="", url=statistics.url_with, release=served.app.state.site.info, lang="en",
        alternates=[], switch={"href": "/fr/", "lang": "fr", "name": "Français"},
    )  # fmt: skip
    assert '<a href="/?venue=journal+1">and 7 more</a>' in page
