"""Per-head metrics on the frozen holdout, and the reliability plot (SPEC section 6).

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
from ..storage import MetacanStorage
from ..vocab import BINARY_TARGETS, CATEGORICAL_TARGETS
from .heads import kish_ess, weighted_rate
from .models import StudentBundle
from .reference_sets import REFERENCE_GATE_REASON
from .roles import ROLE_TEACHERS, SAMPLE
from .training import TrainingInputs, target_value

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


def _binary_row(head, target: str, labels: list[dict], ev: list[dict], X, w_ev: np.ndarray, w_all: np.ndarray):
    y_all = np.array([target_value(r, target) or 0 for r in labels])
    keep = [i for i, r in enumerate(ev) if target_value(r, target) is not None]
    y = np.array([target_value(ev[i], target) for i in keep], dtype=int)
    m = binary_metrics(y, head.score_samples(X[keep]) if keep else np.array([]), w_ev[keep])
    row = {
        "kind": "binary",
        "labels": len(y_all),
        "positives": int(y_all.sum()),
        "train_positives": head.positives_,
        "weighted_rate": weighted_rate(y_all, w_all),
        "kish_ess_positive": kish_ess(w_all[y_all == 1]),
        "holdout_n": m["n"],
        "holdout_positives": m["positives"],
        "ap": m["ap"],
        "auroc": m["auroc"],
        "ece": m["ece"],
        "metric_note": m["note"],
    }
    return row, (m["bins"] if m["ap"] is not None else [])


def _categorical_row(head, target: str, labels: list[dict], ev: list[dict], X, w_ev: np.ndarray) -> dict:
    keep = [i for i, r in enumerate(ev) if r.get(target) is not None]
    m = categorical_metrics(
        [ev[i][target] for i in keep],
        head.score_samples(X[keep]) if keep else np.zeros((0, 1)),
        head.classes_,
        w_ev[keep],
    )
    n_lab = sum(1 for r in labels if r.get(target) is not None)
    return {
        "kind": "categorical",
        "labels": n_lab,
        "positives": n_lab,
        "holdout_n": m["n"],
        "accuracy": m["accuracy"],
        "ece": m["ece"],
        "metric_note": m["note"],
    }


def holdout_metric_rows(bundle: StudentBundle, inputs: TrainingInputs) -> tuple[list[dict], dict[str, dict]]:
    """The ``student_heads`` rows of every head of ``bundle`` (metrics on the frozen holdout's labelled works
    only, design-weighted for the sample teacher; label counts over all labels) and the reliability curves
    ``{teacher: {target: bins}}`` of the binary heads with an AP."""
    rows, curves = [], {t: {} for t in ROLE_TEACHERS}
    for teacher in ROLE_TEACHERS:
        labels = inputs.labels[teacher]
        ev = [r for r in labels if r["work_id"] in inputs.labelled_holdout]
        X = bundle.vectorizer.transform([inputs.texts[r["work_id"]] for r in ev]) if ev else None
        w_ev, w_all = inputs.row_weights(teacher, ev), inputs.row_weights(teacher, labels)
        for target in (*BINARY_TARGETS, *CATEGORICAL_TARGETS):
            head, gate = bundle.heads[teacher][target], bundle.gates[target]
            row = {
                "model_version": bundle.model_version,
                "teacher": teacher,
                "target": target,
                "status": head.status_,
                "n_train": head.n_train_,
                "gate_passed": gate.passed if teacher == SAMPLE else None,
                "gate_reason": gate.reason if teacher == SAMPLE else None,
            }
            if target in BINARY_TARGETS:
                metrics, curves[teacher][target] = _binary_row(head, target, labels, ev, X, w_ev, w_all)
            else:
                metrics = _categorical_row(head, target, labels, ev, X, w_ev)
            rows.append({**row, **metrics})
    return rows, curves


def reference_head_rows(bundle: StudentBundle) -> list[dict]:
    """The ``student_heads`` rows of the reference sets' heads: label counts, the set's weighted rate and AP/AUROC
    under grouped cross-validation on the set (:func:`~.training.reference_summaries`); no holdout metrics (the
    frame's holdout holds no label of the set) and never the support gate."""
    rows = []
    for name, summary in bundle.reference_sets.items():
        for target, m in summary["heads"].items():
            head = bundle.heads[name][target]
            rows.append(
                {
                    "model_version": bundle.model_version,
                    "teacher": name,
                    "target": target,
                    "kind": "binary",
                    "status": head.status_,
                    "labels": m["labels"],
                    "positives": m["positives"],
                    "n_train": head.n_train_,
                    "train_positives": head.positives_,
                    "weighted_rate": m["weighted_rate"],
                    "holdout_n": 0,
                    "holdout_positives": 0,
                    "ap": m["cv_ap"],
                    "auroc": m["cv_auroc"],
                    "metric_note": f"reference set ({'design-weighted' if summary['weighted'] else 'unweighted'}): {m['cv']}",
                    "gate_passed": False,
                    "gate_reason": REFERENCE_GATE_REASON,
                }
            )
    return rows


def write_reliability_plots(storage: MetacanStorage, model_version: str, curves: dict[str, dict]) -> dict[str, bytes]:
    """One reliability PNG per teacher under ``data/reports/<model_version>/reliability_<teacher>.png``;
    returns ``{teacher: png bytes}``."""
    report_dir = storage.root / "reports" / model_version
    report_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for teacher in ROLE_TEACHERS:
        out[teacher] = reliability_png(curves[teacher], f"{teacher} heads on the frozen holdout, {model_version}")
        (report_dir / f"reliability_{teacher}.png").write_bytes(out[teacher])
    return out
