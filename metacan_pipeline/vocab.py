"""The label vocabularies of SPEC section 3: the single source of every label name and order.

Every score array in the pipeline is ordered as the tuples below. Nothing else in the package may
spell a category, domain, study design or genre by hand.
"""

from __future__ import annotations

from .i18n import N_

CATEGORIES: tuple[str, ...] = (
    "metaresearch",
    "metaepi_narrow",
    "metaepi_broad",
    "bibliometrics",
    "sts",
    "scholarly_communication",
    "open_science",
    "research_integrity",
    "insufficient_payload",
)

#: Display names (interface strings: the served site shows them in French through the catalogue, site/locale).
CATEGORY_DISPLAY: dict[str, str] = {
    "metaresearch": N_("Metaresearch"),
    "metaepi_narrow": N_("Meta-epidemiology (narrow)"),
    "metaepi_broad": N_("Meta-epidemiology (broad)"),
    "bibliometrics": N_("Bibliometrics"),
    "sts": N_("Science and technology studies"),
    "scholarly_communication": N_("Scholarly communication"),
    "open_science": N_("Open science"),
    "research_integrity": N_("Research integrity"),
    "insufficient_payload": N_("Insufficient payload (model declined to judge)"),
}

DOMAINS: tuple[str, ...] = (
    "not_metaresearch",
    "methods",
    "reporting",
    "reproducibility",
    "evaluation",
    "incentives",
)

STUDY_DESIGNS: tuple[str, ...] = (
    "randomized_trial",
    "nonrandomized_trial",
    "observational",
    "systematic_review",
    "meta_analysis",
    "case_report",
    "qualitative",
    "simulation_or_modeling",
    "bench_or_experimental",
    "theoretical_or_conceptual",
    "not_applicable",
    "design_other",
)

GENRES: tuple[str, ...] = (
    "empirical",
    "review",
    "methods",
    "commentary",
    "editorial",
    "protocol",
    "dataset",
    "software",
    "other",
)

CONFIDENCES: tuple[str, ...] = ("high", "medium", "low")

ABOUT_CA_TARGETS: tuple[str, ...] = ("about_ca_system", "about_ca_topic")

#: The 11 binary student targets of SPEC section 6: 9 categories then the 2 about_ca flags.
BINARY_TARGETS: tuple[str, ...] = CATEGORIES + ABOUT_CA_TARGETS

#: The 3 categorical student targets of SPEC section 6 with their class order.
CATEGORICAL_TARGETS: dict[str, tuple[str, ...]] = {
    "domain": DOMAINS,
    "study_design": STUDY_DESIGNS,
    "genre": GENRES,
}

INSUFFICIENT_PAYLOAD = "insufficient_payload"

#: SPEC section 3: the fields of a direct label, in the rubric's order (a teacher reply adds the work ``id``).
LABEL_FIELDS: tuple[str, ...] = (
    "categories",
    "domain",
    "study_design",
    "genre",
    "about_ca_system",
    "about_ca_topic",
    "confidence",
    "reason",
)
REASON_MAX_CHARS = 400

#: SPEC section 4/6: the two teacher roles the student is built on. The census teacher labels every frame
#: work (cheap); the sample teacher labels the design-weighted sample (stronger). The registry's
#: ``[roles]`` table names the teacher that fills each (:func:`metacan_pipeline.teachers.core.registry.load_roles`).
CENSUS_TEACHER = "census"
SAMPLE_TEACHER = "sample"
TEACHER_ROLES: tuple[str, ...] = (CENSUS_TEACHER, SAMPLE_TEACHER)

#: SPEC section 2: the four routes, in display order.
ROUTES: tuple[str, ...] = ("ca_aff", "ca_fund", "ca_venue", "about_ca")

#: SPEC section 6/7 status strings. They ship verbatim.
PREDICTION_STATUS = "machine_predicted_unvalidated"
SCORE_ONLY_IMMATURE = "score_only:v0-immature-baseline"
SCORE_ONLY_MATURE = "score_only:mature"
#: The status of a reference-set head's score on a record: it ranks, it never asserts a category.
SCORE_ONLY_REFERENCE = "score_only:reference_set"
#: What a reference-set head may claim: its ``gate_reason`` in ``student_heads``.
REFERENCE_GATE_REASON = "reference set: machine scores only (never a decision, never a validated label)"
#: The suffix of the column beside a reference-set head's scores that holds why the head gives no score (its training
#: labels held one class): ``<set>__<target>:no_score`` in the records' input, ``no_score`` in a record's entry.
NO_SCORE_SUFFIX = ":no_score"
#: The start of a ``student_heads`` status of a head that could not be fitted (its labels held one class or none);
#: a binary one gives no score, and the reason follows this prefix.
CONSTANT_HEAD_STATUS = "constant: "

#: SPEC section 7: the ``label_batches`` batch of the works machine-score rounds propose to the teachers.
ACTIVE_LEARNING_BATCH = "active_learning"

#: Retraction Watch's ``RetractionNature`` values (the Crossref Labs export), each with the state name records,
#: filters and facets use. A work's state is one of these, ``none`` (checked, no notice) or ``not_checked`` (no
#: Retraction Watch file was configured): absence of a file is never "not retracted".
RETRACTION_NATURES: dict[str, str] = {
    "Retraction": "retraction",
    "Expression of concern": "expression_of_concern",
    "Correction": "correction",
    "Reinstatement": "reinstatement",
}
RETRACTION_NOT_CHECKED = "not_checked"
RETRACTION_NONE = "none"
RETRACTION_STATES: tuple[str, ...] = (
    *RETRACTION_NATURES.values(),
    RETRACTION_NONE,
    RETRACTION_NOT_CHECKED,
)
