"""Validation of teacher replies against SPEC sections 3 and 4.

A direct label is one JSON object per work: ``id, categories, domain, study_design, genre,
about_ca_system, about_ca_topic, confidence, reason``. A reply that breaks a rule raises
:class:`InvalidLabel` with the rule it broke; the caller retries and then records a failure. Nothing
is ever filled in: a missing value is an error, not a default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ... import vocab
from ...vocab import (
    CATEGORIES,
    CONFIDENCES,
    DOMAINS,
    GENRES,
    INSUFFICIENT_PAYLOAD,
    REASON_MAX_CHARS,
    STUDY_DESIGNS,
)

LABEL_FIELDS = ("id", *vocab.LABEL_FIELDS)
"""The fields of one label in a teacher reply: the work id, then the SPEC section 3 fields."""


class InvalidLabel(ValueError):
    """A teacher reply that breaks a SPEC section 3/4 rule; the message names the rule and value."""


@dataclass(frozen=True)
class DirectLabel:
    """One validated direct label (SPEC section 4); ``categories`` in vocabulary order.

    A field is None when the label's source never provides it (``absent`` in :func:`validate_label`,
    e.g. an imported screener without a study design), and ``domain`` is also None without
    ``metaresearch``. None is unknown, never a negative.
    """

    id: str
    categories: tuple[str, ...]
    domain: str | None
    study_design: str | None
    genre: str | None
    about_ca_system: bool | None
    about_ca_topic: bool | None
    confidence: str | None
    reason: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "categories": list(self.categories),
            "domain": self.domain,
            "study_design": self.study_design,
            "genre": self.genre,
            "about_ca_system": self.about_ca_system,
            "about_ca_topic": self.about_ca_topic,
            "confidence": self.confidence,
            "reason": self.reason,
        }


def _enum(obj: dict, key: str, vocab: tuple[str, ...], nullable: bool = False) -> str | None:
    if key not in obj:
        raise InvalidLabel(f"missing field {key!r}")
    v = obj[key]
    if v is None and nullable:
        return None
    if not isinstance(v, str) or v not in vocab:
        raise InvalidLabel(f"{key}={v!r} is not in the vocabulary {list(vocab)}")
    return v


def _bool(obj: dict, key: str) -> bool:
    if key not in obj:
        raise InvalidLabel(f"missing field {key!r}")
    v = obj[key]
    if not isinstance(v, bool):
        raise InvalidLabel(f"{key}={v!r} is not a boolean")
    return v


def validate_label(obj: Any, expected_id: str, *, absent: frozenset[str] = frozenset()) -> DirectLabel:  # noqa: C901 (one rule per SPEC clause, in SPEC order)
    """Validate one reply object for the work ``expected_id`` and normalise it.

    Rules (SPEC sections 3-4): the id equals the request's; every value in its vocabulary;
    ``insufficient_payload`` only alone; a substantive domain only with ``metaresearch`` (a
    ``not_metaresearch`` domain without it is normalised to null; with it, it is an error).
    Normalisations: duplicate categories removed, categories put in vocabulary order, control and
    format characters removed from the reason, reason cut to 400 characters (an empty reason is an
    error). Raises :class:`InvalidLabel`.

    ``absent`` names the fields the label's source never provides (labels imported from elsewhere,
    SPEC section 4: e.g. ``domain``, ``study_design``, ``about_ca_topic``, ``reason`` for a screener
    that had no such field). Such a field must be missing or null in ``obj`` (a value there is an
    error: the source was declared not to give it) and is None in the result; the domain rule applies
    only when ``domain`` is not absent. Every field present is validated as above. ``id`` and
    ``categories`` cannot be absent (ValueError), nor can a name outside ``LABEL_FIELDS``.
    """
    bad = set(absent) - (set(LABEL_FIELDS) - {"id", "categories"})
    if bad:
        raise ValueError(f"absent={sorted(bad)}: only {list(LABEL_FIELDS[2:])} can be absent")
    if not isinstance(obj, dict):
        raise InvalidLabel(f"reply is a JSON {type(obj).__name__}, not an object")
    if obj.get("id") != expected_id:
        raise InvalidLabel(f"reply id {obj.get('id')!r} differs from the requested id {expected_id!r}")
    for key in sorted(absent):
        if obj.get(key) is not None:
            raise InvalidLabel(f"{key}={obj[key]!r} is given although the source is declared not to provide {key!r}")
    cats = obj.get("categories")
    if not isinstance(cats, list):
        raise InvalidLabel(f"categories={cats!r} is not a list")
    for c in cats:
        if c not in CATEGORIES:
            raise InvalidLabel(f"category {c!r} is not in the vocabulary")
    categories = tuple(c for c in CATEGORIES if c in set(cats))
    if INSUFFICIENT_PAYLOAD in categories and len(categories) > 1:
        raise InvalidLabel(f"insufficient_payload must be the only category, got {list(categories)}")
    domain = None if "domain" in absent else _enum(obj, "domain", DOMAINS, nullable=True)
    if "metaresearch" in categories:
        if domain == "not_metaresearch":
            raise InvalidLabel("domain 'not_metaresearch' contradicts category 'metaresearch'")
    elif domain == "not_metaresearch":
        domain = None
    elif domain is not None:
        raise InvalidLabel(f"domain {domain!r} given without the category 'metaresearch'")
    reason = "" if "reason" in absent else obj.get("reason")
    if not isinstance(reason, str):
        raise InvalidLabel(f"reason={reason!r} is not a string")
    if not reason.isprintable():  # rare: drop control and format characters, keep newlines and tabs
        reason = "".join(ch for ch in reason if ch.isprintable() or ch in "\n\t")
    reason = reason.strip()
    if not reason and "reason" not in absent:
        raise InvalidLabel("reason is empty")
    return DirectLabel(
        id=expected_id,
        categories=categories,
        domain=domain,
        study_design=None if "study_design" in absent else _enum(obj, "study_design", STUDY_DESIGNS),
        genre=None if "genre" in absent else _enum(obj, "genre", GENRES),
        about_ca_system=None if "about_ca_system" in absent else _bool(obj, "about_ca_system"),
        about_ca_topic=None if "about_ca_topic" in absent else _bool(obj, "about_ca_topic"),
        confidence=None if "confidence" in absent else _enum(obj, "confidence", CONFIDENCES),
        reason=reason.strip()[:REASON_MAX_CHARS] or None,
    )


def _label_object(work_id: str, categories: dict, domain: dict, reason_max_chars: int) -> dict:
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string", "enum": [work_id]},
            "categories": categories,
            "domain": domain,
            "study_design": {"type": "string", "enum": list(STUDY_DESIGNS)},
            "genre": {"type": "string", "enum": list(GENRES)},
            "about_ca_system": {"type": "boolean"},
            "about_ca_topic": {"type": "boolean"},
            "confidence": {"type": "string", "enum": list(CONFIDENCES)},
            "reason": {"type": "string", "minLength": 1, "maxLength": reason_max_chars},
        },
        "required": list(LABEL_FIELDS),
        "additionalProperties": False,
    }


def reply_schema(work_id: str, reason_max_chars: int = 100, rules_in_grammar: bool = False) -> dict:
    """JSON schema that constrains a reply for one work (OpenAI ``json_schema`` / llama.cpp grammar).

    Arrays are bounded (``maxItems``) because small models otherwise repeat items; the id is pinned
    to the requested one with an enum. Property order is generation order for llama.cpp.

    With ``rules_in_grammar`` (llama.cpp, which turns any schema into a grammar) the reply is a union
    of three shapes so that the SPEC section 3 rules cannot be broken while generating: categories
    without ``metaresearch`` and a null domain; categories led by ``metaresearch`` and a substantive
    domain; ``insufficient_payload`` alone. OpenAI's strict mode allows no root union, so there the
    plain shape is sent and :func:`validate_label` enforces the rules.
    """
    if not rules_in_grammar:
        return _label_object(
            work_id,
            {"type": "array", "items": {"type": "string", "enum": list(CATEGORIES)}, "maxItems": 3},
            {"anyOf": [{"type": "string", "enum": list(DOMAINS[1:])}, {"type": "null"}]},
            reason_max_chars,
        )
    others = [c for c in CATEGORIES if c not in ("metaresearch", INSUFFICIENT_PAYLOAD)]
    other = {"type": "string", "enum": others}
    led_by_meta = {
        "anyOf": [
            {"type": "array", "prefixItems": [{"const": "metaresearch"}]},
            {"type": "array", "prefixItems": [{"const": "metaresearch"}, other]},
            {"type": "array", "prefixItems": [{"const": "metaresearch"}, other, other]},
        ]
    }
    return {
        "anyOf": [
            _label_object(
                work_id, {"type": "array", "items": other, "maxItems": 3}, {"type": "null"}, reason_max_chars
            ),
            _label_object(work_id, led_by_meta, {"type": "string", "enum": list(DOMAINS[1:])}, reason_max_chars),
            _label_object(
                work_id,
                {"type": "array", "prefixItems": [{"const": INSUFFICIENT_PAYLOAD}]},
                {"type": "null"},
                reason_max_chars,
            ),
        ]
    }


def batch_reply_schema(work_ids: list[str], reason_max_chars: int = 100, rules_in_grammar: bool = False) -> dict:
    """JSON schema of a reply for a batch of works: ``{"labels": [label, ...]}``.

    With ``rules_in_grammar`` (llama.cpp) the list is a tuple (``prefixItems``): the i-th label's id is
    pinned to the i-th requested id, so the grammar cannot produce a rewritten, missing or extra id. For
    OpenAI ``json_schema`` (strict mode has no tuples) every label's id is one of the requested ids and
    :func:`metacan_pipeline.teachers.calling.replies.validate_batch` checks the set.
    """
    if rules_in_grammar:
        labels = {
            "type": "array",
            "prefixItems": [reply_schema(w, reason_max_chars, True) for w in work_ids],
            "minItems": len(work_ids),
            "maxItems": len(work_ids),
        }
    else:
        item = reply_schema(work_ids[0] if work_ids else "", reason_max_chars, False)
        item["properties"]["id"] = {"type": "string", "enum": list(work_ids)}
        labels = {"type": "array", "items": item}
    return {"type": "object", "properties": {"labels": labels}, "required": ["labels"], "additionalProperties": False}


def _gbnf_literal(value: Any) -> str:
    """A GBNF string literal that matches the compact JSON text of ``value`` exactly."""
    return json.dumps(json.dumps(value, separators=(",", ":")))


def _gbnf_choice(values: tuple[str, ...] | list[str]) -> str:
    return "(" + " | ".join(_gbnf_literal(v) for v in values) + ")"


def _category_rules() -> list[str]:
    """GBNF rules shared by both reply grammars: ``others`` (categories without metaresearch), ``meta``
    (led by metaresearch) and ``domain`` (a substantive domain)."""
    others = [c for c in CATEGORIES if c not in ("metaresearch", INSUFFICIENT_PAYLOAD)]
    return [
        f"other ::= {_gbnf_choice(others)}",
        'others ::= "[" (other ("," other){0,2})? "]"',
        f'meta ::= "[" {_gbnf_literal("metaresearch")} ("," other){{0,2}} "]"',
        f"domain ::= {_gbnf_choice(DOMAINS[1:])}",
    ]


def _scalar_rules() -> list[str]:
    """GBNF rules shared by both reply grammars: a JSON boolean and one character of a JSON string."""
    return [
        'bool ::= "true" | "false"',
        'char ::= [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    ]


def batch_reply_grammar(work_ids: list[str], reason_max_chars: int = 100) -> str:
    """A llama.cpp GBNF grammar for the reply :func:`batch_reply_schema` describes with ``rules_in_grammar``,
    written out compactly: the same labels in the same order, ids pinned, the SPEC section 3 rules built in,
    but no whitespace between tokens.

    llama.cpp's own schema-to-grammar conversion allows a newline and indentation at every comma and brace,
    and the Gemma 3 270M takes it: 5 labels cost about 670 generated tokens pretty-printed and about 440
    compact, and generated tokens are most of a call's time. The reply is the same JSON, so
    :func:`metacan_pipeline.teachers.calling.replies.validate_batch` checks it exactly as before.
    """
    labels = ' "," '.join(f"label{i}" for i in range(len(work_ids)))
    lines = ['root ::= "{\\"labels\\":[" ' + labels + ' "]}"']
    lines += [f'label{i} ::= "{{\\"id\\":" {_gbnf_literal(wid)} body' for i, wid in enumerate(work_ids)]
    lines += [
        'body ::= ",\\"categories\\":" (others ",\\"domain\\":null" | meta ",\\"domain\\":" domain'
        f' | {_gbnf_literal([INSUFFICIENT_PAYLOAD])} ",\\"domain\\":null") rest',
        *_category_rules(),
        f'rest ::= ",\\"study_design\\":" {_gbnf_choice(STUDY_DESIGNS)} ",\\"genre\\":" {_gbnf_choice(GENRES)}'
        ' ",\\"about_ca_system\\":" bool ",\\"about_ca_topic\\":" bool'
        f' ",\\"confidence\\":" {_gbnf_choice(CONFIDENCES)} ",\\"reason\\":\\"" char{{1,{reason_max_chars}}} "\\"}}"',
        *_scalar_rules(),
    ]
    return "\n".join(lines)


def batch_rows_grammar(n_works: int, reason_max_chars: int = 100) -> str:
    """A llama.cpp GBNF grammar for a ``rows`` reply (:mod:`metacan_pipeline.teachers.core.rubric`): a JSON list
    of exactly ``n_works`` rows, each the eight SPEC section 3 label fields in
    :data:`metacan_pipeline.vocab.LABEL_FIELDS` order, compact, with the three shapes of
    :func:`batch_reply_grammar` built in.

    No field name and no id is generated: the Gemma 3 tokenizer spells a work id digit by digit (about 16
    tokens with its key), and the eight names cost about 35 more, so a row is about half the tokens of a
    label object. The works are matched by position, and the grammar allows exactly one row
    per work asked.
    """
    rows = ' "," '.join(["row"] * n_works)
    return "\n".join(
        [
            f'root ::= "[" {rows} "]"',
            f'row ::= "[" (others ",null" | meta "," domain | {_gbnf_literal([INSUFFICIENT_PAYLOAD])} ",null") rest',
            *_category_rules(),
            f'rest ::= "," {_gbnf_choice(STUDY_DESIGNS)} "," {_gbnf_choice(GENRES)} "," bool "," bool'
            f' "," {_gbnf_choice(CONFIDENCES)} ",\\"" char{{1,{reason_max_chars}}} "\\"]"',
            *_scalar_rules(),
        ]
    )


def batch_rows_schema(n_works: int, reason_max_chars: int = 100) -> dict:
    """JSON schema of a ``rows`` reply: a list of exactly ``n_works`` rows, each a tuple (``prefixItems``)
    of the eight label fields. Tuples are for llama.cpp's schema grammar; an endpoint whose strict mode has
    none refuses it and the client moves on to the next structured-output mode."""
    row = {
        "type": "array",
        "prefixItems": [
            {"type": "array", "items": {"type": "string", "enum": list(CATEGORIES)}, "maxItems": 3},
            {"anyOf": [{"type": "string", "enum": list(DOMAINS[1:])}, {"type": "null"}]},
            {"type": "string", "enum": list(STUDY_DESIGNS)},
            {"type": "string", "enum": list(GENRES)},
            {"type": "boolean"},
            {"type": "boolean"},
            {"type": "string", "enum": list(CONFIDENCES)},
            {"type": "string", "minLength": 1, "maxLength": reason_max_chars},
        ],
        "minItems": len(vocab.LABEL_FIELDS),
        "maxItems": len(vocab.LABEL_FIELDS),
    }
    return {"type": "array", "items": row, "minItems": n_works, "maxItems": n_works}


def rows_as_labels(obj: Any, ids: list[str]) -> list[dict]:
    """The label objects of a ``rows`` reply for the works ``ids`` (the i-th row is the i-th work's), ready
    for :func:`validate_label`. Raises :class:`InvalidLabel` when the reply is not a list of one row per
    work, or a row is not a list of the eight label fields."""
    if isinstance(obj, dict) and isinstance(obj.get("labels"), list):
        obj = obj["labels"]
    if not isinstance(obj, list):
        raise InvalidLabel(f"reply is a JSON {type(obj).__name__}, not a list of rows")
    if len(obj) != len(ids):
        raise InvalidLabel(f"reply has {len(obj)} rows for {len(ids)} works")
    out = []
    for i, (row, wid) in enumerate(zip(obj, ids, strict=True)):
        if not isinstance(row, list) or len(row) != len(vocab.LABEL_FIELDS):
            raise InvalidLabel(
                f"row {i + 1} ({wid}) is not a list of the {len(vocab.LABEL_FIELDS)} fields {list(vocab.LABEL_FIELDS)}"
            )
        out.append({"id": wid, **dict(zip(vocab.LABEL_FIELDS, row, strict=True))})
    return out
