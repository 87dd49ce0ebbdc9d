"""The student's feature backends side by side: quality on the pilot sets, works/s on 2 cores, peak memory.

For every backend (``--backends``; a ``+``-joined kind is a stack, :func:`metacan_pipeline.student.features.make_features`),
in a fresh child process whose process tree's memory is sampled (``_common.run_stage``):

- **Quality**, on the SAME labels and the SAME folds for every backend: the ``metaresearch`` head
  (``heads.fit_logreg``) under grouped cross-validation (``heads.grouped_cv_scores``; the folds depend on the works'
  groups only) on the screening pilot (screeners ``a`` and ``b``, the ``labels_joined.json`` works, design-weighted,
  5 folds grouped by title: ``student/pilot_eval.py``) and on frame1k (arms ``opus_r1``, ``codex_r1``, ``grok_r1``,
  ``adjudicated``, unweighted, folds grouped by venue: ``student/pilot_frame1k.py``). Out-of-fold AP, AUROC and
  ECE (``evaluation.expected_calibration_error``, 10 bins), each with a 95% percentile interval from ``--boot``
  bootstrap resamples of the works (weights kept with their works; seed :data:`SEED`; the same resamples for every
  backend, so backends are compared on paired draws). Per language (``en``, ``fr``: the student text's language)
  where a language holds at least :data:`MIN_POSITIVES` positives. Routes: neither pilot set's files carry a
  route, so there is no per-route row. The backend is fitted on the set's own texts (no labels), as
  ``metacan evaluate-pilot`` does.
- **Speed**, on ``--works`` real texts: the student texts of every work record in ``$METACAN_SHARED_DIR/data/openalex``
  and ``openalex_more`` (the frame's fields built by ``openalex.works.work_row``; 1,943 records, repeated). The
  backend is fitted on the pilot texts; featurisation works/s = ``transform`` of the texts (after a warm-up call);
  scoring works/s = ``predict_proba`` of a fitted ``metaresearch`` head on that matrix; ``tfidf`` featurisation of
  the same texts in the same process, before and after the backend's (mean of the two), is the baseline of the
  printed ratio. ``threads``: 2 (torch, ONNX Runtime, BLAS).
- **End to end** (backends whose featurisation reaches ``--e2e-from`` works/s; the others' projection is printed):
  a synthetic warehouse of ``--frame-works`` frame rows (those real rows repeated under fresh ids) and a bundle of
  28 heads (2 teachers x 11 binary + 3 categorical, fitted on frame1k), timed through the real path
  ``storage.write_table("student_scores", scoring.score_batches(...))``: read, featurise, score, write.
- **Peak memory**: the child's peak RSS (everything above in one process).

Prints one table (backend x set x metric with intervals) and one speed table with the ratio to tfidf; writes
``out/student_backends.json``. ``--quick``: three backends, 5,000 texts, 10,000 frame works, 200 resamples.
``--smoke``: tfidf and tfidf+meta, 500 texts, 2,000 frame works, 20 resamples (measures nothing).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import SHARED_DATA, add_child_args, add_smoke_arg, machine_line, record, run_stage, say, write_child_result

SEED = 20261207
MIN_POSITIVES = 5
LANGUAGES = ("en", "fr")
DEFAULT_BACKENDS = (
    "tfidf",
    "tfidf+meta",
    "minilm",
    "minilm-onnx",
    "static",
    "static+meta",
    "static+tfidf",
    "static+tfidf+meta",
)
THREADS = "2"


# ------------------------------------------------------------------------------------------------
# the labelled sets, the same works, labels, weights and folds for every backend
# ------------------------------------------------------------------------------------------------
def pilot_sets(folder: Path) -> list[dict]:
    """Every evaluated set: ``{name, texts, y, w, groups, folds, lang}`` (arrays in a fixed work order)."""
    from collections import Counter

    import numpy as np

    from metacan_pipeline.student.backends import meta_values
    from metacan_pipeline.student.pilot_eval import pilot_works
    from metacan_pipeline.student.pilot_frame1k import frame1k_works
    from metacan_pipeline.teachers.core.reference import FRAME1K_ARMS

    sets = []
    pool, _ = pilot_works(folder)
    for screener in ("a", "b"):
        chosen = [w for w in pool if getattr(w, f"y_{screener}") is not None and w.stratum is not None]
        sets.append(
            {
                "name": f"screening_{screener}",
                "texts": [w.text for w in chosen],
                "y": np.array([getattr(w, f"y_{screener}") for w in chosen], dtype=int),
                "w": np.array([w.weight for w in chosen], dtype=float),
                "groups": [w.group for w in chosen],
                "folds": 5,
            }
        )
    works, _ = frame1k_works(folder)
    for arm in FRAME1K_ARMS:
        chosen = [w for w in works if w.labels[arm] is not None]
        y = np.array([w.labels[arm] for w in chosen], dtype=int)
        groups = [w.group for w in chosen]
        positive_groups = len({g for g, v in zip(groups, y, strict=True) if v})
        k = min(5, len(Counter(groups)))
        if 2 <= positive_groups < k:  # as pilot_frame1k.evaluate_frame1k
            k = positive_groups
        sets.append(
            {
                "name": f"frame1k_{arm}",
                "texts": [w.text for w in chosen],
                "y": y,
                "w": np.ones(len(chosen)),
                "groups": groups,
                "folds": k,
            }
        )
    for s in sets:
        s["lang"] = np.array([meta_values(t)[2] for t in s["texts"]], dtype=object)
    return sets


def real_texts(n: int) -> tuple[list[dict], list[str]]:
    """The frame rows of every work record of the shared OpenAlex folders, and ``n`` student texts of them
    (repeated in order)."""
    from metacan_pipeline.openalex.reader import Record, iter_records
    from metacan_pipeline.openalex.works import work_row
    from metacan_pipeline.student.features import STUDENT_FIELDS, student_text

    rows = []
    for sub in ("openalex", "openalex_more"):
        for rec in iter_records(SHARED_DATA / sub):
            if isinstance(rec, Record) and rec.kind == "W":
                r = work_row(rec)
                if r["title_text"]:
                    rows.append({k: r[k] for k in ("id", "venue_id", *STUDENT_FIELDS)})
    if not rows:
        raise SystemExit(f"no work record with a title under {SHARED_DATA}/openalex*: set METACAN_SHARED_DIR")
    texts = [student_text(r) for r in rows]
    return rows, [texts[i % len(texts)] for i in range(n)]


# ------------------------------------------------------------------------------------------------
# metrics with bootstrap intervals
# ------------------------------------------------------------------------------------------------
def metrics(y, s, w) -> dict:
    from sklearn.metrics import average_precision_score, roc_auc_score

    from metacan_pipeline.student.evaluation import expected_calibration_error

    if y.sum() == 0 or y.sum() == len(y):
        return {"ap": None, "auroc": None, "ece": expected_calibration_error(y, s, w)}
    return {
        "ap": float(average_precision_score(y, s, sample_weight=w)),
        "auroc": float(roc_auc_score(y, s, sample_weight=w)),
        "ece": expected_calibration_error(y, s, w),
    }


def _curve(y, s, w):
    """Weighted true and false positives at each distinct score, highest first (scikit-learn's
    ``_binary_clf_curve``)."""
    import numpy as np

    order = np.argsort(s, kind="mergesort")[::-1]
    s, y, w = s[order], y[order], w[order]
    last = np.r_[np.where(np.diff(s))[0], len(s) - 1]
    tps = np.cumsum(y * w)[last]
    fps = np.cumsum((1 - y) * w)[last]
    return tps, fps


def fast_metrics(y, s, w) -> dict:
    """:func:`metrics` in plain numpy (scikit-learn's definitions: AP as the step sum over distinct thresholds, AUROC
    by trapezoids), for the bootstrap; :func:`with_intervals` checks it against :func:`metrics` on every set."""
    import numpy as np

    from metacan_pipeline.student.evaluation import expected_calibration_error

    tps, fps = _curve(y, s, w)
    precision = tps / np.maximum(tps + fps, 1e-300)
    recall = tps / tps[-1]
    ap = float(np.sum(np.diff(np.r_[0.0, recall]) * precision))
    tpr, fpr = np.r_[0.0, tps / tps[-1]], np.r_[0.0, fps / fps[-1]]
    auroc = float(np.trapezoid(tpr, fpr))
    return {"ap": ap, "auroc": auroc, "ece": expected_calibration_error(y, s, w)}


def with_intervals(y, s, w, boot: int, seed: int) -> dict:
    """:func:`metrics` and their 95% percentile intervals over ``boot`` resamples of the works (``seed`` fixed: the
    same draws for every backend); a resample of one class is skipped (counted in ``boot_used``)."""
    import numpy as np

    point = metrics(y, s, w)
    out = {"n": int(len(y)), "positives": int(y.sum()), "boot_used": 0}
    if point["ap"] is None:
        return {**out, **point, "ap_ci": None, "auroc_ci": None, "ece_ci": None}
    check = fast_metrics(y, s, w)
    for k in point:
        if abs(check[k] - point[k]) > 1e-9:
            raise AssertionError(f"bootstrap metric {k} {check[k]} differs from scikit-learn's {point[k]}")
    rng = np.random.default_rng(seed)
    draws = {k: [] for k in point}
    for _ in range(boot):
        i = rng.integers(0, len(y), len(y))
        if y[i].sum() in (0, len(i)):
            continue
        out["boot_used"] += 1
        for k, v in fast_metrics(y[i], s[i], w[i]).items():
            draws[k].append(v)
    for k, v in point.items():
        out[k] = v
        out[f"{k}_ci"] = [float(x) for x in np.percentile(draws[k], [2.5, 97.5])] if draws[k] else None
    return out


# ------------------------------------------------------------------------------------------------
# the child: one backend
# ------------------------------------------------------------------------------------------------
def _fit_bundle(kind: str, sets: list[dict], c_grid):
    """A Scorer-like bundle: the backend fitted on the frame1k texts, and 2 teachers x (11 binary + 3
    categorical) heads fitted on them (binary heads on the adjudicated metaresearch labels, categorical heads on
    classes drawn with a fixed seed): the head count and kinds of a real bundle."""
    from types import SimpleNamespace

    import numpy as np

    from metacan_pipeline.student.features import make_features
    from metacan_pipeline.student.heads import BinaryHead, CategoricalHead
    from metacan_pipeline.student.roles import ROLE_TEACHERS
    from metacan_pipeline.vocab import BINARY_TARGETS, CATEGORICAL_TARGETS

    f1k = next(s for s in sets if s["name"] == "frame1k_adjudicated")
    vec = make_features(kind).fit(f1k["texts"])
    X = vec.transform(f1k["texts"])
    rng = np.random.default_rng(SEED)
    heads = {}
    for teacher in ROLE_TEACHERS:
        heads[teacher] = {
            t: BinaryHead(t, c_grid).fit(X, f1k["y"], f1k["w"], groups=f1k["groups"]) for t in BINARY_TARGETS
        }
        for t, classes in CATEGORICAL_TARGETS.items():
            labels = [classes[i] for i in rng.integers(0, len(classes), len(f1k["y"]))]
            heads[teacher][t] = CategoricalHead(t, classes).fit(X, labels, f1k["w"])
    return SimpleNamespace(vectorizer=vec, heads=heads)


def end_to_end(kind: str, sets: list[dict], rows: list[dict], n: int, c_grid) -> dict:
    """Works/s of ``write_table("student_scores", score_batches(...))`` over a synthetic frame of ``n`` works."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.student.scoring import BATCH_SIZE, score_batches

    bundle = _fit_bundle(kind, sets, c_grid)
    with tempfile.TemporaryDirectory(prefix="student-backends-") as tmp:
        storage = MetacanStorage(data_dir=tmp)
        frame_dir = storage.table_dir("frame")
        frame_dir.mkdir(parents=True)
        for part, start in enumerate(range(0, n, BATCH_SIZE)):
            chunk = [
                {**rows[i % len(rows)], "id": f"W9{i:010d}", "venue_id": rows[i % len(rows)]["venue_id"]}
                for i in range(start, min(n, start + BATCH_SIZE))
            ]
            pq.write_table(pa.Table.from_pylist(chunk), frame_dir / f"part-{part:05d}.parquet")
        t0 = time.perf_counter()
        written = storage.write_table("student_scores", score_batches(storage, bundle, progress=False))
        seconds = time.perf_counter() - t0
    return {"works": written, "seconds": seconds, "works_per_s": written / seconds, "heads": 28}


