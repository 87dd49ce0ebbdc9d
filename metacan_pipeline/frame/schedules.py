"""The frame's refresh jobs, their weekly schedules, the optional daily refresh by publication date and the sensor
that builds the frame after each inventory.

Jobs select assets by key, so this module imports no asset definition.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import dagster as dg
from dagster._core.storage.tags import BACKFILL_ID_TAG

from .. import settings
from ..openalex.windows import PUBLISHED
from .partitions import all_partitions_run_tags

#: The tag of every run that is one step of a whole-graph materialization (``metacan run``, the job ``metacan_all``):
#: its value names what launched it (``metacan run``, or the ``metacan_all`` run's id). Such a materialization builds
#: the frame itself, so :func:`frame_build_after_refresh` leaves its inventories alone.
WHOLE_GRAPH_TAG = "metacan/whole_graph"
FRAME_KEY = dg.AssetKey("frame")

#: The frame refresh: take stock of the inputs (registers new partitions) and rebuild the entity lists.
frame_refresh = dg.define_asset_job(
    "frame_refresh",
    selection=dg.AssetSelection.assets("openalex_inventory", "canadian_entities").required_multi_asset_neighbors(),
    description="Take stock of the OpenAlex inputs and rebuild the Canadian entity lists; "
    "the sensor frame_build_after_refresh then builds the new parts and the frame.",
)
#: Build the parts of the given partitions (already built ones are skipped unread) and merge the frame.
frame_build = dg.define_asset_job(
    "frame_build",
    selection=dg.AssetSelection.assets("frame_parts", "frame").required_multi_asset_neighbors(),
    description="Build unbuilt frame parts and merge the frame (run over a partition range).",
)
#: The API refresh: harvest the next updated_date window (needs canadian_entities), then take stock,
#: which registers the window's partition; the sensor frame_build_after_refresh builds it and merges the frame.
api_refresh = dg.define_asset_job(
    "api_refresh",
    selection=dg.AssetSelection.assets("openalex_api_refresh", "openalex_inventory").required_multi_asset_neighbors(),
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

#: The daily refresh's time zone and hour (after the weekly refreshes' Monday hours, so they never start together).
DAILY_TIMEZONE, DAILY_HOUR = "America/Toronto", 5


def publication_run_config(day: dt.date, days: int) -> dict:
    """The ``api_refresh`` run config of the daily refresh on ``day``: publication dates from ``days`` days before it
    to ``day``, both inclusive (:func:`metacan_pipeline.openalex.windows.publication_window` with both dates given)."""
    return {
        "ops": {
            "openalex_api_refresh": {
                "config": {
                    "window_by": PUBLISHED,
                    "from_publication_date": (day - dt.timedelta(days=days)).isoformat(),
                    "to_publication_date": day.isoformat(),
                }
            }
        }
    }


@dg.schedule(
    name="daily_publication_refresh",
    job=api_refresh,
    cron_schedule=f"0 {DAILY_HOUR} * * *",
    execution_timezone=DAILY_TIMEZONE,
    default_status=(
        dg.DefaultScheduleStatus.RUNNING if settings.publication_refresh() else dg.DefaultScheduleStatus.STOPPED
    ),
    description="Daily OpenAlex API refresh by publication date, 05:00 Toronto time: the works published in the "
    f"${settings.PUBLICATION_WINDOW_DAYS_ENV} days (default {settings.DEFAULT_PUBLICATION_WINDOW_DAYS}) before the "
    "day, besides the weekly refresh by updated date. Stopped unless METACAN_PUBLICATION_REFRESH=on, because it buys "
    "API calls every day (the day's budget is shared with the weekly refresh).",
)
def daily_publication_refresh(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    """One ``api_refresh`` run per day over the publication window ending on the tick's day in Toronto (never after
    the UTC day, which the window's end may not pass); the run key is the day, so a tick evaluated twice launches one
    run. A bad ``$METACAN_PUBLICATION_WINDOW_DAYS`` skips the tick, naming the variable."""
    tick = context.scheduled_execution_time or dt.datetime.now(dt.UTC)
    day = tick.astimezone(ZoneInfo(DAILY_TIMEZONE)).date()
    try:
        days = settings.publication_window_days()
    except ValueError as exc:
        return dg.SkipReason(f"{exc}; no refresh was launched")
    return dg.RunRequest(
        run_key=f"published-{day.isoformat()}",
        run_config=publication_run_config(day, days),
        tags={"metacan/window_by": PUBLISHED},
    )


def frame_built_with(run: dg.DagsterRun | None, instance: dg.DagsterInstance) -> str | None:
    """Why the frame needs no build after an inventory taken by ``run``: the run is one step of a whole-graph
    materialization (tagged :data:`WHOLE_GRAPH_TAG`), or it materializes the frame itself, or it belongs to a backfill
    that does (the lineage view's "Materialize all", one run or a backfill); None when a build is needed (the weekly
    refresh, the API refresh, the inventory on its own)."""
    if run is None:
        return None
    if launcher := run.tags.get(WHOLE_GRAPH_TAG):
        return f"the inventory of run {run.run_id} is part of a whole-graph materialization ({launcher}), which builds the frame itself"
    if run.asset_selection and FRAME_KEY in run.asset_selection:
        return f"run {run.run_id} materializes the frame after its inventory"
    backfill_id = run.tags.get(BACKFILL_ID_TAG)
    backfill = instance.get_backfill(backfill_id) if backfill_id else None
    if backfill is not None and FRAME_KEY in (backfill.asset_selection or ()):
        return f"run {run.run_id} belongs to backfill {backfill_id}, which materializes the frame after its inventory"
    return None


@dg.asset_sensor(
    asset_key=dg.AssetKey("openalex_inventory"),
    job=frame_build,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="After each inventory, build the parts not built yet (all partitions, one run) and merge the frame; "
    "skips the inventory of a run that builds the frame itself (metacan run, the job metacan_all, Materialize all).",
)
def frame_build_after_refresh(context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry):
    """One ``frame_build`` run per ``openalex_inventory`` materialization, over every partition;
    finished parts are skipped without being read, so only new or changed files cost time. Skipped when the
    inventory's run builds the frame itself (:func:`frame_built_with`)."""
    why = frame_built_with(context.instance.get_run_by_id(asset_event.run_id), context.instance)
    if why:
        return dg.SkipReason(why)
    return dg.RunRequest(run_key=asset_event.run_id, tags=all_partitions_run_tags(context.instance))
