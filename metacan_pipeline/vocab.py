"""The label vocabularies of SPEC section 3: the single source of every label name and order.

Every score array in the pipeline is ordered as the tuples below. Nothing else in the package may
spell a category, domain, study design or genre by hand.
"""

from __future__ import annotations

from .i18n import DEFAULT_LOCALE, N_, translations

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

#: The cascade's decision a work carries on the site (``works.cascade_decision``: on :data:`CASCADE_SITE_HEAD`, the
#: head every estimand reads): certified ``positive`` / ``negative``, ``teacher`` (sent to the teacher), ``unsettled``
#: (beyond the call budget), ``withheld`` (a rolling-layer work, head not validated), ``not_planned`` (no cascade
#: decision: the cascade did not run, or the work is in the holdout or already labelled by its teacher).
CASCADE_SITE_HEAD = "metaresearch"
CASCADE_DECISIONS: tuple[str, ...] = ("positive", "negative", "teacher", "unsettled", "withheld", "not_planned")

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

#: SPEC section 8: the status every direct label carries on a record (a machine output no human has checked).
DIRECT_LABEL_STATUS = "direct_label_unvalidated"
#: The prefixes of the human layers' statuses (SPEC section 8): ``<prefix>:<protocol id>``.
HUMAN_CODED_PREFIX = "human_coded"
HUMAN_VALIDATED_PREFIX = "human_validated"

# ---- display names -------------------------------------------------------------------------------------------
# Interface strings (English msgids; the served site says them in French through the catalogue, site/locale). A code
# travels unchanged in links, forms' values, records and the API; people read its display name.

DOMAIN_DISPLAY: dict[str, str] = {
    "not_metaresearch": N_("Not meta-research"),
    "methods": N_("Methods (how research is designed and analysed)"),
    "reporting": N_("Reporting (how research is reported)"),
    "reproducibility": N_("Reproducibility (whether results reproduce or replicate)"),
    "evaluation": N_("Evaluation (how research is assessed, reviewed or funded)"),
    "incentives": N_("Incentives (rewards, careers, metrics)"),
}
STUDY_DESIGN_DISPLAY: dict[str, str] = {
    "randomized_trial": N_("Randomized trial"),
    "nonrandomized_trial": N_("Non-randomized trial"),
    "observational": N_("Observational"),
    "systematic_review": N_("Systematic review"),
    "meta_analysis": N_("Meta-analysis"),
    "case_report": N_("Case report"),
    "qualitative": N_("Qualitative"),
    "simulation_or_modeling": N_("Simulation or modelling"),
    "bench_or_experimental": N_("Bench or experimental"),
    "theoretical_or_conceptual": N_("Theoretical or conceptual"),
    "not_applicable": N_("Not applicable (no study in the work)"),
    "design_other": N_("Another design"),
}
GENRE_DISPLAY: dict[str, str] = {
    "empirical": N_("Empirical"),
    "review": N_("Review"),
    "methods": N_("Methods"),
    "commentary": N_("Commentary"),
    "editorial": N_("Editorial"),
    "protocol": N_("Protocol"),
    "dataset": N_("Dataset"),
    "software": N_("Software"),
    "other": N_("Other"),
}
CONFIDENCE_DISPLAY: dict[str, str] = {"high": N_("high"), "medium": N_("medium"), "low": N_("low")}
ABOUT_CA_DISPLAY: dict[str, str] = {
    "about_ca_system": N_("About the Canadian research system"),
    "about_ca_topic": N_("Canada as a subject"),
}
ROUTE_DISPLAY: dict[str, str] = {
    "ca_aff": N_("Canadian affiliation"),
    "ca_fund": N_("Canadian funder"),
    "ca_venue": N_("Canadian venue"),
    "about_ca": N_("About Canada"),
}
TEACHER_ROLE_DISPLAY: dict[str, str] = {CENSUS_TEACHER: N_("census teacher"), SAMPLE_TEACHER: N_("sample teacher")}
#: Every status a page shows beside a label, a decision or a score; a human layer's status is its prefix and a
#: protocol id (:func:`display_name` names the protocol).
STATUS_DISPLAY: dict[str, str] = {
    DIRECT_LABEL_STATUS: N_("direct label, not validated by a human"),
    PREDICTION_STATUS: N_("machine prediction, not validated by a human"),
    SCORE_ONLY_IMMATURE: N_("score only, from a model that has not passed its maturity gate"),
    SCORE_ONLY_MATURE: N_("score only, from a model whose scores stopped moving"),
    SCORE_ONLY_REFERENCE: N_("score only, from a reference set"),
    "labelled": N_("labelled"),
    "failed": N_("label failed"),
    HUMAN_CODED_PREFIX: N_("coded by humans under audit protocol %(protocol)s"),
    HUMAN_VALIDATED_PREFIX: N_("validated by humans under audit protocol %(protocol)s"),
}

#: The display names of each vocabulary, by the name its field carries.
DISPLAY_NAMES: dict[str, dict[str, str]] = {
    "category": CATEGORY_DISPLAY,
    "domain": DOMAIN_DISPLAY,
    "study_design": STUDY_DESIGN_DISPLAY,
    "genre": GENRE_DISPLAY,
    "confidence": CONFIDENCE_DISPLAY,
    "about_ca": ABOUT_CA_DISPLAY,
    "route": ROUTE_DISPLAY,
    "teacher_role": TEACHER_ROLE_DISPLAY,
    "status": STATUS_DISPLAY,
}


def display_name(vocabulary: str, code: str | None, locale: str = DEFAULT_LOCALE) -> str | None:
    """The name people read for ``code`` of ``vocabulary`` (a key of :data:`DISPLAY_NAMES`) in ``locale``, through the
    catalogue: ``display_name("study_design", "randomized_trial", "fr")`` is ``"Essai randomisé"``. A human layer's
    status names its protocol (``human_validated:protocol-...``). A code the vocabulary does not hold (a future
    value, an imported set's) is returned as it is, and None stays None; a vocabulary that does not exist is a
    KeyError naming the vocabularies."""
    if vocabulary not in DISPLAY_NAMES:
        raise KeyError(f"no vocabulary {vocabulary!r}: the vocabularies are {', '.join(DISPLAY_NAMES)}")
    if code is None:
        return None
    names, tr = DISPLAY_NAMES[vocabulary], translations(locale)
    if code in names:
        return tr.gettext(names[code])
    prefix, sep, protocol = code.partition(":")
    if vocabulary == "status" and sep and prefix in (HUMAN_CODED_PREFIX, HUMAN_VALIDATED_PREFIX):
        return tr.gettext(names[prefix]) % {"protocol": protocol}
    return code
