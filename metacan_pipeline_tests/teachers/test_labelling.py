"""Tests of metacan_pipeline.teachers.labelling: the labelling engine against the stub teacher and mock
transports."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import httpx
import pyarrow as pa
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.teachers.calling.client import EndpointConfigurationError
from metacan_pipeline.teachers.core.registry import TeacherSpec, direct_labels_table, load_registry
from metacan_pipeline.teachers.core.rubric import load_prompt
from metacan_pipeline.teachers.export import export_labels
from metacan_pipeline.teachers.labelling import label_works, select_works
from metacan_pipeline_tests.builders.teachers import RUN_LOG, frame_rows, spec_for
from metacan_pipeline_tests.stub_teacher.labels import stub_label
from metacan_pipeline_tests.stub_teacher.process import run_stub
from metacan_pipeline_tests.stub_teacher.protocol import parse_records

REPO = Path(__file__).resolve().parents[2]


def stats_of(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/stats").json()


def ro(tmp_path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(tmp_path / "metacan.duckdb"), read_only=True)


def completion(content, usage=None, finish="stop") -> dict:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": usage if usage is not None else {"prompt_tokens": 100, "completion_tokens": 50},
    }


def records_of(request: httpx.Request) -> list[dict]:
    return parse_records(json.loads(request.content)["messages"])[0]


class Counting:
    """A MockTransport handler wrapper that counts the requests it answered."""

    def __init__(self, handler) -> None:
        self.handler, self.n = handler, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.n += 1
        return self.handler(request)


def run_in_thread(fn, timeout_s: float):
    """Run ``fn`` in a daemon thread; return (finished, result or exception)."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["result"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout_s)
    return not t.is_alive(), box.get("result")


TWIN_SCRIPT = """
import logging, sys, time
from pathlib import Path
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.teachers.labelling import label_works
from metacan_pipeline_tests.builders.teachers import frame_rows, spec_for
url, data, me, other = sys.argv[1:5]
Path(data, me).touch()
while not Path(data, other).exists():  # start together (imports take seconds)
    time.sleep(0.01)
s = label_works(MetacanStorage(data_dir=data), spec_for(url, concurrency=2, works_per_call=2), frame_rows(40), run_id=me,
                log=logging.getLogger("x"), base_url=lambda: url)
print("sent", s.sent, flush=True)
"""


