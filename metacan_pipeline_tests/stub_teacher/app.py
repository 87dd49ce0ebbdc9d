"""The stub's raw ASGI app: the chat completions, models and stats routes, its options, and the faults it plays."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import orjson

from metacan_pipeline.vocab import (
    LABEL_FIELDS,
)
from metacan_pipeline_tests.stub_teacher.counters import Counters
from metacan_pipeline_tests.stub_teacher.labels import oracle_label, stub_label
from metacan_pipeline_tests.stub_teacher.protocol import (
    CONTENT_FAULTS,
    JSON_SCHEMA_REJECTED,
    REFUSAL_TEXT,
    BadRequest,
    asks_for_rows,
    error_body,
    faults_of,
    parse_records,
)

DEFAULT_MODEL = "stub-teacher"


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
                await _send(send, 404, error_body(f"no route {method} {path}", "invalid_request_error"))
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
                send, 429, error_body("rate limited (stub burst)", "rate_limit_error"), [(b"retry-after", b"0")]
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
            faults = [faults_of(r) for r in records]
        except orjson.JSONDecodeError as exc:
            c.add("http_400")
            await _send(send, 400, error_body(f"the body is not JSON: {exc}", "invalid_request_error"))
            return
        except BadRequest as exc:
            c.add("http_400")
            await _send(send, 400, error_body(str(exc), "invalid_request_error"))
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
            await _send(send, 500, error_body("stub fault http500", "server_error"))
            return
        if opt.fail_status:
            status = opt.fail_status
            c.add("fail_status")
            retry = [(b"retry-after", b"0")] if status in (429, 503) else None
            await _send(send, status, error_body(f"stub --fail-status {status}", "server_error"), retry)
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
        if asks_for_rows(req.get("messages")):  # a prompt whose reply format is rows (teachers/core/rubric.py)
            content: str | None = orjson.dumps([[lab[f] for f in LABEL_FIELDS] for lab in labels]).decode()
        else:
            content = orjson.dumps({"labels": labels}).decode()
        finish, refusal = "stop", None
        content_fault = next((m for m in CONTENT_FAULTS if m in modes), None)
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
