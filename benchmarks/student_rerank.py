"""A two-stage student, measured offline: a fast backend ranks every work, a slow one re-ranks the top share.

AP is read from the top of a ranking, and the frame's positives are rare (about 1%), so a slow encoder that sees
only the works a fast one ranks highest may keep most of its quality at a fraction of its cost. For each pilot set
of ``student_backends.py`` (the same works, labels, design weights and grouped folds), this benchmark computes the
out-of-fold ``metaresearch`` scores of ``--fast`` and ``--slow`` (``heads.grouped_cv_scores``) and, for each share
``q`` of ``--shares``, the *re-ranked* score: works in the top ``q`` of the fast ranking, by design-weighted share
(the weights make a sampled set stand for its frame, so ``q`` is the share of the frame the slow encoder would
see), are ordered by the slow score above every other work; the rest keep the fast order. It prints AP and AUROC
with 95% bootstrap intervals (``student_backends.with_intervals``, the same resamples for every column).

Cost at census: the slow encoder's works/s is timed on ``--works`` real student texts (``student_backends.real_texts``)
in this process, beside ``--fast``'s; the projected minutes for ``--frame`` works are
``frame / fast rate + q * frame / slow rate`` (featurisation only: reading, scoring and writing add to both).
``--smoke``: screening a only, 200 works, 20 resamples, shares 0.05; measures nothing.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _common import SHARED_DATA, add_smoke_arg, machine_line, record, say

SEED = 20261207
SHARES = (0.01, 0.02, 0.05, 0.1)


def rerank(fast, slow, weights, share: float):
    """Scores ordering the works of the top ``share`` (design-weighted) of the fast ranking by ``slow``, above all
    others, and the rest by ``fast``; and the mask of those top works."""
    import numpy as np

    order = np.argsort(-fast, kind="stable")
    covered = np.cumsum(weights[order]) / weights.sum() <= share
    top = np.zeros(len(fast), dtype=bool)
    top[order[covered]] = True
    offset = float(fast.max()) - float(slow.min()) + 1.0
    return np.where(top, slow + offset, fast), top


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def works_per_s(kind: str, texts: list[str], fit_texts: list[str]) -> float:
    from metacan_pipeline.student.features import make_features

    vec = make_features(kind).fit(fit_texts)
    vec.transform(texts[:64])  # warm: loads the model
    t0 = time.perf_counter()
    vec.transform(texts)
    return len(texts) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", default="tfidf", help="the backend that ranks every work (default tfidf)")
    ap.add_argument("--slow", default="minilm-onnx", help="the backend that re-ranks the top (default minilm-onnx)")
    ap.add_argument("--shares", type=float, nargs="+", default=list(SHARES), help="top shares re-ranked")
    ap.add_argument("--works", type=int, default=2_000, help="real texts timed per backend (default 2,000)")
    ap.add_argument("--frame", type=int, default=4_300_000, help="frame size of the projection (default 4.3M)")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples per interval (default 1,000)")
    ap.add_argument("--pilot", default=str(SHARED_DATA / "metacan_pilot"), help="the pilot folder")
    ap.add_argument("--name", default="", help="result name: out/student_rerank_<name>.json")
    add_smoke_arg(ap, "screening a, 200 works, 20 resamples, share 0.05")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
    from student_backends import pilot_sets, real_texts, with_intervals

    from metacan_pipeline.student.features import make_features
    from metacan_pipeline.student.heads import grouped_cv_scores

    say(machine_line())
    started = {"load_at_start": os.getloadavg()}
    sets = pilot_sets(Path(args.pilot))
    if args.smoke:
        sets = [dict(sets[0], **{k: sets[0][k][:200] for k in ("texts", "y", "w", "groups")})]
        args.boot, args.shares, args.works = 20, [0.05], 200
    figures: dict = {"sets": {}}
    for s in sets:
        scores = {}
        for kind in (args.fast, args.slow):
            X = make_features(kind).fit(s["texts"]).transform(s["texts"])
            scores[kind], _ = grouped_cv_scores(X, s["y"], s["groups"], s["w"], s["folds"])
        row = {kind: with_intervals(s["y"], scores[kind], s["w"], args.boot, SEED) for kind in scores}
        for q in args.shares:
            mixed, top = rerank(scores[args.fast], scores[args.slow], s["w"], q)
            row[f"rerank {q:g}"] = with_intervals(s["y"], mixed, s["w"], args.boot, SEED) | {"reranked": int(top.sum())}
        figures["sets"][s["name"]] = row
        say(
            f"{s['name']:<22} " + "  ".join(f"{k}: AP {_fmt(v['ap'])} AUROC {_fmt(v['auroc'])}" for k, v in row.items())
        )
    _, texts = real_texts(args.works)
    fit_texts = sorted({t for s in sets for t in s["texts"]})
    fast_rate = works_per_s(args.fast, texts, fit_texts)
    slow_rate = works_per_s(args.slow, texts, fit_texts)
    minutes = {f"{q:g}": (args.frame / fast_rate + q * args.frame / slow_rate) / 60 for q in args.shares}
    figures |= {"fast_works_per_s": fast_rate, "slow_works_per_s": slow_rate, "census_minutes": minutes}
    say(
        f"featurisation: {args.fast} {fast_rate:,.0f} works/s, {args.slow} {slow_rate:,.1f} works/s "
        f"({slow_rate / fast_rate:.4f} x {args.fast}); {args.frame:,} works: "
        + ", ".join(f"share {q}: {m:.0f} min" for q, m in minutes.items())
    )
    record(
        "student_rerank",
        figures,
        ratios={f"{args.slow}/{args.fast} works_per_s": slow_rate / fast_rate},
        name=args.name,
        started=started,
        smoke=args.smoke,
    )


if __name__ == "__main__":
    main()
