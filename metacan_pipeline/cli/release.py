"""``metacan release``: cut a frozen release of what the last run published; ``metacan verify-release``: check one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import typer

from ..release.bundle import ReleaseError, check_version, verify
from ..release.study import recompute
from ..release.verify_layers import recompute_layers
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
    # imported here on purpose: verify-release, in the same module, needs neither Dagster nor the definitions
    from ..definitions import build_resources
    from ..instance import dagster_instance
    from ..release.materialize import ReleaseNotCut, materialize_release

    data = data_dir or default_data_dir()
    try:
        out = materialize_release(build_resources(data), dagster_instance(data), version, author)
    except ReleaseNotCut as exc:
        typer.echo(f"no release: {exc}", err=True)
        raise typer.Exit(1) from None
    verb = "reused (nothing changed since it was cut)" if out.reused else "cut"
    typer.echo(f"release {out.version} {verb}: {out.folder}")


def verify_release(
    folder: Path = typer.Argument(..., help="The release bundle's folder, e.g. data/releases/2026.1."),
) -> None:
    """Check a release bundle from its files alone: checksums, then every validation table recomputed.

    Checks every file against ``release.json`` and ``SHA256SUMS``, then recomputes every validation table (error
    rates, confusion, prevalence, agreement, gate, human codes) from the bundle's protocol, audit sample, answers
    under pseudonyms, decisions and frame means, with the estimator code of ``validation_report``, and compares them
    cell by cell (floats within a relative 1e-9); then every record's release layer, by the rule over the record, a
    human-verified one's human code among the bundle's human codes. Reads nothing outside FOLDER and needs no
    network. Exits 1 naming each file or cell that differs, 0 after "verified N tables, M cells, and the release layer
    of K records".
    """
    if not folder.is_dir():
        typer.echo(f"metacan verify-release: {folder} is not a folder: give a release bundle's folder", err=True)
        raise typer.Exit(2)
    if not (folder / "release.json").exists() and any(p.joinpath("release.json").is_file() for p in folder.iterdir()):
        typer.echo(
            f"metacan verify-release: {folder} holds release bundles, not one: give one of them, e.g. "
            f"{next(p for p in sorted(folder.iterdir()) if p.joinpath('release.json').is_file())}",
            err=True,
        )
        raise typer.Exit(2)
    problems = verify(folder)
    for p in problems:
        typer.echo(f"checksum: {p}", err=True)
    if problems:
        typer.echo(f"{folder}: {len(problems)} file problem(s); no table was recomputed", err=True)
        raise typer.Exit(1)
    try:
        result = recompute(folder)
        records, layer_differences = recompute_layers(folder)
    except (ValueError, OSError) as exc:
        typer.echo(f"metacan verify-release: {exc}", err=True)
        raise typer.Exit(1) from None
    except (TypeError, KeyError, ArithmeticError, pa.ArrowException, sqlite3.Error) as exc:
        # a study table of the right columns but impossible values (wrong types, duplicate answer ids, ...)
        typer.echo(
            f"metacan verify-release: {folder}: the study tables cannot be recomputed ({type(exc).__name__}: {exc}); "
            f"the bundle is damaged or was altered",
            err=True,
        )
        raise typer.Exit(1) from None
    differences = result.differences + layer_differences
    for d in differences:
        typer.echo(f"differs: {d}", err=True)
    if differences:
        typer.echo(
            f"{folder}: {len(differences)} difference(s) between the published and the recomputed tables",
            err=True,
        )
        raise typer.Exit(1)
    none = "" if result.tables else " (the bundle holds no validation report)"
    typer.echo(
        f"verified {result.tables} tables, {result.cells} cells{none}, and the release layer of {records} records: "
        f"{folder}"
    )
