"""The human-validation gate of one head of one classifier version (SPEC sections 8 and 10).

A head passes when the protocol's thresholds hold on the design-based 95% intervals of its precision and recall
against the adjudicated human codes: precision lower bound >= 0.80, recall lower bound >= 0.70, on at least 30 coded
positives (the SPEC section 10 defaults; the protocol fixes its own). With fewer coded positives, or a precision or
recall not reported (the minimum-n rule of :mod:`metacan_pipeline.audit.estimates.design_based`), the head *cannot be judged*:
it does not pass, and the reason says it was not judged rather than failed. Only a passing (classifier version,
head) may carry ``human_validated:<protocol>`` (SPEC section 8).
"""

from __future__ import annotations

from dataclasses import dataclass

from .design_based import Estimate


@dataclass(frozen=True)
class GateThresholds:
    """The gate of a protocol: lower 95% bounds on precision and recall, and the fewest coded positives."""

    precision_lower: float = 0.80
    recall_lower: float = 0.70
    min_coded_positives: int = 30


DEFAULT_THRESHOLDS = GateThresholds()
"""The SPEC section 10 defaults, for a protocol that names no thresholds of its own."""


@dataclass(frozen=True)
class GateResult:
    """``passed``: the head passes human validation; ``judged``: there were enough cases to judge it (a head not
    judged does not pass); ``reason``: one sentence naming the figures."""

    passed: bool
    judged: bool
    reason: str


def _figure(value: float, threshold: float) -> str:
    """Two decimals, or four when two would read as the threshold itself (0.7996 is not "0.80 < 0.80")."""
    text = f"{value:.2f}"
    return f"{value:.4f}" if text == f"{threshold:.2f}" and value != threshold else text


def _bound(name: str, estimate: Estimate, threshold: float) -> tuple[bool, str]:
    ok = estimate.lower >= threshold
    return ok, f"{name} lower bound {_figure(estimate.lower, threshold)} {'>=' if ok else '<'} {threshold:.2f}"


def head_gate(
    precision: Estimate, recall: Estimate, coded_positives: int, thresholds: GateThresholds = DEFAULT_THRESHOLDS
) -> GateResult:
    """Judge one head (module docstring). ``precision`` and ``recall`` are the head's design-based estimates (with
    their 95% intervals), ``coded_positives`` the number of adjudicated human positives they rest on.

    Reasons read, e.g., ``"precision lower bound 0.84 >= 0.80, recall lower bound 0.66 < 0.70: fails"`` or
    ``"22 coded positives < 30: cannot be judged"``.
    """
    if coded_positives < thresholds.min_coded_positives:
        return GateResult(
            False, False, f"{coded_positives} coded positives < {thresholds.min_coded_positives}: cannot be judged"
        )
    missing = [name for name, e in (("precision", precision), ("recall", recall)) if not e.reported]
    if missing:
        notes = "; ".join(
            f"{name}: {e.note}" for name, e in (("precision", precision), ("recall", recall)) if not e.reported
        )
        return GateResult(False, False, f"{' and '.join(missing)} not reported ({notes}): cannot be judged")
    p_ok, p_text = _bound("precision", precision, thresholds.precision_lower)
    r_ok, r_text = _bound("recall", recall, thresholds.recall_lower)
    passed = p_ok and r_ok
    return GateResult(passed, True, f"{p_text}, {r_text}: {'passes' if passed else 'fails'}")
