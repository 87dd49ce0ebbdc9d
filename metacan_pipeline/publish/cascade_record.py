"""The record's ``cascade``: the student's certified decisions of the cascade (``cascade_batch``), one per head.

Where a teacher is expensive, the cascade (:mod:`metacan_pipeline.student.cascade_batch`) lets the student decide the
works its certified thresholds settle and sends the band to the teacher. A record carries, per head of
``cascade_decisions`` that planned the work: the decision (``positive`` / ``negative``: certified; ``teacher``: in the
band, sent to the teacher; ``unsettled``: in the band beyond the call budget), the score, both thresholds, the model
version and, for a certified decision, its certificate (the measure, its target, the lower bound, the bound's method and
level, the held-out teacher labels it was computed on). Works the cascade did not plan (the holdout, the teacher's
labelled works) carry no entry.

A certified decision is a machine decision: its status is :data:`~metacan_pipeline.vocab.PREDICTION_STATUS`, it
never carries a category label or a validated status (:func:`cascade_violations`), and on a rolling-layer work the
decision of a head that has not passed human validation is withheld (:func:`withhold_cascade`, SPEC section 8), as the
prediction's categories are.
"""

from __future__ import annotations

from ..vocab import PREDICTION_STATUS

FIELD = "cascade"
#: The decisions of a cascade plan (:data:`metacan_pipeline.student.cascade.POSITIVE` ...), and the one a rolling-layer
#: record shows instead of a certified decision its head may not claim there.
CERTIFIED = ("positive", "negative")
DECISIONS = (*CERTIFIED, "teacher", "unsettled")
WITHHELD = "withheld"
#: What the certificate of each certified decision bounds: the precision of the works decided positive, the negative
#: predictive value (the share truly negative) of the works decided negative.
MEASURES = {"positive": "precision", "negative": "negative_predictive_value"}
#: The bounds' names as pages write them (proper names: the same in every language).
BOUND_METHOD_NAMES = {"clopper-pearson": "Clopper-Pearson", "jeffreys": "Jeffreys"}
#: The keys of an entry that say something about the work's category; a record never ships any of them on a cascade entry.
_CLAIM_KEYS = ("categories", "category", "label", "human_validation")


def _certificate(row: dict) -> dict | None:
    decision = row["decision"]
    if decision not in CERTIFIED:
        return None
    positive = decision == "positive"
    cert = {
        "measure": MEASURES[decision],
        "threshold": row["positive_threshold"] if positive else row["negative_threshold"],
        "target": row["precision_target"] if positive else row["npv_target"],
        "lower_bound": row["positive_bound"] if positive else row["negative_bound"],
        "method": row["bound_method"],
        "confidence": row["bound_level"],
        "calibration_n": row["calibration_n"],
        "calibration_positives": row["calibration_positives"],
    }
    if not positive:
        cert["recall_target"] = row["recall_target"]
        cert["vacuous"] = bool(row["negative_vacuous"])
    return cert


def cascade_entries(rows: list[dict] | None) -> list[dict]:
    """The record's ``cascade`` from the work's ``cascade_decisions`` rows joined to their head's
    ``cascade_thresholds`` row (``record_inputs.sql``), one entry per head in the rows' order (by head); empty without
    rows."""
    return [
        {
            "head": row["target"],
            "teacher": row["teacher"],
            "model_version": row["model_version"],
            "score": row["score"],
            "decision": row["decision"],
            "status": PREDICTION_STATUS,
            "positive_threshold": row["positive_threshold"],
            "negative_threshold": row["negative_threshold"],
            "certificate": _certificate(row),
        }
        for row in rows or []
    ]


def withhold_cascade(record: dict, passed) -> None:
    """On a rolling-layer record (``layer`` set by :class:`metacan_pipeline.release.layer.LayerRule`), replace each
    certified decision of a head for which ``passed(model_version, head)`` is false by :data:`WITHHELD` (no
    certificate; the score and thresholds stay). The band's decisions (teacher, unsettled) claim nothing and stay."""
    for entry in record.get(FIELD) or []:
        if entry["decision"] in CERTIFIED and not passed(entry["model_version"], entry["head"]):
            entry.update(decision=WITHHELD, certificate=None)


def cascade_violations(record: dict, rolling: bool = False, passed=lambda version, head: False) -> list[str]:
    """Every way the record's ``cascade`` would ship a certified decision as more than a machine decision (SPEC section
    8), as ``"<id>: cascade: ..."``: an entry whose status is not :data:`PREDICTION_STATUS` or that names no model
    version, one carrying a category label or a validation, a certified decision without its certificate, and, on a
    rolling-layer record (``rolling``), a certified decision of a head that ``passed(model_version, head)`` says has not
    passed human validation."""
    out = []
    wid = record.get("id")
    for entry in record.get(FIELD) or []:
        head, decision = entry.get("head"), entry.get("decision")
        if entry.get("status") != PREDICTION_STATUS or not entry.get("model_version"):
            out.append(
                f"{wid}: cascade: head {head} decision {decision!r} with status {entry.get('status')!r}: a certified "
                f"decision is a machine decision ({PREDICTION_STATUS}, with its model_version), never a validated label"
            )
        claims = [k for k in _CLAIM_KEYS if entry.get(k) not in (None, [], "")]
        if claims:
            out.append(f"{wid}: cascade: head {head} carries {', '.join(claims)}: a decision is not a category label")
        if decision in CERTIFIED and not entry.get("certificate"):
            out.append(f"{wid}: cascade: head {head} decided {decision} without its certificate")
        if rolling and decision in CERTIFIED and not passed(entry.get("model_version"), head):
            out.append(
                f"{wid}: rolling layer: cascade decision {decision} on head {head} of {entry.get('model_version')}, "
                "which has not passed human validation"
            )
    return out
