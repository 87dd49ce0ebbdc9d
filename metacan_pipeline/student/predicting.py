"""Writing the hybrid predictions of a published model version (SPEC section 6): ``student_scores``,
``prediction_thresholds`` and ``predictions``, and the summaries the ``predictions`` asset shows.

The scores are written batch by batch (:func:`~.scoring.score_batches`), the quotas and decisions are
computed by DuckDB over the scores' files (:func:`~.calibration.quota_calibrate`,
:func:`~.scoring.prediction_batches`): memory stays one batch of works.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..meta import table_metadata
from ..settings import dask_scheduler
from ..storage import MetacanStorage
from ..tables.student import PRED_SCHEMA, THRESHOLDS_SCHEMA, student_scores_schema
from ..vocab import BINARY_TARGETS
from .calibration import quota_calibrate
from .models import StudentBundle
from .roles import SAMPLE, TeacherStanding
from .scoring import BATCH_SIZE, pq_rows, prediction_batches, score_batches, score_column, scratch_connection


def current_model_version(storage: MetacanStorage) -> str:
    """The model version of the last ``student_heads`` materialization. Raises ValueError when there is none."""
    rows = storage.read_table("student_heads", ["model_version"]).column("model_version").unique().to_pylist()
    if not rows:
        raise ValueError("student_heads is empty: materialize student_heads first")
    return rows[0]


def threshold_rows(
    con: duckdb.DuckDBPyConnection, bundle: StudentBundle, not_qualified: str | None = None
) -> tuple[dict, list[dict]]:
    """The quota of every gated binary sample-teacher head over ``student_scores`` on ``con``, and one
    ``prediction_thresholds`` row per binary target (k, threshold and boundary id NULL for an ungated head).
    ``not_qualified``: why the sample teacher's labels may not decide (it failed its qualification test,
    :mod:`metacan_pipeline.teachers.qualification`); then no head decides and that is the gate reason."""
    gates, rates = bundle.gates, bundle.rates
    quotas = {
        t: quota_calibrate(con, "student_scores", f'"{score_column(SAMPLE, t)}"', rates[t], t)
        for t in BINARY_TARGETS
        if gates[t].passed and not not_qualified
    }
    n_scored = con.execute("SELECT count(*) FROM student_scores").fetchone()[0]
    rows = [
        {
            "model_version": bundle.model_version,
            "target": t,
            "gate_passed": gates[t].passed and not not_qualified,
            "gate_reason": f"sample {not_qualified}" if not_qualified else gates[t].reason,
            "rate": rates[t],
            "n": n_scored,
            **(
                {k: v for k, v in quotas[t].as_dict().items() if k in ("k", "threshold", "boundary_id")}
                if t in quotas
                else {"k": None, "threshold": None, "boundary_id": None}
            ),
        }
        for t in BINARY_TARGETS
    ]
    return quotas, rows


def write_predictions(
    storage: MetacanStorage,
    bundle: StudentBundle,
    batch_size: int = BATCH_SIZE,
    log=None,
    progress: bool = True,
    qualification: TeacherStanding | None = None,
) -> tuple[int, list[dict]]:
    """Score the frame with ``bundle`` and write ``student_scores``, ``predictions`` and
    ``prediction_thresholds``; returns (works predicted, threshold rows). Memory: one batch of works. The scoring
    runs on the Dask scheduler of ``METACAN_DASK_SCHEDULER`` when it is set (:func:`.scoring.score_batches`).
    ``qualification``: which role teachers passed their qualification test (default: both did); a teacher
    that did not decides nothing: no sample-teacher decision, or no census label in candidate and consensus."""
    standing = qualification or TeacherStanding()
    scores = score_batches(storage, bundle, batch_size, progress=progress, log=log, scheduler=dask_scheduler())
    storage.write_table("student_scores", scores)
    with scratch_connection(storage) as con:
        quotas, thresholds = threshold_rows(con, bundle, standing.sample_not_qualified)
        gated = {t: g.passed and not standing.sample_not_qualified for t, g in bundle.gates.items()}
        n = storage.write_table(
            "predictions",
            prediction_batches(
                con,
                storage,
                bundle.model_version,
                quotas,
                gated,
                batch_size,
                census_counts=not standing.census_not_qualified,
            ),
            schema=PRED_SCHEMA,
        )
    storage.write_table("prediction_thresholds", pa.Table.from_pylist(thresholds, schema=THRESHOLDS_SCHEMA))
    return n, thresholds


def scores_metadata(storage: MetacanStorage, model_version: str) -> dict:
    """Metadata of ``student_scores``: row count from the Parquet footers, the written schema (one column
    per head, each described) and the model version. ``write_table`` always leaves at least one file."""
    storage.require("student_scores")
    schema = student_scores_schema(pq.read_schema(min(storage.table_dir("student_scores").glob("*.parquet"))))
    return table_metadata(schema, pq_rows(storage, "student_scores"), None, None, model_version=model_version)


def category_counts(storage: MetacanStorage) -> tuple[dict[str, int], dict[str, int], list[dict]]:
    """``(candidate works per category, consensus works per category, the first 5 predictions)``."""
    with duckdb.connect() as con:
        pattern = str(storage.table_dir("predictions") / "*.parquet")
        counts = [
            dict(
                con.execute(
                    f"SELECT c, count(*) FROM (SELECT unnest({col}) c FROM read_parquet(?)) GROUP BY c", [pattern]
                ).fetchall()
            )
            for col in ("candidate_categories", "consensus_categories")
        ]
        preview = con.execute("SELECT * FROM read_parquet(?) LIMIT 5", [pattern]).to_arrow_table().to_pylist()
    return counts[0], counts[1], preview