@pytest.mark.slow
def test_two_concurrent_runs_of_one_teacher_do_not_buy_a_work_twice(tmp_path):
    """Two runs of the same teacher on the same data folder (two Dagster runs of direct_labels_x, or the
    CLI while a run is going on) buy each work once: the second run waits, or skips the works the first has in
    flight, so no call is paid twice and no work gets two labelled rows."""
    with run_stub(latency_ms=150) as (url, _):
        kids = [
            subprocess.Popen(
                [sys.executable, "-c", TWIN_SCRIPT, url, str(tmp_path), me, other],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for me, other in (("ready-a", "ready-b"), ("ready-b", "ready-a"))
        ]
        outs = [k.communicate(timeout=120) for k in kids]
        assert all(k.returncode == 0 for k in kids), outs
        works_bought = stats_of(url)["works"]
    per_work = (
        ro(tmp_path)
        .execute(
            "SELECT max(n) FROM (SELECT work_id, count(*) n FROM teacher_labels WHERE status = 'labelled' GROUP BY ALL)"
        )
        .fetchone()[0]
    )
    assert works_bought == 40 and per_work == 1, (
        f"40 works, {works_bought} bought; up to {per_work} labelled rows per work"
    )


def test_a_misconfigured_structured_output_does_not_fail_every_work_for_good(tmp_path):
    """structured_output = "json_schema" at a server that refuses json_schema (llama.cpp, many vLLM builds):
    every call is the same HTTP 400. That is a configuration error, not a verdict about the works: they are not
    stored as final failures (structured_output is not part of the label key), so after the registry is fixed the
    next run labels every one."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(8)
    with run_stub(reject_json_schema=True) as (url, _):
        first = label_works(
            storage,
            spec_for(url, works_per_call=4, concurrency=1, structured_output="json_schema"),
            rows,
            run_id="r1",
            log=RUN_LOG,
            base_url=lambda: url,
        )
        calls_first = stats_of(url)["calls"]
        fixed = spec_for(url, works_per_call=4, concurrency=1, structured_output="auto")
        second = label_works(storage, fixed, rows, run_id="r2", log=RUN_LOG, base_url=lambda: url)
    export_labels(storage, fixed, second.view_hashes)
    table = storage.read_table(direct_labels_table(fixed.name))
    status = table.column("status").to_pylist()
    assert status.count("labelled") == 8, (
        f"first run: {first.outcomes} in {calls_first} calls for 8 works; after the fix: sent {second.sent}, "
        f"reused {second.reused}; stored {status.count('failed')} failed, e.g. {table.column('error')[0]}"
    )


def test_an_endpoint_answering_html_does_not_fail_every_work_for_good(tmp_path):
    """A base_url that reaches a web server (a proxy login page, an SPA that answers any path with its
    index.html and HTTP 200) is an endpoint-level problem, not a verdict about the works: like UNAVAILABLE,
    the works are not final failures and the next run (against the right URL; base_url is not part of the
    key) asks them again."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(6)
    html = Counting(
        lambda req: httpx.Response(
            200, text="<!doctype html><html><body>Sign in</body></html>", headers={"content-type": "text/html"}
        )
    )
    first = label_works(
        storage,
        spec_for("http://portal.invalid/v1", works_per_call=3, concurrency=1),
        rows,
        run_id="r1",
        log=RUN_LOG,
        base_url=lambda: "http://portal.invalid/v1",
        transport=httpx.MockTransport(html),
    )
    with run_stub() as (url, _):
        second = label_works(
            storage,
            spec_for(url, works_per_call=3, concurrency=1),
            rows,
            run_id="r2",
            log=RUN_LOG,
            base_url=lambda: url,
        )
    assert second.outcomes.get("labelled") == 6, (
        f"HTML endpoint: {html.n} calls for 6 works, outcomes {dict(first.outcomes)}; then the right endpoint: "
        f"sent {second.sent}, reused {second.reused} (the works stay failed for good)"
    )


class ForbidOne(httpx.AsyncBaseTransport):
    """In front of the real stub: HTTP ``status`` for any call carrying ``marker`` (a WAF / content filter
    that blocks one title with 403; a gateway that answers 401 mid-run), everything else forwarded."""

    def __init__(self, marker: bytes, status: int) -> None:
        self.inner, self.marker, self.status = httpx.AsyncHTTPTransport(), marker, status

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        if self.marker in body:
            await asyncio.sleep(0.05)
            return httpx.Response(
                self.status, text="Forbidden: request blocked by firewall rule 942100 (SQL injection)"
            )
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("status", [403, 401])
def test_a_run_stopped_by_one_batch_keeps_the_replies_already_paid_for(tmp_path, status):
    """Concurrency 4, one work's call gets an HTTP error. 403 (a filter on one title) is about that request:
    the work fails with a cause that is not final and the run goes on. 401 (the key refused) stops the run:
    no new batch is taken, and the calls already in flight are awaited and stored before the error is
    raised, so every reply the endpoint answered (and billed) is in teacher_calls and the archive (found:
    asyncio.gather cancelled them, and the next run bought them again)."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(12)
    rows[1]["title_text"] = "1' OR '1'='1 -- a study of SQL injection reporting"
    with run_stub(latency_ms=600) as (url, _):
        spec = spec_for(url, works_per_call=1, concurrency=4)
        run = lambda: label_works(
            storage,
            spec,
            rows,
            run_id="r1",
            log=RUN_LOG,
            base_url=lambda: url,  # noqa: E731
            transport=ForbidOne(b"OR '1'='1", status),
        )
        if status == 401:
            with pytest.raises(EndpointConfigurationError, match="HTTP 401"):
                run()
        else:
            stats = run()
            assert stats.outcomes == {"labelled": 11, "failed": 1}
        time.sleep(1.5)  # let the stub finish answering what it was asked
        answered = stats_of(url)["status"]["200"]
    con = ro(tmp_path)
    stored = con.execute("SELECT count(*) FROM teacher_calls WHERE http_status = 200").fetchone()[0]
    assert stored == answered, f"HTTP {status}: the stub answered {answered} calls with 200, {stored} are stored"
    if status == 403:
        error = con.execute("SELECT error FROM teacher_labels WHERE work_id = ?", [rows[1]["id"]]).fetchone()[0]
        assert error.startswith("endpoint error: HTTP 403")  # not final: the next run asks again


def _label_two_through_mock(tmp_path, handler, works_per_call: int, what: str):
    """Label two works through ``handler`` (MockTransport, no re-asks); a crash fails the test with what was stored."""
    mock = Counting(handler)
    try:
        return label_works(
            MetacanStorage(data_dir=str(tmp_path)),
            spec_for("http://m.invalid/v1", works_per_call=works_per_call, concurrency=1, max_invalid_retries=0),
            frame_rows(2),
            run_id="r1",
            log=RUN_LOG,
            base_url=lambda: "http://m.invalid/v1",
            transport=httpx.MockTransport(mock),
        )
    except Exception as exc:  # noqa: BLE001
        stored = ro(tmp_path).execute("SELECT count(*) FROM teacher_calls").fetchone()[0]
        pytest.fail(f"{what}: crashed with {type(exc).__name__}: {exc}; {mock.n} calls made, {stored} stored")


@pytest.mark.parametrize(
    "content, what",
    [
        ([{"type": "text", "text": '{"labels": []}'}], "content as a list of parts"),
        ({"labels": []}, "content as a JSON object, not a string"),
    ],
)
def test_a_reply_whose_content_is_not_a_string_is_a_failure_not_a_crash(tmp_path, content, what):
    """Some OpenAI-compatible servers return ``message.content`` as a list of content parts: the reply is
    a failure with a cause ("content is not a string") or the text of the parts, the run goes on, and the
    call (paid) is stored in teacher_calls with its cost."""
    stats = _label_two_through_mock(
        tmp_path, lambda req: httpx.Response(200, json=completion(content)), works_per_call=1, what=what
    )
    assert stats.outcomes == {"failed": 2}


def test_a_label_whose_id_is_not_a_string_is_an_invalid_reply_not_a_crash(tmp_path):
    """A model that writes ``"id": ["W1000"]`` (or an object) gives an invalid reply (InvalidLabel "id is
    not a string"), split and asked again like any bad reply; the run goes on and the call is stored."""

    def handler(req):
        labels = [{**stub_label(r["id"]), "id": [r["id"]]} for r in records_of(req)]
        return httpx.Response(200, json=completion(json.dumps({"labels": labels})))

    stats = _label_two_through_mock(tmp_path, handler, works_per_call=2, what="a non-string id")
    assert stats.outcomes == {"failed": 2}


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 2**63, "completion_tokens": 10},
        {"prompt_tokens": "120", "completion_tokens": "10"},
    ],
)
def test_a_bad_usage_block_does_not_crash_the_run_or_poison_later_runs(tmp_path, usage):
    """``usage`` with a token count that is not a 64-bit signed integer (a buggy proxy, a string): the
    count is dropped (NULL) or the call recorded with an error and the run goes on; a later run against a
    healthy endpoint (which first replays the archive) works too."""
    storage = MetacanStorage(data_dir=str(tmp_path))

    def handler(bad: bool):
        def reply(req):
            labels = [stub_label(r["id"]) for r in records_of(req)]
            return httpx.Response(200, json=completion(json.dumps({"labels": labels}), usage=usage if bad else None))

        return reply

    errors = []
    for run, bad in (("r1 (bad usage)", True), ("r2 (healthy endpoint)", False)):
        try:
            label_works(
                storage,
                spec_for("http://m.invalid/v1", works_per_call=2, concurrency=1),
                frame_rows(4),
                run_id=run[:2],
                log=RUN_LOG,
                base_url=lambda: "http://m.invalid/v1",
                transport=httpx.MockTransport(handler(bad)),
            )
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{run}: {type(exc).__name__}: {exc}")
    assert not errors, errors


