"""Tests of metacan_pipeline.student.heads: grouped cross-validation."""

from __future__ import annotations

import numpy as np
import pytest

from metacan_pipeline.student import heads


def test_grouped_cv_metrics_names_its_groups():
    X = np.eye(4)
    out = heads.grouped_cv_metrics(X, np.array([1, 0, 0, 0]), ["a", "b", "c", "d"], np.ones(4))
    assert out == {
        "ap": None,
        "auroc": None,
        "fold_positives": [],
        "cv": "not evaluated: 1 positives of 4 in 4 venue groups",
    }
    out = heads.grouped_cv_metrics(X, np.array([1, 0, 0, 0]), ["a", "b", "c", "d"], np.ones(4), group_name="title")
    assert out["cv"].endswith("in 4 title groups")


def test_heads_are_estimators_and_a_one_class_head_is_a_prior_dummy_classifier():
    from sklearn.base import clone
    from sklearn.dummy import DummyClassifier

    from metacan_pipeline.student.heads import BinaryHead, CategoricalHead

    X = np.eye(4)
    head = BinaryHead("metaresearch")
    assert head.fit(X, np.array([1, 1, 1, 1]), sample_weight=np.array([1.0, 2.0, 3.0, 4.0])) is head
    assert isinstance(head.estimator_, DummyClassifier) and head.estimator_.strategy == "prior"
    assert head.status_.startswith("constant") and head.score_samples(X).tolist() == [1.0] * 4
    assert clone(head).get_params() == {"target": "metaresearch", "c_grid": (4.0,)}
    assert not hasattr(clone(head), "status_")
    none = BinaryHead("about_ca_topic").fit(X[:0], np.array([], dtype=int))
    assert none.estimator_ is None and none.score_samples(X).tolist() == [0.0] * 4  # no label: rate 0
    cat = CategoricalHead("genre", ("empirical", "review", "other")).fit(X, ["review", None, "review", None])
    assert cat.status_.startswith("constant") and cat.predict_proba(X).tolist() == [[0.0, 1.0, 0.0]] * 4
    empty = CategoricalHead("genre", ("empirical", "review")).fit(X, [None] * 4)
    assert empty.predict_proba(X[:1]).tolist() == [[0.5, 0.5]]  # no value: uniform
    trained = CategoricalHead("genre", ("empirical", "review", "other")).fit(X, ["review", "other"] * 2)
    assert trained.status_ == "trained" and trained.predict_proba(X)[:, 0].tolist() == [0.0] * 4


def test_a_head_that_never_saw_both_classes_gives_no_score_and_says_why():
    from metacan_pipeline.student.heads import BinaryHead, CategoricalHead, no_score_reason

    X = np.eye(5)
    no_pos = BinaryHead("about_ca_system").fit(X, np.zeros(5, dtype=int))
    no_neg = BinaryHead("metaresearch").fit(X, np.ones(5, dtype=int))
    none = BinaryHead("metaresearch").fit(X[:0], np.array([], dtype=int))
    trained = BinaryHead("metaresearch").fit(X, np.array([1, 0, 1, 0, 0]))
    assert no_pos.no_score_reason == "no positive direct label to learn from (0 positives of 5 labels)"
    assert no_neg.no_score_reason == "no negative direct label to learn from (5 positives of 5 labels)"
    assert none.no_score_reason == "no direct label to learn from"
    assert no_pos.status_ == "constant: " + no_pos.no_score_reason
    assert trained.no_score_reason is None and no_score_reason(trained) is None
    for head in (no_pos, no_neg, none):
        assert np.isnan(head.scores_or_null(X)).all() and head.scores_or_null(X).shape == (5,)
    # the estimator protocol keeps the prior: score_samples is the training rate, only the writers give null
    assert no_neg.score_samples(X).tolist() == [1.0] * 5
    assert trained.scores_or_null(X).tolist() == trained.score_samples(X).tolist()
    # a categorical head always scores (its class probabilities)
    cat = CategoricalHead("genre", ("empirical", "review")).fit(X, ["review"] * 5)
    assert no_score_reason(cat) is None


