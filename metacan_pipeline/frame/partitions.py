"""The frame's partitions (issue 3: frame ingestion at OpenAlex scale)."""

import warnings

import dagster as dg

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
