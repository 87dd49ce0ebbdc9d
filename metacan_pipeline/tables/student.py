"""Tables of the student stage (:mod:`metacan_pipeline.student`, SPEC sections 6-7): heads and their
training set, scores, thresholds and predictions, prevalence, the machine-score rounds, the frozen
holdout and the published model versions."""

from __future__ import annotations

import pyarrow as pa

from ..vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS
from .fields import PUBLISHED_TEACHERS, column, columns
from .table import Table

HEADS_SCHEMA = columns(
    "model_version",
    "teacher",
    "target",
    column("kind", description="binary | categorical"),
    column("status", description="the head's training outcome (trained, or why not)"),
    column("labels", description="labels of the head's teacher on the target"),
    "positives",
    "n_train",
    "train_positives",
    "weighted_rate",
    "kish_ess_positive",
    "holdout_n",
    "holdout_positives",
    "ap",
    "auroc",
    "ece",
    "accuracy",
    "metric_note",
    "gate_passed",
    "gate_reason",
    *(f"{m}_ci_{end}" for m in ("ap", "auroc", "ece", "accuracy") for end in ("low", "high")),
)

TRAINING_SET_SCHEMA = columns(
    "model_version",
    column("teacher", description="the source whose heads the work trained: a role teacher or a reference set"),
    "work_id",
    column(
        "venue_key",
        description="the work's frame venue key (the holdout's group); NULL for a reference-set work outside the frame",
    ),
)

PRED_SCHEMA = columns(
    "id",
    "model_version",
    "candidate_categories",
    "consensus_categories",
    *(f"category_scores_{s}" for s in PUBLISHED_TEACHERS),
    *(f"{t}_{s}" for t in ABOUT_CA_TARGETS for s in ("candidate", "consensus")),
    *(f"{t}_score_{s}" for t in ABOUT_CA_TARGETS for s in PUBLISHED_TEACHERS),
    *(
        name
        for t in CATEGORICAL_TARGETS
        for name in (
            *(f"{t}_scores_{s}" for s in PUBLISHED_TEACHERS),
            *(f"{t}_{s}" for s in PUBLISHED_TEACHERS),
            f"{t}_candidate",
            f"{t}_consensus",
        )
    ),
    "teacher_disagreement_score",
    "threshold_uncertainty_score",
    "prediction_status",
    "gemma_label_status",
)

THRESHOLDS_SCHEMA = columns(
    "model_version",
    "target",
    "gate_passed",
    "gate_reason",
    column("rate", description="design-weighted rate of the sample teacher's positives on the target"),
    column("n", description="works scored"),
    "k",
    "threshold",
    "boundary_id",
)

PREVALENCE_SCHEMA = columns(
    column("population", description="the population the rate is of (frame, sampling frame, ...)"),
    column(
        "estimand",
        description="category (the category's rate, every route) or the protocol's estimand the rate is of: primary, "
        "primary_ca_aff, primary_ca_fund, secondary, alt1_strict, alt2_broad (metacan_pipeline.student.estimands)",
    ),
    "category",
    column("method", description="design-weighted teacher rate, or classify-and-count"),
    column("teacher", description="the teacher whose labels the rate counts (null: the classifier's rows)"),
    column("n", description="labelled works the rate counts"),
    "n_weighted",
    "rate",
    "se",
    "ci_low",
    "ci_high",
    "strata_single",
    "design",
)

MACHINE_SCHEMA = columns(
    "id",
    "score_gemma",
    "score_codex",
    "score_spread",
    "validation_status",
    "provisional",
    "baseline",
    "maturity_gate_passed",
    "rounds_run",
    "arm_status",
    column("note", description="what the scores rest on"),
    "held_out",
)

HOLDOUT_SCHEMA = columns(
    "work_id",
    "venue_key",
    "holdout_version",
    "frozen_at",
    "run_id",
)

MODEL_VERSIONS_SCHEMA = columns(
    "model_version",
    column("kind", description="the kind of model version"),
    "created_at",
    "run_id",
    column("file", description="path of the model file"),
    "file_sha256",
    "feature_kind",
    "summary",
)

ROUNDS_SCHEMA = columns(
    "round",
    "run_id",
    "created_at",
    "training_signature",
    "training_labels",
    "metrics",
    "maturity_gate_passed",
    column("gate_reason", description="why the maturity gate passed or failed"),
    "proposed",
)

ROUND_SCORES_SCHEMA = columns("round", "arm", "work_id", "score")

PROPOSALS_SCHEMA = columns(
    "round",
    "work_id",
    column("reason", description="why the round proposed the work (spread, near 0.5, random sentinel)"),
    "score_codex",
    "score_gemma",
    "score_spread",
)

