"""Tests of metacan_pipeline.audit.estimates.gate: the reasons it gives, and that simulated classifiers pass and fail
where they should."""

import numpy as np

from metacan_pipeline.audit.estimates import design_based as E
from metacan_pipeline.audit.estimates.gate import GateThresholds, head_gate
from metacan_pipeline_tests.audit.simulated import gate_draws, gate_strata


def _estimate(lower: float) -> E.Estimate:
    return E.Estimate(value=lower + 0.05, lower=lower, upper=min(1.0, lower + 0.1), se=0.03, n=60, n_effective=50.0)


def test_the_reason_names_both_bounds_against_their_thresholds():
    g = head_gate(_estimate(0.84), _estimate(0.66), coded_positives=60)
    assert (g.passed, g.judged) == (False, True)
    assert g.reason == "precision lower bound 0.84 >= 0.80, recall lower bound 0.66 < 0.70: fails"
    g = head_gate(_estimate(0.91), _estimate(0.75), coded_positives=60)
    assert g.passed and g.reason == "precision lower bound 0.91 >= 0.80, recall lower bound 0.75 >= 0.70: passes"


def test_too_few_coded_positives_cannot_be_judged_whatever_the_bounds():
    g = head_gate(_estimate(0.95), _estimate(0.95), coded_positives=22)
    assert (g.passed, g.judged, g.reason) == (False, False, "22 coded positives < 30: cannot be judged")


def test_a_rate_the_minimum_n_rule_withheld_cannot_be_judged():
    withheld = E.Estimate(
        None, None, None, None, n=12, n_effective=11.0, note="fewer than 30 coded cases (n=12): not reported"
    )
    g = head_gate(withheld, _estimate(0.9), coded_positives=40)
    assert not g.passed and not g.judged
    assert (
        g.reason
        == "precision not reported (precision: fewer than 30 coded cases (n=12): not reported): cannot be judged"
    )


def test_a_bound_that_rounds_to_the_threshold_is_shown_with_four_decimals():
    g = head_gate(_estimate(0.7996), _estimate(0.9), coded_positives=60)
    assert g.reason.startswith("precision lower bound 0.7996 < 0.80") and not g.passed


def test_the_protocols_thresholds_replace_the_defaults():
    strict = GateThresholds(precision_lower=0.9, recall_lower=0.8, min_coded_positives=50)
    g = head_gate(_estimate(0.84), _estimate(0.85), coded_positives=60, thresholds=strict)
    assert g.reason == "precision lower bound 0.84 < 0.90, recall lower bound 0.85 >= 0.80: fails"
    assert head_gate(_estimate(0.95), _estimate(0.95), 45, strict).reason == "45 coded positives < 50: cannot be judged"


def test_a_good_classifier_with_about_60_coded_positives_passes():
    # frame precision 0.95 and recall 0.96: it misses only near its threshold (2% of the boundary negatives are
    # positive, none of the far ones but the coders' rare false positives). A single far negative that humans code
    # positive weighs 100 works: with 0.2% of the far negatives positive, the same classifier passed 71% of draws.
    draws = gate_draws(gate_strata(27, 35, 0.02, 0.0), reps=200, seed=21)
    assert 55 <= np.median([positives for _, positives in draws]) <= 65
    assert np.mean([g.passed for g, _ in draws]) >= 0.95


def test_a_mediocre_classifier_fails_on_recall():
    # same decisions, but 15% of the boundary and 2% of the far negatives are positive: frame recall about 0.65
    draws = gate_draws(gate_strata(27, 35, 0.15, 0.02), reps=200, seed=22)
    assert np.mean([g.passed for g, _ in draws]) <= 0.05
    failed = [g for g, _ in draws if g.judged and not g.passed]
    assert failed and all("recall lower bound" in g.reason and "< 0.70: fails" in g.reason for g in failed)


def test_twenty_coded_positives_cannot_be_judged():
    draws = gate_draws(gate_strata(8, 12, 0.01, 0.002), reps=50, seed=23)
    assert 15 <= np.median([positives for _, positives in draws]) <= 25
    assert not any(g.passed or g.judged for g, _ in draws)
    assert all(g.reason == f"{positives} coded positives < 30: cannot be judged" for g, positives in draws)
