"""Integration: hostile titles and abstracts rendered into real pages stay inert in headless Chromium."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from metacan_pipeline.openalex.abstract import markup_to_text
from metacan_pipeline.publish.abstracts import Abstract
from metacan_pipeline.publish.pages import environment, index_row, render_index, render_work, write_static
from metacan_pipeline.publish.records import build_record
from metacan_pipeline_tests.browser import PageWatch
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.student import machine_row, prediction_row
from metacan_pipeline_tests.builders.teachers import label_row

PAYLOADS = (
    "<script>window.__xss=1</script>",
    '<img src=x onerror="window.__xss=2">',
    '"><svg onload=window.__xss=3>',
    "javascript:window.__xss=4",
    "</script><script>window.__xss=5</script>",  # breaks out of a <script> block (JSON embedded in a page)
    "' onmouseover='window.__xss=6' x='",  # breaks out of an attribute value
    '<iframe src="javascript:window.__xss=7"></iframe>',
    "<script>alert(document.domain)</script>",  # a dialog, if it ever ran
)
ALL = " ".join(PAYLOADS)
#: Titles go through markup_to_text (tags dropped, entities decoded), so raw tags vanish from them while
#: entity-encoded ones come out as literal markup: both kinds are tried, the second is the dangerous one.
TITLES = (
    "Raw title " + ALL,
    "Encoded title &lt;script&gt;window.__xss=1&lt;/script&gt; &lt;img src=x onerror=&quot;window.__xss=2&quot;&gt;",
    "Breakout title &lt;/script&gt;&lt;script&gt;window.__xss=5&lt;/script&gt; &quot; onmouseover=&quot;window.__xss=6&quot;",
)
#: What each title shows once reduced (by work id): entity-encoded markup survives as literal text.
SHOWN_TITLES = {f"W99000000{i}": markup_to_text(title) for i, title in enumerate(TITLES)}
CSP_META = re.compile(r"<meta\b[^>]*http-equiv\s*=\s*[\"']?content-security-policy[\"']?[^>]*>", re.I)


def _records(openalex_dir: Path) -> tuple[list[dict], dict[str, str]]:
    """Records with payloads in every free-text field, one per title; and their abstracts by id."""
    records, abstracts = [], {}
    for i, title in enumerate(TITLES):
        row = real_frame_row(openalex_dir, id=f"https://openalex.org/W99000000{i}", title=title)
        row.update(
            venue_name=f"Venue {ALL}",
            funder_names=[f"Funder {p}" for p in PAYLOADS],
            keywords=list(PAYLOADS),
            ca_institutions=[f"Institution {p}" for p in PAYLOADS],
            doi=PAYLOADS[3],
            topic=f"Topic {ALL}",
            field=f"Field {ALL}",
            ca_aff=True,
            ca_fund=True,
            ca_venue=True,
            about_ca=True,
            ca_aff_evidence=[f"institution {p}" for p in PAYLOADS],
            ca_fund_evidence=[f"funder {ALL}"],
            ca_venue_evidence=[f"venue {ALL}"],
            about_ca_evidence=[f"keyword {ALL}"],
        )
        wid = row["id"]
        gemma = {**label_row(wid, "gemma", ["metaresearch"]), "reason": f"Reason {ALL}", "model": f"model {ALL}"}
        codex = {**label_row(wid, "codex", None, status="failed"), "error": f"Error {ALL}", "reason": None}
        prediction = prediction_row(wid)  # a model version that is not a folder name is refused (test_publish)
        machine = {**machine_row(wid), "note": f"Note {ALL}"}
        call = {
            "teacher": "gemma",
            "model": f"model {ALL}",
            "prompt_version": f"prompt {ALL}",
            "prompt_sha": "s",
            "record_view": "title_only",
            "label_status": "labelled",
            "source": f"source {ALL}",
            "call_id": f"call {ALL}",
            "request_hash": f"hash {ALL}",
            "called_at": f"time {ALL}",
            "run_id": f"run {ALL}",
            "archive": None,
        }
        lineage = {
            "frame_build_id": f"build {ALL}",
            "frame_run_id": f"run {ALL}",
            "input_kind": "input_file",
            "source_file": f"file {ALL}",
            "source_locator": f"locator {ALL}",
            "part_run_id": f"run {ALL}",
            "entity_list_versions": f"lists {ALL}",
            "lexicon_version": f"lexicon {ALL}",
            "teacher_calls": [call],
            "model_version": prediction["model_version"],
            "student_run_id": f"run {ALL}",
            "machine_round": 1,
            "machine_scores_run_id": f"run {ALL}",
            "machine_validation_status": f"status {ALL}",
        }
        records.append(build_record(row, [gemma, codex], prediction, machine, lineage))
        abstracts[wid] = f"Abstract {ALL}"
    return records, abstracts


def render_pages(records: list[dict], abstracts: dict[str, str]) -> tuple[dict[str, str], str]:
    """The only call of the page renderers in this file: ``({work id: work page HTML}, index HTML)``.
    Adapt it here when their signatures change."""
    env = environment()
    context = {
        "n_codex_labels": 1,
        "gated_heads": 0,
        "total_heads": 14,
        "constant_heads": set(),
        "rendered_at": f"at {ALL}",
        "page_run_id": f"run {ALL}",
    }
    now = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    works = {
        r["id"]: render_work(env, r, Abstract(r["id"], "ok", abstracts[r["id"]], None, now), context) for r in records
    }
    index = render_index(env, [index_row(r) for r in records], built_at=f"built {ALL}")
    return works, index


_DOM_TRACES = """() => {
  const bad = [];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      const name = a.name.toLowerCase();
      const value = a.value.replace(/[\\s\\x00-\\x1f]/g, '').toLowerCase();
      if (name.startsWith('on')) bad.push(`<${el.localName}> has event handler ${name}=${a.value}`);
      if (value.startsWith('javascript:')) bad.push(`<${el.localName}> has ${name}=${a.value}`);
    }
  }
  for (const s of document.querySelectorAll('script')) {
    const type = (s.type || '').toLowerCase();
    const code = !type || type.includes('javascript') || type === 'module';
    if (code && (s.textContent.includes('__xss') || s.textContent.includes('alert('))) bad.push(`a script element holds payload code: ${s.textContent}`);
  }
  if (typeof window.__xss !== 'undefined') bad.push(`window.__xss = ${window.__xss}: a payload ran`);
  return bad;
}"""


def script_traces(browser, path: Path) -> tuple[list[str], str, str]:
    """Open ``path`` in a new page; return (every trace of a payload that ran or could run, the body's
    text, the document's title)."""
    page = browser.new_page()
    watch = PageWatch().attach(page)
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_timeout(300)  # late handlers (an image's onerror, a deferred script)
        page.mouse.move(5, 5)
        page.mouse.move(400, 300)  # hover over the page, for onmouseover payloads
        page.evaluate(
            "() => document.querySelectorAll('details').forEach(d => { d.open = true; })"
        )  # collapsed sections too
        page.wait_for_timeout(100)
        traces = page.evaluate(_DOM_TRACES)
        traces += [f"dialog opened: {d}" for d in watch.dialogs]
        traces += [f"console error: {e}" for e in watch.console_errors]
        traces += [f"page error: {e}" for e in watch.page_errors]
        return traces, page.inner_text("body"), page.title()
    finally:
        page.close()


def _write(path: Path, html: str, csp: bool) -> Path:
    if csp:
        assert CSP_META.search(html), f"{path.name}: no Content-Security-Policy meta tag in the rendered page"
    else:
        html = CSP_META.sub("", html)
        assert "content-security-policy" not in html.lower(), f"{path.name}: a CSP is left that the test cannot remove"
    path.write_text(html, encoding="utf-8")
    return path


@pytest.mark.browser
@pytest.mark.parametrize("csp", [True, False], ids=["with-csp", "csp-removed"])
def test_payloads_render_inert_and_literal(tmp_path, openalex_dir, browser, csp):
    records, abstracts = _records(openalex_dir)
    works, index = render_pages(records, abstracts)
    (tmp_path / "works").mkdir()
    for record in records:
        path = _write(tmp_path / "works" / f"{record['id']}.html", works[record["id"]], csp)
        traces, text, title = script_traces(browser, path)
        assert traces == [], f"{path.name}: {traces}"
        expected_title = SHOWN_TITLES[record["id"]]
        assert expected_title in text and expected_title in title, (
            f"{path.name}: title {expected_title!r} is not shown as text"
        )
        for (
            payload
        ) in PAYLOADS:  # verbatim fields: venue, funders, keywords, institutions, evidence, reason, abstract...
            assert payload in text, f"{path.name}: payload {payload!r} is not shown as text"
        for field in (
            f"Abstract {ALL}",
            f"Reason {ALL}",
            f"Venue {ALL}",
            f"Error {ALL}",
            f"model {ALL}",
            f"build {ALL}",
        ):
            assert field in text, f"{path.name}: {field[:20]!r}... is not shown verbatim"
    write_static(tmp_path)  # index.js next to index.html, as work_pages writes it
    path = _write(tmp_path / "index.html", index, csp)
    traces, text, _ = script_traces(browser, path)
    assert traces == [], f"index.html: {traces}"
    for wid, expected_title in SHOWN_TITLES.items():
        assert expected_title in text, f"index.html: title of {wid} ({expected_title!r}) is not shown as text"


def test_encoded_titles_carry_live_markup_into_the_page():
    """The entity-encoded titles come out of markup_to_text as literal markup, so the pages' escaping of
    titles is really tested (a raw tag would just be dropped)."""
    assert "<script>window.__xss=1</script>" in SHOWN_TITLES["W990000001"]
    assert "</script><script>window.__xss=5</script>" in SHOWN_TITLES["W990000002"]


@pytest.mark.browser
def test_the_check_sees_a_payload_that_runs(tmp_path, browser):
    """The detector is not blind: an unescaped page without CSP is caught (a dialog, window.__xss, handlers)."""
    page = tmp_path / "unescaped.html"
    page.write_text("<!doctype html><html><head><title>t</title></head><body><p>" + ALL + "</p></body></html>")
    traces, _, _ = script_traces(browser, page)
    assert any("window.__xss" in t and "a payload ran" in t for t in traces), traces
    assert any(t.startswith("dialog opened") for t in traces), traces
    assert any("event handler onerror" in t for t in traces), traces
