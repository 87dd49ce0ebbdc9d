"""``metacan dev``, ``metacan run`` and ``metacan summary``: the Dagster UI, the whole graph in-process, its summary."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import typer
from dagster._utils.interrupts import setup_interrupt_handlers

from .. import settings
from ..definitions import build_resources, check_run_settings, materialize_in_process
from ..instance import dagster_instance
from ..storage import default_data_dir
from .options import DATA_DIR_HELP
from .run_summary import summary_text


def run(
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
    openalex_dir: str = typer.Option(
        None,
        help="OpenAlex input folder, or several separated by ':' (default $METACAN_OPENALEX_DIR or "
        "../shared/data/openalex:../shared/data/openalex_more).",
    ),
) -> None:
    """Materialize the whole asset graph (checks included) in-process, then print the summary."""
    if data_dir:
        settings.export(settings.DATA_DIR_ENV, data_dir)
    if openalex_dir:
        settings.export(settings.OPENALEX_DIR_ENV, openalex_dir)
    data = default_data_dir()
    try:
        resources = build_resources()
        check_run_settings(resources)  # the settings read late in a run, checked before anything runs
    except ValueError as exc:
        typer.echo(f"metacan run: {exc}", err=True)
        raise typer.Exit(2) from None
    if (why := unwritable(Path(data))) is not None:
        typer.echo(
            f"metacan run: the data folder {data} {why}: choose a folder this user can write with --data-dir or "
            f"{settings.DATA_DIR_ENV}",
            err=True,
        )
        raise typer.Exit(2)
    instance = dagster_instance(data)
    interrupt_on_sigterm()
    t0 = time.monotonic()
    result = materialize_in_process(instance, resources)
    elapsed = time.monotonic() - t0
    if not result.success:
        failed = [e.step_key for e in result.all_events if e.is_step_failure]
        typer.echo(
            f"Run {result.run_id} FAILED after {elapsed:.0f}s at step(s) {failed}; see the log above or `dagster dev` "
            f"(DAGSTER_HOME={settings.dagster_home(data)}).",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(f"\nRun {result.run_id} succeeded in {elapsed:.0f}s.")
    typer.echo(summary_text(data, result.run_id))


def unwritable(folder: Path) -> str | None:
    """Why a run could not write under ``folder`` (created when missing), or None: it is a file, or creating it or a
    file in it failed (a read-only mount, no permission)."""
    if folder.exists() and not folder.is_dir():
        return "is a file, not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return f"cannot be written ({exc.strerror or exc})"
    return None


def interrupt_on_sigterm() -> None:
    """Make SIGTERM (``kill``, systemd stopping a service, a CI job cancelled) stop ``metacan run`` as Ctrl-C does:
    Dagster interrupts the running step, which keeps every label and part it stored, stops the embedded teacher
    server, and marks the run failed; without the handler Python would die at once and leave the teacher server
    running. The handlers are Dagster's own, as its command line installs them."""
    setup_interrupt_handlers()
