"""Tables of study design against MEDLINE (:mod:`metacan_pipeline.audit.medline`, SPEC section 11): each frame
work's MEDLINE record as NLM indexed it, and each class's agreement with it per source of study-design labels."""

from __future__ import annotations

import pyarrow as pa

from .fields import column, columns
from .table import Table

_S, _I64, _F64, _B, _LS = pa.string(), pa.int64(), pa.float64(), pa.bool_(), pa.list_(pa.string())

MEDLINE_RECORDS_SCHEMA = columns(
    "id",
    column("pmid", _S, "the work's PubMed id (OpenAlex ids.pmid, digits)"),
    column(
        "answer",
        _S,
        "what the archived efetch answers say: record (NLM returned one) | no_record (asked, none returned) | "
        "not_asked (no archived answer yet)",
    ),
    column("medline_status", _S, "MedlineCitation Status as NLM gives it (MEDLINE, PubMed-not-MEDLINE, ...)"),
    column("indexing_method", _S, "MedlineCitation IndexingMethod as NLM gives it (null: absent, indexed by hand)"),
    column(
        "indexing",
        _S,
        "hand (the reference) | curated | automated (machine: agreement with another machine) | not_indexed",
    ),
    column("year", pa.int32(), "the year NLM completed indexing the record (DateCompleted), else its publication year"),
    column("publication_types", _LS, "the record's NLM publication type names, as NLM spells them"),
    column("publication_type_uis", _LS, "their MeSH unique ids (PublicationType UI), in the same order"),
    "run_id",
    "computed_at",
)

MEDLINE_AGREEMENT_SCHEMA = columns(
    column("design", _S, "the study_design class judged as an independent binary head"),
    column("source", _S, "the study-design labels judged: teacher:<name> (direct labels) | student:<teacher> (head)"),
    column("indexing", _S, "the MEDLINE records compared: hand (the reference) | curated | automated"),
    column("reference_kind", _S, "reference (hand-indexed) | agreement with another machine (curated, automated)"),
    column("eligible_from", _I64, "the first year NLM could assign the class (null: since MEDLINE began)"),
    column("n", _I64, "eligible records of the group with a decision of the source"),
    column("true_positive", _I64, "the source says the class and NLM does"),
    column("false_positive", _I64, "the source says the class and NLM does not"),
    column("false_negative", _I64, "NLM says the class and the source does not"),
    column("true_negative", _I64, "neither says the class"),
    column("agreement", _F64, "(true positives + true negatives) / n"),
    column("agreement_lower", _F64, "lower bound of agreement's 95% Clopper-Pearson interval"),
    column("precision", _F64, "true positives / what the source says is the class (null: it says none)"),
    column("precision_lower", _F64, "lower bound of precision's 95% Clopper-Pearson interval"),
    column("recall", _F64, "true positives / NLM's positives (null: NLM has none)"),
    column("recall_lower", _F64, "lower bound of recall's 95% Clopper-Pearson interval"),
    column("passed", _B, "the class passed the MEDLINE gate for this source (null: not the reference group)"),
    column("gate", _S, "why the class passed or failed the gate, or why nothing is measured"),
    "run_id",
    "computed_at",
)

TABLES = [
    Table(
        "medline_records",
        "one frame work with a PMID: its MEDLINE record as the archived efetch answers give it (status, indexing "
        "method, year, NLM publication types)",
        "medline_study_design",
        MEDLINE_RECORDS_SCHEMA,
        ("id",),
    ),
    Table(
        "medline_study_design",
        "one study_design class, one source of study-design labels and one indexing group: agreement, precision and "
        "recall against NLM's publication types on the eligible records, with 95% lower bounds, and the gate on the "
        "hand-indexed ones",
        "medline_study_design",
        MEDLINE_AGREEMENT_SCHEMA,
        ("design", "source", "indexing"),
    ),
]
