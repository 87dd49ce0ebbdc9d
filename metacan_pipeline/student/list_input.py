"""Reading a list of works to score (:mod:`.score_list`): every input row as an :class:`InputWork` or a :class:`Reject`.

Input (:func:`read_list`): a CSV (``.csv``, ``.tsv``, optionally ``.gz``) or JSON Lines (``.jsonl``, ``.ndjson``,
``.gz``) of list rows ``id, title`` with the optional columns ``venue`` (or ``venue_name``), ``topic``, ``field``,
``type``, ``keywords`` (``;``-separated in a CSV, a list of strings in JSON) and ``language``; or OpenAlex work records
in any shape :mod:`metacan_pipeline.openalex.reader` takes (a ``.json`` document, API pages, ``.json.gz``, a tar
archive, a snapshot folder; a JSON Lines object with OpenAlex work fields is read as a record too). A record's fields
come from :func:`metacan_pipeline.openalex.works.student_view`, the extraction the frame's rows are built by; a list
row's title goes through the same markup-to-text step, its type through the frame's type vocabulary, and an id that
is an OpenAlex work id takes its short form (``W123``), so a frame work reads the same in a list as in the frame.

Every input row becomes an :class:`InputWork` or a :class:`Reject` (no id, empty title, not JSON, a field of the
wrong type, a duplicate id, a mix of list columns and OpenAlex fields), in input order: nothing is dropped silently.
"""

from __future__ import annotations

import csv
import gzip
import io
import sys
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from ..openalex.abstract import markup_to_text
from ..openalex.ids import short_id
from ..openalex.reader import Quarantined, Record, iter_file, iter_records
from ..openalex.works import student_view, work_types
from ..tables.student import SCORE_REJECTS_SCHEMA

#: Works per batch: memory holds one batch of input rows, features and scores.
BATCH_SIZE = 50_000
#: The optional list columns and the frame column each one fills (``title`` fills ``title_text``).
LIST_COLUMNS = {
    "title": "title_text",
    "venue": "venue_name",
    "venue_name": "venue_name",
    "topic": "topic",
    "field": "field",
    "type": "type",
    "keywords": "keywords",
    "language": "language",
}
#: Top-level keys of an OpenAlex work record that a list row never has: a JSON object holding one is a record.
OPENALEX_KEYS = frozenset(
    {
        "display_name",
        "primary_location",
        "host_venue",
        "primary_topic",
        "authorships",
        "publication_year",
        "publication_date",
        "doi",
        "ids",
        "updated_date",
        "abstract_inverted_index",
        "type_crossref",
        "locations",
        "open_access",
        "cited_by_count",
        "topics",
        "concepts",
    }
)
#: List columns an OpenAlex record never has at its top level (a mix of these and :data:`OPENALEX_KEYS` is refused).
LIST_ONLY = frozenset({"venue", "venue_name", "topic", "field"})
#: Suffixes by input kind.
CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz")
LINES_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".gz")
READER_SUFFIXES = (".json", ".json.gz", ".txt", ".tar", ".tar.gz", ".tgz")
INPUT_TYPES = (
    "a CSV (.csv, .tsv, optionally .gz) or JSON Lines (.jsonl, .ndjson, .gz) of id,title rows, or OpenAlex work "
    "records (.json, .json.gz, .jsonl, .gz, a .tar/.tgz of these, or a snapshot folder)"
)


#: Longest title scored, in characters after the markup-to-text step (the longest OpenAlex titles run to about a
#: thousand; a longer one is not a title, and featurising it costs memory in proportion to its length).
MAX_TITLE_CHARS = 2_000


class ListInputError(ValueError):
    """The input as a whole cannot be read (missing file, unsupported type, a CSV without id or title column)."""


@dataclass(frozen=True)
class InputWork:
    """One usable input row: its 1-based position among the input rows, where it sat, its id and frame fields."""

    row: int
    location: str
    id: str
    fields: dict


@dataclass(frozen=True)
class Reject:
    """One input row that cannot be scored, and why."""

    row: int
    location: str
    id: str | None
    reason: str
    excerpt: str = ""

    def line(self) -> str:
        """The stderr line: ``row N (location): reason``."""
        who = f" id {self.id!r}" if self.id else ""
        return f"row {self.row} ({self.location}){who}: {self.reason}"


