"""The asset ``label_batches``: named batches of works a teacher may cover (SPEC section 7, issue 13).

A teacher with ``coverage = "batch:<name>"`` (or ``"sample+batch:<name>"``) labels the works of batch
``<name>`` of the DuckDB table ``label_batches`` (:func:`~.assets.select_works`). Batch
:data:`~metacan_pipeline.vocab.ACTIVE_LEARNING_BATCH` is the active-learning loop: every round of
``machine_scores`` records its proposals in ``machine_round_proposals``; this asset adds them to the
batch. Other batches are loaded by hand (``INSERT INTO label_batches ...``) and left alone.
"""

import dagster as dg
import duckdb

from ..meta import table_metadata
from ..storage import MetacanStorage
from ..tables.teachers import LABEL_BATCHES_SCHEMA
from ..vocab import ACTIVE_LEARNING_BATCH


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
    return f"round {rows[0][0]}\n\n| work | reason | codex | gemma | spread |\n|---|---|---|---|---|\n" + "".join(
        f"| {w} | {why} | {c:.3f} | {g:.3f} | {s:.3f} |\n" for _, w, why, c, g, s in rows
    )


@dg.asset(
    group_name="labeling",
    kinds={"duckdb"},
    code_version="1",
    owners=["team:metacan"],
    deps=["machine_scores"],
)
def label_batches(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """Named batches of works for the teachers (table ``label_batches``, :data:`LABEL_BATCHES_SCHEMA`):
    adds every active-learning proposal of ``machine_round_proposals`` not yet in batch ``active_learning``
    (source ``machine_scores round <n>: <reason>``), idempotently; batches loaded by hand stay as they are.

    The loop closes on the next run: a teacher with ``coverage = "batch:active_learning"`` (or
    ``"sample+batch:active_learning"``) labels the batch when its ``direct_labels_<name>`` asset is next
    materialized. That edge, ``label_batches -> direct_labels_codex``, is not drawn: ``machine_scores``
    reads the direct labels, so it would make a cycle. Metadata: rows per batch and the newest round's
    proposals.
    """
    with storage.connect() as con:
        added = add_round_proposals(con)
        per_batch = dict(
            con.execute("SELECT batch, count(*) FROM label_batches GROUP BY batch ORDER BY batch").fetchall()
        )
        newest = newest_round_markdown(con)
        preview = [
            dict(zip(("batch", "work_id", "added_at", "source"), r, strict=True))
            for r in con.execute("SELECT * FROM label_batches ORDER BY added_at DESC, work_id LIMIT 10").fetchall()
        ]
    context.log.info(f"label_batches: {added} active-learning proposals added; rows per batch {per_batch}")
    return dg.MaterializeResult(
        metadata=table_metadata(
            LABEL_BATCHES_SCHEMA,
            sum(per_batch.values()),
            preview,
            ["batch", "work_id", "source"],
            added=added,
            rows_per_batch=dg.MetadataValue.json(per_batch),
            newest_round_proposals=dg.MetadataValue.md(newest),
        )
    )
