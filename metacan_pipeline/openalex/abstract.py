"""Rebuild abstract text from OpenAlex's ``abstract_inverted_index``.

OpenAlex docs ("Work object: abstract_inverted_index") ship abstracts as ``{token: [positions]}``.
Quirks seen in ../shared/data/openalex (SOURCES.md, "Abstract quirks"): position gaps, a leading
``Abstract`` token, HTML/JATS fragments inside tokens, empty tokens, punctuation attached to tokens.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

#: Inline tags whose boundaries are not word boundaries (``H<sub>2</sub>O`` stays "H2O"); any other
#: tag (``<br>``, ``<p>``, ``<jats:p>``) separates words.
_INLINE = {
    "i",
    "b",
    "em",
    "strong",
    "sub",
    "sup",
    "u",
    "small",
    "span",
    "a",
    "sc",
    "tt",
    "font",
    "jats:italic",
    "jats:bold",
    "jats:sub",
    "jats:sup",
    "jats:sc",
    "mml:mi",
    "mml:mn",
    "mml:mo",
}


class _TextOnly(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag not in _INLINE:
            self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag not in _INLINE:
            self.parts.append(" ")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def markup_to_text(value: str | None) -> str:
    """Text content of a string that may carry inline HTML/JATS (``Using <b>lme4</b>``).

    Tags are dropped, entities decoded, whitespace collapsed; the result is plain text that a
    template then escapes. Uses the standard library's HTML parser, not a regex.
    """
    if not value:
        return ""
    if "<" not in value and "&" not in value:
        return " ".join(value.split())
    parser = _TextOnly()
    parser.feed(value)
    parser.close()
    return " ".join("".join(parser.parts).split())


#: A leading "Abstract" label in the de-inverted plain text: ``Abstract``, ``ABSTRACT``, ``Abstract:``,
#: ``Abstract.``, ``Abstract —``, once or repeated, and only when words follow it. Read on the text after
#: markup removal, so a label wrapped in a heading (``<h2>Abstract</h2>``, ``<title>Abstract</title>``,
#: both real: W4390096338, W4394648045) is dropped as well.
_LABEL = re.compile(r"^(?:abstract(?:\s*[:.\u2014\u2013-])?\s+)+(?=\S)", re.IGNORECASE)


def deinvert(index: dict[str, list[int]] | None) -> str | None:
    """Abstract text from an inverted index, or None when there is none.

    Tokens are placed by position (gaps are allowed: the highest position + 1 may exceed the
    number of tokens); empty tokens are skipped; a leading ``Abstract`` label is dropped (also
    ``ABSTRACT``, ``Abstract:`` and a label inside a heading tag); HTML fragments are reduced to their
    text and character references decoded. Malformed entries are ignored: positions that are not a
    list, and positions that are negative, not integers, or so far beyond the token count that they
    would need a huge buffer (the valid ones are then sorted instead). An index that is not a non-empty
    dict gives None. Punctuation stays attached to its token (``R.``, ``(REML)``).
    """
    if not index or not isinstance(index, dict):
        return None
    try:  # the well-formed case, at C speed
        count = sum(map(len, index.values()))
        top = max(map(max, filter(None, index.values())), default=-1)
        if top < 0 or top >= 4 * count + 64 or min(map(min, filter(None, index.values()))) < 0:
            raise ValueError("sparse positions")
        slots: list[str | None] = [None] * (top + 1)
        for token, positions in index.items():
            for pos in positions:
                slots[pos] = token
        ordered = slots
    except (TypeError, ValueError, IndexError):  # malformed, negative or hostile positions: sort the valid ones
        ordered = [
            t
            for _, t in sorted(
                (p, t) for t, ps in index.items() if isinstance(ps, list) for p in ps if isinstance(p, int) and p >= 0
            )
        ]
        if not ordered:
            return None
    words = [tok for tok in ordered if isinstance(tok, str) and tok.strip()]
    text = _LABEL.sub("", markup_to_text(" ".join(words)), count=1)
    return text or None


#: "Abstract" glued to the first word by a scraper that dropped the tags between them
#: (``AbstractConservation``, ``AbstractA survey``, ``AbstractAbstractThis``: W4250667698, W4233487268,
#: W2074704992).
_GLUED_LABEL = re.compile(r"^(?:Abstract)+(?=[A-Z])")
#: A character reference left after one decoding: the source escaped it twice (``&amp;gt;1``, W3131055609).
_LEFT_REFERENCE = re.compile(r"&(?:amp|lt|gt|quot|apos|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")


def tidy_abstract(text: str | None) -> str | None:
    """Display clean-up of a :func:`deinvert` text: drops an ``Abstract`` label glued to the first word
    and decodes character references that the source escaped twice.

    For pages only, not in :func:`deinvert`: the frame's evidence search reads :func:`deinvert`'s text,
    and its SQL pre-scan (``openalex.lexicon.abstract_words_sql``) must find every word that text holds;
    a word freed from a glued label or from a double escape would be invisible to it.
    """
    if not text:
        return text
    text = _GLUED_LABEL.sub("", text, count=1)
    if "&" in text:
        text = _LEFT_REFERENCE.sub(lambda m: html.unescape(m.group(0)), text)
    return text or None
