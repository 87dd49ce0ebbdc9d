"""Certified thresholds and the cascade plan (metacan_pipeline/student/cascade.py), against exact binomial bounds."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from metacan_pipeline.student.cascade import (
    NEGATIVE,
    POSITIVE,
    TEACHER,
    UNSETTLED,
    Certified,
    HeadThresholds,
    certify,
    certify_head,
    certify_recall,
    lower_bound,
    plan_cascade,
)


@pytest.mark.parametrize(("k", "n"), [(1, 10), (9, 10), (29, 30), (45, 50), (180, 200), (3, 7)])
def test_clopper_pearson_is_the_exact_one_sided_bound(k, n):
    """The one-sided 95% lower bound equals the lower end of the two-sided 90% exact interval (SciPy's binomtest)."""
    exact = binomtest(k, n).proportion_ci(confidence_level=0.90, method="exact").low
    assert lower_bound(k, n) == pytest.approx(exact, abs=1e-12)


def test_bound_closed_forms_and_edges():
    # all n successes: P(X = n | p) = p^n = alpha, so the bound is alpha^(1/n)
    assert lower_bound(10, 10) == pytest.approx(0.05 ** (1 / 10), abs=1e-12)
    assert lower_bound(30, 30, confidence=0.9) == pytest.approx(0.1 ** (1 / 30), abs=1e-12)
    assert lower_bound(0, 12) == 0.0 and lower_bound(0, 0) == 0.0
    assert lower_bound(9, 10) == pytest.approx(0.605836697563, abs=1e-9)
    # Jeffreys: Beta(0.05; k + 1/2, n - k + 1/2), tighter than Clopper-Pearson
    assert lower_bound(9, 10, method="jeffreys") == pytest.approx(0.669437196740, abs=1e-9)
    assert lower_bound(0, 10, method="jeffreys") == 0.0
    # effective (non-integer) counts are accepted and lie between their integer neighbours
    assert lower_bound(9, 10) < lower_bound(9.5, 10.5) < lower_bound(10, 11)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"method": "wald"}, "bound method 'wald'"), ({"confidence": 1.0}, "confidence 1.0")],
)
def test_bound_rejects_unknown_method_and_level(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lower_bound(3, 10, **kwargs)


def test_bound_rejects_more_successes_than_trials():
    with pytest.raises(ValueError, match="between 0 and n"):
        lower_bound(11, 10)


def _ranked(labels: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Scores 1.0, 0.99, ... in the order of ``labels`` (the first the most confident positive)."""
    y = np.array(labels)
    return 1.0 - np.arange(len(y)) / 100, y


def test_positive_threshold_by_hand():
    """29 positives on top (bound 0.05^(1/29) = 0.9018 >= 0.9), then a negative (29 of 30: bound 0.8514 < 0.9).
    Sets of fewer than 29 works cannot reach 0.9 even if all positive (0.05^(1/28) = 0.8985), so they are skipped."""
    s, y = _ranked([1] * 29 + [0] + [0] * 20)
    got = certify(s, y, 0.9)
    assert got.threshold == pytest.approx(s[28])
    assert (got.n, got.n_eff, got.rate) == (29, 29.0, 1.0)
    assert got.bound == pytest.approx(0.05 ** (1 / 29), abs=1e-12)
    assert got.tested == 2  # the 29-work set passed, the 30-work set failed and stopped the scan
    assert got.stopped == "bound 0.851 < 0.9 at the set of the 30 most confident works"
    assert lower_bound(29, 30) == pytest.approx(0.8514, abs=1e-4)


def test_fixed_sequence_stops_at_the_first_failure_and_lowest_does_not():
    """After the failure at 30 works, 60 more positives make larger sets pass again (89 of 90: bound 0.9484, ...,
    89 of 93: 0.9043, 89 of 94: 0.8914): the fixed sequence keeps the 29-work set; the ``lowest`` scan keeps the
    largest passing set, 93 works."""
    s, y = _ranked([1] * 29 + [0] + [1] * 60 + [0] * 30)
    fixed = certify(s, y, 0.9)
    lowest = certify(s, y, 0.9, scan="lowest")
    assert fixed.n == 29
    assert lowest.n == 93 and lowest.threshold == pytest.approx(s[92])
    assert lowest.bound == pytest.approx(lower_bound(89, 93)) and lowest.bound == pytest.approx(0.9043, abs=1e-4)
    assert lower_bound(89, 94) < 0.9


def test_ties_are_decided_together():
    """Works tied at a threshold are all in its set: 29 positives and a negative tied at the 29th score form one set
    of 30 (29 of 30 fails), so nothing certifies."""
    s = np.r_[1.0 - np.arange(28) / 100, np.full(2, 0.5), np.full(10, 0.1)]
    y = np.r_[np.ones(29, dtype=int), 0, np.zeros(10, dtype=int)]
    got = certify(s, y, 0.9)
    assert got.threshold is None and got.n == 0 and got.tested == 1


def test_negative_side_is_the_mirror_of_the_positive_side():
    rng = np.random.default_rng(3)
    y = (rng.random(300) < 0.2).astype(int)
    s = np.round(np.clip(0.2 + 0.5 * y + rng.normal(0, 0.2, 300), 0, 1), 3)
    neg = certify(s, y, 0.85, side="negative")
    mirror = certify(-s, 1 - y, 0.85)
    assert neg.threshold == pytest.approx(-mirror.threshold)
    assert (neg.n, neg.bound, neg.tested) == (mirror.n, mirror.bound, mirror.tested)
    # by hand: the works at or below the threshold, their negative rate and its exact bound
    inside = s <= neg.threshold
    assert neg.n == inside.sum() and neg.rate == pytest.approx(1 - y[inside].mean())
    assert neg.bound == pytest.approx(lower_bound((1 - y[inside]).sum(), inside.sum())) and neg.bound >= 0.85
    # the base rate: every work together, the negative rate of all 300
    assert neg.base_bound == pytest.approx(lower_bound((1 - y).sum(), 300))
    assert neg.vacuous == (neg.base_bound >= 0.85)


def test_design_weights_enter_through_the_kish_effective_size():
    s, y = _ranked([1] * 40 + [0] * 40)
    # equal weights change nothing
    assert certify(s, y, 0.9, weights=np.full(80, 7.0)) == certify(s, y, 0.9)
    # one heavy work among the 40 positives: n_eff of the 40 = 40^2... (39 + 50)^2 / (39 + 2500) = 3.12
    w = np.r_[np.ones(39), 50.0, np.ones(40)]
    got = certify(s, y, 0.9, weights=w)
    assert got.n == 39 and got.n_eff == 39.0  # the 39 light works still certify; adding the heavy one cannot
    n_eff_40 = (39 + 50) ** 2 / (39 + 2500)
    assert n_eff_40 == pytest.approx(3.1197, abs=1e-4) and lower_bound(n_eff_40, n_eff_40) < 0.9
    # 35 positives of weight 2, then negatives of weight 1: k_eff = n_eff * p_w. The 41-work set (6 negatives):
    # sum w = 76, sum w^2 = 146, n_eff = 39.56, p_w = 70/76, bound 0.8115 >= 0.8; 42 works: bound 0.7976 < 0.8
    w2 = np.r_[np.full(35, 2.0), np.ones(45)]
    y2 = np.r_[np.ones(35, dtype=int), np.zeros(45, dtype=int)]
    s2 = 1.0 - np.arange(80) / 100
    got2 = certify(s2, y2, 0.8, weights=w2)
    n_eff, p_w = 76**2 / 146, 70 / 76
    assert got2.n == 41 and got2.n_eff == pytest.approx(n_eff) and got2.rate == pytest.approx(p_w)
    assert got2.bound == pytest.approx(lower_bound(n_eff * p_w, n_eff)) and got2.bound == pytest.approx(
        0.8115, abs=1e-4
    )
    assert lower_bound(77**2 / 147 * 70 / 77, 77**2 / 147) == pytest.approx(0.7976, abs=1e-4)


def test_no_positives_and_all_positives():
    s = np.linspace(0, 1, 60)
    none = certify_head(s, np.zeros(60, dtype=int), 0.9)
    assert none.positive.threshold is None and none.positive.bound is None
    assert (
        none.negative.threshold == 1.0 and none.negative.n == 60 and none.negative.stopped == "every set tested passed"
    )
    plan = plan_cascade(s, none, budget=10)
    assert (plan.negative, plan.positive, plan.band, plan.teacher, plan.unsettled) == (60, 0, 0, 0, 0)
    assert plan.middle is None

    every = certify_head(s, np.ones(60, dtype=int), 0.9)
    assert every.negative.threshold is None and every.positive.threshold == 0.0 and every.positive.n == 60
    assert set(plan_cascade(s, every, budget=0).decisions) == {POSITIVE}


def test_a_side_met_by_the_base_rate_is_vacuous():
    """2 positives among 200 works, one on top and one in the middle: the NPV of all 200 (198/200) has the bound
    0.9689, so an NPV target of 0.9 certifies the whole set whatever the ranking (vacuous); 0.99 is above it."""
    s, y = _ranked([1] + [0] * 100 + [1] + [0] * 98)
    low = certify(s, y, 0.9, side="negative")
    assert low.vacuous and low.n == 200 and low.base_bound == pytest.approx(lower_bound(198, 200))
    assert low.base_bound == pytest.approx(0.9689, abs=1e-4)
    high = certify(s, y, 0.99, side="negative")
    assert not high.vacuous and high.threshold is None
    # the positive side of the same works: base bound of 2/200, far below any target
    assert not certify(s, y, 0.9).vacuous


def test_too_few_works_certify_nothing():
    got = certify_head(np.linspace(0, 1, 20), np.r_[np.zeros(10, dtype=int), np.ones(10, dtype=int)], 0.9)
    assert got.positive.threshold is None and got.negative.threshold is None
    assert got.positive.tested == 0 and got.positive.stopped.startswith("no set is large enough")
    empty = certify([], [], 0.9)
    assert empty.threshold is None and empty.base_bound is None and not empty.vacuous


def _thresholds(t_pos: float | None, t_neg: float | None) -> HeadThresholds:
    def side(name, t):
        return Certified(name, 0.9, t, 0 if t is None else 30, 30.0, 1.0, 0.91, 1, "")

    return HeadThresholds(side("positive", t_pos), side("negative", t_neg))


def test_budget_sends_the_works_closest_to_the_band_middle():
    s = np.array([0.05, 0.2, 0.9, 0.45, 0.55, 0.3, 0.62, 0.8, 0.5, 0.21])
    th = _thresholds(0.8, 0.2)  # band: scores in (0.2, 0.8), middle 0.5
    plan = plan_cascade(s, th, budget=3)
    assert plan.middle == pytest.approx(0.5) and plan.band == 6
    assert list(plan.decisions) == [
        NEGATIVE,
        NEGATIVE,
        POSITIVE,
        TEACHER,  # 0.45: 0.05 from the middle
        TEACHER,  # 0.55: 0.05 (input order breaks the tie)
        UNSETTLED,  # 0.3
        UNSETTLED,  # 0.62: 0.12, one call short
        POSITIVE,  # 0.8 is at t+
        TEACHER,  # 0.5
        UNSETTLED,  # 0.21
    ]
    assert (plan.teacher, plan.unsettled, plan.positive, plan.negative) == (3, 3, 2, 2)
    zero = plan_cascade(s, th, budget=0)
    assert zero.teacher == 0 and zero.unsettled == 6
    full = plan_cascade(s, th, budget=100)
    assert full.teacher == 6 and full.unsettled == 0
    # order "top": the band's highest scores first (0.62, 0.55, 0.5)
    top = plan_cascade(s, th, budget=3, order="top")
    assert list(np.flatnonzero(top.decisions == TEACHER)) == [4, 6, 8]
    assert top.middle == pytest.approx(0.5) and top.unsettled == 3


def test_band_middle_without_a_positive_threshold_and_with_overlap():
    s = np.array([0.1, 0.3, 0.5, 0.9])
    plan = plan_cascade(s, _thresholds(None, 0.1), budget=1)  # band (0.1, 0.9]: middle (0.1 + 0.9) / 2
    assert plan.middle == pytest.approx(0.5) and list(plan.decisions) == [NEGATIVE, UNSETTLED, TEACHER, UNSETTLED]
    # t- >= t+: works both sides would decide are in the band
    overlap = plan_cascade(s, _thresholds(0.3, 0.5), budget=0)
    assert list(overlap.decisions) == [NEGATIVE, UNSETTLED, UNSETTLED, POSITIVE]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (([0.1, 0.2], [1]), {}, "same length"),
        (([0.1, np.nan], [1, 0]), {}, "NaN"),
        (([0.1, 0.2], [1, 2]), {}, "1/0 labels"),
        (([0.1, 0.2], [1, 0]), {"weights": [1.0, 0.0]}, "positive, finite design weight"),
        (([0.1, 0.2], [1, 0]), {"side": "both"}, "side 'both'"),
        (([0.1, 0.2], [1, 0]), {"scan": "best"}, "scan 'best'"),
    ],
)
def test_certify_names_the_bad_input(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        certify(*args, 0.9, **kwargs)


def test_certify_rejects_a_target_out_of_range_and_plan_a_negative_budget():
    with pytest.raises(ValueError, match="target 1.0"):
        certify([0.1], [1], 1.0)
    with pytest.raises(ValueError, match="call budget -1"):
        plan_cascade([0.1], _thresholds(None, None), -1)
    with pytest.raises(ValueError, match="finite scores"):
        plan_cascade([np.inf], _thresholds(None, None), 1)
    with pytest.raises(ValueError, match="band order 'random'"):
        plan_cascade([0.1], _thresholds(None, None), 1, order="random")


def test_step_tests_a_grid_of_set_sizes():
    """A negative at rank 5: with every set tested (step 1) nothing certifies, as the first set that can reach 0.9,
    29 works, holds it (28 of 29: bound 0.8466); with a step of 50 the sets tested hold 50, 100 and 150 works
    (49 of 50: 0.9086, 99 of 100: 0.9534, 144 of 150: 0.9226) and all pass."""
    labels = [1] * 4 + [0] + [1] * 95 + [0] * 5 + [1] * 45
    s, y = _ranked(labels)
    every = certify(s, y, 0.9)
    assert every.threshold is None and every.tested == 1
    assert lower_bound(28, 29) == pytest.approx(0.8466, abs=1e-4)
    grid = certify(s, y, 0.9, step=50)
    assert grid.tested == 3 and grid.n == 150 and grid.stopped == "every set tested passed"
    assert grid.bound == pytest.approx(lower_bound(144, 150))
    assert [round(lower_bound(k, n), 4) for k, n in ((49, 50), (99, 100), (144, 150))] == [0.9086, 0.9534, 0.9226]
    # 160 works: the grid is 50, 100, 150 and the whole set, 160 (144 of 160: 0.8521 < 0.9 ends the scan)
    longer = certify(*_ranked(labels + [0] * 10), 0.9, step=50)
    assert longer.tested == 4 and longer.n == 150
    assert longer.stopped == "bound 0.852 < 0.9 at the set of the 160 most confident works"
    with pytest.raises(ValueError, match="step 0"):
        certify(s, y, 0.9, step=0)


def test_recall_side_by_hand():
    """10 positives among 100 works scored 0, 1/99, ..., 1, at ranks 40, 60, 70, ... A recall of 0.7 needs all 10
    above the threshold (10 of 10: bound 0.7411; 9 of 10: 0.6058), so t = the score just below rank 40; a recall of
    0.5 lets one go (9 of 10 passes, 8 of 10: 0.4931 fails), so t = the score just below rank 60."""
    s = np.linspace(0, 1, 100)
    y = np.zeros(100, dtype=int)
    y[[40, 60, 70, 80, 85, 90, 92, 95, 97, 99]] = 1
    strict = certify_recall(s, y, 0.7)
    assert strict.threshold == pytest.approx(s[39]) and strict.n == 40 and strict.rate == 1.0
    assert strict.bound == pytest.approx(0.05**0.1) and strict.stopped == "bound 0.606 < 0.7 above it"
    loose = certify_recall(s, y, 0.5)
    assert loose.threshold == pytest.approx(s[59]) and loose.n == 60 and loose.rate == pytest.approx(0.9)
    assert loose.bound == pytest.approx(lower_bound(9, 10)) and lower_bound(8, 10) == pytest.approx(0.4931, abs=1e-4)
    # too few positives to bound a recall of 0.8 at all (10 of 10: 0.7411 < 0.8); no positive: nothing to keep
    assert certify_recall(s, y, 0.8).threshold is None
    assert certify_recall(s, np.zeros(100, dtype=int), 0.5).threshold is None


def test_recall_weights_use_the_kish_size_of_the_positives():
    s = np.linspace(0, 1, 100)
    y = np.zeros(100, dtype=int)
    y[[40, 60, 70, 80, 85, 90, 92, 95, 97, 99]] = 1
    w = np.ones(100)
    w[40] = 3.0  # the lowest positive weighs 3: 12 of weight, n_eff = 12^2 / 18 = 8
    got = certify_recall(s, y, 0.5, weights=w)
    # t below rank 40 keeps 1.0 (bound 0.05^(1/8) = 0.6877); losing the heavy positive keeps 9/12 = 0.75 of n_eff 8
    assert got.n_eff == pytest.approx(8.0)
    assert lower_bound(0.75 * 8, 8) < 0.5 and got.threshold == pytest.approx(s[39])
    assert got.bound == pytest.approx(0.05 ** (1 / 8))


def test_recall_caps_the_negative_threshold():
    """Negatives everywhere below rank 90 but positives spread: the NPV side (0.8) certifies far up, the recall
    side (0.5) stops below the second positive; the plan decides negative only up to the lower of the two."""
    s = np.linspace(0, 1, 100)
    y = np.zeros(100, dtype=int)
    y[[40, 60, 70, 80, 85, 90, 92, 95, 97, 99]] = 1
    plain = certify_head(s, y, 0.8)
    capped = certify_head(s, y, 0.8, negative_recall=0.5)
    assert plain.recall is None and plain.negative_threshold == plain.negative.threshold
    assert plain.negative.threshold > s[59]
    assert capped.negative_threshold == pytest.approx(s[59]) and capped.recall.threshold == pytest.approx(s[59])
    plan = plan_cascade(s, capped, budget=0)
    assert plan.negative == 60 and list(plan.decisions[:60]) == [NEGATIVE] * 60
    # a recall side that certifies nothing leaves no negative decision at all
    none = certify_head(s, y, 0.8, negative_recall=0.8)
    assert none.negative_threshold is None and plan_cascade(s, none, budget=0).negative == 0
    with pytest.raises(ValueError, match="recall target 1.5"):
        certify_recall(s, y, 1.5)
