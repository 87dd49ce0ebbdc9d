"""Tables of the audit study (:mod:`metacan_pipeline.audit`, SPEC section 10): the locked protocols, which protocol
each materialization named, and the audit sample of every protocol."""

from __future__ import annotations

import pyarrow as pa

from .fields import column, columns
from .student import INPUTS_SCHEMA
from .table import Table

PROTOCOLS_SCHEMA = columns(
    "protocol_id",
    "content_sha256",
    "created_at",
    "classifier_version",
    "decision_rule",
    column("heads", description="the heads the protocol validates"),
    "instructions_version",
    "instructions_sha256",
    "protocol_json",
)

PROTOCOL_RUNS_SCHEMA = columns(
    "run_id",
    "protocol_id",
    "materialized_at",
    "created",
)

#: The audit draw's plan (``audit/design.py``, registered in its private DuckDB, never written): one row per stratum in
#: report order (``pos``) with ``N_h``, ``n_h``, the selection probability and the design weight (NULL: excluded).
AUDIT_PLAN_SCHEMA = columns(
    "stratum",
    "pos",
    "big_n",
    "n",
    "pi",
    "weight",
)

#: A contract: the coding pages and the validation report read these columns by name.
AUDIT_SAMPLE_SCHEMA = columns(
    "protocol_id",
    "id",
    "stratum",
    "stratum_size",
    "stratum_sample_size",
    "hash_rank",
    "selection_probability",
    "design_weight",
    "in_sample",
    "trained_on",
    "language",
    "has_abstract",
    "route_key",
)

#: A contract: the records, the pages, the release and the rolling layer read whether a head passed from here.
HUMAN_VALIDATION_SCHEMA = columns(
    "protocol_id",
    "classifier_version",
    column("head", description="the head judged"),
    "passed",
    "precision",
    "precision_lower",
    "recall",
    "recall_lower",
    "coded_positives",
    "n_coded",
    column("reason", description="why the head passed or failed"),
    "run_id",
    "computed_at",
)

TABLES = [
    Table(
        "audit_protocols",
        "one locked audit protocol (append-only, never updated): classifier version, decision rule, heads, coder "
        "instructions and the canonical JSON its id hashes",
        "audit_protocol",
        PROTOCOLS_SCHEMA,
        ("protocol_id",),
        store="duckdb",
        json_columns=frozenset({"protocol_json"}),
    ),
    Table(
        "audit_protocol_runs",
        "one materialization of audit_protocol: the protocol it named (the newest row is the current protocol) "
        "and whether that run created it",
        "audit_protocol",
        PROTOCOL_RUNS_SCHEMA,
        ("run_id",),
        store="duckdb",
    ),
    Table(
        "audit_sample",
        "one frame work under one protocol: its stratum, N_h, n_h, salted-hash rank, selection probability, design "
        "weight, in the audit sample or not, trained on or not, and its language, abstract and route groups",
        "audit_sample",
        AUDIT_SAMPLE_SCHEMA,
        ("protocol_id", "id"),
    ),
    Table(
        "human_validation",
        "the gate's result for one head of one classifier version under one protocol, from one materialization of "
        "validation_report (append-only; the newest row per protocol, version and head counts): passed or not, the "
        "estimates and lower bounds behind it, coded positives, coded works, and why",
        "validation_report",
        HUMAN_VALIDATION_SCHEMA,
        ("protocol_id", "classifier_version", "head", "run_id"),
        store="duckdb",
    ),
]

# ---- the validation report: what one materialization of validation_report computed ----------------------------
#: Every report table starts with these: which protocol, classifier version and codes it rests on, and which run.
#: ``code_source`` is ``human`` (adjudicated or agreed human codes of two coders) or ``machine-adjudicator:<name>``
#: (an imported machine adjudicator, e.g. the frame1k verdicts): estimates from the latter are machine-adjudicated,
#: never human validation.
_REPORT_KEY = ("protocol_id", "classifier_version", "code_source")
_RUN = ("run_id", "computed_at")

VALIDATION_ERROR_RATES_SCHEMA = columns(
    *_REPORT_KEY,
    "system",
    "head",
    "group_by",
    "group",
    "metric",
    "value",
    "lower",
    "upper",
    "se",
    "n",
    "n_effective",
    "unresolved",
    "not_yet_coded",
    "note",
    *_RUN,
)

VALIDATION_CONFUSION_SCHEMA = columns(
    *_REPORT_KEY,
    "system",
    "head",
    "group_by",
    "group",
    "cell",
    "count",
    "weighted",
    *_RUN,
)

VALIDATION_PREVALENCE_SCHEMA = columns(
    *_REPORT_KEY,
    column(
        "head",
        description="the head (a category or about_ca flag) or estimand:<name>, one of the protocol's estimands "
        "(metacan_pipeline.student.estimands)",
    ),
    "method",
    "value",
    "lower",
    "upper",
    "se",
    "width_ratio",
    "n",
    "n_effective",
    "unresolved",
    "not_yet_coded",
    "note",
    *_RUN,
)

