"""Student heads: TF-IDF + logistic regression per target (SPEC section 6, simplest honest form).

A *head* maps the title-only text of a work to a score (binary targets) or a probability vector in
vocabulary order (categorical targets). A head whose training labels hold a single class cannot be
fitted; it becomes a *constant head* that returns the (design-weighted) training rate and says so in
``status``: it ranks nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.model_selection import GroupKFold
from threadpoolctl import threadpool_limits

from .features import TFIDF_PARAMS

PARAMS = {"tfidf": TFIDF_PARAMS, "logreg": {"C": 4.0, "max_iter": 2000}}


def fit_logreg(X, y, w) -> LogisticRegression:
    """``LogisticRegression(**PARAMS["logreg"]).fit(X, y, sample_weight=w)`` with BLAS held to one thread.

    The lbfgs solver (SciPy's L-BFGS-B) spends most of a fit in BLAS vector operations over the
    coefficients (10^5 to 10^6 of them); OpenBLAS threads them, and on a 2-core machine shared with
    other work its spinning threads made each fit 2-9x slower (benchmarks/bench_student.py; SciPy
    issues 22438, 23191, 26137). One thread also makes a fit independent of the machine's core count:
    a threaded multinomial fit's coefficients change in the last bits with the number of BLAS threads.
    """
    with threadpool_limits(limits=1, user_api="blas"):
        return LogisticRegression(**PARAMS["logreg"]).fit(X, y, sample_weight=w)


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
    from joblib import Parallel, delayed

    return Parallel(n_jobs=min(FIT_WORKERS, len(fits)), backend="loky")(delayed(fn)(*args) for fn, args in fits)


@dataclass
class BinaryHead:
    """A fitted binary head; ``model`` is None for a constant head (``rate`` is then its score)."""

    target: str
    status: str
    rate: float
    n_train: int
    positives: int
    model: LogisticRegression | None = None

    def score(self, X) -> np.ndarray:
        if self.model is None:
            return np.full(X.shape[0], self.rate, dtype=float)
        return self.model.predict_proba(X)[:, 1]


@dataclass
class CategoricalHead:
    """A fitted categorical head over ``classes`` (the full vocabulary, in order)."""

    target: str
    status: str
    classes: tuple[str, ...]
    prior: np.ndarray
    n_train: int
    model: LogisticRegression | None = None

    def score(self, X) -> np.ndarray:
        if self.model is None:
            return np.tile(self.prior, (X.shape[0], 1))
        probs = self.model.predict_proba(X)
        out = np.zeros((X.shape[0], len(self.classes)))
        for j, cls in enumerate(self.model.classes_):
            out[:, self.classes.index(cls)] = probs[:, j]
        return out


def weighted_rate(y: np.ndarray, w: np.ndarray) -> float:
    """Hajek estimate of a rate: sum(w*y) / sum(w) (SPEC section 5); 0 when there is no weight."""
    total = float(w.sum())
    return float((w * y).sum() / total) if total > 0 else 0.0


def kish_ess(w: np.ndarray) -> float:
    """Kish effective sample size (sum w)^2 / sum w^2; 0 for no weights."""
    s2 = float((w**2).sum())
    return float(w.sum() ** 2 / s2) if s2 > 0 else 0.0


def grouped_cv_metrics(
    X, y: np.ndarray, groups: list[str], w: np.ndarray, folds: int = 5, *, group_name: str = "venue"
) -> dict:
    """AP and AUROC under grouped cross-validation (``GroupKFold`` with ``min(folds, groups)`` folds), or
    the reason they are absent (fewer than 2 positives, no negative, fewer than 2 groups).

    ``groups`` are the CV groups (every group lies in one test fold), venues unless a caller groups
    otherwise; ``group_name`` names them in the ``cv`` description. ``fold_positives``: positives in
    each test fold, in fold order (empty when not evaluated). A fold whose training part holds one class
    scores its test works with the training rate.
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
    oof = np.full(len(y), np.nan)
    fold_positives = []
    for train, test in GroupKFold(n_splits=k).split(X, y, groups):
        fold_positives.append(int(y[test].sum()))
        if len(set(y[train])) < 2:
            oof[test] = weighted_rate(y[train], w[train])
            continue
        m = fit_logreg(X[train], y[train], w[train])
        oof[test] = m.predict_proba(X[test])[:, 1]
    return {
        "ap": float(average_precision_score(y, oof, sample_weight=w)),
        "auroc": float(roc_auc_score(y, oof, sample_weight=w)),
        "fold_positives": fold_positives,
        "cv": f"{k}-fold grouped by {group_name}",
    }


def fit_binary(target: str, X, y: np.ndarray, w: np.ndarray) -> BinaryHead:
    """Fit one binary head with weights ``w``; a constant head when ``y`` has one class."""
    pos = int(y.sum())
    rate = weighted_rate(y, w)
    if len(y) == 0 or pos == 0 or pos == len(y):
        return BinaryHead(
            target, f"constant: {pos} positives of {len(y)} labels (one class, cannot fit)", rate, len(y), pos
        )
    model = fit_logreg(X, y, w)
    return BinaryHead(target, "trained", rate, len(y), pos, model)


def fit_categorical(
    target: str, classes: tuple[str, ...], X, values: list[str | None], w: np.ndarray
) -> CategoricalHead:
    """Fit one categorical head on the works with a non-null value; constant head with < 2 classes."""
    keep = [i for i, v in enumerate(values) if v is not None]
    vals = [values[i] for i in keep]
    prior = np.zeros(len(classes))
    for i in keep:
        prior[classes.index(values[i])] += w[i]
    prior = prior / prior.sum() if prior.sum() > 0 else np.full(len(classes), 1.0 / len(classes))
    if len(set(vals)) < 2:
        return CategoricalHead(
            target, f"constant: {len(set(vals))} class(es) among {len(vals)} labels", classes, prior, len(vals)
        )
    model = fit_logreg(X[keep], vals, w[keep])
    return CategoricalHead(target, "trained", classes, prior, len(vals), model)
