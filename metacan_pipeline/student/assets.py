"""Student assets: ``student_heads``, ``predictions`` (SPEC section 6) and ``machine_scores`` (SPEC section 7).

``student_heads`` trains, per teacher, 11 binary and 3 categorical heads on the title-only view,
excluding every work of a held-out venue (:mod:`.holdout`), evaluates them on the frozen holdout
(:mod:`.evaluation`), applies the support gate, and publishes the result as an immutable model version
(:mod:`.models`). ``predictions`` scores every frame work in batches (:mod:`.scoring`) and derives
quota-calibrated decisions, candidate and consensus in DuckDB.
"""

import datetime as dt
import hashlib
import json

import dagster as dg
import duckdb
import numpy as np
import pyarrow as pa
from pydantic import Field

from .. import __version__
from ..meta import counts_markdown, png_markdown, table_metadata
from ..sampling.assets import sample_design
from ..storage import MetacanStorage
from ..tables.student import HEADS_SCHEMA, MACHINE_SCHEMA, PRED_SCHEMA, THRESHOLDS_SCHEMA, TRAINING_SET_SCHEMA
from ..teachers.assets import direct_labels_codex, direct_labels_gemma
from ..vocab import BINARY_TARGETS, CATEGORICAL_TARGETS, CATEGORIES
from .calibration import GateResult, quota_calibrate, support_gate
from .evaluation import binary_metrics, categorical_metrics, reliability_png
from .features import FEATURE_KINDS, STUDENT_FIELDS, make_features, transform
from .heads import (
    PARAMS,
    fit_binary,
    fit_categorical,
    kish_ess,
    run_fits,
    weighted_rate,
)
from .holdout import HOLDOUT_VERSION, freeze_holdout, venue_held_out, venue_key
from .models import load_published, model_path, publish
from .rounds import (
    ACTIVE_BATCH,
    ARMS,
    fit_arms,
    maturity_gate,
    propose_next_batch,
    round_history,
    status_for,
    training_signature,
)
from .scoring import (
    BATCH_SIZE,
    prediction_batches,
    score_batches,
    scratch_connection,
    student_texts,
)

STUDENT_CODE_VERSION = "student-v2"
MODEL_MAJOR = 0
TEACHERS = ("codex", "gemma")


class StudentConfig(dg.Config):
    """Launchpad settings of ``student_heads``."""

    features: str = Field(
        default="tfidf",
        description=f"Feature backend of every head: one of {', '.join(FEATURE_KINDS)} "
        "(tfidf: word 1-2 gram TF-IDF; minilm: all-MiniLM-L6-v2 sentence embeddings).",
    )


def target_value(label: dict, target: str) -> int | None:
    """A direct label's 0/1 value on a binary target (a category's membership, or an about_ca flag)."""
    if target in CATEGORIES:
        return int(target in (label["categories"] or []))
    v = label.get(target)
    return None if v is None else int(bool(v))


def teacher_call_labels(storage: MetacanStorage, teacher: str) -> list[dict]:
    """Labelled teacher-call rows of one teacher (rule labels, imports and failures are not training data)."""
    rows = storage.read_table(f"direct_labels_{teacher}").to_pylist()
    newest: dict[str, dict] = {}  # one label per work, the newest (as predictions read gemma's): a work counts once
    for r in sorted(rows, key=lambda r: (r["created_at"] or dt.datetime.min, r["label_id"] or "")):
        if r["status"] == "labelled" and r["source"] == "teacher_call":
            newest[r["work_id"]] = r
    return [r for r in rows if newest.get(r["work_id"]) is r]  # the table's order (the fits depend on row order)


def model_version_for(labels: dict[str, list[dict]], weights: dict[str, float], feature_kind: str) -> str:
    """``metacan-v<major>-hybrid-<12 hex>``: SHA-256 of the code version, parameters, feature backend,
    holdout definition, and every label (teacher, work, label id, design weight) (SPEC section 6)."""
    h = hashlib.sha256()
    h.update(f"{__version__}/{STUDENT_CODE_VERSION}/{feature_kind}/{HOLDOUT_VERSION}".encode())
    h.update(json.dumps(PARAMS, sort_keys=True, default=str).encode())
    for teacher in TEACHERS:
        for r in sorted(labels[teacher], key=lambda r: r["work_id"]):
            h.update(
                json.dumps([teacher, r["work_id"], r["label_id"], weights.get(r["work_id"], 1.0)], default=str).encode()
            )
    return f"metacan-v{MODEL_MAJOR}-hybrid-{h.hexdigest()[:12]}"


