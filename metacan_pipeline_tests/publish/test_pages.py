"""Tests of metacan_pipeline.publish.pages: work pages, page paths, the static index and index.js (under node and in
a real browser)."""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import fastjsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from playwright.sync_api import expect

from metacan_pipeline.i18n import translations
from metacan_pipeline.publish.abstracts import Abstract
from metacan_pipeline.publish.manifest import PagePlan
from metacan_pipeline.publish.page_writer import index_order, stream_records, write_index
from metacan_pipeline.publish.pages import (
    INDEX_FIELDS,
    environment,
    index_json,
    index_row,
    page_context,
    page_path,
    render_index,
    render_work,
    write_static,
)
from metacan_pipeline.publish.records import SCHEMA_PATH, build_record, record_row
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.publish import PAGE_PLAN_SCHEMA, RECORDS_SCHEMA
from metacan_pipeline_tests.builders.common import XSS
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.site import CTX
from metacan_pipeline_tests.builders.student import machine_row, prediction_row
from metacan_pipeline_tests.builders.teachers import label_row

INDEX_JS = Path(__file__).resolve().parents[2] / "metacan_pipeline" / "publish" / "static" / "index.js"
BREAKOUT = "</script><script>alert(1)</script>"
V1, V2 = "metacan-v3-hybrid-931329e0061c", "metacan-v4-hybrid-0123456789ab"
DATA_RE = re.compile(r'<script type="application/json" id="works-data"[^>]*>(.*?)</script>', re.S)


def _with_prediction(record: dict, version: str, consensus: list[str], candidate: list[str]) -> dict:
    pred = prediction_row(record["id"])
    pred.update(model_version=version, consensus_categories=consensus, candidate_categories=candidate)
    record["prediction"] = {k: v for k, v in pred.items() if k not in ("id", "gemma_label_status")}
    return record


@pytest.fixture()
def records(openalex_dir) -> list[dict]:
    """Four works, one per kind of classification, built from one real frame row:
    W1 direct label (and a V1 prediction), W2 consensus V1 (title tries to break out of the data block),
    W12 candidate V2 with no year, W123 not classified (no prediction: unscored)."""
    row = real_frame_row(openalex_dir)
    base = build_record(row, [], None, machine_row(row["id"]), {})
    base["routes"] = {k: False for k in base["routes"]}

    def work(wid, title, year, routes):
        r = copy.deepcopy(base)
        r.update(id=wid, title=title, year=year)
        r["routes"].update({k: True for k in routes})
        return r

    w1 = _with_prediction(work("W1", "Peer review in Canadian journals", 2020, ["ca_aff"]), V1, [], ["sts"])
    w1["direct_labels"] = build_record(row, [label_row("W1", "gemma", ["metaresearch"])], None, None, {})[
        "direct_labels"
    ]
    w2 = _with_prediction(
        work("W2", f"{BREAKOUT} soil <!-- bacteria \u2028 & co", 2019, ["ca_fund"]), V1, ["sts"], ["sts"]
    )
    w12 = _with_prediction(work("W12", "Open data mandates", None, ["ca_venue", "about_ca"]), V2, [], ["open_science"])
    w123 = work("W123", "Reproducibility of W1 studies", 2020, ["about_ca"])
    return [w1, w2, w12, w123]


def test_page_path_pins_the_model_version(records):
    assert page_path(records[0]) == f"works/{V1}/W1.html"
    assert page_path(records[2]) == f"works/{V2}/W12.html"
    assert page_path(records[3]) == "works/unscored/W123.html"


@pytest.mark.parametrize("bad_id", ["../W1", "W1/../../x", "w1", "X1", "W", "W1.html", "", None, 123, "W1 "])
def test_page_path_rejects_bad_ids(records, bad_id):
    record = dict(records[3], id=bad_id)
    with pytest.raises(ValueError, match=re.escape(repr(bad_id))):
        page_path(record)


@pytest.mark.parametrize(
    "bad_version",
    ["..", ".", ".hidden", "a/b", "../../etc", "v 1", "unscored", "x" * 129, "<script>", "v1\n", "é-v1", 7],
)
def test_page_path_rejects_bad_model_versions(records, bad_version):
    record = copy.deepcopy(records[0])
    record["prediction"]["model_version"] = bad_version
    with pytest.raises(ValueError, match=re.escape(repr(bad_version))):
        page_path(record)


