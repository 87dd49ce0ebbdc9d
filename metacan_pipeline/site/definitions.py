"""The served site's Dagster definitions: the release database it serves and its blocking check."""

import dagster as dg

from .assets import site_database
from .checks import site_database_matches_records

defs = dg.Definitions(assets=[site_database], asset_checks=[site_database_matches_records])
