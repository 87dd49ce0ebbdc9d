"""Coding tasks and the queues that hand them out. A task carries evidence only (:mod:`.evidence`); each evidence
version is kept (``coding_evidence``, content-addressed), and an answer names the version it was shown. A queue is
derived from the answers, not from a cursor: the first task in position order the coder has not answered and fewer
than two other coders have answered or hold. When the protocol's works are assigned to coder pairs
(:mod:`.assignments`), a coder's queue holds only the works assigned to them. Handing out a task records a claim
(valid ``claim_ttl``), so two coders, not three, work on a work at once, and a coder who comes back is handed the task
they held first. A coder never sees another coder's answer or any machine output."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from ...teachers.core.views import canonical_json
from .base import StoreBase
from .coders import active_coder
from .errors import CodingError
from .evidence import task_evidence
from .rules import CODERS_PER_WORK, check_protocol_id, iso, now_iso, sha256_hex

log = logging.getLogger(__name__)

_QUEUE_SQL = """
WITH coded AS (
  SELECT id, count(DISTINCT coder) AS n, max(coder = :coder) AS mine
  FROM coding_answers WHERE protocol_id = :pid AND role = 'code' GROUP BY id
), held AS (
  SELECT c.id, count(*) AS n FROM coding_claims c
  WHERE c.protocol_id = :pid AND c.coder <> :coder AND c.claimed_at >= :cutoff
    AND NOT EXISTS (SELECT 1 FROM coding_answers a
                    WHERE a.protocol_id = :pid AND a.id = c.id AND a.coder = c.coder AND a.role = 'code')
  GROUP BY c.id
), mine AS (
  SELECT id FROM coding_claims WHERE protocol_id = :pid AND coder = :coder AND claimed_at >= :cutoff
)
SELECT t.id, t.position, t.evidence_json, t.evidence_sha256
FROM coding_tasks t LEFT JOIN coded c ON c.id = t.id LEFT JOIN held h ON h.id = t.id
WHERE t.protocol_id = :pid AND coalesce(c.mine, 0) = 0 AND coalesce(c.n, 0) + coalesce(h.n, 0) < :per_work
ORDER BY t.id IN (SELECT id FROM mine) DESC, t.position, t.id
LIMIT 1
"""


#: The queue of a protocol with coder pairs: the first work assigned to the coder that they have not answered (their
#: partner is the only other coder of it, so no claim of anyone else matters; coming back, the coder is handed the
#: same first unanswered work).
_PAIRED_QUEUE_SQL = """
SELECT t.id, t.position, t.evidence_json, t.evidence_sha256
FROM coding_assignments a JOIN coding_tasks t ON t.protocol_id = a.protocol_id AND t.id = a.id
WHERE a.protocol_id = :pid AND a.coder = :coder
  AND NOT EXISTS (SELECT 1 FROM coding_answers c
                  WHERE c.protocol_id = :pid AND c.id = a.id AND c.role = 'code' AND c.coder = :coder)
ORDER BY t.position, t.id
LIMIT 1
"""


def paired(con: sqlite3.Connection, protocol_id: str) -> bool:
    """True when the protocol's works are assigned to coder pairs (a coder then codes only their own works)."""
    return (
        con.execute("SELECT 1 FROM coding_assignments WHERE protocol_id = ? LIMIT 1", [protocol_id]).fetchone()
        is not None
    )


def assigned_to(con: sqlite3.Connection, protocol_id: str, work_id: str, coder: str) -> bool:
    """True when ``work_id`` is assigned to ``coder`` under ``protocol_id``."""
    return (
        con.execute(
            "SELECT 1 FROM coding_assignments WHERE protocol_id = ? AND id = ? AND coder = ?",
            [protocol_id, work_id, coder],
        ).fetchone()
        is not None
    )


def task_dict(protocol_id: str, row: sqlite3.Row) -> dict[str, Any]:
    """A ``coding_tasks`` row as the store gives a task: ``protocol_id``, ``id``, ``position``, ``evidence`` (dict),
    ``evidence_sha256``."""
    return {
        "protocol_id": protocol_id,
        "id": row["id"],
        "position": row["position"],
        "evidence": json.loads(row["evidence_json"]),
        "evidence_sha256": row["evidence_sha256"],
    }


