"""The Retraction Watch line of the run summary (``metacan run``, ``metacan summary``)."""

from __future__ import annotations

from collections import Counter

import duckdb

from ..retraction.join import RETRACTION, work_state
from ..retraction.source import NOT_CONFIGURED

NOT_CHECKED_LINE = (
    "Retraction Watch: not checked (no Retraction Watch file configured: set METACAN_RETRACTION_WATCH_FILE or "
    "METACAN_RETRACTION_WATCH_URL); every work shows 'not checked', not 'not retracted'"
)


def retraction_lines(con: duckdb.DuckDBPyConnection, views: set[str]) -> list[str]:
    """One line: the Retraction Watch file read (version, data through, notices, rows quarantined) and the frame works
    per state (:func:`metacan_pipeline.retraction.join.work_state`), with the retractions OpenAlex misses; or that no
    file was configured (every work "not checked")."""
    if "retraction_watch_source" not in views or "work_retractions" not in views:
        return [NOT_CHECKED_LINE]
    row = con.execute(
        "SELECT status, rw_version, data_through, rows, quarantined FROM retraction_watch_source LIMIT 1"
    ).fetchone()
    if row is None or row[0] == NOT_CONFIGURED:
        return [NOT_CHECKED_LINE]
    _, version, through, notices, quarantined = row
    by_work: dict[str, list[dict]] = {}
    for wid, state, retracted in con.execute(
        "SELECT id, retraction_state, is_retracted FROM work_retractions "
        "ORDER BY id, retraction_date NULLS FIRST, rw_record_id"
    ).fetchall():
        by_work.setdefault(wid, []).append({"retraction_state": state, "is_retracted": retracted})
    states = Counter(work_state(n) for n in by_work.values())
    missed = sum(work_state(n) == RETRACTION and not n[0]["is_retracted"] for n in by_work.values())
    return [
        f"Retraction Watch {version} (notices through {through or 'no date'}; {notices} notices, {quarantined} rows "
        f"quarantined): frame works retraction {states['retraction']} (OpenAlex missed {missed}) | expression of "
        f"concern {states['expression_of_concern']} | correction {states['correction']} | reinstatement "
        f"{states['reinstatement']}"
    ]
