"""What the published records are built from: one DuckDB query (``record_inputs.sql``) over the Parquet tables
of the frame, the direct labels, the predictions, the machine scores, the lineage and the human codes, run one
range of frame ids at a time so memory stays bounded whatever the size of the frame (SPEC section 9).
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from ..storage import MetacanStorage, id_ranges, sql_literal
from ..student.reference_sets import reference_no_score, reference_score_columns
from ..vocab import NO_SCORE_SUFFIX

#: The query of :func:`record_inputs` (static; the relations it reads are views made per call).
RECORD_INPUTS_SQL = resources.files("metacan_pipeline.publish").joinpath("record_inputs.sql").read_text("utf-8")
#: The warehouse tables a record joins to the frame (besides the direct-label tables).
_INPUT_TABLES = ("frame", "predictions", "machine_scores", "work_lineage")
#: Joined when present (an empty relation of the same name otherwise): the human codes validation_report writes.
_OPTIONAL_TABLES = {
    "human_codes": "NULL::VARCHAR AS id, NULL::VARCHAR AS protocol_id",
    # Retraction Watch (metacan_pipeline.retraction): absent before its assets ran, then a work is "not checked"
    "work_retractions": "NULL::VARCHAR AS id, NULL::BIGINT AS rw_record_id, NULL::VARCHAR AS retraction_date",
    "retraction_watch_source": "NULL::VARCHAR AS rw_version, NULL::VARCHAR AS status",
}


def input_views(storage: MetacanStorage, label_tables: list[str], release_frame: Path | None = None) -> list[str]:
    """The ``CREATE VIEW`` statements :data:`RECORD_INPUTS_SQL` reads: one view per table of
    ``_INPUT_TABLES`` over its Parquet files, and ``direct_labels``, the rows of every table of
    ``label_tables`` (all must exist), or an empty relation when there is none; ``reference_scores``, the
    reference-set heads' score columns of ``student_scores`` (:func:`~metacan_pipeline.student.reference_sets.reference_score_columns`,
    none: an empty relation), and for a head that gives no score its reason in column ``<column>:no_score``; ``release_frame``, the ids of the
    newest release's frozen frame (``release_frame``: that Parquet file, or none before the first release);
    ``cascade_decisions`` (:func:`cascade_view`)."""

    def parquet(name: str) -> str:
        return f"read_parquet({sql_literal(str(storage.table_dir(name) / '*.parquet'))}, hive_partitioning=false)"

    views = [f"CREATE VIEW {name} AS SELECT * FROM {parquet(name)}" for name in _INPUT_TABLES]
    labels = " UNION ALL BY NAME ".join(f"SELECT * FROM {parquet(t)}" for t in label_tables)
    for name, empty in _OPTIONAL_TABLES.items():
        present = storage.has_table(name)
        views.append(
            f"CREATE VIEW {name} AS SELECT * FROM {parquet(name)}"
            if present
            else f"CREATE VIEW {name} AS SELECT {empty} WHERE false"
        )
    views.append(
        f"CREATE VIEW direct_labels AS {labels}"
        if labels
        else "CREATE VIEW direct_labels AS SELECT NULL::VARCHAR AS work_id, NULL::VARCHAR AS teacher WHERE false"
    )
    columns = reference_score_columns(storage)
    no_score = reference_no_score(storage)
    views.append(
        "CREATE VIEW reference_scores AS SELECT id, "
        + ", ".join(
            [f'"{c}"' for c in columns]
            + [f'{sql_literal(no_score[c])} AS "{c}{NO_SCORE_SUFFIX}"' for c in columns if c in no_score]
        )
        + f" FROM {parquet('student_scores')}"
        if columns
        else "CREATE VIEW reference_scores AS SELECT NULL::VARCHAR AS id WHERE false"
    )
    views.append(cascade_view(storage, parquet))
    views.append(
        f"CREATE VIEW release_frame AS SELECT id FROM read_parquet({sql_literal(str(release_frame))})"
        if release_frame is not None
        else "CREATE VIEW release_frame AS SELECT NULL::VARCHAR AS id WHERE false"
    )
    return views


#: The ``cascade_thresholds`` columns each cascade decision of a record carries (:mod:`.cascade_record`).
CASCADE_THRESHOLD_COLUMNS = (
    "teacher",
    "precision_target",
    "npv_target",
    "recall_target",
    "bound_level",
    "bound_method",
    "calibration_n",
    "calibration_positives",
    "positive_threshold",
    "positive_bound",
    "negative_threshold",
    "negative_bound",
    "negative_vacuous",
)


def cascade_view(storage: MetacanStorage, parquet) -> str:
    """The ``CREATE VIEW cascade_decisions`` statement: each row of ``cascade_decisions`` (id, head, score, decision,
    model version) with its head's ``cascade_thresholds`` row of the same model version (``parquet(name)``: the
    relation of a table's files); an empty relation before ``cascade_batch`` ran. A thresholds table written before
    it had ``bound_method`` was certified by the only bound there was then, Clopper-Pearson."""
    if not (storage.has_table("cascade_decisions") and storage.has_table("cascade_thresholds")):
        return "CREATE VIEW cascade_decisions AS SELECT NULL::VARCHAR AS id, NULL::VARCHAR AS target WHERE false"
    present = set(pq.read_schema(next(storage.table_dir("cascade_thresholds").glob("*.parquet"))).names)
    defaults = {"bound_method": "'clopper-pearson'"}
    picked = ", ".join(f"t.{c}" if c in present else f"{defaults[c]} AS {c}" for c in CASCADE_THRESHOLD_COLUMNS)
    return (
        f"CREATE VIEW cascade_decisions AS SELECT d.id, d.target, d.model_version, d.score, d.decision, {picked} "
        f"FROM {parquet('cascade_decisions')} d JOIN {parquet('cascade_thresholds')} t USING (model_version, target)"
    )


#: Frame works per range of ids that :func:`record_inputs` joins at a time: one query over the whole frame ran out of
#: DuckDB's 2 GB at 200,000 works (every joined table's hash table and the sort of every wide frame row).
RANGE_WORKS = 50_000
#: The relations :data:`RECORD_INPUTS_SQL` reads, and the column holding each one's work id.
_RANGED = {
    "frame": "id",
    "predictions": "id",
    "machine_scores": "id",
    "work_lineage": "id",
    "human_codes": "id",
    "work_retractions": "id",
    "release_frame": "id",
    "reference_scores": "id",
    "cascade_decisions": "id",
    "direct_labels": "work_id",
}


def ranged_connection(
    storage: MetacanStorage, label_tables: list[str], release_frame: Path | None, spill: Path | None = None
) -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB (2 GB, spilling under ``spill``, by default ``warehouse/.spill-records``, no catalog
    lock) with the input views of :func:`input_views` as ``<name>__all``; :func:`range_batches` narrows them to one
    range of ids. DuckDB processes spilling to one folder use the same file names and crash or read each other's
    blocks (two processes sorting past their memory limit in one folder can segfault): connections that may run
    side by side each need their own ``spill``."""
    spill = spill or storage.warehouse / ".spill-records"
    con = duckdb.connect(config={"memory_limit": "2GB", "temp_directory": str(spill)})
    for statement in input_views(storage, label_tables, release_frame):
        name = statement.split()[2]
        con.execute(statement.replace(f"CREATE VIEW {name} AS", f"CREATE VIEW {name}__all AS", 1))
    return con