class TasksMixin(StoreBase):
    """Loading a protocol's tasks (and recording each load), reading them, and the coders' queues."""

    def load_tasks(self, protocol_id: str, rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        """Add or update the tasks of a protocol (idempotent): per row, its evidence (:func:`task_evidence`) and its
        queue position (the row's ``position``, else its place in ``rows``). A task whose evidence changed gets the new
        version; the answers given on the old one keep pointing to it. Tasks not in ``rows`` stay. Returns counts
        ``added``, ``evidence_changed``, ``moved`` (position only), ``unchanged``."""
        check_protocol_id(protocol_id)
        prepared: dict[str, tuple[int, str, str]] = {}
        for i, row in enumerate(rows):
            evidence = task_evidence(row)
            position = row.get("position", i)
            if isinstance(position, bool) or not isinstance(position, int):
                raise CodingError("position", f"position={position!r} of {evidence['id']} is not an integer")
            if evidence["id"] in prepared:
                raise CodingError("id", f"{evidence['id']} appears twice in the tasks of {protocol_id}")
            text = canonical_json(evidence)
            prepared[evidence["id"]] = (position, text, sha256_hex(text))
        counts = dict.fromkeys(("added", "evidence_changed", "moved", "unchanged"), 0)
        now = now_iso()
        with self._write() as con:
            existing = {
                r["id"]: (r["position"], r["evidence_sha256"])
                for r in con.execute(
                    "SELECT id, position, evidence_sha256 FROM coding_tasks WHERE protocol_id = ?", [protocol_id]
                )
            }
            for wid, (position, text, sha) in prepared.items():
                con.execute("INSERT OR IGNORE INTO coding_evidence VALUES (?, ?, ?, ?)", [sha, wid, text, now])
                old = existing.get(wid)
                if old is None:
                    con.execute(
                        "INSERT INTO coding_tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [protocol_id, wid, position, text, sha, now, now],
                    )
                    counts["added"] += 1
                elif old[1] != sha:
                    con.execute(
                        "UPDATE coding_tasks SET position = ?, evidence_json = ?, evidence_sha256 = ?, evidence_changed_at = ?"
                        " WHERE protocol_id = ? AND id = ?",
                        [position, text, sha, now, protocol_id, wid],
                    )
                    counts["evidence_changed"] += 1
                elif old[0] != position:
                    con.execute(
                        "UPDATE coding_tasks SET position = ? WHERE protocol_id = ? AND id = ?",
                        [position, protocol_id, wid],
                    )
                    counts["moved"] += 1
                else:
                    counts["unchanged"] += 1
        log.info("tasks of %s loaded: %s", protocol_id, counts)
        return counts

    def tasks(self, protocol_id: str) -> list[dict[str, Any]]:
        """The tasks of a protocol in queue order: ``id``, ``position``, ``evidence`` (dict), ``evidence_sha256``."""
        with self._read() as con:
            rows = con.execute(
                "SELECT id, position, evidence_json, evidence_sha256 FROM coding_tasks WHERE protocol_id = ? ORDER BY position, id",
                [protocol_id],
            ).fetchall()
        return [task_dict(protocol_id, r) for r in rows]

    def titles(self, protocol_id: str) -> dict[str, str | None]:
        """The title of each task of a protocol (its current evidence's), by work id."""
        with self._read() as con:
            rows = con.execute(
                "SELECT id, json_extract(evidence_json, '$.title') FROM coding_tasks WHERE protocol_id = ?",
                [protocol_id],
            ).fetchall()
        return {r[0]: r[1] for r in rows}

    def evidence(self, evidence_sha256: str) -> dict[str, Any] | None:
        """One evidence version (what an answer naming it was shown), or None."""
        with self._read() as con:
            row = con.execute(
                "SELECT evidence_json FROM coding_evidence WHERE evidence_sha256 = ?", [evidence_sha256]
            ).fetchone()
        return None if row is None else json.loads(row[0])

    def next_task(self, protocol_id: str, coder: str) -> dict[str, Any] | None:
        """The coder's next task (as :meth:`tasks` gives it: evidence only), or None when their queue is empty.

        The queue is derived from the answers: tasks in position order the coder has not answered, that fewer than
        two other coders have answered or currently hold, and, when the protocol has coder pairs, that are assigned to
        the coder. The task returned is claimed for the coder (so a third coder
        is handed another one), and a coder's own live claim comes first, so stopping and coming back resumes there.
        """
        cutoff = iso(dt.datetime.now(dt.UTC) - self.claim_ttl)
        with self._write() as con:
            active_coder(con, coder)
            params = {"pid": protocol_id, "coder": coder, "cutoff": cutoff, "per_work": CODERS_PER_WORK}
            row = con.execute(_PAIRED_QUEUE_SQL if paired(con, protocol_id) else _QUEUE_SQL, params).fetchone()
            if row is None:
                return None
            con.execute(
                "INSERT INTO coding_claims VALUES (?, ?, ?, ?) "
                "ON CONFLICT (protocol_id, id, coder) DO UPDATE SET claimed_at = excluded.claimed_at",
                [protocol_id, row["id"], coder, now_iso()],
            )
        return task_dict(protocol_id, row)

    def record_load(
        self,
        protocol_id: str,
        counts: Mapping[str, int],
        *,
        instructions_version: str,
        source: str,
        sample_works: int,
        missing: int,
    ) -> str:
        """Append one ``coding_loads`` row (a load of the protocol's audit sample, :mod:`.loading`); the newest
        row names the protocol the coding pages serve (:meth:`serving_protocol`). Returns its time."""
        check_protocol_id(protocol_id)
        now = now_iso()
        with self._write() as con:
            con.execute(
                "INSERT INTO coding_loads VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    protocol_id,
                    now,
                    instructions_version,
                    source,
                    sample_works,
                    *(counts[k] for k in ("added", "evidence_changed", "moved", "unchanged")),
                    missing,
                ],
            )
        return now

    def serving_protocol(self) -> dict[str, Any] | None:
        """The newest ``coding_loads`` row (``protocol_id``, ``instructions_version``, ``loaded_at``...), or None
        before any load: the coding pages code that protocol's tasks."""
        with self._read() as con:
            row = con.execute("SELECT * FROM coding_loads ORDER BY loaded_at DESC, rowid DESC LIMIT 1").fetchone()
        return None if row is None else dict(row)

    def task_protocols(self) -> list[str]:
        """Every protocol the store holds tasks of, in id order."""
        with self._read() as con:
            return [r[0] for r in con.execute("SELECT DISTINCT protocol_id FROM coding_tasks ORDER BY 1").fetchall()]

    def task(self, protocol_id: str, work_id: str) -> dict[str, Any] | None:
        """One task of a protocol (as :meth:`tasks` gives it: evidence only), or None."""
        with self._read() as con:
            row = con.execute(
                "SELECT id, position, evidence_json, evidence_sha256 FROM coding_tasks WHERE protocol_id = ? AND id = ?",
                [protocol_id, work_id],
            ).fetchone()
        return None if row is None else task_dict(protocol_id, row)

    def holds_task(self, protocol_id: str, work_id: str, coder: str) -> bool:
        """True when ``coder`` has answered ``work_id`` (a code), or the work is assigned to them (a protocol with
        coder pairs) or they hold a live claim on it (one without): the works a coder may open."""
        cutoff = iso(dt.datetime.now(dt.UTC) - self.claim_ttl)
        with self._read() as con:
            if paired(con, protocol_id):
                if assigned_to(con, protocol_id, work_id, coder):
                    return True
                cutoff = "~"  # no claim is live: only an answer opens a work not assigned to the coder
            row = con.execute(
                "SELECT 1 FROM coding_answers WHERE protocol_id = ? AND id = ? AND coder = ? AND role = 'code' "
                "UNION ALL SELECT 1 FROM coding_claims WHERE protocol_id = ? AND id = ? AND coder = ? AND claimed_at >= ?",
                [protocol_id, work_id, coder, protocol_id, work_id, coder, cutoff],
            ).fetchone()
        return row is not None

    def coder_progress(self, protocol_id: str, coder: str) -> dict[str, int]:
        """One coder's queue: ``done`` (works they have coded), ``to_do`` (tasks they have not coded that fewer than
        two other coders have: what the queue can still hand them, claims aside) and ``tasks``. With coder pairs,
        ``tasks`` and ``to_do`` count the works assigned to the coder only."""
        with self._read() as con:
            if paired(con, protocol_id):
                row = con.execute(
                    """
                    SELECT count(*) AS tasks, coalesce(sum(EXISTS (
                             SELECT 1 FROM coding_answers c WHERE c.protocol_id = a.protocol_id AND c.id = a.id
                               AND c.coder = a.coder AND c.role = 'code')), 0) AS done
                    FROM coding_assignments a WHERE a.protocol_id = ? AND a.coder = ?
                    """,
                    [protocol_id, coder],
                ).fetchone()
                return {"tasks": row["tasks"], "done": row["done"], "to_do": row["tasks"] - row["done"]}
            row = con.execute(
                """
                WITH coded AS (
                  SELECT id, count(DISTINCT coder) FILTER (WHERE coder <> :coder) AS others,
                         max(coder = :coder) AS mine
                  FROM coding_answers WHERE protocol_id = :pid AND role = 'code' GROUP BY id
                )
                SELECT count(*) AS tasks,
                       coalesce(sum(coalesce(c.mine, 0)), 0) AS done,
                       coalesce(sum(coalesce(c.mine, 0) = 0 AND coalesce(c.others, 0) < :per_work), 0) AS to_do
                FROM coding_tasks t LEFT JOIN coded c ON c.id = t.id WHERE t.protocol_id = :pid
                """,
                {"pid": protocol_id, "coder": coder, "per_work": CODERS_PER_WORK},
            ).fetchone()
        return {"tasks": row["tasks"], "done": row["done"], "to_do": row["to_do"]}
