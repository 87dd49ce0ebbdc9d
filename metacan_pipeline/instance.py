"""The Dagster instance that ``metacan run``, ``metacan release`` and ``metacan dev`` share.

``$DAGSTER_HOME``, else ``<data dir>/dagster_home``; a new one gets :data:`DAGSTER_YAML`, so ``dagster dev`` over the
same folder shows the runs the command line made.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from . import settings

#: The instance settings a new DAGSTER_HOME gets: no telemetry (no calls out), and one run at a time: the
#: sensor frame_build_after_refresh starts a frame_build run after each inventory, which must not build the
#: frame beside a run the user launched, and DuckDB takes one writer per file.
DAGSTER_YAML = "telemetry:\n  enabled: false\nconcurrency:\n  runs:\n    max_concurrent_runs: 1\n"


def instance_home(data_dir: str) -> str:
    """``$DAGSTER_HOME``, or ``<data_dir>/dagster_home``, created with :data:`DAGSTER_YAML` when new; sets the variable."""
    home = settings.dagster_home(data_dir)
    settings.export(settings.DAGSTER_HOME_ENV, home)
    Path(home).mkdir(parents=True, exist_ok=True)
    dagster_yaml = Path(home) / "dagster.yaml"
    if not dagster_yaml.exists():
        dagster_yaml.write_text(DAGSTER_YAML)
    return home


def dagster_instance(data_dir: str) -> dg.DagsterInstance:
    """The instance of :func:`instance_home` (``data_dir``'s, unless ``$DAGSTER_HOME`` names another)."""
    instance_home(data_dir)
    return dg.DagsterInstance.get()
