"""Codes of machine adjudicators (``machine_codes``): kept beside the human codes, never as one. They never enter
:meth:`metacan_pipeline.audit.coding.adjudication.AdjudicationMixin.adjudicated_codes` or any human layer."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ...openalex.ids import is_work_id
from .base import StoreBase
from .errors import CodingError
from .rules import check_protocol_id, now_iso


class MachineCodesMixin(StoreBase):
    """Appending and reading machine adjudicators' codes."""

    def append_machine_codes(self, rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        """Append codes of a MACHINE adjudicator (``machine_codes``: protocol, work, head, code 0 / 1 / None, the
        adjudicator ``machine-adjudicator:<name>``, its own verdict and reason, the source file and its SHA-256).
        They never enter :meth:`adjudicated_codes` or any human layer. A (protocol, work, head, adjudicator) already
        stored is left as it was, so a re-import adds nothing. Returns ``{"added", "already_present"}``. Raises
        :class:`CodingError` naming the row for an adjudicator that does not say machine, a bad protocol id or work
        id, or a code other than 0 / 1 / None."""
        prepared = []
        for row in rows:
            adjudicator = str(row.get("adjudicator") or "")
            if not re.fullmatch(r"machine-adjudicator:[A-Za-z0-9][A-Za-z0-9._-]{0,63}", adjudicator):
                raise CodingError("adjudicator", f"{adjudicator!r} must read machine-adjudicator:<name>")
            check_protocol_id(row["protocol_id"])
            if not is_work_id(str(row["id"])):
                raise CodingError("id", f"{row['id']!r} is not a work id (W<digits>)")
            code = row.get("code")
            if code is not None and (isinstance(code, bool) or code not in (0, 1)):
                raise CodingError("code", f"{row['id']} {row.get('head')}: code {code!r} is not 0, 1 or None")
            prepared.append(
                [
                    row["protocol_id"],
                    row["id"],
                    row["head"],
                    code,
                    adjudicator,
                    row.get("verdict"),
                    row.get("reason"),
                    row.get("source_file"),
                    row.get("source_sha256"),
                    now_iso(),
                ]
            )
        added = 0
        with self._write() as con:
            for values in prepared:
                added += con.execute(
                    "INSERT OR IGNORE INTO machine_codes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values
                ).rowcount
        return {"added": added, "already_present": len(prepared) - added}

    def machine_codes(self, protocol_id: str) -> list[dict[str, Any]]:
        """Every machine adjudicator's code under a protocol, ordered by adjudicator, work and head."""
        with self._read() as con:
            rows = con.execute(
                "SELECT * FROM machine_codes WHERE protocol_id = ? ORDER BY adjudicator, id, head", [protocol_id]
            ).fetchall()
        return [dict(r) for r in rows]
