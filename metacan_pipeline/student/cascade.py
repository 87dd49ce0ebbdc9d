"""The cascade: student decisions where a binary head's threshold is *certified*, the teacher for the rest.

A teacher that is expensive (a frontier model, a slow local model) labels only the works the student cannot
settle. For one binary head, on works the teacher labelled that the head did not train on (their scores, the
teacher's 1/0 labels and their design weights, if any):

- the *positive threshold* ``t+`` is the lowest score such that the works scored ``>= t+`` have a certified
  precision: the one-sided lower confidence bound (level ``confidence``, 95% by default) of their
  (design-weighted) positive rate is at or above ``target``;
- the *negative threshold* ``t-`` is the highest score such that the works scored ``<= t-`` have a certified
  negative predictive value (NPV, their negative rate), by the same rule.

Works scored strictly between them are the *uncertainty band*. A call budget ``B`` sizes the teacher's share:
the ``B`` band works closest to the band's middle (or, ``order="top"``, its highest scores) go to the teacher;
the other band works are "not settled within budget" (no decision at all); the works outside the band carry the
student's certified decision, which is a machine decision, never a validated label.

Bound (``method``):

- ``clopper-pearson`` (default): the exact binomial bound, ``Beta(alpha; k, n - k + 1)`` (0 when ``k = 0``).
  Its coverage is at least the nominal level for every true rate and every ``n``, which is what a *certified*
  threshold promises. Jeffreys' interval has coverage close to the nominal level on average but falls below it
  for some rates, notably near 0 and 1, where precision targets of 0.8-0.95 on a few dozen works live.
- ``jeffreys``: ``Beta(alpha; k + 1/2, n - k + 1/2)`` (0 when ``k = 0``), tighter; offered for comparison.

With design weights the bound is taken at the Kish effective size ``n_eff = (sum w)^2 / sum w^2`` of the set and
``k_eff = n_eff * p_w`` (``p_w`` the weighted positive rate): the beta quantile is defined for non-integer
counts. Without weights ``n_eff = n`` and the bound is the exact one.

Scan (fixed-sequence testing): candidate thresholds are the distinct scores, tested from the most confident
end (highest score for ``t+``, lowest for ``t-``) towards the middle; a set too small to reach ``target`` even if
every work in it were of the right class is skipped (that depends on the scores and weights only, not on the
labels), and the scan stops at the first set that fails. The certified threshold is the last one that passed.
A ``step`` of ``k`` works tests only the smallest set of at least ``k``, ``2k``, ... works and the largest set (a
grid fixed by the scores, not the labels): one error among the very first works then no longer ends the scan.
Testing in a fixed order and stopping at the first failure controls the chance that the chosen set's true
precision is below ``target`` at ``1 - confidence`` without a multiplicity correction; taking the lowest
passing threshold among all of them would not (many sets tried, the luckiest kept).

If the two certified sets overlap (``t- >= t+``), the works in both get no student decision: they are in the band.

A rare target's NPV can be certified by its base rate alone (:attr:`Certified.vacuous`): every calibration work
together is clean enough, whatever the ranking. :func:`certify_recall` (``certify_head(negative_recall=...)``)
caps ``t-`` so that the works decided negative keep a certified share of the teacher's positives above it.

Pure functions on numpy arrays (SciPy for the beta quantile); nothing is read or written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

METHODS = ("clopper-pearson", "jeffreys")
SCANS = ("fixed-sequence", "lowest")
ORDERS = ("middle", "top")
#: The decision of one work in a cascade plan (:func:`plan_cascade`).
POSITIVE, NEGATIVE, TEACHER, UNSETTLED = "positive", "negative", "teacher", "unsettled"


def lower_bound(k, n, confidence: float = 0.95, method: str = "clopper-pearson") -> np.ndarray:
    """The one-sided lower confidence bound of a binomial rate with ``k`` successes of ``n`` (arrays or
    scalars; non-integer effective counts are accepted): :data:`METHODS` as in the module docstring; 0 where
    ``k <= 0`` or ``n <= 0``.

    Raises ValueError for an unknown method, a confidence outside (0, 1) or ``k`` outside [0, n].
    """
    if method not in METHODS:
        raise ValueError(f"bound method {method!r}: expected one of {', '.join(METHODS)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence!r}: expected a level strictly between 0 and 1, such as 0.95")
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    if np.any(k < -1e-9) or np.any(k > n + 1e-9):
        raise ValueError("successes k must lie between 0 and n for every set")
    k = np.clip(k, 0.0, n)
    alpha = 1.0 - confidence
    ok = (k > 0) & (n > 0)
    a = np.where(ok, k, 1.0) + (0.5 if method == "jeffreys" else 0.0)
    b = np.where(ok, n - k, 0.0) + (0.5 if method == "jeffreys" else 1.0)
    out = np.where(ok, beta.ppf(alpha, a, np.maximum(b, 1e-12)), 0.0)
    return out if out.ndim else float(out)


@dataclass(frozen=True)
class Certified:
    """A certified threshold of one side of a head. ``threshold``: ``t+`` (decide positive for scores at or
    above it) or ``t-`` (decide negative at or below it); None when no set certifies. ``n``: works in the
    certified set; ``n_eff``: their Kish effective size; ``rate``: their (weighted) rate of the side's class
    (precision or NPV); ``bound``: its lower confidence bound (None without a threshold). ``tested``: sets
    tested in the scan; ``stopped``: why the scan ended. ``base_bound``: the bound of the same rate over every
    calibration work (the set ``t = -inf`` or ``+inf`` would decide; None without works)."""

    side: str
    target: float
    threshold: float | None
    n: int
    n_eff: float
    rate: float | None
    bound: float | None
    tested: int
    stopped: str
    base_bound: float | None = None

    @property
    def vacuous(self) -> bool:
        """The target is met by the base rate alone: every calibration work together already reaches it, so
        the certificate says nothing about the head's ranking (a rare target's NPV at a target below its
        negative rate; raise the target above the base rate, or read recall, before trusting such a side)."""
        return self.base_bound is not None and self.base_bound >= self.target


def _validate(scores, labels, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels)
    if s.ndim != 1 or y.shape != s.shape:
        raise ValueError(
            f"scores and labels must be 1-D arrays of the same length (got {s.shape} and {y.shape}): one per work"
        )
    if not np.all(np.isfinite(s)):
        raise ValueError("scores hold NaN or infinite values: score every calibration work before certifying")
    if not np.all(np.isin(y, (0, 1))):
        raise ValueError("labels must be the teacher's 1/0 labels of the head's target (no missing label)")
    if weights is None:
        w = np.ones(len(s))
    else:
        w = np.asarray(weights, dtype=float)
        if w.shape != s.shape or not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError(
                "weights must be one positive, finite design weight per work (1/selection probability); "
                "pass None for an unweighted set"
            )
    return s, y.astype(float), w


def certify(
    scores,
    labels,
    target: float,
    *,
    side: str = "positive",
    weights=None,
    confidence: float = 0.95,
    method: str = "clopper-pearson",
    scan: str = "fixed-sequence",
    step: int = 1,
) -> Certified:
    """The certified threshold of ``side`` (``positive``: precision of ``{score >= t}``; ``negative``: NPV of
    ``{score <= t}``) on teacher-labelled held-out works, by the fixed-sequence scan of the module docstring.

    ``labels``: the teacher's 1/0 labels; ``weights``: design weights or None; ``target``: the precision (or
    NPV) the lower bound must reach, in (0, 1). ``scan``: ``fixed-sequence`` (default, module docstring) or
    ``lowest``: the lowest threshold whose own bound reaches ``target``, whatever failed above it (each bound
    holds for its own set; the one kept is selected among many, so its 95% is not a guarantee). ``step``: the
    sets tested are, for each multiple of ``step`` works, the smallest set holding at least that many, and the
    largest set (1: every distinct score). The grid depends on the scores only, so the fixed sequence stays
    valid; a coarser one is less brittle: a negative among the few most confident works no longer ends the scan,
    as no set that small is tested.
    Raises ValueError for mismatched arrays, a label other than 0/1, a non-positive weight, a side, target,
    confidence, method or scan out of range.
    """
    if int(step) != step or step < 1:
        raise ValueError(f"step {step!r}: expected a whole number of works, 1 or more")
    if scan not in SCANS:
        raise ValueError(f"scan {scan!r}: expected one of {', '.join(SCANS)}")
    if side not in ("positive", "negative"):
        raise ValueError(f"side {side!r}: expected 'positive' or 'negative'")
    if not 0 < target < 1:
        raise ValueError(f"target {target!r}: expected a precision strictly between 0 and 1, such as 0.9")
    s, y, w = _validate(scores, labels, weights)
    lower_bound(0, 1, confidence, method)  # validates method and confidence even for an empty set
    if side == "negative":  # NPV of {s <= t} is the precision of {-s >= -t} for the label 1 - y
        s, y = -s, 1.0 - y
    order = np.argsort(-s, kind="stable")
    s, y, w = s[order], y[order], w[order]
    # prefix sets end where the score changes: every work tied with the threshold is in the set
    ends = np.flatnonzero(np.r_[s[1:] != s[:-1], True]) if len(s) else np.array([], dtype=int)
    sw, swy, sw2 = np.cumsum(w)[ends], np.cumsum(w * y)[ends], np.cumsum(w * w)[ends]
    n_eff = sw**2 / sw2 if len(ends) else np.array([])
    rate = swy / sw if len(ends) else np.array([])
    bounds = lower_bound(rate * n_eff, n_eff, confidence, method) if len(ends) else np.array([])
    reachable = lower_bound(n_eff, n_eff, confidence, method) >= target if len(ends) else np.array([], dtype=bool)
    candidates = _grid(np.flatnonzero(reachable), ends, step)
    best, tested, stopped = None, len(candidates), "every set tested passed"
    if not len(candidates):
        stopped = "no set is large enough to reach the target even with every label of the class"
    elif scan == "lowest":
        passing = candidates[bounds[candidates] >= target]
        best = int(passing[-1]) if len(passing) else None
        stopped = f"{len(passing)} of {tested} sets tested passed; the largest kept"
    else:
        failed = candidates[bounds[candidates] < target]
        if len(failed):
            first = int(failed[0])
            tested = int(np.searchsorted(candidates, first)) + 1
            passed = candidates[: tested - 1]
            best = int(passed[-1]) if len(passed) else None
            stopped = f"bound {bounds[first]:.3f} < {target} at the set of the {ends[first] + 1} most confident works"
        else:
            best = int(candidates[-1])
    sign = -1.0 if side == "negative" else 1.0
    base = float(bounds[-1]) if len(ends) else None
    if best is None:
        return Certified(side, target, None, 0, 0.0, None, None, tested, stopped, base)
    return Certified(
        side,
        target,
        float(sign * s[ends[best]]),
        int(ends[best] + 1),
        float(n_eff[best]),
        float(rate[best]),
        float(bounds[best]),
        tested,
        stopped,
        base,
    )


def _grid(candidates: np.ndarray, ends: np.ndarray, step: int) -> np.ndarray:
    """The candidate sets (indices into ``ends``, the last work of each set) tested with a ``step``: for each
    multiple ``m * step`` of works, the smallest candidate set holding at least that many, and the largest
    candidate (each set once), so a grid reaches as far as testing every set does."""
    if step == 1 or not len(candidates):
        return candidates
    sizes = ends[candidates] + 1
    picks = np.searchsorted(sizes, np.arange(step, sizes[-1] + 1, step), side="left")
    return candidates[np.unique(np.r_[picks[picks < len(candidates)], len(candidates) - 1])]


@dataclass(frozen=True)
class HeadThresholds:
    """The certified thresholds of one binary head (:func:`certify_head`): ``positive`` (precision),
    ``negative`` (NPV) and, when asked for, ``recall`` (:func:`certify_recall`), which caps the negative side."""

    positive: Certified
    negative: Certified
    recall: Certified | None = None

    @property
    def negative_threshold(self) -> float | None:
        """The score at or below which a work is decided negative: ``t-`` of the NPV, capped by the recall
        side's when there is one; None when either side that applies certified nothing."""
        t_neg = self.negative.threshold
        if self.recall is None or t_neg is None:
            return t_neg
        return None if self.recall.threshold is None else min(t_neg, self.recall.threshold)


