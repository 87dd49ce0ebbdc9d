"""Student heads: TF-IDF + logistic regression per target (SPEC section 6, simplest honest form).

A *head* maps the title-only text of a work to a score (binary targets) or a probability vector in
vocabulary order (categorical targets). A head whose training labels hold a single class cannot be
fitted; it becomes a *constant head*, ``DummyClassifier(strategy="prior")``, whose ``score_samples`` is the
(design-weighted) training rate: it ranks nothing, so a binary one gives *no score* (null, with the reason:
:func:`no_score_reason`) wherever scores are written. Heads follow
scikit-learn's estimator protocol (``sklearn/dummy.py``): parameters in ``__init__``, ``fit`` returns
the head, fitted attributes end in ``_``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
from joblib import Parallel, delayed
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.dummy import DummyClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.model_selection import GroupKFold
from threadpoolctl import threadpool_limits

from ..vocab import CONSTANT_HEAD_STATUS
from .features import TFIDF_PARAMS

PARAMS = {"tfidf": TFIDF_PARAMS, "logreg": {"C": 4.0, "max_iter": 2000}}

#: A head's C grid unless told otherwise: ``PARAMS["logreg"]["C"]``, fixed (a grid of one value is that C). The
#: student's ``student_heads`` passes its configured grid (default :data:`.features.DEFAULT_C_GRID`), which each
#: binary head chooses among by inner grouped cross-validation (:func:`choose_c`).
C_GRID = (PARAMS["logreg"]["C"],)
#: Folds of the inner cross-validation that chooses a binary head's C (fewer when its training works have
#: fewer groups, or fewer groups with a positive).
INNER_FOLDS = 3


def fit_logreg(X, y, w, C: float | None = None) -> LogisticRegression:
    """``LogisticRegression(**PARAMS["logreg"]).fit(X, y, sample_weight=w)`` with BLAS held to one thread
    (``C``: that inverse regularisation strength instead of ``PARAMS["logreg"]["C"]``).

    The lbfgs solver (SciPy's L-BFGS-B) spends most of a fit in BLAS vector operations over the
    coefficients (10^5 to 10^6 of them); OpenBLAS threads them, and on a 2-core machine shared with
    other work its spinning threads made each fit 2-9x slower (benchmarks/bench_student.py). One thread also makes a fit independent of the machine's core count:
    a threaded multinomial fit's coefficients change in the last bits with the number of BLAS threads.
    """
    params = PARAMS["logreg"] if C is None else {**PARAMS["logreg"], "C": float(C)}
    with threadpool_limits(limits=1, user_api="blas"):
        return LogisticRegression(**params).fit(X, y, sample_weight=w)


def check_c_grid(grid: Sequence[float]) -> tuple[float, ...]:
    """``grid`` as a sorted tuple of distinct floats; raises ValueError naming it when it is empty or holds a value
    that is not a finite number above 0."""
    try:
        values = tuple(sorted({float(c) for c in grid}))
    except (TypeError, ValueError):
        values = ()
    if not values or not all(np.isfinite(c) and c > 0 for c in values):
        raise ValueError(
            f"head regularisation grid {list(grid)!r}: give one or more finite numbers above 0 (the logistic "
            f"regression's C, e.g. [1, 4, 16, 64]; one value fixes C)"
        )
    return values


def choose_c(X, y: np.ndarray, w: np.ndarray, groups: Sequence[str], grid: Sequence[float], folds: int = INNER_FOLDS):
    """The C of ``grid`` whose :func:`fit_logreg` heads rank best under grouped cross-validation on these works
    alone, and how it was chosen: ``(C, {"C": {c: AP}, "folds": k, "how": sentence})``.

    ``k = min(folds, groups holding a positive)`` ``GroupKFold`` folds over ``groups`` (a group lies in one test
    fold); every C is scored on the same folds by the design-weighted average precision of its pooled out-of-fold
    scores; the highest wins, a tie going to the smaller C (the stronger regularisation). A test fold whose training
    part holds one class scores with its training rate, as :func:`grouped_cv_scores`. With one value in ``grid``,
    or fewer than 2 groups holding a positive or a negative, nothing is searched: the grid's value nearest
    ``PARAMS["logreg"]["C"]`` (the fixed default) is used and ``how`` says why."""
    grid = check_c_grid(grid)
    default = PARAMS["logreg"]["C"]
    fallback = min(grid, key=lambda c: (abs(np.log(c / default)), c))
    if len(grid) == 1:
        return grid[0], {"C": {}, "folds": 0, "how": f"fixed C = {grid[0]:g}"}
    groups = np.asarray(groups, dtype=object)
    pos_groups = len(set(groups[y == 1]))
    neg_groups = len(set(groups[y == 0]))
    k = min(folds, pos_groups, len(set(groups)))
    if k < 2 or neg_groups < 2:
        why = f"{pos_groups} group(s) with a positive, {neg_groups} with a negative"
        return fallback, {"C": {}, "folds": 0, "how": f"C = {fallback:g}, not searched: {why} (needs 2 of each)"}
    splits = list(GroupKFold(n_splits=k).split(X, y, groups))
    aps = {}
    for c in grid:
        oof = np.empty(len(y))
        for train, test in splits:
            if len(set(y[train])) < 2:
                oof[test] = weighted_rate(y[train], w[train])
            else:
                oof[test] = fit_logreg(X[train], y[train], w[train], C=c).predict_proba(X[test])[:, 1]
        aps[c] = float(average_precision_score(y, oof, sample_weight=w))
    best = max(grid, key=lambda c: (aps[c], -c))
    how = f"C = {best:g} by {k}-fold grouped CV AP (" + ", ".join(f"{c:g}: {a:.3f}" for c, a in aps.items()) + ")"
    return best, {"C": aps, "folds": k, "how": how}


#: Worker processes that fit heads side by side (each fit uses one core: :func:`fit_logreg`).
FIT_WORKERS = max(
    1, min(6, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
)
#: Fewer training labels than this (all heads together) are fitted in this process: starting the
#: workers (about a second) would cost more than they save.
PARALLEL_MIN_LABELS = 2_000


def run_fits(fits: Sequence[tuple[Callable, tuple]], labels: int) -> list:
    """``[fn(*args) for fn, args in fits]``, in :data:`FIT_WORKERS` worker processes (joblib's loky)
    when there are at least :data:`PARALLEL_MIN_LABELS` ``labels``. Every fit is deterministic (lbfgs,
    one BLAS thread), so the result is the same either way; give the longest fits first."""
    if FIT_WORKERS == 1 or labels < PARALLEL_MIN_LABELS or len(fits) < 2:
        return [fn(*args) for fn, args in fits]
    return Parallel(n_jobs=min(FIT_WORKERS, len(fits)), backend="loky")(delayed(fn)(*args) for fn, args in fits)


def weighted_rate(y: np.ndarray, w: np.ndarray) -> float:
    """Hajek estimate of a rate: sum(w*y) / sum(w) (SPEC section 5); 0 when there is no weight."""
    total = float(w.sum())
    return float((w * y).sum() / total) if total > 0 else 0.0


def kish_ess(w: np.ndarray) -> float:
    """Kish effective sample size (sum w)^2 / sum w^2; 0 for no weights."""
    s2 = float((w**2).sum())
    return float(w.sum() ** 2 / s2) if s2 > 0 else 0.0


def grouped_cv_scores(
    X,
    y: np.ndarray,
    groups: list[str],
    w: np.ndarray,
    folds: int = 5,
    c_grid: Sequence[float] = C_GRID,
    distil: Callable | None = None,
) -> tuple[np.ndarray, list[int]]:
    """Out-of-fold scores of a :class:`BinaryHead` (regularisation ``c_grid``) under ``GroupKFold`` with
    ``min(folds, groups)`` folds (every group in one test fold), and the positives of each test fold in fold order.
    A fold whose training part holds one class scores its test works with the training rate. With two or more C
    values, each fold's head chooses its C by :func:`choose_c` on that fold's training works only (nested: the test
    fold never enters the choice). The folds depend on ``groups`` only, so two feature matrices of the same works
    get the same folds."""
    k = min(folds, len(set(groups)))
    groups_arr = np.asarray(groups, dtype=object)
    oof = np.full(len(y), np.nan)
    fold_positives = []
    for train, test in GroupKFold(n_splits=k).split(X, y, groups):
        fold_positives.append(int(y[test].sum()))
        if len(set(y[train])) < 2:
            oof[test] = weighted_rate(y[train], w[train])
            continue
        head = BinaryHead(c_grid=c_grid).fit(X[train], y[train], w[train], groups=groups_arr[train])
        if distil is not None:
            distil(head, y, w, list(groups_arr), train, test)
        oof[test] = head.score_samples(X[test])
    return oof, fold_positives


def grouped_cv_metrics(
    X,
    y: np.ndarray,
    groups: list[str],
    w: np.ndarray,
    folds: int = 5,
    *,
    group_name: str = "venue",
    c_grid: Sequence[float] = C_GRID,
    distil: Callable | None = None,
) -> dict:
    """AP and AUROC of the :func:`grouped_cv_scores` (``min(folds, groups)`` folds), or the reason they are
    absent (fewer than 2 positives, no negative, fewer than 2 groups).

    ``groups`` are the CV groups (every group lies in one test fold), venues unless a caller groups
    otherwise; ``group_name`` names them in the ``cv`` description. ``fold_positives``: positives in
    each test fold, in fold order (empty when not evaluated).
    """
    pos = int(y.sum())
    n_groups = len(set(groups))
    if pos < 2 or pos == len(y) or n_groups < 2:
        return {
            "ap": None,
            "auroc": None,
            "fold_positives": [],
            "cv": f"not evaluated: {pos} positives of {len(y)} in {n_groups} {group_name} groups",
        }
    k = min(folds, n_groups)
    oof, fold_positives = grouped_cv_scores(X, y, groups, w, folds, c_grid, distil)
    return {
        "ap": float(average_precision_score(y, oof, sample_weight=w)),
        "auroc": float(roc_auc_score(y, oof, sample_weight=w)),
        "fold_positives": fold_positives,
        "cv": f"{k}-fold grouped by {group_name}",
    }


def _one_class(positives: int, labels: int) -> str:
    """Why labels of one class (or none) train no ranking, in the field's words."""
    if labels == 0:
        return "no direct label to learn from"
    if positives == 0:
        return f"no positive direct label to learn from (0 positives of {labels} labels)"
    return f"no negative direct label to learn from ({positives} positives of {labels} labels)"


def no_score_reason(head) -> str | None:
    """Why the binary ``head`` gives no score (null) where a score would be written, or None when it scores
    (its status is ``trained``); a categorical head always scores (its class probabilities). A head trained on one
    class or none (a *constant head*) ranks nothing: the reason names the missing class, e.g. "no positive direct
    label to learn from (0 positives of 81 labels)". Read from the fitted counts, so a head pickled by older code
    answers too."""
    if not isinstance(head, BinaryHead) or getattr(head, "status_", "trained") == "trained":
        return None
    return _one_class(head.positives_, head.n_train_)


def _on_classes(estimator, X, classes: Sequence) -> np.ndarray:
    """``estimator.predict_proba(X)`` laid out over ``classes`` (a class the estimator never saw gets 0)."""
    probs = estimator.predict_proba(X)
    out = np.zeros((X.shape[0], len(classes)))
    for j, cls in enumerate(estimator.classes_):
        out[:, list(classes).index(cls)] = probs[:, j]
    return out


class BinaryHead(ClassifierMixin, BaseEstimator):
    """A binary head on one target (scikit-learn's estimator protocol, as ``sklearn.dummy``).

    ``fit(X, y, sample_weight, groups)`` fits :func:`fit_logreg` with the C of ``c_grid`` that :func:`choose_c`
    picks by inner grouped cross-validation over ``groups`` (the works' CV groups, e.g. venues; needed when the
    grid holds two or more values; one value is that C, fixed). Labels of one class make it a constant head,
    ``DummyClassifier(strategy="prior")`` (it returns the weighted training rate and ranks nothing), and no
    label at all a constant head of rate 0 (nothing to fit, not even a prior). Fitted attributes:
    ``classes_`` (0, 1), ``estimator_`` (the LogisticRegression, the DummyClassifier or None), ``status_``
    (``trained`` or ``constant: ...``), ``n_train_``, ``positives_``, ``rate_`` (:func:`weighted_rate`), ``C_``
    (the C fitted; None for a constant head) and ``c_choice_`` (how it was chosen: :func:`choose_c`); a head
    distilled from the encoder's (:func:`.distill.distil_heads`) also has ``distilled_``.
    """

    def __init__(self, target: str = "", c_grid: Sequence[float] = C_GRID):
        self.target = target
        self.c_grid = c_grid

    def fit(self, X, y, sample_weight=None, groups: Sequence[str] | None = None) -> BinaryHead:
        y = np.asarray(y, dtype=int)
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight)
        grid = check_c_grid(self.c_grid)
        if len(grid) > 1 and (groups is None or len(groups) != len(y)):
            raise ValueError(
                f"head {self.target!r}: a regularisation grid of {len(grid)} values is chosen by grouped "
                f"cross-validation: give groups, one per label ({len(y)})"
            )
        self.classes_ = np.array([0, 1])
        self.n_train_, self.positives_ = len(y), int(y.sum())
        self.rate_ = weighted_rate(y, w)
        if len(y) == 0 or self.positives_ in (0, len(y)):
            self.status_ = CONSTANT_HEAD_STATUS + _one_class(self.positives_, len(y))
            self.estimator_ = DummyClassifier(strategy="prior").fit(X, y, sample_weight=w) if len(y) else None
            self.C_, self.c_choice_ = None, {"C": {}, "folds": 0, "how": "not fitted: one class"}
        else:
            self.status_ = "trained"
            self.C_, self.c_choice_ = choose_c(X, y, w, [] if groups is None else groups, grid, INNER_FOLDS)
            self.estimator_ = fit_logreg(X, y, w, C=self.C_)
        return self

    @property
    def no_score_reason(self) -> str | None:
        """Why this head gives no score, or None when it scores: a head that never saw both classes ranks
        nothing, so its output is "no score" (null), never its training rate (:func:`no_score_reason`)."""
        return no_score_reason(self)

    def scores_or_null(self, X) -> np.ndarray:
        """(n,) float64: :meth:`score_samples`, or NaN for every row when the head gives no score
        (:attr:`no_score_reason`); a writer turns NaN into null."""
        if self.no_score_reason is not None:
            return np.full(X.shape[0], np.nan)
        return np.asarray(self.score_samples(X), dtype=np.float64)

    def predict_proba(self, X) -> np.ndarray:
        """(n, 2): the probabilities of 0 and 1 per row of ``X``."""
        p = np.zeros(X.shape[0]) if self.estimator_ is None else _on_classes(self.estimator_, X, (0, 1))[:, 1]
        return np.column_stack([1 - p, p])

    def predict(self, X) -> np.ndarray:
        """The more probable class (0 or 1) per row of ``X``."""
        return self.classes_[self.predict_proba(X).argmax(axis=1)]

    def score_samples(self, X) -> np.ndarray:
        """(n,): the head's score of each row of ``X``, the probability of 1 (float64)."""
        return self.predict_proba(X)[:, 1]


class CategoricalHead(ClassifierMixin, BaseEstimator):
    """A categorical head over ``classes``, the full vocabulary in order (estimator protocol as :class:`BinaryHead`).

    ``fit(X, y, sample_weight)`` fits on the rows whose value is not None; fewer than 2 classes among them
    make it a constant head, ``DummyClassifier(strategy="prior")``, and no value at all a uniform one.
    Fitted attributes: ``classes_`` (= ``classes``), ``estimator_``, ``status_``, ``n_train_``,
    ``prior_`` (the weighted class shares over ``classes_``; uniform without a value).
    """

    def __init__(self, target: str = "", classes: tuple[str, ...] = ()):
        self.target = target
        self.classes = classes

    def fit(self, X, y: Sequence[str | None], sample_weight=None) -> CategoricalHead:
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight)
        keep = [i for i, v in enumerate(y) if v is not None]
        vals = [y[i] for i in keep]
        self.classes_ = tuple(self.classes)
        prior = np.zeros(len(self.classes_))
        for i in keep:
            prior[self.classes_.index(y[i])] += w[i]
        self.prior_ = prior / prior.sum() if prior.sum() > 0 else np.full(len(prior), 1.0 / len(prior))
        self.n_train_ = len(vals)
        if len(set(vals)) < 2:
            self.status_ = f"constant: {len(set(vals))} class(es) among {len(vals)} labels"
            self.estimator_ = (
                DummyClassifier(strategy="prior").fit(X[keep], vals, sample_weight=w[keep]) if vals else None
            )
        else:
            self.status_ = "trained"
            self.estimator_ = fit_logreg(X[keep], vals, w[keep])
        return self

    def predict_proba(self, X) -> np.ndarray:
        """(n, len(classes_)): class probabilities in vocabulary order."""
        if self.estimator_ is None:
            return np.tile(self.prior_, (X.shape[0], 1))
        return _on_classes(self.estimator_, X, self.classes_)

    def predict(self, X) -> np.ndarray:
        """The most probable class per row of ``X``."""
        return np.array(self.classes_, dtype=object)[self.predict_proba(X).argmax(axis=1)]

    def score_samples(self, X) -> np.ndarray:
        """The head's scores of the rows of ``X``: :meth:`predict_proba`."""
        return self.predict_proba(X)


#: A fitted head of either kind.
Head = BinaryHead | CategoricalHead
