"""Tests of the abstract cascade (metacan_pipeline/publish/abstract_cascade.py) and its text (abstract_text.py): the
loopback OpenAlex stub serving real records, and a loopback Europe PMC and Crossref answering in their real shapes
(metacan_pipeline_tests/builders/abstract_sources.py); the order, the stop rule, sections, the source line of a page,
retries, the breaker and failures."""

from __future__ import annotations

import hashlib
import socket
import time

import pytest

from metacan_pipeline.i18n import translations
from metacan_pipeline.publish.abstract_cascade import AbstractCascade
from metacan_pipeline.publish.abstract_text import labelled_sections, markup_sections
from metacan_pipeline.publish.abstracts import WorkIds
from metacan_pipeline.publish.pages import environment, render_work
from metacan_pipeline.publish.records import build_record
from metacan_pipeline_tests.builders.abstract_sources import LoopbackSources, crossref_work, europepmc_record
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.openalex import LME4_ABSTRACT
from metacan_pipeline_tests.builders.site import CTX
from metacan_pipeline_tests.builders.student import machine_row, prediction_row
from metacan_pipeline_tests.builders.teachers import label_row

LAEMMLI, BRADFORD, LOWRY_DOI_ONLY, NO_IDS, GONE = "W2100837269", "W2128635872", "W4293247451", "W2612755892", "W9"
LME4 = "W1951724000"
#: Europe PMC's abstractText of the Laemmli record (invented text, real markup: <h4> headings, inline <i>, an entity).
EPMC_TEXT = (
    "<h4>Background</h4>Proteins of bacteriophage T4 were separated by <i>SDS</i> electrophoresis &amp; stained."
    "<h4>Results</h4>At least 28 components were resolved.<h4>Conclusions</h4>The head proteins are cleaved."
)
EPMC_SECTIONS = (
    ("Background", "Proteins of bacteriophage T4 were separated by SDS electrophoresis & stained."),
    ("Results", "At least 28 components were resolved."),
    ("Conclusions", "The head proteins are cleaved."),
)
#: Crossref's JATS abstract of the Bradford work (invented text, real markup: a leading title, sections, inline tags).
JATS = (
    "<jats:title>Abstract</jats:title>"
    "<jats:sec><jats:title>Background</jats:title><jats:p>A dye binds protein within 2 min at 10<jats:sup>4</jats:sup>"
    " <jats:italic>M</jats:italic> sensitivity, p &lt; 0.01.</jats:p></jats:sec>"
    "<jats:sec><jats:title>Methods:</jats:title><jats:p>Coomassie Brilliant Blue G-250 was used.</jats:p></jats:sec>"
)
JATS_SECTIONS = (
    ("Background", "A dye binds protein within 2 min at 104 M sensitivity, p < 0.01."),
    ("Methods", "Coomassie Brilliant Blue G-250 was used."),
)


def join(sections) -> str:
    """The text a page shows, written out here from its documented rule: each heading on a line above its text,
    sections separated by a blank line."""
    return "\n\n".join((f"{h}\n{t}" if h else t) for h, t in sections)


@pytest.fixture()
def sources():
    world = LoopbackSources(
        europepmc={
            "EXT_ID:5432063 AND SRC:MED": [europepmc_record("5432063", "10.1038/227680a0", "Cleavage", EPMC_TEXT)],
            "EXT_ID:942051 AND SRC:MED": [europepmc_record("942051", "10.1006/abio.1976.9999", "A rapid method", None)],
        },
        crossref={
            "10.1006/abio.1976.9999": crossref_work("10.1006/abio.1976.9999", JATS),
            "10.1016/0003-2697(76)90527-3": crossref_work("10.1016/0003-2697(76)90527-3", None),
        },
    )
    yield world
    world.shutdown()


def cascade(openalex_url: str, sources: LoopbackSources, names=("openalex", "europepmc", "crossref"), **kw):
    kw.setdefault("retry_wait_max_s", 0.0)
    return AbstractCascade(
        names, openalex_url=openalex_url, europepmc_url=sources.europepmc_url, crossref_url=sources.crossref_url, **kw
    )


