"""Tables of the student stage (:mod:`metacan_pipeline.student`, SPEC sections 6-7): heads and their
training set, scores, thresholds and predictions, prevalence, the machine-score rounds, the frozen
holdout and the published model versions."""

from __future__ import annotations

import pyarrow as pa

from ..vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS
from . import Table

#: The teacher suffixes of the published columns (``score_codex``, ``category_scores_gemma``, ...), in
#: column order: the default names of the sample and the census teacher. They stay when the registry's
#: ``[roles]`` name other teachers (:mod:`metacan_pipeline.student.roles`): the columns are published API.
STUDENT_TEACHERS = ("codex", "gemma")

HEADS_SCHEMA = pa.schema(
    [
        ("model_version", pa.string()),
        ("teacher", pa.string()),
        ("target", pa.string()),
        ("kind", pa.string()),
        ("status", pa.string()),
        ("labels", pa.int64()),
        ("positives", pa.int64()),
        ("n_train", pa.int64()),
        ("train_positives", pa.int64()),
        ("weighted_rate", pa.float64()),
        ("kish_ess_positive", pa.float64()),
        ("holdout_n", pa.int64()),
        ("holdout_positives", pa.int64()),
        ("ap", pa.float64()),
        ("auroc", pa.float64()),
        ("ece", pa.float64()),
        ("accuracy", pa.float64()),
        ("metric_note", pa.string()),
        ("gate_passed", pa.bool_()),
        ("gate_reason", pa.string()),
    ]
)

TRAINING_SET_SCHEMA = pa.schema(
    [("model_version", pa.string()), ("teacher", pa.string()), ("work_id", pa.string()), ("venue_key", pa.string())]
)

PRED_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("model_version", pa.string()),
        ("candidate_categories", pa.list_(pa.string())),
        ("consensus_categories", pa.list_(pa.string())),
        ("category_scores_codex", pa.list_(pa.float64())),
        ("category_scores_gemma", pa.list_(pa.float64())),
    ]
    + [pa.field(f"{t}_{s}", pa.bool_()) for t in ABOUT_CA_TARGETS for s in ("candidate", "consensus")]
    + [pa.field(f"{t}_score_{s}", pa.float64()) for t in ABOUT_CA_TARGETS for s in STUDENT_TEACHERS]
    + [
        f
        for t in CATEGORICAL_TARGETS
        for f in (
            pa.field(f"{t}_scores_codex", pa.list_(pa.float64())),
            pa.field(f"{t}_scores_gemma", pa.list_(pa.float64())),
            pa.field(f"{t}_codex", pa.string()),
            pa.field(f"{t}_gemma", pa.string()),
            pa.field(f"{t}_candidate", pa.string()),
            pa.field(f"{t}_consensus", pa.string()),
        )
    ]
    + [
        pa.field("teacher_disagreement_score", pa.float64()),
        pa.field("threshold_uncertainty_score", pa.float64()),
        pa.field("prediction_status", pa.string()),
        pa.field("gemma_label_status", pa.string()),
    ]
)

THRESHOLDS_SCHEMA = pa.schema(
    [
        ("model_version", pa.string()),
        ("target", pa.string()),
        ("gate_passed", pa.bool_()),
        ("gate_reason", pa.string()),
        ("rate", pa.float64()),
        ("n", pa.int64()),
        ("k", pa.int64()),
        ("threshold", pa.float64()),
        ("boundary_id", pa.string()),
    ]
)

PREVALENCE_SCHEMA = pa.schema(
    [
        ("population", pa.string()),
        ("category", pa.string()),
        ("method", pa.string()),
        ("teacher", pa.string()),
        ("n", pa.int64()),
        ("n_weighted", pa.float64()),
        ("rate", pa.float64()),
        ("se", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("strata_single", pa.int64()),
        ("design", pa.string()),
    ]
)

MACHINE_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("score_gemma", pa.float64()),
        ("score_codex", pa.float64()),
        ("score_spread", pa.float64()),
        ("validation_status", pa.string()),
        ("provisional", pa.bool_()),
        ("baseline", pa.bool_()),
        ("maturity_gate_passed", pa.bool_()),
        ("rounds_run", pa.int32()),
        ("arm_status", pa.string()),
        ("note", pa.string()),
        ("held_out", pa.bool_()),
    ]
)

