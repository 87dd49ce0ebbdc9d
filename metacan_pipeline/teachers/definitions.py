"""The teachers stage's Dagster definitions: one direct-labels asset per registry teacher, imports, agreement,
qualification and label batches, with the coverage checks."""

import dagster as dg

from .agreement import teacher_agreement
from .assets import TEACHER_ASSETS, TEACHER_CHECKS, teacher_qualification
from .batches import label_batches
from .import_assets import imported_labels

defs = dg.Definitions(
    assets=[*TEACHER_ASSETS.values(), imported_labels, teacher_agreement, teacher_qualification, label_batches],
    asset_checks=TEACHER_CHECKS,
)
