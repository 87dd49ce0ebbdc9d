"""Study design against MEDLINE on a planted world: which works have a PMID, how NLM indexed each record (by hand,
Curated, Automated, not at all), when, with which publication types, and what each teacher and the student head say
are planted; a loopback E-utilities server answers efetch in NCBI's XML shape. Every count is recomputed here from
the planted rows with this test's own copy of the calendar (intervals from the beta quantiles of the Clopper-Pearson
definition), and the asset runs through Dagster on a real warehouse."""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import time
from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import beta

from metacan_pipeline.audit.medline.agreement import OFFLINE, MedlineGate, gate_verdict
from metacan_pipeline.audit.medline.asset import medline_report_markdown, medline_study_design
from metacan_pipeline.audit.medline.eutils import EutilsClient, MedlineArchive
from metacan_pipeline.audit.medline.measure import frame_pmids, source_pmids
from metacan_pipeline.audit.medline.nlm import (
    AUTOMATED,
    CURATED,
    HAND,
    MEDLINE_CLASSES,
    NOT_INDEXED,
    EfetchAnswerError,
    eligible,
    parse_efetch,
)
from metacan_pipeline.audit.medline.summary import medline_line, medline_markdown
from metacan_pipeline.cli.run_summary import medline_lines
from metacan_pipeline.i18n import translations
from metacan_pipeline.openalex.ids import bare_pmid
from metacan_pipeline.openalex.reader import Record, iter_file
from metacan_pipeline.publish.checks import human_layer_problems
from metacan_pipeline.publish.medline_layer import medline_violations, read_medline_verdicts
from metacan_pipeline.publish.pages import environment, render_work
from metacan_pipeline.publish.records import record_row, schema_violation, ship_violations
from metacan_pipeline.release.bundle import freeze_tables, readme_text
from metacan_pipeline.resources import OpenAlexFiles
from metacan_pipeline.tables.medline import MEDLINE_AGREEMENT_SCHEMA, MEDLINE_RECORDS_SCHEMA
from metacan_pipeline.tables.publish import RECORDS_SCHEMA
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.medline import PT_UI, Citation, LoopbackEutils, efetch_xml
from metacan_pipeline_tests.builders.site import CTX
from metacan_pipeline_tests.builders.teachers import label_row

# ---- the planted world ------------------------------------------------------------------------------------------

N = 40
#: This test's own copy of NLM's calendar (the first year each class's publication type could be assigned).
SINCE = {"randomized_trial": 1990, "observational": 2014, "systematic_review": 2019, "meta_analysis": 1993}
#: The NLM names of each class, as this test knows them.
NAMES = {
    "randomized_trial": {"Randomized Controlled Trial"},
    "observational": {"Observational Study"},
    "systematic_review": {"Systematic Review"},
    "meta_analysis": {"Meta-Analysis"},
    "case_report": {"Case Reports"},
    "qualitative": set(),
}
TYPES_BY_REST = {
    0: ("Randomized Controlled Trial",),
    1: ("Observational Study",),
    2: ("Systematic Review", "Meta-Analysis"),
    3: ("Case Reports",),
}
DESIGN_BY_REST = {0: "randomized_trial", 1: "observational", 2: "systematic_review", 3: "case_report"}


def wid(i: int) -> str:
    return f"W{500 + i}"


def pmid(i: int) -> str | None:
    return str(31000 + i) if i < 36 else None  # works 36-39 have no PMID; 35's is unknown to NCBI


def citation(i: int) -> Citation:
    method = {5: "Curated", 6: "Automated"}.get(i % 7)
    completed = 2012 if i < 6 else (2016 if i < 12 else 2021)
    types = TYPES_BY_REST[i % 4] + (("Review",) if i % 9 == 0 else ())
    return Citation(
        pmid(i),
        types,
        completed=None if i == 34 else completed,
        published=2020,
        method=method,
        status="PubMed-not-MEDLINE" if i == 33 else "MEDLINE",
    )


CITATIONS = {pmid(i): citation(i) for i in range(35)}


