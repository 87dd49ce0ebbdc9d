"""Tests of metacan_pipeline.audit.estimates.ppi: agreement with ppi_py, coverage over repeated draws, and when the
prediction-powered interval is narrower than the human-only one."""

import math

import numpy as np
import pytest

from metacan_pipeline.audit.estimates.design_based import Design
from metacan_pipeline.audit.estimates.ppi import ppi_mean
from metacan_pipeline_tests.audit.simulated import frame_value, synthetic_audit

Z = 1.959963984540054


def _ppi_py():
    """ppi_py (a dev extra) for the two comparisons with it only: the coverage, width and minimum-n tests below need
    nothing of it and must not be skipped with it."""
    return pytest.importorskip("ppi_py")


def _simple_random_sample(seed: int, frame: int = 5000, n: int = 250):
    rng = np.random.default_rng(seed)
    f = (rng.random(frame) < 0.3).astype(float)
    y = np.where(rng.random(frame) < 0.9, f, 1 - f)  # the system is right on 90% of works
    take = rng.choice(frame, n, replace=False)
    design = Design.of(["all"] * n, [frame / n] * n, [frame] * n, [n] * n)
    return f, y, take, design


def test_with_equal_weights_the_estimate_is_ppi_pys_up_to_its_two_documented_conventions():
    ppi_py = _ppi_py()
    f, y, take, design = _simple_random_sample(seed=11)
    frame, n = f.size, take.size
    est = ppi_mean(y[take], f[take], design, f.mean(), frame_variance=f.var())
    lo, hi = (np.asarray(b).item() for b in ppi_py.ppi_mean_ci(y[take], f[take], f, alpha=0.05, lam=1))
    assert est.ppi.value == pytest.approx((lo + hi) / 2, abs=1e-12)
    # ppi_py: se^2 = var_N(f) / N + var_n(y - f) / n with population (ddof 0) variances and no FPC. Ours uses the
    # sample variance of the rectifier (n / (n - 1)) and the finite population correction (1 - n / N).
    ppi_rectifier = ((hi - lo) / (2 * Z)) ** 2 - f.var() / frame
    expected = f.var() / frame + ppi_rectifier * n / (n - 1) * (1 - n / frame)
    assert est.ppi.se**2 == pytest.approx(expected, rel=1e-9)
    assert ppi_rectifier == pytest.approx(np.var(y[take] - f[take]) / n, rel=1e-9)  # the closed form of the paper


def test_with_design_weights_the_point_estimate_is_ppi_pys_weighted_one():
    ppi_py = _ppi_py()
    f, y, _, _ = _simple_random_sample(seed=12)
    # two strata: the first 1000 frame works sampled at 1 in 10, the other 4000 at 1 in 40
    rng = np.random.default_rng(13)
    take = np.concatenate([rng.choice(1000, 100, replace=False), 1000 + rng.choice(4000, 100, replace=False)])
    w = np.repeat([10.0, 40.0], 100)
    design = Design.of(np.repeat(["a", "b"], 100), w, np.repeat([1000, 4000], 100), [100] * 200)
    est = ppi_mean(y[take], f[take], design, f.mean())
    expected = ppi_py.ppi_mean_pointestimate(y[take], f[take], f, lam=1, w=w)
    assert est.ppi.value == pytest.approx(np.asarray(expected).item(), abs=1e-12)


def _draws(audit, system: np.ndarray, reps: int, seed: int):
    design = audit.design
    for take in audit.draws(reps, seed):
        yield ppi_mean(audit.code[take], system[take], design, system.mean())


def test_a_good_classifiers_ppi_interval_is_narrower_and_still_covers_the_frame_prevalence():
    # the teacher of the synthetic audit is right on ~95% of works (sensitivity 0.85, specificity 0.97) and errs
    # whatever the stratum, so its decisions tell the estimate what the strata do not (the strata already carry the
    # stratifying classifier's information, so the gain is smaller than on a simple random sample). 400 draws:
    # coverage band as in test_estimates (binomial sd 0.011, band 0.92-0.98 = +-2.7 sd).
    audit = synthetic_audit(seed=16)
    accuracy = float(np.mean(audit.teacher == audit.truth))
    assert 0.94 <= accuracy <= 0.96
    target = frame_value("prevalence", audit.code)
    results = list(_draws(audit, audit.teacher, reps=400, seed=2017))
    coverage = np.mean([r.ppi.lower <= target <= r.ppi.upper for r in results])
    ratio = np.median([r.width_ratio for r in results])
    assert 0.92 <= coverage <= 0.98, coverage
    assert ratio < 0.9, ratio


def test_a_noise_classifier_buys_no_narrower_interval():
    audit = synthetic_audit(seed=16)
    noise = (np.random.default_rng(99).random(audit.truth.size) < 0.5).astype(float)
    ratios = [r.width_ratio for r in _draws(audit, noise, reps=50, seed=3)]
    assert np.median(ratios) > 1.0  # var(Y - f) = var(Y) + var(f) when f is independent noise


def test_when_the_strata_are_the_systems_own_decisions_ppi_equals_the_stratified_human_estimate():
    audit = synthetic_audit(seed=16, unresolved=0.0)  # unresolved works would shift the weights' strata shares
    take = audit.draws(1, seed=4)[0]
    est = ppi_mean(audit.code[take], audit.classifier[take], audit.design, audit.classifier.mean())
    assert est.ppi.value == pytest.approx(est.human.value, abs=1e-12)


def test_too_few_coded_cases_report_no_ppi_estimate():
    design = Design.of(["s"] * 10, [10.0] * 10, [100] * 10, [10] * 10)
    est = ppi_mean(np.r_[np.ones(5), np.zeros(5)], np.ones(10), design, 0.4)
    assert est.ppi.value is None and est.width_ratio is None
    assert est.ppi.note == "fewer than 30 coded cases (n=10): not reported"
    assert est.frame_se == pytest.approx(math.sqrt(0.4 * 0.6 * 100 / 99 / 100))
    with pytest.raises(ValueError, match="not in \\[0, 1\\]"):
        ppi_mean(np.ones(10), np.ones(10), design, 1.5)
    with pytest.raises(ValueError, match="pass frame_variance"):
        ppi_mean(np.ones(10), np.full(10, 0.3), design, 0.3)
