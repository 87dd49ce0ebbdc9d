"""Each study-design class against NLM's publication types, per source of study-design labels and indexing group,
and the gate on the hand-indexed records (the original protocol, section 5.5).

For a class ``c``, a source ``s`` (a teacher's direct labels, a student head's most probable class) and an indexing
group ``g`` (:data:`.nlm.INDEXING_GROUPS`): the works whose MEDLINE record is of group ``g`` and eligible for ``c``
(:func:`.nlm.eligible`) and on which ``s`` decided are counted in a 2x2 table (``s`` says ``c`` or not, NLM says
``c`` or not). Agreement, precision and recall each come with their 95% Clopper-Pearson interval (scipy, as the
other instruments). Only the ``hand`` group is the reference and is gated: a class passes for a source when it has
at least ``min_n`` eligible records and ``min_positives`` NLM positives and the lower bounds of precision and recall
reach the thresholds; otherwise it fails and its labels ship as an unvalidated score. ``curated`` and ``automated``
rows are agreement with another machine: never gated, never pooled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..instruments.recall import recall_interval
from .nlm import HAND, INDEXING_GROUPS, MEDLINE_CLASSES, NLM_CLASSES, MedlineRecord, eligible, positive

REFERENCE = "reference (hand-indexed by NLM)"
MACHINE = "agreement with another machine (NLM {group})"
NO_SOURCE = "none"
OFFLINE = "no MEDLINE answers (offline)"
NO_SOURCES = "no source of study-design labels yet (no teacher's direct labels, no student head)"
NO_NLM_TYPE = "no reference: NLM has no publication type for this class"
NOT_REFERENCE = "not the reference: agreement with another machine, never gated"


@dataclass(frozen=True)
class MedlineGate:
    """The MEDLINE gate: fewest eligible hand-indexed records and NLM positives, and the lower 95% bounds precision
    and recall must reach."""

    min_n: int = 30
    min_positives: int = 10
    precision_lower: float = 0.80
    recall_lower: float = 0.70

    def __post_init__(self) -> None:
        if self.min_n < 1 or self.min_positives < 1:
            raise ValueError(
                f"MEDLINE gate: min_n and min_positives must be at least 1, got {self.min_n}, {self.min_positives}"
            )
        for name in ("precision_lower", "recall_lower"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"MEDLINE gate: {name} must lie in [0, 1], got {getattr(self, name)}")


def counts(
    records: Mapping[str, MedlineRecord], decisions: Mapping[str, str], design: str, group: str
) -> tuple[int, int, int, int]:
    """``(tp, fp, fn, tn)`` of one source on one class over the works of ``records`` (work id -> its MEDLINE record)
    of indexing ``group``, eligible for ``design``, that the source decided on (``decisions``: work id -> class)."""
    tp = fp = fn = tn = 0
    for work, record in records.items():
        said = decisions.get(work)
        if said is None or record.indexing != group or not eligible(design, record.year):
            continue
        truth, call = positive(design, record.publication_types), said == design
        tp += truth and call
        fp += call and not truth
        fn += truth and not call
        tn += not truth and not call
    return tp, fp, fn, tn


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def gate_verdict(design: str, n: int, tp: int, fp: int, fn: int, gate: MedlineGate) -> tuple[bool, str]:
    """``(passed, why)`` of one class and source on the hand-indexed records."""
    if not NLM_CLASSES[design].publication_types:
        return False, NO_NLM_TYPE
    _, p_low, _ = recall_interval(tp, tp + fp)
    _, r_low, _ = recall_interval(tp, tp + fn)
    if n < gate.min_n:
        return False, f"{n} eligible hand-indexed records, fewer than the minimum of {gate.min_n}"
    if tp + fn < gate.min_positives:
        return False, f"{tp + fn} NLM positives, fewer than the minimum of {gate.min_positives}"
    if p_low is None or p_low < gate.precision_lower or r_low is None or r_low < gate.recall_lower:
        return False, (
            f"lower bounds precision {_fmt(p_low)} (needs {gate.precision_lower:.2f}) and recall {_fmt(r_low)} "
            f"(needs {gate.recall_lower:.2f}) on {n} hand-indexed records"
        )
    return True, (
        f"agrees with MEDLINE on {n} hand-indexed records (lower bound {p_low:.2f} on precision, {r_low:.2f} on recall)"
    )


def agreement_rows(
    records: Mapping[str, MedlineRecord],
    decisions: Mapping[str, Mapping[str, str]],
    gate: MedlineGate,
    offline_note: str | None = None,
) -> list[dict]:
    """One row per class, source (in ``decisions`` order; :data:`NO_SOURCE` alone when there is none) and indexing
    group. ``offline_note``: what to say on every row when there is no MEDLINE answer at all."""
    rows = []
    for design in MEDLINE_CLASSES:
        for source in list(decisions) or [NO_SOURCE]:
            for group in INDEXING_GROUPS:
                tp, fp, fn, tn = counts(records, decisions.get(source, {}), design, group)
                n = tp + fp + fn + tn
                agreement, a_low, _ = recall_interval(tp + tn, n)
                precision, p_low, _ = recall_interval(tp, tp + fp)
                recall, r_low, _ = recall_interval(tp, tp + fn)
                passed: bool | None = None
                if group == HAND:
                    passed, why = gate_verdict(design, n, tp, fp, fn, gate)
                else:
                    why = NO_NLM_TYPE if not NLM_CLASSES[design].publication_types else NOT_REFERENCE
                if source == NO_SOURCE:
                    why = f"{NO_SOURCES}; {why}"
                if offline_note:
                    why = f"{offline_note}; {why}"
                rows.append(
                    {
                        "design": design,
                        "source": source,
                        "indexing": group,
                        "reference_kind": REFERENCE if group == HAND else MACHINE.format(group=group),
                        "eligible_from": NLM_CLASSES[design].introduced,
                        "n": n,
                        "true_positive": tp,
                        "false_positive": fp,
                        "false_negative": fn,
                        "true_negative": tn,
                        "agreement": agreement,
                        "agreement_lower": a_low,
                        "precision": precision,
                        "precision_lower": p_low,
                        "recall": recall,
                        "recall_lower": r_low,
                        "passed": passed,
                        "gate": why,
                    }
                )
    return rows