REJECT_SCHEMA = SCORE_REJECTS_SCHEMA


def _excerpt(value: Any, n: int = 200) -> str:
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8", errors="surrogateescape")
    return raw.decode("utf-8", errors="replace")[:n]


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _list_fields(obj: dict) -> tuple[str | None, dict | None, str | None]:
    """``(id, frame fields, reason refused)`` of a list row (a dict of its columns, values str or None; JSON may
    give keywords as a list)."""
    raw_id = obj.get("id")
    if isinstance(raw_id, int) and not isinstance(raw_id, bool):
        raw_id = str(raw_id)
    if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
        return None, None, "no id"
    if not isinstance(raw_id, str):
        return None, None, f"id is {_type_name(raw_id)}, not a string"
    sid = short_id(raw_id.strip())
    wid = sid if sid is not None and sid[0] == "W" else raw_id.strip()
    fields: dict = {}
    for col, target in LIST_COLUMNS.items():
        if col not in obj or (col == "venue_name" and obj.get("venue") is not None):
            continue
        value = obj[col]
        if value is None:
            continue
        if col == "keywords":
            if isinstance(value, str):
                value = [k.strip() for k in value.split(";") if k.strip()]
            elif not (isinstance(value, list) and all(isinstance(k, str) for k in value)):
                return wid, None, f"keywords is {_type_name(value)}, not a string or a list of strings"
            fields[target] = value
            continue
        if not isinstance(value, str):
            return wid, None, f"{col} is {_type_name(value)}, not a string"
        if target == "title_text":
            value = markup_to_text(value).strip()
        elif target == "type":
            value = work_types({"type": value})[0]
        fields[target] = value or None
    if not fields.get("title_text"):
        return wid, None, "empty title" if "title" in obj else "no title"
    return wid, fields, None


def _record_fields(data: dict) -> tuple[str | None, dict | None, str | None]:
    """``(id, frame fields, reason refused)`` of an OpenAlex record (:func:`~metacan_pipeline.openalex.works.student_view`)."""
    sid = short_id(data.get("id"))
    if sid is None:
        return None, None, "no id" if not data.get("id") else f"unrecognised OpenAlex id {str(data.get('id'))[:80]!r}"
    if sid[0] != "W":
        return sid, None, f"an OpenAlex {sid[0]} record, not a work"
    fields = student_view(data)
    if not fields["title_text"]:
        return sid, None, "empty title"
    return sid, fields, None


def classify_object(obj: Any) -> tuple[str | None, dict | None, str | None]:
    """``(id, frame fields, reason refused)`` of one JSON value: an OpenAlex work record (it has a key of
    :data:`OPENALEX_KEYS`) or a list row; a JSON value that is not an object, or an object mixing OpenAlex fields
    with list-only columns (:data:`LIST_ONLY`), is refused."""
    if not isinstance(obj, dict):
        return None, None, f"a JSON {_type_name(obj).removeprefix('a ').removeprefix('an ')}, not an object"
    openalex = OPENALEX_KEYS.intersection(obj)
    if openalex:
        mixed = LIST_ONLY.intersection(obj)
        if mixed:
            return (
                None,
                None,
                f"mixes OpenAlex work fields ({', '.join(sorted(openalex)[:3])}) with list columns "
                f"({', '.join(sorted(mixed))}): give an OpenAlex record or an id,title row",
            )
        return _record_fields(obj)
    return _list_fields(obj)


def _open_text(path: Path):
    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")


def _looks_like_rows(value: str, delimiter: str, fields: int) -> bool:
    """True when ``value`` (one parsed field) holds a line break followed by a line with the header's number of
    fields: rows swallowed by an unclosed quote, not a title that wraps."""
    if fields < 2 or "\n" not in value:
        return False
    return any(line.count(delimiter) == fields - 1 for line in value.splitlines()[1:])


#: What reading a file on may raise when it is cut or damaged (a gzip stream: EOFError, BadGzipFile, zlib.error).
UNREADABLE = (EOFError, OSError, zlib.error)


def _cut_off(line: int, value: Any, exc: BaseException) -> tuple[str, Any, str]:
    """The last item of a file that cannot be read on after ``line``: where, ``value`` and why."""
    return f"after line {line}", value, f"file unreadable after line {line} ({type(exc).__name__}: {exc})"


