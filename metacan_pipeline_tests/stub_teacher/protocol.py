"""Request parsing and faults of the stub: the records of a chat request, the FAULT modes a record's title asks for, and the OpenAI error body of a bad request."""

from __future__ import annotations

import re

import orjson

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
CONTENT_FAULTS = ("refusal", "empty", "malformed", "truncated")  # precedence order
_FAULT_RE = re.compile(r"FAULT:([A-Za-z0-9_]+)")


class BadRequest(Exception):
    pass


def message_text(content) -> str:
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
        text = message_text(m.get("content"))
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


def asks_for_rows(messages) -> bool:
    """True when the last user message asks for the ``rows`` reply format (prompt v4 and later): the stub,
    like a model, answers in the shape the prompt asks for."""
    users = [message_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return bool(users) and "JSON list holding exactly" in users[-1]


def faults_of(rec: dict) -> list[str]:
    title = rec.get("title")
    if not isinstance(title, str) or "FAULT:" not in title:
        return []
    modes = _FAULT_RE.findall(title)
    for m in modes:
        if m not in FAULT_MODES:
            raise BadRequest(f"unknown FAULT mode {m!r} in the title of {rec['id']}; known: {sorted(FAULT_MODES)}")
    return modes


def error_body(message: str, kind: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}})
