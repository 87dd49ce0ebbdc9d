"""Tests of metacan_pipeline.audit.estimates.agreement: kappa and alpha by hand, against sklearn and the krippendorff
package, raw and design-weighted, with unresolved answers as a value and missing answers left out."""

import math

import krippendorff
import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from metacan_pipeline.audit.estimates.agreement import (
    UNRESOLVED,
    coder_value,
    cohen_kappa,
    head_agreement,
    krippendorff_alpha,
)

FIRST = [0, 0, 1, 1]
SECOND = [0, 1, 1, 1]


def test_kappa_and_alpha_match_their_hand_derived_values():
    # kappa: p_o = 3/4; marginals first (1/2, 1/2), second (1/4, 3/4): p_e = 1/8 + 3/8 = 1/2 -> (3/4 - 1/2) / (1/2)
    assert cohen_kappa(FIRST, SECOND) == pytest.approx(0.5)
    # alpha: coincidences o00 = 2, o01 = o10 = 1, o11 = 4; n0 = 3, n1 = 5, n = 8;
    # 1 - (n - 1) x (o01 + o10) / (2 n0 n1) = 1 - 7 x 2 / 30
    assert krippendorff_alpha(FIRST, SECOND) == pytest.approx(1 - 14 / 30)


def test_design_weighted_kappa_and_alpha_match_their_hand_derived_values():
    w = [2.0, 1.0, 1.0, 1.0]
    # kappa: p_o = 4/5; first p(0) = 3/5, second p(0) = 2/5: p_e = 0.24 + 0.24 -> (0.8 - 0.48) / 0.52
    assert cohen_kappa(FIRST, SECOND, w) == pytest.approx(0.32 / 0.52)
    # alpha: o00 = 4, o01 = o10 = 1, o11 = 4; n0 = n1 = 5, n = 10: 1 - 9 x 2 / 50
    assert krippendorff_alpha(FIRST, SECOND, w) == pytest.approx(1 - 18 / 50)
    # real-valued weights: w = (0.5, 1.5, 1, 1), total 4; p_o = 2.5 / 4; first p(0) = 2/4, second p(0) = 0.5/4
    # p_e = 0.5 x 0.125 + 0.5 x 0.875 = 0.5 -> kappa 0.25; alpha: o00 = 1, o01 = o10 = 1.5, o11 = 4, n0 = 2.5,
    # n1 = 5.5, n = 8: 1 - 7 x 3 / (2 x 2.5 x 5.5)
    w = [0.5, 1.5, 1.0, 1.0]
    assert cohen_kappa(FIRST, SECOND, w) == pytest.approx(0.25)
    assert krippendorff_alpha(FIRST, SECOND, w) == pytest.approx(1 - 21 / 27.5)


def _codings(seed: int, n: int = 300) -> tuple[list, list, np.ndarray]:
    """Two noisy codings of a hidden 0/1 truth, with unresolved answers and missing second codings."""
    rng = np.random.default_rng(seed)
    truth = rng.random(n) < 0.3
    first = np.where(rng.random(n) < 0.9, truth, ~truth).astype(int).astype(object)
    second = np.where(rng.random(n) < 0.85, truth, ~truth).astype(int).astype(object)
    first[rng.random(n) < 0.05] = UNRESOLVED
    second[rng.random(n) < 0.05] = UNRESOLVED
    second[rng.random(n) < 0.05] = None
    return first.tolist(), second.tolist(), rng.uniform(1, 50, n)


def test_kappa_is_sklearns_with_unit_and_real_valued_design_weights():
    first, second, w = _codings(seed=3)
    pairs = [i for i, b in enumerate(second) if b is not None]
    a = [coder_value(first[i]) for i in pairs]
    b = [coder_value(second[i]) for i in pairs]
    assert cohen_kappa(first, second) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    assert cohen_kappa(first, second, w) == pytest.approx(cohen_kappa_score(a, b, sample_weight=w[pairs]), abs=1e-12)
    assert cohen_kappa(first, second, w) != pytest.approx(cohen_kappa(first, second), abs=1e-4)  # the weights matter