def gemma_design(i: int) -> str:
    return "qualitative" if i % 5 == 0 else DESIGN_BY_REST[i % 4]


def codex_design(i: int) -> str | None:
    return "observational" if i % 2 == 0 else None


def student_design(i: int) -> str:
    return "randomized_trial" if i % 2 == 0 else "case_report"


SOURCES = {
    "teacher:gemma": {wid(i): gemma_design(i) for i in range(N)},
    "teacher:codex": {wid(i): codex_design(i) for i in range(N) if codex_design(i)},
    "student:gemma": {wid(i): student_design(i) for i in range(N)},
}


def group_of(i: int) -> str:
    if i == 33:
        return NOT_INDEXED
    return {5: CURATED, 6: AUTOMATED}.get(i % 7, HAND)


def year_of(i: int) -> int:
    return 2020 if i == 34 else (2012 if i < 6 else (2016 if i < 12 else 2021))


def expected_counts(design: str, source: str, group: str) -> tuple[int, int, int, int]:
    """``(tp, fp, fn, tn)`` from the planted rows alone."""
    tp = fp = fn = tn = 0
    for i in range(35):  # works with a MEDLINE record
        work = wid(i)
        if work not in SOURCES[source] or group_of(i) != group or not NAMES[design]:
            continue
        if design in SINCE and year_of(i) < SINCE[design]:
            continue
        truth = bool(NAMES[design] & set(TYPES_BY_REST[i % 4]))
        call = SOURCES[source][work] == design
        tp += truth and call
        fp += call and not truth
        fn += truth and not call
        tn += not truth and not call
    return tp, fp, fn, tn


def exact_lower(k: int, n: int) -> float | None:
    if n == 0:
        return None
    return 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))


def write_openalex(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    for i in range(N):
        ids = {"openalex": f"https://openalex.org/{wid(i)}"}
        if pmid(i):
            ids["pmid"] = f"https://pubmed.ncbi.nlm.nih.gov/{pmid(i)}"
        results.append({"id": f"https://openalex.org/{wid(i)}", "ids": ids, "title": f"Work {i}"})
    (folder / "works.json").write_text(json.dumps({"meta": {"count": N}, "results": results}))


def plant(storage, tmp_path: Path) -> OpenAlexFiles:
    folder = tmp_path / "openalex"
    write_openalex(folder)
    locators = {
        item.data["id"].rsplit("/", 1)[-1]: item.locator
        for item in iter_file(folder / "works.json", source="works.json")
        if isinstance(item, Record)
    }
    frame = [{"id": wid(i), "source_file": "works.json", "source_locator": locators[wid(i)]} for i in range(N)]
    storage.write_table("frame", pa.Table.from_pylist(frame))
    for teacher in ("gemma", "codex"):
        rows = [
            {**label_row(wid(i), teacher, []), "study_design": d, "label_id": f"{teacher}-{i}"}
            for i in range(N)
            if (d := SOURCES[f"teacher:{teacher}"].get(wid(i)))
        ]
        failed = {**label_row(wid(1), teacher, [], status="failed"), "study_design": None, "label_id": f"{teacher}-x"}
        storage.write_table(f"direct_labels_{teacher}", pa.Table.from_pylist([*rows, failed], schema=LABELS_SCHEMA))
    preds = [{"id": wid(i), "study_design_gemma": student_design(i)} for i in range(N)]
    storage.write_table("predictions", pa.Table.from_pylist(preds))
    return OpenAlexFiles(input_dirs=[str(folder)])


GATE = {"min_n": 4, "min_positives": 2, "precision_lower": 0.2, "recall_lower": 0.2, "batch_size": 10}


def run(storage, openalex, config=None) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [medline_study_design],
        resources={"storage": storage, "openalex": openalex},
        run_config={"ops": {"medline_study_design": {"config": config or GATE}}},
    )


@pytest.fixture()
def eutils(monkeypatch):
    server = LoopbackEutils(CITATIONS)
    monkeypatch.setenv("METACAN_EUTILS_URL", server.base_url)
    monkeypatch.setenv("METACAN_NCBI_EMAIL", "team@example.org")
    monkeypatch.delenv("NCBI_API_KEY", raising=False)
    yield server
    server.shutdown()


