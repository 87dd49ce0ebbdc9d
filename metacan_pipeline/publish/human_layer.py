"""The human layers of a published record (SPEC sections 8 and 10).

- ``human_code``: the final human code of a coded work (two coders agreed, or an adjudication) from the table
  ``human_codes`` that ``validation_report`` writes from the coding store. Its own field, heading and badge
  (``human_coded:<protocol_id>``), never mixed with the direct labels or the predictions. A machine adjudicator's
  codes (``machine_codes``) never reach it.
- ``human_validation``: per head of the record's classifier version whose newest ``human_validation`` row passed
  (the gate of SPEC section 10), the status ``human_validated:<protocol_id>``, the work's decision on that head under
  the protocol's decision rule and the figures behind it (precision and recall with their lower bounds, coded
  positives and works), shown one click away on the page. The passing gate rows come from
  :func:`metacan_pipeline.release.gate.passing_heads`.

Both keys are present only when there is something to show, so the record (and page) of a work without a human code
under a classifier version that passed no head is byte-identical to what it was. :func:`human_layer_violations` is
the blocking check's rule: no layer without the stored code or the passing gate row behind it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..vocab import CATEGORIES

HUMAN_CODE_FIELDS = ("categories", "domain", "study_design", "genre", "about_ca_system", "about_ca_topic")
HUMAN_CODED = "human_coded"
HUMAN_VALIDATED = "human_validated"


def human_code_entry(row: Mapping[str, Any] | None) -> dict | None:
    """The record's ``human_code`` of one ``human_codes`` row, or None."""
    if row is None:
        return None
    entry = {
        "protocol_id": row["protocol_id"],
        "status": f"{HUMAN_CODED}:{row['protocol_id']}",
        "basis": row["basis"],
        "coders": len(row["coders"] or []),
    }
    for k in HUMAN_CODE_FIELDS:
        entry[k] = row.get(k)
    if entry["categories"] is not None:
        entry["categories"] = list(entry["categories"])
    return entry


def _decision(prediction: Mapping[str, Any], head: str, rule: str) -> bool:
    if head in CATEGORIES:
        return head in (prediction.get(f"{rule}_categories") or [])
    return bool(prediction.get(f"{head}_{rule}"))


def validation_entries(prediction: Mapping[str, Any] | None, passing: Mapping[str, list[dict]]) -> list[dict]:
    """The record's ``human_validation`` entries: one per passing head of the prediction's classifier version."""
    if not prediction:
        return []
    out = []
    for g in passing.get(prediction.get("model_version"), []):
        out.append(
            {
                "head": g["head"],
                "status": f"{HUMAN_VALIDATED}:{g['protocol_id']}",
                "protocol_id": g["protocol_id"],
                "classifier_version": g["classifier_version"],
                "decision_rule": g["decision_rule"],
                "decision": _decision(prediction, g["head"], g["decision_rule"]),
                "precision": g["precision"],
                "precision_lower": g["precision_lower"],
                "recall": g["recall"],
                "recall_lower": g["recall_lower"],
                "coded_positives": g["coded_positives"],
                "n_coded": g["n_coded"],
                "reason": g["reason"],
                "gate_run_id": g["run_id"],
            }
        )
    return out


def human_layer_violations(
    record: Mapping[str, Any], stored: Mapping[tuple[str, str], Mapping[str, Any]], passing: Mapping[str, list[dict]]
) -> list[str]:
    """Every human layer of ``record`` without what must stand behind it (SPEC section 8): a ``human_code`` with no
    stored final human code of that work and protocol, or one that differs from it; a ``human_validated`` status of
    a (classifier version, head, protocol) whose newest ``human_validation`` row did not pass, or of another
    classifier version than the record's prediction. ``stored``: (protocol id, work id) -> final human code (coding
    store)."""
    wid = record.get("id")
    out = []
    code = record.get("human_code")
    if code is not None:
        row = stored.get((code.get("protocol_id"), wid))
        if row is None:
            out.append(f"{wid}: human_code under {code.get('protocol_id')} but no stored human code of that protocol")
        elif any(_norm(code.get(k)) != _norm(row.get(k)) for k in HUMAN_CODE_FIELDS):
            out.append(f"{wid}: human_code differs from the stored human code of {row['protocol_id']}")
        elif code.get("status") != f"{HUMAN_CODED}:{row['protocol_id']}":
            out.append(f"{wid}: human_code status {code.get('status')!r} is not {HUMAN_CODED}:{row['protocol_id']}")
    version = (record.get("prediction") or {}).get("model_version")
    allowed = {(g["classifier_version"], g["head"], g["protocol_id"]) for rows in passing.values() for g in rows}
    for v in record.get("human_validation") or []:
        key = (v.get("classifier_version"), v.get("head"), v.get("protocol_id"))
        if key not in allowed or v.get("classifier_version") != version:
            out.append(
                f"{wid}: {v.get('status')} on {v.get('head')} of {v.get('classifier_version')} without a passing gate"
            )
        elif v.get("status") != f"{HUMAN_VALIDATED}:{v.get('protocol_id')}":
            out.append(f"{wid}: validated status {v.get('status')!r} does not name its protocol")
    return out


def _norm(value: Any) -> Any:
    return list(value) if isinstance(value, list | tuple) else value