def _reliability(first: list, second: list, repeat=None) -> np.ndarray:
    """The krippendorff package's input: coders x units, values as numbers, nan missing (units repeated)."""
    code = {"0": 0.0, "1": 1.0, UNRESOLVED: 2.0, None: np.nan}
    data = np.array([[code[coder_value(v)] for v in first], [code[coder_value(v)] for v in second]])
    return data if repeat is None else np.repeat(data, repeat, axis=1)


def test_alpha_is_the_krippendorff_packages_raw_and_with_integer_weights_on_repeated_units():
    first, second, _ = _codings(seed=4)
    expected = krippendorff.alpha(reliability_data=_reliability(first, second), level_of_measurement="nominal")
    assert krippendorff_alpha(first, second) == pytest.approx(expected, abs=1e-12)
    assert krippendorff_alpha(first, second, np.ones(len(first))) == pytest.approx(expected, abs=1e-12)
    counts = np.random.default_rng(5).integers(1, 6, len(first))
    repeated = krippendorff.alpha(reliability_data=_reliability(first, second, counts), level_of_measurement="nominal")
    assert krippendorff_alpha(first, second, counts.astype(float)) == pytest.approx(repeated, abs=1e-12)


def test_unresolved_is_a_value_of_its_own_and_missing_answers_are_left_out():
    # two coders who both find work 3 unresolvable agree on it; work 4 lacks a second coding
    first = [1, 0, 1, UNRESOLVED, 1]
    second = [1, 0, UNRESOLVED, UNRESOLVED, None]
    rows = head_agreement(first, second, [1.0, 2.0, 3.0, 4.0, 5.0])
    # Kish's n of the four pairs' weights 1, 2, 3, 4: 10^2 / 30
    assert [(r.statistic, r.weighting, r.n, r.n_effective) for r in rows] == [
        ("cohen_kappa", "raw", 4, 4.0),
        ("cohen_kappa", "design", 4, pytest.approx(100 / 30)),
        ("krippendorff_alpha", "raw", 4, 4.0),
        ("krippendorff_alpha", "design", 4, pytest.approx(100 / 30)),
    ]
    # kappa on 4 works: p_o = 3/4; first (0: 1/4, 1: 1/2, u: 1/4), second (1/4, 1/4, 1/2): p_e = 1/16 + 1/8 + 1/8
    assert rows[0].value == pytest.approx((0.75 - 5 / 16) / (1 - 5 / 16))
    assert coder_value(True) == "1" and coder_value(0.0) == "0" and coder_value(float("nan")) is None


def test_agreement_is_undefined_without_pairs_or_with_a_single_value():
    assert cohen_kappa([1, 1], [1, 1]) is None and krippendorff_alpha([1, 1], [1, 1]) is None
    assert cohen_kappa([1, None], [None, 0]) is None and krippendorff_alpha([1], [None]) is None
    with pytest.raises(ValueError, match="lengths differ"):
        cohen_kappa([1, 0], [1])


