"""Tests of metacan_pipeline.audit.estimates.design_based: hand-derived ratios, variances and intervals, the minimum-n
rule, and the coverage of the intervals over repeated stratified draws of a synthetic audit."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from metacan_pipeline.audit.estimates import design_based as E
from metacan_pipeline_tests.audit.simulated import Stratum, frame_value, synthetic_audit

# Two strata: "pos" (N = 10, n = 5, weight 2), every work decided positive, 4 of 5 human positives;
# "neg" (N = 100, n = 5, weight 20), every work decided negative, 1 of 5 human positive.
Y = np.array([1, 1, 1, 1, 0, 1, 0, 0, 0, 0], dtype=float)
D = np.array([1, 1, 1, 1, 1, 0, 0, 0, 0, 0], dtype=float)


def two_strata() -> E.Design:
    return E.Design.of(["pos"] * 5 + ["neg"] * 5, [2] * 5 + [20] * 5, [10] * 5 + [100] * 5, [5] * 10)


def test_precision_recall_and_f1_match_their_hand_derived_values_and_variances():
    design = two_strata()
    # weighted cells: TP = 4 x 2 = 8, FP = 1 x 2 = 2, FN = 1 x 20 = 20, TN = 4 x 20 = 80
    c = E.confusion(Y, D, design)
    assert (c.tp, c.fp, c.fn, c.tn) == (4, 1, 1, 4)
    assert (c.tp_weighted, c.fp_weighted, c.fn_weighted, c.tn_weighted) == (8, 2, 20, 80)

    p = E.precision(Y, D, design, min_n=0)
    # 8 / 10. z = w (y - 0.8 d) / 10 in "pos": 0.04 (x4), -0.16; mean 0; sum of squares 4 x 0.0016 + 0.0256 = 0.032;
    # factor (1 - 5/10) x 5/4 = 0.625 -> var 0.02 ("neg" is outside the domain: z = 0). SRS check: 0.16 / 4 x 0.5.
    assert p.value == pytest.approx(0.8) and p.se == pytest.approx(math.sqrt(0.02))
    assert (p.n, p.n_effective) == (5, pytest.approx(5.0))

    r = E.recall(Y, D, design, min_n=0)
    # 8 / 28 = 2/7. z = w (y d - 2/7 y) / 28: "pos" a = 10/196 (x4), 0 -> 0.8 a^2 x 0.625 = 0.5 a^2;
    # "neg" b = -40/196, 0 (x4) -> 0.8 b^2 x (1 - 5/100) x 5/4 = 0.95 b^2. var = (50 + 1520) / 196^2.
    assert r.value == pytest.approx(2 / 7) and r.se == pytest.approx(math.sqrt(1570 / 196**2))
    assert r.n == 5 and r.n_effective == pytest.approx((4 * 2 + 20) ** 2 / (4 * 4 + 400))

    f = E.f1(Y, D, design, min_n=0)
    # 2 TP / (2 TP + FP + FN) = 16 / 38. z x 722 = 44 (x4), -16 in "pos" (deviations 12 x4, -48: 2880 x 0.625 = 1800)
    # and -160, 0 (x4) in "neg" (0.8 x 25600 x 1.1875 = 24320): var = 26120 / 722^2.
    assert f.value == pytest.approx(16 / 38) and f.se == pytest.approx(math.sqrt(26120 / 722**2))
    assert f.n == 6  # the works that are a human or a machine positive


def test_the_interval_is_korn_graubard_clopper_pearson_on_the_design_effective_n():
    # stratum a: 2 of 4 positive, weight 2 (N = 8); stratum b: a census of 2, one positive.
    design = E.Design.of(["a"] * 4 + ["b"] * 2, [2] * 4 + [1] * 2, [8] * 4 + [2] * 2, [4] * 4 + [2] * 2)
    e = E.prevalence([1, 1, 0, 0, 1, 0], design, min_n=0)
    # p = 5 / 10; u = w (y - p) / 10: a -> 0.1, 0.1, -0.1, -0.1; var = (1 - 4/8) x 4/3 x 0.04 (b is a census)
    var = 0.5 * 4 / 3 * 0.04
    assert e.value == pytest.approx(0.5) and e.se == pytest.approx(math.sqrt(var))
    # n* = p (1 - p) / var = 9.375, times (t_{n-1} / t_df)^2 with n = 6 cases and df = 6 - 2 strata = 4
    n_star = 0.25 / var * (stats.t.ppf(0.025, 5) / stats.t.ppf(0.025, 4)) ** 2
    x = n_star * 0.5
    assert e.lower == pytest.approx(stats.beta.ppf(0.025, x, n_star - x + 1), rel=1e-9)
    assert e.upper == pytest.approx(stats.beta.ppf(0.975, x + 1, n_star - x), rel=1e-9)


def test_an_all_positive_sample_gets_the_clopper_pearson_bound_of_its_kish_n_not_a_zero_width_interval():
    design = E.Design.of(["s"] * 40, [25.0] * 40, [1000] * 40, [40] * 40)
    e = E.prevalence(np.ones(40), design)
    # var = 0, so n* = Kish n = 40 (equal weights); Clopper-Pearson for 40 of 40: lower = 0.025^(1/40)
    assert e.value == 1.0 and e.se == 0.0 and e.upper == 1.0
    assert e.lower == pytest.approx(0.025 ** (1 / 40))


def test_a_census_has_no_sampling_error_and_says_so():
    design = E.Design.of(["c"] * 4, [1.0] * 4, [4] * 4, [4] * 4)
    e = E.prevalence([1, 0, 0, 0], design, min_n=0)
    assert (e.value, e.lower, e.upper, e.se) == (0.25, 0.25, 0.25, 0.0)
    assert e.note == "every case is in a census stratum: no sampling error"


def test_fewer_cases_than_the_minimum_are_reported_as_such_not_computed():
    design = two_strata()
    p = E.precision(Y, D, design)  # 5 decided positives < 30
    assert (p.value, p.lower, p.upper, p.se) == (None, None, None, None)
    assert (p.n, p.note) == (5, "fewer than 30 coded cases (n=5): not reported")
    assert not p.reported
    assert E.precision(Y, D, design, min_n=5).reported  # the protocol's minimum decides
    assert E.precision(Y, np.zeros(10), design, min_n=0).note == "no coded cases: not reported"


def test_unresolved_codes_and_missing_decisions_leave_the_domain_instead_of_counting_negative():
    design = two_strata()
    y = Y.copy()
    y[4] = np.nan  # the decided positive that humans coded 0 is now unresolved
    p = E.precision(y, D, design, min_n=0)
    assert p.value == 1.0 and p.n == 4
    d = D.copy()
    d[5] = np.nan  # the false negative has no decision
    r = E.recall(Y, d, design, min_n=0)
    assert r.value == 1.0 and r.n == 4
    assert E.prevalence(y, design, min_n=0).n == 9


def test_within_restricts_to_a_group_of_the_sample():
    design = two_strata()
    group = np.array([True, True, False, False, False, True, True, False, False, False])
    # group: "pos" works 0, 1 (both TP), "neg" works 5 (FN), 6 (TN): recall = 4 / (4 + 20) on 3 human positives
    r = E.recall(Y, D, design, within=group, min_n=0)
    assert r.value == pytest.approx(4 / 24) and r.n == 3


def test_a_stratum_with_one_sampled_work_is_centred_on_the_sample_mean_and_noted():
    design = E.Design.of(["a", "a", "b"], [2.0, 2.0, 5.0], [4, 4, 5], [2, 2, 1])
    e = E.prevalence([1, 0, 1], design, min_n=0)
    # p = 7/9; z = w (y - p) / 9 = 4/81, -14/81, 10/81; a: mean -5/81, squares 2 x (9/81)^2, factor 0.5 x 2 = 1;
    # b (lonely): (1 - 1/5) x (10/81 - mean(z) = 10/81)^2, since mean(z) = 0
    assert e.value == pytest.approx(7 / 9)
    assert e.se == pytest.approx(math.sqrt((2 * 81 + 0.8 * 100) / 81**2))
    assert "1 stratum with a single sampled work" in e.note


def test_designs_that_break_the_sampling_rules_are_refused_naming_the_stratum():
    with pytest.raises(ValueError, match="'a' has a design weight"):
        E.Design.of(["a", "a"], [1.0, 0.0], [4, 4], [2, 2])
    with pytest.raises(ValueError, match="stratum 'a' has 1 sampled units but stratum_sample_size 2"):
        E.Design.of(["a", "b"], [2.0, 1.0], [4, 1], [2, 1])
    with pytest.raises(ValueError, match="stratum_size varies within stratum 'a'"):
        E.Design.of(["a", "a"], [2.0, 2.0], [4, 5], [2, 2])
    with pytest.raises(KeyError, match="stratum_sample_size"):
        E.Design.from_frame(pd.DataFrame({"stratum": ["a"], "design_weight": [1.0], "stratum_size": [1]}))
    with pytest.raises(ValueError, match="0, 1 or nan"):
        E.precision(np.full(10, 2.0), D, two_strata())


def test_a_design_from_a_sample_frame_knows_its_frame_size():
    sample = pd.DataFrame(
        {
            "stratum": ["a", "a", "b"],
            "design_weight": [2.0, 2.0, 5.0],
            "stratum_size": [4, 4, 5],
            "stratum_sample_size": [2, 2, 1],
        }
    )
    assert E.Design.from_frame(sample).frame_size == 9


def _coverage(audit, reps: int, seed: int, interval: str, only: tuple[str, ...] = ()) -> dict[str, float]:
    """Share of ``reps`` stratified draws whose 95% interval covers the frame value, per "<system> <metric>"
    (all seven, or those named in ``only``)."""
    design = audit.design
    draws = audit.draws(reps, seed)
    systems = {"classifier": audit.classifier, "teacher": audit.teacher}
    truth = {("human", "prevalence"): frame_value("prevalence", audit.code)}
    for name, d in systems.items():
        for metric in ("precision", "recall", "f1"):
            truth[(name, metric)] = frame_value(metric, audit.code, d)
    if only:
        truth = {k: v for k, v in truth.items() if " ".join(k) in only}
    hits = dict.fromkeys(truth, 0)
    for take in draws:
        y = audit.code[take]
        for (name, metric), value in truth.items():
            if metric == "prevalence":
                e = E.prevalence(y, design, interval=interval)
            else:
                e = getattr(E, metric)(y, systems[name][take], design, interval=interval)
            hits[(name, metric)] += e.lower <= value <= e.upper
    return {f"{name} {metric}": hits[(name, metric)] / reps for name, metric in truth}


def test_the_95_percent_intervals_cover_the_frame_value_95_percent_of_the_time():
    # 400 seeded stratified draws of 475 works from a 16,500-work frame (strata 24x apart in size, the boundary
    # oversampled, simulated coders adjudicated). The estimand is the frame's value of the adjudicated codes: coder
    # error is not sampling error, so no interval covers it away (here the coders move precision by < 0.03).
    # Binomial sd of a coverage of 0.95 over 400 draws: sqrt(0.95 x 0.05 / 400) = 0.011; the band 0.92 - 0.98 is
    # +-2.7 sd, so a correct interval leaves it by chance in about 0.7% of the seeds for each figure.
    audit = synthetic_audit(seed=16)
    assert (
        abs(
            frame_value("precision", audit.code, audit.classifier)
            - frame_value("precision", audit.truth, audit.classifier)
        )
        < 0.03
    )
    coverage = _coverage(audit, reps=400, seed=2016, interval="beta")
    assert all(0.92 <= c <= 0.98 for c in coverage.values()), coverage


def test_near_one_at_small_n_the_beta_interval_keeps_coverage_where_wald_does_not():
    # a classifier whose ~45 decided positives are 98% right (frame precision 0.981): the Wald interval on the same
    # variance falls short (0.61 measured), since many samples are all-positive with variance 0.
    strata = (
        Stratum("consensus", 500, 25, 1, 0.995),
        Stratum("candidate", 300, 20, 1, 0.95),
        Stratum("boundary", 2500, 150, 0, 0.20),
        Stratum("far", 12000, 150, 0, 0.06),
    )
    audit = synthetic_audit(seed=7, strata=strata, coders=((0.98, 0.99), (0.98, 0.99)))
    only = ("classifier precision",)
    beta = _coverage(audit, reps=400, seed=1, interval="beta", only=only)["classifier precision"]
    wald = _coverage(audit, reps=400, seed=1, interval="wald", only=only)["classifier precision"]
    assert beta >= 0.93 and wald < 0.92, (beta, wald)