# ---- the answer and the calendar -----------------------------------------------------------------------------


def test_parse_efetch_reads_status_indexing_method_years_and_types():
    xml = efetch_xml(
        [
            Citation("1", ("Randomized Controlled Trial",), completed=2015, published=2014),
            Citation("2", ("Observational Study",), method="Curated"),
            Citation("3", ("Systematic Review", "Meta-Analysis"), method="Automated"),
            Citation("4", (), completed=None, published=2023, status="PubMed-not-MEDLINE"),
        ]
    )
    records = {r.pmid: r for r in parse_efetch(xml)}
    assert [records[p].indexing for p in "1234"] == [HAND, CURATED, AUTOMATED, NOT_INDEXED]
    assert records["1"].indexing_method is None and records["2"].indexing_method == "Curated"
    assert (records["1"].year_completed, records["1"].year_published, records["1"].year) == (2015, 2014, 2015)
    assert (records["4"].year_completed, records["4"].year) == (None, 2023)
    assert records["3"].publication_types == ("Journal Article", "Systematic Review", "Meta-Analysis")
    assert records["3"].publication_type_uis == (PT_UI["Journal Article"], "D000078182", "D017418")


def test_an_answer_that_is_not_a_pubmed_article_set_is_refused():
    with pytest.raises(EfetchAnswerError, match="not XML"):
        parse_efetch("<html><body>Bad gateway")
    with pytest.raises(EfetchAnswerError, match=r"<eFetchResult>, not a <PubmedArticleSet>"):
        parse_efetch("<eFetchResult><ERROR>Empty id list</ERROR></eFetchResult>")


@pytest.mark.parametrize(
    ("design", "year", "is_data"),
    [
        ("observational", 2013, False),
        ("observational", 2014, True),
        ("systematic_review", 2018, False),
        ("systematic_review", 2019, True),
        ("meta_analysis", 1992, False),
        ("randomized_trial", 1990, True),
        ("case_report", None, True),
        ("observational", None, False),
        ("qualitative", 2024, False),  # NLM has no qualitative publication type: never data
    ],
)
def test_calendar_eligibility(design, year, is_data):
    assert eligible(design, year) is is_data


def test_bare_pmid():
    assert bare_pmid("https://pubmed.ncbi.nlm.nih.gov/31000") == "31000"
    assert bare_pmid(31000) == "31000"
    assert [bare_pmid(v) for v in ("", "pmid", None, True, "12a", 0, "000", "١٢٣")] == [None] * 8
    assert bare_pmid("  00123/ ") == bare_pmid("00123") == "123"


# ---- the gate ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "tp", "fp", "fn", "passed", "why"),
    [
        (29, 20, 0, 0, False, "29 eligible hand-indexed records, fewer than the minimum of 30"),
        (60, 9, 0, 0, False, "9 NLM positives, fewer than the minimum of 10"),
        (60, 12, 2, 1, False, "lower bounds precision"),  # point precision 0.86, lower bound about 0.57
        (200, 80, 2, 3, True, "agrees with MEDLINE on 200 hand-indexed records"),
    ],
)
def test_gate_is_on_the_lower_bound_with_a_minimum_n(n, tp, fp, fn, passed, why):
    gate = MedlineGate(min_n=30, min_positives=10, precision_lower=0.80, recall_lower=0.70)
    got, reason = gate_verdict("randomized_trial", n, tp, fp, fn, gate)
    assert got is passed and why in reason
    p_low, r_low = exact_lower(tp, tp + fp), exact_lower(tp, tp + fn)
    assert (p_low >= 0.80 and r_low >= 0.70 and n >= 30 and tp + fn >= 10) is passed
    if passed:
        assert f"lower bound {p_low:.2f} on precision, {r_low:.2f} on recall" in reason


def test_a_class_without_an_nlm_type_never_passes():
    assert gate_verdict("qualitative", 500, 200, 0, 0, MedlineGate()) == (
        False,
        "no reference: NLM has no publication type for this class",
    )


