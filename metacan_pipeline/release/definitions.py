"""The release stage's Dagster definitions: the frozen release and its hash check, and the warnings on what the
predictions, prevalence and records may claim (:mod:`.claims`)."""

import dagster as dg

from .assets import release
from .checks import release_matches_its_hashes
from .claims import CLAIM_CHECKS

defs = dg.Definitions(assets=[release], asset_checks=[release_matches_its_hashes, *CLAIM_CHECKS])
