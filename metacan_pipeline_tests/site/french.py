"""The French-page scan of the site tests: what a page rendered in French still says in English.

:func:`english_left` renders pages in both languages and returns what is left in English on the French one: a
sentence of the French catalogue shown in its English (a string marked for translation but said untranslated), or
text the English page shares that holds English words and is no data value of the release (a title, a name, a
reason: those are shown as they are in both languages)."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

from babel.messages.pofile import read_po

from metacan_pipeline.i18n import catalog_path

#: Words that mark an English sentence (a French page's text may hold them only inside data values).
ENGLISH_WORDS = re.compile(
    r"\b(the|of|and|is|are|not|with|from|this|that|which|has|have|its|their|was|were|any|every|only|than|when|"
    r"works?|teachers?|yes|none|labelled|failed|predictions?|label|unknown|called)\b",
    re.IGNORECASE,
)
#: A record's fields that hold an interface sentence (said in the page's language), not a data value.
SENTENCE_FIELDS = {"note", "qualification"}


class _Text(HTMLParser):
    """The text a reader sees (and the titles and labels assistive technology reads), outside ``<code>``."""

    SKIP = {"script", "style", "code", "title"}

    def __init__(self) -> None:
        super().__init__()
        self.depth, self.parts = 0, []

    def handle_starttag(self, tag, attrs):
        self.depth += tag in self.SKIP
        self.parts += [v for k, v in attrs if k in ("title", "aria-label", "alt") and v]

    def handle_endtag(self, tag):
        self.depth -= tag in self.SKIP and self.depth > 0

    def handle_data(self, data):
        if not self.depth and data.strip():
            self.parts.append(" ".join(data.split()))


def _segments(page: str) -> list[str]:
    parser = _Text()
    parser.feed(page)
    return parser.parts


def _release_values(client) -> set[str]:
    """Every data value the release can show: the strings of every record (but its sentences) and the names of the
    facet tables."""
    values: set[str] = set()

    def walk(v, key=None):
        if isinstance(v, str) and key not in SENTENCE_FIELDS:
            values.add(" ".join(v.split()))
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, k)
        elif isinstance(v, list):
            for x in v:
                walk(x, key)

    con = client.app.state.site.release.cursor()
    try:
        for (record,) in con.execute("SELECT record_json FROM works").fetchall():
            walk(json.loads(record))
        for table in ("work_institutions", "work_funders", "work_keywords"):
            values |= {n for (n,) in con.execute(f"SELECT DISTINCT name FROM {table}").fetchall()}
    finally:
        con.close()
    return values


def _catalogue_fragments() -> set[str]:
    """The English of every catalogue sentence French says otherwise, cut at its placeholders (parts of 4 words or
    more: long enough to be a sentence of the interface, never a data value's)."""
    with catalog_path("fr").open("rb") as fh:
        catalog = read_po(fh, locale="fr")
    fragments = set()
    for m in catalog:
        if m.id and m.string and m.string != m.id:
            for msgid in [m.id] if isinstance(m.id, str) else m.id:
                for part in re.split(r"%\(\w+\)[sdr]|%%", msgid):
                    if len(part.split()) >= 4:
                        fragments.add(" ".join(part.split()))
    return fragments


def english_left(client, paths: list[str]) -> list[tuple[str, str]]:
    """``(path, text)`` of every English text left on the French twin (``/fr`` + path) of each page in ``paths``."""
    fragments, data = _catalogue_fragments(), _release_values(client)
    assert len(fragments) > 300
    left: list[tuple[str, str]] = []
    for path in paths:
        fr, en = client.get("/fr" + path), client.get(path)
        assert '<html lang="fr">' in fr.text, path
        text = " ".join(html.unescape(s) for s in _segments(fr.text))
        left += [(path, f) for f in sorted(fragments) if f in text]
        english = set(_segments(en.text))
        for segment in _segments(fr.text):
            words = html.unescape(segment)
            if segment in english and ENGLISH_WORDS.search(words):
                if not any(d and d in words for d in data if len(d) > 3 or d == words):
                    left.append((path, words))
    return left
