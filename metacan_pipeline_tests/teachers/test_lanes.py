"""Tests of metacan_pipeline.teachers.calling.sending: a teacher on several endpoints, each a lane with its own
concurrency racing one queue of batches, against real loopback stub teachers (one killed mid-run, one answering
503, one refusing the key, one coming back)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time

import duckdb
import httpx

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.teachers.calling.archive import read_archive
from metacan_pipeline.teachers.core.registry import TeacherSpec
from metacan_pipeline.teachers.export import export_labels
from metacan_pipeline.teachers.labelling import label_works
from metacan_pipeline_tests.builders.teachers import frame_rows, spec_for
from metacan_pipeline_tests.stub_teacher.process import run_stub

LOG = logging.getLogger("test_lanes")


def lanes_spec(endpoints: list[tuple[str, str, int]], **kw) -> TeacherSpec:
    """A stub teacher on ``endpoints`` (name, base URL, concurrency): 2 works a call, 2 transport attempts, a
    short back-off so a test sees probes."""
    base = {
        "name": "stub",
        "model": "stub-teacher",
        "works_per_call": 2,
        "structured_output": "json_schema",
        "system_role": "yes",
        "max_transport_attempts": 2,
        "price_input_per_1k": 0.001,
        "price_output_per_1k": 0.002,
        "endpoint_backoff_s": 0.2,
        "endpoints": [{"name": n, "base_url": u, "concurrency": c} for n, u, c in endpoints],
    }
    return TeacherSpec(**{**base, **kw})


def stub_stats(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/stats", timeout=5).json()


def answered(url: str) -> int:
    return stub_stats(url)["status"]["200"]


def store(tmp_path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(tmp_path / "metacan.duckdb"), read_only=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_of(url: str) -> int:
    return httpx.URL(url).port


def one_row_per_work(con) -> dict[str, int]:
    """Labelled rows per work in teacher_labels."""
    return dict(
        con.execute("SELECT work_id, count(*) FILTER (status = 'labelled') FROM teacher_labels GROUP BY ALL").fetchall()
    )


@contextlib.contextmanager
def kill_when(condition, procs):
    """SIGKILL the process groups of ``procs`` from a thread as soon as ``condition()`` returns a true value
    (polled every 10 ms while the block runs); yields a dict that holds that value under ``at`` once they were killed."""
    killed: dict = {}
    running = threading.Event()
    running.set()

    def killer() -> None:
        while running.is_set():
            if at := condition():
                for proc in procs:
                    os.killpg(proc.pid, signal.SIGKILL)
                killed["at"] = at
                return
            time.sleep(0.01)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        yield killed
    finally:
        running.clear()
        t.join()


def test_a_lane_killed_mid_run_gives_its_batches_to_the_others_and_nothing_is_bought_twice(tmp_path):
    """Three endpoints (a, b, c: 2 calls in flight each), 80 works in 40 calls; c is SIGKILLed once it has
    answered 2 calls and holds another. Its calls in flight fail (dropped, then refused), c goes down and is
    probed, and the works those calls held go back to the queue: a and b label them. Every work is labelled
    once, no work was bought twice, every call names its endpoint, and a second run buys nothing."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(80)
    with contextlib.ExitStack() as stack:
        (url_a, _), (url_b, _), (url_c, proc_c) = (stack.enter_context(run_stub(latency_ms=200)) for _ in range(3))
        spec = lanes_spec([("a", url_a, 2), ("b", url_b, 2), ("c", url_c, 2)])

        def answered_two_holds_one() -> int:
            s = stub_stats(url_c)
            return s["status"]["200"] if s["status"]["200"] >= 2 and s["calls"] > s["status"]["200"] else 0

        with kill_when(answered_two_holds_one, [proc_c]) as killed:
            first = label_works(storage, spec, rows, run_id="r1", log=LOG)
        assert killed, "the run ended before stub c could be killed mid-run"
        alive = {"a": stub_stats(url_a)["calls"], "b": stub_stats(url_b)["calls"]}
        second = label_works(storage, spec, rows, run_id="r2", log=LOG)
        alive_after = {"a": stub_stats(url_a)["calls"], "b": stub_stats(url_b)["calls"]}

    assert first.outcomes == {"labelled": 80} and not first.failures
    con = store(tmp_path)
    # every work has exactly one label, and no failure row (the dead lane's works were not recorded as failed)
    assert set(one_row_per_work(con).values()) == {1} and len(one_row_per_work(con)) == 80
    assert con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0] == 80
    # nothing bought twice: the works of the successful calls are the 80 works, each once
    bought = [
        r[0]
        for r in con.execute(
            "SELECT unnest(work_ids) FROM teacher_calls WHERE http_status = 200 AND error IS NULL"
        ).fetchall()
    ]
    assert len(bought) == 80 and len(set(bought)) == 80
    # the dead lane's failed calls were re-sent to the others: their works' labels come from a or b
    dead = {
        r[0]
        for r in con.execute(
            "SELECT unnest(work_ids) FROM teacher_calls WHERE endpoint = 'c' AND error IS NOT NULL"
        ).fetchall()
    }
    assert dead, "c's calls in flight at the kill were recorded with their error"
    resent = dict(
        con.execute(
            "SELECT l.work_id, c.endpoint FROM teacher_labels l JOIN teacher_calls c USING (call_id) "
            "WHERE l.work_id IN (SELECT unnest(?))",
            [sorted(dead)],
        ).fetchall()
    )
    assert set(resent) == dead and set(resent.values()) <= {"a", "b"}
    # per-endpoint call counts: stored, in the stats, and what the live stubs served
    per_endpoint = dict(con.execute("SELECT endpoint, count(*) FROM teacher_calls GROUP BY ALL").fetchall())
    assert per_endpoint == {name: e.calls for name, e in first.endpoints.items()}
    assert per_endpoint["a"] == alive["a"] and per_endpoint["b"] == alive["b"]
    c_ok = con.execute("SELECT count(*) FROM teacher_calls WHERE endpoint = 'c' AND http_status = 200").fetchone()[0]
    assert c_ok >= killed["at"]
    c = first.endpoints["c"]
    assert (c.state, c.downs, c.labelled) == ("down", 1, 2 * c_ok) and c.given_back >= 2
    assert first.endpoints["a"].state == first.endpoints["b"].state == "up"
    assert sum(e.works for e in first.endpoints.values()) == 80
    # the archive events name the endpoint too
    paths = [
        r[0] for r in con.execute("SELECT DISTINCT archive_path FROM teacher_calls WHERE run_id = 'r1'").fetchall()
    ]
    archived = [e["row"]["endpoint"] for p in paths for e in read_archive(tmp_path / p) if e["kind"] == "call"]
    assert sorted(archived) == sorted(r[0] for r in con.execute("SELECT endpoint FROM teacher_calls").fetchall())
    # the second run buys nothing (c still dead, a and b not asked)
    assert (second.sent, second.reused, second.calls) == (0, 80, 0) and alive_after == alive