def test_index_rows_say_source_mode_and_version(records):
    rows = {r["id"]: r for r in map(index_row, records)}
    assert set(rows["W1"]) == set(INDEX_FIELDS)
    assert (rows["W1"]["source"], rows["W1"]["mode"], rows["W1"]["model_version"]) == ("direct", None, V1)
    assert rows["W1"]["classification"] == "direct label (gemma, direct_label_unvalidated): Metaresearch"
    assert (rows["W2"]["source"], rows["W2"]["mode"]) == ("classifier", "consensus")
    assert rows["W2"]["classification"] == (
        "consensus prediction (machine_predicted_unvalidated): Science and technology studies"
    )
    assert (rows["W12"]["source"], rows["W12"]["mode"], rows["W12"]["year"]) == ("classifier", "candidate", None)
    assert rows["W12"]["routes"] == ["ca_venue", "about_ca"]
    assert rows["W123"] == {
        "id": "W123",
        "title": "Reproducibility of W1 studies",
        "year": 2020,
        "routes": ["about_ca"],
        "source": "none",
        "mode": None,
        "model_version": None,
        "classification": "not classified yet",
        "href": "works/unscored/W123.html",
    }
    assert all(r["href"] == page_path(rec) for r, rec in zip(map(index_row, records), records, strict=False))


def _data_block(html: str) -> str:
    blocks = DATA_RE.findall(html)
    assert len(blocks) == 1
    return blocks[0]


def test_embedded_json_parses_back_to_the_rows(records):
    rows = [index_row(r) for r in records]
    html = render_index(environment(), rows, built_at="2026-01-01 00:00 UTC")
    data = json.loads(_data_block(html))
    assert data["fields"] == list(INDEX_FIELDS)
    assert [dict(zip(data["fields"], values, strict=False)) for values in data["rows"]] == rows
    assert _data_block(html) == index_json(rows)


def test_a_title_cannot_break_out_of_the_data_block(records):
    html = render_index(environment(), [index_row(r) for r in records], built_at="x")
    block = _data_block(html)
    for ch in ("<", ">", "&", "\u2028", "\u2029"):
        assert ch not in block
    assert "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)" in block
    # exactly two scripts: the inert data block and index.js (loaded from the site root, no inline code)
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert '<script src="index.js" defer></script>' in html
    assert BREAKOUT not in html


