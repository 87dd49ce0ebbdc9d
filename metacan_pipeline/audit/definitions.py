"""The audit study's Dagster definitions: protocol, audit sample, coding tasks and validation report."""

import dagster as dg

from .assets import audit_protocol, audit_sample, coding_tasks, validation_report
from .checks import audit_sample_partitions_frame

defs = dg.Definitions(
    assets=[audit_protocol, audit_sample, coding_tasks, validation_report],
    asset_checks=[audit_sample_partitions_frame],
)
