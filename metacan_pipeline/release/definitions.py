"""The release stage's Dagster definitions: the frozen release and its hash check."""

import dagster as dg

from .assets import release
from .checks import release_matches_its_hashes

defs = dg.Definitions(assets=[release], asset_checks=[release_matches_its_hashes])
