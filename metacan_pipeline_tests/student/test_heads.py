"""Tests of metacan_pipeline.student.heads: grouped cross-validation."""

from __future__ import annotations

import numpy as np

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
    assert clone(head).get_params() == {"target": "metaresearch"} and not hasattr(clone(head), "status_")
    none = BinaryHead("about_ca_topic").fit(X[:0], np.array([], dtype=int))
    assert none.estimator_ is None and none.score_samples(X).tolist() == [0.0] * 4  # no label: rate 0
    cat = CategoricalHead("genre", ("empirical", "review", "other")).fit(X, ["review", None, "review", None])
    assert cat.status_.startswith("constant") and cat.predict_proba(X).tolist() == [[0.0, 1.0, 0.0]] * 4
    empty = CategoricalHead("genre", ("empirical", "review")).fit(X, [None] * 4)
    assert empty.predict_proba(X[:1]).tolist() == [[0.5, 0.5]]  # no value: uniform
    trained = CategoricalHead("genre", ("empirical", "review", "other")).fit(X, ["review", "other"] * 2)
    assert trained.status_ == "trained" and trained.predict_proba(X)[:, 0].tolist() == [0.0] * 4
