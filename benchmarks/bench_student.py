"""Student benchmark: training every head, and scoring a frame through ``write_predictions``, each against
bare scikit-learn measured in the same benchmark run.

Usage::

    .venv/bin/python benchmarks/bench_student.py [--sizes 100000 1000000] [--train-works 10000]
                                                [--scratch /tmp/metacan-bench-student] [--stages train,score]
                                                [--titles synthetic|repeat] [--no-repeat-baseline] [--profile]

*Inputs* (built once under ``--scratch`` and reused while their recipe is unchanged):

- The real frame rows: the scale input of the frame benchmark (make_scale_input.py, 50,000 real
  OpenAlex work records under fresh ids) through the frame build exactly as bench_frame.py runs it
  (``openalex_inventory``, ``canadian_entities``, ``frame_parts``, ``frame`` on an ephemeral instance).
  A 1,000,000-row frame cannot be built that way here: the admission routes keep about 5.6% of the
  shared records (1,000,000 input works gave a 56,243-row frame, 4.07 GB of gzip, 105 s of frame build
  plus 91 s for a bare scan; see benchmarks/out/frame_1000000.json), so 1M frame rows would need about
  18M input works (~72 GB of gzip, ~30 min of frame build plus generation).
- The scored frames ``<scratch>/score_<N>/data``: N rows made by repeating those real frame rows (every
  column kept, venues included) with fresh ids ``W7<10 digits>``. With ``--titles synthetic`` (default)
  each row's ``title``/``title_text`` is a fresh synthetic title: 6-16 words drawn from the word
  frequencies of the 2,393 real titles under shared/data/metacan_pilot, plus keyword phrases that carry
  the labels (below). The real frame has only ~45 distinct titles; repeated 1M times they would let
  Parquet dictionary-encode every score column, tie every quota threshold and leave the TF-IDF
  vocabulary nearly empty. ``--titles repeat`` keeps the real titles as they are (for comparison).
  The first ``--train-works`` rows are the labelled works; the 100k frame is the 1M frame's prefix.
- Labels, derived from title keywords: each binary target has keyword phrases inserted at a fixed rate
  (research_integrity 0.15% and insufficient_payload 0.1%, so both fall under the support gate's 20
  positives at 10,000 works; the others 0.5%-8%); each teacher's label is the keyword truth with
  independent noise (gemma: 10% false negatives and false positives at 10% of the target's rate;
  codex 5% / 5%, so the rare targets stay rare in both teachers' labels); categorical
  values (domain, study_design, genre) follow their own keywords, 85% kept by each teacher, 3% null.
  gemma labels every frame work (coverage ``all``: table ``direct_labels_gemma`` of N rows, 2% failed
  calls, and 2% older duplicate labels that the predictions query must drop, which export_labels never
  writes: a little more work than the real table); codex labels the training works
  with design weights 10/20/50/100 from four strata (coverage ``sample``).
- The bundle: ``fit_heads`` on those labels; ``bundle.gates`` and ``bundle.rates`` exactly as
  ``student_heads`` derives them (``_gates`` and the design-weighted codex rate).

*Stages*, one after the other, never overlapping, each in a fresh child process
(``python bench_student.py --_stage ...``) whose RSS (summed over its process tree, sampled every 0.2 s)
and ``ru_maxrss`` the parent records as bench_frame.py does:

- ``train``: in one process, the bare scikit-learn loop (TfidfVectorizer with the same parameters
  fitted on the same texts, then one LogisticRegression per head, same parameters, same rows, labels and
  weights, BLAS threads as the machine sets them), then ``train_bundle``, then the bare loop again;
  ratio = train_bundle / mean(bare). Then the bare loop once more with BLAS on one thread (as
  ``heads.fit_logreg`` fits), and one binary fit and one 12-class fit timed alone.
- ``score_baseline`` (at the largest size, before and after): the N texts held in memory (read and
  joined before the clock starts), then ``bundle.vectorizer.transform(texts)`` and every head's
  ``score(X)``: the bare scikit-learn cost of the same heads, no Parquet, no DuckDB.
- ``score`` at each size: ``write_predictions(storage, bundle)`` (student_scores + quota calibration +
  the DuckDB predictions query + Parquet writes), timed around the call, with a breakdown from timing
  ``MetacanStorage.write_table`` and ``pyarrow.parquet.write_table`` in the child.

Targets (issue 5; printed, not asserted): scoring 1,000,000 works < 120 s with peak RSS flat between
100,000 and 1,000,000 works; training all heads on 10,000 labelled works < 60 s.
Output: a table on stdout and ``benchmarks/out/student.json``; ``--profile`` also writes cProfile stats
of the largest scoring run to ``benchmarks/out/profile_student_score_<N>.pstats``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench_frame import _git_state, _loadavg, _proc_kib, _tree_rss_kib  # noqa: E402 (after the sys.path set-up above)

PILOT = (REPO / ".." / "shared" / "data" / "metacan_pilot").resolve()
SOURCE_WORKS = 50_000  # scale input of the real frame rows (make_scale_input.py)
RECIPE_VERSION = "bench-student-v2"  # bump when the generator changes: cached inputs are rebuilt
SEED = 20251130
TARGET_SCORE_S = 120.0
TARGET_TRAIN_S = 60.0

# keyword phrases per binary target and the share of works that carry one (the label truth)
BINARY_KEYWORDS: dict[str, tuple[float, tuple[str, ...]]] = {
    "metaresearch": (
        0.04,
        ("meta-research", "research on research", "reporting quality of trials", "reproducibility of findings"),
    ),
    "metaepi_narrow": (0.01, ("meta-epidemiological study", "meta-epidemiology of trial effect sizes")),
    "metaepi_broad": (0.06, ("systematic review", "meta-analysis", "umbrella review")),
    "bibliometrics": (0.03, ("bibliometric analysis", "citation analysis", "scientometric study")),
    "sts": (0.005, ("science and technology studies", "sociology of scientific knowledge")),
    "scholarly_communication": (0.02, ("peer review", "open access publishing", "preprint servers")),
    "open_science": (0.015, ("open data", "data sharing policies", "open science practices")),
    "research_integrity": (0.0015, ("research misconduct", "retracted publications")),
    "insufficient_payload": (0.001, ()),  # a 1-2 word title: the model declines to judge
    "about_ca_system": (0.05, ("Canadian health system", "Ontario hospitals", "CIHR-funded")),
    "about_ca_topic": (0.08, ("Canada", "Quebec", "First Nations communities", "British Columbia")),
}
CATEGORICAL_KEYWORDS: dict[str, dict[str, tuple[float, str]]] = {
    "domain": {
        "methods": (0.02, "statistical methods"),
        "reporting": (0.015, "reporting guidelines"),
        "reproducibility": (0.01, "replication study"),
        "evaluation": (0.01, "research assessment"),
        "incentives": (0.005, "academic incentives"),
    },
    "study_design": {
        "randomized_trial": (0.03, "randomized controlled trial"),
        "observational": (0.08, "cohort study"),
        "case_report": (0.02, "case report"),
        "qualitative": (0.03, "qualitative interview study"),
        "simulation_or_modeling": (0.02, "simulation model"),
        "bench_or_experimental": (0.04, "in vitro experiment"),
    },
    "genre": {
        "review": (0.05, "a narrative review"),
        "protocol": (0.01, "study protocol"),
        "dataset": (0.01, "a dataset"),
        "software": (0.01, "an R package"),
        "commentary": (0.02, "commentary"),
        "editorial": (0.01, "editorial"),
    },
}
NOISE = {
    "gemma": (0.10, 0.10),
    "codex": (0.05, 0.05),
}  # (false negative rate, false positives as a share of the target's rate)
STRATUM_WEIGHTS = (10.0, 20.0, 50.0, 100.0)  # codex design weights 1/pi, stratum = work index mod 4


# ------------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------------
def _say(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def real_frame(scratch: Path) -> Path:
    """The warehouse folder of a frame built as bench_frame.py builds it from a SOURCE_WORKS scale input."""
    from make_scale_input import make_scale_input

    data_dir = scratch / f"framesrc_{SOURCE_WORKS}" / "data"
    done = data_dir.parent / "DONE.json"
    if done.exists() and (data_dir / "warehouse" / "frame").is_dir():
        return data_dir / "warehouse" / "frame"
    input_dir = scratch / f"works_{SOURCE_WORKS}"
    make_scale_input(SOURCE_WORKS, input_dir, quiet=True)
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--_stage",
            "framesrc",
            "--input",
            str(input_dir),
            "--data",
            str(data_dir),
        ],
        cwd=str(REPO),
        check=True,
    )
    done.write_text(json.dumps({"seconds": time.perf_counter() - t0}))
    return data_dir / "warehouse" / "frame"


def stage_framesrc(input_dir: Path, data_dir: Path) -> dict:
    from bench_frame import stage_frame

    res = stage_frame(input_dir, data_dir)
    if not res["success"]:
        raise SystemExit(f"frame build failed: {res}")
    return res


def _word_pool() -> tuple[list[str], object]:
    import numpy as np

    counts: Counter = Counter()
    for f in sorted(PILOT.glob("**/chunk_*.json")):
        try:
            items = json.loads(f.read_text())
        except ValueError:
            continue
        for it in items if isinstance(items, list) else []:
            if isinstance(it, dict) and it.get("title"):
                counts.update(re.findall(r"[^\W\d_][\w'-]*", it["title"]))
    if not counts:
        raise SystemExit(f"no titles found under {PILOT} (the word pool of the synthetic titles)")
    words = sorted(counts)
    p = np.array([counts[w] for w in words], dtype=float)
    return words, p / p.sum()


def synth_works(n: int, titles_mode: str, real_titles: list[str]) -> dict:
    """Titles and label truths of n works (deterministic in SEED; work i is the same for every n)."""
    import numpy as np

    from metacan_pipeline.vocab import BINARY_TARGETS, CATEGORICAL_TARGETS

    rng = np.random.default_rng(SEED)
    # one block of random numbers per work, so that a prefix of the 1M works equals the 100k works
    truth = {t: rng.random(n) < BINARY_KEYWORDS[t][0] for t in BINARY_TARGETS}
    truth["metaresearch"] |= truth["metaepi_narrow"] | truth["research_integrity"]
    kw_pick = rng.integers(0, 1 << 30, size=(n, len(BINARY_TARGETS)))
    cat_draw = {t: rng.random(n) for t in CATEGORICAL_TARGETS}
    words, p = _word_pool()
    lengths = rng.integers(6, 17, size=n)
    ends = np.cumsum(lengths)
    idx = rng.choice(len(words), size=int(ends[-1]), p=p)
    wa = np.array(words, dtype=object)[idx]
    cat_truth: dict[str, list] = {}
    for t, table in CATEGORICAL_KEYWORDS.items():
        vals = np.full(n, None, dtype=object)
        lo = np.zeros(n)
        for cls, (rate, _) in table.items():
            hit = (cat_draw[t] >= lo) & (cat_draw[t] < lo + rate)
            vals[hit] = cls
            lo = lo + rate
        cat_truth[t] = vals
    cat_truth["domain"][np.equal(cat_truth["domain"], None) & ~truth["metaresearch"]] = "not_metaresearch"
    cat_truth["domain"][np.equal(cat_truth["domain"], None)] = "methods"
    cat_truth["study_design"][np.equal(cat_truth["study_design"], None)] = "not_applicable"
    cat_truth["study_design"][truth["metaepi_broad"]] = "systematic_review"
    cat_truth["genre"][np.equal(cat_truth["genre"], None)] = "empirical"
    titles = []
    start = 0
    bin_targets = list(BINARY_TARGETS)
    for i in range(n):
        if titles_mode == "repeat":
            title = real_titles[i % len(real_titles)]
        elif truth["insufficient_payload"][i]:
            title = " ".join(wa[start : start + 2])
        else:
            parts = list(wa[start : ends[i]])
            for j, t in enumerate(bin_targets):
                phrases = BINARY_KEYWORDS[t][1]
                if truth[t][i] and phrases:
                    parts.insert(kw_pick[i, j] % (len(parts) + 1), phrases[kw_pick[i, j] % len(phrases)])
            for t, table in CATEGORICAL_KEYWORDS.items():
                v = cat_truth[t][i]
                if v in table:
                    parts.insert(kw_pick[i, 0] % (len(parts) + 1), table[v][1])
            title = " ".join(parts)
        titles.append(title)
        start = ends[i]
    return {"titles": titles, "truth": truth, "cat_truth": cat_truth}


def teacher_labels(works: dict, teacher: str, n: int) -> dict:
    """Column arrays of one teacher's labels of the first n works: truth with independent noise."""
    import numpy as np

    from metacan_pipeline.vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS, CATEGORIES

    rng = np.random.default_rng(SEED + (1 if teacher == "gemma" else 2))
    fn, fp = NOISE[teacher]
    bits = {}
    for t, y in works["truth"].items():
        y = y[:n]
        r = rng.random(n)
        bits[t] = np.where(y, r >= fn, r < fp * BINARY_KEYWORDS[t][0])
    cats = [[] for _ in range(n)]
    for c in CATEGORIES:
        for i in np.flatnonzero(bits[c]):
            cats[i].append(c)
    out = {"categories": cats, **{t: bits[t] for t in ABOUT_CA_TARGETS}}
    for t, classes in CATEGORICAL_TARGETS.items():
        v = works["cat_truth"][t][:n].copy()
        r = rng.random(n)
        swap = r >= 0.85
        v[swap] = np.array(classes, dtype=object)[rng.integers(0, len(classes), size=int(swap.sum()))]
        v[r < 0.03] = None
        out[t] = v
    return out


