"""Import of direct labels produced elsewhere, in our schema (SPEC section 4: "Labels may also be imported
from files produced elsewhere (same schema), validated the same way").

Input: a JSON array or JSON Lines file of objects ``id, categories, domain, study_design, genre,
about_ca_system, about_ca_topic, confidence, reason`` (SPEC section 4), each optionally with
``view_hash`` (what the labeller saw, 16+ hex), ``stratum``, ``sel_prob`` and ``design_weight`` (the
sample design of the source, SPEC section 5; ``design_weight`` defaults to ``1 / sel_prob``). An
:class:`ImportSpec` names the teacher configuration the labels belong to and the fields the source never
provides (``absent``, see :func:`~..core.validate.validate_label`).

Outcome, in the label store of :mod:`..core.store` (``source = 'import'``):

- every record becomes one ``teacher_labels`` row: ``labelled``, or ``failed`` with the cause in
  ``error`` (a record that is not JSON, has no id or an id that names no work, or breaks a SPEC section
  3/4 rule); nothing is dropped and nothing filled in. A second record of the same id in one import is
  not stored: the first wins and the rest are reported (:attr:`ImportReport.duplicates`).
- ids: the short form ``W123`` (SPEC section 2) is stored; the OpenAlex URL form
  ``https://openalex.org/W123`` is normalised to it (:func:`~metacan_pipeline.openalex.ids.short_id`).
  Anything else, including an id with leading or trailing whitespace, is a ``failed`` row with
  ``work_id`` NULL (the raw id is in the cause and in ``source_ref``): a key that does not match
  exactly is what a broken export looks like (a padded CSV cell, a value split across lines), and
  trimming it silently would hide that from whoever produced the file, while the URL form is the id
  OpenAlex itself publishes, so a file made from OpenAlex data legitimately has it.
- ``prompt_sha`` = 16 hex of SHA-256 of ``"import:" + prompt_version`` (or of the prompt text when one is
  given); ``view_hash`` = the record's ``view_hash`` or 16 hex of SHA-256 of the canonical JSON of the
  source record; ``source_ref`` = JSON ``{file, sha256, index, original, absent, undecided_categories}``.
- a later import wins: a record is skipped (:attr:`ImportReport.existing`) only when the row it would
  become equals the CURRENT (newest, :func:`current_imported_sql`) imported row of its work for the same
  teacher configuration (same view hash, record view, status, label fields, cause of failure, original
  values, ``absent`` and ``undecided_categories``); a record without a work id is skipped when a row of
  the same file content (SHA-256) and index is stored. A skipped record whose design differs from the
  stored one still updates ``imported_design``.
  Re-importing the same content therefore adds nothing, and a file changed and then reverted to an
  earlier version makes that version's labels current again.
- ``label_imports`` (file, sha256, teacher, model, prompt_version, prompt_sha, source, rows,
  imported_at, run_id) records what was imported: one row per file of an import whose content (SHA-256)
  is new for the teacher configuration, or from which the import stored rows; ``rows`` is the number of
  ``teacher_labels`` rows stored from that file by that import (so the ``rows`` of a configuration add up
  to its imported rows; a re-import that stores something is a new row with what it stored, a re-import
  that stores nothing is not recorded and reports :attr:`ImportReport.already_imported`). A file with no
  records (``[]``) is recorded with 0 rows.
- an empty file (no bytes, or whitespace only) is refused with ValueError naming it: it is what a failed
  export leaves, and an import that "succeeds" with nothing would hide that; ``[]`` says "no labels".
- ``imported_design`` (source, work_id, stratum, sel_prob, design_weight): the design information per
  work; a later import of the same source and work replaces it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ... import vocab
from ...openalex.ids import is_work_id, short_id
from ...vocab import CATEGORIES
from ..core.store import append_rows, new_key, now_utc
from ..core.validate import LABEL_FIELDS, InvalidLabel, validate_label
from ..core.views import canonical_json
from ..core.views import view_hash as hash_of_view
from .label_files import SourceRecord, read_label_records

SOURCE = "import"
DESIGN_KEYS = ("stratum", "sel_prob", "design_weight")
OPENALEX_URL_PREFIXES = ("https://openalex.org/", "http://openalex.org/")
CONTENT_FIELDS = ("view_hash", "record_view", "status", *vocab.LABEL_FIELDS)
"""Columns of a ``teacher_labels`` row that say what the label is (the rest is provenance: ids, run, time)."""


@dataclass(frozen=True)
class ImportSpec:
    """The teacher configuration imported labels belong to, and what their source leaves out.

    ``absent``: label fields the source never provides (None in the stored label; a value given for one
    is an error). ``undecided_categories``: categories the source's vocabulary cannot express (a
    screener that only decides "in scope"): a label without them says nothing about them, so the
    agreement treats their heads as unknown, not negative (:mod:`..core.agreement`). ``source``: a short
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
            raise ValueError(
                f"import {self.teacher!r}: undecided_categories {sorted(bad)} are not categories {list(CATEGORIES)}"
            )
        bad = set(self.absent) - set(LABEL_FIELDS[2:])
        if bad:
            raise ValueError(
                f"import {self.teacher!r}: absent {sorted(bad)} are not label fields that can be absent {list(LABEL_FIELDS[2:])}"
            )

    @property
    def prompt_sha(self) -> str:
        """16 hex of SHA-256 of the prompt text, or of ``"import:" + prompt_version`` without one."""
        text = self.prompt_text if self.prompt_text is not None else "import:" + self.prompt_version
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def config(self) -> tuple[str, str, str, str]:
        """``(teacher, model, prompt_version, prompt_sha)``: the label-store key of the configuration."""
        return (self.teacher, self.model, self.prompt_version, self.prompt_sha)


