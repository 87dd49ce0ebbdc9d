"""Append-only store of teacher calls and direct labels in DuckDB (SPEC section 4, ARCHITECTURE).

Tables (created on first use):

- ``teacher_calls``: every HTTP call: request JSON and hash, raw reply, status, error, latency (s),
  tokens, teacher, model, prompt version, work id, Dagster run id, time.
- ``teacher_labels``: one row per (work, teacher, model, prompt version, view hash) outcome:
  ``status`` ``labelled`` (label fields set) or ``failed`` (``error`` says why); ``call_id`` points to
  the call whose reply became the label (or the last failed call).

Rows are only ever inserted. A label key that already has a row is reused: a re-run (or a run
resumed after a crash, since each outcome is committed as soon as it exists) repeats no call.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

import duckdb

from .client import UNAVAILABLE, LabelOutcome

DDL = """
CREATE TABLE IF NOT EXISTS teacher_calls (
  call_id VARCHAR PRIMARY KEY, run_id VARCHAR, teacher VARCHAR, model VARCHAR, prompt_version VARCHAR,
  work_id VARCHAR, view_hash VARCHAR, request_hash VARCHAR, request_json VARCHAR, response_text VARCHAR,
  http_status INTEGER, error VARCHAR, latency_s DOUBLE, prompt_tokens INTEGER, completion_tokens INTEGER,
  created_at TIMESTAMP
);
CREATE TABLE IF NOT EXISTS teacher_labels (
  label_id VARCHAR PRIMARY KEY, work_id VARCHAR, teacher VARCHAR, model VARCHAR, prompt_version VARCHAR,
  record_view VARCHAR, view_hash VARCHAR, status VARCHAR, categories VARCHAR[], domain VARCHAR,
  study_design VARCHAR, genre VARCHAR, about_ca_system BOOLEAN, about_ca_topic BOOLEAN, confidence VARCHAR,
  reason VARCHAR, error VARCHAR, attempts INTEGER, call_id VARCHAR, run_id VARCHAR, source VARCHAR,
  created_at TIMESTAMP
);
"""


@dataclass(frozen=True)
class LabelKey:
    """What makes two labels the same (ARCHITECTURE "Storage"): a change in any part is a new label."""

    work_id: str
    teacher: str
    model: str
    prompt_version: str
    view_hash: str


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(DDL)


def existing_keys(con: duckdb.DuckDBPyConnection, teacher: str, model: str, prompt_version: str) -> set[tuple[str, str]]:
    """``{(work_id, view_hash)}`` that need no call for this teacher configuration: labelled, or failed
    for a reason about the work (a reply that stayed invalid after the re-asks: asking the same model
    the same thing again would cost money and repeat the failure). A failure because the endpoint did
    not answer (timeouts, connection errors, 429/5xx after every retry) is not final: the next run asks
    again, and its outcome, newer, is the one that counts (:func:`current_labels_sql`)."""
    ensure_tables(con)
    rows = con.execute(
        "SELECT DISTINCT work_id, view_hash FROM teacher_labels WHERE teacher=? AND model=? AND prompt_version=? "
        "AND NOT (status = 'failed' AND starts_with(coalesce(error, ''), ?))",
        [teacher, model, prompt_version, UNAVAILABLE],
    ).fetchall()
    return {(r[0], r[1]) for r in rows}


def append_outcome(con: duckdb.DuckDBPyConnection, key: LabelKey, record_view: str, outcome: LabelOutcome, run_id: str) -> None:
    """Insert the calls and the label/failure of one work in one short transaction."""
    ensure_tables(con)
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    con.execute("BEGIN")
    try:
        for c in outcome.calls:
            con.execute(
                "INSERT INTO teacher_calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [c.call_id, run_id, key.teacher, key.model, key.prompt_version, key.work_id, key.view_hash, c.request_hash,
                 c.request_json, c.response_text, c.http_status, c.error, c.latency_s, c.prompt_tokens, c.completion_tokens, now],
            )
        lab = outcome.label
        con.execute(
            "INSERT INTO teacher_labels VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [uuid.uuid4().hex, key.work_id, key.teacher, key.model, key.prompt_version, record_view, key.view_hash,
             outcome.status,
             list(lab.categories) if lab else None, lab.domain if lab else None, lab.study_design if lab else None,
             lab.genre if lab else None, lab.about_ca_system if lab else None, lab.about_ca_topic if lab else None,
             lab.confidence if lab else None, lab.reason if lab else None, outcome.error, len(outcome.calls),
             outcome.calls[-1].call_id if outcome.calls else None, run_id, "teacher_call", now],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def current_labels_sql() -> str:
    """SQL returning the newest stored outcome per (work, view hash) for one teacher configuration.

    Parameters: teacher, model, prompt_version.
    """
    return """
      SELECT * EXCLUDE (rn) FROM (
        SELECT *, row_number() OVER (PARTITION BY work_id, view_hash ORDER BY created_at DESC, label_id) rn
        FROM teacher_labels WHERE teacher=? AND model=? AND prompt_version=?
      ) WHERE rn = 1
    """