def record_ranges(con: duckdb.DuckDBPyConnection, range_works: int) -> list[str]:
    """The ranges of frame ids joined at a time (:func:`metacan_pipeline.storage.id_ranges` of ``frame__all``)."""
    return id_ranges(con, "frame__all", range_works)


#: The relations :data:`RECORD_INPUTS_SQL` reads whole in every range (one row, not one per work).
_WHOLE = ("retraction_watch_source",)


def range_batches(con: duckdb.DuckDBPyConnection, where: str, batch_rows: int) -> Iterator[list[dict]]:
    for name, key in _RANGED.items():
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {name}__all WHERE {where.replace('{key}', key)}")
    for name in _WHOLE:
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {name}__all")
    for batch in con.execute(RECORD_INPUTS_SQL).to_arrow_reader(batch_rows):
        yield batch.to_pylist()


def record_inputs(
    storage: MetacanStorage, label_tables: list[str], batch_rows: int = 5000, release_frame: Path | None = None
) -> Iterator[list[dict]]:
    """Everything one record is built from, one dict per frame work in id order, in lists of ``batch_rows``:
    ``{"work": frame row, "labels": [direct label rows], "pred": prediction row or None, "machine": machine
    score row or None, "lineage": work_lineage row, "reference": the reference-set scores row or None,
    "in_release": in the newest release's frame, "cascade": the work's cascade decisions (:func:`cascade_view`), "rw_notices": the work's Retraction Watch notices (``work_retractions``
    rows), "rw_version": the Retraction Watch file read or None}``. One DuckDB query
    over the Parquet tables (its own in-memory connection, so no catalog lock is held) per range of
    :data:`RANGE_WORKS` frame ids, ranges ascending, each range's views filtered to its ids, streamed: memory stays at
    one range's joins and one batch, whatever the size of the frame (works with a NULL id, if any, come last, as
    ``ORDER BY id`` puts them). ``label_tables``: the ``direct_labels_<teacher>`` tables to read (each must exist)."""
    con = ranged_connection(storage, label_tables, release_frame)
    try:
        for where in record_ranges(con, RANGE_WORKS):
            yield from range_batches(con, where, batch_rows)
    finally:
        con.close()
