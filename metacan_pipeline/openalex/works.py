"""OpenAlex work JSON -> one typed work row (:data:`WORKS_SCHEMA`: the shape the frame's routing reads).

Handles the old schema (``grants[].funder``, ``concepts``, no ``funders``) and the current one
(``funders[]``, ``awards[].funder_id``); OpenAlex docs, "Work object". The abstract text is used
here once (for the about-Canada lexicon and ``has_abstract``) and then dropped: SPEC section 2.
"""

from __future__ import annotations

from typing import Any

from .abstract import deinvert, markup_to_text
from .ids import short_id
from .lexicon import evidence_hits, find_hits
from .reader import Record


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _as_int(v: Any, limit: int = 2**62) -> int | None:
    """An integral number (or a string of one) within +-limit, else None: 2025.5, "2020abc", True
    and 10**30 are not years or counts."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, float):
        if not v.is_integer():
            return None
        v = int(v)
    try:
        out = int(v)
    except (TypeError, ValueError):
        try:
            f = float(v)
        except (TypeError, ValueError, OverflowError):
            return None
        return int(f) if f.is_integer() and abs(f) < limit else None
    return out if abs(out) < limit else None


def _funders(w: dict) -> list[dict]:
    out: dict[str, dict] = {}
    for f in w.get("funders") or []:
        fid = short_id(_get(f, "id"))
        if fid:
            out.setdefault(fid, {"id": fid, "name": _get(f, "display_name"), "via": "funders.id"})
    for a in w.get("awards") or []:
        fid = short_id(_get(a, "funder_id"))
        if fid:
            out.setdefault(fid, {"id": fid, "name": _get(a, "funder_display_name"), "via": "awards.funder_id"})
    for g in w.get("grants") or []:
        fid = short_id(_get(g, "funder"))
        if fid:
            out.setdefault(fid, {"id": fid, "name": _get(g, "funder_display_name"), "via": "grants.funder"})
    return list(out.values())


def _keywords(w: dict) -> list[str]:
    names = [_get(k, "display_name") for k in (w.get("keywords") or [])]
    return [n for n in names if isinstance(n, str) and n]


def work_row(rec: Record) -> dict:
    """The typed row for one work record (schema :data:`WORKS_SCHEMA`).

    Never raises on missing or oddly typed fields: a missing field is a null. The caller has
    already ensured the record has a work id. This is the exact path; the DuckDB fast path of
    :mod:`metacan_pipeline.openalex.staging` builds the same rows in SQL (a test proves they agree).
    """
    w = rec.data
    title = w.get("title") if isinstance(w.get("title"), str) else w.get("display_name")
    title = title if isinstance(title, str) else None
    title_text = markup_to_text(title)
    institutions: dict[str, dict] = {}
    countries: set[str] = set()
    authorships = w.get("authorships") or []
    for a in authorships:
        for inst in _get(a, "institutions") or []:
            iid = short_id(_get(inst, "id"))
            key = iid or f"unresolved:{_get(inst, 'display_name')}"
            institutions.setdefault(
                key, {"id": iid, "name": _get(inst, "display_name"), "country_code": _get(inst, "country_code")}
            )
        raw_countries = _get(a, "countries") or []
        for c in [raw_countries] if isinstance(raw_countries, str) else raw_countries:
            if isinstance(c, str):
                countries.add(c.upper())
    source = _get(w, "primary_location", "source") or {}
    topic = _get(w, "primary_topic", "display_name")
    field = _get(w, "primary_topic", "field", "display_name")
    index = w.get("abstract_inverted_index")
    text = deinvert(index)
    has_abstract = isinstance(index, dict) and len(index) > 0
    keywords = _keywords(w)
    hits = evidence_hits(find_hits({"title": title_text, "abstract": text, "keywords": "; ".join(keywords)}))
    doi = w.get("doi") if isinstance(w.get("doi"), str) else None
    return {
        "id": short_id(w.get("id")),
        "doi": doi,
        "title": title,
        "title_text": title_text,
        "publication_year": _as_int(w.get("publication_year"), limit=100_000),
        "publication_date": w.get("publication_date") if isinstance(w.get("publication_date"), str) else None,
        "updated_date": w.get("updated_date") if isinstance(w.get("updated_date"), str) else None,
        "language": w.get("language") if isinstance(w.get("language"), str) else None,
        "type": w.get("type") if isinstance(w.get("type"), str) else None,
        "is_paratext": bool(w.get("is_paratext")),
        "is_retracted": bool(w.get("is_retracted")),
        "cited_by_count": _as_int(w.get("cited_by_count")),
        "venue_id": short_id(source.get("id")) if isinstance(source, dict) else None,
        "venue_name": source.get("display_name") if isinstance(source, dict) else None,
        "topic": topic if isinstance(topic, str) else None,
        "field": field if isinstance(field, str) else None,
        "institutions": list(institutions.values()),
        "author_countries": sorted(countries),
        "funders": _funders(w),
        "keywords": keywords,
        "is_authors_truncated": bool(w.get("is_authors_truncated")),
        "n_authorships": len(authorships),
        "has_abstract": has_abstract,
        "lexicon_hits": [{"term": h.term, "tier": h.tier, "field": h.field} for h in hits],
        "source_file": rec.source_file,
        "source_locator": rec.locator,
    }
