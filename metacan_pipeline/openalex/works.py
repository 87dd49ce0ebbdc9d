"""OpenAlex work JSON -> one typed work row (:data:`WORKS_SCHEMA`: the shape the frame's routing reads).

Handles the 2022 schema (``host_venue``, no ``primary_location``; Crossref work types in ``type``), the
2023-2025 schema (``grants[].funder``, ``concepts``, no ``funders``) and the current one (``funders[]``,
``awards[].funder_id``, OpenAlex work types in ``type`` and Crossref's in ``type_crossref``); OpenAlex docs,
"Work object" and "Deprecations". The abstract text is used here once (for the about-Canada lexicon and
``has_abstract``) and then dropped: SPEC section 2.
"""

from __future__ import annotations

from typing import Any

from .abstract import deinvert, markup_to_text
from .ids import bare_pmid, short_id
from .lexicon import evidence_hits, find_hits
from .reader import Record

#: Crossref work types that are not OpenAlex work types, and the OpenAlex type a work of each is given here
#: (OpenAlex docs, "Work types": ``article`` covers Crossref's journal and proceedings articles). Records of the
#: 2022 schema (and some of 2023) carry Crossref's type in ``type``; the frame's ``type`` is always an OpenAlex type
#: and ``type_crossref`` keeps Crossref's. Types both vocabularies share (``book``, ``book-chapter``,
#: ``dataset``, ``dissertation``, ``report``, ``standard``, ...) and types of neither are kept as they are.
#: A Crossref container (a journal, a proceedings volume, a series) has no OpenAlex type: ``other``.
CROSSREF_ONLY_TYPES = {
    "journal-article": "article",
    "proceedings-article": "article",
    "posted-content": "preprint",
    "book-part": "book-chapter",
    "book-section": "book-chapter",
    "book-track": "book-chapter",
    "monograph": "book",
    "edited-book": "book",
    "reference-book": "book",
    "database": "dataset",
    "component": "other",
    "report-component": "other",
    "journal": "other",
    "journal-issue": "other",
    "journal-volume": "other",
    "proceedings": "other",
    "proceedings-series": "other",
    "book-series": "other",
    "book-set": "other",
    "report-series": "other",
    "standard-series": "other",
}


def work_types(w: dict) -> tuple[str | None, str | None]:
    """``(type, type_crossref)`` of a work record: ``type`` in the OpenAlex vocabulary (a Crossref-only value
    mapped by :data:`CROSSREF_ONLY_TYPES`), ``type_crossref`` the record's own, else its ``type`` when that can
    only be Crossref's (so the 2022 schema's ``monograph`` or ``proceedings`` is not lost), else None."""
    raw = w.get("type") if isinstance(w.get("type"), str) else None
    crossref = w.get("type_crossref") if isinstance(w.get("type_crossref"), str) else None
    if raw in CROSSREF_ONLY_TYPES:
        return CROSSREF_ONLY_TYPES[raw], crossref if crossref is not None else raw
    return raw, crossref


def types_sql(type_col: str, crossref_col: str) -> tuple[str, str]:
    """The SQL of :func:`work_types` over two VARCHAR columns: ``(type expression, type_crossref expression)``."""
    whens = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in CROSSREF_ONLY_TYPES.items())
    listed = ", ".join(f"'{k}'" for k in CROSSREF_ONLY_TYPES)
    return (
        f"CASE {type_col} {whens} ELSE {type_col} END",
        f"coalesce({crossref_col}, CASE WHEN {type_col} IN ({listed}) THEN {type_col} END)",
    )


def venue_id_of_host_venue(value: object) -> str | None:
    """The source id of a 2022-schema ``host_venue.id``: OpenAlex kept the number when venues became sources
    in 2023 (``V1983995261`` is ``S1983995261``; the filter ``host_venue.id:S123`` became
    ``primary_location.source.id:S123``)."""
    sid = short_id(value)
    return "S" + sid[1:] if sid and sid[0] == "V" else sid


