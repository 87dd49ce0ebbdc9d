"""The sampling stage's Dagster definitions: the sample design and its partition check."""

import dagster as dg

from .assets import sample_design
from .checks import sample_design_partitions_frame

defs = dg.Definitions(assets=[sample_design], asset_checks=[sample_design_partitions_frame])
