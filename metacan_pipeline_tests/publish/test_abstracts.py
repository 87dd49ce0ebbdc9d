"""Tests of metacan_pipeline.publish.abstracts: the live abstract fetcher (batching, cache, retries, breaker,
hostile answers)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from metacan_pipeline.publish.abstracts import Abstract, AbstractFetcher
from metacan_pipeline_tests.builders.openalex import LME4_ABSTRACT
from metacan_pipeline_tests.openalex_stub import real_works


@pytest.fixture()
def stub(openalex_api):
    return openalex_api


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _ids_for_bulk(n_real: int) -> list[str]:
    """Real ids: lme4 first, the null-abstract work, the gap work, then other real works up to n_real."""
    head = ["W1951724000", "W2612755892", "W2241997964"]
    rest = [w for w in sorted(real_works()) if w not in head]
    return head + rest[: n_real - len(head)]


def test_120_ids_cost_3_calls_with_the_documented_query(stub):
    ids = _ids_for_bulk(119) + ["W9999999999999"]  # the last one is no OpenAlex work
    assert len(set(ids)) == 120 and "W9999999999999" not in real_works()
    with AbstractFetcher(stub.base_url, clock=FakeClock()) as f:
        got = f.fetch(ids)
    assert f.calls == 3 and len(stub.hits) == 3  # <= 1 call per 50 works
    for q in stub.hits:
        name, _, values = q["filter"].partition(":")
        assert name == "ids.openalex" and 1 <= len(values.split("|")) <= 50
        assert q["select"] == "id,abstract_inverted_index,ids"
        assert int(q["per_page"]) >= 50
        assert "api_key" not in q and "mailto" not in q
    assert [len(q["filter"].split("|")) for q in stub.hits] == [50, 50, 20]
    assert sorted(w for q in stub.hits for w in q["filter"].partition(":")[2].split("|")) == sorted(ids)
    assert list(got) == ids  # one entry per id, in order
    lme4 = Abstract("W1951724000", "ok", LME4_ABSTRACT, None, got["W1951724000"].fetched_at, "openalex")
    assert got["W1951724000"] == dataclasses.replace(lme4, doi="10.18637/jss.v067.i01")  # its record's ids.doi, bare
    assert got["W1951724000"].fetched_at.tzinfo == dt.UTC
    assert got["W2612755892"].status == "none" and got["W2612755892"].text is None  # real record, index null
    assert got["W9999999999999"] == Abstract("W9999999999999", "missing", None, None, got["W9999999999999"].fetched_at)
    expected = {w: ("none" if not real_works()[w]["abstract_inverted_index"] else "ok") for w in ids[:-1]}
    assert {w: got[w].status for w in ids[:-1]} == expected
    assert sum(s == "none" for s in expected.values()) >= 5  # the sample really holds works without abstract
    assert all(a.error is None for a in got.values())


def test_cache_serves_repeats_until_the_ttl_passes(stub):
    clock = FakeClock()
    ids = _ids_for_bulk(60)
    with AbstractFetcher(stub.base_url, ttl_seconds=600, clock=clock) as f:
        first = f.fetch(ids)
        assert f.calls == 2
        clock.now += 599
        again = f.fetch(ids)
        assert f.calls == 2 and again == first  # nothing sent; same answers, same fetched_at
        part = f.fetch(ids[:10] + ["W9999999999999"])  # only the unseen id costs a call
        assert f.calls == 3 and len(stub.hits[-1]["filter"].split("|")) == 1
        assert part["W9999999999999"].status == "missing"
        clock.now += 2  # past the TTL of the first answers
        later = f.fetch(ids)
        assert f.calls == 5
        assert (
            later["W1951724000"].text == LME4_ABSTRACT
            and later["W1951724000"].fetched_at > first["W1951724000"].fetched_at
        )


def test_cache_is_bounded(stub):
    with AbstractFetcher(stub.base_url, cache_size=10, clock=FakeClock()) as f:
        got = f.fetch(_ids_for_bulk(30))
        assert f.calls == 1 and len(got) == 30
        assert len(f.cache) <= 10
        assert f.cache.maxsize == 10


def test_default_base_url_comes_from_the_environment(stub, monkeypatch):
    from metacan_pipeline.settings import API_URL_ENV

    monkeypatch.setenv(API_URL_ENV, stub.base_url)
    with AbstractFetcher(clock=FakeClock()) as f:
        assert f.base_url == stub.base_url
        got = f.fetch(["W2241997964"], progress=True)
    assert got["W2241997964"].status == "ok" and f.calls == 1
    for bad in ("not a url", "ftp://api.test", "javascript:alert(1)", "https://" + "a" * 300 + ".invalid"):
        monkeypatch.setenv(API_URL_ENV, bad)
        with pytest.raises(ValueError, match=f"^{API_URL_ENV}=.* is not an absolute http"):
            AbstractFetcher(clock=FakeClock())  # refused where it is read (metacan serve: at start-up), never per page


def test_an_answer_over_the_size_cap_is_a_failure_read_no_further():
    from metacan_pipeline.publish.abstracts import MAX_ANSWER_BYTES

    sent = []

    async def stream():  # the fetcher's client is asynchronous (its deadline covers the whole request)
        for _ in range(MAX_ANSWER_BYTES // 65536 + 100):  # 100 chunks past the cap
            sent.append(1)
            yield b" " * 65536

    f = _fetcher(_scripted(httpx.Response(200, content=stream())))
    got = f.fetch(["W8"])
    assert f.calls == 1 and got["W8"].status == "failed" and "answer too large" in got["W8"].error
    assert len(sent) == MAX_ANSWER_BYTES // 65536 + 1  # stopped at the first chunk past the cap


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_answer_that_expands_past_the_cap_stops_at_the_cap(encoding):
    """A body of a few hundred kilobytes that decompresses to 1 GB: decoded a bounded piece at a time, so the
    fetcher never holds much more than the cap (it held 304 MB when httpx decoded each network chunk whole)."""
    import tracemalloc
    import zlib

    from metacan_pipeline.publish.abstracts import MAX_ANSWER_BYTES

    squeeze = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS)
    block = b"\0" * (1 << 20)
    bomb = b"".join(squeeze.compress(block) for _ in range(1024)) + squeeze.flush()
    assert len(bomb) < 2 * 1024 * 1024
    seen = []

    def respond(request):
        seen.append(request.headers["accept-encoding"])
        return httpx.Response(200, headers={"Content-Encoding": encoding}, stream=httpx.ByteStream(bomb))

    f = _fetcher(respond, max_attempts=1)
    tracemalloc.start()
    try:
        got = f.fetch(["W8"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got["W8"].status == "failed" and "answer too large" in got["W8"].error and seen == ["gzip"]
    assert peak < 4 * MAX_ANSWER_BYTES  # the cap, one piece past it and the bomb itself


def test_a_gzip_answer_within_the_cap_is_read():
    import gzip
    import json

    page = {"results": [{"id": "https://openalex.org/W8", "abstract_inverted_index": {"Hello": [0], "world": [1]}}]}
    body = gzip.compress(json.dumps(page).encode())
    answer = lambda request: httpx.Response(200, headers={"Content-Encoding": "gzip"}, stream=httpx.ByteStream(body))  # noqa: E731
    f = _fetcher(answer)
    got = f.fetch(["W8"])
    assert got["W8"].status == "ok" and got["W8"].text == "Hello world"


def _gzip_answer(status: int, body: bytes):
    return lambda request: httpx.Response(status, headers={"Content-Encoding": "gzip"}, stream=httpx.ByteStream(body))


def test_a_multi_member_gzip_answer_is_read_whole_and_bytes_after_its_end_are_refused():
    import gzip
    import json

    page = json.dumps(
        {"results": [{"id": "https://openalex.org/W8", "abstract_inverted_index": {"Hello": [0], "world": [1]}}]}
    ).encode()
    got = _fetcher(_gzip_answer(200, gzip.compress(page[:20]) + gzip.compress(page[20:]))).fetch(["W8"])
    assert got["W8"].status == "ok" and got["W8"].text == "Hello world"
    got = _fetcher(_gzip_answer(200, gzip.compress(page) + b"GARBAGE"), max_attempts=1).fetch(["W8"])
    assert got["W8"].status == "failed" and "does not decode" in got["W8"].error


def test_an_error_answer_whose_body_cannot_be_read_keeps_its_status():
    import gzip

    bomb = gzip.compress(b"\0" * (64 << 20))
    got = _fetcher(_gzip_answer(503, bomb), max_attempts=2, retry_wait_max_s=0).fetch(["W8"])
    assert got["W8"].status == "failed" and got["W8"].error.startswith("HTTP 503 (gave up after 2 attempts)")
    got = _fetcher(_gzip_answer(404, b"not gzip"), max_attempts=3).fetch(["W8"])
    assert got["W8"].error.startswith("HTTP 404 from OpenAlex /works (not retried): (body not read: the body does")


def test_small_batches_and_per_page_follow_batch_size(stub):
    with AbstractFetcher(stub.base_url, batch_size=7, clock=FakeClock()) as f:
        got = f.fetch(_ids_for_bulk(20))
    assert f.calls == 3 and [int(q["per_page"]) for q in stub.hits] == [7, 7, 7]
    assert all(a.status in ("ok", "none") for a in got.values())
    with pytest.raises(ValueError, match="batch_size"):
        AbstractFetcher(stub.base_url, batch_size=51)
    with pytest.raises(ValueError, match="batch_size"):
        AbstractFetcher(stub.base_url, batch_size=0)


def test_api_key_and_mailto_are_sent_and_the_key_never_shows(monkeypatch):
    monkeypatch.setenv("METACAN_TEST_OA_KEY", "sekret-key-123")
    seen: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        return httpx.Response(403, text=f"forbidden: {request.url}")  # a server that echoes the URL

    with AbstractFetcher(
        "https://api.test",
        api_key_env="METACAN_TEST_OA_KEY",
        mailto="team@example.org",
        transport=httpx.MockTransport(handler),
    ) as f:
        got = f.fetch(["W1"])
    assert seen[0].params["api_key"] == "sekret-key-123" and seen[0].params["mailto"] == "team@example.org"
    assert got["W1"].status == "failed" and "HTTP 403" in got["W1"].error
    assert "sekret-key-123" not in got["W1"].error and "***" in got["W1"].error


def _ok_page(request: httpx.Request) -> httpx.Response:
    ids = request.url.params["filter"].partition(":")[2].split("|")
    return httpx.Response(
        200,
        json={
            "meta": {"count": len(ids)},
            "results": [
                {
                    "id": f"https://openalex.org/{w}",
                    "abstract_inverted_index": {"Abstract": [0], "Text": [1], f"of {w}.": [2]},
                }
                for w in ids
            ],
        },
    )


def _scripted(*steps):
    """A MockTransport handler answering with steps[i] on the i-th request (the last step repeats)."""
    n = {"i": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        step = steps[min(n["i"], len(steps) - 1)]
        n["i"] += 1
        if isinstance(step, Exception):
            raise step
        return step(request) if callable(step) else step

    return handler


def _fetcher(handler, **kw) -> AbstractFetcher:
    kw.setdefault("retry_wait_max_s", 0)
    return AbstractFetcher("https://api.test", transport=httpx.MockTransport(handler), clock=FakeClock(), **kw)


def test_500_then_200_is_retried():
    f = _fetcher(_scripted(httpx.Response(500, text="oops"), _ok_page))
    got = f.fetch(["W11", "W12"])
    assert f.calls == 2
    assert got["W11"].status == "ok" and got["W11"].text == "Text of W11."


def test_429_with_retry_after_is_retried_and_capped():
    f = _fetcher(_scripted(httpx.Response(429, headers={"Retry-After": "0"}), _ok_page))
    assert f.fetch(["W5"])["W5"].status == "ok" and f.calls == 2
    # a Retry-After of 1000 s is capped (here at 10 ms): the fetch does not wait 1000 s
    f = _fetcher(_scripted(httpx.Response(429, headers={"Retry-After": "1000"}), _ok_page), retry_after_max_s=0.01)
    assert f.fetch(["W5"])["W5"].status == "ok" and f.calls == 2


def test_503_on_every_attempt_fails_after_max_attempts():
    f = _fetcher(_scripted(httpx.Response(503)), max_attempts=4)
    got = f.fetch(["W7"])
    assert f.calls == 4
    assert got["W7"].status == "failed" and got["W7"].text is None
    assert got["W7"].error == "HTTP 503 (gave up after 4 attempts)"


def test_unreachable_server_trips_the_breaker():
    ids = [f"W{i}" for i in range(1, 11)]  # 5 batches of 2
    f = _fetcher(_scripted(httpx.ConnectError("connection refused")), batch_size=2, max_attempts=3, breaker_after=2)
    got = f.fetch(ids)
    assert f.calls == 2 * 3  # two batches tried 3 times each; the other three batches never sent
    assert all(a.status == "failed" and a.text is None for a in got.values()) and list(got) == ids
    for wid in ids[:4]:
        assert got[wid].error.startswith("ConnectError: connection refused") and "3 attempts" in got[wid].error
    for wid in ids[4:]:
        assert got[wid].error == "not attempted: OpenAlex unreachable (2 consecutive batches failed)"
    assert len(f.cache) == 0


def test_a_failed_batch_is_reported_to_the_logger_it_was_given(caplog):
    """The asset passes its context.log: a failed batch is logged there, in the run's log, not on bare stderr."""
    import logging

    logger = logging.getLogger("the-assets-log")
    f = _fetcher(_scripted(httpx.ConnectError("refused")), batch_size=2, max_attempts=1, breaker_after=2, logger=logger)
    with caplog.at_level(logging.WARNING, logger="the-assets-log"):
        f.fetch([f"W{i}" for i in range(1, 7)])
    lines = [r.getMessage() for r in caplog.records if r.name == "the-assets-log"]
    assert lines == ["abstracts: batch of 2 works failed: ConnectError: refused (gave up after 1 attempt)"] * 2


