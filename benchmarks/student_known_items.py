"""Known-item ranking outside every labelled set: how the student's ``metaresearch`` head, trained on one pilot set,
ranks real works it never saw, with the works of the pinned meta-research venues as the known items.

The scored works are every work record with a title in ``$METACAN_SHARED_DIR/data/openalex`` and ``openalex_more``
(distinct ids), minus any whose student text is a text of the training set. The known items are those published
in a venue of the packaged venue reference set with a pinned OpenAlex source id
(``audit/instruments/reference_venues.toml``); every other scored work is background. For each backend
(``--backends``) and each training set (screening ``a`` and ``b``, design-weighted; frame1k's ``adjudicated`` arm),
in the way ``student_heads`` trains a head: the backend is fitted on the set's texts, C is chosen on the set by
inner grouped cross-validation (``heads.choose_c``, ``--c-grid``), and the head is fitted on the whole set. Printed
per (backend, set): the known items' percentiles among all scored works (100 = ranked first), their median, and
the AUROC of known items against background with a 95% percentile interval over ``--boot`` stratified bootstrap
resamples (the same draws for every backend). The ratio printed is each backend's AUROC over ``tfidf``'s on the
same set in the same run.

What this measures and what it does not: the background is not a set of negatives (the shared records include
works on reproducibility and open science that are meta-research), so the AUROC understates the separation of
meta-research from other work; with a handful of known items its interval is wide. It is a check on works outside
the pilot sets, not an estimate of the head's precision or recall.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from _common import SHARED_DATA, add_smoke_arg, machine_line, record, say
from student_backends import SEED, THREADS, pilot_sets, real_texts

DEFAULT_BACKENDS = ("tfidf", "tfidf+title-char", "minilm")
TRAINING_SETS = ("screening_a", "screening_b", "frame1k_adjudicated")


def scored_works(training_texts: set[str]) -> tuple[list[str], list[str], list[bool]]:
    """``(ids, texts, known)`` of the distinct shared works whose text is not a training text."""
    from metacan_pipeline.audit.instruments.venues import load_venue_list
    from metacan_pipeline.openalex.ids import short_id
    from metacan_pipeline.student.features import student_text

    pinned = set(load_venue_list().pinned)
    rows, _ = real_texts(1)
    ids, texts, known, seen = [], [], [], set()
    for r in rows:
        text = student_text(r)
        if r["id"] in seen or text in training_texts:
            continue
        seen.add(r["id"])
        ids.append(r["id"])
        texts.append(text)
        known.append(short_id(r["venue_id"] or "") in pinned)
    return ids, texts, known


def auroc_interval(y, s, boot: int) -> tuple[float, float, float]:
    """AUROC of ``s`` for ``y`` and its 95% percentile interval over stratified resamples (positives and negatives
    resampled apart, seed :data:`SEED`)."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    rng = np.random.default_rng(SEED)
    draws = []
    for _ in range(boot):
        i = np.r_[rng.choice(pos, len(pos)), rng.choice(neg, len(neg))]
        draws.append(roc_auc_score(y[i], s[i]))
    low, high = np.percentile(draws, [2.5, 97.5]) if draws else (float("nan"), float("nan"))
    return float(roc_auc_score(y, s)), float(low), float(high)


def measure(backend: str, training: dict, boot: int, c_grid) -> dict:
    import numpy as np
    from scipy.stats import rankdata

    from metacan_pipeline.student.features import make_features
    from metacan_pipeline.student.heads import choose_c, fit_logreg

    ids, texts, known = scored_works(set(training["texts"]))
    y = np.array(known, dtype=bool)
    vec = make_features(backend).fit(training["texts"])
    X_train = vec.transform(training["texts"])
    c, _ = choose_c(X_train, training["y"], training["w"], training["groups"], c_grid)
    head = fit_logreg(X_train, training["y"], training["w"], C=c)
    s = head.predict_proba(vec.transform(texts))[:, 1]
    percentile = 100.0 * rankdata(s, method="average") / len(s)
    auroc, low, high = auroc_interval(y, s, boot)
    return {
        "backend": backend,
        "training_set": training["name"],
        "training_works": len(training["texts"]),
        "training_positives": int(training["y"].sum()),
        "C": c,
        "scored": len(ids),
        "known": int(y.sum()),
        "known_percentiles": {i: round(float(p), 1) for i, p, k in zip(ids, percentile, known, strict=True) if k},
        "median_known_percentile": float(np.median(percentile[y])),
        "auroc": auroc,
        "auroc_ci": [low, high],
    }


def table(results: list[dict]) -> str:
    base = {r["training_set"]: r["auroc"] for r in results if r["backend"] == "tfidf"}
    lines = [
        "| backend | trained on | scored (known) | median known percentile | AUROC known vs background [95% CI] "
        "| ratio to tfidf |",
        "|---|---|---|---:|---|---:|",
    ]
    for r in results:
        ratio = r["auroc"] / base[r["training_set"]] if base.get(r["training_set"]) else None
        lines.append(
            f"| {r['backend']} | {r['training_set']} ({r['training_positives']}/{r['training_works']}) "
            f"| {r['scored']} ({r['known']}) | {r['median_known_percentile']:.1f} "
            f"| {r['auroc']:.3f} [{r['auroc_ci'][0]:.3f}, {r['auroc_ci'][1]:.3f}] "
            f"| {'' if ratio is None else f'{ratio:.2f}'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", nargs="+", default=list(DEFAULT_BACKENDS), help="feature backends to compare")
    ap.add_argument("--sets", nargs="+", default=list(TRAINING_SETS), help="training sets (pilot set names)")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap resamples of the AUROC interval")
    ap.add_argument(
        "--c-grid", type=float, nargs="+", default=None, help="the heads' C grid (default: student_heads' default)"
    )
    ap.add_argument("--name", default="", help="result name: out/student_known_items_<name>.json")
    add_smoke_arg(ap, "tfidf on screening_a, 50 resamples")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", THREADS)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", THREADS)
    if args.c_grid is None:
        from metacan_pipeline.student.features import DEFAULT_C_GRID

        args.c_grid = list(DEFAULT_C_GRID)
    if args.smoke:
        args.backends, args.sets, args.boot = ["tfidf"], ["screening_a"], 50
    say(machine_line())
    sets = {s["name"]: s for s in pilot_sets(Path(SHARED_DATA / "metacan_pilot"))}
    unknown = sorted(set(args.sets) - set(sets))
    if unknown:
        raise SystemExit(f"unknown training set(s) {unknown}: choose among {sorted(sets)}")
    results = []
    for backend in args.backends:
        for name in args.sets:
            say(f"{backend} trained on {name} ...")
            results.append(measure(backend, sets[name], args.boot, args.c_grid))
    print(machine_line())
    print(table(results))
    ratios = {
        f"auroc_{r['backend']}/auroc_tfidf_{r['training_set']}": r["auroc"]
        / next(b["auroc"] for b in results if b["backend"] == "tfidf" and b["training_set"] == r["training_set"])
        for r in results
        if r["backend"] != "tfidf" and any(b["backend"] == "tfidf" for b in results)
    }
    record("student_known_items", results, ratios=ratios, name=args.name, smoke=args.smoke)


if __name__ == "__main__":
    main()