def stage_backend(args) -> dict:
    """The child: quality, speed and (when fast enough) end to end for one backend."""

    from metacan_pipeline.student.features import make_features
    from metacan_pipeline.student.heads import choose_c, fit_logreg, grouped_cv_scores

    kind = args.backend
    apply_variants(args)
    sets = pilot_sets(Path(args.pilot))
    quality = {}
    feat_seconds = 0.0
    for s in sets:
        t0 = time.perf_counter()
        X = make_features(kind).fit(s["texts"]).transform(s["texts"])
        feat_seconds += time.perf_counter() - t0
        oof, fold_pos = grouped_cv_scores(X, s["y"], s["groups"], s["w"], s["folds"], args.c_grid)
        row = {
            "c_grid": list(args.c_grid),
            "folds": len(fold_pos),
            "fold_positives": fold_pos,
            "all": with_intervals(s["y"], oof, s["w"], args.boot, SEED),
        }
        for lang in LANGUAGES:
            m = s["lang"] == lang
            if s["y"][m].sum() >= MIN_POSITIVES and (~s["y"][m].astype(bool)).sum() >= MIN_POSITIVES:
                row[lang] = with_intervals(s["y"][m], oof[m], s["w"][m], args.boot, SEED)
            else:
                row[lang] = {"n": int(m.sum()), "positives": int(s["y"][m].sum()), "note": "too few works"}
        quality[s["name"]] = row

    rows, texts = real_texts(args.works)
    f1k = next(s for s in sets if s["name"] == "frame1k_adjudicated")
    fit_texts = sorted({t for s in sets for t in s["texts"]})
    base = make_features("tfidf").fit(fit_texts)
    vec = make_features(kind).fit(fit_texts)
    for v in (base, vec):
        v.transform(texts[:256])  # warm: loads a model, first-call allocations are not featurisation

    def tfidf_rate() -> float:
        t0 = time.perf_counter()
        base.transform(texts)
        return len(texts) / (time.perf_counter() - t0)

    before = tfidf_rate()
    t0 = time.perf_counter()
    X = vec.transform(texts)
    feat_rate = len(texts) / (time.perf_counter() - t0)
    tfidf_rates = [before, tfidf_rate()]  # the baseline before and after the backend, averaged
    tfidf_rate = sum(tfidf_rates) / 2
    X_f1k = vec.transform(f1k["texts"])
    c, _ = choose_c(X_f1k, f1k["y"], f1k["w"], f1k["groups"], args.c_grid)
    head = fit_logreg(X_f1k, f1k["y"], f1k["w"], C=c)
    t0 = time.perf_counter()
    head.predict_proba(X)
    score_rate = len(texts) / (time.perf_counter() - t0)
    speed = {
        "texts": len(texts),
        "distinct_texts": len(set(texts)),
        "features": int(X.shape[1]),
        "featurise_works_per_s": feat_rate,
        "score_works_per_s": score_rate,
        "tfidf_featurise_works_per_s": tfidf_rate,
        "tfidf_featurise_runs": tfidf_rates,
        "featurise_ratio_to_tfidf": feat_rate / tfidf_rate,
        "pilot_featurise_seconds": feat_seconds,
    }
    e2e = None
    if feat_rate >= args.e2e_from:
        e2e = end_to_end(kind, sets, rows, args.frame_works, args.c_grid)
    return {"backend": label(args), "quality": quality, "speed": speed, "end_to_end": e2e}