def certify_recall(
    scores,
    labels,
    target: float,
    *,
    weights=None,
    confidence: float = 0.95,
    method: str = "clopper-pearson",
) -> Certified:
    """The highest threshold ``t`` such that deciding ``{score <= t}`` negative keeps a certified recall: the
    lower confidence bound of the (design-weighted) share of the teacher's positives scored above ``t`` is at or
    above ``target``. It guards the negative side of a rare target, whose NPV the base rate alone can certify
    (:attr:`Certified.vacuous`): NPV says how clean the negatives are, recall how many positives they swallow.

    The share kept falls as ``t`` rises, and so does its bound: the scan from the lowest score up stops at the
    first failure and keeps the last pass, a single monotone family, valid without a correction. Weights enter
    through the Kish effective size of the positives. Returns a :class:`Certified` of side ``recall``: ``n``
    works at or below the threshold, ``n_eff`` of the positives, ``rate`` the recall kept, ``bound`` its lower
    bound. Raises as :func:`certify`.
    """
    if not 0 < target < 1:
        raise ValueError(f"recall target {target!r}: expected a share strictly between 0 and 1, such as 0.8")
    s, y, w = _validate(scores, labels, weights)
    lower_bound(0, 1, confidence, method)
    pos = y == 1
    if not pos.any():
        return Certified("recall", target, None, 0, 0.0, None, None, 0, "no positive among the works: no recall")
    wp = w[pos]
    n_eff = float(wp.sum() ** 2 / (wp**2).sum())
    values = np.unique(s)  # ascending candidate thresholds
    lost = np.searchsorted(np.sort(s[pos]), values, side="right")  # positives scored <= each value
    order = np.argsort(s[pos], kind="stable")
    cum = np.r_[0.0, np.cumsum(wp[order])]
    kept = 1.0 - cum[lost] / wp.sum()
    bounds = lower_bound(kept * n_eff, np.full(len(values), n_eff), confidence, method)
    failed = np.flatnonzero(bounds < target)
    last = (failed[0] if len(failed) else len(values)) - 1
    tested = int(min(len(values), last + 2))
    if last < 0:
        return Certified("recall", target, None, 0, n_eff, None, None, tested, f"bound {bounds[0]:.3f} < {target}")
    stopped = "every threshold passed" if not len(failed) else f"bound {bounds[failed[0]]:.3f} < {target} above it"
    return Certified(
        "recall",
        target,
        float(values[last]),
        int((s <= values[last]).sum()),
        n_eff,
        float(kept[last]),
        float(bounds[last]),
        tested,
        stopped,
    )