# ---- the asset on the planted world ----------------------------------------------------------------------------


def test_asset_measures_each_class_against_hand_indexed_records(storage, tmp_path, monkeypatch, eutils):
    openalex = plant(storage, tmp_path)
    monkeypatch.setenv("METACAN_MEDLINE", "fetch")
    result = run(storage, openalex)
    assert result.success
    # 36 PMIDs in batches of 10: four requests, each with db, retmode, tool and email as NCBI asks
    assert len(eutils.hits) == 4
    assert all(h["db"] == "pubmed" and h["retmode"] == "xml" for h in eutils.hits)
    assert all(h["tool"] == "metacan_pipeline" and h["email"] == "team@example.org" for h in eutils.hits)
    assert "api_key" not in eutils.hits[0]
    assert sorted(p for h in eutils.hits for p in h["id"].split(",")) == sorted(p for i in range(36) if (p := pmid(i)))

    records = {r["id"]: r for r in storage.read_table("medline_records").to_pylist()}
    assert storage.read_table("medline_records").schema.names == MEDLINE_RECORDS_SCHEMA.names
    assert set(records) == {wid(i) for i in range(36)}
    assert records[wid(35)]["answer"] == "no_record"
    assert records[wid(33)]["indexing"] == NOT_INDEXED
    assert (records[wid(5)]["indexing"], records[wid(5)]["indexing_method"]) == (CURATED, "Curated")
    assert (records[wid(34)]["year"], records[wid(0)]["year"]) == (2020, 2012)

    table = storage.read_table("medline_study_design")
    assert table.schema.names == MEDLINE_AGREEMENT_SCHEMA.names
    rows = {(r["design"], r["source"], r["indexing"]): r for r in table.to_pylist()}
    assert set(rows) == {(d, s, g) for d in MEDLINE_CLASSES for s in SOURCES for g in (HAND, CURATED, AUTOMATED)}
    for (design, source, group), r in rows.items():
        tp, fp, fn, tn = expected_counts(design, source, group)
        assert (r["true_positive"], r["false_positive"], r["false_negative"], r["true_negative"]) == (tp, fp, fn, tn)
        assert r["n"] == tp + fp + fn + tn
        assert (
            r["precision_lower"] == pytest.approx(exact_lower(tp, tp + fp), abs=1e-9, nan_ok=True)
            if tp + fp
            else (r["precision_lower"] is None)
        )
        assert r["agreement_lower"] == (
            pytest.approx(exact_lower(tp + tn, tp + fp + fn + tn)) if tp + fp + fn + tn else None
        )
        if group == HAND:
            n, pos = tp + fp + fn + tn, tp + fn
            p_low, r_low = exact_lower(tp, tp + fp), exact_lower(tp, tp + fn)
            expected_pass = bool(
                NAMES[design] and n >= 4 and pos >= 2 and p_low is not None and p_low >= 0.2 and r_low >= 0.2
            )
            assert r["passed"] is expected_pass, (design, source, r["gate"])
        else:
            assert r["passed"] is None and r["reference_kind"] == f"agreement with another machine (NLM {group})"
    # the planted world makes both outcomes happen, and the calendar bites: works 0-5 (2012) are no observational data
    assert rows[("case_report", "teacher:gemma", HAND)]["passed"] is True
    assert rows[("qualitative", "teacher:gemma", HAND)]["passed"] is False
    obs = rows[("observational", "teacher:codex", HAND)]
    assert obs["n"] == sum(1 for i in range(6, 33) if i % 2 == 0 and group_of(i) == HAND)

    md = result.asset_materializations_for_node("medline_study_design")[0].metadata
    assert md["mode"].value == "fetch" and md["medline_records"].value == 35
    assert md["records_by_indexing"].value == dict(Counter(group_of(i) for i in range(35)))
    assert '*case_report* (NLM: "Case Reports"; eligible every year)' in md["study_design_medline"].value
    passing = {d: [s for s in SOURCES if rows[(d, s, HAND)]["passed"]] for d in MEDLINE_CLASSES}
    top = max(r["n"] for r in rows.values() if r["indexing"] == HAND)
    with storage.connect(read_only=True) as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        assert medline_lines(con, views) == [
            f"study design vs MEDLINE (hand-indexed, up to n = {top}): "
            + ", ".join(f"{d} {'+'.join(passing[d]) or 'unvalidated'}" for d in MEDLINE_CLASSES)
        ]
    assert "agrees with MEDLINE on" in medline_report_markdown(storage)