def test_timeouts_fail_the_batch():
    f = _fetcher(_scripted(httpx.ReadTimeout("read timed out")), max_attempts=2, timeout_s=0.5)
    got = f.fetch(["W3"])
    assert f.calls == 2 and got["W3"].status == "failed"
    assert got["W3"].error == "timeout (ReadTimeout, limit 0.5 s) (gave up after 2 attempts)"


def test_a_success_resets_the_breaker():
    ids = [f"W{i}" for i in range(1, 9)]  # 4 batches of 2: fail, ok, fail, ok
    f = _fetcher(_scripted(httpx.Response(400), _ok_page, httpx.Response(400), _ok_page), batch_size=2, breaker_after=2)
    got = f.fetch(ids)
    assert f.calls == 4
    assert [got[w].status for w in ids] == ["failed", "failed", "ok", "ok", "failed", "failed", "ok", "ok"]


def test_invalid_json_and_400_are_not_retried():
    f = _fetcher(_scripted(httpx.Response(200, text="<html>proxy error</html>")))
    got = f.fetch(["W8"])
    assert f.calls == 1 and got["W8"].status == "failed" and "not JSON" in got["W8"].error
    f = _fetcher(_scripted(httpx.Response(200, json=[{"id": "https://openalex.org/W8"}])))
    got = f.fetch(["W8"])
    assert f.calls == 1 and got["W8"].status == "failed" and "not a list page" in got["W8"].error
    f = _fetcher(_scripted(httpx.Response(400, json={"error": "Invalid query parameters error."})))
    got = f.fetch(["W8"])
    assert f.calls == 1 and got["W8"].status == "failed"
    assert got["W8"].error.startswith("HTTP 400 from OpenAlex /works (not retried)")


