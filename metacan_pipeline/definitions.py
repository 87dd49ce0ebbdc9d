"""The one Definitions object of metacan_pipeline: every stage's ``defs`` merged, with the whole-graph jobs,
the resources and the executor.

Loaded by ``dagster dev`` (workspace.yaml) and by ``metacan run``. Each stage declares its own assets, checks,
jobs, schedules and sensors in ``<stage>/definitions.py``; the resources read their defaults from the environment
when this module is imported (docs/configuration.md lists every setting).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import dagster as dg

from .audit import definitions as audit
from .frame import definitions as frame
from .frame.partitions import all_partitions_run_tags
from .publish import definitions as publish
from .release import definitions as release
from .resources import OpenAlexFiles, default_openalex_dirs
from .sampling import definitions as sampling
from .settings import split_dirs
from .site import definitions as site
from .storage import MetacanStorage, default_data_dir
from .student import definitions as student
from .tables.asset_columns import describe_columns
from .tables.checks import schema_checks
from .teachers import definitions as teachers
from .teachers.calling.server import EmbeddedLlamaServer

#: Each stage's ``defs``, in pipeline order. The stages' modules are imported, not their ``defs`` objects: Dagster
#: refuses a code location with more than one ``Definitions`` at module scope.
STAGES = [m.defs for m in (frame, sampling, teachers, student, audit, release, publish, site)]

#: The API refresh buys OpenAlex calls: it runs only in its own job (``api_refresh``), never as part
#: of ``metacan run``, ``make run``, the tests or the offline jobs below.
API_REFRESH = dg.AssetSelection.assets("openalex_api_refresh").required_multi_asset_neighbors()

#: The main job: the whole offline asset graph, checks included (blocking checks stop what is downstream).
#: Partitioned by ``openalex_partitions`` through ``frame_parts``: run it over the range of every
#: partition (``metacan run`` does, after ``frame_refresh`` has registered them).
metacan_all = dg.define_asset_job(
    "metacan_all",
    selection=dg.AssetSelection.all() - API_REFRESH,
    description="Materialize the whole graph but the API refresh: frame -> direct labels -> "
    "student -> records and pages.",
)
#: Everything after ``frame_refresh``, over a range of partitions (what ``metacan run`` runs second).
metacan_build = dg.define_asset_job(
    "metacan_build",
    selection=dg.AssetSelection.all()
    - API_REFRESH
    - dg.AssetSelection.assets("openalex_inventory", "canadian_entities").required_multi_asset_neighbors(),
    description="Everything downstream of frame_refresh: frame parts, frame, direct labels, student, records and pages.",
)


def build_resources(data_dir: str | None = None, openalex_dir: str | Path | Sequence[str | Path] | None = None) -> dict:
    """The resources with their environment defaults (docs/configuration.md); arguments override them.
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


defs = dg.Definitions.merge(
    *STAGES,
    dg.Definitions(
        asset_checks=[
            schema_checks(k.to_user_string() for stage in STAGES for a in stage.assets or () for k in a.keys)
        ],
        jobs=[metacan_all, metacan_build],
        resources=build_resources(),
        # One process per run: DuckDB takes one writer per file, and both teachers share one embedded server.
        executor=dg.in_process_executor,
    ),
)
# Every asset that has a catalog table declares its columns with their descriptions (the UI's column schema).
defs = describe_columns(defs)

#: Every asset and asset check of the graph, in stage order.
ALL_ASSETS = list(defs.assets or ())
ALL_CHECKS = list(defs.asset_checks or ())


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
