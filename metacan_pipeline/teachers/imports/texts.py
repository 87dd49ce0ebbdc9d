"""The student's text of imported works: table ``reference_texts`` (one row per work id, the newest read wins).

Imported labels may label works outside the frame (a pilot's sample, another group's earlier study). The student
can learn from them (a *reference set*, :mod:`metacan_pipeline.student.reference_sets`) only with the same text
fields the frame gives every work: title, venue, topic, field, keywords, language and type. They come from the
import itself:

- a MetaCan pilot folder: its work files ``chunks/chunk_*.json``, ``chunks_b/chunk_*.json`` and
  ``frame1k/chunks/chunk_*.json`` (keys ``id, title, lang, type`` and, in ``frame1k``, ``venue, topic, field``);
  an id in several files keeps its first record (duplicates there have identical text, SOURCES.md);
- a label file in our schema: a record's optional ``title`` (with ``venue``, ``topic``, ``field``, ``keywords``
  as a list or a ``;``-separated string, ``language`` or ``lang``, ``type``) beside its label fields.

Titles are reduced to text as the frame reduces them (:func:`~metacan_pipeline.openalex.abstract.markup_to_text`).
A record without a usable id or with an empty title gives no text row (its label, if any, is reported by the
label import itself; the student counts the labelled works it finds no text for).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa

from ...openalex.abstract import markup_to_text
from ...openalex.ids import short_id
from ...tables.teachers import REFERENCE_TEXTS_SCHEMA
from .label_files import read_label_file

#: record key -> ``reference_texts`` column (``lang`` is the pilot's spelling of ``language``).
TEXT_KEYS = {
    "venue": "venue_name",
    "venue_name": "venue_name",
    "topic": "topic",
    "field": "field",
    "language": "language",
    "lang": "language",
    "type": "type",
}
PILOT_WORK_FILES = ("chunks/chunk_*.json", "chunks_b/chunk_*.json", "frame1k/chunks/chunk_*.json")


def _string(value) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _keywords(value) -> list[str]:
    if isinstance(value, str):
        value = value.split(";")
    if not isinstance(value, list):
        return []
    return [k.strip() for k in value if isinstance(k, str) and k.strip()]


def text_row(record: object, file: str) -> dict | None:
    """The ``reference_texts`` row of one work record, or None without an id (``W123`` or its OpenAlex URL) or a title."""
    if not isinstance(record, dict):
        return None
    wid = short_id(record.get("id"))
    title = markup_to_text(record["title"]) if isinstance(record.get("title"), str) else ""
    if wid is None or not title:
        return None
    row = {"work_id": wid, "title_text": title, "keywords": _keywords(record.get("keywords")), "file": file}
    for key, col in TEXT_KEYS.items():
        if row.get(col) is None:
            row[col] = _string(record.get(key))
    return row


def pilot_texts(folder: Path) -> list[dict]:
    """The text rows of a MetaCan pilot folder's work files (first record of an id wins). Raises ValueError
    naming a work file that is not a JSON array."""
    rows: dict[str, dict] = {}
    for pattern in PILOT_WORK_FILES:
        for path in sorted(folder.glob(pattern)):
            try:
                records = json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ValueError(
                    f"{path}: not a JSON array of work records ({exc}); see the folder's SOURCES.md"
                ) from exc
            if not isinstance(records, list):
                raise ValueError(f"{path}: holds a JSON {type(records).__name__}, not an array of work records")
            for rec in records:
                row = text_row(rec, str(path))
                if row is not None:
                    rows.setdefault(row["work_id"], row)
    return list(rows.values())


def label_file_texts(path: Path) -> list[dict]:
    """The text rows of a label file's records that carry a ``title`` (the last record of an id wins, as the file's
    later lines are its newer ones)."""
    rows: dict[str, dict] = {}
    for rec in read_label_file(path):
        row = text_row(rec.original, str(path))
        if row is not None:
            rows[row["work_id"]] = row
    return list(rows.values())


def store_texts(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> int:
    """Insert or replace ``rows`` in the DuckDB table ``reference_texts``; returns how many were written."""
    if not rows:
        return 0
    texts = pa.Table.from_pylist(rows, schema=REFERENCE_TEXTS_SCHEMA)  # noqa: F841 (DuckDB replacement scan)
    con.execute("INSERT OR REPLACE INTO reference_texts BY NAME SELECT * FROM texts")
    return len(rows)