CASCADE_THRESHOLDS_SCHEMA = columns(
    "run_id",
    "computed_at",
    "model_version",
    column("teacher", description="the teacher whose calls the cascade spends (a role teacher)"),
    "target",
    "precision_target",
    "npv_target",
    "recall_target",
    "bound_level",
    "bound_method",
    "calibration_n",
    "calibration_positives",
    "positive_threshold",
    "positive_bound",
    "negative_threshold",
    "negative_bound",
    "negative_vacuous",
    "works_planned",
    "decided_positive",
    "decided_negative",
    "sent_to_teacher",
    "added_to_batch",
    "unsettled",
)

CASCADE_DECISIONS_SCHEMA = columns(
    "id",
    "model_version",
    "target",
    column("score", description="the head's score of the work (student_scores)"),
    "decision",
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
        "one category rate, or one estimand's rate, on one population by one method (design-weighted teacher rate, "
        "classify-and-count, screener-swap range)",
        "prevalence",
        PREVALENCE_SCHEMA,
        ("population", "estimand", "category", "method", "teacher"),
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
        "cascade_thresholds",
        "one head's certified cascade thresholds and the plan's counts (the teacher labels only the band)",
        "cascade_batch",
        CASCADE_THRESHOLDS_SCHEMA,
        ("model_version", "target"),
    ),
    Table(
        "cascade_decisions",
        "one work and head of the cascade's plan: score and decision (certified, teacher or unsettled)",
        "cascade_batch",
        CASCADE_DECISIONS_SCHEMA,
        ("id", "target"),
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


#: The rejects file of ``metacan score`` (``OUT.rejects.csv``): one input row that could not be scored.
SCORE_REJECTS_SCHEMA = columns(
    column("row", pa.int64(), "the row's 1-based number among the input's rows"),
    column("location", pa.string(), "where the row is in the input (line, record index)"),
    column("id", pa.string(), "the row's id as given, when it has one"),
    column("reason", pa.string(), "why the row could not be scored"),
    column("excerpt", pa.string(), "the start of the row as read"),
)


def score_list_schema(heads: list[tuple[str, bool]]) -> pa.Schema:
    """The output of ``metacan score``: ``id``, ``title``; per head ``(name, categorical)`` its ``<source>:<head>`` column (a
    score, or a categorical head's most likely class) and the second column (its percentile within the frame, or
    the class's probability); then ``model_version`` and ``validation_status``."""
    fields = [
        column("id", pa.string(), "the work's id as listed"),
        column("title", pa.string(), "the title the scores were computed from, as plain text"),
    ]
    for name, categorical in heads:
        fields.append(
            column(name, pa.string(), "the head's most likely class")
            if categorical
            else column(name, pa.float64(), "the head's score in [0, 1]")
        )
        second = "probability" if categorical else "percentile"
        fields.append(
            column(
                f"{name}:{second}",
                pa.float64(),
                "that class's probability" if categorical else "the score's percentile among the frame's scores",
            )
        )
    return columns(*fields, "model_version", column("validation_status", pa.string(), "the scores' status, verbatim"))


def student_scores_schema(written: pa.Schema) -> pa.Schema:
    """The columns of a written ``student_scores`` table (one per head, so the catalog declares none), each with
    its type as written and a description: ``id``, ``held_out``, per binary head ``<teacher>__<target>`` (its
    score), per categorical head ``<teacher>__<target>`` (class probabilities) and ``<teacher>__<target>__argmax``.
    Raises ValueError naming a column that is none of these (a writer that added a column must describe it here)."""
    fields = []
    for f in written:
        teacher, _, rest = f.name.partition("__")
        target, _, suffix = rest.partition("__")
        if f.name == "id":
            description = "OpenAlex short work id (W123...)"
        elif f.name == "held_out":
            description = "the work's venue is one the student holds out of training"
        elif target in CATEGORICAL_TARGETS and suffix == "argmax":
            description = f"the most probable class of teacher {teacher}'s head {target}"
        elif target in CATEGORICAL_TARGETS and not suffix:
            description = (
                f"probability of each class of teacher {teacher}'s head {target} "
                f"({', '.join(CATEGORICAL_TARGETS[target])}, in that order)"
            )
        elif teacher and target and not suffix:
            description = (
                f"the score in [0, 1] of teacher {teacher}'s head {target} (a score, never a category; null when the "
                "head gives no score: its training labels held one class)"
            )
        else:
            raise ValueError(
                f"student_scores column {f.name!r} has no description: describe it in student_scores_schema"
            )
        fields.append(column(f.name, f.type, description))
    return columns(*fields)


#: What a stage reads, fingerprinted (:mod:`metacan_pipeline.fingerprints`): one row per input table.
INPUTS_SCHEMA = columns(
    "input",
    column("rows", description="rows of the input table (0: not materialized yet)"),
    "fingerprint",
    "note",
    "run_id",
    "computed_at",
)

TABLES += [
    Table(
        "scoring_inputs",
        "one input table of the scoring stage (direct labels, imported labels, sample design, teacher qualification) "
        "with its row count and content fingerprint at the stage's last run",
        "scoring_inputs",
        INPUTS_SCHEMA,
        ("input",),
    ),
]
