"""The tiered "about Canada" lexicon of SPEC section 2 (route ``about_ca``).

Matched case-insensitively on word boundaries over the title, the abstract words and the keyword
names. Tier A (Canada, provinces and territories in English and French, First Nations, Inuit, Métis)
and tier B (unambiguous Canadian places and institutions) fire alone; tier C (names with common
homographs) fires only together with a tier-A hit in the same work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LEXICON_VERSION = "about-ca-lexicon-v2"

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


_WORD = re.compile(r"\w+")


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _build_index() -> tuple[dict[tuple[str, ...], tuple[str, str]], int]:
    index: dict[tuple[str, ...], tuple[str, str]] = {}
    for tier, terms in (("C", TIER_C), ("B", TIER_B), ("A", TIER_A)):  # A wins if a term were in two tiers
        for term in terms:
            index[tuple(_tokens(term))] = (tier, term)
    return index, max(len(k) for k in index)


_INDEX, _MAX_N = _build_index()
_FIRST = {k[0] for k in _INDEX}


@dataclass(frozen=True)
class LexiconHit:
    """One lexicon match: the lexicon term (as the lexicon spells it), its tier and the field."""

    term: str
    tier: str
    field: str  # title | abstract | keywords


def find_hits(fields: dict[str, str | None]) -> list[LexiconHit]:
    """All distinct lexicon hits over ``{"title": ..., "abstract": ..., "keywords": ...}``.

    Word boundaries are Unicode word tokens (``\\w+``, case-folded): a term matches a run of whole
    tokens, so "Canadaville" does not match "Canada" and "Colombie-Britannique" matches across its
    hyphen; the longest term starting at a token wins. One linear pass per field (a set lookup per
    token, n-grams only where a term can start), so the cost does not grow with the lexicon.
    """
    seen: set[tuple[str, str]] = set()
    hits: list[LexiconHit] = []
    for field, text in fields.items():
        if not text:
            continue
        words = _WORD.findall(text.casefold())
        for i, w in enumerate(words):
            if w not in _FIRST:
                continue
            for n in range(min(_MAX_N, len(words) - i), 0, -1):
                found = _INDEX.get(tuple(words[i:i + n]))
                if found is not None:
                    tier, term = found
                    if (term, field) not in seen:
                        seen.add((term, field))
                        hits.append(LexiconHit(term, tier, field))
                    break
    return hits


#: Tokens too common to flag a record for the full abstract scan (they only occur inside longer terms).
_COMMON = {"new", "first", "island", "university", "of", "du", "de", "des", "et", "the", "and", "saint", "st", "s",
           "prince", "red", "bay", "health", "statistics", "foundation", "for", "innovation", "fonds", "recherche"}


def prefilter_pattern() -> str:
    """An RE2/regex pattern of the distinctive lexicon tokens, for a cheap pre-scan of raw text.

    Every term of every tier contains at least one such token, so a text with no match cannot hold
    a lexicon hit (a superset filter: the exact match is :func:`find_hits`).
    """
    tokens = set()
    for term in _INDEX:
        distinctive = [t for t in term if t not in _COMMON]
        tokens.update(distinctive or term)
    return r"\b(" + "|".join(sorted(re.escape(t) for t in tokens)) + r")\b"


def about_ca_fires(tiers: set[str]) -> bool:
    """SPEC section 2: tier A or B fires alone; tier C only with a tier-A hit (so never decisive)."""
    return "A" in tiers or "B" in tiers


def evidence_hits(hits: list[LexiconHit]) -> list[LexiconHit]:
    """The hits that count as evidence: tier C is dropped unless a tier-A hit is present."""
    has_a = any(h.tier == "A" for h in hits)
    return [h for h in hits if h.tier != "C" or has_a]
