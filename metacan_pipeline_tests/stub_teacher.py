"""A local OpenAI-compatible STUB teacher for tests and benchmarks (no model: labels come from a hash).

Protocol (the batched teacher client's):

- ``POST /v1/chat/completions`` with an OpenAI body (``model``, ``messages``, ``temperature``,
  ``max_tokens``, optional ``response_format`` and ``logprobs``). The LAST user message carries the
  works as JSON lines between a line ``<records>`` and a line ``</records>``, each with an ``"id"``.
  The reply's ``choices[0].message.content`` is ``{"labels": [...]}``: one label per record, in order,
  deterministic from a hash of the id (about 10% ``metaresearch``), values from
  :mod:`metacan_pipeline.vocab`. ``usage`` is approximate (characters / 4). With ``"logprobs": true``
  the choice carries ``logprobs.content``: a few ``{"token", "logprob", ...}`` entries.
- ``GET /v1/models`` lists the one model (``--model``, default ``stub-teacher``).
- ``GET /stats``: counters since start (summed over workers): ``calls`` (every chat request),
  ``works`` (records in calls answered HTTP 200, faulty content included), ``works_received``,
  ``status`` (``200``/``400``/``429``/``500``/``dropped``/``fail_status``: answered by ``--fail-status``), ``faults`` (calls per FAULT mode),
  ``prompt_tokens``/``completion_tokens``.

Faults (deterministic, for fault tests): a record whose ``title`` contains ``FAULT:<mode>`` makes every
call that includes it misbehave; see :data:`FAULT_MODES`. Several modes in one call: ``drop`` wins,
then ``http500``, then one content mode (``refusal`` > ``empty`` > ``malformed`` > ``truncated``); the
per-label modes (``wrong_id``, ``missing_id``, ``oov``) apply to their own records. An unknown mode is
an HTTP 400 (a typo in a test must not pass silently). Bad requests (no records block, a record line
that is not a JSON object with a string id, ``stream``) are HTTP 400 with an OpenAI error body.

Server-wide options: ``--latency-ms`` (an ``asyncio.sleep`` per call that reaches the "model", i.e.
after the 429 and 400 checks), ``--burst-429 N`` (the first N chat calls, over all workers, get 429 with
``Retry-After: 0``), ``--reject-json-schema`` (HTTP 400 to ``json_schema`` requests, to test the
fallback), ``--honour-max-tokens`` (cut a reply longer than ``max_tokens`` x 4 characters, with
``finish_reason`` ``length``, as a real server would; off by default), ``--fail-status N`` (every chat
call that reaches the "model" is answered HTTP N with an OpenAI error body, and a 429 or 503 with
``Retry-After: 0``: an upstream that is broken or overloaded, or a key the server refuses with 401, while
``/v1/models`` still answers), ``--hang-after N`` (chat calls after the first N that reach the "model" in a worker
never answer: a server that stopped mid-run, for a test that kills it then), ``--workers N``.

Run: ``python -m metacan_pipeline_tests.stub_teacher --port 0 --latency-ms 20 [--workers 1]``; prints
``STUB_URL http://127.0.0.1:<port>/v1`` on stdout once the socket listens. From Python,
:func:`run_stub` starts it as a subprocess (so a test can SIGKILL it) and always stops it.

The app is a raw ASGI callable (no framework: the stub must not be the bottleneck of a client
benchmark) served by uvicorn with httptools and uvloop, access log off. With ``--workers N`` the
counters live in a small shared memory-mapped file, one slot per worker, so ``/stats`` and
``--burst-429`` are global.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import fcntl
import hashlib
import json
import mmap
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from metacan_pipeline.vocab import (
    CATEGORIES,
    CONFIDENCES,
    DOMAINS,
    GENRES,
    INSUFFICIENT_PAYLOAD,
    LABEL_FIELDS,
    STUDY_DESIGNS,
)

REPO = Path(__file__).resolve().parents[1]
MODULE = "metacan_pipeline_tests.stub_teacher"
ANNOUNCE = "STUB_URL"
DEFAULT_MODEL = "stub-teacher"
REFUSAL_TEXT = "I can't help with that"
JSON_SCHEMA_REJECTED = "response_format json_schema is not supported"

#: What a record titled ``... FAULT:<mode> ...`` does to every call that includes it.
FAULT_MODES: dict[str, str] = {
    "malformed": "content is not JSON",
    "truncated": "content is the JSON cut in the middle, finish_reason 'length'",
    "wrong_id": "that record's label carries another id (<id>_wrong)",
    "missing_id": "that record's label is left out",
    "oov": "that record's label has genre 'novel'",
    "empty": "content is ''",
    "refusal": f"content is null and message.refusal is {REFUSAL_TEXT!r}",
    "http500": "HTTP 500 with an OpenAI error body",
    "drop": "the connection is closed without a response",
}
_CONTENT_FAULTS = ("refusal", "empty", "malformed", "truncated")  # precedence order
_FAULT_RE = re.compile(r"FAULT:([A-Za-z0-9_]+)")

_METARESEARCH = CATEGORIES[0]
_SUBCATEGORIES = tuple(c for c in CATEGORIES[1:] if c != INSUFFICIENT_PAYLOAD)


# ------------------------------------------------------------------------------------------------
# labels
# ------------------------------------------------------------------------------------------------
def stub_label(work_id: str) -> dict:
    """The deterministic label of a work id: 10% metaresearch (7 in 8 of them with a second category and
    always a substantive domain), 3% one non-metaresearch category, 1% ``insufficient_payload`` alone,
    the rest ``[]`` with a null domain."""
    h = int.from_bytes(hashlib.blake2b(work_id.encode(), digest_size=8).digest(), "little")
    bucket, h = h % 1000, h // 1000
    domain = None
    if bucket < 100:
        categories = [_METARESEARCH]
        k, h = h % 8, h // 8
        if k < len(_SUBCATEGORIES):
            categories.append(_SUBCATEGORIES[k])
        domain, h = DOMAINS[1 + h % (len(DOMAINS) - 1)], h // 8
    elif bucket < 130:
        categories, h = [_SUBCATEGORIES[2 + h % 4]], h // 4  # bibliometrics .. open_science
    elif bucket < 140:
        categories = [INSUFFICIENT_PAYLOAD]
    else:
        categories = []
    design, h = STUDY_DESIGNS[h % len(STUDY_DESIGNS)], h // 16
    genre, h = GENRES[h % len(GENRES)], h // 16
    confidence, h = CONFIDENCES[h % len(CONFIDENCES)], h // 4
    return {
        "id": work_id,
        "categories": categories,
        "domain": domain,
        "study_design": design,
        "genre": genre,
        "about_ca_system": h % 20 == 0,
        "about_ca_topic": (h // 20) % 8 == 0,
        "confidence": confidence,
        "reason": f"Stub label for {work_id}: {'meta-research' if domain else 'not meta-research'}.",
    }


# ------------------------------------------------------------------------------------------------
# counters shared by the workers
# ------------------------------------------------------------------------------------------------
COUNTERS: tuple[str, ...] = (
    "calls",
    "works",
    "works_received",
    "prompt_tokens",
    "completion_tokens",
    "http_200",
    "http_400",
    "http_429",
    "http_500",
    "dropped",
    "fail_status",
) + tuple(f"fault_{m}" for m in FAULT_MODES)
_IX = {name: i for i, name in enumerate(COUNTERS)}
_HEADER_CELLS, _SLOT_CELLS, _MAX_SLOTS = 8, 32, 64  # header: [0] next slot, [1] 429 tickets taken
STATE_BYTES = 8 * (_HEADER_CELLS + _SLOT_CELLS * _MAX_SLOTS)
assert len(COUNTERS) <= _SLOT_CELLS


class Counters:
    """int64 cells in an mmap: a header and one slot per worker (no contention on the hot path).

    ``path=None``: an anonymous map (one worker, no locking). Otherwise a file made by the supervisor;
    ``fcntl.flock`` guards only the slot claim and the 429 tickets.
    """

    def __init__(self, path: str | None = None) -> None:
        self._fd = os.open(path, os.O_RDWR) if path else None
        self._map = mmap.mmap(self._fd if self._fd is not None else -1, STATE_BYTES)
        self.cells = memoryview(self._map).cast("q")
        with self._locked():
            slot = self.cells[0]
            self.cells[0] = slot + 1
        self.base = _HEADER_CELLS + (slot % _MAX_SLOTS) * _SLOT_CELLS

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self._fd is None:
            yield
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def add(self, name: str, n: int = 1) -> None:
        self.cells[self.base + _IX[name]] += n

    def take_429_ticket(self, limit: int) -> bool:
        """True for the first ``limit`` calls over all workers."""
        if limit <= 0 or self.cells[1] >= limit:  # monotonic: no lock once the burst is over
            return False
        with self._locked():
            if self.cells[1] >= limit:
                return False
            self.cells[1] += 1
            return True

    def snapshot(self) -> dict:
        slots = min(self.cells[0], _MAX_SLOTS)
        tot = {
            name: sum(self.cells[_HEADER_CELLS + s * _SLOT_CELLS + i] for s in range(slots)) for name, i in _IX.items()
        }
        return {
            "calls": tot["calls"],
            "works": tot["works"],
            "works_received": tot["works_received"],
            "prompt_tokens": tot["prompt_tokens"],
            "completion_tokens": tot["completion_tokens"],
            "status": {
                "200": tot["http_200"],
                "400": tot["http_400"],
                "429": tot["http_429"],
                "500": tot["http_500"],
                "dropped": tot["dropped"],
                "fail_status": tot["fail_status"],
            },
            "faults": {m: tot[f"fault_{m}"] for m in FAULT_MODES},
            "workers_started": self.cells[0],
        }


# ------------------------------------------------------------------------------------------------
# the ASGI app
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StubOptions:
    model: str = DEFAULT_MODEL
    latency_ms: float = 0.0
    burst_429: int = 0
    reject_json_schema: bool = False
    honour_max_tokens: bool = False
    metaresearch_ids: str = ""  # a file of work ids (one per line): the stub labels exactly these metaresearch
    fail_status: int = 0  # > 0: every chat call that reaches the model is answered with this HTTP status
    hang_after: int = 0  # > 0: chat calls after the first N that reach the model (in this worker) never answer


def oracle_label(work_id: str, positives: frozenset[str]) -> dict:
    """The stub's label of ``work_id`` when it is told which works are meta-research (``--metaresearch-ids``):
    ``[metaresearch]`` with domain ``methods`` for the listed ids, ``[]`` for the others; the other fields as
    :func:`stub_label`. A teacher that agrees with a reference set."""
    label = stub_label(work_id)
    hit = work_id in positives
    return {**label, "categories": ["metaresearch"] if hit else [], "domain": "methods" if hit else None}


class BadRequest(Exception):
    pass


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def parse_records(messages) -> tuple[list[dict], int]:
    """The records of the last user message and the characters of all messages; raises BadRequest."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    user, chars = None, 0
    for m in messages:
        if not isinstance(m, dict):
            raise BadRequest("every message must be an object")
        text = _text(m.get("content"))
        chars += len(text)
        if m.get("role") == "user":
            user = text
    if user is None:
        raise BadRequest("no user message")
    lines = user.split("\n")
    close = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip() == "</records>"), None)
    if close is None:
        raise BadRequest("the last user message has no line '</records>'")
    open_ = next((i for i in range(close - 1, -1, -1) if lines[i].strip() == "<records>"), None)
    if open_ is None:
        raise BadRequest("the last user message has no line '<records>' before '</records>'")
    records = []
    for n, line in enumerate(lines[open_ + 1 : close], 1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"record line {n} is not JSON: {exc}") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
            raise BadRequest(f"record line {n} is not a JSON object with a string id")
        records.append(rec)
    if not records:
        raise BadRequest("no records between <records> and </records>")
    return records, chars