def test_answers_are_archived_and_a_second_run_buys_nothing(storage, tmp_path, monkeypatch, eutils):
    openalex = plant(storage, tmp_path)
    monkeypatch.setenv("METACAN_MEDLINE", "fetch")
    assert run(storage, openalex).success
    first = storage.read_table("medline_study_design").drop(["run_id", "computed_at"]).to_pylist()
    sent = len(eutils.hits)
    files = sorted((storage.root / "medline_archive" / "efetch").glob("*.json.gz"))
    assert len(files) == 4
    envelope = json.loads(gzip.decompress(files[0].read_bytes()))
    assert envelope["request"]["params"] == {"db": "pubmed", "retmode": "xml"}
    assert envelope["payload"].lstrip().startswith("<?xml")

    assert run(storage, openalex).success  # fetch again: every PMID is answered already (35 records, 1 without)
    assert len(eutils.hits) == sent
    monkeypatch.setenv("METACAN_MEDLINE", "replay")
    eutils.shutdown()  # replay needs no server
    assert run(storage, openalex).success
    assert storage.read_table("medline_study_design").drop(["run_id", "computed_at"]).to_pylist() == first


def test_the_bound_caps_the_pmids_one_run_asks_for(storage, tmp_path, monkeypatch, eutils):
    openalex = plant(storage, tmp_path)
    monkeypatch.setenv("METACAN_MEDLINE", "fetch")
    monkeypatch.setenv("METACAN_MEDLINE_MAX_PMIDS", "12")
    assert run(storage, openalex).success
    asked = [p for h in eutils.hits for p in h["id"].split(",")]
    assert sorted(asked) == sorted(pmid(i) for i in range(12))  # the twelve smallest PMIDs, in two requests
    assert len(eutils.hits) == 2
    answers = [r["answer"] for r in storage.read_table("medline_records").to_pylist()]
    assert answers.count("not_asked") == 24
    assert run(storage, openalex).success  # the next run asks for the next twelve only
    assert sorted(p for h in eutils.hits[2:] for p in h["id"].split(",")) == sorted(pmid(i) for i in range(12, 24))


def test_default_replay_with_no_archive_finishes_fast_and_says_offline(storage, tmp_path, monkeypatch, eutils):
    openalex = plant(storage, tmp_path)
    monkeypatch.delenv("METACAN_MEDLINE", raising=False)
    started = time.monotonic()
    result = run(storage, openalex)
    assert result.success and time.monotonic() - started < 30
    assert eutils.hits == []
    rows = storage.read_table("medline_study_design").to_pylist()
    assert rows and all(r["gate"].startswith(OFFLINE) and r["n"] == 0 for r in rows)
    assert all(r["passed"] is False for r in rows if r["indexing"] == HAND)
    md = result.asset_materializations_for_node("medline_study_design")[0].metadata
    assert md["status"].value == OFFLINE and md["frame_works_with_pmid"].value == 36
    assert "(no MEDLINE answers (offline))" in medline_line(storage.read_table("medline_study_design").to_pandas())


def test_off_measures_nothing(storage, tmp_path, monkeypatch, eutils):
    openalex = plant(storage, tmp_path)
    monkeypatch.setenv("METACAN_MEDLINE", "off")
    assert run(storage, openalex).success
    assert storage.read_table("medline_study_design").num_rows == 0 and eutils.hits == []


