"""OpenAlex id normalisation (SPEC section 2: ids are stored in the short form ``W123``)."""

from __future__ import annotations

import re

_ID_RE = re.compile(r"(?:https?://openalex\.org/)?([A-Za-z])([0-9]{1,19})")
WORK_ID_RE = re.compile(r"W[0-9]{1,19}")


def short_id(value: object) -> str | None:
    """``"https://openalex.org/W123"`` or ``"w123"`` -> ``"W123"``; None for anything else (digits are
    ASCII, at most 19 of them, so an id always fits a file name and a BIGINT).

    Source: OpenAlex docs, "Entity ids" (an id is an URL whose last segment is a letter and digits).
    """
    if not isinstance(value, str):
        return None
    m = _ID_RE.fullmatch(value.strip())
    if not m:
        return None
    return m.group(1).upper() + m.group(2)


def entity_kind(value: object) -> str | None:
    """The entity letter of an id (``W`` work, ``F`` funder, ``S`` source, ``I`` institution, ...)."""
    sid = short_id(value)
    return sid[0] if sid else None


def is_work_id(value: str) -> bool:
    """True for a short work id (``W`` + 1-19 ASCII digits); used before an id becomes a file name or URL."""
    return isinstance(value, str) and WORK_ID_RE.fullmatch(value) is not None


def bare_pmid(value: object) -> str | None:
    """A PubMed id as its digits without leading zeros (``"123"``), from ``123``, ``"00123"`` or an OpenAlex
    ``ids.pmid`` URL (``https://pubmed.ncbi.nlm.nih.gov/123``); None for anything else (0, a bool, other text)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return None
    tail = value.strip().rstrip("/").rsplit("/", 1)[-1]
    if not (tail.isascii() and tail.isdigit() and len(tail) <= 12):
        return None
    return tail.lstrip("0") or None