def test_agreement_per_stratum_and_pooled_with_jackknife_intervals():
    # consensus: 4 works of weight 1, coders disagree once; negative_far: 6 works of weight 5, first always 0
    first = [1, 1, 0, 0] + [0] * 6
    second = [1, 1, 1, 0] + [0] * 5 + [1]
    weights = [1.0] * 4 + [5.0] * 6
    strata = ["consensus"] * 4 + ["negative_far"] * 6
    rows = {(r.stratum, r.statistic, r.weighting): r for r in head_agreement(first, second, weights, strata)}
    assert list(rows) == [
        ("all", "cohen_kappa", "raw"),
        ("all", "cohen_kappa", "design"),
        ("all", "krippendorff_alpha", "raw"),
        ("all", "krippendorff_alpha", "design"),
        ("consensus", "cohen_kappa", "raw"),
        ("consensus", "krippendorff_alpha", "raw"),
        ("negative_far", "cohen_kappa", "raw"),
        ("negative_far", "krippendorff_alpha", "raw"),
    ]
    # pooled raw: p_o = 8/10, p_e = .2 x .4 + .8 x .6 = .56; design-weighted: p_o = 28/34, p_e = 848/34^2
    assert rows["all", "cohen_kappa", "raw"].value == pytest.approx(0.24 / 0.44)
    assert rows["all", "cohen_kappa", "design"].value == pytest.approx(104 / 308)
    assert rows["all", "krippendorff_alpha", "raw"].value == pytest.approx(krippendorff_alpha(first, second))
    # consensus: p_o = 3/4, p_e = 1/2, kappa 1/2; the replicates without one work are 0.4, 0.4, 1 and 0
    consensus = rows["consensus", "cohen_kappa", "raw"]
    se = math.sqrt(3 / 4 * sum((r - 0.45) ** 2 for r in (0.4, 0.4, 1.0, 0.0)))
    assert (consensus.value, consensus.n, consensus.n_effective) == (pytest.approx(0.5), 4, 4.0)
    assert consensus.lower == pytest.approx(0.5 - 1.959963985 * se) and consensus.upper == 1.0  # clipped
    # negative_far: kappa and alpha 0 (p_o = p_e = 5/6); without its one disagreement a single value is left:
    # a replicate is undefined, so is the interval
    far = rows["negative_far", "cohen_kappa", "raw"]
    assert far.value == pytest.approx(0.0) and far.lower is None and far.upper is None
    assert rows["negative_far", "krippendorff_alpha", "raw"].value == pytest.approx(0.0)
    # the design-weighted interval: the stratified jackknife, a deleted work's weight carried by its stratum
    reps: dict[str, list[float]] = {}
    for i in range(10):
        h = strata[i]
        m = strata.count(h)
        w = [wt * (m / (m - 1) if strata[j] == h else 1.0) for j, wt in enumerate(weights)]
        keep = [j for j in range(10) if j != i]
        reps.setdefault(h, []).append(
            cohen_kappa([first[j] for j in keep], [second[j] for j in keep], [w[j] for j in keep])
        )
    var = sum((len(r) - 1) / len(r) * sum((x - sum(r) / len(r)) ** 2 for x in r) for r in reps.values())
    design = rows["all", "cohen_kappa", "design"]
    assert design.lower == pytest.approx(max(-1, 104 / 308 - 1.959963985 * math.sqrt(var)))
    assert design.upper == pytest.approx(min(1, 104 / 308 + 1.959963985 * math.sqrt(var)))
    assert design.lower < design.value < design.upper


def test_the_closed_form_replicates_are_the_statistic_recomputed_without_each_work():
    rng = np.random.default_rng(3)
    n = 60
    truth = (rng.random(n) < 0.2).astype(int)
    first = [UNRESOLVED if rng.random() < 0.05 else int(t != (rng.random() < 0.1)) for t in truth]
    second = [int(t != (rng.random() < 0.15)) for t in truth]
    strata = [("a", "b", "c")[i % 3] for i in range(n)]
    weights = [{"a": 1.0, "b": 2.0, "c": 7.0}[s] for s in strata]
    rows = {(r.stratum, r.statistic, r.weighting): r for r in head_agreement(first, second, weights, strata)}
    for statistic, function in (("cohen_kappa", cohen_kappa), ("krippendorff_alpha", krippendorff_alpha)):
        # the design-weighted interval: stratified replicates, each recomputed by the public function
        reps: dict[str, list[float]] = {}
        raw = []
        for i in range(n):
            m = strata.count(strata[i])
            w = [wt * (m / (m - 1) if strata[j] == strata[i] else 1.0) for j, wt in enumerate(weights)]
            keep = [j for j in range(n) if j != i]
            reps.setdefault(strata[i], []).append(
                function([first[j] for j in keep], [second[j] for j in keep], [w[j] for j in keep])
            )
            raw.append(function([first[j] for j in keep], [second[j] for j in keep]))
        var = sum((len(r) - 1) / len(r) * sum((x - sum(r) / len(r)) ** 2 for x in r) for r in reps.values())
        design = rows["all", statistic, "design"]
        assert design.upper - design.value == pytest.approx(1.959963985 * math.sqrt(var), rel=1e-9)
        raw_var = (n - 1) / n * sum((x - sum(raw) / n) ** 2 for x in raw)
        plain = rows["all", statistic, "raw"]
        assert plain.value - plain.lower == pytest.approx(1.959963985 * math.sqrt(raw_var), rel=1e-9)