VALIDATION_AGREEMENT_SCHEMA = columns(
    *_REPORT_KEY,
    "head",
    column(
        "stratum", description="the stratum of the works coded twice, or 'all' (every one: raw and design-weighted)"
    ),
    "statistic",
    "weighting",
    "value",
    "lower",
    "upper",
    "n",
    "n_effective",
    *_RUN,
)

VALIDATION_GATE_SCHEMA = columns(
    *_REPORT_KEY,
    "system",
    "head",
    "passed",
    "judged",
    "reason",
    "coded_positives",
    "n_effective",
    "human_validation",
    *_RUN,
)

#: A contract: the records and pages read a work's human-coded layer from here (never from a machine adjudicator).
HUMAN_CODES_SCHEMA = columns(
    "protocol_id",
    "id",
    "basis",
    "categories",
    "domain",
    "study_design",
    "genre",
    "about_ca_system",
    "about_ca_topic",
    "coders",
    "answer_ids",
    "run_id",
)

_REPORT = "validation_report"
TABLES += [
    Table(
        "validation_error_rates",
        "one design-weighted precision, recall or F1 of one system (teacher or classifier decision rule) on one head, "
        "overall or in one group (language, route, genre, abstract), against one code source of the current protocol: "
        "value, 95% interval, n, Kish n, why not reported",
        _REPORT,
        VALIDATION_ERROR_RATES_SCHEMA,
        ("protocol_id", "code_source", "system", "head", "group_by", "group", "metric"),
    ),
    Table(
        "validation_confusion",
        "one cell (tp, fp, fn, tn) of the confusion matrix of one system on one head and group: its count of coded "
        "works and its design-weighted count",
        _REPORT,
        VALIDATION_CONFUSION_SCHEMA,
        ("protocol_id", "code_source", "system", "head", "group_by", "group", "cell"),
    ),
    Table(
        "validation_prevalence",
        "one prevalence estimate of one head or estimand: from the codes alone (method human) or prediction-powered "
        "with one system's frame-wide decisions (ppi:<system>), with its interval and its width over the codes-only one",
        _REPORT,
        VALIDATION_PREVALENCE_SCHEMA,
        ("protocol_id", "code_source", "head", "method"),
    ),
    Table(
        "validation_agreement",
        "one inter-coder agreement statistic (Cohen's kappa, Krippendorff's alpha; raw or design-weighted) of one head "
        "before adjudication, over every work coded twice or in one stratum, with its jackknife interval",
        _REPORT,
        VALIDATION_AGREEMENT_SCHEMA,
        ("protocol_id", "code_source", "head", "stratum", "statistic", "weighting"),
    ),
    Table(
        "validation_gate",
        "the gate applied to one system on one head for one code source: passed, judged, why; human_validation says "
        "whether the row counts towards human_validation (only the protocol's classifier rule on human codes)",
        _REPORT,
        VALIDATION_GATE_SCHEMA,
        ("protocol_id", "code_source", "system", "head"),
    ),
    Table(
        "human_codes",
        "the final human code of one coded work of the current protocol (two coders agreed, or an adjudication): the "
        "SPEC section 3 fields, the coders and the answers it rests on; the records' human-coded layer",
        _REPORT,
        HUMAN_CODES_SCHEMA,
        ("protocol_id", "id"),
    ),
]

# ---- what the audit reads ---------------------------------------------------------------------------------------
TABLES += [
    Table(
        "audit_inputs",
        "one input table of the audit study with its row count and content fingerprint at the audit's last run",
        "audit_inputs",
        INPUTS_SCHEMA,
        ("input",),
    ),
]

# ---- recall without a probability sample: the original protocol's instruments ii and iii ------------------------
FILTER_RECALL_SCHEMA = columns(
    "reference_source",
    "filter_name",
    "filter_kind",
    "filter_definition",
    column("category", description="the category whose reference positives the filter is run over"),
    column("n", description="reference positives in the frame (0: nothing to measure, the note says why)"),
    "kept",
    "dropped",
    column("recall", description="kept / n (null when n is 0)"),
    "lower",
    "upper",
    "interval_method",
    "note",
    *_RUN,
)

VENUE_RECALL_SCHEMA = columns(
    "venue_list_version",
    "venue_list_sha256",
    column("system", description="candidate | consensus | teacher:<name> | student:<teacher>:top_decile"),
    column("category", description="the category the system is judged on (metaresearch)"),
    column("group_by", description="the grouping: all | language | has_abstract | venue"),
    "group",
    column("reference_works", description="frame works published in a pinned venue of the group"),
    column("n", description="reference works the system decided on"),
    "detected",
    "missed",
    "undecided",
    column("recall", description="detected / n (null when n is 0): known-item recall, not a design-based estimate"),
    "lower",
    "upper",
    "interval_method",
    "estimate_kind",
    column("note", description="the system's standing (a teacher not qualified) or why nothing is measured"),
    *_RUN,
)

