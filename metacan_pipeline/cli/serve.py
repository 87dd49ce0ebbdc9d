"""``metacan serve``: the evidence browser and its API over the current release database; ``metacan serve --coding``:
the audit study's coding pages, alone, over the coding store."""

from __future__ import annotations

import errno
import socket

import typer
import uvicorn

from ..audit.coding.errors import CodingStoreError
from ..settings import coding_store_path
from ..site.build.release import ReleaseUnavailable
from ..site.web.app import create_app
from ..site.web.coding_app import CODING_PORT, create_coding_app
from ..site.web.saved import QueryStoreUnavailable
from ..site.web.static_pages import WORK_PAGE_SOURCES
from ..storage import default_data_dir

SITE_PORT = 8000


def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 for every interface)."),
    port: int = typer.Option(
        None, help=f"Port to listen on (default {SITE_PORT}; with --coding {CODING_PORT}).", show_default=False
    ),
    data_dir: str = typer.Option(
        None, help="Output folder holding site/releases (default $METACAN_DATA_DIR or ./data)."
    ),
    row_cap: int = typer.Option(100_000, help="Most rows one export returns (the cap is declared in the export)."),
    work_pages: str = typer.Option(
        "live",
        help="Work pages (English): live, rendered from the release database on request; static, the files the "
        "asset work_pages wrote under <data>/site (.html.gz sent with Content-Encoding: gzip to clients that accept "
        "it, decompressed to others), live where a work has none.",
    ),
    coding: bool = typer.Option(
        False,
        "--coding",
        help="Serve the audit study's coding pages only (/coding/, /fr/coding/), over data/audit/coding.sqlite.",
    ),
) -> None:
    """Serve the evidence browser (cohort builder, saved cohorts, work pages, exports, in English and under /fr/ in
    French; JSON API under /api/v1/, documented at /api/v1/docs) over the current release database, which the asset
    site_database builds (uvicorn, read-only DuckDB). The API's per-client rate limit is METACAN_SITE_RATE_LIMIT.

    With --coding, serve the audit study's coding pages and nothing else (port 8001 by default): coders sign in
    there (coders from `metacan coders add`, tasks from `metacan coding load-tasks` or the asset coding_tasks), on a
    server with no work page, record, API or export, so they stay masked to the machine's outputs. It needs the
    coding store only, no release."""
    root = data_dir or default_data_dir()
    if coding:
        _serve_coding(root, host, CODING_PORT if port is None else port)
        return
    source = work_pages.strip().lower()
    if source not in WORK_PAGE_SOURCES:
        typer.echo(
            f"metacan serve: --work-pages {work_pages!r} must be one of {', '.join(WORK_PAGE_SOURCES)}", err=True
        )
        raise typer.Exit(1)
    try:
        asgi = create_app(root, row_cap=row_cap, work_pages=source)
    # ValueError: METACAN_SITE_RATE_LIMIT, METACAN_SITE_URL, METACAN_REPORT_URL, METACAN_DAGSTER_UI_URL or a setting
    # of the abstract cascade (METACAN_ABSTRACT_SOURCES, an API root, METACAN_ABSTRACT_MAILTO)
    except (ReleaseUnavailable, QueryStoreUnavailable, ValueError) as exc:
        typer.echo(f"metacan serve: {exc}", err=True)
        raise typer.Exit(1) from None
    info = asgi.state.site.info
    port = SITE_PORT if port is None else port
    sock = _listen("metacan serve", host, port)
    typer.echo(f"Serving release {info.release_id} ({info.n_works} works) on http://{host}:{port}/ (Ctrl-C stops it)")
    typer.echo(f"(the coding pages are not on this server: `metacan serve --coding` serves them on port {CODING_PORT})")
    # no X-Forwarded-For trusted (uvicorn trusts it from 127.0.0.1 by default): a local client could reset its rate
    # limit with a made-up address; behind a proxy, run uvicorn itself with --proxy-headers
    uvicorn.Server(uvicorn.Config(asgi, log_level="info", proxy_headers=False)).run(sockets=[sock])


def _listen(command: str, host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, bound before the server says where it serves; exits 1 with what to do
    when the port is taken or the address cannot be used."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        why = "is in use (another server is listening there)" if exc.errno == errno.EADDRINUSE else f"failed: {exc}"
        typer.echo(
            f"{command}: listening on {host}:{port} {why}; stop that server, or choose another port with --port "
            f'(make serve SERVE_ARGS="--port 8080")',
            err=True,
        )
        raise typer.Exit(1) from None
    return sock


def _serve_coding(root: str, host: str, port: int) -> None:
    try:
        asgi = create_coding_app(root)
    # the store is damaged, read-only or its folder cannot be written; ValueError: a setting of the abstract cascade
    except (CodingStoreError, ValueError) as exc:
        typer.echo(f"metacan serve --coding: {exc}", err=True)
        raise typer.Exit(1) from None
    sock = _listen("metacan serve --coding", host, port)
    typer.echo(
        f"Serving the coding pages of {coding_store_path(root)} on http://{host}:{port}/coding/ "
        "(French: /fr/coding/; nothing else is served here; Ctrl-C stops it)"
    )
    # no X-Forwarded-For trusted (uvicorn trusts it from 127.0.0.1 by default): a local client could reset its rate
    # limit with a made-up address; behind a proxy, run uvicorn itself with --proxy-headers
    uvicorn.Server(uvicorn.Config(asgi, log_level="info", proxy_headers=False)).run(sockets=[sock])
