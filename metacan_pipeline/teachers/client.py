"""OpenAI-compatible chat client for teachers (SPEC section 4).

One call per work: the rubric as the system message, the record view as delimited data, a reply
constrained by a JSON schema. Transport failures (timeouts, dropped connections, 429, 5xx) are
retried with exponential backoff and jitter by tenacity; a reply that parses but breaks a rule is
retried ``max_invalid_retries`` times and then reported as a failure with its cause. Every HTTP call,
successful or not, is returned as a :class:`CallRecord` for the audit trail.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from importlib.resources import files

import httpx
from tenacity import RetryError, retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from .validate import DirectLabel, InvalidLabel, reply_schema, validate_label
from .views import canonical_json

STRUCTURED_MODES = ("json_schema", "json_object_schema", "none")


def load_prompt(version: str) -> str:
    """The rubric text of a prompt version (``teachers/prompts/<version>.md``); FileNotFoundError names it."""
    path = files("metacan_pipeline.teachers").joinpath("prompts", f"{version}.md")
    if not path.is_file():
        raise FileNotFoundError(f"prompt version {version!r} not found at {path}: add teachers/prompts/{version}.md")
    return path.read_text(encoding="utf-8")


@dataclass
class CallRecord:
    """One HTTP call to a teacher endpoint, as archived in ``teacher_calls``."""

    call_id: str
    request_hash: str
    request_json: str
    response_text: str | None
    http_status: int | None
    error: str | None
    latency_s: float
    prompt_tokens: int | None
    completion_tokens: int | None


@dataclass
class LabelOutcome:
    """A validated label, or a failure with its cause; plus every call that was made."""

    label: DirectLabel | None
    error: str | None
    calls: list[CallRecord] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "labelled" if self.label is not None else "failed"


#: The error prefix of a failure that says nothing about the work (the endpoint did not answer): such a
#: failure is stored, and the next run asks again (:func:`metacan_pipeline.teachers.store.existing_keys`).
UNAVAILABLE = "endpoint unavailable"


class _Transient(Exception):
    """A failure worth retrying at the transport level (429, 5xx, timeout, dropped connection)."""

    def __init__(self, message: str, record: CallRecord, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.record = record
        self.retry_after = retry_after


def build_messages(rubric: str, view: dict, system_role: bool = True) -> list[dict]:
    """Rubric + the record as delimited JSON data (untrusted text) + the request.

    With ``system_role`` the rubric is the system message; without it (Gemma's chat template has no
    system role, and llama.cpp drops such a message) it opens the user message instead.
    """
    record = ("<record>\n" + json.dumps(view, ensure_ascii=False) + "\n</record>\n"
              f"Reply with the JSON object for id {view['id']}.")
    if system_role:
        return [{"role": "system", "content": rubric}, {"role": "user", "content": record}]
    return [{"role": "user", "content": rubric + "\n\n" + record}]


def response_format(mode: str, schema: dict) -> dict | None:
    """The ``response_format`` field for a structured-output mode (see :data:`STRUCTURED_MODES`)."""
    if mode == "json_schema":  # OpenAI and vLLM
        return {"type": "json_schema", "json_schema": {"name": "direct_label", "schema": schema, "strict": True}}
    if mode == "json_object_schema":  # llama-cpp-python server: schema -> grammar
        return {"type": "json_object", "schema": schema}
    if mode == "none":
        return None
    raise ValueError(f"unknown structured output mode {mode!r}; expected one of {STRUCTURED_MODES}")


class TeacherClient:
    """Synchronous client for one teacher endpoint.

    ``base_url`` ends in ``/v1``; ``api_key`` may be empty (local servers). Raises nothing for
    model misbehaviour: :meth:`label` returns a :class:`LabelOutcome`.
    """

    def __init__(self, base_url: str, model: str, rubric: str, *, api_key: str = "", structured: str = "json_object_schema",
                 temperature: float = 0.0, max_tokens: int = 320, timeout_s: float = 120.0, max_invalid_retries: int = 2,
                 max_transport_attempts: int = 4, system_role: bool = True, transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport)
        self.model, self.rubric, self.structured = model, rubric, structured
        self.temperature, self.max_tokens = temperature, max_tokens
        self.max_invalid_retries, self.max_transport_attempts = max_invalid_retries, max_transport_attempts
        self.system_role = system_role
        response_format(structured, {})  # validate the mode early

    def close(self) -> None:
        self.http.close()

    def _post_once(self, body: dict) -> tuple[CallRecord, dict]:
        raw = canonical_json(body)
        rec = CallRecord(uuid.uuid4().hex, hashlib.sha256(raw.encode()).hexdigest()[:16], raw, None, None, None, 0.0, None, None)
        t0 = time.monotonic()
        try:
            resp = self.http.post("/chat/completions", content=raw, headers={"Content-Type": "application/json"})
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            rec.latency_s = time.monotonic() - t0
            rec.error = f"{type(exc).__name__}: {exc}"
            raise _Transient(rec.error, rec) from exc
        rec.latency_s = time.monotonic() - t0
        rec.http_status = resp.status_code
        rec.response_text = resp.text
        if resp.status_code == 429 or resp.status_code >= 500:
            rec.error = f"HTTP {resp.status_code}"
            ra = resp.headers.get("Retry-After")
            raise _Transient(rec.error, rec, float(ra) if ra and ra.replace(".", "", 1).isdigit() else None)
        if resp.status_code >= 400:
            rec.error = f"HTTP {resp.status_code}: {resp.text[:300]}"
            return rec, {}
        try:
            payload = resp.json()
        except json.JSONDecodeError:
            rec.error = "endpoint returned non-JSON body"
            return rec, {}
        usage = payload.get("usage") or {}
        rec.prompt_tokens, rec.completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return rec, payload

    def _post(self, body: dict, calls: list[CallRecord]) -> tuple[CallRecord, dict]:
        def _wait(state) -> float:
            exc = state.outcome.exception()
            base = wait_random_exponential(multiplier=0.5, max=30)(state)
            return max(base, exc.retry_after or 0.0) if isinstance(exc, _Transient) else base

        @retry(retry=retry_if_exception(lambda e: isinstance(e, _Transient)), stop=stop_after_attempt(self.max_transport_attempts),
               wait=_wait, reraise=True)
        def attempt() -> tuple[CallRecord, dict]:
            try:
                return self._post_once(body)
            except _Transient as exc:
                calls.append(exc.record)
                raise

        rec, payload = attempt()
        calls.append(rec)
        return rec, payload

    def label(self, view: dict) -> LabelOutcome:
        """Ask for, validate and return one work's direct label (see module doc for retries)."""
        schema = reply_schema(view["id"], rules_in_grammar=self.structured == "json_object_schema")
        calls: list[CallRecord] = []
        last_error = "no attempt made"
        for attempt in range(self.max_invalid_retries + 1):
            body = {
                "model": self.model,
                "messages": build_messages(self.rubric, view, self.system_role),
                "temperature": self.temperature if attempt == 0 else max(self.temperature, 0.7),
                "max_tokens": self.max_tokens,
                "seed": attempt,
            }
            rf = response_format(self.structured, schema)
            if rf is not None:
                body["response_format"] = rf
            try:
                rec, payload = self._post(body, calls)
            except (_Transient, RetryError) as exc:
                return LabelOutcome(None, f"{UNAVAILABLE} after {self.max_transport_attempts} attempts: {exc}", calls)
            if rec.error:
                last_error = rec.error
                continue
            try:
                content = payload["choices"][0]["message"]["content"]
            except (KeyError, IndexError, TypeError):
                last_error = "reply has no choices[0].message.content"
                rec.error = last_error
                continue
            if not content or not content.strip():
                last_error = "empty reply"
                rec.error = last_error
                continue
            try:
                obj = json.loads(content, strict=False)  # control characters inside strings: the reason is cleaned later
            except json.JSONDecodeError as exc:
                last_error = f"reply is not valid JSON ({exc.msg} at char {exc.pos})"
                rec.error = last_error
                continue
            try:
                return LabelOutcome(validate_label(obj, view["id"]), None, calls)
            except InvalidLabel as exc:
                last_error = f"invalid label: {exc}"
                rec.error = last_error
        return LabelOutcome(None, f"{last_error} (after {self.max_invalid_retries + 1} attempts)", calls)