def test_a_huge_retry_after_does_not_park_the_run(tmp_path):
    """A 429/503 with ``Retry-After: 86400`` (a proxy's daily quota): a wait beyond the cap (or beyond
    timeout_s) ends the attempts now; the works are UNAVAILABLE failures the next run asks again."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    mock = httpx.MockTransport(lambda req: httpx.Response(429, headers={"Retry-After": "86400"}, text="quota"))
    spec = spec_for("http://m.invalid/v1", works_per_call=2, concurrency=1, max_transport_attempts=2, timeout_s=1)
    done, result = run_in_thread(
        lambda: label_works(
            storage,
            spec,
            frame_rows(2),
            run_id="r1",
            log=RUN_LOG,
            base_url=lambda: "http://m.invalid/v1",
            transport=mock,
        ),
        timeout_s=10,
    )
    assert done, "label_works still sleeping after 10 s (it waits the full Retry-After: 86400 s)"
    assert not isinstance(result, BaseException) and result.outcomes == {"failed": 2}


def _trickle_server(seconds_per_byte: float) -> tuple[str, socket.socket]:
    """A real HTTP server that sends its headers at once, then a valid chat completion one byte at a time."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve(conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
            while len(rest) < length:
                rest += conn.recv(65536)
            recs = parse_records(json.loads(rest)["messages"])[0]
            body = json.dumps(completion(json.dumps({"labels": [stub_label(r["id"]) for r in recs]}))).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body))
            for i in range(len(body)):
                try:
                    conn.sendall(body[i : i + 1])
                except OSError:
                    return
                time.sleep(seconds_per_byte)

    def accept():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/v1", srv