@dataclass
class ImportReport:
    """What one import did. ``invalid``: ``(file, index, work_id or None, cause)`` of every failed row
    written; ``duplicates``: ``(work_id, file, index)`` of records not stored because an earlier record
    of the same id won; ``existing``: records skipped because they equal the current stored row of their
    work (module docstring)."""

    teacher: str
    files: list[tuple[str, str]]
    already_imported: bool = False
    """True when every file's content was imported before for this configuration and nothing was stored
    (no label row, no design change)."""
    labelled: int = 0
    failed: int = 0
    existing: int = 0
    design_rows: int = 0
    invalid: list[tuple[str, int, str | None, str]] = field(default_factory=list)
    duplicates: list[tuple[str, str, int]] = field(default_factory=list)


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
    return hash_of_view(rec.original)


def work_id_of(value: Any) -> tuple[str | None, str | None]:
    """``(work_id, None)`` for an id naming a work, ``(None, cause)`` otherwise (module docstring, "ids").

    ``"W123"`` and ``"https://openalex.org/W123"`` name ``W123``; an id with leading or trailing
    whitespace, another entity's id (``A123``), a lower-case ``w123`` or anything else does not.
    """
    if not isinstance(value, str) or not value:
        return None, f"the record has no string id (id={value!r})"
    if value != value.strip():
        return None, f"id={value!r} has leading or trailing whitespace; an id must be exactly W + digits (e.g. 'W123')"
    work_id = (short_id(value) or value) if value.startswith(OPENALEX_URL_PREFIXES) else value
    if not is_work_id(work_id):
        return None, f"id={value!r} is not an OpenAlex work id (W + digits, e.g. 'W123' or 'https://openalex.org/W123')"
    return work_id, None


def _where(file: str, index: int, line: int | None) -> str:
    return f"{file} record {index}" + (f" (line {line})" if line is not None else "")


def _content(row: dict[str, Any], ref: dict[str, Any]) -> str:
    """What a row says, without its provenance: :data:`CONTENT_FIELDS`, the cause of a failure without
    the location prefix, and the original values and declared ``absent`` / ``undecided_categories``."""
    error = row.get("error")
    prefix = _where(ref.get("file", ""), ref.get("index", -1), ref.get("line")) + ": "
    if isinstance(error, str) and error.startswith(prefix):
        error = error[len(prefix) :]
    return canonical_json(
        {
            **{k: row.get(k) for k in CONTENT_FIELDS},
            "error": error,
            "original": ref.get("original"),
            "absent": ref.get("absent"),
            "undecided_categories": ref.get("undecided_categories"),
        }
    )


@dataclass
class StoredImports:
    """What the label store already holds for one teacher configuration and source: ``done``, the
    SHA-256 of every file imported before; ``current``, ``{work id: content}`` of each work's current
    imported row (:func:`_content`); ``placed``, ``(file sha256, index)`` of stored rows without a work
    id; ``design``, ``{work id: (stratum, sel_prob, design_weight)}`` in ``imported_design``."""

    done: set[str]
    current: dict[str, str]
    placed: set[tuple[str, int]]
    design: dict[str, tuple]