def _label_dicts(lab: dict, ids: list[str], teacher: str) -> list[dict]:
    from metacan_pipeline.vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS

    return [
        {
            "work_id": wid,
            "label_id": f"{teacher}-{wid}",
            "teacher": teacher,
            "status": "labelled",
            "source": "teacher_call",
            "categories": lab["categories"][i],
            **{t: bool(lab[t][i]) for t in ABOUT_CA_TARGETS},
            **{t: lab[t][i] for t in CATEGORICAL_TARGETS},
        }
        for i, wid in enumerate(ids)
    ]


def _gemma_table(lab: dict, ids: list[str], start: int):
    """``direct_labels_gemma`` rows (LABELS_SCHEMA) for ids (frame positions start..): 2% failed calls and
    2% older duplicate labels of the same work (the predictions query keeps the newest)."""
    import datetime as dt

    import numpy as np
    import pyarrow as pa

    from metacan_pipeline.tables.teachers import LABELS_SCHEMA

    n = len(ids)
    rng = np.random.default_rng(SEED + 3 + start)
    failed = rng.random(n) < 0.02
    dup = rng.random(n) < 0.02
    base = dt.datetime(2026, 1, 1)
    pos = np.arange(start, start + n)
    status = np.where(failed, "failed", "labelled")

    def col(values, mask_null=None):
        vals = list(values)
        if mask_null is not None:
            vals = [None if m else v for v, m in zip(vals, mask_null, strict=False)]
        return vals

    cols = {
        "label_id": [f"g-{w}" for w in ids],
        "work_id": ids,
        "teacher": ["gemma"] * n,
        "model": ["gemma-3-270m-it-q4_k_m"] * n,
        "prompt_version": ["v1"] * n,
        "prompt_sha": ["0" * 16] * n,
        "record_view": ["title_only"] * n,
        "view_hash": [f"{p:016x}" for p in pos],
        "status": status.tolist(),
        "categories": col(lab["categories"], failed),
        "domain": col(lab["domain"], failed),
        "study_design": col(lab["study_design"], failed),
        "genre": col(lab["genre"], failed),
        "about_ca_system": col(lab["about_ca_system"].tolist(), failed),
        "about_ca_topic": col(lab["about_ca_topic"].tolist(), failed),
        "confidence": col(["high"] * n, failed),
        "reason": col(["keyword label (benchmark)"] * n, failed),
        "error": [("schema: no label" if f else None) for f in failed],
        "attempts": [1] * n,
        "call_id": [f"c{p // 8}" for p in pos],
        "run_id": ["bench"] * n,
        "source": ["teacher_call"] * n,
        "source_ref": [None] * n,
        "created_at": [base + dt.timedelta(seconds=int(p)) for p in pos],
    }
    table = pa.table(cols, schema=LABELS_SCHEMA)
    if dup.any():
        old = table.filter(pa.array(dup))
        old = old.set_column(
            old.schema.get_field_index("created_at"),
            "created_at",
            pa.array([base - dt.timedelta(days=30)] * old.num_rows, pa.timestamp("us")),
        )
        old = old.set_column(
            old.schema.get_field_index("label_id"),
            "label_id",
            pa.array([f"g-old-{w}" for w in old.column("work_id").to_pylist()]),
        )
        table = pa.concat_tables([table, old])
    return table


