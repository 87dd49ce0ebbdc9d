"""Break tests for the teacher-labelling code: bad registries, bad endpoints, bad replies, bad archives,
bad import files, concurrent runs. Every test here FAILS on the code it was written against (commit
1856f57): each one states the behaviour that should hold, and the assertion message says what was seen.

Real components throughout: the stub teacher server (a subprocess), DuckDB in tmp_path, real archive
files. ``httpx.MockTransport`` (or a small proxy transport in front of the stub) only for replies the
stub cannot produce. Nothing here starts the embedded llama.cpp server.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import httpx
import orjson
import pyarrow as pa
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables import create_tables
from metacan_pipeline.teachers.archive import ARCHIVE_DIR
from metacan_pipeline.teachers.client import EndpointConfigurationError
from metacan_pipeline.teachers.imports import ImportSpec, current_imported_sql, import_file
from metacan_pipeline.teachers.labelling import export_labels, label_works, select_works
from metacan_pipeline.teachers.registry import TeacherSpec, load_registry

from .stub_teacher import parse_records, run_stub, stub_label
from .test_teacher_faults import frame_rows, spec_for

LOG = logging.getLogger("break")
REPO = Path(__file__).resolve().parents[1]


# ---- helpers ----------------------------------------------------------------------------------------
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


# =====================================================================================================
# 1. DOUBLE COST: two labelling processes on one data folder buy every work twice
# =====================================================================================================
TWIN_SCRIPT = """
import logging, sys, time
from pathlib import Path
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.teachers.labelling import label_works
from metacan_pipeline_tests.test_teacher_faults import frame_rows, spec_for
url, data, me, other = sys.argv[1:5]
Path(data, me).touch()
while not Path(data, other).exists():  # start together (imports take seconds)
    time.sleep(0.01)
s = label_works(MetacanStorage(data_dir=data), spec_for(url, concurrency=2, works_per_call=2), frame_rows(40), run_id=me,
                log=logging.getLogger("x"), base_url=lambda: url)
print("sent", s.sent, flush=True)
"""


def test_two_concurrent_runs_of_one_teacher_do_not_buy_a_work_twice(tmp_path):
    """Two runs of the same teacher on the same data folder (two Dagster runs of direct_labels_x, or the
    CLI while a run is going on). Expected: each work is bought once (the second run waits, or skips
    works the first has in flight). Seen: both runs read the store before either wrote a label, both send
    all 40 works: every call, token and dollar is spent twice and every work gets two labelled rows."""
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


# =====================================================================================================
# 2. LOST WORK: an endpoint-level error is stored as a final, per-work failure
# =====================================================================================================
def test_a_misconfigured_structured_output_does_not_fail_every_work_for_good(tmp_path):
    """structured_output = "json_schema" at a server that refuses json_schema (llama.cpp, many vLLM builds):
    every call is the same HTTP 400. Expected: the run stops (or the failures are not final), and after
    the registry is fixed the works are asked. Seen: each 400 is treated as an invalid reply about the
    works: batches are split down to single works, each asked 3 times (about 4 calls per work), every work
    is stored as a FINAL failure "HTTP 400: response_format json_schema is not supported"; structured_output
    is not part of the label key, so after the fix the next run sends nothing and the works stay failed."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    rows = frame_rows(8)
    with run_stub(reject_json_schema=True) as (url, _):
        first = label_works(
            storage,
            spec_for(url, works_per_call=4, concurrency=1, structured_output="json_schema"),
            rows,
            run_id="r1",
            log=LOG,
            base_url=lambda: url,
        )
        calls_first = stats_of(url)["calls"]
        fixed = spec_for(url, works_per_call=4, concurrency=1, structured_output="auto")
        second = label_works(storage, fixed, rows, run_id="r2", log=LOG, base_url=lambda: url)
    table = export_labels(storage, fixed, second.view_hashes)
    status = table.column("status").to_pylist()
    assert status.count("labelled") == 8, (
        f"first run: {first.outcomes} in {calls_first} calls for 8 works; after the fix: sent {second.sent}, "
        f"reused {second.reused}; stored {status.count('failed')} failed, e.g. {table.column('error')[0]}"
    )


