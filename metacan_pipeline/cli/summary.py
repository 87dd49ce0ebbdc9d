"""``metacan summary``: what the last run produced, printed again. Imports neither the definitions nor the teacher
registry at import, so it answers whatever the environment holds."""

from __future__ import annotations

import typer

from ..storage import default_data_dir
from .options import DATA_DIR_HELP
from .run_summary import summary_text


def summary(data_dir: str = typer.Option(None, help=DATA_DIR_HELP)) -> None:
    """Print what the last run produced (frame, labels, predictions, pages)."""
    text = summary_text(data_dir or default_data_dir())
    typer.echo(text)
    if text.startswith("Nothing to summarise"):
        raise typer.Exit(1)
