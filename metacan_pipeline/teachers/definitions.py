"""The teachers stage's Dagster definitions: one direct-labels asset per registry teacher, imports, agreement,
qualification and label batches, with the coverage checks."""

import dagster as dg

from .assets import TEACHER_ASSETS, imported_labels, label_batches, teacher_agreement, teacher_qualification
from .checks import TEACHER_CHECKS

defs = dg.Definitions(
    assets=[*TEACHER_ASSETS.values(), imported_labels, teacher_agreement, teacher_qualification, label_batches],
    asset_checks=TEACHER_CHECKS,
)
