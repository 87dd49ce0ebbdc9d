"""The one Definitions object of metacan_pipeline: every stage's ``defs`` merged, with the whole-graph jobs,
the resources and the executor.

Loaded by ``dagster dev`` (workspace.yaml) and by ``metacan run``. Each stage declares its own assets, checks,
jobs, schedules and sensors in ``<stage>/definitions.py``; the resources read their defaults from the environment
when this module is imported (docs/configuration.md lists every setting).
"""

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import dagster as dg
from pydantic import Field

from . import settings
from .audit import definitions as audit
from .audit.instruments.venues import load_venue_list
from .frame import definitions as frame
from .frame.partitions import all_partitions_run_tags, openalex_partitions
from .frame.schedules import WHOLE_GRAPH_TAG
from .publish import definitions as publish
from .release import definitions as release
from .resources import OpenAlexFiles, default_openalex_dirs
from .retraction import definitions as retraction
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
STAGES = [m.defs for m in (frame, retraction, sampling, teachers, student, audit, release, publish, site)]

#: The API refresh buys OpenAlex calls: it runs only in its own job (``api_refresh``), never as part
#: of ``metacan run``, ``make run``, the tests or the offline jobs below.
API_REFRESH = dg.AssetSelection.assets("openalex_api_refresh").required_multi_asset_neighbors()

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


class WholeGraphConfig(dg.Config):
    """What the one-click job runs besides the default graph; the default (nothing to set) is the graph ``metacan run``
    materializes."""

    api_refresh: bool = Field(
        default=False,
        description="Also harvest the OpenAlex API (job api_refresh, asset openalex_api_refresh) after the frame "
        "refresh: this buys API calls (OPENALEX_API_KEY, the budget of its config). Off by default.",
    )


#: The resources of the runs the one-click job launches: its own run's, passed on.
WHOLE_GRAPH_RESOURCES = ("storage", "openalex", "llm_server")


@dg.op(
    required_resource_keys=set(WHOLE_GRAPH_RESOURCES),
    description="Materialize the whole default graph as `metacan run` does: the run frame_refresh (the inventory "
    "registers the frame's partitions), then one metacan_build run over every partition. Each is a run of its own, "
    "linked from this step's output metadata; this step fails when one of them fails. The OpenAlex API refresh (buys "
    "API calls) runs only when the config sets api_refresh: true.",
)
def materialize_whole_graph(context: dg.OpExecutionContext, config: WholeGraphConfig) -> dg.Output[None]:
    """Runs :func:`whole_graph_runs` on this run's instance with this run's resources, each run tagged
    :data:`WHOLE_GRAPH_TAG` with this run's id; logs each run as it ends and links them in the output metadata.
    Raises dg.Failure (never retried) for a bad setting before anything runs and for the first run that fails."""
    resources = {key: getattr(context.resources, key) for key in WHOLE_GRAPH_RESOURCES}
    try:
        check_run_settings(resources)
    except ValueError as exc:
        raise dg.Failure(description=f"metacan_all: {exc}", allow_retries=False) from None
    links: dict[str, dg.MetadataValue] = {}
    for job_name, result, seconds in whole_graph_runs(
        context.instance, resources, api_refresh=config.api_refresh, tags={WHOLE_GRAPH_TAG: context.run_id}
    ):
        links[f"{job_name} run"] = dg.MetadataValue.dagster_run(result.run_id)
        if not result.success:
            failed = sorted({e.step_key for e in result.all_events if e.is_step_failure})
            raise dg.Failure(
                description=f"{job_name} run {result.run_id} failed after {seconds:.0f}s at step(s) {failed}: open "
                "that run for its log, fix the cause, then launch metacan_all again (finished work is kept)",
                metadata=links,
                allow_retries=False,
            )
        context.log.info(f"{job_name} run {result.run_id} succeeded in {seconds:.0f}s")
    partitions = context.instance.get_dynamic_partitions(openalex_partitions.name)
    return dg.Output(
        None,
        metadata={
            **links,
            "partitions": dg.MetadataValue.int(len(partitions)),
            "partition range": dg.MetadataValue.text(
                partitions[0] if len(partitions) == 1 else f"{partitions[0]} to {partitions[-1]}"
            ),
            "api_refresh": dg.MetadataValue.bool(config.api_refresh),
        },
    )


