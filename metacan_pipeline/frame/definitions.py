"""The frame stage's Dagster definitions: ingestion assets, their checks, the refresh jobs, schedules and sensor."""

import dagster as dg

from .assets import canadian_entities, frame, frame_authors, frame_parts, openalex_api_refresh, openalex_inventory
from .checks import (
    frame_build_manifest_covers_snapshot,
    frame_ids_unique,
    frame_routes_have_evidence,
    frame_stores_no_abstract_text,
)
from .schedules import (
    api_refresh,
    daily_publication_refresh,
    frame_build,
    frame_build_after_refresh,
    frame_refresh,
    weekly_api_refresh,
    weekly_frame_refresh,
)

defs = dg.Definitions(
    assets=[openalex_api_refresh, openalex_inventory, canadian_entities, frame_parts, frame, frame_authors],
    asset_checks=[
        frame_ids_unique,
        frame_routes_have_evidence,
        frame_stores_no_abstract_text,
        frame_build_manifest_covers_snapshot,
    ],
    jobs=[frame_refresh, frame_build, api_refresh],
    schedules=[weekly_frame_refresh, weekly_api_refresh, daily_publication_refresh],
    sensors=[frame_build_after_refresh],
)
