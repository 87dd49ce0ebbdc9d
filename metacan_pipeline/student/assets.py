"""Student assets: ``student_heads``, ``predictions`` (SPEC section 6), ``machine_scores`` (SPEC section 7) and
``prevalence`` (SPEC sections 5-6). Their checks are in :mod:`.checks`.

``student_heads`` trains, per teacher, 11 binary and 3 categorical heads on the title-only view,
excluding every work of a held-out venue (:mod:`.holdout`), evaluates them on the frozen holdout
(:mod:`.evaluation`), applies the support gate, and publishes the result as an immutable model version
(:mod:`.models`); the training itself is :mod:`.training`. ``predictions`` scores every frame work in
batches (:mod:`.scoring`) and derives quota-calibrated decisions, candidate and consensus in DuckDB
(:mod:`.predicting`). ``machine_scores`` runs one active-learning round (:mod:`.rounds`). ``prevalence``
estimates the rate of every category (:mod:`.prevalence`).

Inputs are named by asset key (``direct_labels_<teacher>`` of the census and the sample teacher,
:mod:`.roles`; ``sample_design``): no other stage's assets module is imported. The modules that import
scikit-learn at their top (:mod:`.training`, :mod:`.evaluation`, :mod:`.rounds`) are imported inside the assets
that use them: scikit-learn takes about 4 s to import, and every step process of a run launched from the Dagster UI
imports this module.
"""

import dataclasses
from collections import Counter

import dagster as dg
import pyarrow as pa
from pydantic import Field

from ..fingerprints import inputs_asset
from ..meta import counts_markdown, png_markdown, table_metadata
from ..storage import MetacanStorage
from ..tables.student import (
    HEADS_SCHEMA,
    MACHINE_SCHEMA,
    PRED_SCHEMA,
    PREVALENCE_SCHEMA,
    THRESHOLDS_SCHEMA,
    TRAINING_SET_SCHEMA,
)
from ..teachers.core.registry import TeacherSpec, load_registry
from .distill import DISTILL_ENCODER, TRANSFER_WORKS
from .features import DEFAULT_C_GRID, DEFAULT_FEATURES, FEATURE_KINDS
from .holdout import HOLDOUT_VERSION
from .models import StudentBundle, load_published, model_path
from .predicting import category_counts, current_model_version, scores_metadata, write_predictions
from .prevalence import CENSUS_NO_SAMPLING_ERROR, metaresearch_markdown, prevalence_rows, zero_width_census
from .roles import CENSUS, SAMPLE, direct_labels_key, teacher_standing

#: The teacher registry (one ``direct_labels_<name>`` asset per teacher).
REGISTRY: dict[str, TeacherSpec] = load_registry()

#: What the scoring stage reads from the stages before it: every registry teacher's direct labels, the imported
#: labels (reference sets), the sample design and the teachers' qualification.
SCORING_INPUTS: tuple[str, ...] = (
    *(direct_labels_key(name) for name in REGISTRY),
    "imported_labels",
    "sample_design",
    "teacher_qualification",
)

scoring_inputs = inputs_asset(
    "scoring_inputs",
    "scoring",
    SCORING_INPUTS,
    "What the scoring stage reads, in one place: every teacher's direct labels, the imported labels (reference sets), "
    "the sample design and the teachers' qualification. A row per input table with its row count and a content "
    "fingerprint (run bookkeeping left out). The student, the decisions, the machine scores, the cascade and the "
    "prevalence depend on this one, so the graph shows one edge per input into the scoring group; its data version "
    "changes only when an input's content does. Look at: which inputs changed since the student last trained.",
)

#: The inputs every student asset reads, through :data:`scoring_inputs`.
STUDENT_INPUTS = ["scoring_inputs"]


def _spec(key: str, description: str, deps: list[str], kinds: set[str]) -> dg.AssetSpec:
    return dg.AssetSpec(
        key,
        description=description,
        deps=deps,
        group_name="scoring",
        kinds=kinds,
        code_version="2",
        owners=["team:metacan"],
    )


