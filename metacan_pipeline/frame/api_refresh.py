"""The weekly OpenAlex API refresh: harvest one ``updated_date`` window into the API archive (the asset
``openalex_api_refresh`` in :mod:`.assets` orchestrates; its config, window choice, client and failures are here).

The window's pages land in ``<api archive>/window=<from>_<to>/``; ``openalex_inventory`` then lists
them under the partition key ``window=<from>_<to>``, the sensor ``frame_build_after_refresh`` builds
that partition's parts and merges the frame (newest ``updated_date`` of a work wins across snapshot
parts and windows). See :mod:`metacan_pipeline.openalex.windows` for the layout and window rules.
"""

import datetime as dt
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field

from .. import settings
from ..openalex.api import DEFAULT_BASE_URL, Budget, BudgetExhausted, OpenAlexClient, OpenAlexError
from ..openalex.windows import PUBLISHED, UPDATED, Harvest, Window, harvest, next_window, publication_window
from ..resources import OpenAlexFiles
from ..storage import MetacanStorage

#: The job that runs the refresh (schedule ``weekly_api_refresh``): a run of it always chooses to buy API calls.
API_REFRESH_JOB = "api_refresh"
#: What a run may select beside ``openalex_api_refresh`` and still choose it: the inventory that takes stock of its
#: window. A run that selects more (the lineage view's "Materialize all", a backfill of the graph) harvests nothing.
CHOSEN_WITH = frozenset({dg.AssetKey("openalex_api_refresh"), dg.AssetKey("openalex_inventory")})


def chosen_to_buy(job_name: str, selected: AbstractSet[dg.AssetKey]) -> bool:
    """Whether a run of ``job_name`` materializing the assets ``selected`` chose the API refresh, which buys API calls:
    a run of the job ``api_refresh``, or a run that materializes the refresh with ``openalex_inventory`` at most (on
    its own from its page or the lineage view). Any wider selection did not choose it: "Materialize all" buys nothing."""
    return job_name == API_REFRESH_JOB or selected <= CHOSEN_WITH


def not_chosen_metadata(run_id: str, selected: AbstractSet[dg.AssetKey]) -> tuple[str, dict]:
    """The log line and metadata of a refresh that harvested nothing because its run did not choose it."""
    line = (
        f"openalex_api_refresh: not harvested: run {run_id} materializes {len(selected)} assets, and the refresh buys "
        "OpenAlex API calls only when chosen: launch the job api_refresh, or materialize openalex_api_refresh on its "
        "own (with openalex_inventory at most). Nothing was bought; the API archive is unchanged."
    )
    return line, {"harvested": False, "calls_made": 0, "cost_usd_this_run": 0.0, "why": line}


#: Environment override of the API base URL (a mirror, a proxy, or a loopback server in tests).
API_URL_ENV = settings.API_URL_ENV


class ApiRefreshConfig(dg.Config):
    """One refresh window and its limits. Dates are ``YYYY-MM-DD`` (UTC days, both ends inclusive). ``window_by``
    chooses the date the window is taken over: ``updated_date`` (the weekly refresh, resumable windows) or
    ``publication_date`` (the daily refresh, schedule ``daily_publication_refresh``: ``from_publication_date`` and
    ``to_publication_date``, the ``*_updated_date`` fields unused)."""

    window_by: Literal["updated_date", "publication_date"] = Field(
        default=UPDATED,
        description="updated_date: the works OpenAlex updated in the window (weekly); publication_date: the works "
        "published in it (daily).",
    )
    from_publication_date: str | None = Field(
        default=None,
        description=f"Start of a publication_date window. Default: publication_window_days before its end "
        f"(${settings.PUBLICATION_WINDOW_DAYS_ENV}, default {settings.DEFAULT_PUBLICATION_WINDOW_DAYS}).",
    )
    to_publication_date: str | None = Field(
        default=None, description="End of a publication_date window. Default: today (UTC)."
    )
    from_updated_date: str | None = Field(
        default=None,
        description=(
            "Start of the window. Default: resume the oldest incomplete window if there is one, else the 'to' date of the "
            "last completed window in the API archive, else 7 days before to_updated_date."
        ),
    )
    to_updated_date: str | None = Field(default=None, description="End of the window. Default: today (UTC).")
    base_url: str | None = Field(
        default=None, description=f"OpenAlex API root. Default: ${API_URL_ENV} or {DEFAULT_BASE_URL}."
    )
    api_key_env: str = Field(
        default="OPENALEX_API_KEY", description="Environment variable holding the API key (never logged)."
    )
    per_page: int = Field(default=200, description="Results per page (100 is used if the server refuses 200).")
    max_calls: int = Field(
        default=10_000, description="Per-day call budget, shared by every window (ledger at the archive root)."
    )
    max_cost_usd: float = Field(
        default=5.0, description="Per-day cost budget in USD (sum of meta.cost_usd), shared by every window."
    )