def frame_rows_for(storage: MetacanStorage, ids: set[str]) -> dict[str, dict]:
    """``{id: {venue_id, texts fields}}`` of the frame works in ``ids`` (a DuckDB semi join over the frame's files)."""
    wanted = pa.table({"id": sorted(ids)})  # noqa: F841 (DuckDB replacement scan)
    with scratch_connection(storage) as con:
        table = con.execute(
            f"SELECT f.id, f.venue_id, {', '.join('f.' + c for c in STUDENT_FIELDS)} "
            "FROM frame f SEMI JOIN wanted USING (id)"
        ).to_arrow_table()
    texts = student_texts(table)
    return {
        wid: {"venue_key": venue_key(wid, vid), "text": t}
        for wid, vid, t in zip(
            table.column("id").to_pylist(), table.column("venue_id").to_pylist(), texts, strict=False
        )
    }


def _frame_venues(storage: MetacanStorage):
    for b in storage.iter_batches("frame", columns=["id", "venue_id"]):
        yield from zip(b.column("id").to_pylist(), b.column("venue_id").to_pylist(), strict=False)


def train_bundle(
    model_version: str,
    feature_kind: str,
    train: dict[str, list[dict]],
    texts: dict[str, str],
    weights: dict[str, np.ndarray],
) -> dict:
    """Fit the feature backend on the training texts and every head of both teachers (the heads side by
    side in worker processes when the training set is large enough to pay: :func:`~.heads.run_fits`).

    ``train[teacher]``: training label rows (never a holdout work); ``weights[teacher]``: one training
    weight per row. Returns the bundle that :func:`~.models.publish` stores.
    """
    train_texts = sorted({texts[r["work_id"]] for t in TEACHERS for r in train[t]})
    if not train_texts:
        raise ValueError(
            "student_heads: nothing to train on: no labelled teacher call of a frame work outside the holdout in "
            f"{', '.join(f'direct_labels_{t}' for t in TEACHERS)} (is the frame empty, or did every call fail?); "
            "materialize frame and the teachers first"
        )
    vectorizer = make_features(feature_kind).fit(train_texts)
    fits: dict[tuple[str, str], tuple] = {}  # (teacher, target) -> (fit function, arguments), in head order
    for teacher in TEACHERS:
        rows, w = train[teacher], weights[teacher]
        X = transform(vectorizer, [texts[r["work_id"]] for r in rows])
        for target in BINARY_TARGETS:
            idx = [i for i, r in enumerate(rows) if target_value(r, target) is not None]
            y = np.array([target_value(rows[i], target) for i in idx], dtype=int)
            fits[teacher, target] = (fit_binary, (target, X[idx], y, w[idx]))
        for target, classes in CATEGORICAL_TARGETS.items():
            fits[teacher, target] = (fit_categorical, (target, classes, X, [r.get(target) for r in rows], w))
    # the multi-class fits take most of the time: hand them out first
    order = sorted(fits, key=lambda k: k[1] not in CATEGORICAL_TARGETS)
    fitted = dict(zip(order, run_fits([fits[k] for k in order], sum(len(train[t]) for t in TEACHERS)), strict=False))
    heads: dict[str, dict] = {teacher: {} for teacher in TEACHERS}
    for teacher, target in fits:
        heads[teacher][target] = fitted[teacher, target]
    return {
        "model_version": model_version,
        "feature_kind": feature_kind,
        "vectorizer": vectorizer,
        "heads": heads,
        "training_ids": {t: [r["work_id"] for r in train[t]] for t in TEACHERS},
        "holdout_version": HOLDOUT_VERSION,
    }