class StudentConfig(dg.Config):
    """Launchpad settings of ``student_heads``."""

    features: str = Field(
        default=DEFAULT_FEATURES,
        description=f"Feature backend of every head: one of {', '.join(FEATURE_KINDS)}, or several joined by '+' "
        "(tfidf: word 1-2 gram TF-IDF; tfidf-char: character 2-5 gram TF-IDF; title-char: the title's character 3-5 gram TF-IDF; minilm: all-MiniLM-L6-v2 through PyTorch; minilm-onnx: the same, int8 "
        "through ONNX Runtime; static: a model2vec embedding distilled from it; meta: one-hot field, type, "
        f"language). Default {DEFAULT_FEATURES} (benchmarks/RESULTS.md compares them on the pilot labels).",
    )
    head_c: list[float] = Field(
        default=list(DEFAULT_C_GRID),
        description="The binary heads' logistic-regression C (inverse regularisation strength): one value fixes it; "
        "two or more are a grid each head chooses from by inner grouped cross-validation on its own training works "
        f"(folds grouped by venue, or by a reference set's groups; the best average precision wins). Default "
        f"{list(DEFAULT_C_GRID)} (benchmarks/RESULTS.md measures the choices).",
    )
    reference_sets: list[str] | None = Field(
        default=None,
        description="Imported teachers whose labels train heads of their own (reference sets: machine scores only, "
        "never a decision), also for works outside the frame. Default: every imported teacher (e.g. the MetaCan "
        "pilot's pilot_a and pilot_b); [] for none.",
    )
    distill: bool = Field(
        default=True,
        description=f"Distil every binary head from a head on the {DISTILL_ENCODER} sentence embedding (same labels) "
        "through a transfer set of unlabelled texts: the fast features then rank works they never saw about as the "
        "encoder does, at the fast features' scoring speed (benchmarks/RESULTS.md). False: heads learn from their "
        "labels alone.",
    )
    transfer_works: int = Field(
        default=TRANSFER_WORKS,
        ge=0,
        description="Frame works in the distillation's transfer set besides the training texts: a stable sample by "
        "salted hash of the id, without holdout works. Each is encoded once per model version (about 600 works/s "
        "on 2 cores).",
    )


def _heads_metadata(
    storage: MetacanStorage, bundle: StudentBundle, reused: bool, rows: list[dict], holdout: int, pngs: dict
) -> dict:
    """The ``student_heads`` metadata: the table, the model file and version, the training and holdout sizes,
    how many heads carry decisions, and a reliability plot per teacher."""
    gated = sum(1 for g in bundle.gates.values() if g.passed)
    return table_metadata(
        HEADS_SCHEMA,
        len(rows),
        rows,
        ["teacher", "target", "positives", "holdout_n", "ap", "auroc", "ece", "gate_passed"],
        model_version=bundle.model_version,
        model_file=dg.MetadataValue.path(str(model_path(storage, bundle.model_version))),
        model_reused=reused,
        feature_backend=bundle.feature_kind,
        holdout_version=HOLDOUT_VERSION,
        frozen_holdout_works=holdout,
        **{f"training_labels_{t}": len(ids) for t, ids in bundle.training_ids.items()},
        heads_with_decisions=gated,
        heads_scores_only=len(bundle.gates) - gated,
        reference_sets=dg.MetadataValue.md(reference_sets_markdown(bundle.reference_sets)),
        **{f"reliability_plot_{t}": png_markdown(p, f"reliability of the {t} heads") for t, p in pngs.items()},
    )


