"""``metacan fetch-retraction-watch``: download (or copy) the Retraction Watch export into the data folder's archive."""

from __future__ import annotations

from pathlib import Path

import typer

from .options import DATA_DIR_HELP


def fetch_retraction_watch(
    url: str = typer.Option(
        None,
        help="Where to download the export from, e.g. https://api.labs.crossref.org/data/retractionwatch?you@example.org "
        "(default $METACAN_RETRACTION_WATCH_URL).",
    ),
    file: Path = typer.Option(None, help="A local copy of the export to archive instead of a download."),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Archive the Crossref Labs Retraction Watch CSV by its content hash under <data dir>/retraction_watch/ and check
    that it reads (notices, rows quarantined). Point METACAN_RETRACTION_WATCH_FILE at the archived copy it prints, then
    materialize retraction_watch (or `metacan run`) to join it to the frame."""
    from .. import settings  # imported here: the command's help needs none of this
    from ..retraction.notices import RetractionWatchFileError, read_notices
    from ..retraction.source import RetractionWatchDownloadError, download, from_file

    archive_dir = Path(data_dir or settings.data_dir()) / "retraction_watch"
    try:
        if file is not None:
            if not file.is_file():
                raise typer.BadParameter(f"{file} is not a file", param_hint="--file")
            entry = from_file(file, archive_dir)
        else:
            source = url or settings.retraction_watch_url()
            if not source:
                raise typer.BadParameter(
                    "give --url, --file or METACAN_RETRACTION_WATCH_URL (nothing is downloaded otherwise)"
                )
            entry = download(source, archive_dir)
        notices, quarantine = read_notices(entry.path, entry.rw_version)
    except (RetractionWatchDownloadError, RetractionWatchFileError, ValueError) as exc:
        if isinstance(exc, typer.BadParameter):
            raise
        typer.echo(str(exc), err=True)
        raise typer.Exit(4) from None
    typer.echo(
        f"{entry.rw_version}: {notices.num_rows} notices, {quarantine.num_rows} rows quarantined, "
        f"from {entry.source} (dated {entry.file_date or 'unknown'})"
    )
    typer.echo(f"archived as {entry.file}; METACAN_RETRACTION_WATCH_FILE={entry.file} reads it")
