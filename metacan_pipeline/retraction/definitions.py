"""The Retraction Watch stage's Dagster definitions: the file read, its join to the frame, and its check."""

import dagster as dg

from .assets import retraction_watch, work_retractions
from .checks import work_retractions_within_frame

defs = dg.Definitions(assets=[retraction_watch, work_retractions], asset_checks=[work_retractions_within_frame])