@pytest.mark.parametrize(
    ("env", "config", "message"),
    [
        ({"METACAN_MEDLINE": "sometimes"}, {}, "METACAN_MEDLINE='sometimes' must be one of replay, fetch, off"),
        ({"METACAN_MEDLINE_MAX_PMIDS": "-1"}, {}, "METACAN_MEDLINE_MAX_PMIDS='-1' must be a whole number"),
        (
            {"METACAN_MEDLINE": "fetch", "METACAN_EUTILS_URL": "eutils.local"},
            {},
            "METACAN_EUTILS_URL='eutils.local' is not an absolute http(s) URL",
        ),
        ({}, {"precision_lower": 1.5}, "MEDLINE gate: precision_lower must lie in [0, 1], got 1.5"),
        ({}, {"batch_size": 500}, "batch_size must be 1..200 PMIDs per efetch request, got 500"),
    ],
)
def test_a_bad_setting_fails_before_any_request_naming_it(storage, tmp_path, monkeypatch, env, config, message):
    openalex = plant(storage, tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(dg.Failure) as raised:
        run(storage, openalex, {**GATE, **config})
    assert message in raised.value.description
    assert not storage.has_table("medline_study_design")


# ---- the client: retries, pace, the key -------------------------------------------------------------------------


def client(server: LoopbackEutils, tmp_path: Path, **kw) -> tuple[EutilsClient, list[float]]:
    """A client whose clock jumps 10 s a reading (so NCBI's pace never waits) and whose waits are recorded."""
    waits: list[float] = []
    ticks = itertools.count()
    return (
        EutilsClient(
            server.base_url,
            MedlineArchive(tmp_path / "archive"),
            sleep=waits.append,
            clock=lambda: 10.0 * next(ticks),
            **kw,
        ),
        waits,
    )


def test_429_and_5xx_are_retried_honouring_retry_after(tmp_path):
    server = LoopbackEutils(CITATIONS, failures=[429, 503])
    try:
        c, waits = client(server, tmp_path, max_attempts=3)
        with c:
            outcome = c.fetch(["31000", "31001"])
    finally:
        server.shutdown()
    assert (outcome.requests, outcome.answered, outcome.failed_batches) == (3, 2, 0)
    assert waits == [0.0, 1.0]  # Retry-After: 0, then the second backoff step (0.5 x 2)
    assert set(MedlineArchive(tmp_path / "archive").answers()) == {"31000", "31001"}


def test_failed_batches_stop_after_the_breaker_and_are_never_archived(tmp_path):
    server = LoopbackEutils(CITATIONS, failures=[500] * 10)
    try:
        c, _ = client(server, tmp_path, max_attempts=2, batch_size=1)
        with c:
            outcome = c.fetch(["31000", "31001", "31002"])
    finally:
        server.shutdown()
    assert (outcome.requests, outcome.answered, outcome.failed_batches) == (4, 0, 3)
    assert "HTTP 500" in outcome.errors[0] and "after 2 attempts" in outcome.errors[0]
    assert "E-utilities unreachable" in outcome.errors[2]
    assert MedlineArchive(tmp_path / "archive").answers() == {}


def test_requests_keep_ncbi_pace_without_and_with_a_key(tmp_path):
    server = LoopbackEutils(CITATIONS)
    try:
        for key, interval in (("", 1 / 3), ("k" * 36, 1 / 10)):
            now = [100.0]
            waits: list[float] = []
            c = EutilsClient(
                server.base_url,
                MedlineArchive(tmp_path / f"a{len(key)}"),
                api_key=key,
                batch_size=1,
                sleep=lambda s, w=waits, t=now: (w.append(s), t.__setitem__(0, t[0] + s)),
                clock=lambda t=now: t[0],
            )
            with c:
                c.fetch(["31000", "31001", "31002"])
            assert waits == pytest.approx([interval, interval])
    finally:
        server.shutdown()


def test_the_api_key_is_sent_but_never_logged_archived_or_in_an_error(tmp_path, caplog):
    key = "ncbi-key-0123456789abcdef0123456789ab"
    server = LoopbackEutils(CITATIONS, failures=[400])
    caplog.set_level(logging.DEBUG)
    try:
        c, _ = client(server, tmp_path, api_key=key, batch_size=1)
        with c:
            outcome = c.fetch(["31000", "31001"])
    finally:
        server.shutdown()
    assert [h["api_key"] for h in server.hits] == [key, key]
    assert outcome.failed_batches == 1 and "HTTP 400" in outcome.errors[0]
    assert key not in caplog.text and key not in " ".join(outcome.errors)
    for f in (tmp_path / "archive").rglob("*"):
        if f.is_file():
            assert key.encode() not in gzip.decompress(f.read_bytes())


def test_markdown_names_the_reference_and_the_machines():
    table = pa.Table.from_pylist([], schema=MEDLINE_AGREEMENT_SCHEMA).to_pandas()
    assert "_(nothing measured)_" in medline_markdown(table, OFFLINE)
    assert medline_line(table) is None


# ---- records and pages ------------------------------------------------------------------------------------------


def test_records_mark_study_design_labels_by_the_medline_gate_and_never_validate_them(
    storage, tmp_path, monkeypatch, eutils, openalex_dir
):
    openalex = plant(storage, tmp_path)
    monkeypatch.setenv("METACAN_MEDLINE", "fetch")
    assert run(storage, openalex).success
    verdicts = read_medline_verdicts(storage)
    assert set(verdicts) == {(d, s) for d in MEDLINE_CLASSES for s in SOURCES}
    hand = {
        (r["design"], r["source"]): r
        for r in storage.read_table("medline_study_design").to_pylist()
        if r["indexing"] == HAND
    }
    assert verdicts[("case_report", "teacher:gemma")]["passed"] is True
    assert verdicts[("qualitative", "teacher:gemma")]["passed"] is False

    work = real_frame_row(openalex_dir)
    labels = [
        {**label_row(work["id"], "gemma", ["metaresearch"]), "study_design": "case_report"},
        {**label_row(work["id"], "codex", []), "study_design": "qualitative"},
    ]
    row = {"work": work, "labels": labels, "pred": None, "machine": None, "lineage": {}}
    record = json.loads(record_row(row, medline=verdicts)["record_json"])
    lineage = {
        **dict.fromkeys(("frame_build_id", "frame_run_id", "part_run_id", "student_run_id"), "r"),
        **{"input_kind": "input_file", "source_file": "f.json", "source_locator": "payload.results[0]"},
        **{"entity_list_versions": "funder=f", "lexicon_version": "l", "teacher_calls": []},
        **{"model_version": "metacan-v0-hybrid-000000000000", "machine_round": 1, "machine_scores_run_id": "r"},
        "machine_validation_status": "score_only:mature",
    }
    shipped = json.loads(json.dumps({**record, "lineage": lineage}))
    assert schema_violation(shipped) is None and ship_violations(shipped) == []
    by_teacher = {label["teacher"]: label for label in record["direct_labels"]}
    cr = hand[("case_report", "teacher:gemma")]
    assert by_teacher["gemma"]["study_design_medline"] == {
        "status": "agrees_with_medline",
        "n": cr["n"],
        "precision_lower": cr["precision_lower"],
        "recall_lower": cr["recall_lower"],
    }
    assert by_teacher["codex"]["study_design_medline"] == {
        "status": "unvalidated",
        "reason": hand[("qualitative", "teacher:codex")]["gate"],
    }
    # the blocking check refuses an "agrees" that no passing MEDLINE row stands behind; "unvalidated" claims nothing
    assert medline_violations(record, verdicts) == []
    forged = json.loads(json.dumps(record))
    forged["direct_labels"][0]["study_design_medline"] = {"status": "agrees_with_medline", "n": 99}
    assert forged["direct_labels"][0]["teacher"] == "codex"
    problem = (
        f"{work['id']}: teacher:codex's study design qualitative says it agrees with MEDLINE, but the newest MEDLINE "
        "gate row of that class and teacher did not pass"
    )
    assert medline_violations(forged, verdicts) == [problem]
    rows = [{"id": r["id"], "record_json": json.dumps(r), "record_hash": "h"} for r in (forged,)]
    storage.write_table("work_records", pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA))
    assert human_layer_problems(storage) == (1, [problem])
    # the MEDLINE gate only takes a claim away: every label stays an unvalidated direct label
    assert {label["label_status"] for label in record["direct_labels"]} == {"direct_label_unvalidated"}
    assert "human_validation" not in record
    # no MEDLINE measurement: the record is the one built before (byte-identical)
    assert record_row(row, medline={})["record_json"] == record_row(row)["record_json"]
    assert "study_design_medline" not in record_row(row)["record_json"]

    html = render_work(environment(), record, None, CTX)
    assert (
        f"Study design <code>case_report</code>: agrees with MEDLINE on {cr['n']} hand-indexed records "
        f"(lower bound {cr['precision_lower']:.3f})." in html
    )
    assert "unvalidated against MEDLINE (no reference: NLM has no publication type for this class)" in html
    html_fr = render_work(environment(translations("fr")), record, None, CTX)
    assert f"concorde avec MEDLINE sur {cr['n']} notices indexées à la main" in html_fr
    assert "non validé par MEDLINE" in html_fr


