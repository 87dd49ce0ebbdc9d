"""The teachers stage's asset checks: ``<name>_covers_its_works`` for every registry teacher (:func:`covers_check`)."""

import dagster as dg
import duckdb
import pyarrow as pa

from ..storage import MetacanStorage, sql_literal
from .core.registry import TeacherSpec, direct_labels_table, load_registry
from .labelling import covered_ids


def covers_check(spec: TeacherSpec) -> dg.AssetChecksDefinition:
    """Blocking check ``<name>_covers_its_works``: every work the teacher covers has a row (a label or an
    explicit failure) in ``direct_labels_<name>``; a work deferred by ``max_works`` fails it."""

    @dg.asset_check(
        asset=direct_labels_table(spec.name),
        name=f"{spec.name}_covers_its_works",
        blocking=spec.coverage == "all",
        description=f"Every work teacher {spec.name} covers ({spec.coverage}) has a label or an explicit failure row.",
    )
    def _check(storage: MetacanStorage) -> dg.AssetCheckResult:
        return dg.AssetCheckResult(**coverage_gaps(storage, spec))

    return _check


def coverage_gaps(storage: MetacanStorage, spec: TeacherSpec) -> dict:
    """``passed`` and ``metadata`` of ``<name>_covers_its_works``: the covered works (:func:`~.core.labelling.covered_ids`
    of the frame) without a row in ``direct_labels_<name>``, counted in DuckDB over the Parquet files (the frame's
    ids are never a Python set)."""
    wanted = covered_ids(storage, spec)
    frame = sql_literal(str(storage.table_dir("frame") / "*.parquet"))
    labels = sql_literal(str(storage.table_dir(direct_labels_table(spec.name)) / "*.parquet"))
    storage.require("frame")
    storage.require(direct_labels_table(spec.name))
    con = duckdb.connect()
    try:
        covered = f"SELECT id FROM read_parquet({frame})"
        if wanted is not None:
            con.register("wanted", pa.table({"id": sorted(wanted)}))
            covered += " WHERE id IN (SELECT id FROM wanted)"
        gaps = f"FROM ({covered}) WHERE id NOT IN (SELECT work_id FROM read_parquet({labels}))"
        n_covered = con.execute(f"SELECT count(*) FROM ({covered})").fetchone()[0]
        n_missing = con.execute(f"SELECT count(*) {gaps}").fetchone()[0]
        first = [r[0] for r in con.execute(f"SELECT id {gaps} ORDER BY id LIMIT 20").fetchall()]
        failed = con.execute(f"SELECT count(*) FROM read_parquet({labels}) WHERE status = 'failed'").fetchone()[0]
    finally:
        con.close()
    return {
        "passed": n_missing == 0,
        "metadata": {
            "works_covered": n_covered,
            "works_without_label_or_failure": n_missing,
            "first_missing": dg.MetadataValue.json(first),
            "failed_labels": failed,
        },
    }


#: One coverage check per registry teacher (``METACAN_TEACHERS_FILE`` as read when the definitions load).
TEACHER_CHECKS = [covers_check(spec) for spec in load_registry().values()]
