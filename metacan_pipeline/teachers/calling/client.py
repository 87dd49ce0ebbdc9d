"""Async OpenAI-compatible chat client for teachers (SPEC section 4).

One call labels a batch of works: the rubric, the works as delimited JSON data, and a reply constrained
the way the server supports it. The reply is validated strictly (:func:`~.replies.validate_batch`); a batch whose
reply fails is split in halves and asked again, down to single works, so one bad work never costs the
batch; a single work whose reply stays invalid after ``max_invalid_retries`` re-asks is a failure with
its cause. Transport failures (timeouts, dropped connections, 429, 5xx) are retried with exponential
backoff and jitter by tenacity, honouring ``Retry-After``; when every attempt fails, the works are
failures that start with :data:`UNAVAILABLE` and the next run asks again. One client calls one endpoint
(a *lane* of its teacher, :mod:`.sending`): every call records the endpoint's name, and the lane may end a
call's retries early (``keep_retrying``) when its batch can go to another endpoint.

Every HTTP call, successful or not, is reported to ``on_call`` as a :class:`CallRecord` and the final
outcomes of each call to ``on_outcomes`` as :class:`LabelOutcome` objects the moment they exist (the label store archives
them, :mod:`.archive`); a label points to the call whose reply produced it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import certifi
import httpx
import orjson
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_exception_type,
    wait_random_exponential,
)

from ...http import retry_after_seconds
from ..core.rubric import Prompt
from ..core.store import ENDPOINT_ERROR, UNAVAILABLE, new_key, now_utc
from ..core.validate import (
    DirectLabel,
    InvalidLabel,
    batch_reply_grammar,
    batch_reply_schema,
    batch_rows_grammar,
    batch_rows_schema,
)
from .replies import AUTO_MODES, reply_text, response_format, token_count, validate_batch


@dataclass
class CallRecord:
    """One HTTP call to a teacher endpoint (``teacher_calls`` row plus the bodies for the archive)."""

    call_id: str
    work_ids: list[str]
    request: dict
    request_hash: str
    started_at: object
    response_text: str | None = None
    http_status: int | None = None
    error: str | None = None
    latency_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    logprob_mean: float | None = None
    endpoint: str = ""


@dataclass
class LabelOutcome:
    """The final outcome for one work: a validated label, or a failure with its cause."""

    work_id: str
    label: DirectLabel | None
    error: str | None
    call_id: str | None
    attempts: int = 1

    @property
    def status(self) -> str:
        return "labelled" if self.label is not None else "failed"


class EndpointConfigurationError(RuntimeError):
    """The endpoint refused the request for a reason no retry fixes (401/403/404): a wrong URL, model or key."""


class EndpointUnavailableError(RuntimeError):
    """The endpoint failed batch after batch (down, or answering errors): the run stopped sending."""


class _Transient(Exception):
    def __init__(self, record: CallRecord, retry_after: float | None = None) -> None:
        super().__init__(record.error)
        self.record, self.retry_after = record, retry_after


class _FormatRefused(Exception):
    """HTTP 400 naming response_format: the server does not support this structured-output mode."""


#: An HTTP error that may depend on the request's size (too long, filtered): a batch is split, not dropped.
_REQUEST_SIZE_STATUSES = (400, 403, 413, 422)
#: The longest a probe of an endpoint (``GET /models``) waits for its answer (s).
PROBE_TIMEOUT_S = 10.0


class TeacherClient:
    """Async client for one teacher endpoint (``base_url`` ends in ``/v1``).

    ``structured="auto"`` tries ``json_schema``, then ``json_object_schema``, then plain JSON, moving on
    when the server answers HTTP 400 about ``response_format`` (the choice is kept for the client's life).
    Raises :class:`EndpointConfigurationError` for 401/404; never raises for model misbehaviour or other
    endpoint errors (they become failures with their cause). ``endpoint`` is the name every
    :class:`CallRecord` carries; ``keep_retrying`` is asked after each failed attempt of a call
    (429, 5xx, transport error): False ends its retries at once, as if every attempt had failed.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        prompt: Prompt,
        *,
        api_key: str = "",
        structured: str = "auto",
        system_role: bool = True,
        logprobs: bool = False,
        temperature: float = 0.0,
        max_tokens_per_work: int = 160,
        timeout_s: float = 300.0,
        max_invalid_retries: int = 2,
        max_transport_attempts: int = 6,
        concurrency: int = 1,
        transport: httpx.AsyncBaseTransport | None = None,
        on_call: Callable[[CallRecord], None] | None = None,
        on_outcomes: Callable[[list[LabelOutcome]], None] | None = None,
        endpoint: str = "",
        keep_retrying: Callable[[], bool] | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # One single-connection AsyncClient per call in flight: httpcore's pool scans every connection for
        # every request, which made one shared 32-connection client the bottleneck on a fast endpoint.
        self.base_url = base_url.rstrip("/")
        tls = ssl.create_default_context(
            cafile=certifi.where()
        )  # one context for all: loading the CA file costs 20 ms each
        self._clients = [
            httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                timeout=timeout_s,
                transport=transport,
                verify=tls,
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            )
            for _ in range(max(1, concurrency))
        ]
        self._free: asyncio.Queue[httpx.AsyncClient] | None = None
        self.model, self.prompt, self.system_role, self.logprobs = model, prompt, system_role, logprobs
        self.temperature, self.max_tokens_per_work = temperature, max_tokens_per_work
        self.max_invalid_retries, self.max_transport_attempts, self.timeout_s = (
            max_invalid_retries,
            max_transport_attempts,
            timeout_s,
        )
        if structured != "auto":
            response_format(structured, {})  # validate the name early
        self.modes = list(AUTO_MODES) if structured == "auto" else [structured]
        self.on_call = on_call or (lambda rec: None)
        self.on_outcomes = on_outcomes or (lambda outs: None)
        self.endpoint = endpoint
        self.keep_retrying = keep_retrying or (lambda: True)

    @property
    def structured(self) -> str:
        """The structured-output mode in use."""
        return self.modes[0]

    async def aclose(self) -> None:
        for http in self._clients:
            await http.aclose()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[httpx.AsyncClient]:
        """A free connection (at most ``concurrency`` requests are in flight), given back afterwards."""
        if self._free is None:  # created inside the running loop
            self._free = asyncio.Queue()
            for http in self._clients:
                self._free.put_nowait(http)
        http = await self._free.get()
        try:
            yield http
        finally:
            self._free.put_nowait(http)

    async def _post(self, raw: bytes, rec: CallRecord) -> httpx.Response:
        """POST on a free connection; ``timeout_s`` bounds the whole call and ``rec.latency_s`` is its time
        on the wire, the wait for a connection excluded. Raises TimeoutError or httpx's transport errors."""
        async with self._connection() as http:
            t0 = time.monotonic()
            try:
                async with asyncio.timeout(self.timeout_s):  # the whole call, not each read
                    return await http.post(
                        "/chat/completions", content=raw, headers={"Content-Type": "application/json"}
                    )
            finally:
                rec.latency_s = time.monotonic() - t0

    async def probe(self) -> str | None:
        """Ask whether the endpoint answers at all: ``GET /models`` (no chat call, nothing bought), at most
        :data:`PROBE_TIMEOUT_S`. None when it answers with an HTTP status below 500 (a server that lists no
        models still answers: the next batch tells the rest), else what went wrong."""
        async with self._connection() as http:
            try:
                async with asyncio.timeout(min(self.timeout_s, PROBE_TIMEOUT_S)):
                    resp = await http.get("/models")
            except TimeoutError:
                return f"no answer to GET /models within {min(self.timeout_s, PROBE_TIMEOUT_S):g} s"
            except httpx.HTTPError as exc:
                return f"{type(exc).__name__}: {exc}".rstrip(": ")
        return None if resp.status_code < 500 else f"GET /models: HTTP {resp.status_code}"

    # ---- one HTTP call ------------------------------------------------------------------------
    def _body(self, views: list[dict], temperature: float, seed: int) -> dict:
        ids = [v["id"] for v in views]
        body = {
            "model": self.model,
            "messages": self.prompt.messages(views, self.system_role),
            "temperature": temperature,
            "max_tokens": 64 + self.max_tokens_per_work * len(views),
            "seed": seed,
        }
        rows = self.prompt.reply == "rows"
        schema = (
            batch_rows_schema(len(ids))
            if rows
            else batch_reply_schema(ids, rules_in_grammar=self.structured == "json_object_schema")
        )
        rf = response_format(self.structured, schema)
        if rf is not None:
            body["response_format"] = rf
        if self.structured == "gbnf":
            body["grammar"] = batch_rows_grammar(len(ids)) if rows else batch_reply_grammar(ids)
        if self.logprobs:
            body["logprobs"] = True
        return body

    async def _post_once(self, views: list[dict], temperature: float, seed: int) -> tuple[CallRecord, str | None, str]:
        """One POST. Returns the record, the reply content (None when there is none) and what the call
        says: ``reply`` (content to validate), ``verdict`` (the model answered without a usable label:
        refusal, cut at max_tokens, empty) or ``endpoint`` (an HTTP error or a body that is not a chat
        completion: nothing about the works). Raises :class:`_Transient`, :class:`_FormatRefused` or
        :class:`EndpointConfigurationError`."""
        body = self._body(views, temperature, seed)
        mode = self.structured
        raw = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)  # canonical: the request hash names the exact bytes sent
        rec = CallRecord(
            new_key(),
            [v["id"] for v in views],
            body,
            hashlib.sha256(raw).hexdigest()[:16],
            now_utc(),
            endpoint=self.endpoint,
        )
        try:
            resp = await self._post(raw, rec)
        except (TimeoutError, httpx.TimeoutException, httpx.TransportError) as exc:
            rec.error = (
                f"{type(exc).__name__}: {exc}".rstrip(": ")
                if not isinstance(exc, TimeoutError)
                else f"no reply within {self.timeout_s:g} s"
            )
            self.on_call(rec)
            raise _Transient(rec) from exc
        rec.http_status, rec.response_text = resp.status_code, resp.text
        if resp.status_code == 429 or resp.status_code >= 500:
            rec.error = f"HTTP {resp.status_code}"
            self.on_call(rec)
            raise _Transient(rec, retry_after_seconds(resp.headers.get("Retry-After"), min(self.timeout_s, 60.0)))
        if resp.status_code in (401, 404):
            rec.error = f"HTTP {resp.status_code}: {resp.text[:300]}"
            self.on_call(rec)
            raise EndpointConfigurationError(
                f"teacher endpoint {self.base_url} refused model {self.model!r}: {rec.error} "
                "(check base_url, model and the API key variable)"
            )
        if (
            resp.status_code == 400
            and re.search(r"response_format|json_schema|schema|grammar", resp.text, re.I)
            and mode in self.modes[:-1]
        ):
            rec.error = f"HTTP 400: structured output {mode!r} refused; trying the next mode"
            self.on_call(rec)
            if self.modes[0] == mode:  # calls in flight refused together move one step, not one each
                self.modes.pop(0)
            raise _FormatRefused(rec.error)
        if resp.status_code >= 400:
            rec.error = f"HTTP {resp.status_code}: {resp.text[:300]}"
            self.on_call(rec)
            return rec, None, "endpoint"
        try:
            payload = resp.json()
            choice = payload["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            rec.error = "endpoint returned a body that is not an OpenAI chat completion"
            self.on_call(rec)
            return rec, None, "endpoint"
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        rec.prompt_tokens, rec.completion_tokens = (
            token_count(usage.get("prompt_tokens")),
            token_count(usage.get("completion_tokens")),
        )
        lp = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
        vals = [t["logprob"] for t in lp or [] if isinstance(t, dict) and isinstance(t.get("logprob"), (int, float))]
        rec.logprob_mean = sum(vals) / len(vals) if vals else None
        content = reply_text(message.get("content"))
        if message.get("refusal"):
            rec.error = f"refusal: {str(message['refusal'])[:200]}"
        elif choice.get("finish_reason") == "length":
            rec.error = f"reply cut at max_tokens ({body['max_tokens']}): truncated JSON"
        elif content is None and message.get("content") is not None:
            rec.error = f"reply content is a JSON {type(message['content']).__name__}, not text"
        elif content is None or not content.strip():
            rec.error = "empty reply"
        if rec.error:
            self.on_call(rec)
            return rec, None, "verdict"
        return rec, content, "reply"  # reported once validated: the verdict is part of the record

    async def _ask(
        self, views: list[dict], temperature: float, seed: int
    ) -> tuple[CallRecord, dict[str, DirectLabel] | None, str]:
        """One logical request, transport retries included: the last call, the validated labels (or None
        with ``record.error`` set) and the kind (see :meth:`_post_once`; ``invalid`` for a reply that
        failed validation). Raises :class:`RetryError` when the endpoint never answered."""
        while True:
            try:
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception_type(_Transient),
                    stop=self._stop,
                    wait=self._wait,
                    reraise=False,
                ):
                    with attempt:
                        rec, content, kind = await self._post_once(views, temperature, seed)
                break
            except _FormatRefused:
                continue
        if content is None:
            return rec, None, kind
        labels = None
        try:
            labels = validate_batch(content, [v["id"] for v in views], self.prompt.reply)
        except InvalidLabel as exc:
            rec.error, kind = f"invalid reply: {exc}", "invalid"
        finally:
            self.on_call(rec)
        return rec, labels, kind

    def _stop(self, state: RetryCallState) -> bool:
        """No more attempts after a transient failure (429, 5xx, transport): ``max_transport_attempts`` made,
        or the lane says stop (its batch can go to another endpoint)."""
        return state.attempt_number >= self.max_transport_attempts or not self.keep_retrying()

    def _wait(self, state) -> float:
        """Exponential backoff with jitter, at least the server's ``Retry-After``, at most ``timeout_s``
        (and 60 s): a quota that resets tomorrow ends the attempts, the next run asks again."""
        base = wait_random_exponential(multiplier=0.5, max=30)(state)
        exc = state.outcome.exception() if state.outcome else None
        wanted = max(base, exc.retry_after or 0.0) if isinstance(exc, _Transient) else base
        return min(wanted, self.timeout_s, 60.0)

    # ---- a batch of works ------------------------------------------------------------------
    async def label(self, views: list[dict]) -> list[LabelOutcome]:
        """Label ``views`` (record views with distinct ids), splitting on invalid replies; returns one
        outcome per view, in order. Outcomes are also reported to ``on_outcomes`` as they become final."""
        attempts: dict[str, int] = {v["id"]: 0 for v in views}
        out: dict[str, LabelOutcome] = {}
        await self._label_group(views, attempts, out)
        return [out[v["id"]] for v in views]

    def _final(self, out: dict[str, LabelOutcome], outcomes: list[LabelOutcome]) -> None:
        for o in outcomes:
            out[o.work_id] = o
        self.on_outcomes(outcomes)

    async def _label_group(self, views: list[dict], attempts: dict[str, int], out: dict[str, LabelOutcome]) -> None:
        tries = 1 if len(views) > 1 else self.max_invalid_retries + 1
        rec, kind = None, None
        for k in range(tries):
            for v in views:
                attempts[v["id"]] += 1
            temperature = self.temperature if k == 0 else max(self.temperature, 0.7)
            try:
                rec, labels, kind = await self._ask(views, temperature, seed=k)
            except RetryError as exc:
                last = exc.last_attempt.exception()
                last_rec = last.record if isinstance(last, _Transient) else None
                cause = last_rec.error if last_rec else str(last)
                tried = exc.last_attempt.attempt_number
                self._final(
                    out,
                    [
                        LabelOutcome(
                            v["id"],
                            None,
                            f"{UNAVAILABLE} after {tried} attempt{'s' if tried != 1 else ''}: {cause}",
                            last_rec.call_id if last_rec else None,
                            attempts[v["id"]],
                        )
                        for v in views
                    ],
                )
                return
            if labels is not None:
                self._final(
                    out, [LabelOutcome(v["id"], labels[v["id"]], None, rec.call_id, attempts[v["id"]]) for v in views]
                )
                return
            if kind == "endpoint":
                break  # the same request again would get the same answer
        if len(views) > 1 and (kind != "endpoint" or rec.http_status in _REQUEST_SIZE_STATUSES):
            half = len(views) // 2
            await self._label_group(views[:half], attempts, out)
            await self._label_group(views[half:], attempts, out)
            return
        prefix = f"{ENDPOINT_ERROR}: " if kind == "endpoint" else ""
        self._final(
            out,
            [
                LabelOutcome(
                    v["id"],
                    None,
                    f"{prefix}{rec.error} (after {attempts[v['id']]} attempts)",
                    rec.call_id,
                    attempts[v["id"]],
                )
                for v in views
            ],
        )
