"""Answers made elsewhere (Label Studio annotations, :mod:`.labelstudio_import`), appended like a site answer and kept
with their provenance. An imported answer keeps its own time (Label Studio's ``updated_at``), so one dated more than
:data:`.rules.MAX_CLOCK_SKEW` after now is refused: the latest answer counts by time, and it would hide every later
answer. One person is one coder: an annotator imported as one coder is never made a second one."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Mapping
from typing import Any

from ...tables.coding import ANNOTATOR_SQL
from ...teachers.core.views import canonical_json
from .abstracts import check_abstract
from .answers import append_answer, check_append
from .base import StoreBase
from .errors import CodingError, shown
from .rules import IMPORTED_CODER_PREFIX, MAX_CLOCK_SKEW, annotator_of, check_coder_name, iso, parse_time
from .validate import validate_answer


class ImportsMixin(StoreBase):
    """Appending an imported answer once, and recording each import (``coding_imports``)."""

    def append_imported(
        self,
        protocol_id: str,
        work_id: str,
        coder: str,
        answer: Mapping[str, Any],
        *,
        answer_id: str,
        evidence_sha256: str,
        submitted_at: str,
        source: str,
        provenance: Mapping[str, Any],
        abstract_sha256: str | None = None,
    ) -> bool:
        """Append a ``code`` answer made elsewhere (a Label Studio annotation, :mod:`.labelstudio_import`), validated like a
        site answer; ``answer_id`` is derived from the annotation, so the same annotation is appended once. Returns
        False when that answer is present already, or the same annotation (its annotator, ``annotation_id`` and time
        in ``provenance``) under another coder name. One person is one coder: ``coder`` takes the spelling of a coder
        the store knows in another letter case (registered, or with answers), and an annotator whose earlier
        annotations were imported as another coder is refused (CodingError) rather than made a second coder. The coder need not be registered (they never sign in here), but a
        registered coder who was revoked is refused (CodingError), like their sign-in, and so is a ``submitted_at``
        more than :data:`MAX_CLOCK_SKEW` in the future (the latest answer counts by time: it would hide later ones).
        ``abstract_sha256``: the abstract the export showed (archived by the export; a hash this store did not archive
        for the work is refused)."""
        check_coder_name(coder, imported=True)
        clean = validate_answer(answer, work_id)
        when = parse_time(submitted_at)
        if when is None:
            raise CodingError("submitted_at", f"submitted_at={shown(submitted_at)} is not an ISO 8601 time")
        if when > iso(dt.datetime.now(dt.UTC) + MAX_CLOCK_SKEW):  # one fixed width: text order is time order
            raise CodingError(
                "submitted_at",
                f"submitted_at {when} is in the future (more than {MAX_CLOCK_SKEW.seconds // 60} minutes after now): the "
                "latest answer counts by time, so it would hide every answer given after it; fix the clock of the "
                "Label Studio server or the annotation's updated_at",
            )
        submitted_at = when
        annotator = annotator_of(provenance.get("completed_by"))
        with self._write() as con:
            if con.execute("SELECT 1 FROM coding_answers WHERE answer_id = ?", [answer_id]).fetchone():
                return False
            if annotator is not None and self._annotation_present(
                con, protocol_id, work_id, annotator, provenance, when
            ):
                return False  # the same annotation, imported before under another spelling or coder map
            coder = self._imported_coder(con, coder, annotator)
            revoked = con.execute(
                "SELECT coder, revoked_at FROM coders WHERE lower(coder) = lower(?) AND revoked_at IS NOT NULL", [coder]
            ).fetchone()
            if revoked is not None:
                raise CodingError(
                    "coder",
                    f"coder {revoked['coder']!r} was revoked at {revoked['revoked_at']}: their codes are no longer "
                    "accepted; map this annotator to an active coder (or add a new one) if their codes should count",
                )
            shown_sha = check_append(con, protocol_id, work_id, coder, "code", evidence_sha256)
            abstract_sha = check_abstract(con, work_id, abstract_sha256)
            append_answer(
                con,
                answer_id,
                protocol_id,
                work_id,
                coder,
                "code",
                clean,
                shown_sha,
                submitted_at,
                source,
                provenance,
                abstract_sha,
            )
        return True

    @staticmethod
    def _annotation_present(
        con: sqlite3.Connection,
        protocol_id: str,
        work_id: str,
        annotator: str,
        provenance: Mapping[str, Any],
        submitted_at: str,
    ) -> bool:
        """True when the annotation of ``provenance`` (annotator, annotation id, time) is stored already, by any coder."""
        return (
            con.execute(
                f"SELECT 1 FROM coding_answers WHERE protocol_id = ? AND id = ? AND role = 'code' AND submitted_at = ? "
                f"AND json_extract(provenance, '$.annotation_id') = ? AND {ANNOTATOR_SQL} = ?",
                [protocol_id, work_id, submitted_at, provenance.get("annotation_id"), annotator],
            ).fetchone()
            is not None
        )

    @staticmethod
    def _imported_coder(con: sqlite3.Connection, coder: str, annotator: str | None) -> str:
        """The coder an imported answer is stored under: ``coder`` in the spelling the store knows (registered coders
        first, then coders with answers; letter case ignored). CodingError when ``annotator``'s earlier imported answers
        are another coder's (one person, two coders)."""
        known = con.execute(
            "SELECT coder FROM coders WHERE lower(coder) = lower(?) UNION ALL "
            "SELECT coder FROM (SELECT DISTINCT coder FROM coding_answers WHERE lower(coder) = lower(?)) LIMIT 1",
            [coder, coder],
        ).fetchone()
        coder = known[0] if known else coder
        if annotator is None:
            return coder
        before = con.execute(
            f"SELECT DISTINCT coder FROM coding_answers WHERE provenance IS NOT NULL AND {ANNOTATOR_SQL} = ? "
            "AND lower(coder) <> lower(?) LIMIT 1",
            [annotator, coder],
        ).fetchone()
        if before is not None:
            other = before[0]
            how = (
                "leave them out of the coder map"
                if other.startswith(IMPORTED_CODER_PREFIX)
                else f"map them to {other!r} in the coder map"
            )
            raise CodingError(
                "coder",
                f"annotator {shown(annotator)} was imported as coder {shown(other)} before, and now as {shown(coder)}: "
                f"one person is one coder (their answers are never merged or renamed), so {how}",
            )
        return coder

    def record_import(self, row: Mapping[str, Any]) -> None:
        """Append one ``coding_imports`` row (:mod:`.labelstudio_import`)."""
        with self._write() as con:
            con.execute(
                "INSERT INTO coding_imports VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    row["file_sha256"],
                    row["imported_at"],
                    row["file_name"],
                    row["tasks"],
                    row["annotations"],
                    row["appended"],
                    row["already_present"],
                    row["refused"],
                    canonical_json(row["refusals"]),
                ],
            )
