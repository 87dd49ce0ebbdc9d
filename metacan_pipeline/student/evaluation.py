"""Per-head metrics on the frozen holdout, and the reliability plot (SPEC section 6).

Metrics are design-weighted where weights are given (codex heads: the sample's design weights, so
the figures estimate the frame, not the sample); gemma heads are unweighted (a census).

- AP: :func:`sklearn.metrics.average_precision_score`; AUROC: :func:`sklearn.metrics.roc_auc_score`.
- ECE (expected calibration error): scores cut into :data:`ECE_BINS` equal-width bins on [0, 1];
  ECE = sum over bins of (bin weight / total weight) x |weighted mean score - weighted positive rate|
  (Naeini, Cooper and Hauskrecht 2015, "Obtaining well calibrated probabilities using Bayesian binning").
- 95% intervals (:func:`bootstrap_intervals`): percentile bootstrap over holdout works. A replicate draws the
  holdout's works with replacement (:data:`BOOTSTRAP_REPLICATES` times, :data:`BOOTSTRAP_SEED`), each drawn work
  keeping its design weight, and recomputes the figure; the interval is the 2.5th and 97.5th percentile of the
  replicates in which the figure is defined (AP and AUROC need a positive and a negative work).
  :func:`weighted_metrics` computes a replicate's AP and AUROC exactly as scikit-learn does (distinct scores as
  thresholds, ties counted together), for many weight vectors at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from ..plots import new_figure, png_bytes
from ..storage import MetacanStorage
from ..vocab import BINARY_TARGETS, CATEGORICAL_TARGETS, REFERENCE_GATE_REASON
from .heads import kish_ess, weighted_rate
from .models import StudentBundle
from .roles import ROLE_TEACHERS, SAMPLE
from .training import TrainingInputs, target_value

ECE_BINS = 10
#: Bootstrap replicates of every interval, and the seed every interval starts from (the same holdout and scores give
#: the same interval on every run and machine).
BOOTSTRAP_REPLICATES = 1000
BOOTSTRAP_SEED = 20_261_207
CI_LEVEL = 0.95
#: Replicates computed together: at most this many, and at most :data:`_CHUNK_CELLS` (replicates x holdout works)
#: at once (8 bytes each, a few arrays of that size at a time: about 32 MB each).
_CHUNK = 100
_CHUNK_CELLS = 4_000_000


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


def weighted_metrics(y: np.ndarray, s: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """AP, AUROC and ECE of scores ``s`` against 0/1 labels ``y`` under each row of ``weights`` (shape
    ``(replicates, works)``; a work's weight may be 0): ``{ap, auroc, ece}``, one value per row, NaN where the row
    has no positive or no negative weight (AP, AUROC) or no weight at all (ECE).

    AP = sum over distinct score thresholds of (recall step) x precision, AUROC = the trapezoidal area under the ROC
    points at those thresholds: what :func:`sklearn.metrics.average_precision_score` and
    :func:`sklearn.metrics.roc_auc_score` return with ``sample_weight`` (tested equal); ECE as
    :func:`expected_calibration_error`. The scores are sorted once for all rows."""
    y = np.asarray(y, dtype=float)
    s = np.asarray(s, dtype=float)
    weights = np.atleast_2d(np.asarray(weights, dtype=float))
    if len(s) == 0:
        nan = np.full(len(weights), np.nan)
        return {"ap": nan, "auroc": nan.copy(), "ece": nan.copy()}
    if np.all(s[:-1] >= s[1:]):  # already in descending score order (bootstrap_intervals sorts once)
        ss, ys, ws = s, y, weights
    else:
        order = np.argsort(-s, kind="mergesort")
        ss, ys, ws = s[order], y[order], weights[:, order]
    last = np.r_[ss[1:] != ss[:-1], True]  # the last work of each distinct score: the thresholds
    tp = np.cumsum(ws * ys, axis=1)
    total = np.cumsum(ws, axis=1)
    if not last.all():
        tp, total = tp[:, last], total[:, last]
    fp = total - tp
    pos, neg = tp[:, -1], fp[:, -1]
    defined = (pos > 0) & (neg > 0)
    dtp = np.diff(tp, axis=1, prepend=0.0)
    dfp = np.diff(fp, axis=1, prepend=0.0)
    precision = np.divide(tp, total, out=np.zeros_like(tp), where=total > 0)  # no weight yet: no recall step either
    with np.errstate(invalid="ignore", divide="ignore"):
        ap = (dtp * precision).sum(axis=1) / pos  # sum of recall steps x precision
        auroc = (dfp * (2 * tp - dtp)).sum(axis=1) / (2 * pos * neg)  # trapezoids: fpr step x mean of the two tpr
    # ECE: per bin, |sum w*(s - y)| / total weight (the bins never move: a work keeps its score)
    edges = np.linspace(0.0, 1.0, ECE_BINS + 1)
    idx = np.clip(np.digitize(s, edges[1:-1], right=False), 0, ECE_BINS - 1)
    onehot = np.zeros((len(s), ECE_BINS))
    onehot[np.arange(len(s)), idx] = 1.0
    gap = np.abs(weights @ (onehot * (s - y)[:, None])).sum(axis=1)
    weight = weights.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ece = np.where(weight > 0, gap / weight, np.nan)
    return {
        "ap": np.where(defined, ap, np.nan),
        "auroc": np.where(defined, auroc, np.nan),
        "ece": ece,
    }


def bootstrap_intervals(
    y: np.ndarray,
    s: np.ndarray,
    w: np.ndarray | None = None,
    *,
    replicates: int = BOOTSTRAP_REPLICATES,
    seed: int = BOOTSTRAP_SEED,
) -> dict:
    """95% percentile-bootstrap intervals over the works of a holdout (module docstring) of AP, AUROC and ECE, and of
    the weighted positive rate (for a categorical head's accuracy, ``y`` = top-1 correct): ``{ap, auroc, ece, rate:
    [low, high] or None, replicates, replicates_defined}``. ``replicates_defined``: how many replicates had both
    classes (AP/AUROC are None when fewer than half did). Raises ValueError when the arrays' lengths differ."""
    y = np.asarray(y, dtype=float)
    s = np.asarray(s, dtype=float)
    w = np.ones(len(y)) if w is None else np.asarray(w, dtype=float)
    if not len(y) == len(s) == len(w):
        raise ValueError(f"bootstrap_intervals: {len(y)} labels, {len(s)} scores and {len(w)} weights: one per work")
    out: dict = {"ap": None, "auroc": None, "ece": None, "rate": None, "replicates": replicates}
    out["replicates_defined"] = 0
    n = len(y)
    if n == 0 or replicates <= 0:
        return out
    order = np.argsort(-s, kind="mergesort")  # once: every replicate is then a weight vector in this order
    y, s, w = y[order], s[order], w[order]
    rng = np.random.default_rng(seed)
    chunk = max(1, min(_CHUNK, _CHUNK_CELLS // n))
    figures: dict[str, list[np.ndarray]] = {"ap": [], "auroc": [], "ece": [], "rate": []}
    for start in range(0, replicates, chunk):
        size = min(chunk, replicates - start)
        weights = np.empty((size, n))
        for i, row in enumerate(rng.integers(0, n, size=(size, n))):
            weights[i] = np.bincount(row, minlength=n)  # how often the replicate drew each work
        weights *= w
        m = weighted_metrics(y, s, weights)
        for k in ("ap", "auroc", "ece"):
            figures[k].append(m[k])
        total = weights.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            figures["rate"].append(np.where(total > 0, weights @ y / total, np.nan))
    tail = (1 - CI_LEVEL) / 2 * 100
    for k, parts in figures.items():
        values = np.concatenate(parts)
        values = values[~np.isnan(values)]
        if k in ("ap", "auroc"):
            out["replicates_defined"] = len(values)
            if len(values) < replicates / 2:
                continue
        if len(values):
            low, high = np.percentile(values, [tail, 100 - tail])
            out[k] = [float(low), float(high)]
    return out


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


#: The languages the holdout metrics are broken down by (where the holdout has works in them).
METRIC_LANGUAGES: tuple[str, ...] = ("en", "fr")


def _interval_columns(ci: dict, names: tuple[str, ...]) -> dict:
    """``{<name>_ci_low, <name>_ci_high}`` of the bootstrap intervals ``ci`` (None where not defined)."""
    out = {}
    for name in names:
        key = "rate" if name == "accuracy" else name
        low, high = ci[key] if ci.get(key) else (None, None)
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = low, high
    return out


def binary_figures(y: np.ndarray, s: np.ndarray, w: np.ndarray) -> dict:
    """:func:`binary_metrics` and the bootstrap intervals of AP, AUROC and ECE (``ap_ci_low`` ... ``ece_ci_high``);
    an interval is None where its figure is."""
    m = binary_metrics(y, s, w)
    ci = bootstrap_intervals(y, s, w) if m["n"] else {}
    return {
        **m,
        **_interval_columns(
            {k: ci.get(k) if m[k] is not None else None for k in ("ap", "auroc", "ece")}, ("ap", "auroc", "ece")
        ),
    }


def categorical_figures(values: list[str], probs: np.ndarray, classes: tuple[str, ...], w: np.ndarray) -> dict:
    """:func:`categorical_metrics` and the bootstrap intervals of its accuracy and ECE (top-1 correct vs confidence)."""
    m = categorical_metrics(values, probs, classes, w)
    if not values:
        return {**m, **_interval_columns({}, ("accuracy", "ece"))}
    top = probs.argmax(axis=1)
    correct = np.array([classes[t] == v for t, v in zip(top, values, strict=True)], dtype=float)
    return {**m, **_interval_columns(bootstrap_intervals(correct, probs.max(axis=1), w), ("accuracy", "ece"))}


def _binary_row(head, target: str, labels: list[dict], ev: list[dict], X, w_ev: np.ndarray, w_all: np.ndarray, langs):
    y_all = np.array([target_value(r, target) or 0 for r in labels])
    keep = [i for i, r in enumerate(ev) if target_value(r, target) is not None]
    y = np.array([target_value(ev[i], target) for i in keep], dtype=int)
    s = head.score_samples(X[keep]) if keep else np.array([])
    m = binary_figures(y, s, w_ev[keep])
    reason = getattr(head, "no_score_reason", None)
    if reason is not None:  # a head that gives no score has no figure: its constant rate ranks nothing
        m = {k: (None if k in ("ap", "auroc", "ece", "bins") or "_ci_" in k else v) for k, v in m.items()}
        m["note"] = f"no score: {reason}"
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
        **{k: v for k, v in m.items() if "_ci_" in k},
    }
    lang = np.array([langs[i] for i in keep], dtype=object)
    by_language = {
        code: _strip_bins(binary_figures(y[lang == code], s[lang == code], w_ev[keep][lang == code]))
        for code in METRIC_LANGUAGES
        if (lang == code).any() and reason is None
    }
    return row, (m["bins"] if m["ap"] is not None else []), by_language


def _strip_bins(m: dict) -> dict:
    return {k: v for k, v in m.items() if k != "bins"}


def _categorical_row(head, target: str, labels: list[dict], ev: list[dict], X, w_ev: np.ndarray, langs):
    keep = [i for i, r in enumerate(ev) if r.get(target) is not None]
    values = [ev[i][target] for i in keep]
    probs = head.score_samples(X[keep]) if keep else np.zeros((0, 1))
    m = categorical_figures(values, probs, head.classes_, w_ev[keep])
    n_lab = sum(1 for r in labels if r.get(target) is not None)
    row = {
        "kind": "categorical",
        "labels": n_lab,
        "positives": n_lab,
        "holdout_n": m["n"],
        "accuracy": m["accuracy"],
        "ece": m["ece"],
        "metric_note": m["note"],
        **{k: v for k, v in m.items() if "_ci_" in k},
    }
    lang = np.array([langs[i] for i in keep], dtype=object)
    by_language = {}
    for code in METRIC_LANGUAGES:
        sel = np.nonzero(lang == code)[0]
        if len(sel):
            by_language[code] = categorical_figures(
                [values[i] for i in sel], probs[sel], head.classes_, w_ev[keep][sel]
            )
    return row, by_language


@dataclass(frozen=True)
class HoldoutReport:
    """The frozen-holdout evaluation of a model version: the ``student_heads`` rows, the reliability curves
    ``{teacher: {target: bins}}`` of the binary heads with an AP, and the same figures per language
    ``{(teacher, target): {language: figures}}`` (:data:`METRIC_LANGUAGES` the holdout has works in)."""

    rows: list[dict]
    curves: dict[str, dict]
    by_language: dict[tuple[str, str], dict[str, dict]]


def holdout_metric_rows(bundle: StudentBundle, inputs: TrainingInputs) -> HoldoutReport:
    """The :class:`HoldoutReport` of every head of ``bundle``: metrics on the frozen holdout's labelled works only,
    design-weighted for the sample teacher, with 95% bootstrap intervals (:func:`bootstrap_intervals`); label counts
    over all labels."""
    rows, curves, by_language = [], {t: {} for t in ROLE_TEACHERS}, {}
    for teacher in ROLE_TEACHERS:
        labels = inputs.labels[teacher]
        ev = [r for r in labels if r["work_id"] in inputs.labelled_holdout]
        X = bundle.vectorizer.transform([inputs.texts[r["work_id"]] for r in ev]) if ev else None
        w_ev, w_all = inputs.row_weights(teacher, ev), inputs.row_weights(teacher, labels)
        langs = [inputs.frame_info[r["work_id"]].get("language") for r in ev]
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
                metrics, curves[teacher][target], langs_m = _binary_row(head, target, labels, ev, X, w_ev, w_all, langs)
            else:
                metrics, langs_m = _categorical_row(head, target, labels, ev, X, w_ev, langs)
            rows.append({**row, **metrics})
            by_language[teacher, target] = langs_m
    return HoldoutReport(rows, curves, by_language)


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
