"""Scoring assets: ``student_heads``, ``predictions``, ``machine_scores`` (SPEC sections 6-7)."""


import hashlib
import json
from collections import Counter
from pathlib import Path

import dagster as dg
import joblib
import numpy as np
import pyarrow as pa

from .. import __version__
from ..meta import counts_markdown, table_metadata
from ..storage import MetacanStorage
from ..teachers.assets import direct_labels_codex, direct_labels_gemma
from ..vocab import (
    BINARY_TARGETS, CATEGORICAL_TARGETS, CATEGORIES, PREDICTION_STATUS, SCORE_ONLY_IMMATURE,
)
from .calibration import quota_calibrate, support_gate, threshold_uncertainty
from .features import make_features, student_text
from .heads import PARAMS, fit_binary, fit_categorical, kish_ess

STUDENT_CODE_VERSION = "student-v1"
MODEL_MAJOR = 0
TEACHERS = ("codex", "gemma")

HEADS_SCHEMA = pa.schema(
    [("model_version", pa.string()), ("teacher", pa.string()), ("target", pa.string()), ("kind", pa.string()),
     ("status", pa.string()), ("n_train", pa.int64()), ("positives", pa.int64()), ("weighted_rate", pa.float64()),
     ("ap", pa.float64()), ("auroc", pa.float64()), ("cv", pa.string()),
     ("gate_passed", pa.bool_()), ("gate_reason", pa.string()), ("kish_ess_positive", pa.float64())]
)


def _target_value(label: dict, target: str) -> int | None:
    if target in CATEGORIES:
        return int(target in (label["categories"] or []))
    v = label.get(target)
    return None if v is None else int(bool(v))


def _training_rows(storage: MetacanStorage, teacher: str) -> list[dict]:
    """Labelled teacher-call rows of one teacher (rule labels and failures are not training data)."""
    rows = storage.read_table(f"direct_labels_{teacher}").to_pylist()
    return [r for r in rows if r["status"] == "labelled" and r["source"] == "teacher_call"]


def model_version_for(labels: dict[str, list[dict]], weights: dict[str, float]) -> str:
    """``metacan-v<major>-hybrid-<12 hex>`` over code version, training data and parameters (SPEC 6)."""
    h = hashlib.sha256()
    h.update(f"{__version__}/{STUDENT_CODE_VERSION}".encode())
    h.update(json.dumps(PARAMS, sort_keys=True, default=str).encode())
    for teacher in TEACHERS:
        for r in sorted(labels[teacher], key=lambda r: r["work_id"]):
            h.update(json.dumps([teacher, r["work_id"], r["label_id"], weights.get(r["work_id"], 1.0)], default=str).encode())
    return f"metacan-v{MODEL_MAJOR}-hybrid-{h.hexdigest()[:12]}"


def _model_path(storage: MetacanStorage, model_version: str) -> Path:
    return storage.root / "models" / f"{model_version}.joblib"


@dg.asset(group_name="scoring", kinds={"python", "scikitlearn", "parquet"}, code_version="1", owners=["team:metacan"],
          deps=[direct_labels_gemma, direct_labels_codex])
