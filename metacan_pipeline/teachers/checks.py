"""The teachers stage's asset checks: ``<name>_covers_its_works`` for every registry teacher (:func:`covers_check`)
and, a warning, ``<name>_qualified`` for the two role teachers (:func:`qualified_check`)."""

import dagster as dg
import duckdb
import pyarrow as pa

from ..storage import MetacanStorage, sql_literal
from .core.registry import TeacherSpec, direct_labels_table, load_registry, load_roles
from .labelling import covered_ids
from .qualification import TO_QUALIFY, load_qualification, qualification_standing


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


def qualification_result(storage: MetacanStorage, spec: TeacherSpec) -> dict:
    """``passed`` and ``metadata`` of ``<name>_qualified``: passed when the newest ``teacher_qualification`` row of
    the teacher's current configuration says qualified; the metadata name the teacher, its status, kappa, the kappa
    needed, when it was tested, and (failing) what would change it."""
    s = qualification_standing(storage, spec, load_qualification())
    metadata = {
        "teacher": spec.name,
        "status": s["status"],
        "kappa": s["kappa"] if s["kappa"] is not None else "n/a",
        "needed_kappa": s["needed_kappa"] if s["needed_kappa"] is not None else "n/a",
        "tested_at": s["tested_at"] or "never tested",
        "note": s["note"],
    }
    if not s["qualified"]:
        metadata["what_would_change_it"] = TO_QUALIFY
    return {"passed": s["qualified"], "metadata": metadata}


def qualified_check(spec: TeacherSpec) -> dg.AssetChecksDefinition:
    """Warning check ``<name>_qualified`` on ``direct_labels_<name>``: fails (severity WARN, never blocking) while the
    teacher has not passed its qualification test (:func:`qualification_result`). It runs after
    ``teacher_qualification`` when both are in a run, so it reads that run's result."""

    @dg.asset_check(
        asset=direct_labels_table(spec.name),
        name=f"{spec.name}_qualified",
        blocking=False,
        additional_deps=["teacher_qualification"],
        description=f"Teacher {spec.name} passed its qualification test against the frontier reference set. "
        "A warning while it has not: its direct labels are shown as not qualified and decide nothing. "
        "The metadata give its kappa, the kappa it needs, when it was tested and what would change it.",
    )
    def _check(storage: MetacanStorage) -> dg.AssetCheckResult:
        return dg.AssetCheckResult(**qualification_result(storage, spec), severity=dg.AssetCheckSeverity.WARN)

    return _check


#: One coverage check per registry teacher (``METACAN_TEACHERS_FILE`` as read when the definitions load), and a
#: qualification warning for each role teacher (the teachers whose labels the predictions and the map show).
TEACHER_CHECKS = [covers_check(spec) for spec in load_registry().values()] + [
    qualified_check(load_registry()[name]) for name in sorted(set(load_roles().values()))
]
