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
#: Runs of letters: a coarser split than :data:`_WORD` (it also splits at digits and "_"), used only
#: by the superset test :func:`text_may_count`, where it skips the numbers of an inverted index's JSON.
_LETTERS = re.compile(r"[^\W\d_]+")


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
        words = _tokens(text)
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


#: Words too common to stand for a term in the pre-scan (a term made only of them keeps them all).
_COMMON = {"new", "first", "island", "university", "of", "du", "de", "des", "et", "the", "and", "saint", "st", "s",
           "prince", "red", "bay", "health", "statistics", "foundation", "for", "innovation", "fonds", "recherche"}


def prefilter_pattern() -> str:
    """An RE2 pattern (DuckDB) with at least one word of every lexicon term (its uncommon words): a
    text with no match holds no lexicon hit. Word boundaries are Unicode letters and digits (RE2's
    ``\\b`` is ASCII-only and would miss "île" or "écosse")."""
    words: set[str] = set()
    for term in _INDEX:
        words.update([t for t in term if t not in _COMMON] or term)
    edge = r"[^\p{L}\p{N}_]"
    return f"(^|{edge})(" + "|".join(sorted(re.escape(t) for t in words)) + f")({edge}|$)"


_SINGLE = {k[0] for k, (tier, _) in _INDEX.items() if tier != "C" and len(k) == 1}
_MULTI = [frozenset(k) for k, (tier, _) in _INDEX.items() if tier != "C" and len(k) > 1]
_TIER_C_WORDS = {t for k, (tier, _) in _INDEX.items() if tier == "C" for t in k}
_TIER_A_WORDS = {t for k, (tier, _) in _INDEX.items() if tier == "A" for t in k}


def text_may_count(raw_lower: str, context: str) -> bool:
    """Whether the lower-cased raw text (e.g. an abstract's inverted-index JSON) may hold a hit that
    counts as evidence (:func:`evidence_hits`), given the title and keywords ``context``.

    A superset test, cheap next to de-inverting an abstract: a one-word tier A/B term needs its word;
    a multi-word term needs all its words (in any order: an inverted index keeps no adjacency in its
    JSON); a tier C term counts only with a tier A word in ``context`` (one in the text itself is
    already a tier A hit).
    """
    words = set(_LETTERS.findall(raw_lower))
    if words & _SINGLE or any(req <= words for req in _MULTI):
        return True
    return bool(words & _TIER_C_WORDS) and bool(_TIER_A_WORDS.intersection(_tokens(context)))


def about_ca_fires(tiers: set[str]) -> bool:
    """SPEC section 2: tier A or B fires alone; tier C only with a tier-A hit (so never decisive)."""
    return "A" in tiers or "B" in tiers


def evidence_hits(hits: list[LexiconHit]) -> list[LexiconHit]:
    """The hits that count as evidence: tier C is dropped unless a tier-A hit is present."""
    has_a = any(h.tier == "A" for h in hits)
    return [h for h in hits if h.tier != "C" or has_a]
