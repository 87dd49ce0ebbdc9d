"""What a teacher is asked to reply and how a reply is read (SPEC section 4): the structured-output modes and the
``response_format`` each sends, the reply text and token counts of a chat completion, and :func:`validate_batch`,
the strict check of one reply against the works asked."""

from __future__ import annotations

import json
import re

from ..core.validate import DirectLabel, InvalidLabel, rows_as_labels, validate_label

#: Structured-output modes, strictest first: OpenAI/vLLM ``json_schema``; llama.cpp ``json_object`` with a
#: schema (turned into a grammar); llama.cpp ``grammar`` with the compact reply grammar written out
#: (:func:`..core.validate.batch_reply_grammar`, the embedded teacher's mode); plain JSON asked for in words only.
STRUCTURED_MODES = ("json_schema", "json_object_schema", "gbnf", "none")
AUTO_MODES = ("json_schema", "json_object_schema", "none")
"""What ``structured="auto"`` tries, in order (``gbnf`` is llama.cpp's own field: asked for by name only)."""


def token_count(value: object) -> int | None:
    """A token count from ``usage`` if it is a plausible one (a non-negative int below 2**53), else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        return None
    return value


def reply_text(content: object) -> str | None:
    """The reply text: a string, or the text parts of a list of content parts; None for anything else."""
    if isinstance(content, str):
        return content
    if (
        isinstance(content, list)
        and content
        and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content)
    ):
        return "".join(p["text"] for p in content)
    return None


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def validate_batch(content: str, ids: list[str], reply: str = "labels") -> dict[str, DirectLabel]:
    """Parse and validate one reply for the works ``ids``; raises :class:`InvalidLabel` with the cause.

    ``reply`` is the prompt's reply format (:mod:`..core.rubric`). A ``labels`` reply is ``{"labels": [...]}``
    (a bare list is accepted, and a bare label object when one work was asked); a ``rows`` reply is a
    list of one row per work in the order asked (:func:`..core.validate.rows_as_labels`). A Markdown code fence
    around the JSON is removed. Rules: the reply's id set equals the request's (a rewritten, missing or
    extra id is an error, naming them), an exact duplicate label is dropped, two different labels for one
    id are an error, every label valid (:func:`validate_label`).
    """
    m = _FENCE.match(content)
    text = m.group(1) if m else content
    try:
        obj = json.loads(text, strict=False)  # control characters inside strings: the reason is cleaned later
    except json.JSONDecodeError as exc:
        raise InvalidLabel(f"reply is not valid JSON ({exc.msg} at char {exc.pos} of {len(text)})") from None
    if reply == "rows":
        obj = rows_as_labels(obj, ids)
    if isinstance(obj, dict) and "labels" in obj:
        items = obj["labels"]
    elif isinstance(obj, list):
        items = obj
    elif isinstance(obj, dict) and len(ids) == 1 and "id" in obj:
        items = [obj]
    else:
        raise InvalidLabel(f"reply is a JSON {type(obj).__name__} without a 'labels' list")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InvalidLabel("'labels' is not a list of objects")
    by_id: dict[str, dict] = {}
    for item in items:
        wid = item.get("id")
        if not isinstance(wid, str):
            raise InvalidLabel(f"a label's id is {wid!r}, not a string")
        if wid in by_id and by_id[wid] != item:
            raise InvalidLabel(f"two different labels for id {wid!r}")
        by_id[wid] = item
    asked = set(ids)
    extra, missing = [i for i in by_id if i not in asked], [i for i in ids if i not in by_id]
    if extra or missing:
        raise InvalidLabel(f"reply ids differ from the request: not asked {extra[:5]}, missing {missing[:5]}")
    out: dict[str, DirectLabel] = {}
    for wid in ids:
        try:
            out[wid] = validate_label(by_id[wid], wid)
        except InvalidLabel as exc:
            raise InvalidLabel(f"{wid}: {exc}") from None
    return out


def response_format(mode: str, schema: dict) -> dict | None:
    """The ``response_format`` field for a structured-output mode (see :data:`STRUCTURED_MODES`)."""
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "direct_labels", "schema": schema, "strict": True}}
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    if mode in ("gbnf", "none"):
        return None
    raise ValueError(f"unknown structured output mode {mode!r}; expected one of {STRUCTURED_MODES}")
