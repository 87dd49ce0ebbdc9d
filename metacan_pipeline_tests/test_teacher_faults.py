"""Faults against a real OpenAI-compatible server (the stub, a subprocess) through the whole labelling path:
bad replies, a 429 burst, the server killed mid-run, and the labelling process killed with SIGKILL.
Nothing is lost, nothing fabricated, every failure is stored with its cause, no finished call is bought twice."""

import logging
import os
import signal
import subprocess
import sys
import time

import duckdb
import httpx
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.teachers.labelling import export_labels, label_works
from metacan_pipeline.teachers.registry import TeacherSpec

from .stub_teacher import run_stub

LOG = logging.getLogger("test")


def frame_rows(n: int, faults: dict[int, str] | None = None) -> list[dict]:
    faults = faults or {}
    return [
        {
            "id": f"W{1000 + i}",
            "title_text": f"Study {i} of research practice" + (f" FAULT:{faults[i]}" if i in faults else ""),
            "publication_year": 2020,
            "language": "en",
            "type": "article",
            "venue_name": None,
            "topic": None,
            "field": None,
            "in_sampling_frame": True,
            "sampling_frame_exclusion": None,
            "has_abstract": False,
        }
        for i in range(n)
    ]


def spec_for(url: str, **kw) -> TeacherSpec:
    base = {
        "name": "stub",
        "base_url": url,
        "model": "stub-teacher",
        "works_per_call": 4,
        "concurrency": 4,
        "structured_output": "json_schema",
        "system_role": "yes",
        "max_transport_attempts": 2,
        "price_input_per_1k": 0.001,
        "price_output_per_1k": 0.002,
    }
    return TeacherSpec(**{**base, **kw})


def stub_calls(url: str) -> int:
    return httpx.get(url.removesuffix("/v1") + "/stats").json()["calls"]


def store(tmp_path):
    return duckdb.connect(str(tmp_path / "metacan.duckdb"), read_only=True)


FAULTS = {1: "malformed", 6: "truncated", 9: "wrong_id", 14: "missing_id", 17: "oov", 22: "empty", 25: "refusal"}
CAUSES = {
    "malformed": "reply is not valid JSON",
    "truncated": "reply cut at max_tokens",
    "wrong_id": "reply ids differ from the request",
    "missing_id": "missing ['W10",
    "oov": "genre='novel'",
    "empty": "empty reply",
    "refusal": "refusal: I can't help with that",
}


def test_bad_replies_fail_alone_with_their_cause_and_nothing_is_fabricated(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(28, FAULTS)
    with run_stub() as (url, _):
        spec = spec_for(url)
        stats = label_works(storage, spec, rows, run_id="r1", log=LOG, base_url=lambda: url)
        served = stub_calls(url)
    export_labels(storage, spec, stats.view_hashes)
    con = store(tmp_path)
    labels = {
        r[0]: r[1:] for r in con.execute("SELECT work_id, status, error, categories FROM direct_labels_stub").fetchall()
    }
    assert len(labels) == 28
    for i, row in enumerate(rows):
        status, error, categories = labels[row["id"]]
        if i in FAULTS:
            assert status == "failed" and categories is None and CAUSES[FAULTS[i]] in error, (i, error)
        else:
            assert status == "labelled" and error is None, (i, error)
    # every call the server saw is stored with its cost once; every failed call has its cause
    n_calls, cost, no_cause = con.execute(
        "SELECT count(*), sum(cost_usd), count(*) FILTER (http_status = 200 AND error IS NULL "
        "AND call_id NOT IN (SELECT call_id FROM teacher_labels)) FROM teacher_calls"
    ).fetchone()
    assert n_calls == served == stats.calls and no_cause == 0
    assert cost == pytest.approx(stats.cost_usd) and cost > 0
    # a faulty work ends asked alone three times; a clean work of a failing half is asked alone once at most
    alone = dict(
        con.execute("SELECT work_ids[1], count(*) FROM teacher_calls WHERE n_works = 1 GROUP BY ALL").fetchall()
    )
    assert {w: c for w, c in alone.items() if c == 3} == {rows[i]["id"]: 3 for i in FAULTS} and set(alone.values()) <= {
        1,
        3,
    }
    # and every clean work's label comes from exactly one call that answered for it
    sources = con.execute(
        "SELECT count(DISTINCT call_id), count(*) FROM teacher_labels WHERE status = 'labelled'"
    ).fetchone()
    assert sources[1] == 28 - len(FAULTS)


def test_a_429_burst_is_waited_out(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path))
    with run_stub(burst_429=5) as (url, _):
        stats = label_works(
            storage,
            spec_for(url, max_transport_attempts=8, concurrency=1),
            frame_rows(8),
            run_id="r1",
            log=LOG,
            base_url=lambda: url,
        )
    assert stats.outcomes == {"labelled": 8}
    statuses = (
        store(tmp_path).execute("SELECT http_status, count(*) FROM teacher_calls GROUP BY ALL ORDER BY ALL").fetchall()
    )
    assert statuses == [(200, 2), (429, 5)]


