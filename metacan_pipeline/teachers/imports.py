"""Import of direct labels produced elsewhere, in our schema (SPEC section 4: "Labels may also be imported
from files produced elsewhere (same schema), validated the same way").

Input: a JSON array or JSON Lines file of objects ``id, categories, domain, study_design, genre,
about_ca_system, about_ca_topic, confidence, reason`` (SPEC section 4), each optionally with
``view_hash`` (what the labeller saw, 16+ hex), ``stratum``, ``sel_prob`` and ``design_weight`` (the
sample design of the source, SPEC section 5; ``design_weight`` defaults to ``1 / sel_prob``). An
:class:`ImportSpec` names the teacher configuration the labels belong to and the fields the source never
provides (``absent``, see :func:`~.validate.validate_label`).

Outcome, in the label store of :mod:`.store` (``source = 'import'``):

- every record becomes one ``teacher_labels`` row: ``labelled``, or ``failed`` with the cause in
  ``error`` (a record that is not JSON, has no id, or breaks a SPEC section 3/4 rule); nothing is
  dropped and nothing filled in. A second record of the same id in one import is not stored: the first
  wins and the rest are reported (:attr:`ImportReport.duplicates`).
- ``prompt_sha`` = 16 hex of SHA-256 of ``"import:" + prompt_version`` (or of the prompt text when one is
  given); ``view_hash`` = the record's ``view_hash`` or 16 hex of SHA-256 of the canonical JSON of the
  source record; ``source_ref`` = JSON ``{file, sha256, index, original, absent, undecided_categories}``.
- ``label_imports`` (file, sha256, teacher, model, prompt_version, prompt_sha, source, rows,
  imported_at, run_id): an import whose files (by content SHA-256) are all recorded for the same teacher
  configuration is skipped whole; otherwise a record whose (work, view hash) is already stored for that
  configuration is skipped. Re-importing the same content therefore adds nothing.
- ``imported_design`` (source, work_id, stratum, sel_prob, design_weight): the design information per
  work; a later import of the same source and work replaces it.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ..vocab import CATEGORIES
from .store import append_rows, ensure_tables, now_utc
from .validate import LABEL_FIELDS, InvalidLabel, validate_label

SOURCE = "import"
DESIGN_KEYS = ("stratum", "sel_prob", "design_weight")

LABEL_IMPORTS_DDL = """
CREATE TABLE IF NOT EXISTS label_imports (
  file VARCHAR, sha256 VARCHAR, teacher VARCHAR, model VARCHAR, prompt_version VARCHAR, prompt_sha VARCHAR,
  source VARCHAR, rows BIGINT, imported_at TIMESTAMP, run_id VARCHAR)
"""
IMPORTED_DESIGN_DDL = """
CREATE TABLE IF NOT EXISTS imported_design (
  source VARCHAR, work_id VARCHAR, stratum VARCHAR, sel_prob DOUBLE, design_weight DOUBLE, PRIMARY KEY (source, work_id))