def apply_variants(args) -> None:
    """The child's head and TF-IDF variants (``--logreg``, ``--tfidf``): merged into ``heads.PARAMS["logreg"]`` and
    ``features.TFIDF_PARAMS`` in this process before anything is fitted (a variant under test, not the default)."""
    import json

    from metacan_pipeline.student import features, heads

    if args.logreg:
        heads.PARAMS["logreg"] = {**heads.PARAMS["logreg"], **json.loads(args.logreg)}
    if args.tfidf:
        features.TFIDF_PARAMS.update(json.loads(args.tfidf))
        heads.PARAMS["tfidf"] = features.TFIDF_PARAMS


def label(args) -> str:
    """The row's name: the backend, its C grid when searched or not the default, and any variant."""
    from metacan_pipeline.student.heads import C_GRID

    out = args.backend
    if tuple(args.c_grid) != tuple(C_GRID):
        out += " C=" + ("/".join(f"{c:g}" for c in args.c_grid) if len(args.c_grid) > 1 else f"{args.c_grid[0]:g}")
    for k in ("logreg", "tfidf"):
        if getattr(args, k):
            out += f" {k}={getattr(args, k)}"
    return out


# ------------------------------------------------------------------------------------------------
# the parent: one child per backend, the tables
# ------------------------------------------------------------------------------------------------
def _ci(m: dict, k: str) -> str:
    v, ci = m.get(k), m.get(f"{k}_ci")
    if v is None:
        return "n/a"
    return f"{v:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{v:.3f}"


