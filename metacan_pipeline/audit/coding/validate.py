"""The rules of a coder's answer (:func:`validate_answer`): the SPEC section 3-4 rules of
:func:`metacan_pipeline.teachers.core.validate.validate_label`, plus completeness, ``unresolved`` and the note."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ... import vocab
from ...teachers.core.validate import InvalidLabel, validate_label
from .errors import CodingError, shown

NOTE_MAX_CHARS = 1000
#: The longest answer value but the note (a vocabulary value, a category): longer ones are refused before any check.
MAX_VALUE_CHARS = 64
#: The most items a ``categories`` list may have (the vocabulary has 9).
MAX_CATEGORIES = 16
#: The longest an error message shows of a value it quotes (:func:`shown`); the longest message a CodingError keeps.

#: The SPEC section 3 fields a coder answers (a direct label's fields without ``reason``: a coder writes a note).
CODE_FIELDS: tuple[str, ...] = tuple(f for f in vocab.LABEL_FIELDS if f != "reason")
#: Every key an answer may have.
ANSWER_KEYS: tuple[str, ...] = (*CODE_FIELDS, "unresolved", "note")
#: The fields two coders must agree on (SPEC section 10: the section 3 fields plus ``unresolved``; ``confidence`` and
#: the note are the coder's own and are not compared).
OUTCOME_FIELDS: tuple[str, ...] = tuple(f for f in CODE_FIELDS if f != "confidence") + ("unresolved",)
_REQUIRED = ("study_design", "genre", "about_ca_system", "about_ca_topic")


def _field_of(message: str) -> str:
    """The answer field a :class:`InvalidLabel` message of :func:`validate_label` is about."""
    m = re.match(r"missing field '(\w+)'", message) or re.match(r"(\w+)=", message)
    if m and m.group(1) in CODE_FIELDS:
        return m.group(1)
    if message.startswith("domain"):
        return "domain"
    if "categor" in message or message.startswith(vocab.INSUFFICIENT_PAYLOAD):
        return "categories"
    return "answer"


def _clean_text(text: str) -> str:
    if not text.isprintable():
        text = "".join(ch for ch in text if ch.isprintable() or ch in "\n\t")
    return text.strip()


def _check_sizes(answer: Mapping[str, Any]) -> None:
    """Refuse an answer value too long to be one (before any check quotes it): a string but the note longer than
    :data:`MAX_VALUE_CHARS`, a ``categories`` list of more than :data:`MAX_CATEGORIES` items or with a long item."""
    for f in CODE_FIELDS:
        v = answer.get(f)
        if isinstance(v, str) and len(v) > MAX_VALUE_CHARS:
            raise CodingError(f, f"{f} has {len(v):,} characters; a vocabulary value has at most {MAX_VALUE_CHARS}")
    cats = answer.get("categories")
    if isinstance(cats, list | tuple):
        if len(cats) > MAX_CATEGORIES:
            raise CodingError(
                "categories", f"categories has {len(cats):,} items; the vocabulary has {len(vocab.CATEGORIES)}"
            )
        if any(isinstance(c, str) and len(c) > MAX_VALUE_CHARS for c in cats):
            raise CodingError(
                "categories", f"a category has more than {MAX_VALUE_CHARS} characters: not in the vocabulary"
            )


def validate_answer(answer: object, work_id: str) -> dict[str, Any]:  # noqa: C901 (one check per rule, in order)
    """A coder's answer on ``work_id``, validated and normalised: the :data:`ANSWER_KEYS` (categories in vocabulary
    order, ``unresolved`` a bool, ``note`` None when empty). Raises :class:`CodingError` naming the field.

    The SPEC section 3-4 rules are those of :func:`validate_label` (which gets the answer as a label without a
    reason). A complete answer (``unresolved`` false) gives ``categories`` (``[]`` means not meta-research),
    ``study_design``, ``genre``, both ``about_ca`` booleans, and a ``domain`` when ``metaresearch`` is among the
    categories; ``confidence`` is optional. An unresolved answer may leave any field empty (None); what it gives is
    validated all the same.
    """
    if not isinstance(answer, Mapping):
        raise CodingError("answer", f"an answer is an object of {list(ANSWER_KEYS)}, not {type(answer).__name__}")
    unknown = sorted(set(answer) - set(ANSWER_KEYS))
    if unknown:
        raise CodingError(
            str(unknown[0]), f"{shown(unknown[0])} is not an answer field; an answer has {list(ANSWER_KEYS)}"
        )
    unresolved = answer.get("unresolved", False)
    if not isinstance(unresolved, bool):
        raise CodingError("unresolved", f"unresolved={shown(unresolved)} is not a boolean")
    note = answer.get("note")
    if note is not None and not isinstance(note, str):
        raise CodingError("note", f"note={shown(note)} is not a string")
    note = _clean_text(note or "")
    if len(note) > NOTE_MAX_CHARS:
        raise CodingError("note", f"note has {len(note)} characters; at most {NOTE_MAX_CHARS}")
    _check_sizes(answer)
    categories = answer.get("categories")
    if categories is None and not unresolved:
        raise CodingError(
            "categories", "categories is missing: give the categories ([] means not meta-research) or mark unresolved"
        )
    obj: dict[str, Any] = {"id": work_id, "categories": [] if categories is None else categories}
    obj["domain"] = answer.get("domain")
    absent = {"reason"}
    for f in (*_REQUIRED, "confidence"):
        value = answer.get(f)
        if value is None and f in _REQUIRED and not unresolved:
            raise CodingError(f, f"{f} is missing: give a value or mark the answer unresolved")
        if value is None:
            absent.add(f)
        else:
            obj[f] = value
    try:
        label = validate_label(obj, work_id, absent=frozenset(absent))
    except InvalidLabel as exc:
        raise CodingError(_field_of(str(exc)), str(exc)) from None
    if not unresolved and "metaresearch" in label.categories and label.domain is None:
        raise CodingError(
            "domain",
            "domain is missing: an answer with the category 'metaresearch' gives its domain (or is unresolved)",
        )
    out = {f: getattr(label, f) for f in CODE_FIELDS}
    out["categories"] = None if categories is None else list(label.categories)
    out["unresolved"] = unresolved
    out["note"] = note or None
    return out
