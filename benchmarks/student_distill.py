"""Distilled heads against their label fit and the encoder's own head, on the pilot sets and on known items outside
them: the ``metaresearch`` head, each variant on the same labels and the same folds.

Variants, for the fast features ``--features`` (default: the student's default):
- ``label``: the fast head on its labels alone (``student_heads: distill: false``);
- ``encoder``: the head on the ``minilm-onnx`` embeddings (what distillation learns from; too slow to score a
  4.3M-work frame on 2 cores);
- ``distilled``: the fast head distilled from the encoder head as ``student_heads`` does (:mod:`metacan_pipeline.
  student.distill`), the vocabulary fitted on the training and transfer texts.

**Pilot sets** (screening a and b, design-weighted, 5 folds grouped by title; frame1k adjudicated, folds grouped by
venue: ``student_backends.pilot_sets``): out-of-fold AP and AUROC with 95% bootstrap intervals, over all works and
per language (``en``, ``fr``; a language with fewer than 2 positives is left out). The transfer set of a
fold is every pilot text and every shared OpenAlex work's text except the fold's test texts (the texts a frame
sample would give; no test work enters a head in any way).

**Known items** (as ``student_known_items.py``): the head trained on a whole pilot set ranks the distinct works of
``../shared/data/openalex*`` that are not training texts; the known items are those in a pinned meta-research venue.
Transfer sets by 2-fold cross-fitting over those works (each half is scored by heads distilled through the pilot
texts and the other half), so a scored work is never in its head's transfer set. AUROC of known items against
background with a 95% stratified bootstrap interval (the background holds meta-research too: a check outside the
pilot sets, not a precision or recall).

Printed ratios: each variant's figure over ``label``'s, on the same set in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

from _common import SHARED_DATA, add_smoke_arg, machine_line, record, say
from student_backends import SEED, THREADS, pilot_sets, real_texts, with_intervals
from student_known_items import auroc_interval, scored_works

VARIANTS = ("label", "encoder", "distilled")
SETS = ("screening_a", "screening_b", "frame1k_adjudicated")


def _heads(features: str, distiller, texts, y, w, groups, transfer_texts, c_grid, ridge_weights=()):
    """``{variant: score(texts) -> np.ndarray}`` of heads trained on ``texts`` (labels ``y``, weights ``w``)."""
    from metacan_pipeline.student.distill import DistilJob, encoder_head
    from metacan_pipeline.student.features import make_features
    from metacan_pipeline.student.heads import BinaryHead

    label_vec = make_features(features).fit(texts)
    label = BinaryHead("metaresearch", c_grid).fit(label_vec.transform(texts), y, w, groups=groups)
    enc = encoder_head(distiller.embed(texts), y, w, groups, c_grid)
    vec = make_features(features).fit([*texts, *transfer_texts])
    head = BinaryHead("metaresearch", c_grid).fit(vec.transform(texts), y, w, groups=groups)
    undistilled = head.estimator_
    distiller.distil(
        [DistilJob(head, list(texts), y, w, list(groups))], distiller.transfer(vec, [*texts, *transfer_texts])
    )
    out = {
        "label": lambda t: label.estimator_.decision_function(label_vec.transform(t)),
        "encoder": lambda t: enc.decision_function(distiller.embed(t)),
        "distilled": lambda t: head.estimator_.decision_function(vec.transform(t)),
    }
    # the regression's weight b in the blend (1 - b) * label fit + b * regression: the shipped head is b = 1/2, so
    # the blend is (1 - 2b) * label fit (on the transfer vocabulary) + 2b * shipped
    for b in ridge_weights:
        out[f"blend {b:g}"] = lambda t, b=b: (
            (1 - 2 * b) * undistilled.decision_function(vec.transform(t))
            + 2 * b * head.estimator_.decision_function(vec.transform(t))
        )
    return out


def pilot_cv(features: str, distiller, s: dict, pool: list[str], boot: int, c_grid, ridge_weights=()) -> list[dict]:
    import numpy as np
    from sklearn.model_selection import GroupKFold

    texts, y, w = s["texts"], s["y"], s["w"]
    groups = np.asarray(s["groups"], dtype=object)
    k = min(s["folds"], len(set(s["groups"])))
    variants = (*VARIANTS, *(f"blend {b:g}" for b in ridge_weights))
    oof = {v: np.full(len(y), np.nan) for v in variants}
    for train, test in GroupKFold(n_splits=k).split(texts, y, s["groups"]):
        if len(set(y[train])) < 2:
            continue
        test_texts = {texts[i] for i in test}
        transfer = [t for t in pool if t not in test_texts]
        heads = _heads(
            features,
            distiller,
            [texts[i] for i in train],
            y[train],
            w[train],
            list(groups[train]),
            transfer,
            c_grid,
            ridge_weights,
        )
        for v, score in heads.items():
            oof[v][test] = score([texts[i] for i in test])
    scored = ~np.isnan(oof["label"])
    out = []
    for lang in ("all", "en", "fr"):
        m = scored & (s["lang"] == lang) if lang != "all" else scored
        if y[m].sum() < 2 or y[m].sum() == m.sum():
            continue
        for v in variants:
            r = with_intervals(y[m], oof[v][m], w[m], boot, SEED)
            out.append(
                {
                    "part": "pilot" if lang == "all" else f"pilot {lang}",
                    "set": s["name"],
                    "variant": v,
                    **{k: r[k] for k in ("n", "positives", "ap", "ap_ci", "auroc", "auroc_ci")},
                }
            )
    return out


def known_items(features: str, distiller, s: dict, pilot_texts: list[str], boot: int, c_grid) -> list[dict]:
    import numpy as np

    ids, texts, known = scored_works(set(s["texts"]))
    y = np.array(known, dtype=bool)
    half = np.array([int(hashlib.sha256(i.encode()).hexdigest(), 16) % 2 for i in ids])
    scores = {v: np.zeros(len(texts)) for v in VARIANTS}
    for h in (0, 1):
        transfer = pilot_texts + [t for t, g in zip(texts, half, strict=True) if g != h]
        heads = _heads(features, distiller, s["texts"], s["y"], s["w"], s["groups"], transfer, c_grid)
        idx = np.flatnonzero(half == h)
        for v, score in heads.items():
            scores[v][idx] = score([texts[i] for i in idx])
    out = []
    for v in VARIANTS:
        auroc, low, high = auroc_interval(y, scores[v], boot)
        out.append(
            {
                "part": "known_items",
                "set": s["name"],
                "variant": v,
                "n": len(ids),
                "positives": int(y.sum()),
                "auroc": auroc,
                "auroc_ci": [low, high],
            }
        )
    return out


def _ci(r: dict, k: str) -> str:
    ci = r.get(f"{k}_ci")
    return f"{r[k]:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def table(results: list[dict]) -> str:
    lines = [
        "| part | set | variant | n (positives) | AP | AUROC | AUROC ratio to label |",
        "|---|---|---|---|---|---|---:|",
    ]
    base = {(r["part"], r["set"]): r["auroc"] for r in results if r["variant"] == "label"}
    for r in results:
        ap = _ci(r, "ap") if r.get("ap") is not None else "n/a"
        lines.append(
            f"| {r['part']} | {r['set']} | {r['variant']} | {r['n']} ({r['positives']}) | {ap} | {_ci(r, 'auroc')} "
            f"| {r['auroc'] / base[r['part'], r['set']]:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--features", default=None, help="the fast features (default: the student's default)")
    ap.add_argument("--sets", nargs="+", default=list(SETS), help="pilot sets")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples of each interval")
    ap.add_argument("--name", default="", help="result name: out/student_distill_<name>.json")
    ap.add_argument(
        "--ridge-weights",
        default="",
        help="also the pilot figures of blends giving the regression these weights (comma-separated, e.g. "
        "0.25,0.75,1; the shipped head is 0.5)",
    )
    ap.add_argument("--no-known-items", action="store_true", help="the pilot sets only")
    add_smoke_arg(ap, "screening_a, 50 resamples")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", THREADS)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", THREADS)
    from metacan_pipeline.student.distill import Distiller
    from metacan_pipeline.student.features import DEFAULT_C_GRID, DEFAULT_FEATURES, student_text

    features = args.features or DEFAULT_FEATURES
    if args.smoke:
        args.sets, args.boot = ["screening_a"], 50
    say(machine_line())
    sets = {s["name"]: s for s in pilot_sets(Path(SHARED_DATA / "metacan_pilot"))}
    pilot_texts = sorted({t for s in sets.values() for t in s["texts"]})
    rows, _ = real_texts(1)
    pool = pilot_texts + sorted({student_text(r) for r in rows} - set(pilot_texts))
    distiller = Distiller()
    results = []
    for name in args.sets:
        say(f"{features}: pilot cross-validation on {name} ...")
        weights = [float(b) for b in args.ridge_weights.split(",") if b]
        results += pilot_cv(features, distiller, sets[name], pool, args.boot, DEFAULT_C_GRID, weights)
        if not args.no_known_items:
            say(f"{features}: known items, heads trained on {name} ...")
            results += known_items(features, distiller, sets[name], pilot_texts, args.boot, DEFAULT_C_GRID)
    print(machine_line())
    print(f"fast features {features}; transfer pool {len(pool)} texts; encoder {distiller.encoder_kind}")
    print(table(results))
    base = {(r["part"], r["set"]): r["auroc"] for r in results if r["variant"] == "label"}
    ratios = {
        f"auroc_{r['variant']}/auroc_label_{r['part']}_{r['set']}": r["auroc"] / base[r["part"], r["set"]]
        for r in results
        if r["variant"] != "label"
    }
    record("student_distill", results, ratios=ratios, name=args.name, smoke=args.smoke)


if __name__ == "__main__":
    main()