def test_the_cascade_asks_in_order_stops_at_the_first_abstract_and_says_who_answered(openalex_api, sources):
    works = [LME4, LAEMMLI, BRADFORD, LOWRY_DOI_ONLY, NO_IDS, WorkIds("W9", doi="https://doi.org/10.5555/Gone")]
    with cascade(openalex_api.base_url, sources) as c:
        got = c.fetch(works)
        assert c.calls == {"openalex": 1, "europepmc": 4, "crossref": 3}
    # OpenAlex: one batch for all six; its ids give the PMIDs and DOIs the later sources are asked by
    assert [h["filter"] for h in openalex_api.hits] == ["ids.openalex:" + "|".join([*works[:5], "W9"])]
    assert sorted(sources.asked("europepmc")) == sorted(
        [
            "EXT_ID:5432063 AND SRC:MED",  # the PMID wins over the DOI
            "EXT_ID:942051 AND SRC:MED",
            'DOI:"10.1016/0003-2697(76)90527-3"',  # no PMID: by DOI
            'DOI:"10.5555/gone"',  # the DOI the caller gave, bare and in lower case
        ]
    )
    assert all(p["resultType"] == "core" and p["format"] == "json" for p in sources.params)
    # the stop rule: Crossref is not asked for the works Europe PMC or OpenAlex answered, nor for one without a DOI
    assert sorted(sources.asked("crossref")) == sorted(
        ["10.1006/abio.1976.9999", "10.1016/0003-2697(76)90527-3", "10.5555/gone"]
    )

    lme4 = got[LME4]
    assert (lme4.status, lme4.source, lme4.text, lme4.asked) == ("ok", "openalex", LME4_ABSTRACT, (("openalex", "ok"),))
    laemmli = got[LAEMMLI]
    assert (laemmli.status, laemmli.source, laemmli.sections) == ("ok", "europepmc", EPMC_SECTIONS)
    assert laemmli.text == join(EPMC_SECTIONS) and laemmli.pmid == "5432063" and laemmli.doi == "10.1038/227680a0"
    assert laemmli.asked == (("openalex", "none"), ("europepmc", "ok"))
    bradford = got[BRADFORD]
    assert (bradford.status, bradford.source, bradford.sections, bradford.text) == (
        "ok",
        "crossref",
        JATS_SECTIONS,
        join(JATS_SECTIONS),
    )
    assert bradford.asked == (("openalex", "none"), ("europepmc", "none"), ("crossref", "ok"))
    lowry = got[LOWRY_DOI_ONLY]  # Europe PMC has no record, Crossref a record without an abstract
    assert (lowry.status, lowry.why_none, lowry.text, lowry.error) == ("none", "none_had_one", None, None)
    assert lowry.asked == (("openalex", "none"), ("europepmc", "missing"), ("crossref", "none"))
    no_ids = got[NO_IDS]
    assert (no_ids.status, no_ids.why_none) == ("none", "no_ids")
    assert no_ids.asked == (("openalex", "none"), ("europepmc", "no_id"), ("crossref", "no_id"))
    gone = got["W9"]  # no OpenAlex record; Europe PMC has no hit and Crossref answers 404 Resource not found.
    assert (gone.status, gone.why_none, gone.doi) == ("missing", "none_had_one", "10.5555/gone")
    assert gone.asked == (("openalex", "missing"), ("europepmc", "missing"), ("crossref", "missing"))
    assert laemmli.sha256 == hashlib.sha256(join(EPMC_SECTIONS).encode()).hexdigest()


def test_answers_are_cached_in_memory_and_a_work_the_frame_saw_without_one_skips_openalex(openalex_api, sources):
    with cascade(openalex_api.base_url, sources) as c:
        first = c.fetch([WorkIds(BRADFORD, doi="10.1006/abio.1976.9999", pmid="942051", has_abstract=False)])
        assert openalex_api.hits == []  # known from the frame: OpenAlex is not asked again
        assert first[BRADFORD].source == "crossref" and first[BRADFORD].asked[0] == ("openalex", "none")
        again = c.fetch([BRADFORD])
        assert again == first and c.calls == {"openalex": 0, "europepmc": 1, "crossref": 1}  # nothing sent again
        # without a DOI or PMID, OpenAlex is asked for its ids even for such a work
        c.fetch([WorkIds(LAEMMLI, has_abstract=False)])
        assert [h["filter"] for h in openalex_api.hits] == [f"ids.openalex:{LAEMMLI}"]


def test_a_429_with_retry_after_is_honoured_then_answered(sources):
    doi = "10.1006/abio.1976.9999"
    sources.script[("crossref", doi)] = [(429, {"Retry-After": "1"}, '{"status": "error", "message": "rate limit"}')]
    with cascade("http://127.0.0.1:9", sources, ("crossref",), retry_after_max_s=5.0) as c:
        got = c.fetch([WorkIds("W1", doi=doi)])["W1"]
    assert (got.status, got.source, got.sections) == ("ok", "crossref", JATS_SECTIONS)
    (_, _, t1), (_, _, t2) = sources.hits
    assert t2 - t1 >= 0.95  # the server's Retry-After, not the (zero) backoff


