"""Per-head metrics on the frozen holdout, and the reliability plot (SPEC section 6, issue 5).

Metrics are design-weighted where weights are given (codex heads: the sample's design weights, so
the figures estimate the frame, not the sample); gemma heads are unweighted (a census).

- AP: :func:`sklearn.metrics.average_precision_score`; AUROC: :func:`sklearn.metrics.roc_auc_score`.
- ECE (expected calibration error): scores cut into :data:`ECE_BINS` equal-width bins on [0, 1];
  ECE = sum over bins of (bin weight / total weight) x |weighted mean score - weighted positive rate|
  (Naeini, Cooper and Hauskrecht 2015, "Obtaining well calibrated probabilities using Bayesian binning").
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from ..plots import new_figure, png_bytes

ECE_BINS = 10


def reliability_bins(y: np.ndarray, s: np.ndarray, w: np.ndarray, bins: int = ECE_BINS) -> list[dict]:
    """Non-empty bins of a reliability diagram: ``[{lo, hi, weight, mean_score, positive_rate}]``."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = np.clip(np.digitize(s, edges[1:-1], right=False), 0, bins - 1)
    out = []
    for b in range(bins):
        m = idx == b
        wt = float(w[m].sum())
        if wt <= 0:
            continue
        out.append(
            {
                "lo": float(edges[b]),
                "hi": float(edges[b + 1]),
                "weight": wt,
                "mean_score": float((w[m] * s[m]).sum() / wt),
                "positive_rate": float((w[m] * y[m]).sum() / wt),
            }
        )
    return out


def expected_calibration_error(y: np.ndarray, s: np.ndarray, w: np.ndarray, bins: int = ECE_BINS) -> float:
    """Weighted ECE over equal-width bins (see module docstring); in [0, 1]."""
    total = float(w.sum())
    if total <= 0:
        return float("nan")
    return float(
        sum(b["weight"] / total * abs(b["mean_score"] - b["positive_rate"]) for b in reliability_bins(y, s, w, bins))
    )


def binary_metrics(y: np.ndarray, s: np.ndarray, w: np.ndarray | None = None) -> dict:
    """``{n, positives, ap, auroc, ece, bins, note}`` of scores ``s`` against 0/1 labels ``y``.

    AP and AUROC need both classes (None otherwise, with the reason in ``note``); ECE needs one label.
    """
    y = np.asarray(y, dtype=int)
    s = np.asarray(s, dtype=float)
    w = np.ones(len(y)) if w is None else np.asarray(w, dtype=float)
    pos = int(y.sum())
    out = {"n": len(y), "positives": pos, "ap": None, "auroc": None, "ece": None, "bins": [], "note": "evaluated"}
    if len(y) == 0:
        out["note"] = "not evaluated: no labelled work in the holdout"
        return out
    out["ece"] = expected_calibration_error(y, s, w)
    out["bins"] = reliability_bins(y, s, w)
    if pos == 0 or pos == len(y):
        out["note"] = f"AP/AUROC not evaluated: {pos} positives of {len(y)} holdout labels (one class)"
        return out
    out["ap"] = float(average_precision_score(y, s, sample_weight=w))
    out["auroc"] = float(roc_auc_score(y, s, sample_weight=w))
    return out


def categorical_metrics(
    values: list[str], probs: np.ndarray, classes: tuple[str, ...], w: np.ndarray | None = None
) -> dict:
    """``{n, accuracy, ece, note}`` of a categorical head: weighted top-1 accuracy and the ECE of the
    top-1 confidence (Guo et al. 2017, "On calibration of modern neural networks")."""
    w = np.ones(len(values)) if w is None else np.asarray(w, dtype=float)
    if not values:
        return {"n": 0, "accuracy": None, "ece": None, "note": "not evaluated: no labelled work in the holdout"}
    top = probs.argmax(axis=1)
    correct = np.array([classes[t] == v for t, v in zip(top, values, strict=False)], dtype=int)
    return {
        "n": len(values),
        "accuracy": float((w * correct).sum() / w.sum()),
        "ece": expected_calibration_error(correct, probs.max(axis=1), w),
        "note": "evaluated",
    }


def reliability_png(curves: dict[str, list[dict]], title: str) -> bytes:
    """A PNG reliability diagram: one line per head (mean score vs positive rate per bin, marker size
    by bin weight) and the diagonal of perfect calibration. ``curves`` maps head name -> bins."""
    fig = new_figure((5.5, 5))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfectly calibrated")
    markers = "osD^v<>ph*"
    for i, (name, bins) in enumerate(sorted(curves.items())):
        if not bins:
            continue
        ax.plot(
            [b["mean_score"] for b in bins],
            [b["positive_rate"] for b in bins],
            marker=markers[i % len(markers)],
            linewidth=1.2,
            label=name,
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean student score in bin")
    ax.set_ylabel("teacher positive rate in bin (holdout)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    return png_bytes(fig)
