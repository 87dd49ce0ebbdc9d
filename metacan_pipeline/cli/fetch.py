"""``metacan fetch``: harvest the Canadian entity lists and one query per route from the OpenAlex API."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer

from ..frame.shipped import EntityListError, api_entity_records, write_list_file
from ..openalex.api import (
    CANADIAN_ENTITIES,
    Budget,
    BudgetExhausted,
    OpenAlexClient,
    OpenAlexError,
    count_works,
    route_filters,
)
from ..openalex.ids import short_id

#: The coverage a list harvested from the live API states in its sidecar.
COMPLETE = "complete: every record the OpenAlex API answered to country_code:ca on the date in the file name"


def fetch(
    out: str = typer.Option(..., help="Archive folder; point METACAN_OPENALEX_DIR at it afterwards."),
    from_updated_date: str = typer.Option(
        None, help="Only works updated since this date (YYYY-MM-DD): an incremental window."
    ),
    base_url: str = typer.Option("https://api.openalex.org", help="OpenAlex API base URL."),
    api_key_env: str = typer.Option(
        "OPENALEX_API_KEY", help="Environment variable holding the API key (never logged)."
    ),
    per_page: int = typer.Option(200, help="Results per page (100 is used if the server refuses 200)."),
    max_calls: int = typer.Option(10_000, help="Per-day call budget, shared by all runs on this archive."),
    max_cost_usd: float = typer.Option(5.0, help="Per-day cost budget in USD (meta.cost_usd)."),
    entity_list_out: Path = typer.Option(
        None,
        help="Also write the harvested Canadian entity lists as ca_entities-<today>.csv.gz (and its sidecar) in this "
        "folder; point METACAN_ENTITY_LIST_FILE at it.",
    ),
) -> None:
    """Harvest the Canadian entity lists and one query per route from the OpenAlex API into an archive.

    Every page is archived gzip-compressed with its request and time; pages already archived are not
    bought again, so an interrupted harvest resumes where it stopped. The archive is a valid input
    folder for the frame (``METACAN_OPENALEX_DIR=<out>/pages make run``).
    """
    client = OpenAlexClient(
        Path(out),
        base_url=base_url,
        api_key_env=api_key_env,
        per_page=per_page,
        budget=Budget(max_calls=max_calls, max_cost_usd=max_cost_usd),
    )
    try:
        ids: dict[str, list[str]] = {}
        records = []
        for entity in CANADIAN_ENTITIES:
            records += (found := list(api_entity_records(client, entity)))
            ids[entity] = [short_id(r.data["id"]) for r in found]
            typer.echo(f"{entity}: {len(ids[entity])} Canadian")
        if entity_list_out is not None:
            provenance = f"OpenAlex API {base_url} /funders, /sources, /institutions with filter=country_code:ca"
            path, _ = write_list_file(records, entity_list_out, dt.date.today().isoformat(), provenance, COMPLETE)
            typer.echo(f"entity list: {path}")
        for f in route_filters(ids["funders"], ids["sources"], from_updated_date):
            n = count_works(client, f)
            typer.echo(f"{f[:90]}{'...' if len(f) > 90 else ''}: {n} works")
    except BudgetExhausted as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(3) from None
    except OpenAlexError as exc:
        typer.echo(f"OpenAlex harvest stopped: {exc}", err=True)
        raise typer.Exit(4) from None
    except EntityListError as exc:
        typer.echo(f"entity list not written: {exc}", err=True)
        raise typer.Exit(5) from None
    finally:
        client.close()
    typer.echo(f"{client.calls_made} calls made, {client.pages_from_archive} pages read back from the archive {out}")