def _recipe(n_max: int, train_works: int, titles_mode: str, src_rows: int) -> dict:
    return {
        "recipe": RECIPE_VERSION,
        "n_max": n_max,
        "train_works": train_works,
        "titles": titles_mode,
        "source_frame_rows": src_rows,
        "seed": SEED,
    }


def prepare(scratch: Path, sizes: list[int], train_works: int, titles_mode: str) -> dict:
    """Build (or reuse) every scored frame, its gemma labels and the training set."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.student.scoring import student_texts

    src_dir = real_frame(scratch)
    src = pq.read_table(src_dir)
    n_max = max(sizes)
    recipe = _recipe(n_max, train_works, titles_mode, src.num_rows)
    tag = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:10]
    info = {
        "source_frame": str(src_dir),
        "source_frame_rows": src.num_rows,
        "source_frame_distinct_titles": len(set(src.column("title_text").to_pylist())),
        "recipe": recipe,
        "tag": tag,
        "frames": {},
    }
    train_file = scratch / f"train_{tag}.pkl"
    ready = {n: scratch / f"score_{n}" / "READY.json" for n in sizes}
    if train_file.exists() and all(p.exists() and json.loads(p.read_text()).get("tag") == tag for p in ready.values()):
        info["frames"] = {n: json.loads(p.read_text()) for n, p in ready.items()}
        info["train_file"] = str(train_file)
        return info
    t0 = time.perf_counter()
    _say(f"bench_student: generating {n_max:,} works ({titles_mode} titles) from {src.num_rows:,} real frame rows ...")
    works = synth_works(n_max, titles_mode, src.column("title_text").to_pylist())
    gemma = teacher_labels(works, "gemma", n_max)
    ids = [f"W7{i:010d}" for i in range(n_max)]
    _say(f"bench_student: generated in {time.perf_counter() - t0:.1f} s")
    chunk = 50_000
    for n in sorted(set(sizes)):
        data = scratch / f"score_{n}" / "data"
        if data.exists():
            shutil.rmtree(data)
        storage = MetacanStorage(data_dir=str(data))
        t1 = time.perf_counter()

        def frame_parts(n=n):
            for a in range(0, n, chunk):
                b = min(n, a + chunk)
                t = src.take(pa.array([i % src.num_rows for i in range(a, b)]))
                t = t.set_column(t.schema.get_field_index("id"), "id", pa.array(ids[a:b]))
                if titles_mode == "synthetic":
                    for c in ("title", "title_text"):
                        t = t.set_column(t.schema.get_field_index(c), c, pa.array(works["titles"][a:b], pa.string()))
                yield t

        def gemma_parts(n=n):
            for a in range(0, n, chunk):
                b = min(n, a + chunk)
                yield _gemma_table({k: v[a:b] for k, v in gemma.items()}, ids[a:b], a)

        rows = storage.write_table("frame", frame_parts())
        g_rows = storage.write_table("direct_labels_gemma", gemma_parts())
        meta = {
            "tag": tag,
            "works": rows,
            "gemma_label_rows": g_rows,
            "data_dir": str(data),
            "seconds": time.perf_counter() - t1,
        }
        (scratch / f"score_{n}" / "READY.json").write_text(json.dumps(meta))
        info["frames"][n] = meta
        _say(
            f"bench_student: wrote the {n:,}-work frame and {g_rows:,} gemma labels under {data} in {meta['seconds']:.1f} s"
        )
    # training set: the first train_works frame works, labelled by both teachers (codex with design weights)
    storage = MetacanStorage(data_dir=str(scratch / f"score_{min(sizes)}" / "data"))
    head = next(
        storage.iter_batches(
            "frame",
            batch_size=train_works,
            columns=["id", "venue_id", "title_text", "venue_name", "topic", "field", "type", "language"],
        )
    )
    texts = dict(zip(head.column("id").to_pylist(), student_texts(head), strict=False))
    tids = ids[:train_works]
    codex = teacher_labels(works, "codex", train_works)
    labels = {
        "gemma": _label_dicts({k: v[:train_works] for k, v in gemma.items()}, tids, "gemma"),
        "codex": _label_dicts(codex, tids, "codex"),
    }
    weights = {wid: STRATUM_WEIGHTS[i % len(STRATUM_WEIGHTS)] for i, wid in enumerate(tids)}
    train_file.write_bytes(pickle.dumps({"labels": labels, "texts": texts, "weights": weights}))
    info["train_file"] = str(train_file)
    return info


# ------------------------------------------------------------------------------------------------
# stages (run inside a child process)
# ------------------------------------------------------------------------------------------------
def _sklearn_heads(labels: dict, texts: dict, w: dict, blas_threads: int | None = None) -> dict:
    """The bare scikit-learn work of train_bundle: the same vectorizer and one LogisticRegression per head
    (BLAS threads as the machine sets them, or ``blas_threads``)."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    from metacan_pipeline.student.heads import PARAMS
    from metacan_pipeline.vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS, CATEGORIES

    limits = threadpool_limits(limits=blas_threads, user_api="blas")
    t0 = time.perf_counter()
    vec = TfidfVectorizer(**{**PARAMS["tfidf"], "dtype": np.float32}).fit(
        sorted({texts[r["work_id"]] for t in labels for r in labels[t]})
    )
    fits = 0
    for teacher, rows in labels.items():
        X = vec.transform([texts[r["work_id"]] for r in rows])
        Y = np.array(
            [[c in r["categories"] for c in CATEGORIES] + [r[t] for t in ABOUT_CA_TARGETS] for r in rows], dtype=int
        )
        for j in range(Y.shape[1]):
            if 0 < Y[:, j].sum() < len(rows):
                LogisticRegression(**PARAMS["logreg"]).fit(X, Y[:, j], sample_weight=w[teacher])
                fits += 1
        for t in CATEGORICAL_TARGETS:
            keep = np.array([r[t] is not None for r in rows])
            LogisticRegression(**PARAMS["logreg"]).fit(
                X[keep], np.array([r[t] for r in rows], dtype=object)[keep].astype(str), sample_weight=w[teacher][keep]
            )
            fits += 1
    secs = time.perf_counter() - t0
    limits.restore_original_limits()
    return {"seconds": secs, "fits": fits, "features": len(vec.vocabulary_), "blas_threads": blas_threads or "default"}


