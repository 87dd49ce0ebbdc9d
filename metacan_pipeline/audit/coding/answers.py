"""Answers given on the site, appended and never overwritten. Every answer is validated (:func:`.validate.validate_answer`)
and appended with coder, role (``code`` | ``adjudication``), time, protocol, the evidence version shown, the abstract shown
(its SHA-256, archived in ``coding_abstracts``) and its source;
triggers refuse UPDATE and DELETE, and the latest answer per (work, coder, role) counts, by ``submitted_at`` (then
append order)."""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from collections.abc import Mapping
from typing import Any

from ...teachers.core.views import canonical_json
from .abstracts import check_abstract
from .base import StoreBase
from .coders import active_coder
from .errors import CodingError, shown
from .rules import CODERS_PER_WORK, ROLES, now_iso
from .tasks import assigned_to, paired
from .validate import validate_answer

log = logging.getLogger(__name__)

_LATEST_SQL = """
SELECT * FROM (
  SELECT a.*, a.rowid AS seq, t.position,
         row_number() OVER (PARTITION BY a.id, a.coder, a.role ORDER BY a.submitted_at DESC, a.rowid DESC) AS rn
  FROM coding_answers a LEFT JOIN coding_tasks t ON t.protocol_id = a.protocol_id AND t.id = a.id
  WHERE a.protocol_id = ?
) WHERE rn = 1
ORDER BY position, id, role, coder
"""


def _answer_of(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["categories"] = None if d["categories"] is None else json.loads(d["categories"])
    d["provenance"] = None if d["provenance"] is None else json.loads(d["provenance"])
    for f in ("about_ca_system", "about_ca_topic"):
        d[f] = None if d[f] is None else bool(d[f])
    d["unresolved"] = bool(d["unresolved"])
    return d


def latest(con: sqlite3.Connection, protocol_id: str) -> list[dict[str, Any]]:
    """The latest answer per (work, coder, role) of a protocol, in queue order (:meth:`AnswersMixin.latest_answers`)."""
    out = []
    for row in con.execute(_LATEST_SQL, [protocol_id]).fetchall():
        d = _answer_of(row)
        del d["rn"]
        out.append(d)
    return out


def check_append(
    con: sqlite3.Connection, protocol_id: str, work_id: str, coder: str, role: str, shown_sha: str | None
) -> str:
    """The checks every appended answer passes (in the write transaction); returns the evidence version shown."""
    if role not in ROLES:
        raise CodingError("role", f"role={shown(role)}: expected one of {list(ROLES)}")
    task = con.execute(
        "SELECT evidence_sha256 FROM coding_tasks WHERE protocol_id = ? AND id = ?", [protocol_id, work_id]
    ).fetchone()
    if task is None:
        raise CodingError("id", f"{shown(work_id)} is not a task of protocol {shown(protocol_id)}")
    shown_sha = shown_sha or task["evidence_sha256"]
    version = con.execute("SELECT id FROM coding_evidence WHERE evidence_sha256 = ?", [shown_sha]).fetchone()
    if version is None:
        raise CodingError(
            "evidence_sha256",
            f"{shown(shown_sha, 132)} is a foreign evidence hash: this coding store never showed it for {work_id} (nor "
            f"for any work), so the answer was made on evidence from elsewhere (another coding store, or an edited "
            f"export); code {work_id} again from its current task (metacan coding, or a fresh Label Studio export)",
        )
    if version["id"] != work_id:
        raise CodingError(
            "evidence_sha256",
            f"{shown(shown_sha, 132)} is the evidence of {version['id']}, not of {work_id}: the answer names one work and "
            f"was made on another's evidence; check the work id of the answer (it must be the task's work_id)",
        )
    coders = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT coder FROM coding_answers WHERE protocol_id = ? AND id = ? AND role = 'code' ORDER BY coder",
            [protocol_id, work_id],
        )
    ]
    if role == "code" and coder not in coders and len(coders) >= CODERS_PER_WORK:
        raise CodingError("coder", f"{work_id} has its {CODERS_PER_WORK} coders already ({', '.join(coders)})")
    if role == "adjudication" and len(coders) < CODERS_PER_WORK:
        raise CodingError("role", f"{work_id} has {len(coders)} coder(s): adjudication needs {CODERS_PER_WORK}")
    return shown_sha


