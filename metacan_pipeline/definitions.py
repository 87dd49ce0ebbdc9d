"""The one Definitions object: assets, checks, resources, jobs and schedules of metacan_pipeline.

Loaded by ``dagster dev`` (workspace.yaml) and by ``metacan run``. Resources read their defaults
from the environment when this module is imported:

- ``METACAN_DATA_DIR`` (default ``data``): warehouse, DuckDB file, site, logs.
- ``METACAN_OPENALEX_DIR`` (default ``../shared/data/openalex``): the OpenAlex input folder, or several
  separated by ``os.pathsep`` (``:``), read together.
- ``METACAN_TEACHERS_FILE`` (default: the packaged ``teachers/teachers.toml``): the teacher registry, one
  ``direct_labels_<name>`` asset per teacher; ``METACAN_<NAME>_BASE_URL`` / ``_MODEL`` / ``_API_KEY_ENV`` /
  ``_PROMPT_VERSION`` override a teacher's endpoint.
- ``METACAN_OPENALEX_API_URL`` and ``OPENALEX_API_KEY``: the OpenAlex API for ``openalex_api_refresh``
  (job ``api_refresh``, schedule ``weekly_api_refresh``, stopped by default: it buys API calls) and for the
  abstracts ``work_pages`` fetches live.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from .audit.assets import audit_protocol, audit_sample, validation_report
from .audit.checks import audit_sample_partitions_frame
from .audit.coding_assets import coding_tasks
from .frame.api_refresh import openalex_api_refresh
from .frame.assets import canadian_entities, frame, frame_parts, openalex_inventory
from .frame.checks import (
    frame_build_manifest_covers_snapshot,
    frame_ids_unique,
    frame_routes_have_evidence,
    frame_stores_no_abstract_text,
)
from .frame.partitions import openalex_partitions
from .openalex.folders import split_dirs
from .publish.assets import records_may_ship, work_pages, work_records
from .publish.checks import records_human_layers_backed
from .release.assets import release, release_matches_its_hashes
from .resources import OpenAlexFiles, default_openalex_dirs
from .sampling.assets import sample_design, sample_design_partitions_frame
from .site.assets import site_database
from .storage import MetacanStorage, default_data_dir
from .student.assets import machine_scores, predictions, student_heads
from .student.checks import PREDICTION_CHECKS
from .student.prevalence import prevalence
from .teachers.agreement import teacher_agreement
from .teachers.assets import TEACHER_ASSETS, TEACHER_CHECKS, teacher_qualification
from .teachers.batches import label_batches
from .teachers.import_assets import imported_labels
from .teachers.server import EmbeddedLlamaServer

ALL_ASSETS = [
    openalex_api_refresh,
    openalex_inventory,
    canadian_entities,
    frame_parts,
    frame,
    sample_design,
    *TEACHER_ASSETS.values(),
    imported_labels,
    teacher_agreement,
    teacher_qualification,
    student_heads,
    predictions,
    prevalence,
    machine_scores,
    label_batches,
    work_records,
    work_pages,
    site_database,
    release,
    audit_protocol,
    audit_sample,
    coding_tasks,
    validation_report,
]
ALL_CHECKS = [
    frame_ids_unique,
    frame_routes_have_evidence,
    frame_stores_no_abstract_text,
    frame_build_manifest_covers_snapshot,
    sample_design_partitions_frame,
    *TEACHER_CHECKS,
    *PREDICTION_CHECKS,
    records_may_ship,
    release_matches_its_hashes,
    records_human_layers_backed,
    audit_sample_partitions_frame,
]

#: The API refresh buys OpenAlex calls: it runs only in its own job (``api_refresh``), never as part
#: of ``metacan run``, ``make run``, the tests or the offline jobs below.
API_REFRESH = dg.AssetSelection.assets(openalex_api_refresh)

#: The main job: the whole offline asset graph, checks included (blocking checks stop what is downstream).
#: Partitioned by ``openalex_partitions`` through ``frame_parts``: run it over the range of every
#: partition (``metacan run`` does, after ``frame_refresh`` has registered them).
metacan_all = dg.define_asset_job(
    "metacan_all",
    selection=dg.AssetSelection.all() - API_REFRESH,
    description="Materialize the whole graph but the API refresh: frame -> direct labels -> "
    "student -> records and pages.",
)
#: The frame refresh: take stock of the inputs (registers new partitions) and rebuild the entity lists.
frame_refresh = dg.define_asset_job(
    "frame_refresh",
    selection=dg.AssetSelection.assets(openalex_inventory, canadian_entities),
    description="Take stock of the OpenAlex inputs and rebuild the Canadian entity lists; "
    "the sensor frame_build_after_refresh then builds the new parts and the frame.",
)
#: Build the parts of the given partitions (already built ones are skipped unread) and merge the frame.
frame_build = dg.define_asset_job(
    "frame_build",
    selection=dg.AssetSelection.assets(frame_parts, frame),
    description="Build unbuilt frame parts and merge the frame (run over a partition range).",
)
#: Everything after ``frame_refresh``, over a range of partitions (what ``metacan run`` runs second).
metacan_build = dg.define_asset_job(
    "metacan_build",
    selection=dg.AssetSelection.all() - API_REFRESH - dg.AssetSelection.assets(openalex_inventory, canadian_entities),
    description="Everything downstream of frame_refresh: frame parts, frame, direct labels, student, records and pages.",
)
#: The API refresh: harvest the next updated_date window (needs canadian_entities), then take stock,
#: which registers the window's partition; the sensor frame_build_after_refresh builds it and merges the frame.
api_refresh = dg.define_asset_job(
    "api_refresh",
    selection=dg.AssetSelection.assets(openalex_api_refresh, openalex_inventory),
    description="Harvest the OpenAlex API for the works updated since the last completed window (buys API calls), then "
    "take stock of the inputs; the sensor frame_build_after_refresh then builds the window's parts and merges the frame.",
)


def monday_schedule(job: dg.UnresolvedAssetJobDefinition, hour: int, running: bool, description: str):
    """``weekly_<job>``: Mondays at ``hour``:00 Toronto time, running by default or stopped."""
    status = dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED
    return dg.ScheduleDefinition(
        name=f"weekly_{job.name}", job=job, cron_schedule=f"0 {hour} * * 1", execution_timezone="America/Toronto",
        default_status=status, description=description,
    )  # fmt: skip


weekly_api_refresh = monday_schedule(
    api_refresh,
    4,
    running=False,
    description="Weekly OpenAlex API refresh, Mondays 04:00 Toronto time (after weekly_frame_refresh). Stopped by default "
    "because it buys API calls: start it once OPENALEX_API_KEY is set and the per-day budget "
    "(openalex_api_refresh config max_calls / max_cost_usd) suits you.",
)
weekly_frame_refresh = monday_schedule(
    frame_refresh,
    3,
    running=True,
    description="Weekly frame refresh, Mondays 03:00 Toronto time: takes stock of the input folders (offline, free); the sensor "
    "frame_build_after_refresh then builds the new parts and merges the frame. Runs while the Dagster daemon runs.",
)


def all_partitions_run_tags(instance: dg.DagsterInstance) -> dict[str, str]:
    """Run tags that select every registered ``openalex_partitions`` key as one range (a single-run
    backfill: ``frame_parts`` gets them all and builds their files in parallel)."""
    keys = instance.get_dynamic_partitions(openalex_partitions.name)
    if not keys:
        raise ValueError(
            "no openalex_partitions registered yet: materialize openalex_inventory first (job frame_refresh)"
        )
    return {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}


@dg.asset_sensor(
    asset_key=openalex_inventory.key,
    job=frame_build,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="After each inventory, build the parts not built yet (all partitions, one run) and merge the frame.",
)
def frame_build_after_refresh(context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry):
    """One ``frame_build`` run per ``openalex_inventory`` materialization, over every partition;
    finished parts are skipped without being read, so only new or changed files cost time."""
    yield dg.RunRequest(run_key=asset_event.run_id, tags=all_partitions_run_tags(context.instance))


def materialize_in_process(
    instance: dg.DagsterInstance, resources: dict, through: str = "all"
) -> dg.ExecuteInProcessResult:
    """Materialize the graph in this process as the UI would: ``frame_refresh`` (the inventory
    registers the partitions, the entity lists), then one run over every partition of the rest:
    all assets when ``through="all"``, the frame's parts and the frame when ``through="frame"``
    (checks included). Returns the last run's result (the first one's if it failed); never raises
    for a failed step (``raise_on_error=False``: read ``result.success``)."""
    first = defs.resolve_job_def("frame_refresh").execute_in_process(
        instance=instance, resources=resources, raise_on_error=False
    )
    if not first.success:
        return first
    job = defs.resolve_job_def("frame_build" if through == "frame" else "metacan_build")
    return job.execute_in_process(
        instance=instance, resources=resources, raise_on_error=False, tags=all_partitions_run_tags(instance)
    )


def build_resources(data_dir: str | None = None, openalex_dir: str | Path | Sequence[str | Path] | None = None) -> dict:
    """The resources with their environment defaults (see module doc); arguments override them.
    ``openalex_dir``: one folder, several separated by ``os.pathsep``, or a list of folders."""
    data = data_dir or default_data_dir()
    if openalex_dir is None or openalex_dir == "":
        dirs = default_openalex_dirs()
    elif isinstance(openalex_dir, (str, Path)):
        dirs = split_dirs(str(openalex_dir))
    else:
        dirs = [str(d) for d in openalex_dir]
    return {
        "storage": MetacanStorage(data_dir=data),
        "openalex": OpenAlexFiles(input_dirs=dirs, api_archive_dir=str(Path(data) / "openalex_api")),
        "llm_server": EmbeddedLlamaServer(log_dir=str(Path(data) / "logs")),
    }


defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=ALL_CHECKS,
    jobs=[metacan_all, metacan_build, frame_refresh, frame_build, api_refresh],
    schedules=[weekly_frame_refresh, weekly_api_refresh],
    sensors=[frame_build_after_refresh],
    resources=build_resources(),
    # One process per run: DuckDB takes one writer per file, and both teachers share one embedded server.
    executor=dg.in_process_executor,
)