def test_a_release_freezes_the_medline_table_without_its_run_columns(storage, tmp_path, monkeypatch, eutils):
    openalex = plant(storage, tmp_path)
    monkeypatch.setenv("METACAN_MEDLINE", "fetch")
    assert run(storage, openalex).success
    storage.write_table("machine_scores", pa.table({"id": pa.array([], pa.string())}))
    folder = tmp_path / "bundle"
    counts = freeze_tables(storage, ["direct_labels_gemma", "direct_labels_codex"], folder)
    frozen = pq.read_table(folder / "tables" / "medline_study_design.parquet")
    assert frozen.schema.names == [n for n in MEDLINE_AGREEMENT_SCHEMA.names if n not in ("run_id", "computed_at")]
    assert counts["medline_study_design"] == len(MEDLINE_CLASSES) * len(SOURCES) * 3
    keys = [(r["design"], r["source"], r["indexing"]) for r in frozen.to_pylist()]
    assert keys == sorted(keys)
    readme = readme_text("v-test", folder)
    assert "| `tables/medline_study_design.parquet` | one study_design class" in readme
    assert "the reference being the records NLM indexed by hand" in readme


def test_pmids_come_from_the_source_records_or_a_pmid_column(storage, tmp_path):
    folder = tmp_path / "openalex"
    write_openalex(folder)
    files = OpenAlexFiles(input_dirs=[str(folder)])
    locator = next(i.locator for i in iter_file(folder / "works.json", source="works.json") if isinstance(i, Record))
    pointers = [(wid(0), "works.json", locator), (wid(1), "gone.json", locator)]
    assert source_pmids(files.path_of, pointers) == {wid(0): pmid(0)}  # a file gone since ingestion gives none

    def never(source_file):
        raise AssertionError(f"{source_file} read although the frame has a pmid column")

    storage.write_table(
        "frame", pa.table({"id": ["W1", "W2", "W3"], "pmid": ["https://pubmed.ncbi.nlm.nih.gov/7", None, "x"]})
    )
    assert frame_pmids(storage, never) == {"W1": "7"}


def test_fetch_with_ncbi_unreachable_finishes_and_says_so(storage, tmp_path, monkeypatch):
    openalex = plant(storage, tmp_path)
    server = LoopbackEutils(CITATIONS)
    server.shutdown()  # the port is closed: every connection is refused
    monkeypatch.setenv("METACAN_EUTILS_URL", server.base_url)
    monkeypatch.setenv("METACAN_MEDLINE", "fetch")
    started = time.monotonic()
    result = run(storage, openalex)
    assert result.success and time.monotonic() - started < 60
    md = result.asset_materializations_for_node("medline_study_design")[0].metadata
    errors = md["efetch_errors"].value
    assert md["efetch_requests_this_run"].value == 8  # two batches of four attempts, then the breaker
    assert "ConnectError" in errors[0] and "E-utilities unreachable" in errors[-1] and len(errors) == 4
    assert md["status"].value.startswith("no MEDLINE answers (fetch failed: 10 PMIDs from 31000: ConnectError")
    assert MedlineArchive(storage.root / "medline_archive").answers() == {}