def _gates(labels: dict[str, list[dict]], weights: dict[str, float], heads: dict) -> dict[str, GateResult]:
    """SPEC section 6 support gate of every codex head, on all labels of both teachers."""
    gates = {}
    for target in (*BINARY_TARGETS, *CATEGORICAL_TARGETS):
        if target in CATEGORICAL_TARGETS:
            has = {t: [r for r in labels[t] if r.get(target) is not None] for t in TEACHERS}
        else:
            has = {t: [r for r in labels[t] if target_value(r, target) == 1] for t in TEACHERS}
        pos_w = np.array([weights.get(r["work_id"], 1.0) for r in has["codex"]])
        gate = support_gate(len(has["gemma"]), len(has["codex"]), kish_ess(pos_w))
        if gate.passed and heads["codex"][target].status != "trained":
            gate = GateResult(
                False, gate.gemma_positives, gate.codex_positives, gate.kish_ess_positive, "codex head is constant"
            )
        gates[target] = gate
    return gates


@dg.asset(
    group_name="scoring",
    kinds={"python", "scikitlearn", "parquet"},
    code_version="2",
    owners=["team:metacan"],
    deps=[direct_labels_gemma, direct_labels_codex, sample_design],
)
def student_heads(
    context: dg.AssetExecutionContext, config: StudentConfig, storage: MetacanStorage
) -> dg.MaterializeResult:
    """Per teacher, 11 binary and 3 categorical student heads on the title-only view (SPEC section 6).

    Training data: gemma's labelled teacher calls (unweighted, a census) and codex's on the
    design-weighted sample (weights ``1/pi`` from ``sample_design``), minus every work of a held-out
    venue (:mod:`.holdout`). Features: ``config.features`` (TF-IDF by default), fitted on the training
    texts. A head whose labels hold one class is a constant head (its rate, ranks nothing).

    Metrics per head, on the frozen holdout's labelled works only (codex: design-weighted): positives,
    Kish effective sample size of the positive weights, AP, AUROC, expected calibration error (binary),
    top-1 accuracy and ECE (categorical), and a reliability plot per teacher (PNG, in the metadata and
    under ``data/reports/<model_version>/``). Support gate: both teachers >= 20 positives and Kish ESS >= 10.
    The decision rate of a gated head (for quota calibration) is the design-weighted codex rate over all
    its sample labels.

    Output: table ``student_heads`` (one row per teacher and head, :data:`HEADS_SCHEMA`), table
    ``student_training_set`` (which works trained which teacher's heads), and the model file
    ``data/models/<model_version>.joblib``, published once and immutable (:mod:`.models`): a
    re-materialization with the same labels reuses it and recomputes only the metrics.
    """
    run_id = context.run.run_id
    design = {r["id"]: r for r in storage.read_table("sample_design", ["id", "in_sample", "design_weight"]).to_pylist()}
    bad = sorted(
        w
        for w, r in design.items()
        if r["in_sample"]
        and not (r["design_weight"] is not None and np.isfinite(r["design_weight"]) and r["design_weight"] > 0)
    )
    if bad:
        raise ValueError(
            f"sample_design: {len(bad)} in-sample work(s) without a valid design_weight (NULL, NaN or <= 0; SPEC section 5: "
            f"1/pi), e.g. {bad[:5]}: re-materialize sample_design"
        )
    weights = {wid: r["design_weight"] for wid, r in design.items()}
    labels = {t: teacher_call_labels(storage, t) for t in TEACHERS}
    labels["codex"] = [r for r in labels["codex"] if design.get(r["work_id"], {}).get("in_sample")]
    frame_info = frame_rows_for(storage, {r["work_id"] for t in TEACHERS for r in labels[t]})
    labels = {t: [r for r in rows if r["work_id"] in frame_info] for t, rows in labels.items()}
    texts = {wid: info["text"] for wid, info in frame_info.items()}
    holdout, newly = freeze_holdout(storage, _frame_venues(storage), run_id)
    if newly:
        context.log.info(f"holdout frozen now: {len(holdout)} frame works of held-out venues ({HOLDOUT_VERSION})")

    model_version = model_version_for(labels, weights, config.features)
    bundle = load_published(storage, model_version)
    reused = bundle is not None
    if bundle is None:
        # out of training: the frozen set (even when a work's venue changed since) and every held-out venue
        train = {
            t: [
                r
                for r in labels[t]
                if r["work_id"] not in holdout and not venue_held_out(frame_info[r["work_id"]]["venue_key"])
            ]
            for t in TEACHERS
        }
        train_w = {
            t: np.array([weights.get(r["work_id"], 1.0) if t == "codex" else 1.0 for r in train[t]]) for t in TEACHERS
        }
        bundle = train_bundle(model_version, config.features, train, texts, train_w)
        bundle["gates"] = _gates(labels, weights, bundle["heads"])
        codex_w = np.array([weights.get(r["work_id"], 1.0) for r in labels["codex"]])
        # the rate over the labels that carry the target (an absent about_ca value is unknown, not a 0)
        known = {
            t: np.array([target_value(r, t) is not None for r in labels["codex"]], dtype=bool) for t in BINARY_TARGETS
        }
        bundle["rates"] = {
            t: weighted_rate(np.array([target_value(r, t) or 0 for r in labels["codex"]])[known[t]], codex_w[known[t]])
            if len(codex_w)
            else 0.0
            for t in BINARY_TARGETS
        }
        publish(
            storage,
            bundle,
            kind="hybrid",
            run_id=run_id,
            feature_kind=config.features,
            summary={"training_labels": {t: len(v) for t, v in train.items()}, "holdout_version": HOLDOUT_VERSION},
        )
    else:
        context.log.info(
            f"model version {model_version} is already published: loaded, not retrained (a version is immutable)"
        )
    gates, heads = bundle["gates"], bundle["heads"]

    # metrics: the frozen holdout's labelled works, every head
    table_rows, curves = [], {t: {} for t in TEACHERS}
    for teacher in TEACHERS:
        ev = [r for r in labels[teacher] if r["work_id"] in holdout]
        X = bundle["vectorizer"].transform([texts[r["work_id"]] for r in ev]) if ev else None
        w_ev = np.array([weights.get(r["work_id"], 1.0) if teacher == "codex" else 1.0 for r in ev])
        w_all = np.array([weights.get(r["work_id"], 1.0) if teacher == "codex" else 1.0 for r in labels[teacher]])
        for target in (*BINARY_TARGETS, *CATEGORICAL_TARGETS):
            h, gate = heads[teacher][target], gates[target]
            row = {
                "model_version": model_version,
                "teacher": teacher,
                "target": target,
                "status": h.status,
                "n_train": h.n_train,
                "gate_passed": gate.passed if teacher == "codex" else None,
                "gate_reason": gate.reason if teacher == "codex" else None,
            }
            if target in BINARY_TARGETS:
                y_all = np.array([target_value(r, target) or 0 for r in labels[teacher]])
                keep = [i for i, r in enumerate(ev) if target_value(r, target) is not None]
                y = np.array([target_value(ev[i], target) for i in keep], dtype=int)
                m = binary_metrics(y, h.score(X[keep]) if keep else np.array([]), w_ev[keep])
                curves[teacher][target] = m["bins"] if m["ap"] is not None else []
                row.update(
                    kind="binary",
                    labels=len(y_all),
                    positives=int(y_all.sum()),
                    train_positives=h.positives,
                    weighted_rate=weighted_rate(y_all, w_all),
                    kish_ess_positive=kish_ess(w_all[y_all == 1]),
                    holdout_n=m["n"],
                    holdout_positives=m["positives"],
                    ap=m["ap"],
                    auroc=m["auroc"],
                    ece=m["ece"],
                    metric_note=m["note"],
                )
            else:
                keep = [i for i, r in enumerate(ev) if r.get(target) is not None]
                m = categorical_metrics(
                    [ev[i][target] for i in keep], h.score(X[keep]) if keep else np.zeros((0, 1)), h.classes, w_ev[keep]
                )
                n_lab = sum(1 for r in labels[teacher] if r.get(target) is not None)
                row.update(
                    kind="categorical",
                    labels=n_lab,
                    positives=n_lab,
                    holdout_n=m["n"],
                    accuracy=m["accuracy"],
                    ece=m["ece"],
                    metric_note=m["note"],
                )
            table_rows.append(row)

    n = storage.write_table("student_heads", pa.Table.from_pylist(table_rows, schema=HEADS_SCHEMA))
    storage.write_table(
        "student_training_set",
        pa.Table.from_pylist(
            [
                {
                    "model_version": model_version,
                    "teacher": t,
                    "work_id": wid,
                    "venue_key": frame_info[wid]["venue_key"],
                }
                for t in TEACHERS
                for wid in bundle["training_ids"][t]
            ],
            schema=TRAINING_SET_SCHEMA,
        ),
        schema=TRAINING_SET_SCHEMA,
    )
    report_dir = storage.root / "reports" / model_version
    report_dir.mkdir(parents=True, exist_ok=True)
    plots = {}
    for teacher in TEACHERS:
        png = reliability_png(curves[teacher], f"{teacher} heads on the frozen holdout, {model_version}")
        (report_dir / f"reliability_{teacher}.png").write_bytes(png)
        plots[f"reliability_plot_{teacher}"] = png_markdown(png, f"reliability of the {teacher} heads")
    gated = [t for t, g in gates.items() if g.passed]
    context.log.info(
        f"student_heads {model_version} ({'reused' if reused else 'trained'}, {bundle['feature_kind']}): "
        f"{len(bundle['training_ids']['gemma'])} gemma / {len(bundle['training_ids']['codex'])} codex training labels, "
        f"{len(holdout)} frozen holdout works; {len(gated)} of {len(gates)} codex heads pass the support gate "
        f"({gated or 'none'}): the others carry scores, no decision"
    )
    return dg.MaterializeResult(
        metadata=table_metadata(
            HEADS_SCHEMA,
            n,
            table_rows,
            ["teacher", "target", "positives", "holdout_n", "ap", "auroc", "ece", "gate_passed"],
            model_version=model_version,
            model_file=dg.MetadataValue.path(str(model_path(storage, model_version))),
            model_reused=reused,
            feature_backend=bundle["feature_kind"],
            holdout_version=HOLDOUT_VERSION,
            frozen_holdout_works=len(holdout),
            training_labels_gemma=len(bundle["training_ids"]["gemma"]),
            training_labels_codex=len(bundle["training_ids"]["codex"]),
            heads_with_decisions=len(gated),
            heads_scores_only=len(gates) - len(gated),
            **plots,
        )
    )


