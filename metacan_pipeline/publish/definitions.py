"""The publish stage's Dagster definitions: work records and pages, with the checks on what may ship."""

import dagster as dg

from .assets import work_pages, work_records
from .checks import records_human_layers_backed, records_may_ship

defs = dg.Definitions(assets=[work_records, work_pages], asset_checks=[records_may_ship, records_human_layers_backed])