def test_timeout_s_bounds_a_whole_call_not_each_read(tmp_path):
    """timeout_s = 1 and a server that trickles its (valid) reply one byte every 0.2 s (a congested proxy,
    a stuck keep-alive): timeout_s bounds the whole call (httpx's own timeout is per read), so it fails as a
    timeout (UNAVAILABLE) within a few seconds."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    url, srv = _trickle_server(0.2)
    spec = spec_for(url, works_per_call=1, concurrency=1, max_transport_attempts=1, timeout_s=1)
    said: list[str] = []
    log = logging.getLogger("timeout-test")
    log.addHandler(handler := logging.Handler())
    handler.emit = lambda record: said.append(record.getMessage())
    try:
        done, result = run_in_thread(
            lambda: label_works(storage, spec, frame_rows(1), run_id="r1", log=log, base_url=lambda: url),
            timeout_s=8,
        )
    finally:
        srv.close()
        log.removeHandler(handler)
    assert done, "one call with timeout_s=1 still running after 8 s"
    # said as it happens, not only when the run ends
    assert "teacher stub: a call of 1 works failed after 1 s (no reply within 1 s)" in " ".join(said)


def test_concurrent_refusals_of_json_schema_fall_back_one_step_not_two(tmp_path):
    """structured_output auto, concurrency 4, a server that refuses only json_schema: the client settles on
    json_object_schema (the grammar: the strongest mode the server has). Four calls in flight refused at once
    step the shared mode down once, not once each (which would skip to "none", plain JSON asked for in words)."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    with run_stub(reject_json_schema=True, latency_ms=50) as (url, _):
        stats = label_works(
            storage,
            spec_for(url, works_per_call=1, concurrency=4, structured_output="auto"),
            frame_rows(8),
            run_id="r1",
            log=RUN_LOG,
            base_url=lambda: url,
        )
    assert stats.structured_output == "json_object_schema", f"settled on {stats.structured_output!r}"