def current_model_version(storage: MetacanStorage) -> str:
    """The model version of the last ``student_heads`` materialization. Raises ValueError when there is none."""
    rows = storage.read_table("student_heads", ["model_version"]).column("model_version").unique().to_pylist()
    if not rows:
        raise ValueError("student_heads is empty: materialize student_heads first")
    return rows[0]


def write_predictions(
    storage: MetacanStorage, bundle: dict, batch_size: int = BATCH_SIZE, log=None, progress: bool = True
) -> tuple[int, list[dict]]:
    """Score the frame with ``bundle`` and write ``student_scores``, ``predictions`` and
    ``prediction_thresholds``; returns (works predicted, threshold rows). Memory: one batch of works."""
    model_version, gates, rates = bundle["model_version"], bundle["gates"], bundle["rates"]
    storage.write_table("student_scores", score_batches(storage, bundle, batch_size, progress=progress, log=log))
    with scratch_connection(storage) as con:
        quotas = {
            t: quota_calibrate(con, "student_scores", f'"codex__{t}"', rates[t], t)
            for t in BINARY_TARGETS
            if gates[t].passed
        }
        n_scored = con.execute("SELECT count(*) FROM student_scores").fetchone()[0]
        thresholds = [
            {
                "model_version": model_version,
                "target": t,
                "gate_passed": gates[t].passed,
                "gate_reason": gates[t].reason,
                "rate": rates[t],
                "n": n_scored,
                **(
                    {k: v for k, v in quotas[t].as_dict().items() if k in ("k", "threshold", "boundary_id")}
                    if t in quotas
                    else {"k": None, "threshold": None, "boundary_id": None}
                ),
            }
            for t in BINARY_TARGETS
        ]
        n = storage.write_table(
            "predictions",
            prediction_batches(
                con, storage, model_version, quotas, {t: g.passed for t, g in gates.items()}, batch_size
            ),
            schema=PRED_SCHEMA,
        )
    storage.write_table("prediction_thresholds", pa.Table.from_pylist(thresholds, schema=THRESHOLDS_SCHEMA))
    return n, thresholds


