"""Label files in our schema (SPEC section 4): a JSON array or JSON Lines file of label objects, read
into :class:`SourceRecord` rows for :func:`~.importing.import_records`, with the errors that name the file
and say what is expected (see :mod:`.importing` for what an import stores)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXPECTED = "give a JSON array of label objects ('[]' for none) or JSON Lines (one label object per line)"


@dataclass(frozen=True)
class SourceRecord:
    """One record of a source file: where it is (``file``, its content ``sha256``, 0-based ``index``,
    1-based ``line`` for JSON Lines), the ``original`` values as read, and ``label``, the object in our
    schema that is validated (the record itself for files in our schema; a converted object for other
    layouts, see :mod:`.pilot`). ``error`` set: the record could not be read or converted (it becomes a
    failed row with that cause, unvalidated)."""

    file: str
    sha256: str
    index: int
    original: Any
    label: Any
    error: str | None = None
    line: int | None = None


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of the file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_label_file(path: Path) -> list[SourceRecord]:
    """The records of a JSON array or JSON Lines file (detected by the first non-blank character ``[``).

    A JSON Lines line that is not JSON becomes a record with ``error`` (blank lines are skipped). Raises
    ValueError naming the file and saying what is expected when the file is empty (no bytes or
    whitespace only: a failed export; ``[]`` is the file with no labels), is not UTF-8, is a JSON array
    file that does not parse or holds something else than an array, holds one JSON object (e.g. a
    pretty-printed object or a teacher reply ``{"labels": [...]}``) rather than a label per line, or has
    no line holding a JSON object (not JSON Lines at all); FileNotFoundError when the file is missing.
    """
    return read_label_records(path)[1]


def read_label_records(path: Path) -> tuple[str, list[SourceRecord]]:
    """``(sha256, records)`` of :func:`read_label_file` (the SHA-256 of the bytes read, so that a file
    changed while it is read cannot be recorded under another content's hash)."""
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc}); {EXPECTED}") from exc
    if not text.strip():
        raise ValueError(f"{path}: the file is empty ({len(raw)} bytes, no records; a failed export?); {EXPECTED}")
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a JSON array ({exc}); {EXPECTED}") from exc
        if not isinstance(items, list):
            raise ValueError(f"{path}: holds a JSON {type(items).__name__}, not an array; {EXPECTED}")
        return sha, [SourceRecord(str(path), sha, i, item, item) for i, item in enumerate(items)]
    lines = text.splitlines()
    nonblank = sum(1 for line in lines if line.strip())
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    # One object over several lines, or on one line but shaped as a reply ({"labels": [...]}, no id).
    if isinstance(whole, dict) and (nonblank > 1 or ("id" not in whole and isinstance(whole.get("labels"), list))):
        keys = ", ".join(repr(k) for k in list(whole)[:5]) + (", ..." if len(whole) > 5 else "")
        raise ValueError(
            f"{path}: holds one JSON object (keys {keys}) over {nonblank} line(s), not a JSON array or JSON Lines; {EXPECTED}"
        )
    records: list[SourceRecord] = []
    objects = 0
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            records.append(SourceRecord(str(path), sha, len(records), line, None, f"not JSON: {exc}", lineno))
            continue
        objects += isinstance(item, dict)
        records.append(SourceRecord(str(path), sha, len(records), item, item, None, lineno))
    if not objects:
        raise ValueError(
            f"{path}: none of its {nonblank} non-blank line(s) is a JSON object, so it is not JSON Lines "
            f"(a truncated or pretty-printed JSON document?); {EXPECTED}"
        )
    return sha, records