def read_stored(con: duckdb.DuckDBPyConnection, spec: ImportSpec) -> StoredImports:
    """The :class:`StoredImports` of ``spec``'s configuration (``label_imports``, ``teacher_labels``,
    ``imported_design``)."""
    cfg = list(spec.config)
    where = "teacher=? AND model=? AND prompt_version=? AND prompt_sha=?"
    done = {row[0] for row in con.execute(f"SELECT DISTINCT sha256 FROM label_imports WHERE {where}", cfg).fetchall()}
    current: dict[str, str] = {}
    placed: set[tuple[str, int]] = set()
    rows = con.execute(f"SELECT * FROM ({current_imported_sql()}) WHERE {where}", cfg).to_arrow_table().to_pylist()
    for row in rows:
        ref = json.loads(row["source_ref"]) if row["source_ref"] else {}
        if row["work_id"] is not None:
            current[row["work_id"]] = _content(row, ref)
        else:
            placed.add((ref.get("sha256"), ref.get("index")))
    design = {
        r[0]: tuple(r[1:])
        for r in con.execute(
            "SELECT work_id, stratum, sel_prob, design_weight FROM imported_design WHERE source = ?", [spec.source]
        ).fetchall()
    }
    return StoredImports(done, current, placed, design)


def import_provenance(spec: ImportSpec, run_id: str | None, created_at: Any) -> dict[str, Any]:
    """The columns every ``teacher_labels`` row of one import shares: configuration, record view, run, time."""
    teacher, model, prompt_version, prompt_sha = spec.config
    return {
        "teacher": teacher,
        "model": model,
        "prompt_version": prompt_version,
        "prompt_sha": prompt_sha,
        "record_view": spec.record_view,
        "attempts": 0,
        "run_id": run_id,
        "source": SOURCE,
        "created_at": created_at,
    }


@dataclass(frozen=True)
class ImportedRow:
    """The ``teacher_labels`` row one record becomes, with its ``work_id`` (None when the id names no
    work), the cause of failure (``error``, None for a valid label) and the record's design (None
    without one or when invalid); ``unchanged``: the row equals what the store holds (module docstring)."""

    row: dict[str, Any]
    work_id: str | None
    error: str | None
    design: tuple | None
    unchanged: bool


def record_row(
    rec: SourceRecord,
    work_id: str | None,
    id_error: str | None,
    spec: ImportSpec,
    provenance: dict[str, Any],
    stored: StoredImports,
) -> ImportedRow:
    """Validate one record (id, view hash, label rules of SPEC sections 3/4, design) and build its row:
    ``labelled`` with the label's fields, or ``failed`` with the cause prefixed by where the record is.
    ``provenance``: the columns every row of the import shares (:func:`import_provenance`)."""
    row: dict[str, Any] = {"label_id": new_key(), "work_id": work_id, **provenance}
    error, view_hash, work_design, lab = rec.error, None, None, None
    if error is None:
        try:
            if id_error is not None:
                raise InvalidLabel(id_error)
            view_hash = _view_hash(rec)
            lab = validate_label({**rec.label, "id": work_id}, work_id, absent=spec.absent)
            work_design = _design(rec.label)
        except InvalidLabel as exc:
            error = str(exc)
    if view_hash is None and error is not None:
        view_hash = hash_of_view(rec.original)
    row["view_hash"] = view_hash
    ref = {
        "file": rec.file,
        "sha256": rec.sha256,
        "index": rec.index,
        "original": rec.original,
        "absent": sorted(spec.absent),
        "undecided_categories": sorted(spec.undecided_categories),
    }
    if rec.line is not None:
        ref["line"] = rec.line
    row["source_ref"] = canonical_json(ref)
    if error is not None:
        row.update(status="failed", error=f"{_where(rec.file, rec.index, rec.line)}: {error}")
        work_design = None
    else:
        row.update(status="labelled", **{k: v for k, v in lab.as_dict().items() if k != "id"})
    if work_id is None:
        unchanged = (rec.sha256, rec.index) in stored.placed
    else:
        unchanged = stored.current.get(work_id) == _content(row, ref)
    return ImportedRow(row, work_id, error, work_design, unchanged)


