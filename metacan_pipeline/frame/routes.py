"""Routes, admission and sampling-frame flags of SPEC section 2, one work row at a time.

Input rows are typed work rows (:data:`metacan_pipeline.tables.openalex.WORKS_SCHEMA`, built by either
reader of :mod:`metacan_pipeline.openalex.staging`); output rows are ``frame`` rows
(:data:`FRAME_SCHEMA`) or None when no route fires (:func:`route_row`) or the work is not admitted.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..openalex.lexicon import LEXICON_VERSION, LexiconHit, about_ca_fires, evidence_hits
from ..vocab import ROUTES
from .entities import EntityLists

MIN_TITLE_CHARS = 11  # SPEC section 2: titles of 10 characters or fewer leave the sampling frame


@dataclass(frozen=True)
class AdmissionRule:
    """SPEC section 2 admission: year range (inclusive) and a non-empty title."""

    year_min: int = 2000
    year_max: int = 2025


def route_key(row: dict) -> str:
    """The route combination as a stable stratum-friendly key, e.g. ``ca_aff+ca_fund``."""
    return "+".join(r for r in ROUTES if row[r]) or "none"


def admission_outcome(row: dict, rule: AdmissionRule) -> str:
    """``admitted``, ``no_title`` or ``year_out_of_range`` for a routed row (SPEC section 2 admission);
    the ``frame`` asset applies the same test in SQL when it merges the parts."""
    if not (row["title_text"] or "").strip():
        return "no_title"
    year = row["publication_year"]
    if year is None or not (rule.year_min <= year <= rule.year_max):
        return "year_out_of_range"
    return "admitted"


def frame_row(work: dict, entities: EntityLists, rule: AdmissionRule) -> tuple[dict | None, str]:
    """The frame row for one work, or ``(None, reason)`` when it is not admitted.

    Reasons: ``no_route``, ``no_title``, ``year_out_of_range``: :func:`route_row` then
    :func:`admission_outcome`.
    """
    row = route_row(work, entities)
    if row is None:
        return None, "no_route"
    outcome = admission_outcome(row, rule)
    return (row, outcome) if outcome == "admitted" else (None, outcome)


def is_canadian_institution(inst: dict, entities: EntityLists) -> bool:
    """SPEC section 2: an institution is Canadian when its ``country_code`` is CA or it is on the pinned list."""
    return (inst.get("country_code") or "").upper() == "CA" or inst.get("id") in entities.institutions


def canadian_authors(work: dict, entities: EntityLists) -> list[dict]:
    """The work's Canadian authorships in the record's order: ``{"name", "orcid", "institutions": [{"name",
    "ror"}]}`` for each authorship with a Canadian institution (:func:`is_canadian_institution`) or CA among its
    countries (an affiliation that never resolved to an institution: no institution listed). Names and ORCIDs as
    OpenAlex gives them (an ORCID is its URL); an authorship without a name is left out."""
    by_key = {inst.get("id") or f"unresolved:{inst.get('name')}": inst for inst in work["institutions"] or []}
    out = []
    for a in work.get("authors") or []:
        insts = [by_key[k] for k in a["institution_keys"] or [] if k in by_key]
        ca = [i for i in insts if is_canadian_institution(i, entities)]
        if a["name"] and (ca or "CA" in (a["countries"] or [])):
            names = [{"name": i["name"], "ror": i.get("ror")} for i in ca if i.get("name")]
            out.append({"name": a["name"], "orcid": a["orcid"], "institutions": names})
    return out


def authorships(work: dict, entities: EntityLists) -> list[dict]:
    """Every authorship of the work in the record's order (``AUTHORSHIP_TYPE``): its 1-based position, the OpenAlex
    author id with its status (``ok``; ``missing`` when the record names none; ``invalid`` when its ``author.id``
    is not an author id: the authorship is kept with its name), ORCID and name as OpenAlex gives them (never
    inferred), whether it is Canadian (a Canadian institution, :func:`is_canadian_institution`, or CA among its
    countries: the test of :func:`canadian_authors`) and its institutions (``id``, ``name``, ``country_code``,
    ``ror``; an affiliation that never resolved to an institution has a null id)."""
    by_key = {inst.get("id") or f"unresolved:{inst.get('name')}": inst for inst in work["institutions"] or []}
    out = []
    for position, a in enumerate(work.get("authors") or [], start=1):
        insts = [by_key[k] for k in a["institution_keys"] or [] if k in by_key]
        author_id = a.get("author_id")
        status = "ok" if author_id else ("invalid" if a.get("bad_author_id") else "missing")
        out.append(
            {
                "position": position,
                "author_id": author_id,
                "author_id_status": status,
                "orcid": a["orcid"],
                "name": a["name"],
                "is_canadian": any(is_canadian_institution(i, entities) for i in insts)
                or "CA" in (a["countries"] or []),
                "institutions": [
                    {
                        "id": i.get("id"),
                        "name": i.get("name"),
                        "country_code": i.get("country_code"),
                        "ror": i.get("ror"),
                    }
                    for i in insts
                ],
            }
        )
    return out


def route_row(work: dict, entities: EntityLists) -> dict | None:
    """The routed row for one work (``FRAME_SCHEMA`` without ``frame_build_id``), or None when no
    route fires. Admission (title, year range) is not applied here: see :func:`admission_outcome`.

    Evidence lists say which field and which entity fired each route (e.g. ``institution I123
    University of Toronto (country_code CA)``).
    """
    aff_ev: list[str] = []
    ca_institutions: list[str] = []
    other_institutions: list[str] = []
    for inst in work["institutions"] or []:
        cc = (inst.get("country_code") or "").upper()
        if is_canadian_institution(inst, entities):
            why = "country_code CA" if cc == "CA" else "pinned Canadian institution list"
            aff_ev.append(
                f"institution {inst.get('id') or '(unresolved)'} {inst.get('name') or ''} ({why})".replace("  ", " ")
            )
            if inst.get("name"):
                ca_institutions.append(inst["name"])
        elif inst.get("name"):
            other_institutions.append(inst["name"])
    if "CA" in (work["author_countries"] or []):
        aff_ev.append("authorships[].countries contains CA")
    fund_ev = [
        f"funder {f['id']} {entities.funders.get(f['id']) or f.get('name') or ''} (via {f['via']})".strip()
        for f in (work["funders"] or [])
        if f["id"] in entities.funders
    ]
    venue_ev = (
        [f"source {work['venue_id']} {entities.sources[work['venue_id']] or ''} (pinned Canadian source list)".strip()]
        if work["venue_id"] in entities.sources
        else []
    )
    hits = [LexiconHit(h["term"], h["tier"], h["field"]) for h in (work["lexicon_hits"] or [])]
    about = about_ca_fires({h.tier for h in hits})
    about_ev = [f"tier {h.tier} '{h.term}' in {h.field}" for h in evidence_hits(hits)] if about else []

    title_text = (work["title_text"] or "").strip()
    row = {
        "ca_aff": bool(aff_ev),
        "ca_fund": bool(fund_ev),
        "ca_venue": bool(venue_ev),
        "about_ca": about,
    }
    if not any(row.values()):
        return None
    exclusion = None
    if work["is_paratext"]:
        exclusion = "paratext"
    elif len(title_text) < MIN_TITLE_CHARS:
        exclusion = "short_title"
    row.update(
        {
            "id": work["id"],
            "doi": work["doi"],
            "pmid": work.get("pmid"),
            "title": work["title"],
            "title_text": title_text,
            "publication_year": work["publication_year"],
            "language": work["language"],
            "type": work["type"],
            "type_crossref": work["type_crossref"],
            "is_paratext": work["is_paratext"],
            "is_retracted": work["is_retracted"],
            "cited_by_count": work["cited_by_count"],
            "venue_id": work["venue_id"],
            "venue_name": work["venue_name"],
            "topic": work["topic"],
            "field": work["field"],
            "updated_date": work["updated_date"],
            "invisible_to_affiliation_only": not row["ca_aff"],
            "ca_aff_evidence": aff_ev,
            "ca_fund_evidence": fund_ev,
            "ca_venue_evidence": venue_ev,
            "about_ca_evidence": about_ev,
            "in_sampling_frame": exclusion is None,
            "sampling_frame_exclusion": exclusion,
            "has_abstract": work["has_abstract"],
            "is_authors_truncated": work["is_authors_truncated"],
            "ca_institutions": sorted(set(ca_institutions)),
            "funder_names": [f.get("name") or f["id"] for f in (work["funders"] or [])],
            "other_institutions": sorted(set(other_institutions) - set(ca_institutions)),
            "ca_funder_names": [
                f.get("name") or f["id"] for f in (work["funders"] or []) if f["id"] in entities.funders
            ],
            "ca_authors": canadian_authors(work, entities),
            "authorships": authorships(work, entities),
            "keywords": work["keywords"],
            "source_file": work["source_file"],
            "source_locator": work["source_locator"],
            "entity_list_versions": ";".join(f"{k}={v}" for k, v in sorted(entities.versions.items())),
            "lexicon_version": LEXICON_VERSION,
        }
    )
    row["route_key"] = route_key(row)
    return row