def append_answer(
    con: sqlite3.Connection,
    answer_id: str,
    protocol_id: str,
    work_id: str,
    coder: str,
    role: str,
    clean: Mapping[str, Any],
    shown: str,
    submitted_at: str,
    source: str,
    provenance: Mapping[str, Any] | None,
    abstract_sha256: str | None = None,
) -> None:
    """Append one checked answer (:func:`check_append`; ``abstract_sha256``: :func:`.abstracts.check_abstract`)."""
    categories = None if clean["categories"] is None else json.dumps(clean["categories"])
    con.execute(
        "INSERT INTO coding_answers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            answer_id,
            protocol_id,
            work_id,
            coder,
            role,
            categories,
            clean["domain"],
            clean["study_design"],
            clean["genre"],
            clean["about_ca_system"],
            clean["about_ca_topic"],
            clean["confidence"],
            int(clean["unresolved"]),
            clean["note"],
            shown,
            submitted_at,
            source,
            None if provenance is None else canonical_json(provenance),
            abstract_sha256,
        ],
    )


class AnswersMixin(StoreBase):
    """Answers given on the site: submitting one, and reading the latest ones (all, or a coder's own)."""

    def submit(
        self,
        protocol_id: str,
        work_id: str,
        coder: str,
        answer: Mapping[str, Any],
        role: str = "code",
        *,
        evidence_sha256: str | None = None,
        abstract_sha256: str | None = None,
    ) -> str:
        """Append a coder's answer given on the site (validated by :func:`validate_answer`); returns its ``answer_id``.

        ``evidence_sha256`` is the evidence version the page showed (default: the task's current one);
        ``abstract_sha256`` the abstract it showed (:meth:`.abstracts.AbstractsMixin.archive_abstract`; None: no
        abstract was shown; a hash this store did not archive for the work is refused). Refused
        (:class:`CodingError`): an unknown or revoked coder, a work that is not a task of the protocol, an unknown
        evidence version, a code on a work not assigned to the coder (a protocol with coder pairs,
        :mod:`.assignments`), a third coder on a work two others have answered, an adjudication of a work without two
        coders, an invalid answer. A coder answering again appends a new row: the latest counts.
        """
        clean = validate_answer(answer, work_id)
        answer_id = uuid.uuid4().hex
        with self._write() as con:
            active_coder(con, coder)
            shown_sha = check_append(con, protocol_id, work_id, coder, role, evidence_sha256)
            abstract_sha = check_abstract(con, work_id, abstract_sha256)
            if role == "code" and paired(con, protocol_id) and not assigned_to(con, protocol_id, work_id, coder):
                raise CodingError(
                    "coder", f"{work_id} is not assigned to {coder}: a coder codes the works of their pair"
                )
            append_answer(
                con,
                answer_id,
                protocol_id,
                work_id,
                coder,
                role,
                clean,
                shown_sha,
                now_iso(),
                "site",
                None,
                abstract_sha,
            )
        log.info("answer %s appended: %s (%s) on %s %s", answer_id, coder, role, protocol_id, work_id)
        return answer_id

    def latest_answers(self, protocol_id: str) -> list[dict[str, Any]]:
        """The latest answer per (work, coder, role) of a protocol, in queue order: every column of
        ``coding_answers`` (categories a list, booleans as bools, provenance a dict) plus ``position`` and ``seq``
        (the append order)."""
        with self._read() as con:
            return latest(con, protocol_id)

    def my_answer(self, protocol_id: str, work_id: str, coder: str, role: str = "code") -> dict[str, Any] | None:
        """The coder's own latest answer on a work (for their edit page), or None; never another coder's."""
        with self._read() as con:
            row = con.execute(
                "SELECT *, rowid AS seq FROM coding_answers WHERE protocol_id = ? AND id = ? AND coder = ? AND role = ? "
                "ORDER BY submitted_at DESC, rowid DESC LIMIT 1",
                [protocol_id, work_id, coder, role],
            ).fetchone()
        return None if row is None else _answer_of(row)

    def coder_answers(self, protocol_id: str, coder: str) -> list[dict[str, Any]]:
        """The coder's own latest code per work, in queue order (never another coder's): every column of
        ``coding_answers`` as :meth:`latest_answers` gives it."""
        return [a for a in self.latest_answers(protocol_id) if a["coder"] == coder and a["role"] == "code"]