def _csv_items(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    """``(location, row dict or None, reason)`` per data row of a CSV/TSV (``reason`` set for a row that is not one);
    a file that cannot be read on (a cut or damaged gzip stream) ends with a row saying after which line. Raises
    ListInputError when not even its header can be read."""
    read = [0]  # the last line read
    try:
        yield from _csv_rows(path, read)
    except UNREADABLE as exc:
        if read[0] == 0:
            raise ListInputError(
                f"{path}: cannot be read ({type(exc).__name__}: {exc}); is it a whole gzip file?"
            ) from None
        yield _cut_off(read[0], None, exc)


def _csv_rows(path: Path, read: list[int]) -> Iterator[tuple[str, Any, str | None]]:
    """:func:`_csv_items` without the unreadable-file handling; ``read[0]``: the last line read so far."""
    delimiter = "\t" if ".tsv" in path.name.lower() else ","
    with _open_text(path) as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ListInputError(f"{path}: its header line is not CSV ({exc})") from None
        names = [h.strip().lower() for h in header]
        twice = sorted({n for n in names if n and names.count(n) > 1})
        if twice:
            raise ListInputError(
                f"{path}: the header names {', '.join(map(repr, twice))} more than once; keep one column of each name"
            )
        missing = [c for c in ("id", "title") if c not in names]
        if missing:
            raise ListInputError(
                f"{path}: the header {','.join(header)[:200]!r} has no {' and no '.join(missing)} column; a list "
                f"needs the columns id,title (optional: {', '.join(c for c in LIST_COLUMNS if c != 'title')})"
            )
        unknown = [h for h in names if h not in LIST_COLUMNS and h != "id"]
        if unknown:
            print(
                f"metacan score: {path.name}: columns ignored (not list columns): {', '.join(unknown)}", file=sys.stderr
            )
        keep = [(i, n) for i, n in enumerate(names) if n in LIST_COLUMNS or n == "id"]
        while True:
            read[0] = reader.line_num
            first = reader.line_num + 1
            try:
                values = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield f"line {reader.line_num}", None, f"not a CSV row: {exc}"
                continue
            where = f"line {reader.line_num}"
            if not values:
                continue  # a blank line is no row
            if not any(v.strip() for v in values):
                yield where, values, "every field is blank"
                continue
            if reader.line_num > first and any(_looks_like_rows(v, delimiter, len(names)) for v in values):
                yield (
                    f"lines {first}-{reader.line_num}",
                    None,
                    f"a quoted field runs over {reader.line_num - first + 1} lines that look like rows of their own: "
                    "an unclosed quote? Close it (or double a quote inside a field) and score the list again",
                )
                continue
            if len(values) != len(names):
                yield where, values, f"has {len(values)} fields, the header has {len(names)}"
                continue
            try:
                "".join(values).encode("utf-8")
            except UnicodeEncodeError:
                yield where, values, "not UTF-8 text"
                continue
            yield where, {n: (values[i] if values[i] != "" else None) for i, n in keep}, None


def _lines_items(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    """``(location, parsed JSON value, reason)`` per non-blank line of a JSON Lines file (plain or gzip); a line
    holding an API page gives its results."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    lineno = 0
    try:
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                if not raw.strip():
                    continue
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    yield f"line {lineno}", raw, f"not JSON: {exc}"
                    continue
                if isinstance(obj, dict) and "id" not in obj and isinstance(obj.get("results"), list):
                    for i, item in enumerate(obj["results"]):
                        yield f"line {lineno} results[{i}]", item, None
                    continue
                yield f"line {lineno}", obj, None
    except UNREADABLE as exc:
        yield _cut_off(lineno, b"", exc)


#: Entity letters of OpenAlex ids, for the count of skipped records of other entities.
ENTITY_NAMES = {
    "A": "authors",
    "I": "institutions",
    "S": "sources",
    "F": "funders",
    "P": "publishers",
    "T": "topics",
    "C": "concepts",
    "G": "awards",
}


def _reader_items(path: Path, skipped: Counter | None = None) -> Iterator[tuple[str, Any, str | None]]:
    """``(location, record dict, reason)`` of the OpenAlex reader's records and quarantine rows. A snapshot folder's
    parts of other entities (``data/authors/...``) are not read; with ``skipped``, records of other OpenAlex entities
    (an author, an institution: not works of a list) are counted there by entity instead of being rejected."""
    items: Iterable[Record | Quarantined] = (
        iter_records(path, snapshot_entities={"works"}) if path.is_dir() else iter_file(path, source=path.name)
    )
    for item in items:
        if skipped is not None and isinstance(item, Record) and item.kind != "W":
            skipped[ENTITY_NAMES.get(item.kind, f"{item.kind} records")] += 1
            continue
        if isinstance(item, Quarantined):
            reason = item.reason
            if reason == "missing id" or reason.startswith("unrecognised id"):
                reason += " (a record here needs an OpenAlex id; id,title rows go in a CSV or JSON Lines file)"
            yield f"{item.source_file} {item.locator}", item.excerpt, reason
        else:
            yield f"{item.source_file} {item.locator}", item.data, None


def input_kind(path: Path) -> str:
    """``csv``, ``lines`` or ``reader`` for an input path; raises ListInputError for a missing or unsupported one."""
    if not path.exists():
        raise ListInputError(f"input {path} does not exist: give {INPUT_TYPES}")
    if path.is_dir():
        return "reader"
    name = path.name.lower()
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    if name.endswith(READER_SUFFIXES):
        return "reader"
    if name.endswith(LINES_SUFFIXES):
        return "lines"
    raise ListInputError(f"input {path}: unsupported type ({path.suffix or 'no suffix'}); give {INPUT_TYPES}")


def iter_objects(objects: Iterable[Any], location: str = "works[{}]") -> Iterator[tuple[str, Any, str | None]]:
    """``(location, value, None)`` per JSON value of an in-memory list (the API's body), for :func:`read_items`."""
    for i, obj in enumerate(objects):
        yield location.format(i), obj, None


def read_items(items: Iterable[tuple[str, Any, str | None]], is_csv: bool = False) -> Iterator[InputWork | Reject]:
    """Every input row as an :class:`InputWork` or a :class:`Reject`, in input order, with duplicate ids refused
    (the first occurrence is kept). The set of ids seen grows with the input (about 100 bytes per work)."""
    seen: dict[str, int] = {}
    for row, (where, value, reason) in enumerate(items, start=1):
        if reason is not None:
            yield Reject(row, where, None, reason, _excerpt(value if not isinstance(value, list) else ",".join(value)))
            continue
        wid, fields, why = _list_fields(value) if is_csv else classify_object(value)
        if why is None and len(fields.get("title_text") or "") > MAX_TITLE_CHARS:
            why = f"a title of {len(fields['title_text']):,} characters: at most {MAX_TITLE_CHARS:,} are scored"
        if why is None and wid in seen:
            why = f"duplicate id (first at row {seen[wid]})"
        if why is not None:
            excerpt = value if isinstance(value, bytes | str) else orjson.dumps(value, default=str)
            yield Reject(row, where, wid, why, _excerpt(excerpt))
            continue
        seen[wid] = row
        yield InputWork(row, where, wid, fields)


def read_list(path: str | Path, skipped: Counter | None = None) -> Iterator[InputWork | Reject]:
    """Every row of the input file or folder ``path`` (module docstring) as an :class:`InputWork` or a
    :class:`Reject`. OpenAlex records of other entities than works (a folder of mixed records) are rejected, or
    counted by entity in ``skipped`` when it is given. Raises ListInputError (before yielding) for a missing or
    unsupported input, or a CSV whose header has no id or title column."""
    path = Path(path)
    kind = input_kind(path)
    if kind == "csv":
        items = _csv_items(path)
        first = next(items, None)  # reads the header now: a CSV without id/title fails here, not half-way
        return read_items(_chain(first, items) if first is not None else iter(()), is_csv=True)
    return read_items(_lines_items(path) if kind == "lines" else _reader_items(path, skipped))


def _chain(first, rest):
    yield first
    yield from rest


def batches(
    items: Iterable[InputWork | Reject], size: int = BATCH_SIZE
) -> Iterator[tuple[list[InputWork], list[Reject]]]:
    """``(works, rejects)`` of ``size`` input rows at a time (the last batch may be smaller)."""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield [x for x in chunk if isinstance(x, InputWork)], [x for x in chunk if isinstance(x, Reject)]