def reference_sets_markdown(sets: dict[str, dict]) -> str:
    """The reference sets a model version learned from, one row per head (machine scores only)."""
    if not sets:
        return "_(none: the heads learned from the role teachers only)_"
    lines = [
        "| reference set | model | works | weights | head | positives | weighted rate | CV AP | CV AUROC |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in sets.items():
        for target, m in s["heads"].items():
            ap, auroc = (f"{v:.3f}" if v is not None else "n/a" for v in (m["cv_ap"], m["cv_auroc"]))
            lines.append(
                f"| {name} | {s['model']} | {s['works']} | {'design' if s['weighted'] else 'none'} | {target} | "
                f"{m['positives']} | {m['weighted_rate']:.4f} | {ap} | {auroc} |"
            )
    return "\n".join(lines) + "\n\nReference-set heads give machine scores only: never a decision or a validated label."


def card_metadata(card: dict, markdown: str) -> dict:
    """The model card in ``student_heads``' metadata: the Markdown, its files, and the key figures (per source, the
    training works and the AP and AUROC of the metaresearch head with their 95% intervals)."""
    out: dict = {"model_card": dg.MetadataValue.md(markdown)}
    for t in card["training_sets"]:
        out[f"card_training_works_{t['name']}"] = t["training_works"]
    for h in card["heads"]:
        if h["target"] != "metaresearch":
            continue
        for name in ("ap", "auroc"):
            f = h["metrics"][name]
            if f["value"] is not None:
                low, high = f["ci_low"], f["ci_high"]
                interval = "" if low is None else f" [{low:.3f}, {high:.3f}]"
                out[f"card_{name}_{h['source']}_metaresearch"] = f"{f['value']:.3f}{interval}"
    from .card import distillation_line  # lazy: the card imports scikit-learn

    out["card_distillation"] = distillation_line(card.get("distillation") or {})
    out["card_heads_that_decide"] = sum(1 for h in card["heads"] if h["claim"]["decides"])
    out["card_limits"] = dg.MetadataValue.md("\n".join(f"- {x['text']}" for x in card["limits"]))
    return out


@dg.multi_asset(
    specs=[
        _spec(
            "student_heads",
            "Per teacher, 11 binary and 3 categorical student heads on the title-only view (SPEC section 6): one row "
            "per teacher and head with its status, label counts, frozen-holdout metrics and support gate; the model "
            "file data/models/<model_version>.joblib is published once and immutable.",
            STUDENT_INPUTS,
            {"python", "scikitlearn", "parquet"},
        ),
        _spec(
            "student_training_set",
            "Which works trained which teacher's heads of the current model version, with their venue keys: never "
            "a work of the frozen holdout or of a held-out venue (checked by student_holdout_disjoint_from_training).",
            STUDENT_INPUTS,
            {"python", "parquet"},
        ),
    ]
)
def student_heads(context: dg.AssetExecutionContext, config: StudentConfig, storage: MetacanStorage):
    """Per teacher, 11 binary and 3 categorical student heads on the title-only view (SPEC section 6).

    Training data (`training`): the census teacher's (gemma's) labelled teacher calls (unweighted; at most
    `training.CENSUS_LABELS_MAX` works, a salted-hash subsample above it)
    and the sample teacher's (codex's) on the design-weighted sample (weights ``1/pi`` from
    ``sample_design``), minus every work of a held-out venue (`holdout`). Features:
    ``config.features`` (TF-IDF by default), fitted on the training texts. A head whose labels hold one
    class is a constant head (its rate, ranks nothing).

    Metrics per head (`evaluation.holdout_metric_rows`), on the frozen holdout's labelled works only
    (codex: design-weighted): positives, Kish effective sample size of the positive weights, AP, AUROC,
    expected calibration error (binary), top-1 accuracy and ECE (categorical), and a reliability plot per
    teacher (PNG, in the metadata and under ``data/reports/<model_version>/``). Support gate: both teachers
    >= 20 positives and Kish ESS >= 10. The decision rate of a gated head (for quota calibration) is the
    design-weighted codex rate over all its sample labels.

    Output: table ``student_heads`` (one row per teacher and head, `HEADS_SCHEMA`), table
    ``student_training_set`` (which works trained which teacher's heads), and the model file
    ``data/models/<model_version>.joblib``, published once and immutable (`models`): a
    re-materialization with the same labels reuses it and recomputes only the metrics. Every metric carries its 95%
    bootstrap interval over holdout works (`evaluation.bootstrap_intervals`), also per language (en, fr). The model
    card (`card`) goes to ``data/reports/<model_version>/model_card.md`` and ``.json`` and into the metadata (the
    Markdown, and the key figures).
    """
    # lazy: these import scikit-learn (about 4 s), which only this asset's step needs
    from .card import model_card
    from .distill import Distiller
    from .evaluation import holdout_metric_rows, reference_head_rows, write_reliability_plots
    from .training import load_training_inputs, train_or_load, training_set_table

    inputs, newly = load_training_inputs(
        storage, context.run.run_id, config.reference_sets, config.transfer_works if config.distill else 0
    )
    if newly:
        context.log.info(
            f"holdout frozen now: {inputs.holdout_works} frame works of held-out venues ({HOLDOUT_VERSION})"
        )
    distiller = Distiller(log=context.log.info) if config.distill else None
    bundle, reused = train_or_load(
        storage, inputs, config.features, context.run.run_id, tuple(config.head_c), distiller
    )
    if reused:
        context.log.info(f"model version {bundle.model_version} is already published: loaded, not retrained")
    report = holdout_metric_rows(bundle, inputs)
    report = dataclasses.replace(report, rows=[*report.rows, *reference_head_rows(bundle)])
    rows = report.rows
    storage.write_table("student_heads", pa.Table.from_pylist(rows, schema=HEADS_SCHEMA))
    n_train = storage.write_table(
        "student_training_set", training_set_table(bundle, inputs), schema=TRAINING_SET_SCHEMA
    )
    pngs = write_reliability_plots(storage, bundle.model_version, report.curves)
    card, markdown, card_paths = model_card(storage, bundle, report, inputs.holdout_works)
    gated = [t for t, g in bundle.gates.items() if g.passed]
    n_ids = {t: len(ids) for t, ids in bundle.training_ids.items()}
    context.log.info(
        f"student_heads {bundle.model_version} ({'reused' if reused else 'trained'}, {bundle.feature_kind}): "
        f"{n_ids[CENSUS]} {CENSUS} / {n_ids[SAMPLE]} {SAMPLE} training labels, {inputs.holdout_works} frozen holdout "
        f"works; {len(gated)} of {len(bundle.gates)} codex heads pass the support gate ({gated or 'none'}): "
        "the others carry scores, no decision; reference sets (machine scores only): "
        + (", ".join(f"{n} ({s['works']} works)" for n, s in bundle.reference_sets.items()) or "none")
    )
    metadata = _heads_metadata(storage, bundle, reused, rows, inputs.holdout_works, pngs) | card_metadata(
        card, markdown
    )
    metadata["model_card_file"] = dg.MetadataValue.path(str(card_paths[0]))
    yield dg.MaterializeResult(asset_key="student_heads", metadata=metadata)
    yield dg.MaterializeResult(
        asset_key="student_training_set",
        metadata=table_metadata(TRAINING_SET_SCHEMA, n_train, None, None, model_version=bundle.model_version),
    )


@dg.multi_asset(
    specs=[
        _spec(
            "student_scores",
            "Every frame work's raw score from every head of the current model version (one column per head; "
            "categorical heads: class probabilities and argmax), written in batches of 50,000 works.",
            # the training set too: its blocking holdout check then stops the scores of a leaking model
            ["student_heads", "student_training_set"],
            {"python", "scikitlearn", "parquet"},
        ),
        _spec(
            "prediction_thresholds",
            "The quota threshold of every binary codex head: design-weighted teacher rate, works scored, k, the "
            "threshold score and the boundary id; k and threshold are NULL for a head that failed the support gate.",
            ["student_scores"],
            {"duckdb", "parquet"},
        ),
        _spec(
            "predictions",
            "Hybrid predictions for every frame work (SPEC section 6): codex decisions by quota calibration on gated "
            "heads, candidate = codex OR gemma, consensus = AND, scores per head; always machine_predicted_unvalidated.",
            ["student_scores", "prediction_thresholds", "scoring_inputs"],
            {"python", "duckdb", "parquet"},
        ),
    ]
)
def predictions(context: dg.AssetExecutionContext, storage: MetacanStorage):
    """Hybrid predictions for every frame work (SPEC section 6), in batches of 50,000 works.

    Scores of both teachers' heads (``student_scores``); codex decisions by quota calibration on gated
    heads only (``k = round(design-weighted codex rate x works scored)``, top k by score desc, id asc; the
    threshold and boundary id of every gated head in ``prediction_thresholds`` and the metadata);
    ``candidate`` = codex decision OR gemma direct label, ``consensus`` = AND; categorical candidate =
    gemma's value, consensus = that value when the gated codex argmax agrees;
    ``teacher_disagreement_score`` = max over the 11 binary targets of |codex score - gemma label|,
    ``threshold_uncertainty_score`` = max over gated codex heads of clamp01(1 - |s - t| / (t if s < t else
    1 - t)); every row ``prediction_status = machine_predicted_unvalidated``. Output: ``warehouse/predictions``
    (`PRED_SCHEMA`). "codex" is the sample teacher, "gemma" the census teacher (`roles`).
    Raises ValueError without ``student_heads`` and `models.ModelVersionError` when the published
    model file is missing or altered.
    """
    model_version = current_model_version(storage)
    bundle = load_published(storage, model_version)
    if bundle is None:
        raise ValueError(
            f"model version {model_version} (table student_heads) is not in model_versions: materialize student_heads again"
        )
    standing = teacher_standing(storage)
    n, thresholds = write_predictions(storage, bundle, log=context.log, qualification=standing)
    cand, cons, preview = category_counts(storage)
    gated = {r["target"]: {k: r[k] for k in ("k", "threshold", "boundary_id")} for r in thresholds if r["gate_passed"]}
    context.log.info(
        f"predictions {model_version}: {n} works scored; {len(gated)} gated codex binary heads; "
        f"candidate {cand}; consensus {cons}"
    )
    yield dg.MaterializeResult(asset_key="student_scores", metadata=scores_metadata(storage, model_version))
    yield dg.MaterializeResult(
        asset_key="prediction_thresholds",
        metadata=table_metadata(
            THRESHOLDS_SCHEMA, len(thresholds), thresholds, ["target", "gate_passed", "rate", "k", "threshold"]
        ),
    )
    yield dg.MaterializeResult(
        asset_key="predictions",
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
            sample_teacher_qualification=standing.sample_not_qualified or "qualified: its heads decide",
            census_teacher_qualification=standing.census_not_qualified
            or "qualified: its labels enter candidate and consensus",
        ),
    )


