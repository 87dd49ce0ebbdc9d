"""What the ``medline_study_design`` asset reads, asks and writes: the frame works' PMIDs, the archived (and, in
``fetch`` mode, newly asked) efetch answers, the study-design decisions of every source, and the rows of
:mod:`.agreement` as Arrow tables of the catalog's schemas.

**Where a PMID comes from.** A frame row keeps no PMID; its ``source_file`` and ``source_locator`` point back to the
OpenAlex record it came from, whose ``ids.pmid`` is the PMID (OpenAlex docs, "Work object": ``ids``). The records
are re-read file by file, as the teachers re-read abstracts (:func:`metacan_pipeline.openalex.lookup.load_abstracts`).
A frame that carries a ``pmid`` column is read directly instead.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from ...openalex.ids import bare_pmid
from ...openalex.reader import Record, iter_file
from ...openalex.remote import is_url, readable
from ...openalex.remote import stat as remote_stat
from ...storage import MetacanStorage
from ...student.roles import direct_labels_key
from ...tables.fields import PUBLISHED_TEACHERS
from ...tables.medline import MEDLINE_AGREEMENT_SCHEMA, MEDLINE_RECORDS_SCHEMA
from ..protocol.scratch import scratch
from .agreement import OFFLINE, MedlineGate, agreement_rows
from .eutils import EutilsClient, FetchOutcome, MedlineArchive
from .nlm import MedlineRecord

#: The archive of efetch answers under the data folder.
ARCHIVE_DIR = "medline_archive"


def source_pmids(path_of: Callable[[str], Path | str], pointers: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """``{work_id: pmid}`` for ``(work_id, source_file, source_locator)`` pointers whose OpenAlex record has an
    ``ids.pmid``; each file is read once. A file gone since ingestion gives no PMID for its works."""
    wanted: dict[str, dict[str, str]] = defaultdict(dict)
    for work_id, source_file, locator in pointers:
        if source_file and locator:
            wanted[source_file][locator] = work_id
    out: dict[str, str] = {}
    for source_file, by_locator in wanted.items():
        path = path_of(source_file)
        if not (remote_stat(str(path)) is not None if is_url(str(path)) else Path(path).exists()):
            continue
        try:
            with readable(path) as local:
                for item in iter_file(local, source=source_file):
                    if isinstance(item, Record) and item.locator in by_locator:
                        pmid = bare_pmid((item.data.get("ids") or {}).get("pmid"))
                        if pmid:
                            out[by_locator[item.locator]] = pmid
        except OSError:  # unreadable now: its works have no PMID this run
            pass
    return out


def frame_pmids(storage: MetacanStorage, path_of: Callable[[str], Path | str]) -> dict[str, str]:
    """``{work_id: pmid}`` of every frame work with a PMID (module docstring); only the columns needed are read."""
    storage.require("frame")
    with scratch(storage, ["frame"]) as con:
        columns = {r[0] for r in con.execute("DESCRIBE frame").fetchall()}
        if "pmid" in columns:
            rows = con.execute("SELECT id, pmid FROM frame WHERE pmid IS NOT NULL").fetchall()
            return {w: p for w, raw in rows if (p := bare_pmid(raw))}
        pointers = con.execute("SELECT id, source_file, source_locator FROM frame").fetchall()
    return source_pmids(path_of, pointers)


def study_design_decisions(storage: MetacanStorage, teachers: Iterable[str]) -> dict[str, dict[str, str]]:
    """``{source: {work_id: study_design}}``: each teacher's direct labels (``teacher:<name>``, labelled works with a
    study design, the newest label of a work) and each published student head (``student:<teacher>``, the most
    probable class of ``predictions.study_design_<teacher>``), in that order; a source with no decision is left out."""
    teachers = list(teachers)
    out: dict[str, dict[str, str]] = {}
    with scratch(storage, ["predictions", *(direct_labels_key(t) for t in teachers)]) as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        for t in teachers:
            name = direct_labels_key(t)
            if name not in views:
                continue
            rows = con.execute(
                f"""SELECT work_id, arg_max(study_design, coalesce(created_at, TIMESTAMP '1970-01-01'))
                    FROM "{name}" WHERE status = 'labelled' AND study_design IS NOT NULL GROUP BY work_id"""
            ).fetchall()
            if rows:
                out[f"teacher:{t}"] = dict(rows)
        if "predictions" in views:
            columns = {r[0] for r in con.execute("DESCRIBE predictions").fetchall()}
            for t in PUBLISHED_TEACHERS:
                col = f"study_design_{t}"
                if col in columns:
                    rows = con.execute(f"SELECT id, {col} FROM predictions WHERE {col} IS NOT NULL").fetchall()
                    if rows:
                        out[f"student:{t}"] = dict(rows)
    return out


@dataclass(frozen=True)
class MedlineMeasurement:
    """One run of study design against MEDLINE: its tables, mode, the counts a user reads, and why nothing is
    measured when that is so."""

    records: pa.Table
    agreement: pa.Table
    mode: str
    frame_pmids: int
    answered: int
    with_record: int
    by_indexing: dict[str, int]
    fetch: FetchOutcome | None
    note: str | None
    damaged: list[str] = field(default_factory=list)


def _stamp(rows: list[dict], schema: pa.Schema, run_id: str, now: dt.datetime) -> pa.Table:
    return pa.Table.from_pylist([{**r, "run_id": run_id, "computed_at": now} for r in rows], schema=schema)


def measure_medline(
    storage: MetacanStorage,
    path_of: Callable[[str], Path | str],
    teachers: Iterable[str],
    gate: MedlineGate,
    *,
    mode: str,
    max_pmids: int,
    client: Callable[[MedlineArchive], EutilsClient] | None,
    run_id: str,
    now: dt.datetime,
) -> MedlineMeasurement:
    """Study design against MEDLINE. ``mode``: ``replay`` reads the archive only; ``fetch`` first asks ``client``
    (built on the archive) for at most ``max_pmids`` PMIDs the archive has not answered, in PMID order; ``off``
    measures nothing. The archive lives under ``<data>/medline_archive``."""
    empty = MedlineMeasurement(
        _stamp([], MEDLINE_RECORDS_SCHEMA, run_id, now),
        _stamp([], MEDLINE_AGREEMENT_SCHEMA, run_id, now),
        mode,
        0,
        0,
        0,
        {},
        None,
        "study design against MEDLINE is off (METACAN_MEDLINE=off)",
    )
    if mode == "off":
        return empty
    pmids = frame_pmids(storage, path_of)
    archive = MedlineArchive(storage.root / ARCHIVE_DIR)
    damaged: list[str] = []
    answers = archive.answers(damaged)
    outcome = None
    if mode == "fetch" and client is not None:
        missing = sorted({p for p in pmids.values() if p not in answers}, key=lambda p: (len(p), p))[:max_pmids]
        if missing:
            with client(archive) as c:
                outcome = c.fetch(missing)
            damaged = []
            answers = archive.answers(damaged)
    records: dict[str, MedlineRecord] = {}
    record_rows = []
    for work, pmid in sorted(pmids.items()):
        answered = pmid in answers
        rec = answers.get(pmid)
        if rec is not None:
            records[work] = rec
        record_rows.append(
            {
                "id": work,
                "pmid": pmid,
                "answer": "record" if rec is not None else ("no_record" if answered else "not_asked"),
                "medline_status": rec.status if rec else None,
                "indexing_method": rec.indexing_method if rec else None,
                "indexing": rec.indexing if rec else None,
                "year": rec.year if rec else None,
                "publication_types": list(rec.publication_types) if rec else None,
                "publication_type_uis": list(rec.publication_type_uis) if rec else None,
            }
        )
    note = None
    if not records:
        if mode == "replay":
            note = OFFLINE
        elif outcome is not None and outcome.failed_batches:
            note = f"no MEDLINE answers (fetch failed: {outcome.errors[0]})"
        else:
            note = "no MEDLINE answers (no frame work with a PMID NLM answered)"
    decisions = study_design_decisions(storage, teachers)
    rows = agreement_rows(records, decisions, gate, note)
    by_indexing: dict[str, int] = {}
    for rec in records.values():
        by_indexing[rec.indexing] = by_indexing.get(rec.indexing, 0) + 1
    return MedlineMeasurement(
        _stamp(record_rows, MEDLINE_RECORDS_SCHEMA, run_id, now),
        _stamp(rows, MEDLINE_AGREEMENT_SCHEMA, run_id, now),
        mode,
        len(pmids),
        sum(1 for p in pmids.values() if p in answers),
        len(records),
        by_indexing,
        outcome,
        note,
        damaged,
    )