def test_a_404_is_no_record_for_crossref_and_a_failure_for_europe_pmc_never_retried(sources):
    sources.script[("europepmc", 'DOI:"10.1/a"')] = [(404, {}, "Not Found")]
    with cascade("http://127.0.0.1:9", sources, ("europepmc", "crossref")) as c:
        got = c.fetch([WorkIds("W1", doi="10.1/a")])["W1"]
    assert got.asked == (("europepmc", "failed"), ("crossref", "missing"))
    assert got.status == "failed" and got.why_none == "fetch_failed"
    assert got.error == "Europe PMC: HTTP 404 from Europe PMC /search (not retried): Not Found"
    assert sources.asked("europepmc") == ['DOI:"10.1/a"'] and sources.asked("crossref") == ["10.1/a"]


def test_5xx_is_retried_to_the_limit_never_cached_and_the_breaker_stops_the_source(sources):
    dois = [f"10.1/w{i}" for i in range(5)]
    for d in dois:
        sources.script[("crossref", d)] = [(503, {}, "down")] * 9
    works = [WorkIds(f"W{i + 1}", doi=d) for i, d in enumerate(dois)]
    with cascade("http://127.0.0.1:9", sources, ("crossref",), max_attempts=3, breaker_after=2, concurrency=1) as c:
        got = c.fetch(works)
        assert c.calls == {"crossref": 6}  # two works, three attempts each; then the breaker is open
        assert [got[w.work_id].status for w in works] == ["failed"] * 5
        assert got["W1"].error == "Crossref: HTTP 503 (gave up after 3 attempts)"
        assert got["W3"].asked == (("crossref", "not_attempted"),)
        assert got["W3"].error.startswith("not attempted: Crossref unreachable (2 asks failed in a row)")
        c.fetch(works[:1])  # a failure is never cached: asked again (the breaker is still open: not attempted)
        assert c.calls == {"crossref": 6}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_with_no_source_reachable_the_cascade_fails_fast_and_says_so():
    dead = f"http://127.0.0.1:{_closed_port()}"
    works = [WorkIds(f"W{i}", doi=f"10.1/{i}") for i in range(1, 41)]
    started = time.monotonic()
    with AbstractCascade(
        ("openalex", "europepmc", "crossref"),
        openalex_url=dead,
        europepmc_url=dead,
        crossref_url=dead,
        retry_wait_max_s=0.05,
        concurrency=4,
    ) as c:
        got = c.fetch(works)
        calls = c.calls
    assert time.monotonic() - started < 10
    assert calls["openalex"] == 3  # one batch, three attempts
    # at most breaker_after + concurrency - 1 asks (of three attempts) start before the breaker opens
    assert 2 * 3 <= calls["europepmc"] <= (2 + 4 - 1) * 3 and 2 * 3 <= calls["crossref"] <= (2 + 4 - 1) * 3
    assert {a.status for a in got.values()} == {"failed"} and {a.why_none for a in got.values()} == {"fetch_failed"}
    assert "OpenAlex: ConnectError" in got["W1"].error
    assert "Europe PMC unreachable" in got["W40"].error and "Crossref unreachable" in got["W40"].error


def test_sources_are_configured_in_order_and_a_bad_name_is_refused(monkeypatch, sources):
    monkeypatch.setenv("METACAN_ABSTRACT_SOURCES", "crossref, europepmc")
    monkeypatch.setenv("METACAN_EUROPEPMC_API_URL", sources.europepmc_url)
    monkeypatch.setenv("METACAN_CROSSREF_API_URL", sources.crossref_url)
    with AbstractCascade(retry_wait_max_s=0) as c:
        assert c.sources == ("crossref", "europepmc") and c.openalex is None
        got = c.fetch([WorkIds(LAEMMLI, doi="10.1006/abio.1976.9999", pmid="5432063")])[LAEMMLI]
    assert got.source == "crossref" and got.asked == (("crossref", "ok"),) and sources.asked("europepmc") == []
    for bad in ("openalex,pubmed", "crossref,crossref"):
        monkeypatch.setenv("METACAN_ABSTRACT_SOURCES", bad)
        with pytest.raises(ValueError, match="METACAN_ABSTRACT_SOURCES"):
            AbstractCascade()


def _record(openalex_dir, wid: str) -> dict:
    """A full published record of a real frame row, under ``wid``."""
    row = {**real_frame_row(openalex_dir), "id": wid}
    return build_record(row, [label_row(wid, "gemma", [])], prediction_row(wid), machine_row(wid), None)


def test_the_page_shows_the_sections_and_a_line_naming_the_source_in_english_and_french(
    openalex_api, sources, openalex_dir
):
    with cascade(openalex_api.base_url, sources) as c:
        got = c.fetch([LAEMMLI, NO_IDS])
    record = _record(openalex_dir, LAEMMLI)
    en = render_work(environment(), record, got[LAEMMLI], CTX)
    for heading, text in EPMC_SECTIONS:
        assert f'<h3 class="abstract-section">{heading}</h3><p>{text.replace("&", "&amp;")}</p>' in en
    assert "Abstract from Europe PMC, fetched live at " in en
    assert "(the sources asked in turn: OpenAlex: no abstract; Europe PMC: abstract)" in en
    fr = render_work(environment(translations("fr")), record, got[LAEMMLI], CTX)
    assert "Résumé fourni par Europe PMC" in fr and "OpenAlex : pas de résumé; Europe PMC : résumé" in fr
    none = render_work(environment(), _record(openalex_dir, NO_IDS), got[NO_IDS], CTX)
    assert "the work has no DOI or PMID by which to ask Europe PMC or Crossref" in none
    assert "Europe PMC: not asked, no DOI or PMID; Crossref: not asked, no DOI or PMID" in none