def store_design(con: duckdb.DuckDBPyConnection, source: str, design: dict[str, tuple]) -> None:
    """Insert or replace the ``imported_design`` rows ``{work id: (stratum, sel_prob, design_weight)}`` of ``source``."""
    if not design:
        return
    batch = pa.table(  # noqa: F841 (read by DuckDB below, by name)
        {
            "source": [source] * len(design),
            "work_id": list(design),
            "stratum": [d[0] for d in design.values()],
            "sel_prob": [d[1] for d in design.values()],
            "design_weight": [d[2] for d in design.values()],
        }
    )
    con.execute(
        "INSERT OR REPLACE INTO imported_design SELECT source, work_id, stratum, sel_prob, design_weight FROM batch"
    )


def record_files(
    con: duckdb.DuckDBPyConnection,
    spec: ImportSpec,
    files: Sequence[tuple[str, str]],
    stored: StoredImports,
    per_file: Counter[tuple[str, str]],
    imported_at: Any,
    run_id: str | None,
) -> None:
    """One ``label_imports`` row per file whose content is new for the configuration or from which the
    import stored rows (``per_file``: rows stored per ``(file, sha256)``)."""
    for file, sha in files:
        if sha not in stored.done or per_file[(file, sha)]:
            con.execute(
                "INSERT INTO label_imports VALUES (?,?,?,?,?,?,?,?,?,?)",
                [file, sha, *spec.config, spec.source, per_file[(file, sha)], imported_at, run_id],
            )


def import_records(
    con: duckdb.DuckDBPyConnection,
    spec: ImportSpec,
    records: Sequence[SourceRecord],
    run_id: str | None,
    files: Sequence[tuple[str, str]] | None = None,
) -> ImportReport:
    """Validate ``records`` as labels of ``spec``'s teacher configuration and store them (module docstring).

    ``files``: the ``(file, sha256)`` the import covers, by default those of ``records`` (give them to
    record a file without records). Writes ``teacher_labels`` rows (labelled or failed,
    ``source='import'``), the ``label_imports`` rows and the ``imported_design`` rows. A later import
    wins; idempotent: a record equal to the current stored row of its work is skipped, so importing the
    same content again stores nothing (and is reported ``already_imported``). Invalid records are not
    raised: they are failed rows (see the report).
    """
    files = list(dict.fromkeys(files if files is not None else ((r.file, r.sha256) for r in records)))
    report = ImportReport(teacher=spec.teacher, files=files)
    stored = read_stored(con, spec)
    created = now_utc()
    provenance = import_provenance(spec, run_id, created)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    design: dict[str, tuple] = {}
    per_file: Counter[tuple[str, str]] = Counter()
    for rec in records:
        work_id, id_error = work_id_of(rec.label.get("id") if isinstance(rec.label, dict) else None)
        if work_id is not None and work_id in seen:
            report.duplicates.append((work_id, rec.file, rec.index))
            continue
        if work_id is not None:
            seen.add(work_id)
        out = record_row(rec, work_id, id_error, spec, provenance, stored)
        if out.design is not None and (not out.unchanged or stored.design.get(work_id) != out.design):
            design[work_id] = out.design  # type: ignore[index] (a label unchanged may carry a changed design)
        if out.unchanged:
            report.existing += 1
            continue
        if out.error is not None:
            report.failed += 1
            report.invalid.append((rec.file, rec.index, work_id, out.error))
        else:
            report.labelled += 1
        rows.append(out.row)
        per_file[(rec.file, rec.sha256)] += 1
    append_rows(con, [], rows)
    store_design(con, spec.source, design)
    report.design_rows = len(design)
    report.already_imported = bool(files) and not rows and not design and all(sha in stored.done for _, sha in files)
    record_files(con, spec, files, stored, per_file, created, run_id)
    return report


def import_file(con: duckdb.DuckDBPyConnection, path: Path, spec: ImportSpec, run_id: str | None) -> ImportReport:
    """Read ``path`` (:func:`~.label_files.read_label_file`; raises ValueError for an empty file or one that is not a JSON
    array or JSON Lines) and import its records (:func:`import_records`); a file without records (``[]``)
    is recorded in ``label_imports`` with 0 rows. ``label_imports.file`` is the absolute path, so the row names the
    file whatever folder the import ran from."""
    path = Path(path).resolve()
    sha, records = read_label_records(path)
    return import_records(con, spec, records, run_id, files=[(str(path), sha)])


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