def certify_head(
    scores,
    labels,
    target: float,
    *,
    weights=None,
    negative_target: float | None = None,
    confidence: float = 0.95,
    method: str = "clopper-pearson",
    scan: str = "fixed-sequence",
    step: int = 1,
    negative_recall: float | None = None,
) -> HeadThresholds:
    """:func:`certify` of both sides: precision at ``target``, NPV at ``negative_target`` (default ``target``),
    and with ``negative_recall`` the recall the negative side must keep (:func:`certify_recall`); raises as
    :func:`certify`."""
    kw = {"weights": weights, "confidence": confidence, "method": method, "scan": scan, "step": step}
    recall = None
    if negative_recall is not None:
        recall = certify_recall(scores, labels, negative_recall, weights=weights, confidence=confidence, method=method)
    return HeadThresholds(
        certify(scores, labels, target, side="positive", **kw),
        certify(scores, labels, target if negative_target is None else negative_target, side="negative", **kw),
        recall,
    )


@dataclass(frozen=True)
class CascadePlan:
    """What a cascade does with each work (in input order): ``decisions`` (:data:`POSITIVE`, :data:`NEGATIVE`
    = the student's certified decision; :data:`TEACHER` = sent to the teacher; :data:`UNSETTLED` = in the band
    beyond the budget), the band's ``middle`` score (None without a band) and the counts."""

    decisions: np.ndarray
    middle: float | None
    band: int
    teacher: int
    unsettled: int
    positive: int
    negative: int