def stage_train(train_file: Path, bundle_file: Path) -> dict:
    import joblib
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    import metacan_pipeline
    from metacan_pipeline.student.heads import PARAMS, weighted_rate
    from metacan_pipeline.student.models import StudentBundle
    from metacan_pipeline.student.roles import STUDENT_TEACHERS as TEACHERS
    from metacan_pipeline.student.training import fit_heads, model_version_for, support_gates, target_value
    from metacan_pipeline.vocab import BINARY_TARGETS, CATEGORICAL_TARGETS

    d = pickle.loads(train_file.read_bytes())
    labels, texts, weights = d["labels"], d["texts"], d["weights"]
    train_w = {
        t: np.array([weights.get(r["work_id"], 1.0) if t == "codex" else 1.0 for r in labels[t]]) for t in TEACHERS
    }
    res: dict = {"package": metacan_pipeline.__file__, "train_works": {t: len(v) for t, v in labels.items()}}
    res["baseline"] = _sklearn_heads(labels, texts, train_w)
    _say(
        f"  bare sklearn loop: {res['baseline']['seconds']:.1f} s ({res['baseline']['fits']} fits, {res['baseline']['features']} features)"
    )
    model_version = model_version_for(labels, weights, "tfidf")
    t0 = time.perf_counter()
    vectorizer, heads = fit_heads("tfidf", labels, texts, train_w)
    res["train_bundle_seconds"] = time.perf_counter() - t0
    _say(f"  train_bundle: {res['train_bundle_seconds']:.1f} s")
    res["baseline_after"] = _sklearn_heads(labels, texts, train_w)
    _say(f"  bare sklearn loop again: {res['baseline_after']['seconds']:.1f} s")
    res["baseline_one_blas_thread"] = _sklearn_heads(labels, texts, train_w, blas_threads=1)
    _say(f"  bare sklearn loop, BLAS on one thread: {res['baseline_one_blas_thread']['seconds']:.1f} s")
    # one fit of each kind alone, on the codex matrix (BLAS threads as the machine sets them)
    vec = TfidfVectorizer(**{**PARAMS["tfidf"], "dtype": np.float32}).fit(sorted(set(texts.values())))
    X = vec.transform([texts[r["work_id"]] for r in labels["codex"]])
    y = np.array([target_value(r, "metaepi_broad") for r in labels["codex"]])
    t0 = time.perf_counter()
    LogisticRegression(**PARAMS["logreg"]).fit(X, y, sample_weight=train_w["codex"])
    res["one_binary_fit_seconds"] = time.perf_counter() - t0
    keep = [i for i, r in enumerate(labels["codex"]) if r["study_design"] is not None]
    t0 = time.perf_counter()
    LogisticRegression(**PARAMS["logreg"]).fit(
        X[keep], [labels["codex"][i]["study_design"] for i in keep], sample_weight=train_w["codex"][keep]
    )
    res["one_categorical_fit_seconds"] = time.perf_counter() - t0
    res["heads"] = {t: {h: heads[t][h].status_ for h in heads[t]} for t in heads}
    res["heads_trained"] = sum(h.status_ == "trained" for t in heads for h in heads[t].values())
    res["features"] = len(vectorizer.vocabulary_)
    # as student_heads: the support gate over every label of both teachers, and the design-weighted codex rates
    gates = support_gates(labels, weights, heads)
    codex_w = np.array([weights.get(r["work_id"], 1.0) for r in labels["codex"]])
    rates = {
        t: weighted_rate(np.array([target_value(r, t) or 0 for r in labels["codex"]]), codex_w) for t in BINARY_TARGETS
    }
    bundle = StudentBundle(
        vectorizer, heads, model_version=model_version, feature_kind="tfidf", gates=gates, rates=rates
    )
    res["gates"] = {
        t: {
            "passed": g.passed,
            "gemma_positives": g.gemma_positives,
            "codex_positives": g.codex_positives,
            "kish_ess": round(g.kish_ess_positive, 1),
            "reason": g.reason,
        }
        for t, g in bundle.gates.items()
    }
    res["rates"] = bundle.rates
    res["gated_binary"] = [t for t in BINARY_TARGETS if bundle.gates[t].passed]
    res["gated_categorical"] = [t for t in CATEGORICAL_TARGETS if bundle.gates[t].passed]
    res["model_version"] = model_version
    joblib.dump(bundle, bundle_file)
    return res


