"""Scoring the frame in batches, and the hybrid predictions as one DuckDB query per batch (SPEC section 6).

Memory stays flat in the frame's size: the frame is read in record batches of ``batch_size`` works,
each batch's texts are vectorised and scored by every head, and the scores are written as one Parquet
file per batch (``warehouse/<scores table>``). Quota thresholds, decisions and the derived scores are
then computed by DuckDB over those files (top-N queries, and per scores file a join with the gemma
direct labels of its id range), and the predictions streamed back out batch by batch. Nothing
frame-sized is held in Python or in DuckDB.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from ..storage import MetacanStorage, sql_literal
from ..vocab import (
    ABOUT_CA_TARGETS,
    BINARY_TARGETS,
    CATEGORICAL_TARGETS,
    CATEGORIES,
    PREDICTION_STATUS,
)
from .calibration import Quota, threshold_uncertainty_sql
from .features import LIST_SEPARATOR, STUDENT_FIELDS
from .holdout import venue_held_out, venue_key
from .models import Scorer
from .roles import CENSUS, SAMPLE, direct_labels_key

BATCH_SIZE = 50_000


def _join_list(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each list of ``col`` joined by :data:`~.features.LIST_SEPARATOR`, its null entries left out (as
    :func:`~.features.student_text` does); a null list gives an empty string."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    flat, parents = pc.list_flatten(col), pc.list_parent_indices(col)
    keep = pc.is_valid(flat)
    counts = np.bincount(parents.filter(keep).to_numpy(), minlength=len(col))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    return pc.binary_join(pa.ListArray.from_arrays(offsets, pc.cast(flat.filter(keep), pa.string())), LIST_SEPARATOR)


def student_texts(batch: pa.RecordBatch | pa.Table) -> list[str]:
    """The title-only text of every row of ``batch`` (columns :data:`~.features.STUDENT_FIELDS`), equal to
    :func:`~.features.student_text` row by row, built by Arrow's string kernels instead of Python."""
    cols = []
    for f in STUDENT_FIELDS:
        col = batch.column(f)
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            col = _join_list(col)
        cols.append(pc.fill_null(pc.cast(col, pa.string()), ""))
    return pc.binary_join_element_wise(*cols, " | ").to_pylist()


def score_column(teacher: str, target: str) -> str:
    """Column name of a binary head's score in a scores table: ``<teacher>__<target>``."""
    return f"{teacher}__{target}"


def _list_column(probs: np.ndarray) -> pa.Array:
    flat = pa.array(probs.astype(np.float64).ravel())
    return pa.FixedSizeListArray.from_arrays(flat, probs.shape[1]).cast(pa.list_(pa.float64()))


