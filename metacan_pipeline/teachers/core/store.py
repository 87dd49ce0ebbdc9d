"""Append-only store of teacher calls and direct labels in DuckDB (SPEC section 4, ARCHITECTURE).

Tables (declared in :mod:`metacan_pipeline.tables.teachers`, created when storage opens, migrated in place from
earlier layouts by :mod:`metacan_pipeline.tables.migrations`):

- ``teacher_calls``: one row per HTTP call: teacher, model, prompt version and prompt SHA-256, the work
  ids the call asked about, request hash, HTTP status, error, latency (s), tokens, cost (USD), mean token
  log-probability (when the endpoint returned them), the Dagster run id, where the compressed request
  and raw reply are archived (``archive_path`` + ``archive_line``, see :mod:`..calling.archive`), and the
  ``endpoint`` that answered (its name, never a key; NULL for calls stored before the column existed).
- ``teacher_labels``: one row per (work, teacher, model, prompt version, prompt SHA, view hash) outcome:
  ``status`` ``labelled`` (label fields set) or ``failed`` (``error`` says why); ``call_id`` points to the
  call whose reply became the label (or the last call that failed for it); ``source`` says how the row
  came to be (``teacher_call``, ``frame_rule``, ``import``) and ``source_ref`` holds its provenance as
  JSON (for imports: file, SHA-256, record index, the original values).

Rows are only ever inserted. A label key that already has a final row is reused: a re-run (or a run
resumed after a crash, see :func:`metacan_pipeline.teachers.calling.archive.recover`) repeats no call.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import uuid6

from ...tables import transaction
from ...tables.teachers import CALLS_SCHEMA, LABELS_SCHEMA

UNAVAILABLE = "endpoint unavailable"
"""The error prefix of a failure because the endpoint did not answer (timeouts, refused connections,
429/5xx after every retry): stored, and the next run asks again (:func:`existing_keys`)."""
ENDPOINT_ERROR = "endpoint error"
"""The error prefix of a failure because the endpoint answered with an HTTP error or a body that is not a
chat completion: it says nothing about the work either, so the next run asks again too."""
NOT_FINAL = (UNAVAILABLE, ENDPOINT_ERROR)


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


def existing_keys(
    con: duckdb.DuckDBPyConnection,
    teacher: str,
    model: str,
    prompt_version: str,
    prompt_sha: str,
    work_ids: list[str] | None = None,
) -> set[tuple[str, str]]:
    """``{(work_id, view_hash)}`` that need no call for this teacher configuration: labelled, or failed
    for a reason about the work (a reply that stayed invalid after the re-asks: asking the same model
    the same thing again would cost money and repeat the failure). A failure that says nothing about the
    work (:data:`NOT_FINAL`: the endpoint did not answer, or answered an HTTP error or a non-chat body)
    is not final: the next run asks again, and its outcome, newer, is the one that counts
    (:func:`current_labels_sql`). ``work_ids``: only the keys of these works (a chunk of a large run, so the
    set stays the chunk's size)."""
    only = ""
    if work_ids is not None:
        con.register("chunk_ids", pa.table({"work_id": work_ids}))
        only = "AND work_id IN (SELECT work_id FROM chunk_ids) "
    rows = con.execute(
        "SELECT DISTINCT work_id, view_hash FROM teacher_labels WHERE teacher=? AND model=? AND prompt_version=? AND prompt_sha=? "
        + only
        + "AND NOT (status = 'failed' AND (starts_with(coalesce(error, ''), ?) OR starts_with(coalesce(error, ''), ?)))",
        [teacher, model, prompt_version, prompt_sha, *NOT_FINAL],
    ).fetchall()
    if work_ids is not None:
        con.unregister("chunk_ids")
    return set(rows)


def new_key() -> str:
    """A new ``call_id`` or ``label_id``: a time-ordered UUID (version 7, RFC 9562) as 32 hex digits.

    Every flush of a labelling run (:class:`..calling.archive.LabelWriter`) ends with a checkpoint, which writes the
    parts of a key index that changed: keys in time order land at the right edge of ``teacher_calls``'s
    ``call_id`` index, where random ones (version 4, the ids before) touch all of it. ``teacher_labels``
    has no key index at all (``benchmarks/bench_label_store.py``).
    """
    return uuid6.uuid7().hex


def now_utc() -> dt.datetime:
    """The current UTC time without tzinfo (DuckDB ``TIMESTAMP``)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def append_rows(con: duckdb.DuckDBPyConnection, calls: list[dict[str, Any]], labels: list[dict[str, Any]]) -> None:
    """Insert call and label rows (dicts keyed by column name; absent columns are NULL) in one
    transaction. Rows whose ``call_id`` / ``label_id`` is already stored, or came earlier in ``calls`` /
    ``labels``, are skipped: a recovered archive replayed twice counts no call, label or cost twice (``teacher_labels``
    has no key index to refuse a second row)."""
    with transaction(con):
        for name, schema, key, rows in (
            ("teacher_calls", CALLS_SCHEMA, "call_id", calls),
            ("teacher_labels", LABELS_SCHEMA, "label_id", labels),
        ):
            if any(r.get(key) is None for r in rows):  # the key index of teacher_labels refused it before
                raise ValueError(f"a {name} row without its {key}: nothing of this batch was stored")
            seen: set = set()
            rows = [r for r in rows if not (r.get(key) in seen or seen.add(r.get(key)))]  # the first of each key
            if not rows:
                continue
            batch = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)  # noqa: F841
            con.execute(f"INSERT INTO {name} SELECT * FROM batch ANTI JOIN {name} USING ({key})")


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