"""


@dataclass(frozen=True)
class ImportSpec:
    """The teacher configuration imported labels belong to, and what their source leaves out.

    ``absent``: label fields the source never provides (None in the stored label; a value given for one
    is an error). ``undecided_categories``: categories the source's vocabulary cannot express (a
    screener that only decides "in scope"): a label without them says nothing about them, so the
    agreement treats their heads as unknown, not negative (:mod:`.agreement`). ``source``: a short
    description of where the labels come from; it also keys ``imported_design``.
    """

    teacher: str
    model: str
    prompt_version: str
    record_view: str
    source: str
    absent: frozenset[str] = frozenset()
    undecided_categories: frozenset[str] = frozenset()
    prompt_text: str | None = None

    def __post_init__(self) -> None:
        bad = set(self.undecided_categories) - set(CATEGORIES)
        if bad:
            raise ValueError(f"import {self.teacher!r}: undecided_categories {sorted(bad)} are not categories {list(CATEGORIES)}")
        bad = set(self.absent) - set(LABEL_FIELDS[2:])
        if bad:
            raise ValueError(f"import {self.teacher!r}: absent {sorted(bad)} are not label fields that can be absent {list(LABEL_FIELDS[2:])}")

    @property
    def prompt_sha(self) -> str:
        """16 hex of SHA-256 of the prompt text, or of ``"import:" + prompt_version`` without one."""
        text = self.prompt_text if self.prompt_text is not None else "import:" + self.prompt_version
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def config(self) -> tuple[str, str, str, str]:
        """``(teacher, model, prompt_version, prompt_sha)``: the label-store key of the configuration."""
        return (self.teacher, self.model, self.prompt_version, self.prompt_sha)


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


@dataclass
class ImportReport:
    """What one import did. ``invalid``: ``(file, index, work_id or None, cause)`` of every failed row
    written; ``duplicates``: ``(work_id, file, index)`` of records not stored because an earlier record
    of the same id won; ``existing``: records skipped because their (work, view hash) was stored before."""

    teacher: str
    files: list[tuple[str, str]]
    already_imported: bool = False
    labelled: int = 0
    failed: int = 0
    existing: int = 0
    design_rows: int = 0
    invalid: list[tuple[str, int, str | None, str]] = field(default_factory=list)
    duplicates: list[tuple[str, str, int]] = field(default_factory=list)


def canonical_json(value: Any) -> str:
    """Key-sorted, compact, UTF-8 JSON: the text hashed for a record's ``view_hash``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of the file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_label_file(path: Path) -> list[SourceRecord]:
    """The records of a JSON array or JSON Lines file (detected by the first non-blank character ``[``).

    A JSON Lines line that is not JSON becomes a record with ``error`` (blank lines are skipped). Raises
    ValueError naming the file when a JSON array file does not parse or holds something else than an
    array, and FileNotFoundError when the file is missing.
    """
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    text = raw.decode("utf-8-sig")
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a JSON array ({exc}); give a JSON array or JSON Lines file") from exc
        return [SourceRecord(str(path), sha, i, item, item) for i, item in enumerate(items)]
    records: list[SourceRecord] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            records.append(SourceRecord(str(path), sha, len(records), line, None, f"not JSON: {exc}", lineno))
            continue
        records.append(SourceRecord(str(path), sha, len(records), item, item, None, lineno))
    return records