def test_failures_are_not_cached():
    f = _fetcher(_scripted(httpx.Response(400), _ok_page))
    assert f.fetch(["W9", "W10"])["W9"].status == "failed"
    assert len(f.cache) == 0
    got = f.fetch(["W9", "W10"])  # tried again, now answered
    assert f.calls == 2 and got["W9"].status == "ok" and got["W10"].text == "Text of W10."
    f.fetch(["W9", "W10"])
    assert f.calls == 2  # and now cached


def test_a_truncated_answer_is_a_failure_not_a_missing_work():
    def short_page(request: httpx.Request) -> httpx.Response:  # a server that ignores per_page and sends 1 of 3
        return httpx.Response(
            200,
            json={
                "meta": {"count": 3},
                "results": [{"id": "https://openalex.org/W1", "abstract_inverted_index": None}],
            },
        )

    got = _fetcher(short_page).fetch(["W1", "W2", "W3"])
    assert got["W1"].status == "none"
    assert got["W2"].status == got["W3"].status == "failed" and "1 of 3" in got["W2"].error


def test_bad_ids_raise_before_any_call():
    requests: list[httpx.Request] = []

    def handler(request):
        requests.append(request)
        return _ok_page(request)

    f = _fetcher(handler)
    for bad in ("W12; DROP", "https://openalex.org/W1", "", "w1", "W1\n", "A123", None):
        with pytest.raises(ValueError) as err:
            f.fetch(["W1", bad])
        assert repr(bad) in str(err.value)
    with pytest.raises(TypeError):
        f.fetch("W1")
    assert requests == [] and f.calls == 0


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({}, b"[" * 100_000 + b"]" * 100_000),  # deeper than the JSON parser goes: RecursionError
        ({"Content-Encoding": "gzip"}, b'{"results": []}'),  # not gzip: httpx.DecodingError
    ],
    ids=["nested-json", "bad-content-encoding"],
)
def test_hostile_bodies_fail_the_batch_and_never_escape_fetch(headers, body):
    respond = lambda request: httpx.Response(200, headers=headers, stream=httpx.ByteStream(body))  # noqa: E731
    got = _fetcher(respond, max_attempts=1).fetch(["W1", "W2"])
    assert {a.status for a in got.values()} == {"failed"} and all(a.error for a in got.values())