def test_when_every_lane_dies_the_works_are_unavailable_and_the_next_run_labels_them(tmp_path):
    """Three endpoints, one call in flight each, 12 works in 6 calls; each stub answers its first call and holds
    the next (``hang_after=1``), so however loaded the machine the run is still going when all three stubs are
    killed, once 3 calls are answered. With no lane up, the batches left are recorded as 'endpoint unavailable' failures (as for a
    teacher of one endpoint), which the next run asks again: with b started again on its port (a and c still
    dead) b labels every one of them, a and c's batches given to it."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(12)
    with contextlib.ExitStack() as stack:
        stubs = [stack.enter_context(run_stub(latency_ms=50, hang_after=1)) for _ in range(3)]
        (url_a, _), (url_b, _), (url_c, _) = stubs
        spec = lanes_spec([("a", url_a, 1), ("b", url_b, 1), ("c", url_c, 1)])
        with kill_when(lambda: sum(answered(u) for u, _ in stubs) >= 3, [proc for _, proc in stubs]):
            first = label_works(storage, spec, rows, run_id="r1", log=LOG)
    failed = first.outcomes.get("failed", 0)
    assert first.outcomes.get("labelled", 0) + failed == 12 and failed >= 2, first.outcomes
    assert all(cause.startswith("endpoint unavailable") for cause in first.failures), first.failures
    assert {e.state for e in first.endpoints.values()} == {"down"}
    with run_stub(port=port_of(url_b)) as (url_b2, _):
        assert url_b2 == url_b
        second = label_works(storage, spec, rows, run_id="r2", log=LOG)
        served_by_b = stub_stats(url_b2)["status"]["200"]
    assert second.sent == failed and second.outcomes == {"labelled": failed}
    assert second.endpoints["b"].labelled == failed and second.endpoints["b"].state == "up"
    assert second.endpoints["a"].state == second.endpoints["c"].state == "down"
    con = store(tmp_path)
    assert set(one_row_per_work(con).values()) == {1} and len(one_row_per_work(con)) == 12
    ok = con.execute("SELECT DISTINCT endpoint FROM teacher_calls WHERE run_id = 'r2' AND http_status = 200").fetchall()
    assert ok == [("b",)]
    assert (
        served_by_b
        == con.execute("SELECT count(*) FROM teacher_calls WHERE run_id = 'r2' AND endpoint = 'b'").fetchone()[0]
    )


def test_a_lane_answering_503_rests_and_a_lane_refusing_the_key_is_out_the_others_label_everything(tmp_path):
    """a answers, b refuses every call with HTTP 401 (a wrong key: out for the run, not a stop while a can
    take its batches), c answers 503 to every chat call (down after its retries, its works given back, then
    probed: GET /models answers, so it is up again, fails again and rests twice as long). Only a's replies
    become labels; the 503s and the 401 are stored as calls of b and c."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(24)
    with (
        run_stub(latency_ms=100) as (url_a, _),
        run_stub(fail_status=401) as (url_b, _),
        run_stub(latency_ms=50, fail_status=503) as (url_c, _),
    ):
        spec = lanes_spec([("a", url_a, 1), ("b", url_b, 1), ("c", url_c, 2)], endpoint_backoff_s=0.1)
        stats = label_works(storage, spec, rows, run_id="r1", log=LOG)
        c_calls = stub_stats(url_c)["status"]["fail_status"]
    assert stats.outcomes == {"labelled": 24}
    a, b, c = (stats.endpoints[n] for n in "abc")
    assert (a.labelled, b.labelled, c.labelled) == (24, 0, 0)
    assert b.state == "refused" and "HTTP 401" in b.cause and b.calls == 1 and b.given_back == 2
    assert c.downs >= 1 and c.given_back >= 4 and c.calls == c_calls
    con = store(tmp_path)
    assert set(one_row_per_work(con).values()) == {1} and len(one_row_per_work(con)) == 24
    statuses = dict(
        con.execute("SELECT endpoint, list(DISTINCT http_status) FROM teacher_calls GROUP BY ALL").fetchall()
    )
    assert statuses == {"a": [200], "b": [401], "c": [503]}
    con.close()
    # the asset's metadata: one row per endpoint, the calls in flight over all of them
    from metacan_pipeline.teachers.export import direct_labels_metadata

    export_labels(storage, spec, stats.view_hashes)
    md = direct_labels_metadata(spec, storage, stats)
    table = md["endpoints_this_run"].value
    assert md["concurrency"] == 4 and md["endpoint"] == "3 endpoints (a, b, c)"
    assert f"| a | 1 | {a.calls} | 24 | 24 | 0 | 0 |" in table and "| refused |" in table
    assert table.count("\n| ") == 3  # a, b, c


