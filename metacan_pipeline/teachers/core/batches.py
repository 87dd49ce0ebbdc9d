"""Named batches of works a teacher may cover (SPEC section 7), kept in the DuckDB table ``label_batches``.

A teacher with ``coverage = "batch:<name>"`` (or ``"sample+batch:<name>"``) labels the works of batch
``<name>`` of the DuckDB table ``label_batches`` (:func:`~.labelling.select_works`). Batch
:data:`~metacan_pipeline.vocab.ACTIVE_LEARNING_BATCH` is the active-learning loop: every round of
``machine_scores`` records its proposals in ``machine_round_proposals``; the asset ``label_batches``
adds them to the batch (:func:`add_round_proposals`). Other batches are loaded by hand (``INSERT INTO label_batches ...``) and left alone.
"""

import dagster as dg
import duckdb

from ...meta import table_metadata
from ...tables.teachers import LABEL_BATCHES_SCHEMA
from ...vocab import ACTIVE_LEARNING_BATCH


def add_round_proposals(con: duckdb.DuckDBPyConnection, batch: str = ACTIVE_LEARNING_BATCH) -> int:
    """Add every proposal of ``machine_round_proposals`` that batch ``batch`` of ``label_batches`` does not
    hold yet (source ``machine_scores round <n>: <reason>``, in round and proposal order); returns the rows
    added. Idempotent: a second call adds nothing."""
    before = con.execute("SELECT count(*) FROM label_batches WHERE batch = ?", [batch]).fetchone()[0]
    con.execute(
        """INSERT INTO label_batches
        SELECT $batch, p.work_id, now(), 'machine_scores round ' || p.round || ': ' || p.reason
        FROM machine_round_proposals p
        WHERE p.work_id NOT IN (SELECT work_id FROM label_batches WHERE batch = $batch)
        ORDER BY p.round, p.rowid""",
        {"batch": batch},
    )
    return con.execute("SELECT count(*) FROM label_batches WHERE batch = ?", [batch]).fetchone()[0] - before


def newest_round_markdown(con: duckdb.DuckDBPyConnection) -> str:
    """A markdown table of the newest round's proposals (work, reason, scores), or a note that there is none."""
    rows = con.execute(
        """SELECT round, work_id, reason, score_codex, score_gemma, score_spread FROM machine_round_proposals
        WHERE round = (SELECT max(round) FROM machine_round_proposals) ORDER BY rowid"""
    ).fetchall()
    if not rows:
        return "_(no round has proposed a work yet)_"

    def score(value: float | None) -> str:  # a head trained on one class gives no score
        return "no score" if value is None else f"{value:.3f}"

    return f"round {rows[0][0]}\n\n| work | reason | codex | gemma | spread |\n|---|---|---|---|---|\n" + "".join(
        f"| {w} | {why} | {score(c)} | {score(g)} | {score(s)} |\n" for _, w, why, c, g, s in rows
    )


def rows_per_batch(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """``{batch: rows}`` of ``label_batches``, in batch order."""
    return dict(con.execute("SELECT batch, count(*) FROM label_batches GROUP BY batch ORDER BY batch").fetchall())


def batches_metadata(con: duckdb.DuckDBPyConnection, added: int, per_batch: dict[str, int]) -> dict:
    """The metadata of ``label_batches`` (``added``: rows :func:`add_round_proposals` added this run; ``per_batch``:
    :func:`rows_per_batch`): the table's, rows per batch and the newest round's proposals."""
    preview = [
        dict(zip(("batch", "work_id", "added_at", "source"), r, strict=True))
        for r in con.execute("SELECT * FROM label_batches ORDER BY added_at DESC, work_id LIMIT 10").fetchall()
    ]
    return table_metadata(
        LABEL_BATCHES_SCHEMA,
        sum(per_batch.values()),
        preview,
        ["batch", "work_id", "source"],
        added=added,
        rows_per_batch=dg.MetadataValue.json(per_batch),
        newest_round_proposals=dg.MetadataValue.md(newest_round_markdown(con)),
    )
