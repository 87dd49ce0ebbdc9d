"""The served site's Dagster definitions: the release database it serves."""

import dagster as dg

from .assets import site_database

defs = dg.Definitions(assets=[site_database])
