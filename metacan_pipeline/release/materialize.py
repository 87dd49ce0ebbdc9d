"""Cutting a release outside the UI: the asset ``release`` with ``cut: true`` and its blocking check, in-process."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from .assets import ReleaseConfig, release
from .checks import release_matches_its_hashes


class ReleaseNotCut(RuntimeError):
    """The release run failed: the message holds the failed steps' errors, else the names of the failed checks."""


@dataclass(frozen=True)
class ReleaseOutcome:
    """What the ``release`` asset recorded: the version, its folder and whether an unchanged release was reused."""

    version: str
    folder: str
    reused: bool


def materialize_release(
    resources: dict, instance: dg.DagsterInstance, version: str = "", authors: list[str] | None = None
) -> ReleaseOutcome:
    """Materialize ``release`` (``cut: true``, ``version``, and ``authors`` for CITATION.cff when given, else the
    config's default) with ``release_matches_its_hashes`` on ``instance``. Raises :class:`ReleaseNotCut` when a step
    or a check fails."""
    config = ReleaseConfig(cut=True, release_version=version, **({"citation_authors": authors} if authors else {}))
    result = dg.materialize(
        [release, release_matches_its_hashes],
        resources=resources,
        instance=instance,
        # the command prints one line; the run's events stay in the instance (and the UI), its warnings on stderr
        run_config=dg.RunConfig({"release": config}, loggers={"console": {"config": {"log_level": "WARNING"}}}),
        raise_on_error=False,
    )
    if not result.success:
        errors = [e.event_specific_data.error.message for e in result.all_events if e.is_step_failure]
        checks = [e.check_name for e in result.get_asset_check_evaluations() if not e.passed]
        raise ReleaseNotCut(" ".join(errors) or "failed checks: " + ", ".join(checks))
    md = {k: v.value for k, v in result.asset_materializations_for_node("release")[0].metadata.items()}
    return ReleaseOutcome(version=md["release_version"], folder=md["folder"], reused=md["reused"])