def test_unreadable_inverted_indexes_are_failures_not_missing_abstracts():
    bodies = {"W1": ["a", "list"], "W2": {"Text": ["0", "1"]}, "W3": {"Text": [True]}, "W4": None, "W5": {"Fine.": [0]}}
    page = httpx.Response(
        200,
        json={
            "meta": {"count": 6},
            "results": [
                {"id": f"https://openalex.org/{w}", "abstract_inverted_index": idx} for w, idx in bodies.items()
            ]
            + [{"id": "https://openalex.org/W5", "abstract_inverted_index": None}],
        },
    )  # a duplicate result without one
    got = _fetcher(_scripted(page)).fetch(list(bodies))
    assert {w: a.status for w, a in got.items()} == {
        "W1": "failed",
        "W2": "failed",
        "W3": "failed",
        "W4": "none",
        "W5": "ok",
    }
    assert "cannot be read" in got["W1"].error and got["W5"].text == "Fine."


@pytest.mark.parametrize("where", ["body", "headers"])
def test_a_trickling_server_is_cut_off_at_the_timeout(where):
    """timeout_s bounds the whole request: httpx's own timeout is per read, and a byte every 0.3 s, of the body or
    of the headers, never trips it."""
    body = b'{"meta": {"count": 0}, "results": []}'
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    slow = body if where == "body" else head + body

    class Trickle(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if where == "body":
                self.wfile.write(head)
            try:
                for i in range(len(slow)):
                    self.wfile.write(slow[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.3)
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        t0 = time.monotonic()
        with AbstractFetcher(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=1.0, max_attempts=1) as f:
            got = f.fetch(["W1"])
        assert time.monotonic() - t0 < 3 and got["W1"].status == "failed"
        assert got["W1"].error.startswith("timeout (ReadTimeout, limit 1 s)")
    finally:
        server.shutdown()


def test_the_breaker_holds_across_the_fetch_calls_of_one_build():
    """work_pages calls fetch() once per chunk: an OpenAlex refusing everything costs breaker_after batches
    of max_attempts requests for the whole build, not per chunk."""
    f = _fetcher(_scripted(httpx.Response(429, headers={"Retry-After": "0"})), retry_after_max_s=0)
    for chunk in range(5):
        got = f.fetch([f"W{chunk * 2000 + i + 1}" for i in range(2000)])
        assert {a.status for a in got.values()} == {"failed"}
    assert f.calls == 2 * 3 and "not attempted: OpenAlex unreachable" in got["W10000"].error


def test_a_fetcher_never_closed_ends_its_loop_thread_when_collected():
    """Each fetcher runs its requests on an event loop thread of its own; one that is dropped without close() must
    not leave that thread behind (50 dropped fetchers leave no thread of theirs)."""
    import gc

    def loops() -> int:
        return sum(t.name == "abstracts-http" for t in threading.enumerate())

    gc.collect()  # fetchers other tests dropped
    before = loops()
    for _ in range(20):
        AbstractFetcher("http://127.0.0.1:9", clock=FakeClock())
    gc.collect()
    assert loops() == before
    with AbstractFetcher("http://127.0.0.1:9", clock=FakeClock()):
        assert loops() == before + 1
    assert loops() == before