def test_a_server_killed_mid_run_leaves_unavailable_failures_that_the_next_run_asks_again(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(40)
    with run_stub(latency_ms=150) as (url, proc):
        spec = spec_for(url, concurrency=2)
        import threading

        def killer():
            while stub_calls(url) < 4:
                time.sleep(0.02)
            os.killpg(proc.pid, signal.SIGKILL)

        t = threading.Thread(target=killer)
        t.start()
        first = label_works(storage, spec, rows, run_id="r1", log=LOG, base_url=lambda: url)
        t.join()
    assert first.outcomes["labelled"] >= 8 and first.outcomes["failed"] > 0
    assert set(first.failures) == {"endpoint unavailable after 2 attempts"}
    labelled_first = first.outcomes["labelled"]
    with run_stub() as (url2, _):
        second = label_works(storage, spec_for(url2), rows, run_id="r2", log=LOG, base_url=lambda: url2)
    assert (
        second.reused == labelled_first
        and second.sent == 40 - labelled_first
        and second.outcomes == {"labelled": 40 - labelled_first}
    )
    con = store(tmp_path)
    # no work was labelled twice, none was lost
    per_work = con.execute(
        "SELECT work_id, count(*) FILTER (status = 'labelled') FROM teacher_labels GROUP BY ALL"
    ).fetchall()
    assert len(per_work) == 40 and {c for _, c in per_work} == {1}


KILL_SCRIPT = """
import json, logging, sys
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.teachers.labelling import label_works
from metacan_pipeline_tests.test_teacher_faults import frame_rows, spec_for
url, data = sys.argv[1], sys.argv[2]
label_works(MetacanStorage(data_dir=data), spec_for(url, concurrency=2, works_per_call=2), frame_rows(60), run_id="killed",
            log=logging.getLogger("x"), base_url=lambda: url)
print("finished", flush=True)
"""


def test_a_labelling_process_killed_with_sigkill_resumes_without_buying_a_finished_call_twice(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with run_stub(latency_ms=100) as (url, _):
        child = subprocess.Popen(
            [sys.executable, "-c", KILL_SCRIPT, url, str(tmp_path)], cwd=repo, stdout=subprocess.PIPE, text=True
        )
        while stub_calls(url) < 8:
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()
        served_before = stub_calls(url)
        resumed = label_works(
            storage,
            spec_for(url, concurrency=2, works_per_call=2),
            frame_rows(60),
            run_id="resumed",
            log=LOG,
            base_url=lambda: url,
        )
        served_total = stub_calls(url)
    # the killed run's archive was replayed first: its finished calls were not asked again
    assert resumed.recovered["files"] == 1 and resumed.recovered["calls"] >= 6
    con = store(tmp_path)
    killed_works = {
        r[0]
        for r in con.execute(
            "SELECT unnest(work_ids) FROM teacher_calls WHERE run_id = 'killed' AND error IS NULL"
        ).fetchall()
    }
    resumed_works = {
        r[0] for r in con.execute("SELECT unnest(work_ids) FROM teacher_calls WHERE run_id = 'resumed'").fetchall()
    }
    assert killed_works and not (killed_works & resumed_works)
    assert resumed.reused == len(killed_works) and resumed.sent == 60 - len(killed_works)
    # calls in flight at the kill (at most the concurrency) are the only ones the store never heard of
    stored = con.execute("SELECT count(*) FROM teacher_calls").fetchone()[0]
    assert served_total - 2 <= stored <= served_total and served_before - stored <= 2
    per_work = con.execute(
        "SELECT work_id, count(*) FILTER (status = 'labelled') FROM teacher_labels GROUP BY ALL"
    ).fetchall()
    assert len(per_work) == 60 and {c for _, c in per_work} == {1}


def test_an_endpoint_that_fails_batch_after_batch_stops_the_run_and_the_rest_waits(tmp_path):
    """503 for every call: after MAX_FAILED_BATCHES_IN_A_ROW batches the run stops taking batches and raises
    (the asset fails, Dagster retries it); the works never sent have no row and are asked next run."""
    from metacan_pipeline.teachers.client import EndpointUnavailableError
    from metacan_pipeline.teachers.sending import MAX_FAILED_BATCHES_IN_A_ROW

    storage = MetacanStorage(data_dir=str(tmp_path))
    down = httpx.MockTransport(lambda req: httpx.Response(503, text="upstream down"))
    spec = spec_for("http://down.invalid/v1", works_per_call=2, concurrency=1, max_transport_attempts=1)
    with pytest.raises(
        EndpointUnavailableError, match="8 batches in a row failed at the endpoint .*HTTP 503.*12 batches not sent"
    ) as err:
        label_works(
            storage,
            spec,
            frame_rows(40),
            run_id="r1",
            log=LOG,
            base_url=lambda: "http://down.invalid/v1",
            transport=down,
        )
    assert MAX_FAILED_BATCHES_IN_A_ROW == 8 and err.value.stats.sent == 16 and err.value.stats.calls == 8
    con = store(tmp_path)
    assert con.execute(
        "SELECT count(*), count(*) FILTER (starts_with(error, 'endpoint unavailable')) FROM teacher_labels"
    ).fetchone() == (16, 16)


def test_latency_is_time_on_the_wire_not_the_wait_for_a_connection(tmp_path):
    """concurrency 1 and several batches: each call's latency_s is the stub's ~200 ms, not the time a
    batch waited for the one connection (a fresh user saw one 504 s "call" in a run of 56 s calls)."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    with run_stub(latency_ms=200) as (url, _):
        label_works(
            storage,
            spec_for(url, works_per_call=2, concurrency=1),
            frame_rows(8),
            run_id="r1",
            log=LOG,
            base_url=lambda: url,
        )
    latencies = [r[0] for r in store(tmp_path).execute("SELECT latency_s FROM teacher_calls").fetchall()]
    assert len(latencies) == 4 and all(0.2 <= s < 0.6 for s in latencies), latencies


def test_import_labels_refuses_a_registry_teachers_name(tmp_path):
    from typer.testing import CliRunner

    from metacan_pipeline.cli import app

    labels = tmp_path / "l.jsonl"
    labels.write_text(
        '{"id": "W1", "categories": [], "domain": null, "study_design": "observational", "genre": "empirical", '
        '"about_ca_system": false, "about_ca_topic": false, "confidence": "high", "reason": "x"}\n'
    )
    result = CliRunner().invoke(
        app,
        [
            "import-labels",
            str(labels),
            "--teacher",
            "gemma",
            "--model",
            "m",
            "--prompt-version",
            "p",
            "--source",
            "s",
            "--data-dir",
            str(tmp_path / "data"),
        ],
    )
    assert result.exit_code == 2 and "registry teacher's name" in result.output
    assert not (tmp_path / "data" / "metacan.duckdb").exists()