def test_an_endpoint_answering_html_does_not_fail_every_work_for_good(tmp_path):
    """A base_url that reaches a web server (a proxy login page, an SPA that answers any path with its
    index.html and HTTP 200). Expected: an endpoint-level problem is not a verdict about the works (like
    UNAVAILABLE: the next run asks again). Seen: every work is a final failure "endpoint returned a body
    that is not an OpenAI chat completion (after 3 attempts)" after ~4 calls per work; the next run against
    the right URL sends nothing (base_url is not part of the key)."""
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
        log=LOG,
        base_url=lambda: "http://portal.invalid/v1",
        transport=httpx.MockTransport(html),
    )
    with run_stub() as (url, _):
        second = label_works(
            storage, spec_for(url, works_per_call=3, concurrency=1), rows, run_id="r2", log=LOG, base_url=lambda: url
        )
    assert second.outcomes.get("labelled") == 6, (
        f"HTML endpoint: {html.n} calls for 6 works, outcomes {dict(first.outcomes)}; then the right endpoint: "
        f"sent {second.sent}, reused {second.reused} (the works stay failed for good)"
    )


# =====================================================================================================
# 3. LOST PAID REPLIES: one exception in one batch aborts the run and drops the calls in flight
# =====================================================================================================
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
            log=LOG,
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
            log=LOG,
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
    """Some OpenAI-compatible servers return ``message.content`` as a list of content parts. Expected: a
    failure with a cause ("content is not a string"), or the text of the parts; the call stored with its
    cost. Seen: TypeError from re.match deep in validate_batch, the run dies, and the call (paid) is not in
    teacher_calls (on_call runs only after validation)."""
    stats = _label_two_through_mock(
        tmp_path, lambda req: httpx.Response(200, json=completion(content)), works_per_call=1, what=what
    )
    assert stats.outcomes == {"failed": 2}


def test_a_label_whose_id_is_not_a_string_is_an_invalid_reply_not_a_crash(tmp_path):
    """A model that writes ``"id": ["W1000"]`` (or an object). Expected: InvalidLabel "id is not a string",
    split and re-ask like any bad reply. Seen: TypeError "unhashable type: 'list'" in validate_batch
    (``wid in by_id``), the whole run dies, the call is not stored."""

    def handler(req):
        labels = [{**stub_label(r["id"]), "id": [r["id"]]} for r in records_of(req)]
        return httpx.Response(200, json=completion(json.dumps({"labels": labels})))

    stats = _label_two_through_mock(tmp_path, handler, works_per_call=2, what="a non-string id")
    assert stats.outcomes == {"failed": 2}


# =====================================================================================================
# 4. POISONED STORE: one bad value bricks every later run (recover() replays it and crashes again)
# =====================================================================================================
@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 2**63, "completion_tokens": 10},
        {"prompt_tokens": "120", "completion_tokens": "10"},
    ],
)
def test_a_bad_usage_block_does_not_crash_the_run_or_poison_later_runs(tmp_path, usage):
    """``usage`` with a token count that is not a 64-bit signed integer (a buggy proxy, a string).
    Expected: the count is dropped (NULL) or the call recorded with an error; the run goes on; and a
    later run against a HEALTHY endpoint works. Seen: a string crashes on_call (TypeError in cost_usd,
    the call never stored); 2**63 is archived (orjson takes u64) but the DuckDB flush dies (OverflowError,
    int64), the archive is left "unfinished", and EVERY later run of ANY teacher dies in recover()
    replaying it, although its endpoint is fine."""
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
                log=LOG,
                base_url=lambda: "http://m.invalid/v1",
                transport=httpx.MockTransport(handler(bad)),
            )
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{run}: {type(exc).__name__}: {exc}")
    assert not errors, errors


def _write_archive(storage: MetacanStorage, teacher: str, name: str, payload: bytes) -> Path:
    path = storage.root / ARCHIVE_DIR / teacher / "2026-12-01" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(payload))
    return path