TABLES += [
    Table(
        "filter_recall",
        "the recall of one filter (a route, a lexicon tier, a topic filter) on one category against one reference "
        "(a qualified teacher's direct labels or the final human codes): positives kept and dropped, recall, 95% "
        "interval (instrument ii of the original protocol)",
        "filter_recall",
        FILTER_RECALL_SCHEMA,
        ("reference_source", "filter_name", "category"),
    ),
    Table(
        "venue_known_item_recall",
        "the known-item recall of one system on metaresearch over the frame's works in the pinned meta-research "
        "venues, overall or in one group (language, abstract, venue): a non-probability bound (instrument iii of "
        "the original protocol)",
        "venue_known_item_recall",
        VENUE_RECALL_SCHEMA,
        ("system", "group_by", "group"),
    ),
]

# ---- the study as a release holds it: what verify-release recomputes the validation report from ------------------
#: A release's audit sample: the drawn works of the study (``trained_on``: drawn from the works that trained or
#: calibrated the classifier, reported apart), with their stratum, N_h, n_h, pi and design weight.
STUDY_SAMPLE_SCHEMA = columns(
    "protocol_id",
    "id",
    "stratum",
    "stratum_size",
    "stratum_sample_size",
    "selection_probability",
    "design_weight",
    "trained_on",
    "language",
    "has_abstract",
    "route_key",
)

#: A release's coding tasks: queue position and the evidence version current at the cut (no evidence text).
STUDY_TASKS_SCHEMA = columns(
    "protocol_id",
    "id",
    column("position", pa.int64(), description="the task's position in the coding queue"),
    column("evidence_sha256", description="SHA-256 of the evidence JSON the task shows"),
)

#: A release's answers: every answer and adjudication ever appended, under the coder's pseudonym (never a name, an
#: email or a Label Studio identity; no note, no provenance).
STUDY_ANSWERS_SCHEMA = columns(
    "protocol_id",
    column("answer_id", description="the answer's released id: answer-<16 hex of a keyed hash of its store id>"),
    column("seq", pa.int64(), description="the answer's append order in the coding store"),
    "id",
    column("coder", description="the coder's pseudonym in this study: coder-<10 hex of a keyed hash>"),
    column("role", description="code (an independent coding) | adjudication (settles a disagreement)"),
    "categories",
    "domain",
    "study_design",
    "genre",
    "about_ca_system",
    "about_ca_topic",
    column("confidence", description="the coder's confidence: high | medium | low"),
    column("unresolved", pa.bool_(), description="the coder could not decide"),
    column("evidence_sha256", description="SHA-256 of the evidence version the coder was shown"),
    "submitted_at",
    column("source", description="site | label_studio:<16 hex of the imported file's SHA-256>"),
)

#: A release's machine adjudicators' codes on the study's works (reported as their own code source).
STUDY_MACHINE_CODES_SCHEMA = columns(
    "protocol_id",
    "adjudicator",
    "id",
    column("head", description="the head coded"),
    column("code", pa.int32(), description="1 | 0: the adjudicator's code on the head (null: no usable verdict)"),
)

#: A release's decisions of every system on the sampled works, with the classifier's score and threshold.
STUDY_DECISIONS_SCHEMA = columns(
    "protocol_id",
    "system",
    "id",
    column("head", description="the head decided"),
    column("decision", pa.int32(), description="1 | 0: the system's decision on the head"),
    column("score", pa.float64(), description="the classifier's score on the head (null: a teacher's direct label)"),
    column("threshold", pa.float64(), description="the head's quota threshold (null: a teacher's direct label)"),
)

#: A release's frame-wide decision means (the prediction-powered prevalence's other input).
STUDY_FRAME_MEANS_SCHEMA = columns(
    "protocol_id",
    "system",
    column("head", description="the head decided"),
    column("frame_mean", pa.float64(), description="the system's mean decision over the audited population"),
    column("frame_n", pa.int64(), description="works of the audited population the mean is over"),
)

#: What the coding store kept of the protocol (none, or one row): the heads a coder pair must agree on.
STUDY_CODING_SCHEMA = columns(
    "protocol_id",
    column("content_sha256", description="SHA-256 of the protocol's content: the seed of the coder pairs"),
    column("heads", description="the evaluated heads: a pair that differs only elsewhere needs no adjudication"),
)

#: ``{bundle table name: schema}`` of the study tables, in the order a bundle lists them.
STUDY_TABLES = {
    "study_sample": STUDY_SAMPLE_SCHEMA,
    "study_tasks": STUDY_TASKS_SCHEMA,
    "study_answers": STUDY_ANSWERS_SCHEMA,
    "study_machine_codes": STUDY_MACHINE_CODES_SCHEMA,
    "study_decisions": STUDY_DECISIONS_SCHEMA,
    "study_frame_means": STUDY_FRAME_MEANS_SCHEMA,
    "study_coding": STUDY_CODING_SCHEMA,
}