def student_heads(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """Per teacher, 11 binary and 3 categorical student heads on the title-only view (SPEC section 6).

    TF-IDF (word 1-2 grams, fitted on the whole frame's title-only texts) + logistic regression; codex
    heads weighted by design weights, gemma heads unweighted (census). A head with one class is a
    constant head. Each binary head records positives, design-weighted rate, AP and AUROC under
    grouped (venue) cross-validation where there are enough positives, and the support gate
    (both teachers >= 20 positives, Kish ESS of codex positive weights >= 10). Models are saved to
    ``data/models/<model_version>.joblib``; the table ``student_heads`` lists every head.
    """
    frame_rows = storage.read_table("frame", ["id", "title_text", "venue_name", "venue_id", "topic", "field", "type", "language"]).to_pylist()
    texts = {r["id"]: student_text(r) for r in frame_rows}
    venue = {r["id"]: r["venue_id"] or f"no-venue:{r['id']}" for r in frame_rows}
    weights = {r["id"]: r["design_weight"] for r in storage.read_table("sample_design", ["id", "design_weight"]).to_pylist()}
    labels = {t: [r for r in _training_rows(storage, t) if r["work_id"] in texts] for t in TEACHERS}
    model_version = model_version_for(labels, weights)
    vectorizer = make_features().fit([texts[r["id"]] for r in frame_rows] or [""])
    heads: dict[str, dict] = {}
    for teacher in TEACHERS:
        rows = labels[teacher]
        X = vectorizer.transform([texts[r["work_id"]] for r in rows])
        w = np.array([weights.get(r["work_id"], 1.0) if teacher == "codex" else 1.0 for r in rows])
        groups = [venue[r["work_id"]] for r in rows]
        heads[teacher] = {}
        for target in BINARY_TARGETS:
            idx = [i for i, r in enumerate(rows) if _target_value(r, target) is not None]
            y = np.array([_target_value(rows[i], target) for i in idx], dtype=int)
            heads[teacher][target] = fit_binary(target, X[idx], y, w[idx], [groups[i] for i in idx])
        for target, classes in CATEGORICAL_TARGETS.items():
            heads[teacher][target] = fit_categorical(target, classes, X, [r.get(target) for r in rows], w)
    # support gate: on every codex head, with both teachers' positives
    codex_rows = labels["codex"]
    table_rows = []
    gates = {}
    for target in (*BINARY_TARGETS, *CATEGORICAL_TARGETS):
        if target in CATEGORICAL_TARGETS:
            pos = {t: sum(1 for r in labels[t] if r.get(target) is not None) for t in TEACHERS}
            pos_w = np.array([weights.get(r["work_id"], 1.0) for r in codex_rows if r.get(target) is not None])
        else:
            pos = {t: sum(1 for r in labels[t] if _target_value(r, target) == 1) for t in TEACHERS}
            pos_w = np.array([weights.get(r["work_id"], 1.0) for r in codex_rows if _target_value(r, target) == 1])
        gate = support_gate(pos["gemma"], pos["codex"], kish_ess(pos_w))
        trained = heads["codex"][target].status == "trained"
        if gate.passed and not trained:
            gate = type(gate)(False, gate.gemma_positives, gate.codex_positives, gate.kish_ess_positive, "codex head is constant")
        gates[target] = gate
        for teacher in TEACHERS:
            h = heads[teacher][target]
            is_bin = target in BINARY_TARGETS
            table_rows.append({
                "model_version": model_version, "teacher": teacher, "target": target, "kind": "binary" if is_bin else "categorical",
                "status": h.status, "n_train": h.n_train, "positives": pos[teacher],
                "weighted_rate": h.rate if is_bin else None,
                "ap": h.metrics.get("ap") if is_bin else None, "auroc": h.metrics.get("auroc") if is_bin else None,
                "cv": h.metrics.get("cv") if is_bin else None,
                "gate_passed": gate.passed if teacher == "codex" else None, "gate_reason": gate.reason if teacher == "codex" else None,
                "kish_ess_positive": gate.kish_ess_positive if teacher == "codex" else None,
            })
    path = _model_path(storage, model_version)
    path.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump({"model_version": model_version, "vectorizer": vectorizer, "heads": heads, "gates": gates}, path)
    n = storage.write_table("student_heads", pa.Table.from_pylist(table_rows, schema=HEADS_SCHEMA))
    gated = [t for t, g in gates.items() if g.passed]
    context.log.info(f"student_heads {model_version}: {len(labels['gemma'])} gemma / {len(labels['codex'])} codex training labels; "
                     f"{len(gated)} of {len(gates)} codex heads pass the support gate ({gated or 'none'}): the others carry scores, no decision")
    return dg.MaterializeResult(
        metadata=table_metadata(
            HEADS_SCHEMA, n, [r for r in table_rows if r["teacher"] == "codex"],
            ["target", "status", "positives", "weighted_rate", "gate_reason"],
            model_version=model_version, model_file=str(path),
            training_labels_gemma=len(labels["gemma"]), training_labels_codex=len(labels["codex"]),
            heads_with_decisions=len(gated), heads_scores_only=len(gates) - len(gated),
        )
    )


PRED_SCHEMA = pa.schema(
    [("id", pa.string()), ("model_version", pa.string()),
     ("candidate_categories", pa.list_(pa.string())), ("consensus_categories", pa.list_(pa.string())),
     ("category_scores_codex", pa.list_(pa.float64())), ("category_scores_gemma", pa.list_(pa.float64()))]
    + [pa.field(f"{t}_{s}", pa.bool_()) for t in ("about_ca_system", "about_ca_topic") for s in ("candidate", "consensus")]
    + [pa.field(f"{t}_score_{s}", pa.float64()) for t in ("about_ca_system", "about_ca_topic") for s in ("codex", "gemma")]
    + [f for t in CATEGORICAL_TARGETS for f in (
        pa.field(f"{t}_scores_codex", pa.list_(pa.float64())), pa.field(f"{t}_scores_gemma", pa.list_(pa.float64())),
        pa.field(f"{t}_codex", pa.string()), pa.field(f"{t}_gemma", pa.string()),
        pa.field(f"{t}_candidate", pa.string()), pa.field(f"{t}_consensus", pa.string()))]
    + [pa.field("teacher_disagreement_score", pa.float64()), pa.field("threshold_uncertainty_score", pa.float64()),
       pa.field("prediction_status", pa.string()), pa.field("gemma_label_status", pa.string())]
)


@dg.asset(group_name="scoring", kinds={"python", "parquet"}, code_version="1", owners=["team:metacan"], deps=[student_heads])
def predictions(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """Hybrid predictions for every frame work (SPEC section 6).

    Scores of both teachers' heads; codex decisions by quota calibration on gated heads only
    (``k = round(design-weighted codex rate x works scored)``, top k by score desc, id asc);
    ``candidate`` = codex decision OR gemma direct label, ``consensus`` = AND; categorical candidate =
    gemma's value, consensus = that value when the gated codex argmax agrees;
    ``teacher_disagreement_score``, ``threshold_uncertainty_score``; every row
    ``prediction_status = machine_predicted_unvalidated``. Output: ``warehouse/predictions``.
    """
    heads_table = storage.read_table("student_heads").to_pylist()
    model_version = heads_table[0]["model_version"] if heads_table else None
    if model_version is None:
        raise ValueError("student_heads is empty: materialize student_heads first")
    bundle = joblib.load(_model_path(storage, model_version))
    frame_rows = storage.read_table("frame", ["id", "title_text", "venue_name", "topic", "field", "type", "language"]).to_pylist()
    ids = [r["id"] for r in frame_rows]
    X = bundle["vectorizer"].transform([student_text(r) for r in frame_rows])
    heads, gates = bundle["heads"], bundle["gates"]
    scores = {t: {target: heads[t][target].score(X) for target in (*BINARY_TARGETS, *CATEGORICAL_TARGETS)} for t in TEACHERS}
    gemma = {r["work_id"]: r for r in storage.read_table("direct_labels_gemma").to_pylist()}
    decisions: dict[str, frozenset[str]] = {}
    quotas = {}
    for target in BINARY_TARGETS:
        if gates[target].passed:
            q = quota_calibrate(ids, scores["codex"][target], heads["codex"][target].rate)
            quotas[target] = q
            decisions[target] = q.positive_ids
    out = []
    for i, wid in enumerate(ids):
        g = gemma.get(wid)
        g_ok = g is not None and g["status"] == "labelled"
        g_cats = set(g["categories"] or []) if g_ok else set()
        row = {"id": wid, "model_version": model_version, "gemma_label_status": g["status"] if g else "missing"}
        codex_cats = {c for c in CATEGORIES if c in decisions and wid in decisions[c]}
        row["candidate_categories"] = [c for c in CATEGORIES if c in codex_cats or c in g_cats]
        row["consensus_categories"] = [c for c in CATEGORIES if c in codex_cats and c in g_cats]
        row["category_scores_codex"] = [float(scores["codex"][c][i]) for c in CATEGORIES]
        row["category_scores_gemma"] = [float(scores["gemma"][c][i]) for c in CATEGORIES]
        for t in ("about_ca_system", "about_ca_topic"):
            g_val = bool(g.get(t)) if g_ok and g.get(t) is not None else False
            c_val = t in decisions and wid in decisions[t]
            row[f"{t}_candidate"], row[f"{t}_consensus"] = c_val or g_val, c_val and g_val
            row[f"{t}_score_codex"], row[f"{t}_score_gemma"] = float(scores["codex"][t][i]), float(scores["gemma"][t][i])
        for t, classes in CATEGORICAL_TARGETS.items():
            cs, gs = scores["codex"][t][i], scores["gemma"][t][i]
            codex_val = classes[int(np.argmax(cs))] if gates[t].passed else None
            gemma_val = g.get(t) if g_ok else None
            row.update({f"{t}_scores_codex": [float(x) for x in cs], f"{t}_scores_gemma": [float(x) for x in gs],
                        f"{t}_codex": codex_val, f"{t}_gemma": gemma_val, f"{t}_candidate": gemma_val,
                        f"{t}_consensus": gemma_val if gemma_val is not None and codex_val == gemma_val else None})
        if g_ok:
            g_bin = {t: (t in g_cats) if t in CATEGORIES else bool(g.get(t)) for t in BINARY_TARGETS}
            row["teacher_disagreement_score"] = max(abs(float(scores["codex"][t][i]) - float(g_bin[t])) for t in BINARY_TARGETS)
        else:
            row["teacher_disagreement_score"] = None
        row["threshold_uncertainty_score"] = max(
            (threshold_uncertainty(float(scores["codex"][t][i]), q.threshold) for t, q in quotas.items() if q.threshold is not None),
            default=0.0)
        row["prediction_status"] = PREDICTION_STATUS
        out.append(row)
    n = storage.write_table("predictions", pa.Table.from_pylist(out, schema=PRED_SCHEMA))
    cand = Counter(c for r in out for c in r["candidate_categories"])
    cons = Counter(c for r in out for c in r["consensus_categories"])
    context.log.info(f"predictions {model_version}: {n} works scored; {len(quotas)} gated codex binary heads; "
                     f"candidate {dict(cand)}; consensus {dict(cons)}")
    return dg.MaterializeResult(
        metadata=table_metadata(
            PRED_SCHEMA, n, out, ["id", "candidate_categories", "consensus_categories", "teacher_disagreement_score"],
            model_version=model_version, works_scored=n,
            gated_binary_heads=dg.MetadataValue.json({t: {"k": q.k, "threshold": q.threshold, "boundary_id": q.boundary_id} for t, q in quotas.items()}),
            candidate_by_category=counts_markdown(dict(cand), "category"),
            consensus_by_category=counts_markdown(dict(cons), "category"),
        )
    )


MACHINE_SCHEMA = pa.schema(
    [("id", pa.string()), ("score_gemma", pa.float64()), ("score_codex", pa.float64()), ("score_spread", pa.float64()),
     ("validation_status", pa.string()), ("provisional", pa.bool_()), ("baseline", pa.bool_()),
     ("maturity_gate_passed", pa.bool_()), ("rounds_run", pa.int32()), ("arm_status", pa.string()), ("note", pa.string())]
)
MACHINE_NOTE = "Baseline scores from an immature model (maturity gate not passed, {rounds} training round{s}). Scores rank; they never assert a category."


@dg.asset(group_name="scoring", kinds={"python", "scikitlearn", "parquet"}, code_version="1", owners=["team:metacan"],
          deps=[direct_labels_gemma, direct_labels_codex])
def machine_scores(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """Active-learning student scores, one round (SPEC section 7).

    One TF-IDF + logistic-regression arm per teacher on the ``metaresearch`` target; ``score_<arm>``
    per frame work, ``score_spread`` = max - min over arms. With one round the maturity gate (5
    rounds of AP gain < 2%, churn < 0.05 and Spearman rho > 0.98 for 3 rounds) cannot pass, so every row
    is ``score_only:v0-immature-baseline``: scores rank, they assert nothing.
    """
    frame_rows = storage.read_table("frame", ["id", "title_text", "venue_name", "venue_id", "topic", "field", "type", "language"]).to_pylist()
    texts = {r["id"]: student_text(r) for r in frame_rows}
    venue = {r["id"]: r["venue_id"] or f"no-venue:{r['id']}" for r in frame_rows}
    weights = {r["id"]: r["design_weight"] for r in storage.read_table("sample_design", ["id", "design_weight"]).to_pylist()}
    vectorizer = make_features().fit(list(texts.values()) or [""])
    X_all = vectorizer.transform([texts[r["id"]] for r in frame_rows])
    arm_scores, arm_status = {}, {}
    for teacher in TEACHERS:
        rows = [r for r in _training_rows(storage, teacher) if r["work_id"] in texts]
        X = vectorizer.transform([texts[r["work_id"]] for r in rows])
        y = np.array([_target_value(r, "metaresearch") for r in rows], dtype=int)
        w = np.array([weights.get(r["work_id"], 1.0) if teacher == "codex" else 1.0 for r in rows])
        head = fit_binary("metaresearch", X, y, w, [venue[r["work_id"]] for r in rows])
        arm_scores[teacher] = head.score(X_all)
        arm_status[teacher] = head.status
    rounds = 1
    note = MACHINE_NOTE.format(rounds=rounds, s="" if rounds == 1 else "s")
    status_text = "; ".join(f"{t}: {s}" for t, s in arm_status.items())
    out = []
    for i, r in enumerate(frame_rows):
        s = {t: float(arm_scores[t][i]) for t in TEACHERS}
        out.append({"id": r["id"], "score_gemma": s["gemma"], "score_codex": s["codex"],
                    "score_spread": max(s.values()) - min(s.values()), "validation_status": SCORE_ONLY_IMMATURE,
                    "provisional": True, "baseline": True, "maturity_gate_passed": False, "rounds_run": rounds,
                    "arm_status": status_text, "note": note})
    n = storage.write_table("machine_scores", pa.Table.from_pylist(out, schema=MACHINE_SCHEMA))
    context.log.info(f"machine_scores: {n} works, 1 round, arms {arm_status}")
    return dg.MaterializeResult(
        metadata=table_metadata(MACHINE_SCHEMA, n, sorted(out, key=lambda r: -r["score_spread"]),
                                ["id", "score_gemma", "score_codex", "score_spread", "validation_status"],
                                rounds_run=rounds, maturity_gate_passed=False, arms=dg.MetadataValue.json(arm_status))
    )