def _frame_texts(data_dir: Path) -> list[str]:
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.student.features import STUDENT_FIELDS
    from metacan_pipeline.student.scoring import student_texts

    return student_texts(MetacanStorage(data_dir=str(data_dir)).read_table("frame", list(STUDENT_FIELDS)))


def stage_score_baseline(data_dir: Path, bundle_file: Path) -> dict:
    import joblib

    import metacan_pipeline

    bundle = joblib.load(bundle_file)
    texts = _frame_texts(data_dir)
    t0 = time.perf_counter()
    X = bundle.vectorizer.transform(texts)
    t_vec = time.perf_counter() - t0
    out = []
    for heads in bundle.heads.values():
        for head in heads.values():
            out.append(head.score_samples(X))
    secs = time.perf_counter() - t0
    return {
        "package": metacan_pipeline.__file__,
        "rows": len(texts),
        "seconds": secs,
        "transform_seconds": t_vec,
        "heads_seconds": secs - t_vec,
        "nnz_per_row": X.nnz / max(1, X.shape[0]),
        "heads": len(out),
    }


def stage_score(data_dir: Path, bundle_file: Path, profile_to: str | None) -> dict:
    import joblib
    import pyarrow.parquet as pq

    import metacan_pipeline
    import metacan_pipeline.storage as st
    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.student.predicting import write_predictions

    bundle = joblib.load(bundle_file)
    storage = MetacanStorage(data_dir=str(data_dir))
    # breakdown: time every table write (the generator feeding student_scores does the scoring) and every
    # Parquet file write inside them; wrappers around the same functions, behaviour unchanged
    spans: list[dict] = []
    current = [None]
    orig_write_table = MetacanStorage.write_table
    orig_pq_write = st.pq.write_table
    pq_time: dict[str, float] = {}

    def timed_write_table(self, name, batches, schema=None):
        current[0] = name
        t = time.perf_counter()
        try:
            return orig_write_table(self, name, batches, schema)
        finally:
            spans.append({"table": name, "start": t, "end": time.perf_counter()})
            current[0] = None

    def timed_pq_write(*a, **k):
        t = time.perf_counter()
        try:
            return orig_pq_write(*a, **k)
        finally:
            pq_time[current[0]] = pq_time.get(current[0], 0.0) + time.perf_counter() - t

    MetacanStorage.write_table = timed_write_table
    st.pq.write_table = timed_pq_write
    batch_log: list[float] = []

    class Log:
        def info(self, msg):
            batch_log.append(time.perf_counter())

    prof = None
    if profile_to:
        import cProfile

        prof = cProfile.Profile()
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    n, thresholds = write_predictions(storage, bundle, log=Log(), progress=False)
    if prof:
        prof.disable()
    secs = time.perf_counter() - t0
    MetacanStorage.write_table = orig_write_table
    st.pq.write_table = orig_pq_write
    if prof:
        prof.dump_stats(profile_to)
    by = {s["table"]: s for s in spans}
    sc, pr = by["student_scores"], by["predictions"]
    breakdown = {
        "student_scores_total": sc["end"] - sc["start"],
        "student_scores_parquet_writes": pq_time.get("student_scores", 0.0),
        "student_scores_scoring": (sc["end"] - sc["start"]) - pq_time.get("student_scores", 0.0),
        "quotas_and_count": pr["start"] - sc["end"],
        "predictions_total": pr["end"] - pr["start"],
        "predictions_parquet_writes": pq_time.get("predictions", 0.0),
        "predictions_query": (pr["end"] - pr["start"]) - pq_time.get("predictions", 0.0),
        "thresholds_and_rest": t0 + secs - pr["end"],
        "batches": len(batch_log),
    }
    files = {
        t: sum(p.stat().st_size for p in storage.table_dir(t).glob("*.parquet"))
        for t in ("student_scores", "predictions")
    }
    pred_rows = sum(pq.ParquetFile(p).metadata.num_rows for p in storage.table_dir("predictions").glob("*.parquet"))
    return {
        "package": metacan_pipeline.__file__,
        "rows": n,
        "predictions_rows": pred_rows,
        "seconds": secs,
        "breakdown": breakdown,
        "bytes": files,
        "thresholds": thresholds,
    }


