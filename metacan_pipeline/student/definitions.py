"""The student stage's Dagster definitions: heads, predictions, prevalence and machine scores, with their checks."""

import dagster as dg

from .assets import cascade_batch, machine_scores, predictions, prevalence, scoring_inputs, student_heads
from .checks import PREDICTION_CHECKS

defs = dg.Definitions(
    assets=[scoring_inputs, student_heads, predictions, prevalence, machine_scores, cascade_batch],
    asset_checks=PREDICTION_CHECKS,
)
