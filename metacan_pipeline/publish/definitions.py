"""The publish stage's Dagster definitions: work records and pages, with the checks on what may ship, and the job that
writes a work's lineage from the UI."""

import dagster as dg

from .assets import work_pages, work_records
from .checks import records_human_layers_backed, records_in_one_release_layer, records_may_ship
from .lineage_report import work_lineage_report

defs = dg.Definitions(
    assets=[work_records, work_pages],
    asset_checks=[records_may_ship, records_human_layers_backed, records_in_one_release_layer],
    jobs=[work_lineage_report],
)