def test_a_negative_max_works_is_not_a_budget_bypass(tmp_path):
    """max_works (launchpad: "send at most this many works") = -1 is refused with a ValueError naming the value,
    before any work is sent."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    with run_stub() as (url, _):
        with pytest.raises(ValueError, match=r"max_works=-1: expected 0 \(no limit\) or a positive number of works"):
            label_works(
                storage, spec_for(url), frame_rows(10), run_id="r1", log=RUN_LOG, base_url=lambda: url, max_works=-1
            )
        assert stub_calls(url) == 0


def test_a_coverage_batch_that_does_not_exist_is_an_error_not_an_empty_success(tmp_path):
    """coverage = "batch:pilot_2026" naming a batch that has no works (a typo, or not loaded yet) is a ValueError
    naming the teacher and the batch, not an empty selection."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    storage.write_table("frame", pa.Table.from_pylist(frame_rows(3)))
    spec = TeacherSpec(name="batchy", base_url="http://x.invalid/v1", coverage="batch:pilot_2026")
    with pytest.raises(ValueError, match="teacher batchy: coverage 'batch:pilot_2026' names a batch with no works"):
        select_works(storage, spec)


LOG = logging.getLogger("test")


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
    with run_stub(burst_429=3) as (url, _):
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
    assert statuses == [(200, 2), (429, 3)]


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
from metacan_pipeline_tests.builders.teachers import frame_rows, spec_for
url, data = sys.argv[1], sys.argv[2]
label_works(MetacanStorage(data_dir=data), spec_for(url, concurrency=2, works_per_call=2), frame_rows(60), run_id="killed",
            log=logging.getLogger("x"), base_url=lambda: url)
print("finished", flush=True)
"""


def test_a_labelling_process_killed_with_sigkill_resumes_without_buying_a_finished_call_twice(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    from metacan_pipeline.teachers.calling.client import EndpointUnavailableError
    from metacan_pipeline.teachers.calling.sending import MAX_FAILED_BATCHES_IN_A_ROW

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
    batch waited for the one connection."""
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


def test_sample_plus_batch_coverage_labels_the_sample_and_the_proposed_batch(tmp_path):
    """``sample+batch:active_learning``: codex labels its sample and what machine_scores rounds propose."""
    import pyarrow as pa

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.teachers.labelling import select_works

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    storage.write_table("frame", pa.table({"id": [f"W{i}" for i in range(6)]}))
    storage.write_table(
        "sample_design",
        pa.table({"id": [f"W{i}" for i in range(6)], "in_sample": [True, True, False, False, False, False]}),
    )
    base = load_registry(environ={})["codex"]
    both = base.model_copy(update={"coverage": "sample+batch:active_learning"})
    only = base.model_copy(update={"coverage": "batch:active_learning"})
    assert (
        type(base).model_validate(both.model_dump()).batch == "active_learning"
        and both.covers_sample
        and not only.covers_sample
    )
    assert [w["id"] for w in select_works(storage, both)] == ["W0", "W1"]  # no batch yet: the sample alone
    with pytest.raises(ValueError, match="names a batch with no works"):
        select_works(storage, only)
    with storage.connect() as con:
        con.execute(
            "INSERT INTO label_batches VALUES ('active_learning', 'W4', now(), 'test'), ('other', 'W5', now(), 'test')"
        )
    assert [w["id"] for w in select_works(storage, both)] == ["W0", "W1", "W4"]
    assert [w["id"] for w in select_works(storage, only)] == ["W4"]
    with pytest.raises(ValueError, match="sample\\+batch:<name>"):
        type(base).model_validate({**base.model_dump(), "coverage": "batch+sample:x"})