HOLDOUT_SCHEMA = pa.schema(
    [
        ("work_id", pa.string()),
        ("venue_key", pa.string()),
        ("holdout_version", pa.string()),
        ("frozen_at", pa.timestamp("us")),
        ("run_id", pa.string()),
    ]
)

MODEL_VERSIONS_SCHEMA = pa.schema(
    [
        ("model_version", pa.string()),
        ("kind", pa.string()),
        ("created_at", pa.timestamp("us")),
        ("run_id", pa.string()),
        ("file", pa.string()),
        ("file_sha256", pa.string()),
        ("feature_kind", pa.string()),
        ("summary", pa.string()),
    ]
)

ROUNDS_SCHEMA = pa.schema(
    [
        ("round", pa.int32()),
        ("run_id", pa.string()),
        ("created_at", pa.timestamp("us")),
        ("training_signature", pa.string()),
        ("training_labels", pa.string()),
        ("metrics", pa.string()),
        ("maturity_gate_passed", pa.bool_()),
        ("gate_reason", pa.string()),
        ("proposed", pa.int32()),
    ]
)

ROUND_SCORES_SCHEMA = pa.schema(
    [("round", pa.int32()), ("arm", pa.string()), ("work_id", pa.string()), ("score", pa.float64())]
)

PROPOSALS_SCHEMA = pa.schema(
    [
        ("round", pa.int32()),
        ("work_id", pa.string()),
        ("reason", pa.string()),
        ("score_codex", pa.float64()),
        ("score_gemma", pa.float64()),
        ("score_spread", pa.float64()),
    ]
)

TABLES = [
    Table(
        "student_heads",
        "one head (teacher x target) of one model version: status, label counts, holdout metrics, support gate",
        "student_heads",
        HEADS_SCHEMA,
        ("model_version", "teacher", "target"),
    ),
    Table(
        "student_training_set",
        "one labelled work a head of one model version trained on, with its venue key (never a held-out venue)",
        "student_training_set",
        TRAINING_SET_SCHEMA,
        ("model_version", "teacher", "work_id"),
    ),
    Table(
        "student_scores",
        "one frame work's raw score from every head of the model version (one column per head)",
        "student_scores",
        None,
        ("id",),
    ),
    Table(
        "prediction_thresholds",
        "one head's quota threshold: design-weighted teacher rate, n, k, threshold score and boundary id",
        "prediction_thresholds",
        THRESHOLDS_SCHEMA,
        ("model_version", "target"),
    ),
    Table(
        "predictions",
        "one frame work's student decisions (candidate, consensus) and scores per head, always unvalidated",
        "predictions",
        PRED_SCHEMA,
        ("id",),
    ),
    Table(
        "prevalence",
        "one category rate on one population by one method (design-weighted teacher rate, classify-and-count)",
        "prevalence",
        PREVALENCE_SCHEMA,
        ("population", "category", "method", "teacher"),
    ),
    Table(
        "machine_scores",
        "one frame work's machine scores from both arms of the latest round, with its validation status",
        "machine_scores",
        MACHINE_SCHEMA,
        ("id",),
    ),
    Table(
        "student_holdout",
        "one frame work of a held-out venue, frozen at the first student materialization",
        "student_heads",
        HOLDOUT_SCHEMA,
        ("work_id",),
        store="duckdb",
    ),
    Table(
        "model_versions",
        "one published student model version and the SHA-256 of its file",
        "student_heads",
        MODEL_VERSIONS_SCHEMA,
        ("model_version",),
        store="duckdb",
        json_columns=frozenset({"summary"}),
    ),
    Table(
        "machine_rounds",
        "one machine-score round: its training signature and labels, holdout metrics, maturity gate",
        "machine_scores",
        ROUNDS_SCHEMA,
        ("round",),
        store="duckdb",
        json_columns=frozenset({"training_labels", "metrics"}),
    ),
    Table(
        "machine_round_scores",
        "one holdout work's score from one arm in one round",
        "machine_scores",
        ROUND_SCORES_SCHEMA,
        store="duckdb",
    ),
    Table(
        "machine_round_proposals",
        "one work a round proposed for the next active-learning batch, and why",
        "machine_scores",
        PROPOSALS_SCHEMA,
        store="duckdb",
    ),
]
