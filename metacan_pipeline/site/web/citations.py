"""A cohort as references for a reference manager: RIS (Zotero, EndNote, Mendeley) written by ``rispy`` and BibTeX
written by ``bibtexparser`` (LaTeX special characters escaped by its ``LatexEncodingMiddleware`` with
:data:`LATEX_ENCODER`, which also keeps the characters LaTeX would turn into typography: ``--`` stays two hyphens,
a straight double quote stays one).

One reference per work of the capped cohort, in the export's order, from the columns of the CSV export: the title,
year, venue (as the journal of an article), DOI, the OpenAlex work URL, language and keywords, the OpenAlex id as the
reference's id and BibTeX key, and a note saying where the reference came from (release, query hash) and the work's
classification status verbatim (``validation_status``, candidate and consensus categories), so a reference read out
of context still says how (un)validated its classification is. The release keeps no full author list (only the
Canadian authors of a work), so references carry no authors: a reference manager completes them from the DOI
(Zotero: "Retrieve Metadata"; EndNote: "Find Reference Updates").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import bibtexparser
import pyarrow as pa
import rispy
from bibtexparser.middlewares import LatexEncodingMiddleware
from bibtexparser.model import Entry, Field
from pylatexenc.latexencode import RULE_REGEX, UnicodeToLatexConversionRule, UnicodeToLatexEncoder

from ..query.cohort_query import CohortQuery

#: OpenAlex work type -> RIS reference type (RIS specification type codes); anything else is GEN.
RIS_TYPES = {
    "article": "JOUR",
    "review": "JOUR",
    "letter": "JOUR",
    "editorial": "JOUR",
    "book": "BOOK",
    "book-chapter": "CHAP",
    "dissertation": "THES",
    "dataset": "DATA",
    "preprint": "UNPB",
    "report": "RPRT",
}
#: OpenAlex work type -> BibTeX entry type; anything else is misc.
BIBTEX_TYPES = {
    "article": "article",
    "review": "article",
    "letter": "article",
    "editorial": "article",
    "book": "book",
    "book-chapter": "incollection",
    "dissertation": "phdthesis",
    "report": "techreport",
}


#: pylatexenc's default rules, after these: LaTeX reads ``--`` as a dash, ``"``, `````` and ``''`` as curly quotes and
#: ``<``/``>`` as other glyphs, so each is braced to stay the character the title has.
LATEX_ENCODER = UnicodeToLatexEncoder(
    conversion_rules=[
        UnicodeToLatexConversionRule(
            RULE_REGEX,
            [
                (re.compile(r"-(?=-)"), r"-{}"),
                (re.compile(r"'(?=')"), r"'{}"),
                (re.compile(r'(["`<>])'), r"{\1}"),
            ],
        ),
        "defaults",
    ],
    unknown_char_policy="keep",
)


class _RisWriter(rispy.RisWriter):
    """rispy's RIS writer without its ``1.``, ``2.`` reference counters: each reference starts at its ``TY`` line."""

    def set_header(self, count: int) -> str:
        return ""


def _note(row: dict) -> str:
    def cats(value) -> str:
        return ", ".join(value) if value else "none"

    return (
        f"metacan release {row['release_id']}, query {row['query_hash']}: release layer "
        f"{row.get('release_layer') or 'none'}; validation_status {row['validation_status']}; candidate categories {cats(row['candidate_categories'])}; consensus categories "
        f"{cats(row['consensus_categories'])} (classifier {row['model_version'] or 'none'})"
    )


def _url(row: dict) -> str:
    return f"https://openalex.org/{row['id']}"


def _keywords(row: dict) -> list[str]:
    return [k for k in (row["keywords"] or "").split("; ") if k]


def ris_reference(row: dict) -> dict:
    """One RIS reference (rispy's field names) of an export row."""
    kind = RIS_TYPES.get(row["type"] or "", "GEN")
    ref = {"type_of_reference": kind, "id": row["id"], "title": row["title"] or "", "urls": [_url(row)]}
    if row["year"] is not None:
        ref["year"] = str(row["year"])
    if row["venue"]:
        ref["journal_name" if kind == "JOUR" else "secondary_title"] = row["venue"]
    if row["doi"]:
        ref["doi"] = row["doi"]
    if row["language"]:
        ref["language"] = row["language"]
    if keywords := _keywords(row):
        ref["keywords"] = keywords
    ref["name_of_database"] = "OpenAlex"
    ref["notes"] = [_note(row)]
    return ref


def bibtex_entry(row: dict) -> Entry:
    """One BibTeX entry of an export row, keyed by its OpenAlex id."""
    kind = BIBTEX_TYPES.get(row["type"] or "", "misc")
    fields = [Field("title", row["title"] or "")]
    if row["year"] is not None:
        fields.append(Field("year", str(row["year"])))
    if row["venue"]:
        fields.append(
            Field({"article": "journal", "incollection": "booktitle"}.get(kind, "howpublished"), row["venue"])
        )
    if row["doi"]:
        fields.append(Field("doi", row["doi"]))
    fields.append(Field("url", _url(row)))
    if row["language"]:
        fields.append(Field("language", row["language"]))
    if keywords := _keywords(row):
        fields.append(Field("keywords", ", ".join(keywords)))
    fields.append(Field("note", _note(row)))
    return Entry(kind, row["id"], fields)


def _rows(query: CohortQuery, cap: int) -> Iterator[list[dict]]:
    for batch in query.export_reader(cap):
        yield pa.Table.from_batches([batch]).to_pylist()


def ris_text(rows: Iterable[dict]) -> str:
    return rispy.dumps([ris_reference(r) for r in rows], implementation=_RisWriter)


def bibtex_text(rows: Iterable[dict]) -> str:
    library = bibtexparser.Library([bibtex_entry(r) for r in rows])
    return bibtexparser.write_string(library, prepend_middleware=[LatexEncodingMiddleware(encoder=LATEX_ENCODER)])


def ris_chunks(query: CohortQuery, meta: dict) -> Iterator[bytes]:
    """The RIS body, one chunk per batch of the export's rows. Closes ``query`` at the end."""
    try:
        for rows in _rows(query, meta["row_cap"]):
            if rows:
                yield ris_text(rows).encode()
    finally:
        query.close()


def bibtex_chunks(query: CohortQuery, meta: dict) -> Iterator[bytes]:
    """The BibTeX body, one chunk per batch of the export's rows, entries separated by a blank line. Closes
    ``query`` at the end."""
    try:
        for rows in _rows(query, meta["row_cap"]):
            if rows:
                yield (bibtex_text(rows).strip("\n") + "\n\n").encode()
    finally:
        query.close()