def _planted(seed: int = 7, n: int = 240):
    """A binary target carried by 3 of 60 features, the rest noise, in 24 groups of 10 works."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 60))
    y = (X[:, :3].sum(axis=1) + rng.normal(scale=1.5, size=n) > 1.5).astype(int)
    groups = [f"g{i // 10}" for i in range(n)]
    return X, y, groups


def test_choose_c_picks_the_grid_value_with_the_best_grouped_cv_average_precision():
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import average_precision_score
    from sklearn.model_selection import GroupKFold

    X, y, groups = _planted()
    w = np.where(np.arange(len(y)) % 3 == 0, 2.0, 1.0)
    grid = (0.001, 0.1, 10.0)
    c, how = heads.choose_c(X, y, w, groups, grid, folds=3)
    expected = {}
    for value in grid:  # the same search written out with scikit-learn alone
        oof = np.empty(len(y))
        for train, test in GroupKFold(n_splits=3).split(X, y, groups):
            m = LogisticRegression(C=value, max_iter=2000).fit(X[train], y[train], sample_weight=w[train])
            oof[test] = m.predict_proba(X[test])[:, 1]
        expected[value] = average_precision_score(y, oof, sample_weight=w)
    assert how["C"] == pytest.approx(expected) and how["folds"] == 3
    assert c == max(grid, key=lambda v: expected[v])
    assert len(set(np.round(list(expected.values()), 6))) == 3  # the grid values really differ on these works
    assert how["how"].startswith(f"C = {c:g} by 3-fold grouped CV AP (0.001: {expected[0.001]:.3f}")
    head = heads.BinaryHead("metaresearch", grid).fit(X, y, w, groups=groups)
    assert head.C_ == c and head.estimator_.C == c and head.c_choice_ == how


def test_choose_c_falls_back_to_the_default_c_without_two_positive_groups_and_fixes_a_single_value():
    X, y, groups = _planted()
    y = np.zeros(len(y), dtype=int)
    y[:3] = 1  # every positive in group g0
    c, how = heads.choose_c(X, y, np.ones(len(y)), groups, (1.0, 4.0, 64.0))
    assert (
        c == 4.0
        and how["how"] == "C = 4, not searched: 1 group(s) with a positive, 24 with a negative (needs 2 of each)"
    )
    assert heads.choose_c(X, y, np.ones(len(y)), groups, (16.0,)) == (
        16.0,
        {"C": {}, "folds": 0, "how": "fixed C = 16"},
    )


def test_a_c_grid_is_chosen_inside_each_outer_fold_on_its_training_works_only(monkeypatch):
    X, y, groups = _planted()
    seen = []
    real = heads.choose_c

    def spy(X_, y_, w_, groups_, grid, folds=heads.INNER_FOLDS):
        seen.append(set(groups_))
        return real(X_, y_, w_, groups_, grid, folds)

    monkeypatch.setattr(heads, "choose_c", spy)
    oof, _ = heads.grouped_cv_scores(X, y, groups, np.ones(len(y)), 4, c_grid=(0.01, 1.0))
    from sklearn.model_selection import GroupKFold

    outer = [set(np.asarray(groups)[test]) for _, test in GroupKFold(n_splits=4).split(X, y, groups)]
    assert len(seen) == 4 and not np.isnan(oof).any()
    for chosen_on, test_groups in zip(seen, outer, strict=True):
        assert chosen_on.isdisjoint(test_groups) and chosen_on | test_groups == set(groups)


@pytest.mark.parametrize("grid", [(), (0.0, 1.0), (float("nan"),), ("x",)])
def test_a_bad_c_grid_is_named(grid):
    with pytest.raises(ValueError, match="head regularisation grid"):
        heads.check_c_grid(grid)


def test_a_c_grid_without_groups_is_refused():
    X, y, _ = _planted()
    with pytest.raises(ValueError, match="give groups, one per label"):
        heads.BinaryHead("metaresearch", (1.0, 4.0)).fit(X, y)