# ---- the text of an abstract ------------------------------------------------------------------------------------------


def test_jats_and_html_sections_inline_markup_entities_and_the_abstract_label():
    assert markup_sections(JATS) == list(JATS_SECTIONS)
    assert markup_sections(EPMC_TEXT) == list(EPMC_SECTIONS)
    assert markup_sections("<jats:p>H<jats:sub>2</jats:sub>O &amp; CO<sub>2</sub></jats:p><jats:p>Next.</jats:p>") == [
        (None, "H2O & CO2 Next.")
    ]
    # a stray script is dropped, not shown; a heading with nothing under it says nothing
    assert markup_sections("<p>Safe<script>alert(1)</script> text</p><h4>Empty</h4>") == [(None, "Safe text")]
    assert markup_sections("<h2>ABSTRACT:</h2><p>Only text.</p>") == [(None, "Only text.")]
    assert markup_sections("") == [] and markup_sections("<p> </p>") == []


def test_medline_inline_labels_become_sections_only_at_the_start_and_after_a_sentence():
    assert labelled_sections("BACKGROUND: HIV: a review. METHODS AND FINDINGS: We read 12. CONCLUSIONS: It works.") == [
        ("Background", "HIV: a review."),
        ("Methods and findings", "We read 12."),
        ("Conclusions", "It works."),
    ]
    assert labelled_sections("We studied HIV: cohorts. RESULTS: none") == [
        (None, "We studied HIV: cohorts. RESULTS: none")
    ]
    assert markup_sections("OBJECTIVE: To test. DESIGN: Cohort.") == [("Objective", "To test."), ("Design", "Cohort.")]


def test_work_pages_through_dagster_show_europe_pmc_for_a_work_openalex_has_none_of(
    tmp_path, openalex_dir, openalex_api, sources, monkeypatch
):
    import dagster as dg
    import pyarrow as pa

    from metacan_pipeline.definitions import build_resources
    from metacan_pipeline.publish.assets import PagesConfig, work_pages, work_records
    from metacan_pipeline.publish.checks import records_may_ship
    from metacan_pipeline_tests.publish.test_assets import _write_world

    sources.europepmc['DOI:"10.1038/227680a0"'] = sources.europepmc["EXT_ID:5432063 AND SRC:MED"]
    monkeypatch.setenv("METACAN_EUROPEPMC_API_URL", sources.europepmc_url)
    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    wid = _write_world(storage, openalex_dir)
    frame = storage.read_table("frame").to_pylist()
    frame[0].update(has_abstract=False, doi="https://doi.org/10.1038/227680A0")  # the frame saw no abstract
    storage.write_table("frame", pa.Table.from_pylist(frame, schema=storage.read_table("frame").schema))
    config = PagesConfig(openalex_api_url=openalex_api.base_url, abstract_sources="openalex,europepmc")
    result = dg.materialize(
        [work_records, records_may_ship, work_pages],
        resources=resources,
        run_config=dg.RunConfig({"work_pages": config}),
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    page = next((storage.site_dir / "works").glob(f"*/{wid}.html")).read_text()
    for heading, text in EPMC_SECTIONS:
        assert f'<h3 class="abstract-section">{heading}</h3><p>{text.replace("&", "&amp;")}</p>' in page
    assert "Abstract from Europe PMC" in page and "OpenAlex: no abstract; Europe PMC: abstract" in page
    assert openalex_api.hits == [] and sources.asked("europepmc") == ['DOI:"10.1038/227680a0"']
    md = result.asset_materializations_for_node("work_pages")[0].metadata
    assert md["abstract_calls_by_source"].value == {"openalex": 0, "europepmc": 1}
    assert "europepmc" in md["abstracts_by_source"].value
    with storage.connect(read_only=True) as con:
        assert con.execute("SELECT abstract_status FROM page_manifest").fetchall() == [("ok",)]
        tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
        assert "page_manifest" in tables
        for table in tables:  # the abstract is in no table of the warehouse
            text = con.execute(f'SELECT CAST(COLUMNS(*) AS VARCHAR) FROM "{table}"').fetchall()
            assert not any("bacteriophage T4" in (v or "") for row in text for v in row), table
    assert "bacteriophage T4" not in (storage.site_dir / "records" / f"{wid}.json").read_text()