def band_mask(scores, thresholds: HeadThresholds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(decided positive, decided negative, in the band) masks of ``scores``: positive at or above ``t+``,
    negative at or below ``t-`` (:attr:`HeadThresholds.negative_threshold`), a work both would decide in the
    band, every other work in the band."""
    s = np.asarray(scores, dtype=float)
    t_pos, t_neg = thresholds.positive.threshold, thresholds.negative_threshold
    pos = s >= t_pos if t_pos is not None else np.zeros(len(s), dtype=bool)
    neg = s <= t_neg if t_neg is not None else np.zeros(len(s), dtype=bool)
    both = pos & neg
    return pos & ~both, neg & ~both, ~(pos | neg) | both


def plan_cascade(scores, thresholds: HeadThresholds, budget: int, order: str = "middle") -> CascadePlan:
    """The cascade of one head over works scored ``scores`` (not those the thresholds were certified on): the
    ``budget`` band works closest to the band's middle go to the teacher (ties: input order), the rest of the
    band stays unsettled. The middle is halfway between the band's edges: ``t-`` and ``t+``, or the lowest or
    highest band score for a side without a threshold. A budget at or above the band sends the whole band.
    ``order``: ``middle`` (default: the works closest to the band's middle, the most uncertain) or ``top`` (the
    band's highest scores first: for a rare target whose positive side certifies nothing, the band's top holds
    most of its positives, which the middle leaves unsettled).

    Raises ValueError for a negative budget, an unknown order or scores that are not finite.
    """
    if order not in ORDERS:
        raise ValueError(f"band order {order!r}: expected one of {', '.join(ORDERS)}")
    if int(budget) != budget or budget < 0:
        raise ValueError(f"call budget {budget!r}: expected a whole number of teacher calls, 0 or more")
    s = np.asarray(scores, dtype=float)
    if s.ndim != 1 or not np.all(np.isfinite(s)):
        raise ValueError("scores must be a 1-D array of finite scores, one per work")
    pos, neg, band = band_mask(s, thresholds)
    decisions = np.full(len(s), UNSETTLED, dtype=object)
    decisions[pos], decisions[neg] = POSITIVE, NEGATIVE
    idx = np.flatnonzero(band)
    middle = None
    if len(idx):
        t_pos, t_neg = thresholds.positive.threshold, thresholds.negative_threshold
        lo = t_neg if t_neg is not None else float(s[idx].min())
        hi = t_pos if t_pos is not None else float(s[idx].max())
        middle = (lo + hi) / 2
        key = np.abs(s[idx] - middle) if order == "middle" else -s[idx]
        closest = idx[np.argsort(key, kind="stable")][: int(budget)]
        decisions[closest] = TEACHER
    return CascadePlan(
        decisions=decisions,
        middle=middle,
        band=int(band.sum()),
        teacher=int((decisions == TEACHER).sum()),
        unsettled=int((decisions == UNSETTLED).sum()),
        positive=int(pos.sum()),
        negative=int(neg.sum()),
    )
