"""What the ``filter_recall`` and ``venue_known_item_recall`` assets read and write: the references and systems from
the warehouse (the teachers' qualification standing from ``teacher_qualification``), the counts of :mod:`.recall`,
and the rows as Arrow tables of the catalog's schemas."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa

from ...storage import MetacanStorage
from ...student.roles import direct_labels_key
from ...tables.audit import FILTER_RECALL_SCHEMA, VENUE_RECALL_SCHEMA
from ...teachers.core.registry import load_registry
from ...teachers.qualification import load_qualification, qualification_standing
from ..protocol.scratch import scratch
from .filters import recall_filters
from .recall import (
    HUMAN_REFERENCE,
    ReferenceSource,
    filter_counts,
    filter_recall_rows,
    known_item_rows,
    prediction_systems,
    system_decisions,
    teacher_reference,
    teacher_system,
    venue_reference,
)
from .venues import VenueList

#: Every registry teacher, in registry order: each one's direct labels are a reference (when qualified) and a system.
TEACHERS: tuple[str, ...] = tuple(load_registry())


def teacher_standings(storage: MetacanStorage) -> dict[str, dict]:
    """``{teacher: its qualification standing}`` (``qualified``, ``status``, ``note``, ...) of every registry
    teacher's current configuration (:func:`metacan_pipeline.teachers.qualification.qualification_standing`)."""
    registry, cfg = load_registry(), load_qualification()
    return {name: qualification_standing(storage, registry[name], cfg) for name in TEACHERS}


def _stamped(rows: list[dict], schema: pa.Schema, run_id: str, now: dt.datetime, **extra) -> pa.Table:
    return pa.Table.from_pylist([{**extra, **r, "run_id": run_id, "computed_at": now} for r in rows], schema=schema)


@dataclass(frozen=True)
class FilterRecall:
    """One measurement of filter recall: the table, the references used, and each teacher's standing."""

    table: pa.Table
    sources: list[str]
    standings: dict[str, dict]


def measure_filter_recall(storage: MetacanStorage, topics: list[str], run_id: str, now: dt.datetime) -> FilterRecall:
    """Filter recall (:mod:`.recall`) of every filter of :func:`.filters.recall_filters` (the topic filter over
    ``topics``) against each qualified teacher's direct labels and the final human codes (when there are any)."""
    storage.require("frame")
    filters = recall_filters(topics)
    standings = teacher_standings(storage)
    names = ["frame", "human_codes", *(direct_labels_key(t) for t in TEACHERS)]
    with scratch(storage, names) as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        sources: list[ReferenceSource] = [
            teacher_reference(t) for t in TEACHERS if standings[t]["qualified"] and direct_labels_key(t) in views
        ]
        if "human_codes" in views and con.execute(f"SELECT count(*) FROM ({HUMAN_REFERENCE.relation})").fetchone()[0]:
            sources.append(HUMAN_REFERENCE)
        counts = filter_counts(con, sources, filters)
    rows = filter_recall_rows(counts, [s.name for s in sources], filters)
    return FilterRecall(_stamped(rows, FILTER_RECALL_SCHEMA, run_id, now), [s.name for s in sources], standings)


@dataclass(frozen=True)
class KnownItemRecall:
    """One measurement of known-item recall: the table, the venue list and the size of the reference set."""

    table: pa.Table
    venues: VenueList
    reference_works: int


def measure_known_item_recall(
    storage: MetacanStorage, venues: VenueList, run_id: str, now: dt.datetime
) -> KnownItemRecall:
    """Known-item recall (:mod:`.recall`) on the frame's works in the pinned venues of ``venues``: candidate,
    consensus, each student head's top decile (from ``predictions``, when materialized) and every registry teacher's
    direct labels (each row noting whether the teacher is qualified)."""
    storage.require("frame")
    standings = teacher_standings(storage)
    with scratch(storage, ["frame", "predictions", *(direct_labels_key(t) for t in TEACHERS)]) as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        reference = venue_reference(con, venues)
        systems = prediction_systems(con)
        ids = reference["id"].tolist()
        decisions = {s.name: system_decisions(con, s, ids) for s in systems}
        for t in TEACHERS:  # every registry teacher has rows; one with no labels yet decided on nothing
            system = teacher_system(t, None if standings[t]["qualified"] else standings[t]["note"])
            systems.append(system)
            decisions[system.name] = system_decisions(con, system, ids) if direct_labels_key(t) in views else {}
    rows = known_item_rows(reference, decisions, {s.name: s.note for s in systems})
    table = _stamped(
        rows, VENUE_RECALL_SCHEMA, run_id, now, venue_list_version=venues.version, venue_list_sha256=venues.sha256
    )
    return KnownItemRecall(table, venues, len(reference))