class MachineRoundConfig(dg.Config):
    """Launchpad settings of ``machine_scores``: the size of the next teacher batch each round proposes."""

    next_batch_spread: int = Field(default=10, ge=0, description="Works with the largest arm spread.")
    next_batch_uncertain: int = Field(default=10, ge=0, description="Works whose mean arm score is closest to 0.5.")
    next_batch_sentinels: int = Field(
        default=5, ge=0, description="Random works (salted hash order): sentinels against a drifting loop."
    )


@dg.asset(
    group_name="scoring",
    kinds={"python", "scikitlearn", "parquet"},
    code_version="2",
    owners=["team:metacan"],
    deps=STUDENT_INPUTS,
)
def machine_scores(
    context: dg.AssetExecutionContext, config: MachineRoundConfig, storage: MetacanStorage
) -> dg.MaterializeResult:
    """Active-learning student scores; each materialization with new teacher labels is one round (SPEC section 7).

    One TF-IDF + logistic-regression arm per teacher on ``metaresearch``, trained outside
    the held-out venues; ``score_<arm>`` per frame work (in batches) and ``score_spread`` = max - min over
    arms. The maturity gate (AP gain < 2% over 5 rounds, churn < 0.05 and Spearman rho > 0.98 for 3 rounds
    running, all on the frozen holdout) sets ``validation_status`` (``score_only:mature`` or
    ``score_only:v0-immature-baseline``) and ``rounds_run``; scores never assert a category. A new round
    proposes the next teacher batch (table ``machine_round_proposals``, recorded with the round; the asset
    ``label_batches`` then adds them to batch ``active_learning``). Tables: ``warehouse/machine_scores``
    (one row per frame work), ``machine_rounds``, ``machine_round_scores`` and ``machine_round_proposals``
    in DuckDB.
    """
    # lazy: rounds imports scikit-learn and scipy (about 4 s), which only this asset's step needs
    from .rounds import (
        ARMS,
        TARGET,
        fit_arms,
        load_arm_inputs,
        machine_batches,
        machine_preview,
        maturity_gate,
        next_round,
        proposals_markdown,
        propose_for_round,
        record_round,
        rounds_markdown,
        status_for,
        store_holdout_scores,
        training_signature,
    )

    inputs = load_arm_inputs(storage, context.run.run_id)
    signature = training_signature(inputs.train)
    round_no, new_round = next_round(storage, signature)
    bundle = fit_arms(inputs.train, {wid: info["text"] for wid, info in inputs.frame_info.items()})
    if new_round:
        store_holdout_scores(storage, bundle, round_no)
    gate = maturity_gate(storage, inputs.holdout_labels())
    status, note = status_for(gate, round_no)
    batches = machine_batches(storage, bundle, status, note, round_no, gate.passed, context.log)
    n = storage.write_table("machine_scores", batches, schema=MACHINE_SCHEMA)
    proposed: list[tuple] = []
    if new_round:
        sizes = (config.next_batch_spread, config.next_batch_uncertain, config.next_batch_sentinels)
        proposed = propose_for_round(storage, inputs, round_no, sizes, salt=signature)
        record_round(storage, round_no, context.run.run_id, signature, inputs, gate, proposed)
    context.log.info(
        f"machine_scores: {n} works, round {round_no} ({'new' if new_round else 'no new teacher labels: not a new round'}), "
        f"{status}; gate: {gate.reason}; {len(proposed)} works proposed for the next teacher batch"
    )
    preview_columns = ["id", "score_gemma", "score_codex", "score_spread", "validation_status"]
    return dg.MaterializeResult(
        metadata={
            **table_metadata(MACHINE_SCHEMA, n, machine_preview(storage), preview_columns),
            "rounds_run": round_no,
            "new_round": new_round,
            "validation_status": status,
            "maturity_gate_passed": gate.passed,
            "maturity_gate_reason": gate.reason,
            "frozen_holdout_works": inputs.holdout_works,
            "arms": dg.MetadataValue.json({a: bundle.heads[a][TARGET].status_ for a in ARMS}),
            "gate_series": dg.MetadataValue.json(gate.series),
            "rounds": dg.MetadataValue.md(rounds_markdown(storage)),
            "next_batch": dg.MetadataValue.md(proposals_markdown(proposed)),
        }
    )


