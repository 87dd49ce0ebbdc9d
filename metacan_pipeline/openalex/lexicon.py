"""The tiered "about Canada" lexicon of SPEC section 2 (route ``about_ca``).

Matched case-insensitively on word boundaries over the title, the abstract words and the keyword
names. Tier A (Canada, provinces and territories in English and French, First Nations, Inuit, Métis)
and tier B (unambiguous Canadian places and institutions) fire alone; tier C (names with common
homographs) fires only together with a tier-A hit in the same work.

It lives in ``openalex/`` because it is applied while a record is read (:mod:`.works`, :mod:`.staging`:
the abstract text is used once, here, then dropped); ``frame.routes`` decides the route from its hits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LEXICON_VERSION = "about-ca-lexicon-v2"

TIER_A: tuple[str, ...] = (
    "Canada",
    "Canadian",
    "Canadians",
    "Canadien",
    "Canadienne",
    "Canadiens",
    "Canadiennes",
    "Ontario",
    "Quebec",
    "Québec",
    "Québécois",
    "British Columbia",
    "Colombie-Britannique",
    "Alberta",
    "Saskatchewan",
    "Manitoba",
    "Nova Scotia",
    "Nouvelle-Écosse",
    "New Brunswick",
    "Nouveau-Brunswick",
    "Prince Edward Island",
    "Île-du-Prince-Édouard",
    "Newfoundland",
    "Terre-Neuve",
    "Terre-Neuve-et-Labrador",
    "Yukon",
    "Northwest Territories",
    "Territoires du Nord-Ouest",
    "Nunavut",
    "First Nations",
    "Premières Nations",
    "Inuit",
    "Métis",
    "Metis",
)

TIER_B: tuple[str, ...] = (
    "Toronto",
    "Vancouver",
    "Ottawa",
    "Calgary",
    "Edmonton",
    "Winnipeg",
    "Saskatoon",
    "Gatineau",
    "Iqaluit",
    "Yellowknife",
    "Nunavik",
    "Thunder Bay",
    "Lethbridge",
    "Fredericton",
    "Charlottetown",
    "Moncton",
    "Sherbrooke",
    "Trois-Rivières",
    "Mississauga",
    "Guelph",
    "Saguenay",
    "Rimouski",
    "Kamloops",
    "Nanaimo",
    "St. John's, Newfoundland",
    "CIHR",
    "NSERC",
    "SSHRC",
    "CRSNG",
    "CRSH",
    "IRSC",
    "Statistics Canada",
    "Statistique Canada",
    "Health Canada",
    "Santé Canada",
    "McGill",
    "McMaster",
    "Dalhousie",
    "Université Laval",
    "Université de Montréal",
    "University of Toronto",
    "Simon Fraser University",
    "University of British Columbia",
    "Memorial University",
    "Queen's University",
    "Canada Foundation for Innovation",
    "Fonds de recherche du Québec",
    "Mitacs",
    "TRIUMF",
)

TIER_C: tuple[str, ...] = (
    "London",
    "Victoria",
    "Regina",
    "Montreal",
    "Montréal",
    "Waterloo",
    "Delta",
    "Windsor",
    "Hamilton",
    "Kingston",
    "Halifax",
    "Labrador",
    "Richmond",
    "Surrey",
    "Burlington",
    "Cambridge",
    "Peterborough",
    "Sudbury",
    "Whitehorse",
    "Saint John",
    "Red Deer",
    "Prince George",
    "Cree",
    "Niagara",
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
        words = _tokens(text)
        for i, w in enumerate(words):
            if w not in _FIRST:
                continue
            for n in range(min(_MAX_N, len(words) - i), 0, -1):
                found = _INDEX.get(tuple(words[i : i + n]))
                if found is not None:
                    tier, term = found
                    if (term, field) not in seen:
                        seen.add((term, field))
                        hits.append(LexiconHit(term, tier, field))
                    break
    return hits


#: A word edge in RE2 (DuckDB): not a Unicode letter, digit or "_", as Python's ``\w`` (RE2's ``\b`` is ASCII-only).
_EDGE = r"[^\p{L}\p{N}_]"

#: Words too common to stand for a term in the pre-scan (a term made only of them keeps them all).
_COMMON = {
    "new",
    "first",
    "island",
    "university",
    "of",
    "du",
    "de",
    "des",
    "et",
    "the",
    "and",
    "saint",
    "st",
    "s",
    "prince",
    "red",
    "bay",
    "health",
    "statistics",
    "foundation",
    "for",
    "innovation",
    "fonds",
    "recherche",
}


#: Function words of multi-word terms that the abstract pre-scan takes as present instead of looking for them: they
#: occur dozens of times in most abstracts, so finding them all costs far more than the few needless de-inversions
#: saved.
_FUNCTION_WORDS = {"of", "s", "de", "du", "et", "for", "st"}


def _scanned_words(term: tuple[str, ...]) -> list[str]:
    """The words of a lexicon term that the abstract pre-scan looks for: its words but the
    :data:`_FUNCTION_WORDS` (all of its words when it has no other)."""
    return sorted(set(term) - _FUNCTION_WORDS or set(term))


def prefilter_pattern() -> str:
    """An RE2 pattern (DuckDB) with at least one word of every lexicon term (its uncommon words): a
    text with no match holds no lexicon hit. Word boundaries are Unicode letters and digits (RE2's
    ``\\b`` is ASCII-only and would miss "île" or "écosse")."""
    words: set[str] = set()
    for term in _INDEX:
        words.update([t for t in term if t not in _COMMON] or term)
    return f"(^|{_EDGE})(" + "|".join(sorted(re.escape(t) for t in words)) + f")({_EDGE}|$)"


#: An HTML/XML character reference (``&eacute;``, ``&#233;``, ``&nbsp;``): markup_to_text decodes these,
#: SQL cannot, so the pre-scan reads a text holding one both ways (reference as a word break, and as
#: one unknown letter).
_ENTITY = r"&[#a-zA-Z0-9]+;"
_UNKNOWN = "ǂ"  # a letter (Unicode Lo) that no lexicon word holds: stands for any non-ASCII letter or reference


def _fold(word: str) -> str:
    return "".join(c if ord(c) < 128 else _UNKNOWN for c in word)


def _sql_list(items) -> str:
    return "[" + ", ".join("'" + i.replace("'", "''") + "'" for i in items) + "]::VARCHAR[]"


def _sql_lists(lists) -> str:
    return "[" + ", ".join(_sql_list(x) for x in lists) + "]::VARCHAR[][]"


def _prescan_parts() -> tuple[str, list[str], list[list[str]], list[list[str]]]:
    """(RE2 alternation of every scanned lexicon word, A/B terms of one scanned word, A/B terms of several, tier C
    terms), each term as its scanned words (:func:`_scanned_words`), folded as :func:`abstract_words_sql` folds the
    text."""
    tiers = {tier: [_scanned_words(k) for k, (t, _) in _INDEX.items() if t == tier] for tier in "ABC"}
    words = sorted({w for reqs in tiers.values() for req in reqs for w in req}, key=lambda w: (-len(w), w))
    alternation = "|".join(
        "".join(f"[{re.escape(c)}{_UNKNOWN}]" if ord(c) >= 128 else re.escape(c) for c in w) for w in words
    )
    single = [_fold(r[0]) for t in "AB" for r in tiers[t] if len(r) == 1]
    multi = [[_fold(w) for w in r] for t in "AB" for r in tiers[t] if len(r) > 1]
    tier_c = [[_fold(w) for w in r] for r in tiers["C"]]
    return alternation, single, multi, tier_c


def abstract_words_sql(raw: str) -> str:
    """A DuckDB expression over the raw text ``raw`` (a SQL expression, e.g. an abstract's
    inverted-index JSON as VARCHAR): the distinct scanned lexicon words (:func:`_scanned_words`: a function
    word such as "of" is not looked for) that start a word of the text,
    folded (every non-ASCII letter and every character reference becomes one placeholder letter),
    or NULL when the text cannot hold a lexicon hit at all (no :func:`prefilter_pattern` match and no
    character reference).

    A superset of the scanned words present as whole words: word starts follow what is not a Unicode
    letter, digit or "_" (as Python's ``\\w``), and the words are tried longest first, so a word
    present whole is always found (a longer alternative cannot match inside it); a word that merely
    starts a longer one ("canadianism") is found too, which costs a needless de-inversion, never a
    missed hit. (Matching the trailing edge as well would consume the edge that the next word needs.)
    A text with a character reference is read three ways: as is, with each reference as a word break
    (markup_to_text decodes ``&nbsp;`` to a space) and with each reference as one letter.
    """
    alternation = _prescan_parts()[0]
    low = f"lower({raw})"

    def found(text: str) -> str:
        return (
            f"list_transform(regexp_extract_all({text}, '(^|{_EDGE})({alternation})', 2), "
            f"w -> regexp_replace(w, '[^\\x00-\\x7F]', '{_UNKNOWN}', 'g'))"
        )

    spaced = f"regexp_replace({low}, '{_ENTITY}', ' ', 'g')"
    folded = f"regexp_replace({low}, '{_ENTITY}', '{_UNKNOWN}', 'g')"
    return (
        f"CASE WHEN regexp_matches({raw}, '{_ENTITY}') THEN list_distinct(flatten([{found(low)}, {found(spaced)}, {found(folded)}])) "
        f"WHEN regexp_matches({low}, '{prefilter_pattern()}') THEN list_distinct({found(low)}) END"
    )


def abstract_may_count_sql(words: str, context: str) -> str:
    """A DuckDB boolean over ``words`` (the column computed by :func:`abstract_words_sql`) and the
    title and keywords in ``context``: may the text hold a hit that counts as evidence
    (:func:`evidence_hits`)? A superset test, so that Python de-inverts only the abstracts that may
    count: a tier A/B term needs its scanned words (:func:`_scanned_words`; its function words are taken as present),
    in any order (an inverted index keeps no adjacency in its JSON), a tier C term its scanned words plus a tier A
    word (or any markup) in ``context``.
    """
    _, single, multi, tier_c = _prescan_parts()
    tier_a = "|".join(sorted(re.escape(t) for t in _TIER_A_WORDS))
    ctx_a = (
        f"(regexp_matches(lower({context}), '(^|{_EDGE})({tier_a})({_EDGE}|$)') OR regexp_matches({context}, '[<&]'))"
    )
    return (
        f"CASE WHEN {words} IS NULL THEN false WHEN list_has_any({words}, {_sql_list(single)}) "
        f"OR len(list_filter({_sql_lists(multi)}, r -> list_has_all({words}, r))) > 0 THEN true "
        f"WHEN len(list_filter({_sql_lists(tier_c)}, r -> list_has_all({words}, r))) > 0 THEN {ctx_a} ELSE false END"
    )


_TIER_A_WORDS = {t for k, (tier, _) in _INDEX.items() if tier == "A" for t in k}


def about_ca_fires(tiers: set[str]) -> bool:
    """SPEC section 2: tier A or B fires alone; tier C only with a tier-A hit (so never decisive)."""
    return "A" in tiers or "B" in tiers


def evidence_hits(hits: list[LexiconHit]) -> list[LexiconHit]:
    """The hits that count as evidence: tier C is dropped unless a tier-A hit is present."""
    has_a = any(h.tier == "A" for h in hits)
    return [h for h in hits if h.tier != "C" or has_a]
