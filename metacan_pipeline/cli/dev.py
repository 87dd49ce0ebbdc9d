"""``metacan dev``: the Dagster UI over ``workspace.yaml`` on the instance ``metacan run`` uses. Imports no stage: the
UI loads the definitions itself and shows any error in them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from ..instance import instance_home
from ..storage import default_data_dir
from .options import DATA_DIR_HELP


def dev(
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
    port: int = typer.Option(3000, help="Port of the Dagster UI."),
) -> None:
    """Start the Dagster UI (``dagster dev -w workspace.yaml``) on the instance ``metacan run`` uses."""
    home = instance_home(data_dir or default_data_dir())
    typer.echo(f"Dagster instance: {home} (the one metacan run uses); UI on http://localhost:{port}")
    dagster = Path(sys.executable).with_name("dagster")
    os.execv(str(dagster), [str(dagster), "dev", "-w", "workspace.yaml", "-p", str(port)])
