"""Append-only store of teacher calls and direct labels in DuckDB (SPEC section 4, ARCHITECTURE).

Tables (created on first use, migrated in place from the first layout):

- ``teacher_calls``: one row per HTTP call: teacher, model, prompt version and prompt SHA-256, the work
  ids the call asked about, request hash, HTTP status, error, latency (s), tokens, cost (USD), mean token
  log-probability (when the endpoint returned them), the Dagster run id, and where the compressed request
  and raw reply are archived (``archive_path`` + ``archive_line``, see :mod:`.archive`).
- ``teacher_labels``: one row per (work, teacher, model, prompt version, prompt SHA, view hash) outcome:
  ``status`` ``labelled`` (label fields set) or ``failed`` (``error`` says why); ``call_id`` points to the
  call whose reply became the label (or the last call that failed for it); ``source`` says how the row
  came to be (``teacher_call``, ``frame_rule``, ``import``) and ``source_ref`` holds its provenance as
  JSON (for imports: file, SHA-256, record index, the original values).

Rows are only ever inserted. A label key that already has a final row is reused: a re-run (or a run
resumed after a crash, see :func:`metacan_pipeline.teachers.archive.recover`) repeats no call.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from .rubric import prompt_lock

UNAVAILABLE = "endpoint unavailable"
"""The error prefix of a failure because the endpoint did not answer (timeouts, refused connections,
429/5xx after every retry): stored, and the next run asks again (:func:`existing_keys`)."""
ENDPOINT_ERROR = "endpoint error"
"""The error prefix of a failure because the endpoint answered with an HTTP error or a body that is not a
chat completion: it says nothing about the work either, so the next run asks again too."""
NOT_FINAL = (UNAVAILABLE, ENDPOINT_ERROR)

CALLS_SCHEMA = pa.schema(
    [
        ("call_id", pa.string()),
        ("run_id", pa.string()),
        ("teacher", pa.string()),
        ("model", pa.string()),
        ("prompt_version", pa.string()),
        ("prompt_sha", pa.string()),
        ("record_view", pa.string()),
        ("work_ids", pa.list_(pa.string())),
        ("n_works", pa.int32()),
        ("request_hash", pa.string()),
        ("http_status", pa.int32()),
        ("error", pa.string()),
        ("latency_s", pa.float64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("logprob_mean", pa.float64()),
        ("archive_path", pa.string()),
        ("archive_line", pa.int64()),
        ("created_at", pa.timestamp("us")),
    ]
)

LABELS_SCHEMA = pa.schema(
    [
        ("label_id", pa.string()),
        ("work_id", pa.string()),
        ("teacher", pa.string()),
        ("model", pa.string()),
        ("prompt_version", pa.string()),
        ("prompt_sha", pa.string()),
        ("record_view", pa.string()),
        ("view_hash", pa.string()),
        ("status", pa.string()),
        ("categories", pa.list_(pa.string())),
        ("domain", pa.string()),
        ("study_design", pa.string()),
        ("genre", pa.string()),
        ("about_ca_system", pa.bool_()),
        ("about_ca_topic", pa.bool_()),
        ("confidence", pa.string()),
        ("reason", pa.string()),
        ("error", pa.string()),
        ("attempts", pa.int32()),
        ("call_id", pa.string()),
        ("run_id", pa.string()),
        ("source", pa.string()),
        ("source_ref", pa.string()),
        ("created_at", pa.timestamp("us")),
    ]
)

_SQL_TYPES = {
    pa.string(): "VARCHAR",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.timestamp("us"): "TIMESTAMP",
    pa.list_(pa.string()): "VARCHAR[]",
}


def _ddl(name: str, schema: pa.Schema, key: str) -> str:
    cols = ", ".join(f"{f.name} {_SQL_TYPES[f.type]}" + (" PRIMARY KEY" if f.name == key else "") for f in schema)
    return f"CREATE TABLE IF NOT EXISTS {name} ({cols});"


@dataclass(frozen=True)
class LabelKey:
    """What makes two labels the same (ARCHITECTURE "Storage"): a change in any part is a new label.

    ``prompt_sha`` is the SHA-256 (16 hex) of the prompt text: editing a prompt file without giving it a
    new version still never reuses the labels of the old text.
    """

    work_id: str
    teacher: str
    model: str
    prompt_version: str
    prompt_sha: str
    view_hash: str


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND table_schema = 'main' ORDER BY ordinal_position",
            [table],
        ).fetchall()
    ]


def ensure_tables(con: duckdb.DuckDBPyConnection, legacy_prompt_shas: dict[str, str] | None = None) -> None:
    """Create the tables; migrate a store of the first layout in place, losing nothing.

    First layout: ``teacher_calls`` held request and reply bodies (it is renamed ``teacher_calls_v1`` and
    kept; its rows stay readable), ``teacher_labels`` lacked ``prompt_sha`` and ``source_ref`` (added;
    ``legacy_prompt_shas``, by default the prompt lock, maps a prompt version to the SHA of its unchanged,
    locked text so that old labels keep their key).
    """
    calls = _columns(con, "teacher_calls")
    if calls and "request_json" in calls:
        con.execute("ALTER TABLE teacher_calls RENAME TO teacher_calls_v1")
    con.execute(_ddl("teacher_calls", CALLS_SCHEMA, "call_id"))
    con.execute(_ddl("teacher_labels", LABELS_SCHEMA, "label_id"))
    labels = _columns(con, "teacher_labels")
    if labels[-1] != "created_at" or "prompt_sha" not in labels:
        old = [c for c in labels]
        con.execute("ALTER TABLE teacher_labels RENAME TO teacher_labels_old")
        con.execute(_ddl("teacher_labels", LABELS_SCHEMA, "label_id"))
        shared = [f.name for f in LABELS_SCHEMA if f.name in old]
        con.execute(
            f"INSERT INTO teacher_labels ({', '.join(shared)}) SELECT {', '.join(shared)} FROM teacher_labels_old"
        )
        con.execute("DROP TABLE teacher_labels_old")
        for version, sha in (prompt_lock() if legacy_prompt_shas is None else legacy_prompt_shas).items():
            con.execute(
                "UPDATE teacher_labels SET prompt_sha = ? WHERE prompt_sha IS NULL AND prompt_version = ?",
                [sha, version],
            )


def existing_keys(
    con: duckdb.DuckDBPyConnection, teacher: str, model: str, prompt_version: str, prompt_sha: str
) -> set[tuple[str, str]]:
    """``{(work_id, view_hash)}`` that need no call for this teacher configuration: labelled, or failed
    for a reason about the work (a reply that stayed invalid after the re-asks: asking the same model
    the same thing again would cost money and repeat the failure). A failure that says nothing about the
    work (:data:`NOT_FINAL`: the endpoint did not answer, or answered an HTTP error or a non-chat body)
    is not final: the next run asks again, and its outcome, newer, is the one that counts
    (:func:`current_labels_sql`)."""
    rows = con.execute(
        "SELECT DISTINCT work_id, view_hash FROM teacher_labels WHERE teacher=? AND model=? AND prompt_version=? AND prompt_sha=? "
        "AND NOT (status = 'failed' AND (starts_with(coalesce(error, ''), ?) OR starts_with(coalesce(error, ''), ?)))",
        [teacher, model, prompt_version, prompt_sha, *NOT_FINAL],
    ).fetchall()
    return set(rows)


def now_utc() -> dt.datetime:
    """The current UTC time without tzinfo (DuckDB ``TIMESTAMP``)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def append_rows(con: duckdb.DuckDBPyConnection, calls: list[dict[str, Any]], labels: list[dict[str, Any]]) -> None:
    """Insert call and label rows (dicts keyed by column name; absent columns are NULL) in one
    transaction. Rows whose ``call_id`` / ``label_id`` is already stored are skipped: a recovered archive
    replayed twice counts no call, label or cost twice."""
    con.execute("BEGIN")
    try:
        for name, schema, key, rows in (
            ("teacher_calls", CALLS_SCHEMA, "call_id", calls),
            ("teacher_labels", LABELS_SCHEMA, "label_id", labels),
        ):
            if not rows:
                continue
            batch = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)  # noqa: F841
            con.execute(f"INSERT INTO {name} SELECT * FROM batch ANTI JOIN {name} USING ({key})")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def current_labels_sql() -> str:
    """SQL returning the newest stored outcome per (work, view hash) for one teacher configuration.

    Parameters: teacher, model, prompt_version, prompt_sha.
    """
    return """
      SELECT * EXCLUDE (rn) FROM (
        SELECT *, row_number() OVER (PARTITION BY work_id, view_hash ORDER BY created_at DESC, label_id) rn
        FROM teacher_labels WHERE teacher=? AND model=? AND prompt_version=? AND prompt_sha=?
      ) WHERE rn = 1
    """
