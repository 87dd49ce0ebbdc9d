"""``metacan entity-list``: pin the Canadian funders, sources and institutions from entity records on disk."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer

from ..frame.shipped import PACKAGED_DIR, EntityListError, write_list_file
from ..openalex.reader import Record, iter_records


def entity_list(
    from_: list[Path] = typer.Option(
        ...,
        "--from",
        help="An input folder holding OpenAlex entity records: a snapshot (its data/funders|sources|institutions/ "
        "parts are read), an API archive, or single funder/source/institution files. Repeat for several.",
    ),
    out: Path = typer.Option(
        ...,
        help="Folder of the list file; point METACAN_ENTITY_LIST_FILE at the file written there (the package's own "
        f"lists are in {PACKAGED_DIR}).",
    ),
    pinned_on: str = typer.Option(None, help="The list's date (YYYY-MM-DD) in its file name; default today."),
    provenance: str = typer.Option(None, help="Where the records came from, for the sidecar; default the folders."),
    coverage: str = typer.Option(
        "as complete as the entity records of the folders read", help="How complete the list is, for the sidecar."
    ),
) -> None:
    """Pin the Canadian entity lists (OpenAlex country_code CA) from entity records on disk into a versioned file.

    Writes ``ca_entities-<date>.csv.gz`` and its JSON sidecar (date, provenance, counts, coverage). The frame uses a
    kind's list from this file when its input folders hold no record of that kind (METACAN_ENTITY_LIST_FILE).
    """
    for folder in from_:
        if not folder.is_dir():
            typer.echo(f"--from {folder}: not a folder", err=True)
            raise typer.Exit(2)
    records = (
        r
        for folder in from_
        for r in iter_records(folder, {"funders", "sources", "institutions"}, f"{folder.name}/")
        if isinstance(r, Record) and r.kind != "W"
    )
    try:
        path, sidecar = write_list_file(
            records,
            out,
            pinned_on or dt.date.today().isoformat(),
            provenance or "entity records read from " + ", ".join(str(f) for f in from_),
            coverage,
        )
    except EntityListError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    counts = ", ".join(f"{n} {kind}s" for kind, n in sidecar["counts"].items())
    typer.echo(f"{path}: {counts}")
