"""The one Definitions object: assets, checks, resources, jobs and schedules of metacan_pipeline.

Loaded by ``dagster dev`` (workspace.yaml) and by ``metacan run``. Resources read their defaults
from the environment when this module is imported:

- ``METACAN_DATA_DIR`` (default ``data``): warehouse, DuckDB file, site, logs.
- ``METACAN_OPENALEX_DIR`` (default ``../shared/data/openalex``): the OpenAlex input files.
- ``METACAN_<GEMMA|CODEX>_BASE_URL`` / ``_MODEL`` / ``_API_KEY_ENV`` / ``_PROMPT_VERSION``: teachers.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from .frame.assets import canadian_entities, frame, frame_ids_unique, frame_routes_have_evidence, openalex_works
from .publish.assets import records_may_ship, work_pages, work_records
from .resources import OpenAlexFiles, default_openalex_dir
from .sampling.assets import sample_design, sample_design_partitions_frame
from .storage import MetacanStorage, default_data_dir
from .student.assets import machine_scores, predictions, student_heads
from .teachers.assets import direct_labels_codex, direct_labels_gemma, gemma_covers_frame
from .teachers.server import EmbeddedLlamaServer
from .teachers.settings import TeacherSettings

ALL_ASSETS = [
    openalex_works, canadian_entities, frame, sample_design, direct_labels_gemma, direct_labels_codex,
    student_heads, predictions, machine_scores, work_records, work_pages,
]
ALL_CHECKS = [frame_ids_unique, frame_routes_have_evidence, sample_design_partitions_frame, gemma_covers_frame, records_may_ship]

#: The main job: the whole asset graph, checks included (blocking checks stop what is downstream).
metacan_all = dg.define_asset_job("metacan_all", selection=dg.AssetSelection.all(),
                                  description="Materialize the whole graph: frame -> direct labels -> student -> records and pages.")
#: The frame refresh: ingestion only (entities, works, frame).
frame_refresh = dg.define_asset_job("frame_refresh", selection=dg.AssetSelection.groups("ingestion"),
                                    description="Re-read the OpenAlex inputs and rebuild the frame.")
weekly_frame_refresh = dg.ScheduleDefinition(name="weekly_frame_refresh", job=frame_refresh, cron_schedule="0 3 * * 1", execution_timezone="America/Toronto",
                                             description="Weekly frame refresh, Mondays 03:00 Toronto time.")


def build_resources(data_dir: str | None = None, openalex_dir: str | None = None) -> dict:
    """The resources with their environment defaults (see module doc); arguments override them."""
    data = data_dir or default_data_dir()
    return {
        "storage": MetacanStorage(data_dir=data),
        "openalex": OpenAlexFiles(input_dir=openalex_dir or default_openalex_dir()),
        "teacher_gemma": TeacherSettings.from_env("gemma", record_view="title_only", coverage="all"),
        "teacher_codex": TeacherSettings.from_env("codex", record_view="title_abstract", coverage="sample"),
        "llm_server": EmbeddedLlamaServer(log_dir=str(Path(data) / "logs")),
    }


defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=ALL_CHECKS,
    jobs=[metacan_all, frame_refresh],
    schedules=[weekly_frame_refresh],
    resources=build_resources(),
    # One process per run: DuckDB takes one writer per file, and both teachers share one embedded server.
    executor=dg.in_process_executor,
)
