"""What the audit study reads (:data:`AUDIT_INPUTS`) and the asset ``audit_inputs`` that fingerprints it
(:mod:`metacan_pipeline.fingerprints`): every audit asset depends on ``audit_inputs``, so the lineage shows one edge
per input into the audit group, and the audit is marked stale only when an input's content changed."""

from __future__ import annotations

from ..fingerprints import inputs_asset
from ..student.roles import direct_labels_key
from ..teachers.core.registry import load_registry

#: The inputs of the audit study, in pipeline order: the tables (and assets) the audit assets read.
AUDIT_INPUTS: tuple[str, ...] = (
    "frame",
    "sample_design",
    "teacher_qualification",
    *(direct_labels_key(t) for t in load_registry()),
    "student_training_set",
    "student_heads",
    "predictions",
    "prediction_thresholds",
)

audit_inputs = inputs_asset(
    "audit_inputs",
    "audit",
    AUDIT_INPUTS,
    "What the audit study reads, in one place: the frame, the sample design, the teachers' qualification and direct "
    "labels, the student's training set and heads, the decisions and their thresholds. A row per input table with its "
    "row count and a content fingerprint (run bookkeeping left out). Every audit asset depends on this one, so the "
    "graph shows one edge per input into the audit group; its data version changes only when an input's content "
    "does, and the audit assets are marked stale exactly then. Look at: which inputs changed since the audit last ran.",
)
