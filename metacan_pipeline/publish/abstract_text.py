"""Abstract text from Europe PMC and Crossref answers, with its structured sections kept.

A structured abstract is a list of ``(heading, text)`` sections; an unstructured one is one section without a heading
(``(None, text)``). The canonical text of an abstract (:func:`joined`, what a page and a coder are shown, and what the
coding study hashes) is the sections in order, separated by a blank line, each heading on its own line above its text.

Markup is read with the standard library's HTML parser (:class:`html.parser.HTMLParser`, tolerant of the unbalanced
tags, undeclared ``jats:``/``mml:`` prefixes and HTML entities these answers carry, which an XML parser refuses), never
with a regular expression:

- Europe PMC (``abstractText`` of ``resultType=core``): HTML, sections as ``<h4>Background</h4>text`` (other heading
  levels too), inline ``<i>``, ``<b>``, ``<sup>``, ``<sub>``; older records keep MEDLINE's inline labels in plain
  text (``BACKGROUND: ... METHODS: ...``), read as headings by :func:`labelled_sections`.
- Crossref (``message.abstract``): JATS XML, ``<jats:sec><jats:title>Background</jats:title><jats:p>...</jats:p>
  </jats:sec>``, often a leading ``<jats:title>Abstract</jats:title>``; inline ``<jats:italic>``, ``<jats:sup>``,
  ``<mml:...>``.

A heading that only says "Abstract" (any case, with or without a colon) is dropped; inline tags join the words they
wrap (``H<sub>2</sub>O`` stays "H2O"); any other tag separates words; entities are decoded; whitespace is collapsed.
The text is plain: a template escapes it.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from ..openalex.abstract import _INLINE

Section = tuple[str | None, str]

#: Tags whose text is a section heading.
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "title", "jats:title", "jats:label"})
#: Tags whose content is never text (a stray script in an answer is dropped, not shown).
_SKIPPED = frozenset({"script", "style", "mml:annotation", "mml:annotation-xml"})
#: A heading that names the abstract itself, not one of its sections.
_ABSTRACT_LABEL = re.compile(r"^\s*abstract\s*[:.]?\s*$", re.IGNORECASE)
#: MEDLINE's inline labels in plain text: a run of capitals (with spaces, '&', '/', ',' or '-') and a colon, at the
#: start or after the end of a sentence (``BACKGROUND: ...  METHODS AND FINDINGS: ...``).
_LABEL = re.compile(r"(?:^|(?<=[.!?])\s+)([A-Z][A-Z&/, -]{2,60}[A-Z]):\s+")


def _clean(text: str) -> str:
    return " ".join(text.split())


def _heading(text: str) -> str | None:
    """A heading as shown: collapsed, without a trailing colon; None for an empty one or one that says "Abstract"."""
    text = _clean(text).rstrip(":").strip()
    return None if not text or _ABSTRACT_LABEL.match(text) else text


class _Sections(HTMLParser):
    """Collects ``(heading, text)`` sections from HTML or JATS markup (module docstring)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[tuple[str | None, list[str]]] = []
        self.heading: list[str] | None = None  # the words of a heading being read
        self.skipping = 0
        self.current: tuple[str | None, list[str]] = (None, [])

    def _flush(self) -> None:
        heading, parts = self.current
        if heading is not None or _clean("".join(parts)):
            self.sections.append(self.current)
        self.current = (None, [])

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in _SKIPPED:
            self.skipping += 1
        elif tag in _HEADINGS and self.heading is None:
            self.heading = []
        elif tag not in _INLINE:
            (self.heading if self.heading is not None else self.current[1]).append(" ")

    def handle_startendtag(self, tag: str, attrs) -> None:
        if tag not in _INLINE and tag not in _SKIPPED:
            (self.heading if self.heading is not None else self.current[1]).append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self.skipping = max(0, self.skipping - 1)
        elif tag in _HEADINGS and self.heading is not None:
            heading = _heading("".join(self.heading))
            self.heading = None
            if heading is not None:
                self._flush()
                self.current = (heading, [])
        elif tag not in _INLINE:
            (self.heading if self.heading is not None else self.current[1]).append(" ")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            (self.heading if self.heading is not None else self.current[1]).append(data)

    def result(self) -> list[Section]:
        if self.heading is not None:  # a heading never closed: its words are text
            self.current[1].append(" " + "".join(self.heading))
            self.heading = None
        self._flush()
        out = [(h, _clean("".join(parts))) for h, parts in self.sections]
        return [(h, t) for h, t in out if t]  # a heading with no text under it says nothing


def markup_sections(markup: str | None) -> list[Section]:
    """The sections of an abstract in HTML or JATS markup (module docstring); ``[]`` when it holds no text."""
    if not markup or not markup.strip():
        return []
    parser = _Sections()
    parser.feed(markup)
    parser.close()
    sections = parser.result()
    if len(sections) == 1 and sections[0][0] is None:
        return labelled_sections(sections[0][1])
    return sections


def labelled_sections(text: str) -> list[Section]:
    """Plain text with MEDLINE's inline labels (``BACKGROUND: ... METHODS: ...``) as sections, when it starts with
    one; any other text as one section without a heading. A label must be capitals, at the text's start or after a
    sentence's end, so "HIV: a review" in mid-sentence stays text."""
    text = _clean(text)
    if not text:
        return []
    labels = list(_LABEL.finditer(text))
    if not labels or labels[0].start() != 0:
        return [(None, text)]
    out: list[Section] = []
    for i, m in enumerate(labels):
        end = labels[i + 1].start() if i + 1 < len(labels) else len(text)
        body = text[m.end() : end].strip()
        if body:
            out.append((m.group(1).strip().capitalize(), body))
    return out or [(None, text)]


def joined(sections: list[Section] | tuple[Section, ...]) -> str:
    """The canonical text of an abstract: each section's heading on its own line above its text, sections separated
    by a blank line (module docstring)."""
    return "\n\n".join(f"{h}\n{t}" if h else t for h, t in sections)