def _asks_for_rows(messages) -> bool:
    """True when the last user message asks for the ``rows`` reply format (prompt v4 and later): the stub,
    like a model, answers in the shape the prompt asks for."""
    users = [_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return bool(users) and "JSON list holding exactly" in users[-1]


def _faults_of(rec: dict) -> list[str]:
    title = rec.get("title")
    if not isinstance(title, str) or "FAULT:" not in title:
        return []
    modes = _FAULT_RE.findall(title)
    for m in modes:
        if m not in FAULT_MODES:
            raise BadRequest(f"unknown FAULT mode {m!r} in the title of {rec['id']}; known: {sorted(FAULT_MODES)}")
    return modes


def _error_body(message: str, kind: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}})


def _logprobs(content: str) -> dict:
    toks = [content[i : i + 4] for i in range(0, min(len(content), 32), 4)]
    return {
        "content": [
            {
                "token": t,
                "logprob": -(zlib.crc32(t.encode()) % 1000) / 1000.0,
                "bytes": list(t.encode()),
                "top_logprobs": [],
            }
            for t in toks
        ],
        "refusal": None,
    }


async def _send(send, status: int, body: bytes, extra: list | None = None) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if extra:
        headers += extra
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive) -> bytes | None:
    chunks, more = [], True
    while more:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return None
        chunks.append(msg.get("body", b""))
        more = msg.get("more_body", False)
    return b"".join(chunks)


