"""Load the current protocol's audit sample into the coding store (SPEC section 10).

One code path for the asset ``coding_tasks`` (:mod:`metacan_pipeline.audit.assets`) and ``metacan coding load-tasks``:
:func:`load_coding_tasks` reads the current protocol (``audit_protocol_runs``), the works its ``audit_sample`` drew
(``in_sample``) and their evidence columns from the ``frame`` (title, year, language, type, venue, Canadian
institutions, funders, keywords, DOI: :data:`EVIDENCE_COLUMNS`), and hands them to
:meth:`.tasks.TasksMixin.load_tasks`, whose allow-list keeps evidence only. No machine output is read at all: the
query names no label, score, prediction, stratum or weight column. The abstract is not stored (SPEC section 2): the
coding page fetches it live.

Idempotent: a re-run adds only works not loaded yet (an unchanged work is counted ``unchanged``, a work whose evidence
changed gets a new evidence version and keeps its answers on the old one). A sampled work the frame no longer holds is
counted ``missing`` and named in the log; a task already loaded for it stays, with its answers. Each load appends one
``coding_loads`` row, whose newest names the protocol the coding pages serve.

Each load keeps the protocol's content hash and evaluated heads (:meth:`.assignments.AssignmentsMixin.record_study`)
and assigns the works without a coder pair to pairs of the coders active then (:mod:`.assignments`; nothing is
assigned while fewer than two coders without the adjudicator role exist: the works are then handed out first come,
first served until a load or ``metacan coding assign`` finds two).

Queue order (``position``): the first 60 bits of SHA-256(``<protocol id>:<work id>``) as an integer, so a queue
interleaves the strata and a partly coded sample is a random subsample of each stratum; it depends on the protocol
and the work only, so a re-run (even one that adds works) never moves a task. Two coders code each work (:data:`.rules.CODERS_PER_WORK`).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from ...storage import MetacanStorage
from ..protocol.locked import current_protocol
from ..protocol.scratch import scratch
from .rules import CODERS_PER_WORK
from .store import CodingStore

log = logging.getLogger(__name__)

#: The frame columns a task's evidence is read from (the allow-list of :data:`.evidence.EVIDENCE_FIELDS` keeps what it
#: shows). Nothing else of the frame is read.
EVIDENCE_COLUMNS: tuple[str, ...] = (
    "id",
    "title_text",
    "title",
    "publication_year",
    "language",
    "type",
    "venue_name",
    "ca_institutions",
    "funder_names",
    "keywords",
    "doi",
)


def queue_position(protocol_id: str, work_id: str) -> int:
    """A work's place in a protocol's queue (module docstring): 0 <= position < 2**60."""
    return int(hashlib.sha256(f"{protocol_id}:{work_id}".encode()).hexdigest()[:15], 16)


def sampled_evidence(storage: MetacanStorage, protocol_id: str) -> tuple[list[dict[str, Any]], list[str], int]:
    """``(rows, missing ids, sampled works)``: one evidence row per sampled work of ``protocol_id`` the frame holds,
    with its queue ``position``, in queue order. Raises ValueError when ``audit_sample`` or ``frame`` is absent or the
    protocol drew no sample."""
    for name in ("audit_sample", "frame"):
        if not storage.has_table(name):
            raise ValueError(f"no {name} table in {storage.warehouse}: materialize audit_sample before coding_tasks")
    cols = ", ".join(f"f.{c}" for c in EVIDENCE_COLUMNS if c != "id")
    with scratch(storage, ["audit_sample", "frame"]) as con:
        sampled = [
            r[0]
            for r in con.execute(
                "SELECT id FROM audit_sample WHERE protocol_id = ? AND in_sample ORDER BY id", [protocol_id]
            ).fetchall()
        ]
        if not sampled:
            raise ValueError(
                f"protocol {protocol_id} has no audit sample drawn (audit_sample holds no row of it in_sample): "
                "materialize audit_sample"
            )
        cur = con.execute(
            f"SELECT s.id, {cols} FROM audit_sample s JOIN frame f ON f.id = s.id "
            "WHERE s.protocol_id = ? AND s.in_sample",
            [protocol_id],
        )
        names = [d[0] for d in cur.description]
        found = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    for row in found:
        row["position"] = queue_position(protocol_id, row["id"])
    found.sort(key=lambda r: (r["position"], r["id"]))
    have = {r["id"] for r in found}
    return found, [w for w in sampled if w not in have], len(sampled)


def load_coding_tasks(storage: MetacanStorage, store: CodingStore, source: str) -> dict[str, Any]:
    """Load the current protocol's sampled works into ``store`` (module docstring); returns ``protocol_id``,
    ``instructions_version``, ``sample_works``, ``missing`` (ids), the counts of :meth:`.tasks.TasksMixin.load_tasks`
    and ``pairs`` (what :meth:`.assignments.AssignmentsMixin.assign_works` returned, or None with fewer than two
    coders to pair). ``source`` says who loaded (``asset:<run id>``, ``cli``)."""
    protocol = current_protocol(storage)
    pid = protocol.protocol_id
    rows, missing, n = sampled_evidence(storage, pid)
    counts = store.load_tasks(pid, rows)
    store.record_study(pid, protocol.content_sha256, protocol.head_names)
    pairs = None
    if len(store.pair_coders()) >= CODERS_PER_WORK:
        pairs = store.assign_works(pid, protocol.content_sha256)
    else:
        log.warning(
            "coding tasks of %s: fewer than %d coders without the adjudicator role, so no coder pairs yet: works are "
            "handed out first come, first served until `metacan coding assign` (or the next load) pairs them",
            pid,
            CODERS_PER_WORK,
        )
    store.record_load(
        pid,
        counts,
        instructions_version=protocol.instructions_version,
        source=source,
        sample_works=n,
        missing=len(missing),
    )
    if missing:
        log.warning(
            "coding tasks of %s: %d sampled works are not in the frame any more (kept if loaded before): %s",
            pid,
            len(missing),
            ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else ""),
        )
    return {
        "protocol_id": pid,
        "instructions_version": protocol.instructions_version,
        "sample_works": n,
        "missing": missing,
        **counts,
        "pairs": pairs,
    }
