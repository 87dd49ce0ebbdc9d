"""Record views: what a teacher is shown of a work (SPEC section 4).

- ``title_only``: id, title, year, language, type, venue, topic, field (no abstract).
- ``title_abstract``: the same plus the de-inverted abstract (cut to ``ABSTRACT_MAX_CHARS``).

The view hash (SHA-256 of the canonical JSON) is part of the label key: a changed record is a new
label, an unchanged one is reused.
"""

from __future__ import annotations

import hashlib
import json

VIEWS = ("title_only", "title_abstract")
ABSTRACT_MAX_CHARS = 1500


def record_view(work: dict, view: str, abstract: str | None = None) -> dict:
    """The view dict for a frame row; raises ValueError for an unknown view name."""
    if view not in VIEWS:
        raise ValueError(f"unknown record view {view!r}; expected one of {VIEWS}")
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
