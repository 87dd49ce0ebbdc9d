"""``metacan release``: cut a frozen release of what the last run published."""

from __future__ import annotations

import typer

from ..definitions import build_resources
from ..instance import dagster_instance
from ..release.bundle import ReleaseError, check_version
from ..release.materialize import ReleaseNotCut, materialize_release
from ..storage import default_data_dir


def release(
    version: str = typer.Option(
        "", "--version", help="Version of a new release, e.g. 2026.1 (default: <YYYY.MM.DD>-<8 hex of its content>)."
    ),
    author: list[str] = typer.Option(
        [], help="An author CITATION.cff names (repeat the option; default: metacan_pipeline contributors)."
    ),
    data_dir: str = typer.Option(None, help="Output folder (default $METACAN_DATA_DIR or ./data)."),
) -> None:
    """Cut a frozen release of what the last run published (the asset ``release`` with ``cut: true``).

    Freezes the frame, direct labels, predictions, machine scores, human validation and records under
    ``data/releases/<version>/``; when nothing changed since a release, names that release and writes nothing.
    Works that enter the frame later form the rolling layer of the next ``metacan run``.
    """
    try:  # before a run starts: one sentence, not a run's stack trace
        check_version(version)
    except ReleaseError as exc:
        typer.echo(f"metacan release: {exc}", err=True)
        raise typer.Exit(2) from None
    data = data_dir or default_data_dir()
    try:
        out = materialize_release(build_resources(data), dagster_instance(data), version, author)
    except ReleaseNotCut as exc:
        typer.echo(f"no release: {exc}", err=True)
        raise typer.Exit(1) from None
    verb = "reused (nothing changed since it was cut)" if out.reused else "cut"
    typer.echo(f"release {out.version} {verb}: {out.folder}")