@dg.asset(
    group_name="scoring",
    kinds={"python", "duckdb", "parquet"},
    code_version="2",
    owners=["team:metacan"],
    deps=[student_heads],
)
def predictions(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """Hybrid predictions for every frame work (SPEC section 6), in batches of 50,000 works.

    Scores of both teachers' heads (``student_scores``); codex decisions by quota calibration on gated
    heads only (``k = round(design-weighted codex rate x works scored)``, top k by score desc, id asc; the
    threshold and boundary id of every gated head in ``prediction_thresholds`` and the metadata);
    ``candidate`` = codex decision OR gemma direct label, ``consensus`` = AND; categorical candidate =
    gemma's value, consensus = that value when the gated codex argmax agrees;
    ``teacher_disagreement_score`` = max over the 11 binary targets of |codex score - gemma label|,
    ``threshold_uncertainty_score`` = max over gated codex heads of clamp01(1 - |s - t| / (t if s < t else
    1 - t)); every row ``prediction_status = machine_predicted_unvalidated``. Output: ``warehouse/predictions``
    (:data:`PRED_SCHEMA`). Raises ValueError without ``student_heads`` and
    :class:`~.models.ModelVersionError` when the published model file is missing or altered.
    """
    model_version = current_model_version(storage)
    bundle = load_published(storage, model_version)
    if bundle is None:
        raise ValueError(
            f"model version {model_version} (table student_heads) is not in model_versions: materialize student_heads again"
        )
    n, thresholds = write_predictions(storage, bundle, log=context.log)
    with duckdb.connect() as con:
        pattern = str(storage.table_dir("predictions") / "*.parquet")
        cand = dict(
            con.execute(
                "SELECT c, count(*) FROM (SELECT unnest(candidate_categories) c FROM read_parquet(?)) GROUP BY c",
                [pattern],
            ).fetchall()
        )
        cons = dict(
            con.execute(
                "SELECT c, count(*) FROM (SELECT unnest(consensus_categories) c FROM read_parquet(?)) GROUP BY c",
                [pattern],
            ).fetchall()
        )
        preview = con.execute("SELECT * FROM read_parquet(?) LIMIT 5", [pattern]).to_arrow_table().to_pylist()
    gated = {r["target"]: {k: r[k] for k in ("k", "threshold", "boundary_id")} for r in thresholds if r["gate_passed"]}
    context.log.info(
        f"predictions {model_version}: {n} works scored; {len(gated)} gated codex binary heads; "
        f"candidate {cand}; consensus {cons}"
    )
    return dg.MaterializeResult(
        metadata=table_metadata(
            PRED_SCHEMA,
            n,
            preview,
            ["id", "candidate_categories", "consensus_categories", "teacher_disagreement_score"],
            model_version=model_version,
            works_scored=n,
            gated_binary_heads=dg.MetadataValue.json(gated),
            candidate_by_category=counts_markdown(cand, "category"),
            consensus_by_category=counts_markdown(cons, "category"),
        )
    )


class MachineRoundConfig(dg.Config):
    """Launchpad settings of ``machine_scores``: the size of the next teacher batch each round proposes."""

    next_batch_spread: int = Field(default=10, ge=0, description="Works with the largest arm spread.")
    next_batch_uncertain: int = Field(default=10, ge=0, description="Works whose mean arm score is closest to 0.5.")
    next_batch_sentinels: int = Field(
        default=5, ge=0, description="Random works (salted hash order): sentinels against a drifting loop."
    )


def _machine_batches(
    storage: MetacanStorage, bundle: dict, status: str, note: str, rounds: int, arm_status: str, gate_passed: bool, log
):
    for b in score_batches(storage, bundle, log=log):
        g, c = b.column("gemma__metaresearch"), b.column("codex__metaresearch")
        n = b.num_rows
        yield pa.RecordBatch.from_pydict(
            {
                "id": b.column("id"),
                "score_gemma": g,
                "score_codex": c,
                "score_spread": pa.array(np.abs(np.asarray(g) - np.asarray(c))),
                "validation_status": pa.array([status] * n, pa.string()),
                "provisional": pa.array([not gate_passed] * n),
                "baseline": pa.array([not gate_passed] * n),
                "maturity_gate_passed": pa.array([gate_passed] * n),
                "rounds_run": pa.array([rounds] * n, pa.int32()),
                "arm_status": pa.array([arm_status] * n, pa.string()),
                "note": pa.array([note] * n, pa.string()),
                "held_out": b.column("held_out"),
            },
            schema=MACHINE_SCHEMA,
        )


@dg.asset(
    group_name="scoring",
    kinds={"python", "scikitlearn", "parquet"},
    code_version="2",
    owners=["team:metacan"],
    deps=[direct_labels_gemma, direct_labels_codex, sample_design],
)
def machine_scores(
    context: dg.AssetExecutionContext, config: MachineRoundConfig, storage: MetacanStorage
) -> dg.MaterializeResult:
    """Active-learning student scores; each materialization with new teacher labels is one round (SPEC section 7).

    One TF-IDF + logistic-regression arm per teacher on ``metaresearch`` (:mod:`.rounds`), trained outside
    the held-out venues; ``score_<arm>`` per frame work (in batches) and ``score_spread`` = max - min over
    arms. The maturity gate (AP gain < 2% over 5 rounds, churn < 0.05 and Spearman rho > 0.98 for 3 rounds
    running, all on the frozen holdout) sets ``validation_status`` (``score_only:mature`` or
    ``score_only:v0-immature-baseline``) and ``rounds_run``; scores never assert a category. A new round
    proposes the next teacher batch (``label_batches``, batch ``active_learning``; table
    ``machine_round_proposals``). Tables: ``warehouse/machine_scores`` (:data:`~.rounds.MACHINE_SCHEMA`),
    ``machine_rounds`` and ``machine_round_scores`` in DuckDB.
    """
    run_id = context.run.run_id
    labels = {a: teacher_call_labels(storage, a) for a in ARMS}
    frame_info = frame_rows_for(storage, {r["work_id"] for a in ARMS for r in labels[a]})
    holdout, _ = freeze_holdout(storage, _frame_venues(storage), run_id)
    train = {
        a: [
            r
            for r in labels[a]
            if r["work_id"] in frame_info
            and r["work_id"] not in holdout
            and not venue_held_out(frame_info[r["work_id"]]["venue_key"])
        ]
        for a in ARMS
    }
    signature = training_signature(train)
    with storage.connect() as con:
        last = con.execute(
            "SELECT round, training_signature FROM machine_rounds ORDER BY round DESC LIMIT 1"
        ).fetchone()
    new_round = last is None or last[1] != signature
    round_no = (last[0] + 1 if last else 1) if new_round else last[0]
    bundle = fit_arms(train, {wid: info["text"] for wid, info in frame_info.items()})
    if new_round:
        hold_info = frame_rows_for(storage, holdout)
        hold_ids = sorted(hold_info)
        X = bundle["vectorizer"].transform([hold_info[w]["text"] for w in hold_ids]) if hold_ids else None
        rows = [
            (round_no, a, w, float(s))
            for a in ARMS
            for w, s in zip(hold_ids, bundle["heads"][a]["metaresearch"].score(X) if hold_ids else [], strict=False)
        ]
        with storage.connect() as con:
            con.execute("DELETE FROM machine_round_scores WHERE round = ?", [round_no])
            if rows:
                con.executemany("INSERT INTO machine_round_scores VALUES (?, ?, ?, ?)", rows)
    hold_labels = {
        a: {r["work_id"]: int("metaresearch" in (r["categories"] or [])) for r in labels[a] if r["work_id"] in holdout}
        for a in ARMS
    }
    gate = maturity_gate(round_history(storage), hold_labels)
    status, note = status_for(gate, round_no)
    arm_status = "; ".join(f"{a}: {bundle['heads'][a]['metaresearch'].status}" for a in ARMS)
    n = storage.write_table(
        "machine_scores",
        _machine_batches(storage, bundle, status, note, round_no, arm_status, gate.passed, context.log),
        schema=MACHINE_SCHEMA,
    )
    proposed: list[tuple] = []
    if new_round:
        labelled = pa.table({"id": pa.array(sorted({r["work_id"] for r in labels["codex"]}), pa.string())})
        glob = str(storage.table_dir("machine_scores") / "*.parquet")
        sizes = (config.next_batch_spread, config.next_batch_uncertain, config.next_batch_sentinels)
        with storage.connect() as con:
            proposed = propose_next_batch(
                con,
                glob,
                str(storage.table_dir("sample_design") / "*.parquet"),
                labelled,
                round_no,
                sizes,
                salt=signature,
            )
            # the round and its proposals land together or not at all: a concurrent run that recorded the same
            # round first makes this insert fail on the primary key before any proposal is written twice
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(
                    "INSERT INTO machine_rounds VALUES (?, ?, now(), ?, ?, ?, ?, ?, ?)",
                    [
                        round_no,
                        run_id,
                        signature,
                        json.dumps({a: len(train[a]) for a in ARMS}),
                        json.dumps(gate.series),
                        gate.passed,
                        gate.reason,
                        len(proposed),
                    ],
                )
                if proposed:
                    con.executemany(
                        f"INSERT INTO label_batches VALUES ('{ACTIVE_BATCH}', ?, now(), ?)",
                        [(p[0], f"machine_scores round {round_no}: {p[1]}") for p in proposed],
                    )
                    con.executemany(
                        "INSERT INTO machine_round_proposals VALUES (?, ?, ?, ?, ?, ?)",
                        [(round_no, *p) for p in proposed],
                    )
                con.execute("COMMIT")
            except duckdb.ConstraintException as exc:
                con.execute("ROLLBACK")
                raise RuntimeError(
                    f"machine_scores: round {round_no} was recorded by another run while this one trained; "
                    "materialize machine_scores again (it re-scores and adds a round only for new labels)"
                ) from exc
    context.log.info(
        f"machine_scores: {n} works, round {round_no} ({'new' if new_round else 'no new teacher labels: not a new round'}), "
        f"{status}; gate: {gate.reason}; {len(proposed)} works proposed for the next teacher batch"
    )
    with storage.connect() as con:
        rounds_md = con.execute(
            "SELECT round, created_at, training_labels, maturity_gate_passed, proposed FROM machine_rounds ORDER BY round"
        ).fetchall()
    with duckdb.connect() as con:
        preview = (
            con.execute(
                "SELECT id, score_gemma, score_codex, score_spread, validation_status FROM read_parquet(?) "
                "ORDER BY score_spread DESC, id LIMIT 10",
                [str(storage.table_dir("machine_scores") / "*.parquet")],
            )
            .to_arrow_table()
            .to_pylist()
        )
    return dg.MaterializeResult(
        metadata={
            **table_metadata(
                MACHINE_SCHEMA, n, preview, ["id", "score_gemma", "score_codex", "score_spread", "validation_status"]
            ),
            "rounds_run": round_no,
            "new_round": new_round,
            "validation_status": status,
            "maturity_gate_passed": gate.passed,
            "maturity_gate_reason": gate.reason,
            "frozen_holdout_works": len(holdout),
            "arms": dg.MetadataValue.json({a: bundle["heads"][a]["metaresearch"].status for a in ARMS}),
            "gate_series": dg.MetadataValue.json(gate.series),
            "rounds": dg.MetadataValue.md(
                "| round | at | training labels | gate passed | proposed |\n|---|---|---|---|---|\n"
                + "".join(f"| {r} | {t:%Y-%m-%d %H:%M} | {tl} | {g} | {p} |\n" for r, t, tl, g, p in rounds_md)
            ),
            "next_batch": dg.MetadataValue.md(
                "| work | reason | codex | gemma | spread |\n|---|---|---|---|---|\n"
                + "".join(f"| {w} | {why} | {c:.3f} | {g:.3f} | {s:.3f} |\n" for w, why, c, g, s in proposed)
                if proposed
                else "_(none this run)_"
            ),
        }
    )