def quality_table(results: list[dict]) -> str:
    lines = [
        f"{'set':<22} {'subset':<4} {'backend':<20} {'n':>4} {'pos':>4} {'AP [95% CI]':<22} {'AUROC [95% CI]':<22} {'ECE [95% CI]':<22}"
    ]
    lines.append("-" * len(lines[0]))
    names = list(results[0]["quality"]) if results else []
    for name in names:
        for subset in ("all", *LANGUAGES):
            for r in results:
                m = r["quality"][name][subset]
                if "note" in m:
                    if r is results[0]:
                        lines.append(
                            f"{name:<22} {subset:<4} {'(all)':<20} {m['n']:>4} {m['positives']:>4} {m['note']}"
                        )
                    continue
                lines.append(
                    f"{name:<22} {subset:<4} {r['backend']:<20} {m['n']:>4} {m['positives']:>4} "
                    f"{_ci(m, 'ap'):<22} {_ci(m, 'auroc'):<22} {_ci(m, 'ece'):<22}"
                )
    return "\n".join(lines)


def speed_table(results: list[dict]) -> str:
    head = (
        f"{'backend':<20} {'dims':>7} {'feat w/s':>9} {'tfidf w/s':>9} {'ratio':>6} {'score w/s':>10} "
        f"{'e2e w/s':>8} {'4.3M min':>8} {'peak RSS MiB':>12}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        s, e = r["speed"], r["end_to_end"]
        e2e = e["works_per_s"] if e else None
        minutes = 4_300_000 / (e2e or s["featurise_works_per_s"]) / 60
        lines.append(
            f"{r['backend']:<20} {s['features']:>7} {s['featurise_works_per_s']:>9.0f} {s['tfidf_featurise_works_per_s']:>9.0f} "
            f"{s['featurise_ratio_to_tfidf']:>6.3f} {s['score_works_per_s']:>10.0f} "
            f"{(f'{e2e:.0f}' if e2e else '-'):>8} {minutes:>8.0f}{'' if e2e else '*'} {r['peak_rss_mib']:>12.0f}"
        )
    lines.append("* projected from featurisation alone (no end-to-end run below --e2e-from works/s)")
    return "\n".join(lines)


def combined_tables(paths: list[Path]) -> str:
    """The quality and speed tables of several earlier results (see ``--combine``), each file's run named."""
    import json

    results, runs, seen = [], [], set()
    for path in paths:
        doc = json.loads(path.read_text())
        if "figures" in doc:
            found = doc["figures"]["backends"]
            r = doc["run"]
            runs.append(
                f"{path.name}: {r['date']} commit {r['commit'][:12]} {r['cpu_model']} load {r['load_at_start']}"
            )
        else:  # a child's stage result
            doc["peak_rss_mib"] = doc.get("vm_hwm_mib", doc.get("vm_hwm_kib", 0) / 1024)
            found = [doc]
            runs.append(f"{path.name}: a child's result (peak RSS = its VmHWM)")
        for r in found:
            if r["backend"] not in seen:
                seen.add(r["backend"])
                results.append(r)
    return "\n".join(runs) + "\n\n" + quality_table(results) + "\n\n" + speed_table(results)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", nargs="+", default=None, help=f"default: {' '.join(DEFAULT_BACKENDS)}")
    ap.add_argument("--works", type=int, default=20_000, help="real texts for the speed figures (default 20,000)")
    ap.add_argument(
        "--frame-works", type=int, default=50_000, help="frame works of the end-to-end run (default 50,000)"
    )
    ap.add_argument("--e2e-from", type=float, default=1_000, help="run end to end from this featurisation works/s")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples per interval (default 1,000)")
    ap.add_argument("--pilot", default=None, help="the pilot folder (default $METACAN_SHARED_DIR/data/metacan_pilot)")
    ap.add_argument("--name", default="", help="result name: out/student_backends_<name>.json")
    ap.add_argument(
        "--c-grid",
        type=float,
        nargs="+",
        default=None,
        help="the heads' C grid: one value fixes C, several are chosen among by inner grouped CV within each outer "
        "fold (heads.choose_c; default heads.C_GRID)",
    )
    ap.add_argument(
        "--logreg", default="", help='JSON merged into heads.PARAMS["logreg"], e.g. \'{"class_weight": "balanced"}\''
    )
    ap.add_argument(
        "--tfidf", default="", help="JSON merged into features.TFIDF_PARAMS, e.g. '{\"sublinear_tf\": false}'"
    )
    ap.add_argument("--quick", action="store_true", help="tfidf, static, static+tfidf+meta; 5,000 texts; 200 resamples")
    ap.add_argument(
        "--combine",
        nargs="+",
        default=None,
        help="print the tables of earlier results instead of measuring: out/student_backends*.json files, or a "
        "child's stage result (its peak RSS is then its own VmHWM); a backend named twice keeps its first",
    )
    add_smoke_arg(ap, "tfidf and tfidf+meta, 500 texts, 2,000 frame works, 20 resamples")
    add_child_args(ap, ("backend",))
    args = ap.parse_args(argv)
    if args.c_grid is None:
        from metacan_pipeline.student.heads import C_GRID

        args.c_grid = list(C_GRID)
    os.environ.setdefault("OMP_NUM_THREADS", THREADS)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", THREADS)
    if args.pilot is None:
        args.pilot = str(SHARED_DATA / "metacan_pilot")
    if args._stage:
        write_child_result(stage_backend(args), args.result)
        return
    if args.combine:
        print(combined_tables([Path(p) for p in args.combine]))
        return
    if args.smoke:
        backends, args.works, args.frame_works, args.boot = ["tfidf", "tfidf+meta"], 500, 2_000, 20
    elif args.quick:
        backends, args.works, args.frame_works, args.boot = ["tfidf", "static", "static+tfidf+meta"], 5_000, 10_000, 200
    else:
        backends = list(DEFAULT_BACKENDS)
    backends = args.backends or backends
    from metacan_pipeline.student.features import parse_kind

    for b in backends:
        parse_kind(b)  # a bad kind fails here, before any child runs
    say(machine_line())
    started = {"load_at_start": os.getloadavg()}
    scratch = Path(tempfile.mkdtemp(prefix="student-backends-"))
    results = []
    for b in backends:
        say(f"backend {b} ...")
        extra = [
            "--backend",
            b,
            "--pilot",
            args.pilot,
            "--works",
            str(args.works),
            "--frame-works",
            str(args.frame_works),
        ]
        extra += ["--boot", str(args.boot), "--e2e-from", str(args.e2e_from), "--c-grid", *map(str, args.c_grid)]
        extra += ["--logreg", args.logreg, "--tfidf", args.tfidf]
        res, _, _ = run_stage(Path(__file__), "backend", b.replace("+", "_"), scratch, extra, scratch / f"{b}.log")
        results.append(res)
        s = res["speed"]
        say(
            f"  {b}: featurise {s['featurise_works_per_s']:.0f} works/s ({s['featurise_ratio_to_tfidf']:.3f} x tfidf), "
            f"end to end {res['end_to_end']['works_per_s'] if res['end_to_end'] else float('nan'):.0f} works/s, "
            f"peak RSS {res['peak_rss_mib']:.0f} MiB"
        )
    print(quality_table(results))
    print()
    print(speed_table(results))
    ratios = {f"{r['backend']}_featurise/tfidf": r["speed"]["featurise_ratio_to_tfidf"] for r in results}
    record(
        "student_backends",
        {"backends": results, "args": {k: v for k, v in vars(args).items() if not k.startswith("_")}},
        ratios=ratios,
        name=args.name,
        started={"load_at_start": " ".join(f"{x:.2f}" for x in started["load_at_start"])},
        smoke=args.smoke,
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