#: The one-click job: the whole default graph without choosing a partition (its Launchpad needs no config).
metacan_all = dg.JobDefinition(
    graph_def=dg.GraphDefinition(name="metacan_all", node_defs=[materialize_whole_graph]),
    description="One click runs the whole graph but the API refresh, as `metacan run` does: frame_refresh, then "
    "metacan_build over every partition of the frame (frame -> direct labels -> student -> records and pages). Each is "
    "a run of its own, linked from this run's output; set api_refresh: true in the Launchpad to also buy the OpenAlex "
    "API refresh.",
)


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


def check_run_settings(resources: dict) -> None:
    """Read the settings a whole-graph run reads late, before anything runs: ``METACAN_LLAMA_THREADS`` (the teachers'
    server), ``METACAN_PARTS_URL`` (``frame_parts``, hours into a run on a large frame), ``METACAN_RECORD_WORKERS``
    (``work_records``, near the end), ``METACAN_DAGSTER_UI_URL`` and the abstract cascade's settings
    (``METACAN_ABSTRACT_SOURCES``, ``METACAN_OPENALEX_API_URL``, ``METACAN_EUROPEPMC_API_URL``,
    ``METACAN_CROSSREF_API_URL``, ``METACAN_ABSTRACT_MAILTO``, ``METACAN_PAGE_ENCODING``, ``METACAN_REPORT_URL``:
    ``work_pages``, at the end) and the venue reference set of ``METACAN_REFERENCE_VENUES_FILE``
    (``venue_known_item_recall``, in the audit stage). Raises ValueError naming the bad one."""
    resources["llm_server"].threads()
    settings.parts_url()
    settings.record_workers()
    settings.dagster_ui_url()
    settings.abstract_sources()
    settings.openalex_api_url()
    settings.europepmc_api_url()
    settings.crossref_api_url()
    settings.abstract_mailto()
    settings.page_encoding()
    settings.report_url()
    load_venue_list()


def whole_graph_runs(
    instance: dg.DagsterInstance,
    resources: dict,
    through: str = "all",
    api_refresh: bool = False,
    tags: dict[str, str] | None = None,
) -> Iterator[tuple[str, dg.ExecuteInProcessResult, float]]:
    """Materialize the graph in this process, one run after another, yielding ``(job name, result, seconds)`` as each
    ends and stopping after one that failed (``raise_on_error=False``: read ``result.success``): ``frame_refresh``
    (the inventory registers the partitions, the entity lists), with ``api_refresh`` the job ``api_refresh`` (buys
    OpenAlex API calls; its inventory registers the new window), then one run over every partition of the rest: all
    assets when ``through="all"``, the frame's parts and the frame when ``through="frame"`` (checks included). Every
    run gets ``tags`` (default: :data:`WHOLE_GRAPH_TAG` set to ``metacan run``)."""
    tags = tags if tags is not None else {WHOLE_GRAPH_TAG: "metacan run"}
    names = ["frame_refresh", *(["api_refresh"] if api_refresh else [])]
    for name in [*names, "frame_build" if through == "frame" else "metacan_build"]:
        run_tags = tags if name in names else {**tags, **all_partitions_run_tags(instance)}
        t0 = time.monotonic()
        result = defs.resolve_job_def(name).execute_in_process(
            instance=instance, resources=resources, raise_on_error=False, tags=run_tags
        )
        yield name, result, time.monotonic() - t0
        if not result.success:
            return


def materialize_in_process(
    instance: dg.DagsterInstance, resources: dict, through: str = "all"
) -> dg.ExecuteInProcessResult:
    """Materialize the graph in this process as ``metacan run`` does (:func:`whole_graph_runs`): ``frame_refresh``,
    then one run over every partition of the rest. Returns the last run's result (the first one's if it failed);
    never raises for a failed step (read ``result.success``)."""
    _, last, _ = list(whole_graph_runs(instance, resources, through))[-1]
    return last
