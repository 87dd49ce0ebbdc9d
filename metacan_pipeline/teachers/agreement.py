"""Agreement between teacher configurations: Cohen's kappa per head, raw and design-weighted.

Heads (SPEC section 6): the 11 binary heads (9 categories, ``about_ca_system``, ``about_ca_topic``), the
3 categorical heads (``domain``, ``study_design``, ``genre``) and ``category_set`` (exact agreement on
the whole category list). A work is compared on a head only when both labels give it a value
(:func:`head_values`); a missing value is unknown, never a negative (SPEC section 4). Explicitly:

- only ``labelled`` rows are compared: a ``failed`` label (and a work one side never labelled) is
  unknown on every head, so the work is not among the ``n`` of any head;
- an ``insufficient_payload`` label (the teacher declined to judge, SPEC section 3) is compared on the
  ``insufficient_payload`` head (True) and on ``category_set``; every other head is unknown for it,
  since a declined judgment says nothing about metaresearch, domain or genre;
- a field the label's source never provides (``absent`` in the import's ``source_ref``) and a category
  it cannot express (``undecided_categories``, e.g. every category but ``metaresearch`` for the pilot
  screeners) are unknown; ``category_set`` is unknown when any category is undecided;
- ``domain`` is null in a label without ``metaresearch`` (SPEC section 3); when the source gives domains
  that null is the class ``not_metaresearch`` (the first class of the domain head), else unknown.

Kappa (Cohen 1960): ``(p_o - p_e) / (1 - p_e)`` with observed agreement ``p_o`` and chance agreement
``p_e = sum_k p_a(k) p_b(k)`` from the two marginals. Design-weighted: every work counts with its design
weight ``w`` (SPEC section 5, Hajek): ``p_o = sum w [a = b] / sum w`` and ``p_a(k) = sum w [a = k] / sum w``.
``sklearn.metrics.cohen_kappa_score(..., sample_weight=w)`` computes exactly this (its confusion matrix
is the weighted one); it is undefined (None here) when both sides use one and the same value throughout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sklearn.metrics import cohen_kappa_score

from ..vocab import BINARY_TARGETS, CATEGORICAL_TARGETS, CATEGORIES, INSUFFICIENT_PAYLOAD

CATEGORY_SET = "category_set"
HEADS: tuple[str, ...] = BINARY_TARGETS + tuple(CATEGORICAL_TARGETS) + (CATEGORY_SET,)
NO_CATEGORY = "(none)"
"""``category_set`` value of an empty category list ("not meta-research")."""


def agreement(a: Sequence[Any], b: Sequence[Any], weights: Sequence[float] | None = None) -> float | None:
    """Share of positions where ``a[i] == b[i]``, each counted with ``weights[i]`` (default 1).

    Shapes: three sequences of one length. Returns None when there is nothing to compare (no position, or
    the weights sum to 0).
    """
    w = [1.0] * len(a) if weights is None else [float(x) for x in weights]
    if len(a) != len(b) or len(a) != len(w):
        raise ValueError(f"agreement: lengths differ (a {len(a)}, b {len(b)}, weights {len(w)})")
    total = sum(w)
    if not a or total <= 0:
        return None
    return sum(wi for ai, bi, wi in zip(a, b, w) if ai == bi) / total


def kappa(a: Sequence[Any], b: Sequence[Any], weights: Sequence[float] | None = None) -> float | None:
    """Cohen's kappa of two raters' values (module docstring), design-weighted with ``weights``.

    Values are any hashable labels (booleans, class names). Returns None when undefined: no position,
    or both raters give one and the same value everywhere (``p_e = 1``). Computed by
    ``sklearn.metrics.cohen_kappa_score`` (``sample_weight`` = the design weights).
    """
    if len(a) != len(b) or (weights is not None and len(weights) != len(a)):
        raise ValueError(f"kappa: lengths differ (a {len(a)}, b {len(b)}, weights {None if weights is None else len(weights)})")
    if not a or len(set(a) | set(b)) < 2:
        return None
    # sklearn sorts the labels: give it strings so that booleans and class names sort alike.
    return float(cohen_kappa_score([str(x) for x in a], [str(x) for x in b], sample_weight=weights))


def _ref(label: Mapping[str, Any]) -> dict[str, Any]:
    ref = label.get("source_ref")
    if isinstance(ref, str) and ref:
        try:
            ref = json.loads(ref)
        except json.JSONDecodeError:
            return {}
    return ref if isinstance(ref, dict) else {}


def head_values(label: Mapping[str, Any]) -> dict[str, Any]:
    """The value of every head in :data:`HEADS` for one stored label row (columns of
    ``teacher_labels``: ``status``, ``categories``, ``domain``, ..., optional ``source_ref``), None where
    unknown (rules in the module docstring). Binary heads are booleans, the others strings.
    """
    values: dict[str, Any] = dict.fromkeys(HEADS)
    if label.get("status") != "labelled":
        return values
    ref = _ref(label)
    absent = set(ref.get("absent") or ())
    undecided = set(ref.get("undecided_categories") or ())
    cats = set(label.get("categories") or ())
    declined = INSUFFICIENT_PAYLOAD in cats
    for c in CATEGORIES:
        if c not in undecided and (not declined or c == INSUFFICIENT_PAYLOAD):
            values[c] = c in cats
    if not undecided:
        values[CATEGORY_SET] = ",".join(c for c in CATEGORIES if c in cats) or NO_CATEGORY
    if declined:
        return values
    for key in ("about_ca_system", "about_ca_topic", "study_design", "genre"):
        values[key] = None if key in absent else label.get(key)
    if "domain" not in absent:
        if label.get("domain") is not None:
            values["domain"] = label["domain"]
        elif values["metaresearch"] is False:
            values["domain"] = CATEGORICAL_TARGETS["domain"][0]  # not_metaresearch
    return values


@dataclass(frozen=True)
class HeadAgreement:
    """Agreement of two configurations on one head: ``n`` works compared, raw ``agreement`` and
    ``kappa``; ``n_with_weight`` of them carry a design weight, ``n_weighted`` is the sum of those weights
    (the population they stand for) and ``weighted_agreement`` / ``weighted_kappa`` use them."""

    head: str
    n: int
    agreement: float | None
    kappa: float | None
    n_with_weight: int
    n_weighted: float
    weighted_agreement: float | None
    weighted_kappa: float | None


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def compare(labels_a: Mapping[str, Mapping[str, Any]], labels_b: Mapping[str, Mapping[str, Any]],
            weights: Mapping[str, float | None] | None = None) -> tuple[list[HeadAgreement], list[tuple[str, str, str, str]]]:
    """Compare two configurations' labels (``{work_id: label row}``) on every head of :data:`HEADS`.

    ``weights``: ``{work_id: design weight}``; works without one (or with a weight <= 0) count in the raw
    figures only. Returns one :class:`HeadAgreement` per head (in :data:`HEADS` order, ``n`` = 0 when
    nothing is comparable) and the disagreements ``(work_id, head, value_a, value_b)`` sorted by work id
    and head order (booleans as ``true``/``false``).
    """
    weights = weights or {}
    common = sorted(set(labels_a) & set(labels_b))
    va = {w: head_values(labels_a[w]) for w in common}
    vb = {w: head_values(labels_b[w]) for w in common}
    results: list[HeadAgreement] = []
    disagreements: list[tuple[str, str, str, str]] = []
    for head in HEADS:
        works = [w for w in common if va[w][head] is not None and vb[w][head] is not None]
        a = [va[w][head] for w in works]
        b = [vb[w][head] for w in works]
        weighted = [(x, y, weights[w]) for w, x, y in zip(works, a, b) if (weights.get(w) or 0) > 0]
        wa, wb, ww = ([t[i] for t in weighted] for i in range(3))
        results.append(HeadAgreement(
            head=head, n=len(works), agreement=agreement(a, b), kappa=kappa(a, b), n_with_weight=len(weighted),
            n_weighted=float(sum(ww)), weighted_agreement=agreement(wa, wb, ww), weighted_kappa=kappa(wa, wb, ww)))
        disagreements += [(w, head, _text(x), _text(y)) for w, x, y in zip(works, a, b) if x != y]
    disagreements.sort(key=lambda r: (r[0], HEADS.index(r[1])))
    return results, disagreements