def _venue(w: dict) -> tuple[str | None, Any]:
    """``(venue id, venue name)``: ``primary_location.source`` when it names anything (SPEC section 2), else
    the 2022 schema's ``host_venue``."""
    source = _get(w, "primary_location", "source")
    if isinstance(source, dict) and (source.get("id") is not None or source.get("display_name") is not None):
        return short_id(source.get("id")), source.get("display_name")
    host = w.get("host_venue")
    if isinstance(host, dict) and (host.get("id") is not None or host.get("display_name") is not None):
        return venue_id_of_host_venue(host.get("id")), host.get("display_name")
    return None, None


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _author_id(raw: Any) -> dict:
    """``author_id`` (the short id of an OpenAlex author, ``A123``) and ``bad_author_id`` (the record's text when it
    is there but not an author id: a string that is not one, or another entity's id) of one authorship."""
    sid = short_id(raw)
    if sid is not None and sid.startswith("A"):
        return {"author_id": sid, "bad_author_id": None}
    return {"author_id": None, "bad_author_id": None if raw is None else (raw if isinstance(raw, str) else str(raw))}


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


def student_view(w: dict) -> dict:
    """The fields of a work record the student reads, as the frame row of that work holds them (:func:`work_row`,
    then the frame's stripped ``title_text``): ``title_text``, ``venue_name``, ``topic``, ``field``, ``type``,
    ``language``, ``keywords``. Without the authorships, abstract and lexicon work of :func:`work_row`; a test
    checks both agree on real records."""
    title = w.get("title") if isinstance(w.get("title"), str) else w.get("display_name")
    topic = _get(w, "primary_topic", "display_name")
    field = _get(w, "primary_topic", "field", "display_name")
    venue = _venue(w)[1]
    return {
        "title_text": markup_to_text(title if isinstance(title, str) else None).strip(),
        "venue_name": venue if isinstance(venue, str) else None,
        "topic": topic if isinstance(topic, str) else None,
        "field": field if isinstance(field, str) else None,
        "type": work_types(w)[0],
        "language": w.get("language") if isinstance(w.get("language"), str) else None,
        "keywords": _keywords(w),
    }


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
    authors: list[dict] = []
    authorships = w.get("authorships") or []
    for a in authorships:
        keys = []
        for inst in _get(a, "institutions") or []:
            iid = short_id(_get(inst, "id"))
            key = iid or f"unresolved:{_get(inst, 'display_name')}"
            keys.append(key)
            institutions.setdefault(
                key,
                {
                    "id": iid,
                    "name": _get(inst, "display_name"),
                    "country_code": _get(inst, "country_code"),
                    "ror": _str(_get(inst, "ror")),
                },
            )
        raw_countries = _get(a, "countries") or []
        author_countries = [
            c.upper()
            for c in ([raw_countries] if isinstance(raw_countries, str) else raw_countries)
            if isinstance(c, str)
        ]
        countries.update(author_countries)
        name = _str(_get(a, "author", "display_name"))
        authors.append(
            {
                "name": name if name is not None else _str(_get(a, "raw_author_name")),
                "orcid": _str(_get(a, "author", "orcid")),
                "countries": author_countries,
                "institution_keys": keys,
                **_author_id(_get(a, "author", "id")),
            }
        )
    venue_id, venue_name = _venue(w)
    work_type, type_crossref = work_types(w)
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
        "pmid": bare_pmid(_get(w, "ids", "pmid")),
        "title": title,
        "title_text": title_text,
        "publication_year": _as_int(w.get("publication_year"), limit=100_000),
        "publication_date": w.get("publication_date") if isinstance(w.get("publication_date"), str) else None,
        "updated_date": w.get("updated_date") if isinstance(w.get("updated_date"), str) else None,
        "language": w.get("language") if isinstance(w.get("language"), str) else None,
        "type": work_type,
        "type_crossref": type_crossref,
        "is_paratext": bool(w.get("is_paratext")),
        "is_retracted": bool(w.get("is_retracted")),
        "cited_by_count": _as_int(w.get("cited_by_count")),
        "venue_id": venue_id,
        "venue_name": venue_name,
        "topic": topic if isinstance(topic, str) else None,
        "field": field if isinstance(field, str) else None,
        "institutions": list(institutions.values()),
        "author_countries": sorted(countries),
        "authors": authors,
        "funders": _funders(w),
        "keywords": keywords,
        "is_authors_truncated": bool(w.get("is_authors_truncated")),
        "n_authorships": len(authorships),
        "has_abstract": has_abstract,
        "lexicon_hits": [{"term": h.term, "tier": h.tier, "field": h.field} for h in hits],
        "source_file": rec.source_file,
        "source_locator": rec.locator,
    }