class StubTeacher:
    """The raw ASGI app. ``state_path``: the shared counter file of a multi-worker server."""

    def __init__(self, options: StubOptions = StubOptions(), state_path: str | None = None) -> None:
        self.options = options
        self.counters = Counters(state_path)
        self._latency_s = options.latency_ms / 1000.0
        self._positives = (
            frozenset(Path(options.metaresearch_ids).read_text(encoding="utf-8").split())
            if options.metaresearch_ids
            else None
        )
        self._seq = 0
        self._reached = 0
        self._models = orjson.dumps(
            {
                "object": "list",
                "data": [{"id": options.model, "object": "model", "created": 0, "owned_by": "metacan-stub"}],
            }
        )

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "http":
            path, method = scope["path"], scope["method"]
            if path == "/v1/chat/completions" and method == "POST":
                await self._chat(receive, send)
            elif path == "/v1/models" and method == "GET":
                await _send(send, 200, self._models)
            elif path == "/stats" and method == "GET":
                await _send(send, 200, orjson.dumps(self.counters.snapshot()))
            else:
                await _send(send, 404, _error_body(f"no route {method} {path}", "invalid_request_error"))
        elif kind == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    async def _chat(self, receive, send) -> None:
        c, opt = self.counters, self.options
        c.add("calls")
        raw = await _read_body(receive)
        if raw is None:
            return
        if c.take_429_ticket(opt.burst_429):
            c.add("http_429")
            await _send(
                send, 429, _error_body("rate limited (stub burst)", "rate_limit_error"), [(b"retry-after", b"0")]
            )
            return
        try:
            req = orjson.loads(raw)
            if not isinstance(req, dict):
                raise BadRequest("the body is not a JSON object")
            if req.get("stream"):
                raise BadRequest("stream is not supported by the stub")
            rf = req.get("response_format")
            if rf is not None:
                rtype = rf.get("type") if isinstance(rf, dict) else None
                if rtype not in ("json_schema", "json_object", "text"):
                    raise BadRequest(f"response_format type {rtype!r} is not supported")
                if rtype == "json_schema" and opt.reject_json_schema:
                    raise BadRequest(JSON_SCHEMA_REJECTED)
            records, prompt_chars = parse_records(req.get("messages"))
            faults = [_faults_of(r) for r in records]
        except orjson.JSONDecodeError as exc:
            c.add("http_400")
            await _send(send, 400, _error_body(f"the body is not JSON: {exc}", "invalid_request_error"))
            return
        except BadRequest as exc:
            c.add("http_400")
            await _send(send, 400, _error_body(str(exc), "invalid_request_error"))
            return
        c.add("works_received", len(records))
        modes = {m for fs in faults for m in fs}
        for m in modes:
            c.add(f"fault_{m}")
        if self._latency_s:
            await asyncio.sleep(self._latency_s)
        self._reached += 1
        if self.options.hang_after and self._reached > self.options.hang_after:
            c.add("hung")
            await asyncio.sleep(3600)  # until the test kills the server: a model that stopped answering
        if "drop" in modes:
            c.add("dropped")
            await self._drop(send, receive)
            return
        if "http500" in modes:
            c.add("http_500")
            await _send(send, 500, _error_body("stub fault http500", "server_error"))
            return
        if opt.fail_status:
            status = opt.fail_status
            c.add("fail_status")
            retry = [(b"retry-after", b"0")] if status in (429, 503) else None
            await _send(send, status, _error_body(f"stub --fail-status {status}", "server_error"), retry)
            return

        labels = []
        for rec, fs in zip(records, faults, strict=False):
            if "missing_id" in fs:
                continue
            label = oracle_label(rec["id"], self._positives) if self._positives is not None else stub_label(rec["id"])
            if "wrong_id" in fs:
                label["id"] = rec["id"] + "_wrong"
            if "oov" in fs:
                label["genre"] = "novel"
            labels.append(label)
        if _asks_for_rows(req.get("messages")):  # a prompt whose reply format is rows (teachers/core/rubric.py)
            content: str | None = orjson.dumps([[lab[f] for f in LABEL_FIELDS] for lab in labels]).decode()
        else:
            content = orjson.dumps({"labels": labels}).decode()
        finish, refusal = "stop", None
        content_fault = next((m for m in _CONTENT_FAULTS if m in modes), None)
        if content_fault == "refusal":
            content, refusal = None, REFUSAL_TEXT
        elif content_fault == "empty":
            content = ""
        elif content_fault == "malformed":
            content = "Here are the labels: " + ", ".join(r["id"] for r in records) + " -> {labels: [meta"
        elif content_fault == "truncated":
            content, finish = content[: len(content) // 2], "length"
        max_tokens = req.get("max_tokens")
        if opt.honour_max_tokens and content and isinstance(max_tokens, int) and len(content) > 4 * max_tokens:
            content, finish = content[: 4 * max_tokens], "length"

        completion_tokens = len(content or refusal or "") // 4 + 1
        prompt_tokens = prompt_chars // 4 + 1
        self._seq += 1
        reply = {
            "id": f"chatcmpl-stub-{os.getpid()}-{self._seq}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.get("model") or opt.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": refusal},
                    "logprobs": _logprobs(content) if req.get("logprobs") is True and content is not None else None,
                    "finish_reason": finish,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        c.add("http_200")
        c.add("works", len(records))
        c.add("prompt_tokens", prompt_tokens)
        c.add("completion_tokens", completion_tokens)
        await _send(send, 200, orjson.dumps(reply))

    @staticmethod
    async def _drop(send, receive) -> None:
        """Close the TCP connection without a byte of response.

        ASGI has no message for that, so this reaches uvicorn's transport through ``send.__self__``
        (its request cycle; true for the httptools and h11 protocols) and aborts it, then waits for
        the disconnect so uvicorn neither logs nor writes a 500. Under another server: an exception.
        """
        transport = getattr(getattr(send, "__self__", None), "transport", None)
        if transport is None:
            raise RuntimeError("stub fault drop: no transport to abort")
        transport.abort()
        with contextlib.suppress(asyncio.TimeoutError):
            async with asyncio.timeout(2):
                while (await receive())["type"] != "http.disconnect":
                    pass


# ------------------------------------------------------------------------------------------------
# serving
# ------------------------------------------------------------------------------------------------
_ENV = "METACAN_STUB_TEACHER"


def _die_with_parent() -> None:  # pragma: no cover - runs between fork and exec, or in a worker
    """Linux: SIGKILL this process when its parent dies (even by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _worker_app() -> StubTeacher:
    """The app factory of a ``--workers N`` worker (options from the environment the supervisor set)."""
    spec = json.loads(os.environ[_ENV])
    _die_with_parent()
    if os.getppid() != spec["supervisor_pid"]:  # the supervisor died before prctl
        os._exit(1)
    return StubTeacher(StubOptions(**spec["options"]), state_path=spec["state_path"])


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (announced on stdout)")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--latency-ms", type=float, default=0.0, help="asyncio.sleep per call (simulated model time)")
    ap.add_argument("--burst-429", type=int, default=0, help="the first N chat calls get 429 + Retry-After: 0")
    ap.add_argument("--reject-json-schema", action="store_true", help="HTTP 400 to response_format json_schema")
    ap.add_argument("--honour-max-tokens", action="store_true", help="cut replies longer than max_tokens*4 chars")
    ap.add_argument("--metaresearch-ids", default="", help="file of work ids to label metaresearch (all others: not)")
    ap.add_argument("--fail-status", type=int, default=0, help="answer every chat call with this HTTP status")
    ap.add_argument("--hang-after", type=int, default=0, help="calls after the first N (per worker) never answer")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--log-level", default="warning")
    args = ap.parse_args(argv)
    options = StubOptions(
        model=args.model,
        latency_ms=args.latency_ms,
        burst_429=args.burst_429,
        reject_json_schema=args.reject_json_schema,
        honour_max_tokens=args.honour_max_tokens,
        metaresearch_ids=args.metaresearch_ids,
        fail_status=args.fail_status,
        hang_after=args.hang_after,
    )
    common = dict(
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level=args.log_level,
        timeout_graceful_shutdown=2,
        backlog=4096,
    )
    state_path = None
    if args.workers <= 1:
        config = uvicorn.Config(StubTeacher(options), **common)
    else:
        fd, state_path = tempfile.mkstemp(prefix="metacan-stub-", suffix=".counters")
        os.ftruncate(fd, STATE_BYTES)
        os.close(fd)
        os.environ[_ENV] = json.dumps(
            {"options": asdict(options), "state_path": state_path, "supervisor_pid": os.getpid()}
        )
        config = uvicorn.Config(f"{MODULE}:_worker_app", factory=True, workers=args.workers, **common)
    sock = config.bind_socket()
    sock.listen(config.backlog)  # listening from here on: connections queue until a worker accepts
    print(f"{ANNOUNCE} http://{args.host}:{sock.getsockname()[1]}/v1", flush=True)
    try:
        if args.workers <= 1:
            uvicorn.Server(config).run(sockets=[sock])
        else:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(config, sockets=[sock]).run()
    finally:
        if state_path:
            with contextlib.suppress(OSError):
                os.unlink(state_path)


# ------------------------------------------------------------------------------------------------
# the subprocess context manager
# ------------------------------------------------------------------------------------------------
_RUN_OPTIONS = {
    "model",
    "metaresearch_ids",
    "latency_ms",
    "burst_429",
    "reject_json_schema",
    "honour_max_tokens",
    "fail_status",
    "hang_after",
    "workers",
    "host",
    "port",
    "log_level",
}


class StubStartError(RuntimeError):
    pass


@contextlib.contextmanager
def run_stub(startup_timeout_s: float = 30.0, **options) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start the stub as a subprocess; yield ``(base_url, process)`` once ``/v1/models`` answers; always stop it.

    ``options`` are the command-line flags in Python spelling (``latency_ms=20, burst_429=3,
    reject_json_schema=True, workers=2, fail_status=503, ...``); ``port`` (default 0, a free one) lets a test
    start a server again where one it killed listened. The process leads its own process group (stopped with
    SIGTERM then SIGKILL to the group) and gets SIGKILL from the kernel if the caller dies. A test may
    SIGKILL ``process`` itself; leaving the block is still clean.
    """
    import httpx

    unknown = set(options) - _RUN_OPTIONS
    if unknown:
        raise TypeError(f"unknown stub option(s) {sorted(unknown)}; known: {sorted(_RUN_OPTIONS)}")
    argv = [sys.executable, "-m", MODULE, "--port", str(options.pop("port", 0))]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv += [flag, str(value)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    try:
        deadline = time.monotonic() + startup_timeout_s
        base_url = None
        while base_url is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([proc.stdout], [], [], remaining)[0]:
                raise StubStartError(f"stub did not announce its URL within {startup_timeout_s:.0f}s: {argv}")
            line = proc.stdout.readline().decode(errors="replace")
            if not line:
                raise StubStartError(f"stub exited with code {proc.wait()} before announcing its URL: {argv}")
            if line.startswith(ANNOUNCE + " "):
                base_url = line.split(None, 1)[1].strip()
        while True:
            if proc.poll() is not None:
                raise StubStartError(f"stub exited with code {proc.returncode} during start-up: {argv}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise StubStartError(f"stub did not answer {base_url}/models within {startup_timeout_s:.0f}s")
            time.sleep(0.05)
        yield base_url, proc
    finally:
        stop_stub(proc)


def stop_stub(proc: subprocess.Popen) -> None:
    """SIGTERM the stub's process group, SIGKILL after 5 s; then SIGKILL any worker left in the group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # workers of a supervisor that was SIGKILLed
    if proc.stdout is not None:
        proc.stdout.close()


if __name__ == "__main__":
    main()
