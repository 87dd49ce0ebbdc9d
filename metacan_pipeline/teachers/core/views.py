"""Record views: what a teacher is shown of a work (SPEC section 4). A view is versioned.

- ``title_only``: id, title, year, language, type, venue, topic, field; from view version 2 also the
  work's institutions and funders, Canadian ones marked ``(Canada)`` (no abstract).
- ``title_abstract``: the same plus the de-inverted abstract (cut to ``ABSTRACT_MAX_CHARS``).

Version 1 withheld institutions and funders, without which ``about_ca_system`` cannot be judged (the
original system's first deviation); it is kept only so the labels it produced keep their key. The view
hash (SHA-256 of the canonical JSON) is part of the label key, and a version 2 view always holds the keys
``institutions`` and ``funders`` (empty lists included), so no version 1 label is ever reused for it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

VIEWS = ("title_only", "title_abstract")
VIEW_VERSIONS = (1, 2)
CURRENT_VIEW_VERSION = 2
ABSTRACT_MAX_CHARS = 1500
MAX_NAMES = 10
"""Institutions (and funders) shown per work; the rest are counted (a 5,000-author work lists hundreds)."""
CANADA_MARK = " (Canada)"


MAX_NAME_CHARS = 200
"""A name longer than this is cut (with " [...]"): a record's field must not flood the prompt."""


def _name(name: str) -> str:
    name = " ".join(name.split())
    return name[:MAX_NAME_CHARS] + " [...]" if len(name) > MAX_NAME_CHARS else name


def marked_names(canadian: Iterable[str], others: Iterable[str], limit: int = MAX_NAMES) -> list[str]:
    """Names with the Canadian ones first and marked ``(Canada)``, at most ``limit`` of them, then one
    ``"... and N more"`` entry when some are left out. Duplicates and empty names are dropped."""
    ca = list(dict.fromkeys(_name(n) for n in canadian if n and n.strip()))
    seen = set(ca)
    rest = [n for n in dict.fromkeys(_name(n) for n in others if n and n.strip()) if n not in seen]
    names = [n + CANADA_MARK for n in ca] + rest
    if len(names) > limit:
        return names[:limit] + [f"... and {len(names) - limit} more"]
    return names


def record_view(work: dict, view: str, abstract: str | None = None, version: int = CURRENT_VIEW_VERSION) -> dict:
    """The view dict for a frame row; raises ValueError for an unknown view name or version."""
    if view not in VIEWS:
        raise ValueError(f"unknown record view {view!r}; expected one of {VIEWS}")
    if version not in VIEW_VERSIONS:
        raise ValueError(f"unknown record view version {version!r}; expected one of {VIEW_VERSIONS}")
    out = {
        "id": work["id"],
        "title": work["title_text"],
        "year": work["publication_year"],
        "language": work["language"],
        "type": work["type"],
        "venue": work["venue_name"],
        "topic": work["topic"],
        "field": work["field"],
    }
    if version >= 2:
        ca_funders = set(work.get("ca_funder_names") or [])
        out["institutions"] = marked_names(work.get("ca_institutions") or [], work.get("other_institutions") or [])
        out["funders"] = marked_names(
            [f for f in work.get("funder_names") or [] if f in ca_funders],
            [f for f in work.get("funder_names") or [] if f not in ca_funders],
        )
    if view == "title_abstract":
        text = (abstract or "").strip()
        out["abstract"] = (text[:ABSTRACT_MAX_CHARS] + " [...]") if len(text) > ABSTRACT_MAX_CHARS else (text or None)
    return out


def canonical_json(obj: object) -> str:
    """Key-sorted, compact, UTF-8 JSON: the text a view hash (and an imported record's hash) is taken over."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def view_hash(view: dict) -> str:
    """16 hex characters of SHA-256 over the canonical JSON of a view."""
    return hashlib.sha256(canonical_json(view).encode()).hexdigest()[:16]