@dg.asset(
    group_name="scoring",
    kinds={"python", "parquet"},
    code_version="1",
    owners=["team:metacan"],
    deps=["predictions", "scoring_inputs"],
)
def prevalence(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
    """Prevalence per category (SPEC sections 5-6). Rows of table ``prevalence``, one per population, category
    and method:

    - ``design_weighted_teacher_rate``: each teacher's rate with a design-based 95% CI. Population ``frame``: a
      teacher covering all works is a census of the frame (weight 1, one stratum, no sampling variance); a sample
      teacher uses ``sample_design`` (stratum, design weight). Population ``import:<source>``: imported teachers with their source's
      ``imported_design`` (e.g. the MetaCan pilot's strata and weights).
    - ``classify_and_count``: the share of frame works whose ``predictions.candidate_categories`` (and,
      method ``classify_and_count_consensus``, ``consensus_categories``) holds the category; no CI.
    - ``screener_swap_range``: per population, the lowest and highest teacher rate (``ci_low`` /
      ``ci_high`` hold the range, ``rate`` its midpoint): what changes when another teacher is called
      the screener, the honest uncertainty the original system reported.
    """
    rows = prevalence_rows(storage, REGISTRY)
    table = pa.Table.from_pylist(rows, schema=PREVALENCE_SCHEMA)
    storage.write_table("prevalence", table, schema=PREVALENCE_SCHEMA)
    context.log.info(f"prevalence: {len(rows)} rows over {len({r['population'] for r in rows})} populations")
    return dg.MaterializeResult(
        metadata=table_metadata(
            PREVALENCE_SCHEMA,
            table.num_rows,
            rows[:10],
            None,
            metaresearch=dg.MetadataValue.md(metaresearch_markdown(rows)),
            **({"census_interval": CENSUS_NO_SAMPLING_ERROR} if any(zero_width_census(r) for r in rows) else {}),
        )
    )


class CascadeConfig(dg.Config):
    """Launchpad settings of ``cascade_batch`` (:mod:`.cascade_batch`)."""

    teacher: str = Field(default=CENSUS, description="The role teacher whose calls the cascade spends.")
    heads: list[str] = Field(default=["metaresearch"], description="Binary heads whose band the teacher labels.")
    target: float = Field(default=0.9, gt=0, lt=1, description="Precision the positive threshold certifies.")
    negative_target: float | None = Field(
        default=None, gt=0, lt=1, description="NPV the negative threshold certifies (default: target)."
    )
    recall: float | None = Field(
        default=0.9, gt=0, lt=1, description="Recall the negative side must keep, certified (null: no cap)."
    )
    confidence: float = Field(default=0.95, gt=0, lt=1, description="Level of the one-sided bounds.")
    method: str = Field(
        default="clopper-pearson",
        description="The lower bound: clopper-pearson (coverage at least the level for every rate) or jeffreys.",
    )
    budget: int = Field(default=100, ge=0, description="Teacher calls (band works) one run adds to the batch.")


@dg.asset(
    group_name="scoring",
    kinds={"python", "duckdb", "parquet"},
    code_version="1",
    owners=["team:metacan"],
    deps=["student_scores", *STUDENT_INPUTS],
)
def cascade_batch(context: dg.AssetExecutionContext, config: CascadeConfig, storage: MetacanStorage):
    """The cascade coverage mode: certified student thresholds per head on the frozen holdout's teacher labels,
    and the band's `budget` most uncertain works added to batch `cascade` of `label_batches`. A teacher with `coverage = "sample+batch:cascade"` labels them when its `direct_labels_<name>`
    asset is next materialized (that edge is not drawn: it would make a cycle). Writes `cascade_thresholds` and
    `cascade_decisions`, and the thresholds into the model version's card (section "Cascade"); a certified decision is a
    machine decision, never a validated label."""
    from ..tables.student import CASCADE_THRESHOLDS_SCHEMA
    from .card import add_cascade
    from .cascade_batch import CascadeSettings, decisions_table, run_cascade, thresholds_table

    settings = CascadeSettings(
        config.teacher,
        tuple(config.heads),
        config.target,
        config.negative_target,
        config.recall,
        config.confidence,
        config.budget,
        config.method,
    )
    model_version = current_model_version(storage)
    skipped: dict[str, str] = {}
    results = run_cascade(storage, settings, model_version, skipped)
    for head, reason in skipped.items():
        context.log.info(f"cascade {head}: left out, the {settings.teacher} head gives no score ({reason})")
    thresholds = thresholds_table(results, settings, model_version, context.run.run_id)
    storage.write_table("cascade_thresholds", thresholds)
    decisions = decisions_table(results, model_version)
    storage.write_table("cascade_decisions", decisions)
    rows = thresholds.to_pylist()
    card_paths = add_cascade(storage.root, model_version, rows)
    for r in rows:
        context.log.info(
            f"cascade {r['target']}: {r['calibration_n']} calibration works ({r['calibration_positives']} positive); "
            f"t+ {r['positive_threshold']}, t- {r['negative_threshold']}; of {r['works_planned']} works "
            f"{r['decided_positive']} decided positive, {r['decided_negative']} negative, {r['sent_to_teacher']} "
            f"to the teacher ({r['added_to_batch']} new in the batch), {r['unsettled']} unsettled"
        )
    shown = ["target", "calibration_n", "positive_threshold", "negative_threshold", "sent_to_teacher", "unsettled"]
    return dg.MaterializeResult(
        metadata=table_metadata(
            CASCADE_THRESHOLDS_SCHEMA,
            len(rows),
            rows,
            shown,
            model_version=model_version,
            teacher=settings.teacher,
            added_to_batch=sum(r["added_to_batch"] for r in rows),
            heads_without_score=dg.MetadataValue.json(skipped),
            model_card_cascade=str(card_paths[1]) if card_paths else "no model card for this version",
            decisions_per_head=counts_markdown(
                dict(
                    Counter(
                        f"{t}: {d}"
                        for t, d in zip(*decisions.select(["target", "decision"]).to_pydict().values(), strict=True)
                    )
                ),
                "head: decision",
                "works",
            ),
        )
    )
