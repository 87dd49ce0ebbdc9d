"""Per-work JSON records with the field names of ../shared/seeds/004_*.txt (SPEC section 9).

A record is assembled from the frame row, the direct labels of every teacher, the hybrid prediction
and the machine scores. :func:`ship_violations` is the SPEC section 8 invariant that the blocking
asset check enforces on every record before any page is rendered.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import fastjsonschema

from ..vocab import PREDICTION_STATUS

#: JSON Schema (draft-07) of a published record: the seed 004 fields, route evidence, lineage.
SCHEMA_PATH = Path(__file__).with_name("work_record.schema.json")

DIRECT_LABEL_STATUS = "direct_label_unvalidated"
_LABEL_KEYS = (
    "categories",
    "domain",
    "study_design",
    "genre",
    "about_ca_system",
    "about_ca_topic",
    "confidence",
    "reason",
)


def _join(values: list[str] | None) -> str:
    return "; ".join(v for v in (values or []) if v)


@lru_cache(maxsize=1)
def record_validator():
    """The compiled validator of ``work_record.schema.json`` (fastjsonschema: about 14,000 records/s here).

    Call it with a record: returns the record, or raises ``fastjsonschema.JsonSchemaValueException``
    whose ``message`` names the first field that breaks the schema (e.g. ``data.routes.ca_aff must be boolean``).
    """
    return fastjsonschema.compile(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def schema_violation(record: dict) -> str | None:
    """The first way ``record`` breaks the JSON Schema, as ``"<id>: schema: <message>"``, or None."""
    try:
        record_validator()(record)
    except fastjsonschema.JsonSchemaValueException as exc:
        return f"{record.get('id') if isinstance(record, dict) else '?'}: schema: {exc.message}"
    return None


def direct_label_entry(label: dict) -> dict:
    """One entry of ``direct_labels``: the label with its source (teacher, model, prompt) and status."""
    entry = {
        "teacher": label["teacher"],
        "model": label["model"],
        "prompt_version": label["prompt_version"],
        "record_view": label["record_view"],
        "status": label["status"],
        "label_status": DIRECT_LABEL_STATUS if label["status"] == "labelled" else None,
        "source": label.get("source"),
        "error": label.get("error"),
        "call_id": label.get("call_id"),
        "labelled_at": str(label["created_at"]) if label.get("created_at") is not None else None,
    }
    for k in _LABEL_KEYS:
        entry[k] = label.get(k)
    if entry["categories"] is not None:
        entry["categories"] = list(entry["categories"])
    return entry


def build_record(work: dict, labels: list[dict], prediction: dict | None, machine: dict | None, lineage: dict) -> dict:
    """The published record of one frame work (seed 004 fields, plus route evidence and lineage)."""
    pred = None
    if prediction is not None:
        pred = {k: v for k, v in prediction.items() if k not in ("id", "gemma_label_status")}
    ms = None
    if machine is not None:
        ms = {k: v for k, v in machine.items() if k != "id"}
    return {
        "id": work["id"],
        "doi": work["doi"] or "",
        "title": work["title_text"],
        "year": work["publication_year"],
        "lang": work["language"] or "",
        "type": work["type"] or "",
        "venue": work["venue_name"] or "",
        "topic": work["topic"] or "",
        "field": work["field"] or "",
        "cited_by": work["cited_by_count"] or 0,
        "is_retracted": bool(work["is_retracted"]),
        "has_abstract": bool(work["has_abstract"]),
        "ca_institutions": _join(work["ca_institutions"]),
        "funders": _join(work["funder_names"]),
        "keywords": _join(work["keywords"]),
        "routes": {
            "ca_aff": work["ca_aff"],
            "ca_fund": work["ca_fund"],
            "ca_venue": work["ca_venue"],
            "about_ca": work["about_ca"],
            "invisible_to_affiliation_only": work["invisible_to_affiliation_only"],
        },
        "route_evidence": {
            "ca_aff": list(work["ca_aff_evidence"] or []),
            "ca_fund": list(work["ca_fund_evidence"] or []),
            "ca_venue": list(work["ca_venue_evidence"] or []),
            "about_ca": list(work["about_ca_evidence"] or []),
        },
        "retraction": {"is_retracted": True, "source": "OpenAlex is_retracted"} if work["is_retracted"] else None,
        "screen": None,
        "sampling_frame": {
            "in_sampling_frame": work["in_sampling_frame"],
            "exclusion": work["sampling_frame_exclusion"],
        },
        "direct_labels": [direct_label_entry(label) for label in sorted(labels, key=lambda label: label["teacher"])],
        "prediction": pred,
        "machine_scores": ms,
        "lineage": lineage,
    }


def ship_violations(record: dict) -> list[str]:
    """Every way ``record`` breaks SPEC section 8 (empty list = may ship).

    - a ``score_only:*`` machine-score row that carries any category label;
    - a direct label with categories but no teacher (source) or no status;
    - predicted categories without ``prediction_status`` or ``model_version``.
    """
    out: list[str] = []
    wid = record.get("id")
    ms = record.get("machine_scores") or {}
    if str(ms.get("validation_status") or "").startswith("score_only"):
        for key, value in ms.items():
            if "categor" in key and value not in (None, [], ""):
                out.append(f"{wid}: score_only machine scores carry a category label ({key}={value!r})")
    for lab in record.get("direct_labels") or []:
        if lab.get("categories") and (not lab.get("teacher") or not lab.get("status") or not lab.get("label_status")):
            out.append(f"{wid}: direct label categories {lab.get('categories')!r} without source and status")
    pred = record.get("prediction") or {}
    if (pred.get("candidate_categories") or pred.get("consensus_categories")) and (
        pred.get("prediction_status") != PREDICTION_STATUS or not pred.get("model_version")
    ):
        out.append(f"{wid}: predicted categories without prediction_status {PREDICTION_STATUS!r} and model_version")
    return out


def classification_card(record: dict) -> dict[str, Any]:
    """What the Classification card shows, by precedence: direct labels, then consensus, then candidate.

    Returns ``{"kind": "direct"|"consensus"|"candidate"|"no_category"|"none", ...}``: ``labels`` for
    direct, ``categories`` and ``model_version`` for the prediction kinds. ``no_category``: the
    classifier scored the work and called none of the categories on either side (a machine output,
    unvalidated, not a judgement that it is not meta-research).
    An empty category list from a labelled direct label means "not meta-research" (a judgement);
    no label and no prediction at all means "not classified yet" (absence is not a negative).
    """
    labelled = [
        label for label in record.get("direct_labels") or [] if label["status"] == "labelled"
    ]  # teacher calls and rule labels
    if labelled:
        return {"kind": "direct", "labels": labelled}
    pred = record.get("prediction") or {}
    if pred.get("consensus_categories"):
        return {
            "kind": "consensus",
            "categories": pred["consensus_categories"],
            "model_version": pred.get("model_version"),
        }
    if pred.get("candidate_categories"):
        return {
            "kind": "candidate",
            "categories": pred["candidate_categories"],
            "model_version": pred.get("model_version"),
        }
    if record.get("prediction"):
        return {"kind": "no_category", "categories": [], "model_version": pred.get("model_version")}
    return {"kind": "none"}
