"""The student benchmark's stages, each run in a fresh child process by bench_student.py: ``train`` (the bare
scikit-learn loop, train_bundle, the loop again and on one BLAS thread), ``score_baseline`` (the bundle's
vectorizer and heads over texts held in memory) and ``score`` (write_predictions, with a breakdown of where its
time goes). Each times its own work and returns a JSON-able dict.
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path

from _common import say


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
    from metacan_pipeline.student.roles import ROLE_TEACHERS as TEACHERS
    from metacan_pipeline.student.training import fit_heads, model_version_for, support_gates, target_value
    from metacan_pipeline.vocab import BINARY_TARGETS, CATEGORICAL_TARGETS

    d = pickle.loads(train_file.read_bytes())
    labels, texts, weights = d["labels"], d["texts"], d["weights"]
    train_w = {
        t: np.array([weights.get(r["work_id"], 1.0) if t == "codex" else 1.0 for r in labels[t]]) for t in TEACHERS
    }
    res: dict = {"package": metacan_pipeline.__file__, "train_works": {t: len(v) for t, v in labels.items()}}
    res["baseline"] = _sklearn_heads(labels, texts, train_w)
    say(
        f"  bare sklearn loop: {res['baseline']['seconds']:.1f} s ({res['baseline']['fits']} fits, {res['baseline']['features']} features)"
    )
    model_version = model_version_for(labels, weights, "tfidf")
    t0 = time.perf_counter()
    vectorizer, heads, _ = fit_heads("tfidf", labels, texts, train_w)
    res["train_bundle_seconds"] = time.perf_counter() - t0
    say(f"  train_bundle: {res['train_bundle_seconds']:.1f} s")
    res["baseline_after"] = _sklearn_heads(labels, texts, train_w)
    say(f"  bare sklearn loop again: {res['baseline_after']['seconds']:.1f} s")
    res["baseline_one_blas_thread"] = _sklearn_heads(labels, texts, train_w, blas_threads=1)
    say(f"  bare sklearn loop, BLAS on one thread: {res['baseline_one_blas_thread']['seconds']:.1f} s")
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
