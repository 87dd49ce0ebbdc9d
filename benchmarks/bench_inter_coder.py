"""The inter-coder agreement of ``validation_report`` with its strata and intervals: what the delete-one jackknife
(``agreement.head_agreement`` with ``strata``: pooled raw and design-weighted kappa and alpha, and per stratum, each
with its interval) costs over the point statistics alone (the pooled raw and design-weighted kappa and alpha, what
the report computed before it had strata and intervals), on the same synthetic works coded twice.

Synthetic works: ``--works`` works coded twice on one binary head, in 7 strata of the audit design (design weights
1, 1, 1, 2, 2, 5, 10), a prevalence of 2 %, each coder wrong on 5 % of the works and unresolved on 1 %. The
replicates are in closed form (``agreement._replicates``: each the totals less one work's part), so the cost grows
with the works, not their square: the figure says what the intervals add to the report at the audit sample's size.

Ratio: ``jackknife/point`` (seconds of ``head_agreement`` with strata over the four point statistics).

Usage: ``nice .venv/bin/python benchmarks/bench_inter_coder.py [--works 500 2000] [--heads 3]``; ``--smoke``: 200
works, 1 head. Figures go to ``benchmarks/out/inter_coder.json``.
"""

from __future__ import annotations

import argparse
import time

from _common import add_smoke_arg, machine_line, ratio, record, say


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--works", type=int, nargs="+", default=[500, 2000], help="works coded twice")
    ap.add_argument("--heads", type=int, default=3, help="heads (each timed on its own draw)")
    ap.add_argument("--name", default="", help="suffix of the result file")
    add_smoke_arg(ap, "200 works, 1 head")
    args = ap.parse_args()
    if args.smoke:
        args.works, args.heads = [200], 1

    import numpy as np

    from metacan_pipeline.audit.estimates.agreement import UNRESOLVED, cohen_kappa, head_agreement, krippendorff_alpha

    say(machine_line())
    weights = (1.0, 1.0, 1.0, 2.0, 2.0, 5.0, 10.0)
    figures, ratios = {"works": {}}, {}
    for n in args.works:
        rng = np.random.default_rng(n)
        draws = []
        for _ in range(args.heads):
            truth = (rng.random(n) < 0.02).astype(int)
            pair = []
            for _coder in range(2):
                codes = np.where(rng.random(n) < 0.05, 1 - truth, truth).astype(object)
                codes[rng.random(n) < 0.01] = UNRESOLVED
                pair.append(list(codes))
            stratum = rng.integers(0, len(weights), n)
            draws.append((pair[0], pair[1], [weights[s] for s in stratum], [f"s{s}" for s in stratum]))
        t = time.perf_counter()
        for a, b, w, _ in draws:
            cohen_kappa(a, b), cohen_kappa(a, b, w), krippendorff_alpha(a, b), krippendorff_alpha(a, b, w)
        point = time.perf_counter() - t
        t = time.perf_counter()
        for a, b, w, s in draws:
            head_agreement(a, b, w, s)
        jackknife = time.perf_counter() - t
        figures["works"][n] = {
            "heads": args.heads,
            "point_seconds": round(point, 4),
            "jackknife_seconds": round(jackknife, 4),
        }
        ratios[f"jackknife/point@{n}"] = ratio(jackknife, point)
        print(
            f"{args.heads} head(s) x {n} works coded twice: point statistics {point:.3f} s; with strata and jackknife "
            f"intervals {jackknife:.3f} s ({jackknife / args.heads:.3f} s a head; ratio {ratios[f'jackknife/point@{n}']})"
        )
    record("inter_coder", figures, ratios=ratios, name=args.name, smoke=args.smoke)


if __name__ == "__main__":
    main()
