"""``metacan serve``: the evidence browser, its API and the coding pages over the current release database."""

from __future__ import annotations

import typer
import uvicorn

from ..audit.coding.errors import CodingStoreError
from ..site.build.release import ReleaseUnavailable
from ..site.web.app import create_app
from ..site.web.saved import QueryStoreUnavailable
from ..storage import default_data_dir


def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 for every interface)."),
    port: int = typer.Option(8000, help="Port to listen on."),
    data_dir: str = typer.Option(
        None, help="Output folder holding site/releases (default $METACAN_DATA_DIR or ./data)."
    ),
    row_cap: int = typer.Option(100_000, help="Most rows one export returns (the cap is declared in the export)."),
) -> None:
    """Serve the evidence browser (cohort builder, saved cohorts, work pages, exports, in English and under /fr/ in
    French; JSON API under /api/v1/, documented at /api/v1/docs) over the current release database, which the asset
    site_database builds (uvicorn, read-only DuckDB). The API's per-client rate limit is METACAN_SITE_RATE_LIMIT.
    The audit study's coding pages are on the same server under /coding/ (coders from `metacan coders add`, tasks
    from `metacan coding load-tasks` or the asset coding_tasks)."""
    try:
        asgi = create_app(data_dir or default_data_dir(), row_cap=row_cap)
    # ValueError: METACAN_SITE_RATE_LIMIT; CodingStoreError: the coding pages' store is unreadable
    except (ReleaseUnavailable, QueryStoreUnavailable, CodingStoreError, ValueError) as exc:
        typer.echo(f"metacan serve: {exc}", err=True)
        raise typer.Exit(1) from None
    info = asgi.state.site.info
    typer.echo(f"Serving release {info.release_id} ({info.n_works} works) on http://{host}:{port}/ (Ctrl-C stops it)")
    uvicorn.run(asgi, host=host, port=port, log_level="info")
