"""The model card's 95% intervals: what the bootstrap adds to ``student_heads`` on a holdout of a given size, and the
vectorised replicates (``evaluation.bootstrap_intervals``: scores sorted once, every replicate a weight vector)
against the plain way, scikit-learn's ``average_precision_score`` and ``roc_auc_score`` called once per replicate.

On a synthetic holdout of ``--works`` works (design weights 1 to 5, scores that rank the labels a little, ties at 3
decimals) it times, in this process, for ``--heads`` binary heads:

- ``point``: the card's point figures alone (``evaluation.binary_metrics``, what ``student_heads`` computed before);
- ``intervals``: ``evaluation.bootstrap_intervals`` (1,000 replicates, the card's setting);
- ``sklearn_loop``: ``--loop-replicates`` replicates of AP, AUROC and ECE by scikit-learn and
  ``expected_calibration_error`` per replicate, the way the vectorised code replaces (it is checked to give the same
  intervals on the same draws by the tests, ``metacan_pipeline_tests/student/test_card.py``).

Ratios: ``intervals/point`` (what a card costs over the figures ``student_heads`` already computed) and, per
replicate, ``vectorised/sklearn_loop`` (below 1: the vectorised replicates are faster).

Usage: ``nice .venv/bin/python benchmarks/bench_card.py [--works 20000] [--heads 14] [--loop-replicates 100]``;
``--smoke``: 500 works, 2 heads, 20 loop replicates. Figures go to ``benchmarks/out/card.json``.
"""

from __future__ import annotations

import argparse
import time

from _common import add_smoke_arg, machine_line, ratio, record, say


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--works", type=int, default=20_000, help="holdout works per head")
    ap.add_argument("--heads", type=int, default=14, help="binary heads")
    ap.add_argument("--loop-replicates", type=int, default=100, help="replicates of the scikit-learn loop")
    ap.add_argument("--name", default="", help="suffix of the result file")
    add_smoke_arg(ap, "500 works, 2 heads, 20 loop replicates")
    args = ap.parse_args()
    if args.smoke:
        args.works, args.heads, args.loop_replicates = 500, 2, 20

    import numpy as np
    from sklearn.metrics import average_precision_score, roc_auc_score

    from metacan_pipeline.student.evaluation import (
        BOOTSTRAP_REPLICATES,
        binary_metrics,
        bootstrap_intervals,
        expected_calibration_error,
    )

    say(machine_line())
    rng = np.random.default_rng(0)
    heads = []
    for _ in range(args.heads):
        y = (rng.random(args.works) < 0.15).astype(int)
        s = np.round(np.clip(0.15 + 0.25 * y + rng.normal(0, 0.2, args.works), 0, 1), 3)
        heads.append((y, s, rng.integers(1, 6, args.works).astype(float)))

    t = time.perf_counter()
    for y, s, w in heads:
        binary_metrics(y, s, w)
    point = time.perf_counter() - t

    t = time.perf_counter()
    for y, s, w in heads:
        bootstrap_intervals(y, s, w)
    intervals = time.perf_counter() - t

    t = time.perf_counter()
    for y, s, w in heads:
        draws = np.random.default_rng(1).integers(0, len(y), size=(args.loop_replicates, len(y)))
        for idx in draws:
            average_precision_score(y[idx], s[idx], sample_weight=w[idx])
            roc_auc_score(y[idx], s[idx], sample_weight=w[idx])
            expected_calibration_error(y[idx], s[idx], w[idx])
    loop = time.perf_counter() - t

    per_vec = intervals / (args.heads * BOOTSTRAP_REPLICATES)
    per_loop = loop / (args.heads * args.loop_replicates)
    figures = {
        "works": args.works,
        "heads": args.heads,
        "replicates": BOOTSTRAP_REPLICATES,
        "loop_replicates": args.loop_replicates,
        "point_seconds": round(point, 4),
        "intervals_seconds": round(intervals, 4),
        "sklearn_loop_seconds": round(loop, 4),
        "seconds_per_replicate_vectorised": per_vec,
        "seconds_per_replicate_sklearn_loop": per_loop,
    }
    ratios = {"intervals/point": ratio(intervals, point), "vectorised/sklearn_loop": ratio(per_vec, per_loop)}
    print(
        f"{args.heads} heads x {args.works} holdout works: point figures {point:.2f} s; 95% intervals "
        f"({BOOTSTRAP_REPLICATES} replicates) {intervals:.2f} s; per replicate {per_vec * 1e3:.3f} ms vectorised vs "
        f"{per_loop * 1e3:.3f} ms scikit-learn loop (ratio {ratios['vectorised/sklearn_loop']:.3f})"
    )
    record("card", figures, ratios=ratios, name=args.name, smoke=args.smoke)


if __name__ == "__main__":
    main()
