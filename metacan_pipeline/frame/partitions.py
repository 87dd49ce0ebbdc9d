"""The frame's partitions: one per OpenAlex input partition, registered by ``openalex_inventory``."""

import warnings

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

# BackfillPolicy is "beta" in Dagster 1.13; we pin the version, so the warning only adds noise to every run's log.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)

#: The frame's partitions: one per snapshot ``updated_date=`` folder, one per API refresh window
#: (``window=<from>_<to>``), plus ``files`` for every other input file. Registered by
#: ``openalex_inventory`` as it finds them (:func:`sync_partitions`).
openalex_partitions = dg.DynamicPartitionsDefinition(name="openalex_partitions")


def sync_partitions(instance: dg.DagsterInstance, keys: list[str]) -> tuple[list[str], list[str]]:
    """Make the registered ``openalex_partitions`` exactly ``keys``: ``(keys added, keys removed)``."""
    known = set(instance.get_dynamic_partitions(openalex_partitions.name))
    new = [k for k in keys if k not in known]
    gone = sorted(known - set(keys))
    if new:
        instance.add_dynamic_partitions(openalex_partitions.name, new)
    for k in gone:
        instance.delete_dynamic_partition(openalex_partitions.name, k)
    return new, gone


def all_partitions_run_tags(instance: dg.DagsterInstance) -> dict[str, str]:
    """Run tags that select every registered ``openalex_partitions`` key as one range (a single-run
    backfill: ``frame_parts`` gets them all and builds their files in parallel)."""
    keys = instance.get_dynamic_partitions(openalex_partitions.name)
    if not keys:
        raise ValueError(
            "no openalex_partitions registered yet: materialize openalex_inventory first (job frame_refresh)"
        )
    return {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}
