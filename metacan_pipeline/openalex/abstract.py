"""Rebuild abstract text from OpenAlex's ``abstract_inverted_index``.

OpenAlex docs ("Work object: abstract_inverted_index") ship abstracts as ``{token: [positions]}``.
Quirks seen in ../shared/data/openalex (SOURCES.md, "Abstract quirks"): position gaps, a leading
``Abstract`` token, HTML/JATS fragments inside tokens, empty tokens, punctuation attached to tokens.
"""

from __future__ import annotations

from html.parser import HTMLParser


class _TextOnly(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

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

    Tokens are placed by sorting positions (gaps are allowed: the highest position + 1 may exceed the
    number of tokens); empty tokens are skipped; a leading ``Abstract`` label is dropped; HTML
    fragments are reduced to their text. Malformed entries (non-list positions) are ignored.
    """
    if not index or not isinstance(index, dict):
        return None
    placed: list[tuple[int, str]] = []
    for token, positions in index.items():
        if not isinstance(positions, list):
            continue
        for pos in positions:
            if isinstance(pos, int):
                placed.append((pos, token))
    if not placed:
        return None
    placed.sort()
    words = [tok for _, tok in placed if tok and tok.strip()]
    if words and words[0].strip().lower().rstrip(":.") == "abstract" and len(words) > 1:
        words = words[1:]
    text = markup_to_text(" ".join(words))
    return text or None
