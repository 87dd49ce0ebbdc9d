"""The tiered "about Canada" lexicon of SPEC section 2 (route ``about_ca``).

Matched case-insensitively on word boundaries over the title, the abstract words and the keyword
names. Tier A (Canada, provinces and territories in English and French, First Nations, Inuit, Métis)
and tier B (unambiguous Canadian places and institutions) fire alone; tier C (names with common
homographs) fires only together with a tier-A hit in the same work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LEXICON_VERSION = "about-ca-lexicon-v1"

TIER_A: tuple[str, ...] = (
    "Canada", "Canadian", "Canadians", "Canadien", "Canadienne", "Canadiens", "Canadiennes",
    "Ontario", "Quebec", "Québec", "Québécois", "British Columbia", "Colombie-Britannique",
    "Alberta", "Saskatchewan", "Manitoba", "Nova Scotia", "Nouvelle-Écosse", "New Brunswick",
    "Nouveau-Brunswick", "Prince Edward Island", "Île-du-Prince-Édouard", "Newfoundland",
    "Terre-Neuve", "Terre-Neuve-et-Labrador", "Yukon", "Northwest Territories",
    "Territoires du Nord-Ouest", "Nunavut", "First Nations", "Premières Nations", "Inuit",
    "Métis", "Metis",
)

TIER_B: tuple[str, ...] = (
    "Toronto", "Vancouver", "Ottawa", "Calgary", "Edmonton", "Winnipeg",
    "Saskatoon", "Gatineau", "Iqaluit", "Yellowknife", "Nunavik", "Thunder Bay", "Lethbridge",
    "Fredericton", "Charlottetown", "Moncton", "Sherbrooke", "Trois-Rivières", "Mississauga",
    "Guelph", "Saguenay", "Rimouski", "Kamloops", "Nanaimo", "St. John's, Newfoundland",
    "CIHR", "NSERC", "SSHRC", "CRSNG", "CRSH", "IRSC", "Statistics Canada", "Statistique Canada",
    "Health Canada", "Santé Canada", "McGill", "McMaster", "Dalhousie", "Université Laval",
    "Université de Montréal", "University of Toronto", "Simon Fraser University",
    "University of British Columbia", "Memorial University", "Queen's University",
    "Canada Foundation for Innovation", "Fonds de recherche du Québec", "Mitacs", "TRIUMF",
)

TIER_C: tuple[str, ...] = (
    "London", "Victoria", "Regina", "Montreal", "Montréal", "Waterloo", "Delta", "Windsor", "Hamilton", "Kingston",
    "Halifax", "Labrador", "Richmond", "Surrey", "Burlington", "Cambridge", "Peterborough",
    "Sudbury", "Whitehorse", "Saint John", "Red Deer", "Prince George", "Cree", "Niagara",
)


def _compile(terms: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = sorted((re.escape(t) for t in terms), key=len, reverse=True)
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)


_TIERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("A", _compile(TIER_A)),
    ("B", _compile(TIER_B)),
    ("C", _compile(TIER_C)),
)


@dataclass(frozen=True)
class LexiconHit:
    """One lexicon match: the matched text as written, its tier and the field it was found in."""

    term: str
    tier: str
    field: str  # title | abstract | keywords


def find_hits(fields: dict[str, str | None]) -> list[LexiconHit]:
    """All distinct lexicon hits over ``{"title": ..., "abstract": ..., "keywords": ...}``."""
    seen: set[tuple[str, str, str]] = set()
    hits: list[LexiconHit] = []
    for field, text in fields.items():
        if not text:
            continue
        for tier, pattern in _TIERS:
            for m in pattern.finditer(text):
                key = (m.group(0).lower(), tier, field)
                if key not in seen:
                    seen.add(key)
                    hits.append(LexiconHit(m.group(0), tier, field))
    return hits


def about_ca_fires(tiers: set[str]) -> bool:
    """SPEC section 2: tier A or B fires alone; tier C only with a tier-A hit (so never decisive)."""
    return "A" in tiers or "B" in tiers


def evidence_hits(hits: list[LexiconHit]) -> list[LexiconHit]:
    """The hits that count as evidence: tier C is dropped unless a tier-A hit is present."""
    has_a = any(h.tier == "A" for h in hits)
    return [h for h in hits if h.tier != "C" or has_a]