def test_plan_run_reuses_stored_labels_gives_rule_labels_and_defers_beyond_max_works(tmp_path):
    """plan_run: a work whose label key is stored is reused, a work outside the sampling frame gets the rule
    label (stored by store_frame_rule_labels, then reused too), and max_works defers the rest in frame order."""
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.teachers.labelling import plan_run, store_frame_rule_labels

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    spec = load_registry(environ={})["gemma"]
    prompt = load_prompt(spec.prompt_version)
    works = [
        {"id": f"W{i}", "title_text": f"Study {i}", "publication_year": 2020, "language": "en", "type": "article"}
        | {"venue_name": None, "topic": None, "field": None, "has_abstract": False}
        | {"in_sampling_frame": i != 1, "sampling_frame_exclusion": None if i != 1 else "no_title"}
        for i in range(6)
    ]
    plan = plan_run(storage, spec, prompt, works, None, max_works=3)
    assert (plan.reused, [w["id"] for w in plan.rule], plan.deferred) == (0, ["W1"], 2)
    assert [w["id"] for w in plan.to_call] == ["W0", "W2", "W3"] and set(plan.hashes) == {w["id"] for w in works}
    store_frame_rule_labels(storage, spec, prompt, plan, "run-1")
    with storage.connect() as con:
        stored = con.execute("SELECT work_id, status, source, categories, reason FROM teacher_labels").fetchall()
    assert [(w, s, src, c) for w, s, src, c, _ in stored] == [
        ("W1", "labelled", "frame_rule", ["insufficient_payload"])
    ]
    assert "outside the sampling frame (no_title)" in stored[0][4]
    again = plan_run(storage, spec, prompt, works, None, max_works=0)
    assert (again.reused, again.rule, again.deferred, len(again.to_call)) == (1, [], 0, 5)


def test_a_run_fed_chunk_by_chunk_labels_as_one_list_does_and_keeps_its_budget_across_chunks(tmp_path):
    """label_works over chunks (what the assets send, so a census of millions is never held at once): the same
    labels and export as one list, the view hashes in a Parquet file that export_labels joins, and max_works
    counted over the whole run, not per chunk."""
    from metacan_pipeline.teachers.labelling import discard_view_hashes

    rows = frame_rows(12)
    chunks = [rows[i : i + 5] for i in range(0, len(rows), 5)]
    whole, chunked = (
        MetacanStorage(data_dir=str(tmp_path / "whole")),
        MetacanStorage(data_dir=str(tmp_path / "chunked")),
    )
    with run_stub() as (url, _):
        spec = spec_for(url, works_per_call=2)
        one = label_works(whole, spec, rows, run_id="r1", log=LOG, base_url=lambda: url, max_works=7)
        many = label_works(chunked, spec, iter(chunks), run_id="r1", log=LOG, base_url=lambda: url, max_works=7)
    assert (many.works, many.sent, many.deferred) == (one.works, one.sent, one.deferred) == (12, 7, 5)
    assert isinstance(one.view_hashes, dict) and isinstance(many.view_hashes, Path) and many.view_hashes.exists()
    assert export_labels(whole, spec, one.view_hashes) == export_labels(chunked, spec, many.view_hashes) == 7
    discard_view_hashes(many.view_hashes)
    assert not many.view_hashes.exists()
    columns = ["work_id", "status", "categories", "domain", "genre", "view_hash"]
    table = direct_labels_table(spec.name)
    assert whole.read_table(table, columns).to_pylist() == chunked.read_table(table, columns).to_pylist()
    assert [r["work_id"] for r in chunked.read_table(table, ["work_id"]).to_pylist()] == sorted(
        w["id"] for w in rows[:7]
    )


def test_the_export_runs_under_its_own_duckdb_memory_limit(tmp_path, monkeypatch):
    """export_labels sets DuckDB's memory (the catalog's default is 80% of RAM; a 4.3M-work census export
    peaks at 5 GB under it): too small a limit makes the export fail and leave no table, the default one exports
    every label."""
    import duckdb

    from metacan_pipeline.teachers import export

    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(6, {})
    with run_stub() as (url, _):
        spec = spec_for(url)
        stats = label_works(storage, spec, rows, run_id="r1", log=LOG, base_url=lambda: url)
    monkeypatch.setattr(export, "EXPORT_MEMORY", "1KB")
    with pytest.raises(duckdb.OutOfMemoryException):
        export_labels(storage, spec, stats.view_hashes)
    assert not storage.has_table("direct_labels_stub")
    monkeypatch.undo()  # the module's own limit
    assert export_labels(storage, spec, stats.view_hashes) == 6
    assert store(tmp_path).execute("SELECT count(*) FROM direct_labels_stub WHERE status = 'labelled'").fetchone() == (
        6,
    )
