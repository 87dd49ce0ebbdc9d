"""Tests of the statistics page, the disagreement dossier, the facet typeahead and the Parquet export
(metacan_pipeline/site/web/statistics.py, dossier.py, typeahead.py, export.py; site/build/figures.py) on a real release built
through Dagster from the site world, with the real ``prevalence`` asset and codex labels that disagree with gemma's
on three works; every count checked against a direct DuckDB query on the same release."""

from __future__ import annotations

import html
import io
import json
import re
from itertools import combinations

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.site.build.release import current_release_id, releases_dir
from metacan_pipeline.site.web import export
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.site.web.dossier import HEADS
from metacan_pipeline.site.web.openapi import API_ROUTES
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline_tests.builders.common import XSS
from metacan_pipeline_tests.builders.site import site_world

INJECTIONS = ("' OR 1=1 --", "'; DROP TABLE works; --", "%", "_", "<script>alert(1)</script>")


@pytest.fixture(scope="module")
def world(tmp_path_factory, openalex_dir):
    """``(storage, client)``: the site world, codex disagreeing with gemma on W7015 (metaresearch), W7030
    (insufficient_payload) and W7045 (study design, a reason carrying XSS), a sample design, the real ``prevalence``
    asset, then ``work_records`` and ``site_database``."""
    from metacan_pipeline.publish.assets import work_records
    from metacan_pipeline.publish.checks import records_may_ship
    from metacan_pipeline.site.assets import site_database
    from metacan_pipeline.student.assets import prevalence

    storage = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("stats") / "data"))
    frame = site_world(storage, openalex_dir)
    codex = storage.read_table("direct_labels_codex").to_pylist()
    for label in codex:
        if label["work_id"] == "W7015":
            label.update(categories=["metaresearch"], domain="methods", reason="codex: it audits trials")
        elif label["work_id"] == "W7030":
            label.update(categories=["insufficient_payload"], domain=None, reason="codex: too little to judge")
        elif label["work_id"] == "W7045":
            label.update(study_design="qualitative", reason=f"codex: interviews {XSS}")
    storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    sample = [
        {"id": r["id"], "stratum": "all", "in_sample": i % 5 == 0, "pi": 0.2, "design_weight": 5.0}
        for i, r in enumerate(frame)
    ]
    storage.write_table("sample_design", pa.Table.from_pylist(sample))
    result = dg.materialize(
        [prevalence, work_records, records_may_ship, site_database],
        resources={"storage": storage},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert result.success
    with TestClient(create_app(storage.root, rate_limit="off", row_cap=25)) as client:
        yield storage, client


def _sql(storage, query, params=()):
    con = duckdb.connect(str(releases_dir(storage.root) / f"{current_release_id(storage.root)}.duckdb"), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def _main(html: str) -> str:
    return html.split("<main>")[1].split("</main>")[0]


# ---- statistics -----------------------------------------------------------------------------------------------


def test_the_statistics_page_gives_every_figure_a_summary_an_svg_chart_and_a_data_table(world):
    storage, client = world
    r = client.get("/statistics")
    assert r.status_code == 200 and "script-src" not in r.headers["content-security-policy"]
    main = _main(r.text)
    assert "<script" not in main
    sections = re.findall(r'<section id="([a-z-]+)".*?</section>', main, flags=re.S)
    assert sections[:3] == ["frame-by-year", "abstract-gap", "route-overlaps"] and "prevalence" in sections
    for body in re.findall(r"<section id=.*?</section>", main, flags=re.S):
        assert '<p class="summary">' in body and "<table>" in body
        if "<svg" in body:
            assert re.search(r"<svg[^>]*role=\"img\"[^>]*aria-labelledby=", body) and "<title" in body
            assert "<desc" in body
    # the year table against the release itself: works and the affiliation-blind share per year
    by_year = _sql(
        storage,
        "SELECT year, count(*), count(*) FILTER (WHERE invisible_to_affiliation_only) FROM works GROUP BY 1 ORDER BY 1",
    )
    year_table = main.split('id="frame-by-year"')[1].split("</table>")[0]
    rows = re.findall(r'<tr><th scope="row">(\d+)</th><td>(\d+)</td><td>(\d+)</td>', year_table)
    assert [(int(y), int(n), int(b)) for y, n, b in rows] == by_year
    n, blind = _sql(storage, "SELECT count(*), count(*) FILTER (WHERE invisible_to_affiliation_only) FROM works")[0]
    assert f"{n} works from 2005 to 2024; {blind} of them ({100 * blind / n:.1f}%)" in main
    # every direct-label category says its source and status; decisions say theirs
    labels = main.split('id="labels-by-category"')[1].split("</section>")[0]
    assert labels.count("direct label (gemma, direct_label_unvalidated; teacher not qualified") >= 1
    decisions = main.split('id="decisions-by-category"')[1].split("</section>")[0]
    assert "candidate prediction (metacan-v0-hybrid-000000000000, machine_predicted_unvalidated)" in decisions
    assert client.get("/statistics", params={"year_min": "2020"}).status_code == 400


def test_the_statistics_api_agrees_with_the_release_and_the_prevalence_table(world):
    storage, client = world
    body = client.get("/api/v1/statistics").json()
    assert body["release_id"] == current_release_id(storage.root)
    assert sum(r["works"] for r in body["route_overlaps"]) == body["n_works"] == 60
    want = _sql(
        storage,
        "SELECT ca_aff, ca_fund, ca_venue, about_ca, count(*) FROM works GROUP BY ALL ORDER BY 5 DESC, 1, 2, 3, 4",
    )
    assert [
        (r["ca_aff"], r["ca_fund"], r["ca_venue"], r["about_ca"], r["works"]) for r in body["route_overlaps"]
    ] == want
    assert {r["value"]: r["works"] for r in body["by_language"]} == dict(
        _sql(storage, "SELECT language, count(*) FROM works GROUP BY 1")
    )
    cats = _sql(
        storage,
        "SELECT teacher, c, count(*) FROM (SELECT teacher, unnest(categories) c FROM work_labels WHERE status = "
        "'labelled') GROUP BY 1, 2",
    )
    assert {(r["teacher"], r["category"]): r["works"] for r in body["labels_by_category"]} == {
        (t, c): n for t, c, n in cats
    }
    assert all(r["source"] == "direct_label" and r["label_status"] for r in body["labels_by_category"])
    pipeline = storage.read_table("prevalence").to_pylist()
    assert body["prevalence"] == pipeline and any(r["method"] == "screener_swap_range" for r in pipeline)
    swap = next(r for r in pipeline if r["method"] == "screener_swap_range" and r["category"] == "metaresearch")
    page = client.get("/statistics").text
    assert "screener-swap range (lowest to highest teacher rate)" in page
    assert f"{100 * swap['ci_low']:.1f}% – {100 * swap['ci_high']:.1f}%" in page
    # gemma covers every frame work: its rates are a census, intervals of zero width, explained beside them
    census = next(r for r in pipeline if r["teacher"] == "gemma" and r["category"] == "metaresearch")
    assert census["design"] == "census of the frame" and census["ci_low"] == census["ci_high"] == census["rate"]
    assert "A census has no sampling error: the interval of a census rate is the rate itself." in page


def test_the_estimands_figure_defines_each_estimand_and_shows_its_rates(world):
    storage, client = world
    # gemma labels every release work: its primary rate is the share of its labelled works (insufficient_payload has
    # no metaresearch value) that are metaresearch with a Canadian affiliation or funder, counted on the release
    positives, known = _sql(
        storage,
        "SELECT count(*) FILTER (WHERE list_contains(l.categories, 'metaresearch') AND (w.ca_aff OR w.ca_fund)), "
        "count(*) FROM work_labels l JOIN works w USING (work_key) WHERE l.teacher = 'gemma' AND l.status = 'labelled' "
        "AND NOT list_contains(l.categories, 'insufficient_payload')",
    )[0]
    body = client.get("/api/v1/statistics").json()
    primary = next(
        r
        for r in body["prevalence"]
        if r["estimand"] == "primary" and r["teacher"] == "gemma" and r["method"] == "design_weighted_teacher_rate"
    )
    assert positives > 0 and (primary["n"], primary["rate"]) == (known, positives / known)
    assert [e["estimand"] for e in body["estimands"]] == [
        "category",
        "primary",
        "primary_ca_aff",
        "primary_ca_fund",
        "secondary",
        "alt1_strict",
        "alt2_broad",
    ]
    assert all(e["definition"].endswith(".") for e in body["estimands"])
    assert body["ca_person"].startswith("CA-PERSON not measured")
    main = _main(client.get("/statistics").text)
    section = main.split('<section id="estimands"')[1].split("</section>")[0]
    assert (
        "<dt>Primary: Canadian-produced metaresearch</dt><dd>Works in scope (metaresearch) with a Canadian" in section
    )
    assert section.count("<dt>") == 6 and "ALT-2 (broad)" in section and "CA-PERSON is not measured" in section
    assert (
        f"Primary: Canadian-produced metaresearch: gemma estimates {100 * positives / known:.1f}% of the frame"
        in section
    )
    # the headline's teacher is not qualified here (not tested yet): the sentence after the rate says what it is worth
    unqualified = (
        "gemma is not qualified (teacher not qualified: not tested yet): its labels decide nothing, and its rates are "
        "machine outputs to read, not estimates to cite."
    )
    assert unqualified in html.unescape(section)
    # the per-category figure keeps the category rates only
    prevalence = main.split('<section id="prevalence"')[1].split("</section>")[0]
    assert "gemma is not qualified" in html.unescape(prevalence)
    assert "Canadian-produced" not in prevalence and "CA-PERSON" not in prevalence
    fr = _main(client.get("/fr/statistics").text).replace("&#39;", "'")
    section = fr.split('<section id="estimands"')[1].split("</section>")[0]
    assert (
        "Les estimands du protocole" in section and "<dt>Principal : métarecherche produite au Canada</dt>" in section
    )
    assert "CA-PERSON n'est pas mesuré" in section and "Works in scope" not in section
    assert "gemma n'est pas qualifié (annotateur non qualifié\u00a0: pas encore testé)" in html.unescape(section)


def test_the_french_statistics_page_is_french_with_data_values_verbatim(world):
    _, client = world
    r = client.get("/fr/statistics")
    assert r.status_code == 200 and '<html lang="fr">' in r.text
    main = _main(r.text)
    assert "Statistiques de l'édition" in main and "Statistics of the release" not in main
    assert "direct_label_unvalidated" in main and "machine_predicted_unvalidated" in main
    assert "Un recensement n'a pas d'erreur d'échantillonnage" in main.replace("&#39;", "'")


# ---- the disagreement dossier ---------------------------------------------------------------------------------


def test_the_dossier_shows_every_teachers_verdict_and_reason_and_counts_per_pair(world):
    storage, client = world
    r = client.get("/dossier")
    assert r.status_code == 200
    main = _main(r.text)
    assert re.findall(r'<article id="(W\d+)">', main) == ["W7015", "W7030", "W7045"]
    assert "codex: it audits trials" in main and "codex: interviews &lt;script&gt;" in main
    assert "<script>alert" not in main and main.count("because &lt;script&gt;") >= 3  # gemma's reasons
    w15 = main.split('<article id="W7015">')[1].split("</article>")[0]
    # methods vs not_metaresearch; heads by their names
    assert "codex vs gemma differ on: Metaresearch, Domain, Set of categories" in w15
    status = (  # the status verbatim, linked to its explanation, its display name as the link's title
        '<a class="status" href="/methods#status-direct_label_unvalidated" title="direct label, not validated by a '
        'human"><code>direct_label_unvalidated</code></a>'
    )
    assert f"direct label</span> codex ({status}; teacher not qualified" in w15
    compared = _sql(
        storage,
        "SELECT count(*) FROM work_labels a JOIN work_labels b USING (work_key) WHERE a.teacher = 'codex' AND "
        "b.teacher = 'gemma' AND a.status = 'labelled' AND b.status = 'labelled'",
    )[0][0]
    api = client.get("/api/v1/dossier").json()
    assert api["pairs"] == [
        {
            "pair": "codex vs gemma",
            "compared": compared,
            "disagree": 3,
            "heads": {"category_set": 2, "metaresearch": 1, "domain": 1, "insufficient_payload": 1, "study_design": 1},
        }
    ]
    w30 = next(w for w in api["works"] if w["id"] == "W7030")
    assert w30["pairs"] == [{"pair": "codex vs gemma", "heads": ["insufficient_payload", "category_set"]}]
    assert [v["teacher"] for v in w30["verdicts"]] == ["codex", "gemma"]
    assert w30["verdicts"][0]["categories"] == ["insufficient_payload"] and w30["verdicts"][0]["label_status"]


def test_the_dossier_is_filtered_like_a_cohort_and_by_pair_and_head(world):
    storage, client = world
    want = _sql(
        storage,
        "SELECT count(DISTINCT d.work_key) FROM work_disagreements d JOIN works w USING (work_key) "
        "WHERE w.language = 'en'",
    )[0][0]
    en = client.get("/api/v1/dossier", params={"language": "en"}).json()
    assert en["count"] == want == len(en["works"]) and en["filters"] == {"language": "en"}
    assert client.get("/api/v1/dossier", params={"head": "study_design"}).json()["count"] == 1
    design = client.get("/dossier", params={"head": "study_design", "pair": "codex vs gemma"})
    assert re.findall(r'<article id="(W\d+)">', design.text) == ["W7045"]
    # one work a page: the next links reach every disagreement once
    seen, url = [], "/dossier?limit=1"
    while url:
        page = client.get(url.replace("&amp;", "&"))
        seen += re.findall(r'<article id="(W\d+)">', page.text)
        m = re.search(r'href="([^"]+)" rel="next"', page.text)
        url = m.group(1) if m else None
    assert seen == ["W7015", "W7030", "W7045"]
    assert client.get("/api/v1/dossier", params={"q": "reproducibility"}).status_code == 200


def test_the_dossier_pair_is_one_of_the_release_teacher_pairs_in_the_openapi_document(world):
    storage, client = world
    doc = client.get("/api/v1/openapi.json").json()
    (param,) = [p for p in doc["paths"]["/api/v1/dossier"]["get"]["parameters"] if p["name"] == "pair"]
    teachers = [r[0] for r in _sql(storage, "SELECT DISTINCT teacher FROM work_labels ORDER BY 1")]
    assert param["schema"]["enum"] == [*(f"{a} vs {b}" for a, b in combinations(teachers, 2)), ""]
    assert param["schema"]["enum"] == ["codex vs gemma", ""]  # "": an empty value is an unset parameter
    r = client.get("/api/v1/dossier", params={"pair": "gemma vs codex"})
    assert r.status_code == 400 and "codex vs gemma" in r.json()["error"]["message"]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_payloads_in_the_dossier_typeahead_and_statistics_parameters_are_inert(world, payload):
    storage, client = world
    for name in ("pair", "head", "after", "limit"):
        r = client.get("/api/v1/dossier", params={name: payload})
        assert r.status_code == 400 and "error" in r.json()
    assert client.get("/api/v1/dossier", params={"venue": payload}).json()["count"] == 0
    assert client.get("/fr/dossier", params={"head": payload}).status_code == 400
    for facet in ("venue", "institution", "funder", "topic"):
        r = client.get(f"/api/v1/facets/{facet}", params={"q": payload, "funder": payload})
        assert r.status_code == 200 and r.json()["values"] == []
        assert client.get(f"/api/v1/facets/{facet}", params={"limit": payload}).status_code == 400
    assert client.get("/api/v1/statistics", params={"q": payload}).status_code == 400
    assert _sql(storage, "SELECT count(*) FROM works")[0][0] == 60


# ---- typeahead ------------------------------------------------------------------------------------------------


def test_the_typeahead_counts_values_by_prefix_under_the_cohort_or_the_release(world):
    storage, client = world
    r = client.get("/api/v1/facets/institution", params={"q": "UNIV"}).json()
    want = _sql(
        storage,
        "SELECT name, count(*) FROM work_institutions WHERE lower(name) LIKE 'univ%' GROUP BY 1 "
        "ORDER BY 2 DESC, lower(strip_accents(name))",
    )
    assert r["scope"] == "release" and [(v["value"], v["count"]) for v in r["values"]] == want and want
    r = client.get(
        "/api/v1/facets/institution", params={"q": "u", "language": "fr", "institution": "McGill University"}
    )
    want = _sql(
        storage,
        "SELECT name, count(*) FROM work_institutions JOIN works USING (work_key) WHERE language = 'fr' "
        "AND lower(name) LIKE 'u%' GROUP BY 1 ORDER BY 2 DESC, lower(strip_accents(name))",
    )
    assert r.json()["scope"] == "cohort" and [(v["value"], v["count"]) for v in r.json()["values"]] == want
    # a value is every spelling that folds alike (JOURNAL 1 and Journal 1), counted together
    venues = client.get("/api/v1/facets/venue", params={"q": "journal", "limit": "2", "year_min": "2015"}).json()
    want = _sql(
        storage,
        "SELECT lower(venue), count(*) FROM works WHERE year >= 2015 AND lower(venue) LIKE 'journal%' GROUP BY 1 "
        "ORDER BY 2 DESC, 1 LIMIT 2",
    )
    assert [(v["value"].lower(), v["count"]) for v in venues["values"]] == want
    assert client.get("/api/v1/facets/nowhere").status_code == 404
    assert client.get("/api/v1/facets/venue", params={"prefix": "x"}).status_code == 400
    assert client.get("/api/v1/facets/venue", params={"limit": "51"}).status_code == 400


def test_the_home_page_facet_inputs_carry_a_datalist_and_the_script_from_this_site_only(world):
    _, client = world
    r = client.get("/")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "unsafe-eval" not in csp
    for facet in ("venue", "institution", "funder", "topic", "keyword"):
        assert f'data-facet="{facet}" list="suggest-{facet}"' in r.text and f'<datalist id="suggest-{facet}">' in r.text
        assert f'data-facet="{facet}" list="suggest-not_{facet}"' in r.text
    assert re.findall(r"<script[^>]*>", r.text) == ['<script src="/static/typeahead.js" defer>']
    js = client.get("/static/typeahead.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "/api/v1/suggest?" in js.text and "innerHTML" not in js.text


# ---- Parquet export -------------------------------------------------------------------------------------------


def test_the_parquet_export_has_the_csv_columns_and_rows_and_declares_the_cap(world, monkeypatch):
    _, client = world
    monkeypatch.setattr(export, "PARQUET_BATCH_ROWS", 10)  # several row groups, each streamed as written
    r = client.get("/export.parquet", params={"has_abstract": "no"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.apache.parquet"
    assert r.headers["x-metacan-truncated"] == "true" and r.headers["x-metacan-rows"] == "25"
    f = pq.ParquetFile(io.BytesIO(r.content))
    assert f.metadata.num_row_groups == 3 and f.metadata.num_rows == 25
    meta = json.loads(f.schema_arrow.metadata[b"metacan_export"])
    assert meta["truncated"] is True and meta["row_cap"] == 25 and meta["cohort_count"] == 40
    assert meta["query_hash"] == r.headers["x-metacan-query-hash"]
    table = f.read()
    csv = client.get("/export.csv", params={"has_abstract": "no"}).text
    lines = csv.splitlines()
    assert table.schema.names == lines[0].split(",")
    assert table.column("id").to_pylist() == [line.split(",")[0] for line in lines[1:]]
    assert table.schema.field("candidate_categories").type == pa.list_(pa.string())
    api = client.get("/api/v1/export", params={"format": "parquet", "language": "xx"})
    empty = pq.ParquetFile(io.BytesIO(api.content))
    assert empty.metadata.num_rows == 0 and empty.schema_arrow.names == table.schema.names
    assert api.headers["x-metacan-truncated"] == "false"


def test_the_openapi_document_describes_the_new_routes_and_their_own_parameters(world):
    _, client = world
    doc = client.get("/api/v1/openapi.json").json()
    assert {"/api/v1/statistics", "/api/v1/dossier", "/api/v1/facets/{facet}"} <= set(doc["paths"])
    assert {r.path for r in API_ROUTES} == set(doc["paths"])
    facets = {p["name"]: p for p in doc["paths"]["/api/v1/facets/{facet}"]["get"]["parameters"]}
    assert facets["limit"]["schema"]["maximum"] == 50 and "beginning" in facets["q"]["description"]
    assert facets["facet"]["schema"]["pattern"] == "^(language|type|field|topic|venue|institution|funder|keyword)$"
    dossier = {p["name"]: p for p in doc["paths"]["/api/v1/dossier"]["get"]["parameters"]}
    assert dossier["head"]["schema"]["enum"] == [*HEADS, ""] and "language" in dossier
    export_formats = {p["name"]: p for p in doc["paths"]["/api/v1/export"]["get"]["parameters"]}["format"]
    assert "parquet" in export_formats["schema"]["enum"]


@pytest.mark.browser
def test_chromium_fills_the_typeahead_and_reads_the_statistics_and_dossier_from_the_keyboard(world):
    import socket
    import threading
    import time

    import uvicorn

    from metacan_pipeline_tests.browser import PageWatch, artifacts_dir, launch_chromium, start_playwright

    storage = world[0]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(storage.root, rate_limit="off"), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    playwright = start_playwright()
    try:
        browser = launch_chromium(playwright)
        page = browser.new_context(locale="en-CA").new_page()
        watch = PageWatch().attach(page)
        failed = []
        page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
        page.goto(base + "/?language=fr")
        with page.expect_response(
            lambda r: "/api/v1/suggest?" in r.url and "facet=institution" in r.url and "language=fr" in r.url
        ):
            page.locator('input[name="institution"]').press_sequentially("univ", delay=30)
        page.wait_for_function("document.querySelectorAll('#suggest-institution option').length > 0")
        options = page.eval_on_selector_all("#suggest-institution option", "els => els.map(e => [e.value, e.label])")
        want = _sql(
            storage,
            "SELECT name, count(*) FROM work_institutions JOIN works USING (work_key) WHERE language = 'fr' "
            "AND lower(name) LIKE 'univ%' GROUP BY 1 ORDER BY 2 DESC, lower(strip_accents(name))",
        )
        assert [(v, int(label.rsplit("(", 1)[1].rstrip(")"))) for v, label in options] == want
        page.goto(base + "/statistics")
        for _ in range(40):  # the table of contents reaches the prevalence figure from the keyboard
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.getAttribute('href')") == "#prevalence":
                break
        else:
            pytest.fail("Tab never reached the prevalence figure's link")
        page.keyboard.press("Enter")
        assert page.url.endswith("/statistics#prevalence") and page.locator("#prevalence svg").count() == 1
        page.screenshot(path=str(artifacts_dir() / "site-statistics.png"), full_page=True)
        page.goto(base + "/fr/dossier")
        assert page.locator("article").count() == 3 and page.locator("h1").inner_text() == "Dossier des désaccords"
        page.screenshot(path=str(artifacts_dir() / "site-dossier-fr.png"), full_page=True)
        assert not (watch.dialogs or watch.page_errors) and failed == [], failed
        browser.close()
    finally:
        playwright.stop()
        server.should_exit = True
        thread.join(timeout=10)


def test_the_year_charts_show_every_year_between_the_first_and_the_last():
    from metacan_pipeline.site.web.statistics import every_year

    rows = [
        {"year": 2001, "works": 3, "invisible": 1, "no_abstract": 2},
        {"year": 2004, "works": 5, "invisible": 0, "no_abstract": 1},
        {"year": None, "works": 2, "invisible": 2, "no_abstract": 2},
    ]
    filled = every_year(rows)
    assert [r["year"] for r in filled] == [2001, 2002, 2003, 2004, None]
    assert filled[1] == {"year": 2002, "works": 0, "invisible": 0, "no_abstract": 0} and filled[3] is rows[1]
    assert every_year([]) == [] and every_year(rows[2:]) == rows[2:]


def test_every_design_of_the_prevalence_rows_is_said_in_french(world):
    from metacan_pipeline.site.web.statistics import design_words
    from metacan_pipeline.student.census import CENSUS_DESIGN
    from metacan_pipeline.student.estimands import CA_PERSON_NOT_MEASURED

    storage, client = world
    designs = {r[0] for r in _sql(storage, "SELECT DISTINCT design FROM release_prevalence WHERE design IS NOT NULL")}
    assert CENSUS_DESIGN in designs and any(CA_PERSON_NOT_MEASURED in d for d in designs)
    english = ("census", "scored once", "teacher", "not computed", "not measured", "lower bound", "needs")
    for design in designs:
        said = design_words(design, "fr")
        assert design_words(design, "en") == design
        assert not [w for w in english if w in said], (design, said)
    page = html.unescape(_main(client.get("/fr/statistics").text))
    assert "recensement du cadre" in page and "census of the frame" not in page


def test_a_screener_swap_range_shows_its_range_and_no_rate(world):
    """The pipeline stores a swap range's midpoint as its ``rate``; the page shows the range only (table and chart)."""
    storage, client = world
    swaps = [r for r in storage.read_table("prevalence").to_pylist() if r["method"] == "screener_swap_range"]
    assert any(r["rate"] is not None and r["ci_low"] < r["rate"] < r["ci_high"] for r in swaps)  # a midpoint to hide
    for fid in ("prevalence", "estimands"):
        block = _main(client.get("/statistics").text).split(f'<section id="{fid}"')[1].split("</section>")[0]
        rows = [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r) for r in block.split("<tbody>")[1].split("</tr>")[:-1]]
        header = re.findall(r'<th scope="col">(.*?)</th>', block)
        rate, interval, method = header.index("Rate"), header.index("95% CI or range"), header.index("Method")
        swap_rows = [r for r in rows if "screener-swap range" in r[method]]
        assert swap_rows, fid
        for r in swap_rows:
            assert r[rate] == "" and re.fullmatch(r"(\d+\.\d% – \d+\.\d%)?", r[interval]), (fid, r)