def score_batch(bundle: Scorer, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The scores of one batch of frame rows (columns ``id``, ``venue_id`` and :data:`~.features.STUDENT_FIELDS`):
    ``id``, ``held_out`` (the work's venue is in the student's holdout, :func:`~.holdout.venue_held_out`), a float64
    score column per binary head (:func:`score_column`; null for a head that gives no score,
    :attr:`~.heads.BinaryHead.no_score_reason`), and per categorical head ``<teacher>__<target>`` (list of
    class probabilities, vocabulary order) and ``<teacher>__<target>__argmax`` (the most probable class). A pure
    function of its arguments, so a Dask worker computes exactly what this process would."""
    X = bundle.vectorizer.transform(student_texts(batch))
    cols = {
        "id": batch.column("id"),
        "held_out": pa.array(
            [
                venue_held_out(venue_key(w, v))
                for w, v in zip(batch.column("id").to_pylist(), batch.column("venue_id").to_pylist(), strict=False)
            ],
            pa.bool_(),
        ),
    }
    for teacher, heads in bundle.heads.items():
        for target, head in heads.items():
            s = head.score_samples(X)
            if target in CATEGORICAL_TARGETS:
                cols[score_column(teacher, target)] = _list_column(s)
                classes = np.array(CATEGORICAL_TARGETS[target], dtype=object)
                cols[f"{score_column(teacher, target)}__argmax"] = pa.array(
                    classes[s.argmax(axis=1)].tolist(), pa.string()
                )
            elif getattr(head, "no_score_reason", None) is not None:
                # a head that never saw both classes ranks nothing: no score (null), never its training rate
                cols[score_column(teacher, target)] = pa.nulls(len(s), pa.float64())
            else:
                cols[score_column(teacher, target)] = pa.array(np.asarray(s, dtype=np.float64))
    return pa.RecordBatch.from_pydict(cols)


def _on_cluster(
    bundle: Scorer, batches: Iterator[pa.RecordBatch], scheduler: str, log=None
) -> Iterator[pa.RecordBatch]:
    """:func:`score_batch` of every batch on the workers of the Dask scheduler at ``scheduler``, results in input
    order. The bundle is sent to every worker once; this process reads the frame and sends each batch (the workers
    need this package, not the data folder), keeping at most two batches per worker in flight, so its memory stays a
    few batches. A worker that dies loses its batch to another worker (Dask's retry); an error in a batch is raised
    here as it was raised there."""
    from collections import deque

    from ..frame.cluster import dask_client

    with dask_client(0, scheduler) as (client, where):
        if log is not None:
            log.info(f"student scoring on {where}")
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        shared = client.scatter(bundle, broadcast=True)
        pending: deque = deque()
        for batch in batches:
            pending.append(client.submit(score_batch, shared, batch, pure=False))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def score_batches(
    storage: MetacanStorage,
    bundle: Scorer,
    batch_size: int = BATCH_SIZE,
    progress: bool = True,
    log=None,
    scheduler: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Score every frame work with every head of ``bundle`` (``vectorizer``, ``heads`` {teacher: {target: head}}):
    one :func:`score_batch` per ``batch_size`` frame rows, in frame order; on the workers of the Dask scheduler at
    ``scheduler`` when given (``METACAN_DASK_SCHEDULER``, :func:`_on_cluster`), else in this process."""
    n_total = pq_rows(storage, "frame")
    bar = tqdm(total=n_total, unit="works", desc="student scoring", disable=None if progress else True, mininterval=1.0)
    done = 0
    frame = storage.iter_batches("frame", batch_size=batch_size, columns=["id", "venue_id", *STUDENT_FIELDS])
    scored = (
        _on_cluster(bundle, frame, scheduler, log) if scheduler is not None else (score_batch(bundle, b) for b in frame)
    )
    for out in scored:
        done += out.num_rows
        bar.update(out.num_rows)
        if log is not None:
            log.info(f"student scoring: {done:,} of {n_total:,} works")
        yield out
    bar.close()


def pq_rows(storage: MetacanStorage, table: str) -> int:
    """Row count of a warehouse table from its Parquet footers (no data read)."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in storage.table_dir(table).glob("*.parquet"))


#: DuckDB's memory in :func:`scratch_connection` (it spills beyond; DuckDB's default is 80% of RAM): picking
#: 200,000 census labels of a 4.3M-work frame (``training.teacher_call_labels``) stays near 1.4 GB instead of 4 GB.
SCRATCH_MEMORY = "1GB"


def scratch_connection(storage: MetacanStorage) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection (2 threads, :data:`SCRATCH_MEMORY`, spills to ``data/tmp``) with views over the
    warehouse tables the predictions read; it takes no lock on the catalog file."""
    con = duckdb.connect(config={"memory_limit": SCRATCH_MEMORY})
    con.execute("SET threads = 2")
    con.execute(f"SET temp_directory = {sql_literal(str(storage.root / 'tmp'))}")
    for name in ("student_scores", direct_labels_key(CENSUS), "frame"):
        if storage.has_table(name):
            con.execute(
                f"CREATE VIEW {name} AS SELECT * FROM read_parquet({sql_literal(str(storage.table_dir(name) / '*.parquet'))})"
            )
    return con


#: The work has a labelled gemma direct label (a failed or missing label is unknown, never a negative).
G_OK = "coalesce(g.g_ok, false)"


def _gemma_says(target: str) -> str:
    """DuckDB boolean: gemma's direct label asserts ``target`` (false when there is no labelled label)."""
    if target in CATEGORIES:
        return f"coalesce({G_OK} AND list_contains(g.categories, {sql_literal(target)}), false)"
    return f"coalesce({G_OK} AND g.{target}, false)"


def predictions_sql(
    model_version: str,
    quotas: dict[str, Quota],
    gated: dict[str, bool],
    scores: str = "student_scores",
    id_range: tuple[str, str] | None = None,
    census_counts: bool = True,
) -> str:
    """The DuckDB query that turns ``student_scores`` and the census teacher's direct labels
    (``direct_labels_gemma`` by default) into ``predictions``. "codex" below is the sample teacher
    (:data:`~.roles.SAMPLE`), "gemma" the census teacher (:data:`~.roles.CENSUS`); the published column
    names keep the default names.

    ``quotas``: the quota of every gated binary codex head; ``gated``: the support-gate result of every
    head (categorical heads get a codex value only when gated). Columns and meanings: SPEC section 6,
    schema :data:`~metacan_pipeline.tables.student.PRED_SCHEMA`. ``scores``: the relation of scores to predict (a part of
    ``student_scores``); ``id_range``: (lowest, highest) id in it, so that only the gemma labels of that
    range enter the join (the join's memory is then one part's labels, not the frame's).
    ``census_counts``: False when the census teacher failed its qualification test: its direct labels are
    still published (``<field>_gemma``, ``teacher_disagreement_score``) but enter no candidate or consensus.
    """

    def gemma_says(t: str) -> str:
        return _gemma_says(t) if census_counts else "false"

    def codex(t: str) -> str:
        return quotas[t].decides_sql(f's."{score_column(SAMPLE, t)}"', "s.id") if t in quotas else "false"

    cand = ", ".join(f"CASE WHEN {codex(c)} OR {gemma_says(c)} THEN {sql_literal(c)} END" for c in CATEGORIES)
    cons = ", ".join(f"CASE WHEN {codex(c)} AND {gemma_says(c)} THEN {sql_literal(c)} END" for c in CATEGORIES)
    cols = [
        "s.id AS id",
        f"{sql_literal(model_version)} AS model_version",
        f"list_filter([{cand}], x -> x IS NOT NULL) AS candidate_categories",
        f"list_filter([{cons}], x -> x IS NOT NULL) AS consensus_categories",
        *(
            f"[{', '.join(f's.{score_column(t, c)}' for c in CATEGORIES)}] AS category_scores_{column}"
            for t, column in ((SAMPLE, "codex"), (CENSUS, "gemma"))
        ),
    ]
    for t in ABOUT_CA_TARGETS:
        cols += [
            f"({codex(t)} OR {gemma_says(t)}) AS {t}_candidate",
            f"({codex(t)} AND {gemma_says(t)}) AS {t}_consensus",
        ]
    for t in ABOUT_CA_TARGETS:
        cols += [f"s.{score_column(SAMPLE, t)} AS {t}_score_codex", f"s.{score_column(CENSUS, t)} AS {t}_score_gemma"]
    for t in CATEGORICAL_TARGETS:
        codex_val = f"s.{score_column(SAMPLE, t)}__argmax" if gated.get(t) else "NULL::VARCHAR"
        gemma_val = f"CASE WHEN {G_OK} THEN g.{t} END"
        counted = gemma_val if census_counts else "NULL::VARCHAR"
        cols += [
            f"s.{score_column(SAMPLE, t)} AS {t}_scores_codex",
            f"s.{score_column(CENSUS, t)} AS {t}_scores_gemma",
            f"{codex_val} AS {t}_codex",
            f"{gemma_val} AS {t}_gemma",
            f"{counted} AS {t}_candidate",
            f"CASE WHEN {counted} IS NOT NULL AND {codex_val} = {counted} THEN {counted} END AS {t}_consensus",
        ]
    # an absent (NULL) gemma about_ca value is unknown, not a 0: greatest() skips the NULL term
    disagreement = ", ".join(
        f"abs(s.{score_column(SAMPLE, t)} - {_gemma_says(t) if t in CATEGORIES else 'g.' + t}::INT)"
        for t in BINARY_TARGETS
    )
    uncertainty = [
        threshold_uncertainty_sql(f"s.{score_column(SAMPLE, t)}", q.threshold)
        for t, q in quotas.items()
        if q.threshold is not None
    ]
    cols += [
        f"CASE WHEN {G_OK} THEN greatest({disagreement}) END AS teacher_disagreement_score",
        (f"greatest({', '.join(uncertainty)})" if len(uncertainty) > 1 else (uncertainty[0] if uncertainty else "0.0"))
        + " AS threshold_uncertainty_score",
        f"{sql_literal(PREDICTION_STATUS)} AS prediction_status",
        "coalesce(g.status, 'missing') AS gemma_label_status",
    ]
    where = f"WHERE work_id BETWEEN {sql_literal(id_range[0])} AND {sql_literal(id_range[1])} " if id_range else ""
    return (
        f"WITH g AS (SELECT *, status = 'labelled' AS g_ok FROM {direct_labels_key(CENSUS)} {where}"
        "QUALIFY row_number() OVER (PARTITION BY work_id ORDER BY created_at DESC) = 1) "
        f"SELECT {', '.join(cols)} FROM {scores} s LEFT JOIN g ON g.work_id = s.id"
    )


def prediction_batches(
    con: duckdb.DuckDBPyConnection,
    storage: MetacanStorage,
    model_version: str,
    quotas: dict[str, Quota],
    gated: dict[str, bool],
    batch_size: int = BATCH_SIZE,
    census_counts: bool = True,
) -> Iterator[pa.RecordBatch]:
    """``predictions`` as record batches: :func:`predictions_sql` run once per ``student_scores`` file (one
    scoring batch, in file order), each joined with the gemma labels of its own id range only.

    The same rows as the single query over every file (whose row order was never defined either: DuckDB's
    two-thread join emits rows nearly, not exactly, in score order). Memory stays one batch of works: one
    query over the whole frame held every gemma label in the join's hash table, about 230 MiB per million
    labelled works (benchmarks/bench_student.py). The frame is written in id order, so each file's range
    holds about one batch of labels.
    """
    for path in sorted(storage.table_dir("student_scores").glob("*.parquet")):
        src = f"read_parquet({sql_literal(str(path))})"
        lo, hi = con.execute(f"SELECT min(id), max(id) FROM {src}").fetchone()
        if lo is None:
            continue
        sql = predictions_sql(model_version, quotas, gated, src, (lo, hi), census_counts=census_counts)
        yield from con.execute(sql).to_arrow_reader(batch_size)