def run_stage_in_child(args: argparse.Namespace) -> None:
    if args._stage == "framesrc":
        stage_framesrc(Path(args.input), Path(args.data))
        return
    if args._stage == "train":
        res = stage_train(Path(args.input), Path(args.bundle))
    elif args._stage == "score_baseline":
        res = stage_score_baseline(Path(args.data), Path(args.bundle))
    elif args._stage == "score":
        res = stage_score(Path(args.data), Path(args.bundle), args.profile_to)
    else:
        raise SystemExit(f"unknown stage {args._stage}")
    res["vm_hwm_kib"] = _proc_kib("/proc/self/status", "VmHWM") or -1
    Path(args.result).write_text(json.dumps(res, default=str))


# ------------------------------------------------------------------------------------------------
# parent: spawn, sample, collect
# ------------------------------------------------------------------------------------------------
def spawn(stage: str, key: str, scratch: Path, extra: list[str]) -> dict:
    """Run one stage in a fresh child; returns its result plus ru_maxrss, sampled RSS and load (as bench_frame)."""
    result_file = scratch / f".stage-{key}-{os.getpid()}.json"
    result_file.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_stage", stage, "--result", str(result_file), *extra]
    load_before = _loadavg()
    log_path = scratch / f"{key}.log"
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT)
        samples: list[tuple[float, int]] = []
        own_peak = [0]
        done = threading.Event()

        def sampler() -> None:
            while not done.is_set():
                got = _tree_rss_kib(proc.pid)
                if got is not None:
                    samples.append((time.time(), got[1]))
                    own_peak[0] = max(own_peak[0], got[0])
                done.wait(0.2)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        _, status, rusage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        th.join()
    if proc.returncode != 0 or not result_file.exists():
        raise SystemExit(f"stage {key} failed with exit code {proc.returncode} (log: {log_path}): {' '.join(cmd)}")
    res = json.loads(result_file.read_text())
    result_file.unlink()
    res.update(
        {
            "stage": stage,
            "log": str(log_path),
            "wall_seconds_incl_startup": time.time() - t0,
            "ru_maxrss_mib": rusage.ru_maxrss / 1024,
            "vm_hwm_mib": res.pop("vm_hwm_kib") / 1024,
            "sampled_tree_peak_rss_mib": max((k for _, k in samples), default=0) / 1024,
            "load_before": load_before,
            "load_after": _loadavg(),
            "user_cpu_seconds": rusage.ru_utime,
            "sys_cpu_seconds": rusage.ru_stime,
            "rss_samples_mib": [
                (round(t - t0, 1), round(k / 1024)) for t, k in samples[:: max(1, len(samples) // 300)]
            ],
        }
    )
    res["peak_rss_mib"] = max(res["ru_maxrss_mib"], res["sampled_tree_peak_rss_mib"])
    return res


def print_table(r: dict) -> None:
    code = r["code"]
    print(
        f"\n=== student benchmark: code {code['head'][:7]}{' +local edits' if code['dirty_pipeline_files'] else ''} "
        f"(branch {r['branch']}), package {r['package']} ==="
    )
    print(f"command: {r['command']}")
    print(
        f"machine: {r['machine']['nproc']} cores, load at start {r['machine']['load_at_start']}, at end {r['machine'].get('load_at_end')}"
    )
    inp = r["inputs"]
    print(
        f"inputs: {inp['source_frame_rows']:,} real frame rows ({inp['source_frame_distinct_titles']} distinct titles) from a "
        f"{SOURCE_WORKS:,}-work scale input, repeated with fresh ids; titles: {inp['recipe']['titles']}"
    )
    print(
        f"{'stage':<46}{'works':>10}{'seconds':>9}{'works/s':>10}{'vs base':>9}{'peak RSS MiB':>14}  load before -> after"
    )
    st = r["stages"]
    if "train" in st:
        t = st["train"]
        base = (t["baseline"]["seconds"] + t["baseline_after"]["seconds"]) / 2
        n = t["train_works"]["gemma"]
        for label, s in (
            ("train baseline: bare sklearn loop", t["baseline"]["seconds"]),
            ("train_bundle (2 teachers x 14 heads)", t["train_bundle_seconds"]),
            ("train baseline again", t["baseline_after"]["seconds"]),
            ("variant: bare loop, BLAS on one thread", t["baseline_one_blas_thread"]["seconds"]),
        ):
            print(
                f"{label:<46}{n:>10,}{s:>9.1f}{n / s:>10.0f}{s / base:>9.2f}{t['peak_rss_mib']:>14.0f}  {t['load_before']} -> {t['load_after']}"
            )
        print(
            f"  one binary LR fit {t['one_binary_fit_seconds']:.2f} s, one 12-class fit {t['one_categorical_fit_seconds']:.2f} s; "
            f"{t['heads_trained']} of 28 heads trained; {t['features']:,} TF-IDF features; gated binary heads: {t['gated_binary']}"
        )
    base_keys = [k for k in st if k.startswith("score_baseline")]
    sbase = sum(st[k]["seconds"] for k in base_keys) / len(base_keys) if base_keys else None
    for k, s in st.items():
        if k == "train":
            continue
        label = {
            "score_baseline": "score baseline: transform + 28 heads in memory",
            "score_baseline_after": "score baseline again",
        }.get(k, f"write_predictions ({s['rows']:,} works)")
        vs = f"{s['seconds'] / sbase:>9.2f}" if sbase and s["rows"] == r["stages"][base_keys[0]]["rows"] else f"{'':>9}"
        print(
            f"{label:<46}{s['rows']:>10,}{s['seconds']:>9.1f}{s['rows'] / s['seconds']:>10.0f}{vs}{s['peak_rss_mib']:>14.0f}  "
            f"{s['load_before']} -> {s['load_after']}"
        )
        if "breakdown" in s:
            b = s["breakdown"]
            print(
                f"    scoring {b['student_scores_scoring']:.1f} s + scores Parquet {b['student_scores_parquet_writes']:.1f} s; "
                f"quotas {b['quotas_and_count']:.1f} s; predictions query {b['predictions_query']:.1f} s + Parquet "
                f"{b['predictions_parquet_writes']:.1f} s; rest {b['thresholds_and_rest']:.1f} s"
            )
    print(
        "ratios: against the mean of the baseline runs of this benchmark run (train: same process; score: same input, fresh child). "
        "peak RSS = max(wait4 ru_maxrss, RSS summed over the child's process tree sampled every 0.2 s)"
    )
    for line in r["verdicts"]:
        print(line)
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--train-works", type=int, default=10_000)
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-bench-student"))
    ap.add_argument(
        "--stages", default="train,score", help="comma list: train, score (score needs a bundle from train)"
    )
    ap.add_argument("--titles", choices=("synthetic", "repeat"), default="synthetic")
    ap.add_argument("--no-repeat-baseline", action="store_true", help="run each baseline once, not before and after")
    ap.add_argument("--profile", action="store_true", help="cProfile the largest write_predictions run")
    ap.add_argument("--out", type=Path, default=OUT / "student.json")
    for a in ("_stage", "input", "data", "result", "bundle", "profile_to"):
        ap.add_argument(f"--{a}", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._stage:
        run_stage_in_child(args)
        return
    import metacan_pipeline

    scratch = args.scratch.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    branch = subprocess.run(
        ["git", "rev-parse", "--abbrev-ref", "HEAD"], check=False, cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    r: dict = {
        "command": " ".join([sys.executable, *sys.argv]) if argv is None else " ".join(["bench_student.py", *argv]),
        "cwd": os.getcwd(),
        "package": metacan_pipeline.__file__,
        "branch": branch,
        "code": _git_state(),
        "machine": {"nproc": os.cpu_count(), "load_at_start": _loadavg()},
        "stages": {},
        "verdicts": [],
    }
    t0 = time.perf_counter()
    r["inputs"] = prepare(scratch, args.sizes, args.train_works, args.titles)
    r["inputs"]["prepare_seconds"] = time.perf_counter() - t0
    tag = r["inputs"]["tag"]
    bundle_file = scratch / f"bundle_{tag}.joblib"
    if "train" in stages:
        _say(f"stage train ({args.train_works:,} labelled works, load {_loadavg()}) ...")
        r["stages"]["train"] = spawn(
            "train", "train", scratch, ["--input", r["inputs"]["train_file"], "--bundle", str(bundle_file)]
        )
    elif not bundle_file.exists():
        raise SystemExit(f"{bundle_file} is missing: run with --stages train,score first")
    if "score" in stages:
        big = max(args.sizes)
        frames = r["inputs"]["frames"]
        order = [("score_baseline", "score_baseline", big)] + [("score", f"score_{n}", n) for n in sorted(args.sizes)]
        if not args.no_repeat_baseline:
            order.append(("score_baseline", "score_baseline_after", big))
        for stage, key, n in order:
            data = frames[n if stage == "score" else big]["data_dir"]
            extra = ["--data", data, "--bundle", str(bundle_file)]
            if stage == "score" and args.profile and n == big:
                extra += ["--profile_to", str(OUT / f"profile_student_score_{n}.pstats")]
            _say(f"stage {key} (load {_loadavg()}) ...")
            res = spawn(stage, key, scratch, extra)
            if res["rows"] != n:
                raise SystemExit(f"stage {key} scored {res['rows']} works, expected {n}")
            r["stages"][key] = res
            _say(
                f"stage {key}: {res['seconds']:.1f} s, {n / res['seconds']:.0f} works/s, peak RSS {res['peak_rss_mib']:.0f} MiB "
                f"(load {res['load_before']} -> {res['load_after']})"
            )
    r["machine"]["load_at_end"] = _loadavg()
    st = r["stages"]
    if "train" in st:
        t = st["train"]
        base = (t["baseline"]["seconds"] + t["baseline_after"]["seconds"]) / 2
        r["train_ratio_vs_baseline"] = t["train_bundle_seconds"] / base
        r["verdicts"].append(
            f"train_bundle on {t['train_works']['gemma']:,} labelled works: {t['train_bundle_seconds']:.1f} s "
            f"(target < {TARGET_TRAIN_S:.0f} s: {'MET' if t['train_bundle_seconds'] < TARGET_TRAIN_S else 'MISSED'}); "
            f"{r['train_ratio_vs_baseline']:.2f} x the bare sklearn loop ({base:.1f} s), "
            f"{t['train_bundle_seconds'] / t['baseline_one_blas_thread']['seconds']:.2f} x the bare loop on one BLAS thread "
            f"({t['baseline_one_blas_thread']['seconds']:.1f} s)"
        )
    score_keys = sorted(
        (k for k in st if k.startswith("score_") and not k.startswith("score_baseline")), key=lambda k: st[k]["rows"]
    )
    if score_keys:
        big = st[score_keys[-1]]
        base_keys = [k for k in st if k.startswith("score_baseline")]
        sbase = sum(st[k]["seconds"] for k in base_keys) / len(base_keys)
        r["score_ratio_vs_baseline"] = big["seconds"] / sbase
        r["verdicts"].append(
            f"write_predictions on {big['rows']:,} works: {big['seconds']:.1f} s, {big['rows'] / big['seconds']:.0f} works/s "
            f"(target < {TARGET_SCORE_S:.0f} s: {'MET' if big['seconds'] < TARGET_SCORE_S else 'MISSED'}); "
            f"{r['score_ratio_vs_baseline']:.2f} x the bare transform + heads ({sbase:.1f} s)"
        )
        if len(score_keys) > 1:
            small = st[score_keys[0]]
            r["rss_ratio_big_over_small"] = big["peak_rss_mib"] / small["peak_rss_mib"]
            r["verdicts"].append(
                f"peak RSS of write_predictions: {small['rows']:,} works {small['peak_rss_mib']:.0f} MiB, "
                f"{big['rows']:,} works {big['peak_rss_mib']:.0f} MiB (ratio {r['rss_ratio_big_over_small']:.2f}; "
                f"flat means about 1)"
            )
    args.out.write_text(json.dumps(r, indent=2, default=str))
    print_table(r)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