class _Controls(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.labels, self.th_without_scope, self.csp = [], set(), 0, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("input", "select"):
            self.ids.append(a.get("id"))
        elif tag == "label":
            self.labels.add(a.get("for"))
        elif tag == "th" and "scope" not in a:
            self.th_without_scope += 1
        elif tag == "meta" and a.get("http-equiv") == "Content-Security-Policy":
            self.csp = a["content"]


def test_index_controls_are_labelled_and_only_the_index_may_run_its_script(records):
    rows = [index_row(r) for r in records]
    html = render_index(environment(), rows, built_at="x")
    page = _Controls()
    page.feed(html)
    assert page.ids == ["q", "f-route", "f-year", "f-source", "f-mode", "f-version"]
    assert set(page.ids) <= page.labels and page.th_without_scope == 0
    assert page.csp == "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self'"
    assert 'role="status" aria-live="polite"' in html and "<noscript>" in html and 'href="records/"' in html
    # the filter choices are the values present: years (newest first, then unknown) and versions (unscored last)
    assert re.findall(r'<option value="(\d{4}|unknown)">', html) == ["2020", "2019", "unknown"]
    assert re.findall(r'<option value="(metacan[^"]*|unscored)">', html) == [V1, V2, "unscored"]
    work = _Controls()
    work.feed(render_work(environment(), records[1], None, {"n_codex_labels": 0, "gated_heads": 0, "total_heads": 0}))
    assert work.csp == "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'"


def test_write_static_copies_index_js_once(tmp_path):
    site = tmp_path / "site"
    assert write_static(site) == [site / "index.js"]
    assert (site / "index.js").read_bytes() == INDEX_JS.read_bytes()
    assert write_static(site) == []  # unchanged: nothing rewritten


# (filters, ids expected in row order W1, W2, W12, W123)
CASES = [
    ({}, ["W1", "W2", "W12", "W123"]),
    ({"q": "peer"}, ["W1"]),
    ({"q": "  PEER Review "}, ["W1"]),
    ({"q": "w12"}, ["W12"]),  # an id query matches that work, not W123
    ({"q": "W1"}, ["W1", "W123"]),  # ... and titles that contain it
    ({"q": "https://openalex.org/W2"}, ["W2"]),
    ({"q": BREAKOUT}, ["W2"]),
    ({"q": "nothing like this"}, []),
    ({"route": "ca_fund"}, ["W2"]),
    ({"route": "about_ca"}, ["W12", "W123"]),
    ({"year": "2020"}, ["W1", "W123"]),
    ({"year": "unknown"}, ["W12"]),
    ({"source": "direct"}, ["W1"]),
    ({"source": "classifier"}, ["W2", "W12"]),
    ({"source": "none"}, ["W123"]),
    ({"mode": "consensus"}, ["W2"]),
    ({"mode": "candidate"}, ["W12"]),
    ({"version": V1}, ["W1", "W2"]),
    ({"version": "unscored"}, ["W123"]),
    ({"source": "classifier", "year": "2019", "version": V1, "route": "ca_fund"}, ["W2"]),
    ({"source": "direct", "mode": "consensus"}, []),
]

NODE_DRIVER = """
const api = require(process.argv[1]);
let input = "";
process.stdin.on("data", (c) => { input += c; });
process.stdin.on("end", () => {
  const { block, cases } = JSON.parse(input);
  const rows = api.decode(JSON.parse(block), "unscored");
  const out = cases.map((f) => api.filterRows(rows, f).map((r) => r.id));
  process.stdout.write(JSON.stringify({ out, count: [api.countText(2, 4), api.countText(1234, 56789), api.countText(1, 1)] }));
});
"""


def test_index_js_filters_under_node(records):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: index.js filters are exercised only in the browser test")
    html = render_index(environment(), [index_row(r) for r in records], built_at="x")
    payload = json.dumps({"block": _data_block(html), "cases": [f for f, _ in CASES]})
    done = subprocess.run(
        [node, "-e", NODE_DRIVER, str(INDEX_JS)], input=payload, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["out"] == [ids for _, ids in CASES]
    assert result["count"] == ["2 of 4 works", "1,234 of 56,789 works", "1 of 1 work"]


@pytest.mark.browser
def test_index_in_a_real_browser_from_file_url(tmp_path, records, browser):
    site = tmp_path / "site"
    site.mkdir()
    rows = [index_row(r) for r in records]
    (site / "index.html").write_text(render_index(environment(), rows, built_at="x"), encoding="utf-8")
    write_static(site)
    page = browser.new_page()
    try:
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("dialog", lambda d: (problems.append(f"dialog {d.message}"), d.dismiss()))
        page.goto((site / "index.html").as_uri())
        count, body = page.locator("#count"), page.locator("#results-body tr")
        expect(count).to_have_text("4 of 4 works")  # index.js ran under script-src 'self' from file://
        expect(body).to_have_count(4)
        expect(page.locator("#results-body a").first).to_have_attribute("href", f"works/{V1}/W1.html")
        expect(page.locator("#results-body a", has_text=BREAKOUT)).to_have_count(1)  # the title, as text
        page.fill("#q", "w12")
        expect(count).to_have_text("1 of 4 works")
        expect(body.first).to_contain_text("Open data mandates")
        page.fill("#q", "")
        page.select_option("#f-source", "classifier")
        page.select_option("#f-year", "2019")
        expect(count).to_have_text("1 of 4 works")
        expect(body.first).to_contain_text("(W2)")
        page.select_option("#f-year", "")
        page.select_option("#f-version", V2)
        expect(count).to_have_text("1 of 4 works")
        page.click("button[type=reset]")
        expect(count).to_have_text("4 of 4 works")
        assert problems == []
    finally:
        page.close()


@pytest.mark.browser
def test_index_shows_at_most_max_rows_in_a_real_browser(tmp_path, records, browser):
    site = tmp_path / "site"
    site.mkdir()
    row = index_row(records[3])
    rows = [dict(row, id=f"W{i}", href=f"works/unscored/W{i}.html") for i in range(1, 1202)]
    (site / "index.html").write_text(render_index(environment(), rows, built_at="x"), encoding="utf-8")
    write_static(site)
    page = browser.new_page()
    try:
        page.goto((site / "index.html").as_uri())
        expect(page.locator("#count")).to_have_text("1,201 of 1,201 works")
        expect(page.locator("#results-body tr")).to_have_count(500)
        expect(page.locator("#more")).to_contain_text("first 500 of 1,201 matches")
    finally:
        page.close()


def test_index_search_folds_accents_and_case_under_node():
    """What a reader types finds the title however it is encoded: "resume" finds a decomposed "Résumé",
    "istanbul" finds "İstanbul" (JavaScript lower-cases İ to i + a combining dot)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    titles = {
        "W1": "Re\u0301sume\u0301 of peer review",
        "W2": "\u0130stanbul cohort",
        "W3": "R\u00e9sum\u00e9 (composed)",
    }
    rows = [
        [
            dict(
                id=w,
                title=t,
                year=2020,
                routes=[],
                source="none",
                mode=None,
                model_version=None,
                classification="",
                href=f"works/unscored/{w}.html",
            )[f]
            for f in INDEX_FIELDS
        ]
        for w, t in titles.items()
    ]
    cases = [{"q": "resume"}, {"q": "RÉSUMÉ"}, {"q": "istanbul"}, {"q": "İstanbul"}]
    driver = NODE_DRIVER.replace(
        "count: [api.countText(2, 4), api.countText(1234, 56789), api.countText(1, 1)]", "count: []"
    )
    payload = json.dumps({"block": json.dumps({"fields": list(INDEX_FIELDS), "rows": rows}), "cases": cases})
    done = subprocess.run(
        [node, "-e", driver, str(INDEX_JS)], input=payload, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["out"] == [["W1", "W3"], ["W1", "W3"], ["W2"], ["W2"]]


NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def test_markup_and_script_in_titles_and_abstracts_render_as_text(openalex_dir):
    row = real_frame_row(openalex_dir, title=f"Using <b>lme4</b> {XSS}")
    row["venue_name"] = f"Venue {XSS}"
    record = build_record(
        row, [label_row(row["id"], "gemma", ["metaresearch"])], prediction_row(row["id"]), machine_row(row["id"]), None
    )
    html = render_work(
        environment(), record, Abstract(row["id"], "ok", f"An abstract with <b>markup</b> {XSS}", None, NOW), CTX
    )
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert "Using lme4 alert(&#34;x&#34;)" in html  # the title's markup reduced to text
    assert "Venue &lt;script&gt;" in html and "&lt;b&gt;markup&lt;/b&gt;" in html  # other fields escaped
    assert "How this classification was reached" in html and "<details>" in html
    assert "direct label · gemma" in html and 'badge">machine prediction' not in html
    assert "Training rounds run: 1 · maturity gate not passed" in html
    assert "classifier version <code>metacan-v0-hybrid-000000000000</code>" in html
    assert 'href="../../works/metacan-v0-hybrid-000000000000/W' in html and 'href="../../index.html"' in html


@pytest.mark.parametrize(
    ("abstract", "has_abstract", "expected"),
    [
        (None, True, "Abstracts were not fetched for this build"),
        ("none", False, "its record carried no abstract_inverted_index"),
        ("none", True, "OpenAlex has no abstract for this work (asked at"),
        ("missing", True, "OpenAlex returned no record for this id"),
        ("failed", True, "could not be fetched from OpenAlex just now (2026-11-30 12:00 UTC): HTTP 503"),
        ("ok", True, "Fetched live from OpenAlex at 2026-11-30 12:00 UTC and de-inverted. Abstracts are not stored"),
    ],
)
def test_page_says_honestly_what_happened_to_the_abstract(openalex_dir, abstract, has_abstract, expected):
    row = real_frame_row(openalex_dir)
    row["has_abstract"] = has_abstract
    record = build_record(row, [], prediction_row(row["id"]), machine_row(row["id"]), None)
    value = None
    if abstract is not None:
        asked = None if (abstract == "none" and not has_abstract) else NOW
        value = Abstract(
            row["id"],
            abstract,
            "The text." if abstract == "ok" else None,
            "HTTP 503" if abstract == "failed" else None,
            asked,
        )
    html = render_work(environment(), record, value, CTX)
    assert expected in html
    assert ("<p>The text.</p>" in html) == (abstract == "ok")


def test_page_path_refuses_ids_and_versions_that_are_not_names(openalex_dir):
    row = real_frame_row(openalex_dir)
    record = build_record(row, [], None, None, None)
    assert page_path(record) == f"works/unscored/{row['id']}.html"
    for wid in ("W1/../../x", "../W1", "W", "w12", "W1\n"):
        with pytest.raises(ValueError, match="refusing to publish work id"):
            page_path({**record, "id": wid})
    for version in ("..", ".hidden", "a/b", "v 1", "x" * 129, "unscored"):
        with pytest.raises(ValueError, match="under model version"):
            page_path({**record, "prediction": {"model_version": version}})


def test_page_context_reads_the_sample_teachers_heads():
    heads = [
        {"teacher": "codex", "target": "sts", "n_train": 40, "gate_passed": True, "status": "fitted"},
        {"teacher": "codex", "target": "x", "n_train": 40, "gate_passed": False, "status": "constant: one class"},
        {"teacher": "gemma", "target": "sts", "n_train": 900, "gate_passed": True, "status": "fitted"},
    ]
    assert page_context(heads, "codex") == {
        "n_codex_labels": 40,
        "gated_heads": 1,
        "total_heads": 2,
        "constant_heads": {("codex", "x")},
    }
    assert page_context(heads, "gemma")["n_codex_labels"] == 900 and page_context([], "codex")["total_heads"] == 0


def _plan(tmp_path, ids: list[str], todo: set[str]) -> PagePlan:
    """A page plan (the file :func:`.manifest.pages_to_render` writes) rendering ``todo`` among ``ids``."""
    path = tmp_path / "plan.parquet"
    pq.write_table(pa.table({"id": ids, "render": [w in todo for w in ids]}, schema=PAGE_PLAN_SCHEMA), path)
    return PagePlan(path, len(ids), len(todo))


def _stored_records(tmp_path, openalex_dir, years: dict[str, int | None]) -> tuple[MetacanStorage, list[dict]]:
    """``work_records`` of one real frame row under the ids and publication years ``years``."""
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    base = real_frame_row(openalex_dir)
    rows = [
        record_row(
            {
                "work": {**base, "id": w, "publication_year": y},
                "labels": [],
                "pred": None,
                "machine": None,
                "lineage": None,
            }
        )
        for w, y in years.items()
    ]
    storage.write_table("work_records", pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA))
    return storage, rows


def test_stream_records_hands_over_the_chosen_works_in_chunks(tmp_path, openalex_dir):
    storage, rows = _stored_records(tmp_path, openalex_dir, {f"W{i}": 2020 for i in range(1, 8)})
    chunks = []
    ids = [r["id"] for r in rows]
    index = stream_records(storage, _plan(tmp_path, ids, {"W2", "W3", "W5", "W7"}), chunks.append, chunk_rows=2)
    # batches of two records: a chunk is handed over once it holds two works, the rest at the end
    assert [[c[0] for c in chunk] for chunk in chunks] == [["W2", "W3"], ["W5", "W7"]]
    assert all(c[3] == next(r["record_hash"] for r in rows if r["id"] == c[0]) for chunk in chunks for c in chunk)
    assert [r["id"] for r in index.rows()] == sorted(r["id"] for r in rows) and index.n_works == 7
    # a plan that is not the table's ids in its order (the table changed meanwhile) stops the stream
    for planned in (ids[::-1], ids[:-1], [*ids, "W8"]):
        with pytest.raises(RuntimeError, match="work_records changed while work_pages ran"):
            stream_records(storage, _plan(tmp_path, planned, set()), chunks.append, chunk_rows=2)


def test_the_static_index_lists_the_newest_works_up_to_its_cap_and_says_so(tmp_path, openalex_dir):
    """Seven works, an index capped at three: it embeds the three first in index_order (newest year, then id), its
    heading and version counts still count all seven, and the page says which works its search covers. Under the
    cap, the index is the one of every row (what it was before the cap)."""
    years = {"W1": 2001, "W2": 2024, "W3": None, "W4": 2024, "W5": 2010, "W6": 2030, "W7": 2001}
    storage, rows = _stored_records(tmp_path, openalex_dir, years)
    records = [json.loads(r["record_json"]) for r in rows]
    everything = sorted(map(index_row, records), key=index_order)
    plan = _plan(tmp_path, list(years), set())
    capped = stream_records(storage, plan, lambda chunk: None, chunk_rows=2, index_cap=3)
    assert [r["id"] for r in capped.rows()] == ["W6", "W2", "W4"] and capped.rows() == everything[:3]
    assert capped.n_works == 7 and capped.listed == 3 and capped.versions == {"unscored": 7}
    assert capped.counts() == (Counter({"none": 7}), Counter())
    write_index(storage.site_dir, environment(), capped, None)
    html = (storage.site_dir / "index.html").read_text()
    assert [values[0] for values in json.loads(_data_block(html))["rows"]] == ["W6", "W2", "W4"]
    assert "frame: 7 works</h1>" in html and "folder <code>unscored</code>): 7 works." in html
    assert "This page lists the 3 newest of the 7 works" in " ".join(html.split())
    assert re.findall(r'<option value="(\d{4}|unknown)">', html) == ["2030", "2024"]  # the years it lists
    full = stream_records(storage, plan, lambda chunk: None, chunk_rows=2)
    assert full.rows() == everything and full.listed == 7
    assert write_index(storage.site_dir, environment(), full, None)
    html = (storage.site_dir / "index.html").read_text()
    assert "This page lists" not in html and 'id="listed"' not in html
    built = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", html).group(0)
    assert html == render_index(environment(), everything, built_at=built)


def test_an_unqualified_teachers_label_says_so_on_the_page_the_record_and_the_index(openalex_dir):
    row = real_frame_row(openalex_dir)
    note = "teacher not qualified (kappa -0.01 on 50 reference works (16 positive); needs 0.37)"
    record = build_record(
        row,
        [label_row(row["id"], "gemma", ["metaresearch"])],
        prediction_row(row["id"]),
        machine_row(row["id"]),
        None,
        {"gemma": note},
    )
    assert record["direct_labels"][0]["qualification"] == note
    html = render_work(environment(), record, None, CTX)
    assert f'<span class="badge">{note}</span>' in html.replace("&#39;", "'")
    assert f"Teacher gemma: {note}." in html and "decides nothing" in html
    assert (
        index_row(record)["classification"] == f"direct label (gemma, direct_label_unvalidated, {note}): Metaresearch"
    )


def test_reference_set_scores_are_a_record_section_and_a_page_table_in_both_languages(openalex_dir):
    row = real_frame_row(openalex_dir)
    reference = {"id": row["id"], "pilot_a__metaresearch": 0.0871, "pilot_b__about_ca_system": None}
    record = build_record(row, [], prediction_row(row["id"]), machine_row(row["id"]), None, reference=reference)
    assert record["reference_scores"] == [
        {"set": "pilot_a", "head": "metaresearch", "score": 0.0871, "status": "score_only:reference_set"}
    ]
    section = fastjsonschema.compile(json.loads(SCHEMA_PATH.read_text())["properties"]["reference_scores"])
    assert section(record["reference_scores"]) == record["reference_scores"]
    with pytest.raises(fastjsonschema.JsonSchemaValueException, match="must be smaller than or equal to 1"):
        section([{**record["reference_scores"][0], "score": 1.5}])
    html = render_work(environment(), record, None, CTX)
    assert "Reference-set scores" in html and "<code>pilot_a</code></td><td>metaresearch</td><td>0.087" in html
    french = render_work(environment(translations("fr")), record, None, CTX)
    assert "Scores des ensembles de référence" in french and "ensemble de référence</th>" in french
    # a head that gives no score: its entry says why, with a null score, never the training rate
    reason = "no positive direct label to learn from (0 positives of 793 labels)"
    reference = {**reference, "pilot_b__about_ca_system:no_score": reason}
    record = build_record(row, [], prediction_row(row["id"]), machine_row(row["id"]), None, reference=reference)
    assert record["reference_scores"][1] == {
        "set": "pilot_b",
        "head": "about_ca_system",
        "score": None,
        "status": "score_only:reference_set",
        "no_score": reason,
    }
    assert section(record["reference_scores"]) == record["reference_scores"]
    assert "<code>pilot_b</code></td><td>about_ca_system</td><td>n/a</td>" in render_work(
        environment(), record, None, CTX
    )
    plain = build_record(row, [], prediction_row(row["id"]), machine_row(row["id"]), None)
    assert "reference_scores" not in plain and "Reference-set scores" not in render_work(
        environment(), plain, None, CTX
    )
