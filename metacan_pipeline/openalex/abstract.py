"""Rebuild abstract text from OpenAlex's ``abstract_inverted_index``.

OpenAlex docs ("Work object: abstract_inverted_index") ship abstracts as ``{token: [positions]}``.
Quirks seen in ../shared/data/openalex (SOURCES.md, "Abstract quirks"): position gaps, a leading
``Abstract`` token, HTML/JATS fragments inside tokens, empty tokens, punctuation attached to tokens.
"""

from __future__ import annotations

from html.parser import HTMLParser


#: Inline tags whose boundaries are not word boundaries (``H<sub>2</sub>O`` stays "H2O"); any other
#: tag (``<br>``, ``<p>``, ``<jats:p>``) separates words.
_INLINE = {"i", "b", "em", "strong", "sub", "sup", "u", "small", "span", "a", "sc", "tt", "font",
           "jats:italic", "jats:bold", "jats:sub", "jats:sup", "jats:sc", "mml:mi", "mml:mn", "mml:mo"}


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


def deinvert(index: dict[str, list[int]] | None) -> str | None:
    """Abstract text from an inverted index, or None when there is none.

    Tokens are placed by position (gaps are allowed: the highest position + 1 may exceed the
    number of tokens); empty tokens are skipped; a leading ``Abstract`` label is dropped; HTML
    fragments are reduced to their text. Malformed entries (non-list positions) are ignored.
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
        ordered = [t for _, t in sorted((p, t) for t, ps in index.items() if isinstance(ps, list) for p in ps
                                        if isinstance(p, int) and p >= 0)]
        if not ordered:
            return None
    words = [tok for tok in ordered if tok and tok.strip()]
    if words and words[0].strip().lower().rstrip(":.") == "abstract" and len(words) > 1:
        words = words[1:]
    text = markup_to_text(" ".join(words))
    return text or None