@pytest.mark.parametrize(
    "bad_line",
    [
        b"\x8b\x1f\x00garbage-after-bit-rot\n",
        b'{"kind": "call"}\n',
        b'{"kind": "label", "row": {"label_id": "L1", "created_at": "yesterday"}}\n',
    ],
)
def test_a_damaged_archive_file_does_not_stop_every_teacher(tmp_path, bad_line):
    """One damaged file in data/teacher_archive (a line that decodes to garbage, an event without its row,
    a row with a bad timestamp). Expected: recover() reports the file (and what it could read) and the run
    goes on. Seen: recover() raises (orjson.JSONDecodeError / KeyError / ValueError without a file name)
    before any work is looked up, for every teacher, on every run, until someone finds and deletes the file."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    good = {
        "kind": "label",
        "row": {
            "label_id": "L0",
            "work_id": "W1",
            "teacher": "other",
            "status": "failed",
            "error": "x",
            "created_at": "2026-12-01T00:00:00",
        },
    }
    _write_archive(storage, "other", "dead-run-0000.jsonl.gz", orjson.dumps(good) + b"\n" + bad_line)
    with run_stub() as (url, _):
        try:
            stats = label_works(storage, spec_for(url), frame_rows(4), run_id="r1", log=LOG, base_url=lambda: url)
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"a damaged archive of teacher 'other' stopped teacher 'stub': {type(exc).__name__}: {exc}")
    assert stats.outcomes == {"labelled": 4}


# =====================================================================================================
# 5. HANGS
# =====================================================================================================
def test_a_huge_retry_after_does_not_park_the_run(tmp_path):
    """A 429/503 with ``Retry-After: 86400`` (a proxy's daily quota). Expected: a wait beyond a cap (or
    beyond timeout_s) ends the attempts now: the works are UNAVAILABLE failures the next run asks again.
    Seen: _wait returns max(backoff, Retry-After) uncapped; the run sleeps a day."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    mock = httpx.MockTransport(lambda req: httpx.Response(429, headers={"Retry-After": "86400"}, text="quota"))
    spec = spec_for("http://m.invalid/v1", works_per_call=2, concurrency=1, max_transport_attempts=2, timeout_s=5)
    done, result = run_in_thread(
        lambda: label_works(
            storage, spec, frame_rows(2), run_id="r1", log=LOG, base_url=lambda: "http://m.invalid/v1", transport=mock
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
    a stuck keep-alive). Expected: timeout_s bounds the call, so it fails as a timeout (UNAVAILABLE) within
    a few seconds. Seen: httpx's timeout is per read; each byte resets it; the call takes ~len(body) x 0.2 s
    (minutes), and with concurrency N the run hangs N calls at a time."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    url, srv = _trickle_server(0.2)
    spec = spec_for(url, works_per_call=1, concurrency=1, max_transport_attempts=1, timeout_s=1)
    try:
        done, result = run_in_thread(
            lambda: label_works(storage, spec, frame_rows(1), run_id="r1", log=LOG, base_url=lambda: url), timeout_s=8
        )
    finally:
        srv.close()
    assert done, "one call with timeout_s=1 still running after 8 s"


# =====================================================================================================
# 6. QUIETLY WRONG
# =====================================================================================================
def test_concurrent_refusals_of_json_schema_fall_back_one_step_not_two(tmp_path):
    """structured_output auto, concurrency 4, a server that refuses only json_schema. Expected: the client
    settles on json_object_schema (the grammar: the strongest mode the server has). Seen: the four calls in
    flight are each refused, each pops one mode from the shared list: json_object_schema is skipped and the
    teacher runs on "none" (plain JSON asked for in words), which costs invalid replies and re-asks."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    with run_stub(reject_json_schema=True, latency_ms=50) as (url, _):
        stats = label_works(
            storage,
            spec_for(url, works_per_call=1, concurrency=4, structured_output="auto"),
            frame_rows(8),
            run_id="r1",
            log=LOG,
            base_url=lambda: url,
        )
    assert stats.structured_output == "json_object_schema", f"settled on {stats.structured_output!r}"


def test_a_negative_max_works_is_not_a_budget_bypass(tmp_path):
    """max_works (launchpad: "send at most this many works") = -1. Expected: rejected, or nothing sent.
    Seen: ``if max_works and len(to_call) > max_works`` is true and ``to_call[:-1]`` sends all but one
    work, reporting n+1 works "deferred"."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    with run_stub() as (url, _):
        try:
            stats = label_works(
                storage, spec_for(url), frame_rows(10), run_id="r1", log=LOG, base_url=lambda: url, max_works=-1
            )
        except ValueError:
            return
    assert stats.sent == 0, f"max_works=-1: sent {stats.sent} of 10 works, deferred {stats.deferred}"


def test_a_coverage_batch_that_does_not_exist_is_an_error_not_an_empty_success(tmp_path):
    """coverage = "batch:pilot_2026" with a typo, or before the batch was loaded. Expected: an error naming
    the batch (the asset covers nothing). Seen: [] works, the asset materializes an empty table and its
    covers check passes (0 of 0 works)."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    storage.write_table("frame", pa.Table.from_pylist(frame_rows(3)))
    spec = TeacherSpec(name="batchy", base_url="http://x.invalid/v1", coverage="batch:pilot_2026")
    try:
        works = select_works(storage, spec)
    except (ValueError, LookupError):
        return
    pytest.fail(f"coverage batch:pilot_2026 (no such batch) selected {works!r} silently")


# =====================================================================================================
# 7. IMPORTS
# =====================================================================================================
IMPORT_SPEC = ImportSpec(teacher="ext", model="m", prompt_version="p1", record_view="title_abstract", source="test")


def _label(wid: str, meta: bool) -> dict:
    return {
        "id": wid,
        "categories": ["metaresearch"] if meta else [],
        "domain": "methods" if meta else None,
        "study_design": "observational",
        "genre": "empirical",
        "about_ca_system": False,
        "about_ca_topic": False,
        "confidence": "high",
        "reason": "r",
    }


def _current_import(tmp_path, wid):
    with duckdb.connect(str(tmp_path / "metacan.duckdb")) as con:
        create_tables(con)
        return con.execute(f"SELECT categories FROM ({current_imported_sql()}) WHERE work_id = ?", [wid]).fetchone()


def test_a_label_file_reverted_to_an_earlier_version_wins_again(tmp_path):
    """labels.json v1 says W1 is metaresearch; v2 corrects it to []; v3 reverts the correction (v3 == v1).
    Expected: the current imported label of W1 is what the file says now (metaresearch), as after every
    other change ("a later import wins"). Seen: v3's SHA is recorded already, so the import is skipped
    whole (and even a v3 that differs elsewhere skips W1 as "already stored"): imported_labels keeps v2's
    label, which the file no longer contains."""
    path = tmp_path / "labels.json"
    con = duckdb.connect(str(tmp_path / "metacan.duckdb"))
    create_tables(con)
    for meta in (True, False, True):
        path.write_text(json.dumps([_label("W1", meta), _label("W2", False)]))
        import_file(con, path, IMPORT_SPEC, "r")
        time.sleep(0.01)
    got = con.execute(f"SELECT categories FROM ({current_imported_sql()}) WHERE work_id = 'W1'").fetchone()[0]
    con.close()
    assert got == ["metaresearch"], f"the file says metaresearch; imported_labels says {got}"


@pytest.mark.parametrize(
    "wid", ["W1 ", " W1", "https://openalex.org/W1", "W1\n", "w1", "A1", "https://openalex.org/A1"]
)
def test_an_imported_id_that_names_no_work_is_not_stored_as_a_good_label(tmp_path, wid):
    """Ids with stray whitespace or in OpenAlex URL form. Expected: normalised to ``W1`` or a failed row
    saying the id is not a work id. Seen: a ``labelled`` row for a work id no frame work has: it joins
    nothing (agreement, student) and nobody is told.

    Decision (imports.py docstring, "ids"): the OpenAlex URL form is normalised (it is the id OpenAlex
    publishes); whitespace around an id is refused, not trimmed (a padded or split key is the mark of a
    broken export, which a silent trim would hide). A refused id is a failed row with work_id NULL (only
    work ids go in work_id) and the raw id in the cause."""
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps(_label(wid, True)) + "\n")
    con = duckdb.connect(str(tmp_path / "metacan.duckdb"))
    create_tables(con)
    import_file(con, path, IMPORT_SPEC, "r")
    rows = con.execute("SELECT work_id, status, error FROM teacher_labels").fetchall()
    con.close()
    if wid == "https://openalex.org/W1":
        assert [r[:2] for r in rows] == [("W1", "labelled")], f"stored {rows}"
    else:
        assert [r[:2] for r in rows] == [(None, "failed")], f"stored {rows}"
        assert repr(wid) in rows[0][2] and ("whitespace" in rows[0][2] or "not an OpenAlex work id" in rows[0][2]), (
            rows[0][2]
        )


def test_a_json_object_file_is_refused_with_a_clear_error(tmp_path):
    """A pretty-printed JSON object (``{"labels": [...]}``, the teacher reply format) given as a label
    file. Expected: ValueError naming the file ("a JSON object; give a JSON array or JSON Lines"), like a
    broken array. Seen: read as JSON Lines: every line of the pretty-print becomes a failed row without a
    work id ("not JSON"), stored for good and shown in imported_labels."""
    path = tmp_path / "labels.json"
    con = duckdb.connect(str(tmp_path / "metacan.duckdb"))
    create_tables(con)
    # Pretty-printed (whole and cut short), and the one-line reply form.
    for text in (
        json.dumps({"labels": [_label("W1", True), _label("W2", False)]}, indent=2),
        json.dumps({"labels": [_label("W1", True), _label("W2", False)]}, indent=2)[:-40],
        json.dumps({"labels": [_label("W1", True)]}),
    ):
        path.write_text(text)
        try:
            report = import_file(con, path, IMPORT_SPEC, "r")
        except ValueError as exc:
            assert str(path) in str(exc) and "JSON array" in str(exc) and "JSON Lines" in str(exc), str(exc)
            continue
        stored = con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0]
        con.close()
        pytest.fail(
            f"imported as {report.failed} failed rows ({stored} stored rows), first cause: {report.invalid[0][3]}"
        )
    # nothing stored: no label row, no import record (the tables exist: storage creates them when it opens)
    assert con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM label_imports").fetchone()[0] == 0
    con.close()


def test_an_empty_label_file_is_reported(tmp_path):
    """An empty file (an export that failed). Expected: an error, or at least the file recorded in
    label_imports with 0 rows. Seen: no record, no row, no note: the import "succeeds" and leaves no trace."""
    path = tmp_path / "labels.jsonl"
    path.write_text("")
    con = duckdb.connect(str(tmp_path / "metacan.duckdb"))
    create_tables(con)
    try:
        report = import_file(con, path, IMPORT_SPEC, "r")
    except ValueError as exc:
        # The decision (imports.py docstring): an empty file is refused, naming the file; '[]' is the
        # explicit "no labels", recorded in label_imports with 0 rows.
        assert str(path) in str(exc) and "empty" in str(exc), str(exc)
        empty = tmp_path / "none.json"
        empty.write_text("[]")
        report = import_file(con, empty, IMPORT_SPEC, "r")
        assert report.files == [(str(empty), hashlib.sha256(b"[]").hexdigest())] and not report.already_imported
        assert con.execute("SELECT file, rows FROM label_imports").fetchall() == [(str(empty), 0)]
        assert import_file(con, empty, IMPORT_SPEC, "r").already_imported
        assert con.execute("SELECT count(*) FROM label_imports").fetchone()[0] == 1
        return
    finally:
        con.close()
    assert report.files, (
        f"empty file: report.files = {report.files}, labelled {report.labelled}, failed {report.failed}"
    )


# =====================================================================================================
# 8. REGISTRY
# =====================================================================================================
def _registry(tmp_path, extra: str) -> Path:
    text = '[teachers.gemma]\n\n[teachers.codex]\ncoverage = "sample"\n\n' + extra
    path = tmp_path / "teachers.toml"
    path.write_text(text)
    return path


def test_a_teacher_table_with_a_name_key_is_a_clear_error(tmp_path):
    """``[teachers.gpt] name = "gpt"`` (a natural thing to write). Expected: ValueError naming the file and
    the field, like any other bad field. Seen: TypeError "got multiple values for keyword argument 'name'"
    with no file, raised at import of the Dagster definitions."""
    path = _registry(tmp_path, '[teachers.gpt]\nname = "gpt"\nbase_url = "http://x/v1"\n')
    with pytest.raises(ValueError, match="teachers.gpt"):
        load_registry(path, environ={})


@pytest.mark.parametrize("field, value", [("works_per_call", '"25"'), ("logprobs", '"yes"'), ("timeout_s", "inf")])
def test_registry_values_of_the_wrong_type_are_refused(tmp_path, field, value):
    """Strings where numbers/booleans belong are coerced (pydantic lax mode), and ``timeout_s = inf`` (a
    valid TOML float) is accepted: a call that may never end. Expected: ValueError naming the field."""
    path = _registry(tmp_path, f'[teachers.gpt]\nbase_url = "http://x/v1"\n{field} = {value}\n')
    with pytest.raises(ValueError, match=field):
        load_registry(path, environ={})