def ensure_import_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create the label store tables (:func:`.store.ensure_tables`), ``label_imports`` and ``imported_design``."""
    ensure_tables(con)
    con.execute(LABEL_IMPORTS_DDL)
    con.execute(IMPORTED_DESIGN_DDL)


def _design(obj: dict) -> tuple[str | None, float | None, float | None] | None:
    """``(stratum, sel_prob, design_weight)`` of a record, None without any; raises InvalidLabel."""
    if not any(obj.get(k) is not None for k in DESIGN_KEYS):
        return None
    stratum, sel_prob, weight = (obj.get(k) for k in DESIGN_KEYS)
    if stratum is not None and not isinstance(stratum, str):
        raise InvalidLabel(f"stratum={stratum!r} is not a string")
    for key, v in (("sel_prob", sel_prob), ("design_weight", weight)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
            raise InvalidLabel(f"{key}={v!r} is not a positive number")
    if sel_prob is not None and sel_prob > 1:
        raise InvalidLabel(f"sel_prob={sel_prob!r} is above 1")
    if weight is None and sel_prob is not None:
        weight = 1.0 / sel_prob  # SPEC section 5: design_weight = 1 / pi
    return stratum, None if sel_prob is None else float(sel_prob), None if weight is None else float(weight)


def _view_hash(rec: SourceRecord) -> str:
    given = rec.label.get("view_hash") if isinstance(rec.label, dict) else None
    if given is not None:
        if not isinstance(given, str) or not given.strip():
            raise InvalidLabel(f"view_hash={given!r} is not a non-empty string")
        return given
    return hashlib.sha256(canonical_json(rec.original).encode()).hexdigest()[:16]


def import_records(con: duckdb.DuckDBPyConnection, spec: ImportSpec, records: Sequence[SourceRecord], run_id: str | None) -> ImportReport:
    """Validate ``records`` as labels of ``spec``'s teacher configuration and store them (module docstring).

    Writes ``teacher_labels`` rows (labelled or failed, ``source='import'``), one ``label_imports`` row per
    file of ``records`` and the ``imported_design`` rows. Idempotent: nothing is written when every file
    (by SHA-256) is already recorded for this configuration, and a record whose (work, view hash) is
    stored for it is skipped. Invalid records are not raised: they are failed rows (see the report).
    """
    ensure_import_tables(con)
    teacher, model, prompt_version, prompt_sha = spec.config
    files = list(dict.fromkeys((r.file, r.sha256) for r in records))
    report = ImportReport(teacher=teacher, files=files)
    done = {row[0] for row in con.execute(
        "SELECT DISTINCT sha256 FROM label_imports WHERE teacher=? AND model=? AND prompt_version=? AND prompt_sha=?",
        [teacher, model, prompt_version, prompt_sha]).fetchall()}
    if files and all(sha in done for _, sha in files):
        report.already_imported = True
        return report
    stored = set(con.execute(
        "SELECT work_id, view_hash FROM teacher_labels WHERE teacher=? AND model=? AND prompt_version=? AND prompt_sha=? AND source=?",
        [teacher, model, prompt_version, prompt_sha, SOURCE]).fetchall())
    created = now_utc()
    seen: dict[str, SourceRecord] = {}
    rows: list[dict[str, Any]] = []
    design: dict[str, tuple] = {}
    per_file: Counter[str] = Counter()
    for rec in records:
        work_id = rec.label.get("id") if isinstance(rec.label, dict) else None
        work_id = work_id if isinstance(work_id, str) and work_id else None
        if work_id is not None and work_id in seen:
            report.duplicates.append((work_id, rec.file, rec.index))
            continue
        if work_id is not None:
            seen[work_id] = rec
        row: dict[str, Any] = {
            "label_id": uuid.uuid4().hex, "work_id": work_id, "teacher": teacher, "model": model, "prompt_version": prompt_version,
            "prompt_sha": prompt_sha, "record_view": spec.record_view, "attempts": 0, "run_id": run_id, "source": SOURCE,
            "created_at": created,
        }
        error = rec.error
        view_hash = None
        if error is None:
            try:
                if work_id is None:
                    raise InvalidLabel(f"the record has no string id (id={rec.label.get('id') if isinstance(rec.label, dict) else None!r})")
                view_hash = _view_hash(rec)
                lab = validate_label(rec.label, work_id, absent=spec.absent)
                work_design = _design(rec.label)
            except InvalidLabel as exc:
                error = str(exc)
        if view_hash is None and error is not None:
            view_hash = hashlib.sha256(canonical_json(rec.original).encode()).hexdigest()[:16]
        if work_id is not None and (work_id, view_hash) in stored:
            report.existing += 1
            continue
        row["view_hash"] = view_hash
        ref = {"file": rec.file, "sha256": rec.sha256, "index": rec.index, "original": rec.original,
               "absent": sorted(spec.absent), "undecided_categories": sorted(spec.undecided_categories)}
        if rec.line is not None:
            ref["line"] = rec.line
        row["source_ref"] = canonical_json(ref)
        if error is not None:
            where = f"{rec.file} record {rec.index}" + (f" (line {rec.line})" if rec.line is not None else "")
            row.update(status="failed", error=f"{where}: {error}")
            report.failed += 1
            report.invalid.append((rec.file, rec.index, work_id, error))
        else:
            row.update(status="labelled", **{k: v for k, v in lab.as_dict().items() if k != "id"})
            report.labelled += 1
            if work_design is not None:
                design[work_id] = work_design  # type: ignore[index]
        rows.append(row)
        per_file[rec.sha256] += 1
    append_rows(con, [], rows)
    if design:
        batch = pa.table({  # noqa: F841 (read by DuckDB below)
            "source": [spec.source] * len(design), "work_id": list(design),
            "stratum": [d[0] for d in design.values()], "sel_prob": [d[1] for d in design.values()],
            "design_weight": [d[2] for d in design.values()]})
        con.execute("INSERT OR REPLACE INTO imported_design SELECT source, work_id, stratum, sel_prob, design_weight FROM batch")
    report.design_rows = len(design)
    for file, sha in files:
        con.execute("INSERT INTO label_imports VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [file, sha, teacher, model, prompt_version, prompt_sha, spec.source, per_file[sha], created, run_id])
    return report


def import_file(con: duckdb.DuckDBPyConnection, path: Path, spec: ImportSpec, run_id: str | None) -> ImportReport:
    """Read ``path`` (:func:`read_label_file`) and import its records (:func:`import_records`)."""
    return import_records(con, spec, read_label_file(path), run_id)


def current_imported_sql() -> str:
    """SQL: the newest imported row per (teacher, model, prompt version, prompt SHA, work); failed rows
    without a work id are all kept. Columns of ``teacher_labels``; no parameters."""
    return """
      SELECT * EXCLUDE (rn) FROM (
        SELECT *, row_number() OVER (
          PARTITION BY teacher, model, prompt_version, prompt_sha, coalesce(work_id, label_id)
          ORDER BY created_at DESC, label_id) rn
        FROM teacher_labels WHERE source = 'import'
      ) WHERE rn = 1
    """
