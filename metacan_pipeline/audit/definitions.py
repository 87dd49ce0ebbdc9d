"""The audit study's Dagster definitions: its inputs fingerprinted, protocol, audit sample, coding tasks, validation report, and the recall
instruments that need no probability sample (filter recall, known-item venue recall), and study design against MEDLINE."""

import dagster as dg

from .assets import (
    audit_protocol,
    audit_sample,
    coding_tasks,
    filter_recall,
    validation_report,
    venue_known_item_recall,
)
from .checks import audit_sample_partitions_frame
from .inputs import audit_inputs
from .medline.asset import medline_study_design

defs = dg.Definitions(
    assets=[
        audit_inputs,
        audit_protocol,
        audit_sample,
        coding_tasks,
        validation_report,
        filter_recall,
        venue_known_item_recall,
        medline_study_design,
    ],
    asset_checks=[audit_sample_partitions_frame],
)