def test_a_lane_that_comes_back_is_probed_and_takes_batches_again(tmp_path):
    """c points at a port where nothing listens: its first batch is refused, it goes down and rests; a stub then
    starts on that port (once the run has logged c down), the next probe (GET /models) answers, and c labels
    works beside a (slow) again."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    port = free_port()
    url_c = f"http://127.0.0.1:{port}/v1"
    down, up, release = threading.Event(), threading.Event(), threading.Event()

    class SeesCDown(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "endpoint c is down" in record.getMessage():
                down.set()

    def late_stub() -> None:
        if down.wait(60):
            with run_stub(port=port, latency_ms=50):
                up.set()
                release.wait(120)

    with run_stub(latency_ms=400) as (url_a, _):
        spec = lanes_spec(
            [("a", url_a, 1), ("c", url_c, 1)], works_per_call=1, endpoint_backoff_s=0.3, max_transport_attempts=1
        )
        t = threading.Thread(target=late_stub, daemon=True)
        t.start()
        handler = SeesCDown()
        LOG.addHandler(handler)
        try:
            stats = label_works(storage, spec, frame_rows(40), run_id="r1", log=LOG)
        finally:
            LOG.removeHandler(handler)
            down.set()
            release.set()
            t.join()
    assert up.is_set() and stats.outcomes == {"labelled": 40}
    c = stats.endpoints["c"]
    assert c.downs == 1 and c.probes >= 1 and c.state == "up" and c.labelled >= 1, c
    assert c.labelled + stats.endpoints["a"].labelled == 40
    assert set(one_row_per_work(store(tmp_path)).values()) == {1}


def test_the_endpoint_is_not_part_of_the_label_key_and_is_recorded_without_credentials(tmp_path):
    """Works labelled through one endpoint are not bought again when the teacher is given several (the same
    model behind several endpoints is one teacher). An endpoint named by its URL records it without user
    info or query: no key reaches teacher_calls or the archive."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(8)
    with run_stub() as (url, _), run_stub() as (url2, _):
        one = label_works(storage, spec_for(url, works_per_call=2), rows[:4], run_id="r1", log=LOG)
        secret_url = url2.replace("http://", "http://user:sk-secret-123@")
        spec = TeacherSpec(
            **{
                **spec_for(url, works_per_call=2).model_dump(exclude={"base_url", "concurrency"}),
                "endpoints": [{"base_url": url, "concurrency": 2}, {"base_url": secret_url, "concurrency": 2}],
            }
        )
        several = label_works(storage, spec, rows, run_id="r2", log=LOG)
    assert one.outcomes == {"labelled": 4} and (several.reused, several.sent) == (4, 4)
    con = store(tmp_path)
    endpoints = {r[0] for r in con.execute("SELECT endpoint FROM teacher_calls").fetchall()}
    assert endpoints <= {url, url2} and url in endpoints
    assert set(several.endpoints) == {url, url2}
    archives = [tmp_path / r[0] for r in con.execute("SELECT DISTINCT archive_path FROM teacher_calls").fetchall()]
    assert not any(b"sk-secret-123" in p.read_bytes() for p in archives)  # gzip: check decoded events too
    assert not any("sk-secret-123" in str(e) for p in archives for e in read_archive(p))