def pinned_entity_ids(storage: MetacanStorage) -> tuple[list[str], list[str]]:
    """``(Canadian funder ids, Canadian source ids)`` of the pinned lists, sorted. Raises dg.Failure
    when the ``canadian_entities`` table is missing (materialize it first)."""
    if not storage.has_table("canadian_entities"):
        raise dg.Failure(
            description=f"the canadian_entities table is missing under {storage.warehouse}: materialize the asset "
            f"canadian_entities first (job frame_refresh), then re-run openalex_api_refresh",
            allow_retries=False,
        )
    entities = storage.read_table("canadian_entities", columns=["kind", "id"]).to_pylist()
    return (
        sorted({r["id"] for r in entities if r["kind"] == "funder"}),
        sorted({r["id"] for r in entities if r["kind"] == "source"}),
    )


def archive_root(openalex: OpenAlexFiles) -> Path:
    """The API archive folder, or dg.Failure when none is configured."""
    if openalex.api_root is None:
        raise dg.Failure(
            description="no API archive folder configured (OpenAlexFiles.api_archive_dir is empty): set it, e.g. "
            "to <data dir>/openalex_api as definitions.build_resources does",
            allow_retries=False,
        )
    return openalex.api_root


def utc_today() -> dt.date:
    """Today's date in UTC, where a default window ends (one function, so that a test can hold the date still)."""
    return dt.datetime.now(dt.UTC).date()


def choose_window(api_root: Path, config: ApiRefreshConfig) -> tuple[Window, str]:
    """The window to harvest and why, with today's UTC date: :func:`.next_window` for an ``updated_date`` window,
    :func:`.publication_window` (``$METACAN_PUBLICATION_WINDOW_DAYS`` long by default) for a ``publication_date``
    one; dg.Failure on a bad config or setting."""
    today = utc_today()
    try:
        if config.window_by == PUBLISHED:
            return publication_window(
                today, settings.publication_window_days(), config.from_publication_date, config.to_publication_date
            )
        return next_window(api_root, today, config.from_updated_date, config.to_updated_date)
    except ValueError as exc:
        raise dg.Failure(description=f"openalex_api_refresh config: {exc}", allow_retries=False) from None


def refresh_client(folder: Path, api_root: Path, config: ApiRefreshConfig) -> OpenAlexClient:
    """The client of one window: pages archived in ``folder``, the per-day ledger at ``api_root``."""
    return OpenAlexClient(
        folder,
        ledger_dir=api_root,
        base_url=settings.openalex_api_url(config.base_url),
        api_key_env=config.api_key_env,
        per_page=config.per_page,
        budget=Budget(max_calls=config.max_calls, max_cost_usd=config.max_cost_usd),
    )


def budget_failure(window: Window, exc: BudgetExhausted, client: OpenAlexClient, folder: Path) -> dg.Failure:
    """The failure of a window stopped by the day's budget: names the window to resume and how."""
    return dg.Failure(
        description=(
            f"window {window.name} is incomplete (no window.json): {exc}. To resume it, re-run openalex_api_refresh "
            f"(job api_refresh) once the budget allows (tomorrow, or with a larger max_calls / max_cost_usd) with "
            f"from_updated_date={window.from_date} and to_updated_date={window.to_date}, or with neither: the default "
            f"window resumes the oldest incomplete one. The {client.calls_made} pages bought in this run are archived "
            f"in {folder} and will not be bought again."
        ),
        metadata={
            "window": window.name,
            "calls_made": client.calls_made,
            "pages_from_archive": client.pages_from_archive,
        },
        allow_retries=False,
    )


def harvest_window(client: OpenAlexClient, window: Window, filters: list[str], log) -> Harvest:
    """Read every query of ``window`` to its end (:func:`.harvest`); closes the client. A spent budget
    or a non-retryable OpenAlex answer stops the window (incomplete, resumable) with a dg.Failure."""
    try:
        return harvest(client.iter_pages, filters, log)
    except BudgetExhausted as exc:
        raise budget_failure(window, exc, client, client.archive_dir) from None
    except OpenAlexError as exc:
        raise dg.Failure(
            description=f"window {window.name} stopped (incomplete, resumable): {exc}", allow_retries=False
        ) from None
    finally:
        client.close()


def completed_message(window: Window, got: Harvest, client: OpenAlexClient) -> str:
    """The log line of a completed window: works, pages, calls bought, pages read back, cost."""
    return (
        f"openalex_api_refresh: window {window.name} complete: {len(got.works)} works in {got.pages} pages; "
        f"{client.calls_made} calls made, {client.pages_from_archive} pages read back from the archive, "
        f"${got.cost_usd:.4f}"
    )


def refresh_metadata(
    window: Window, why: str, queries: int, got: Harvest, client: OpenAlexClient, folder: Path
) -> dict:
    """The metadata of a completed window: its dates, why it was chosen, queries, pages, works, calls, cost."""
    return {
        "window": window.name,
        "window_by": window.by,
        f"from_{window.by}": window.from_date,
        f"to_{window.by}": window.to_date,
        "window_choice": why,
        "queries": queries,
        "pages": got.pages,
        "works": len(got.works),
        "calls_made": client.calls_made,
        "pages_from_archive": client.pages_from_archive,
        "cost_usd": round(got.cost_usd, 6),
        "cost_usd_this_run": round(client.cost_usd, 6),
        "archive": dg.MetadataValue.path(str(folder)),
    }