def test_one_endpoint_teachers_record_their_endpoint(tmp_path):
    """A teacher of one endpoint (base_url) records its URL without credentials; the embedded server's calls
    say 'embedded' (its port changes every run)."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    with run_stub() as (url, _):
        stats = label_works(storage, spec_for(url), frame_rows(4), run_id="r1", log=LOG, base_url=lambda: url)
        embedded = spec_for(url).model_copy(update={"base_url": "", "name": "emb"})
        label_works(storage, embedded, frame_rows(4), run_id="r2", log=LOG, base_url=lambda: url)
    assert list(stats.endpoints) == [url] and stats.endpoints[url].labelled == 4
    con = store(tmp_path)
    assert con.execute("SELECT DISTINCT teacher, endpoint FROM teacher_calls ORDER BY 1").fetchall() == [
        ("emb", "embedded"),
        ("stub", url),
    ]


def test_each_outcome_is_recorded_once_and_a_lost_call_is_recorded_only_when_no_other_lane_is_up():
    """The rules of one run's lanes without a server: an outcome for a work already recorded (a second reply
    racing the first) is dropped; an 'endpoint unavailable' outcome puts its lane down and is held back for
    the queue while another lane is up, and recorded (the next run asks again) once none is."""
    from metacan_pipeline.teachers.calling.client import LabelOutcome
    from metacan_pipeline.teachers.calling.sending import Lane, LaneRun, Progress
    from metacan_pipeline.teachers.core.stats import LabelRunStats

    recorded: list[str] = []
    lanes = [Lane("a", 1, 30.0), Lane("b", 1, 30.0)]
    run = LaneRun(
        lanes, [], Progress("t", 4, LabelRunStats(), LOG), lambda outs: recorded.extend(o.work_id for o in outs), LOG
    )
    a, b = lanes
    label = object()  # any label: only its presence matters here
    lost = "endpoint unavailable after 2 attempts: ConnectError"
    a.report([LabelOutcome("W1", label, None, "c1")])
    b.report([LabelOutcome("W1", label, None, "c2")])  # the same work again: dropped
    assert recorded == ["W1"] and (a.stats.labelled, b.stats.labelled) == (1, 0)
    a.report([LabelOutcome("W2", None, lost, "c3")])  # b is up: held back for the queue
    assert recorded == ["W1"] and a.state == "down" and a.stats.downs == 1 and not a.keep_retrying()
    b.report([LabelOutcome("W3", None, lost, "c4")])  # no lane up any more: recorded as before lanes
    assert recorded == ["W1", "W3"] and b.state == "down" and a.keep_retrying() and b.keep_retrying()
    a.report([LabelOutcome("W4", label, None, "c5")])  # a labels again: up, its back-off starts again
    assert a.state == "up" and a.backoff_s == 30.0 and recorded == ["W1", "W3", "W4"]
    assert b.backoff_s == 60.0  # b rests 30 s, then twice as long if its probe fails
    assert run.done == {"W1", "W3", "W4"} and not run.queue  # W2 goes back when its call ends (LaneRun._send)
