"""Training the student heads (SPEC section 6): the training labels, the model version, the fits, the
support gate and the decision rates, built once into a :class:`~.models.StudentBundle`.

Training data: the census teacher's labelled teacher calls (unweighted) and the sample teacher's on the
design-weighted sample (weights ``1/pi`` from ``sample_design``), minus every work of the frozen holdout
and of a held-out venue (:mod:`.holdout`). Teachers by role: :mod:`.roles`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa

from .. import __version__
from ..storage import MetacanStorage, sql_literal
from ..tables.student import TRAINING_SET_SCHEMA
from ..vocab import BINARY_TARGETS, CATEGORICAL_TARGETS, CATEGORIES
from .calibration import GateResult, support_gate
from .distill import DistilJob, Distiller, TransferSet, distilled_cv_hook, transfer_digest, transfer_sample_sql
from .features import DEFAULT_C_GRID, STUDENT_FIELDS, feature_params, make_features, transform
from .heads import (
    PARAMS,
    BinaryHead,
    CategoricalHead,
    Head,
    check_c_grid,
    grouped_cv_metrics,
    kish_ess,
    run_fits,
    weighted_rate,
)
from .holdout import HOLDOUT_VERSION, freeze_holdout, frozen_among, venue_held_out, venue_key
from .models import StudentBundle, load_published, publish
from .reference_sets import ReferenceSet, load_reference_sets
from .roles import CENSUS, ROLE_TEACHERS, SAMPLE, direct_labels_key
from .scoring import scratch_connection, student_texts

#: Part of every model version: bump it when training or the bundle's classes change (a published
#: version is immutable, so a bundle pickled by older code keeps its own version). v5: reference sets, keywords in the text.
#: v6: a head that saw one class gives no score (its status names why); binary heads carry their C grid.
#: v7: binary heads distilled from the encoder's heads through a transfer set (:mod:`.distill`).
STUDENT_CODE_VERSION = "student-v7"
MODEL_MAJOR = 0


def target_value(label: dict, target: str) -> int | None:
    """A direct label's 0/1 value on a binary target (a category's membership, or an about_ca flag)."""
    if target in CATEGORIES:
        return int(target in (label["categories"] or []))
    v = label.get(target)
    return None if v is None else int(bool(v))


#: The most census-teacher labels the student reads (training, support gate, holdout metrics). The census teacher
#: labels every frame work (4.3 million in the original's frame), and one fit of every head on all of them would take
#: hours and hold every label in memory; above this many, a uniform subsample of works by a salted SHA-256 of the
#: work id (stable across runs and machines: the same labels give the same subsample) is read instead.
CENSUS_LABELS_MAX = 200_000
#: The salt of that subsample's hash (a new salt is a new subsample, hence a new model version).
CENSUS_SUBSAMPLE_SALT = "metacan-student-census-subsample-v1"


def teacher_call_labels(storage: MetacanStorage, teacher: str, most: int | None = None) -> list[dict]:
    """Labelled teacher-call rows of one teacher (rule labels, imports, failures and rows without a work id are not
    training data): one label per work, the newest (by ``created_at``, then ``label_id``, then the later row; as predictions read
    gemma's), in the table's order (the fits depend on row order). With ``most``, at most that many: when the
    teacher has more, the works whose salted SHA-256 (:data:`CENSUS_SUBSAMPLE_SALT`) of the id sorts first.
    Selected in DuckDB, so only the rows returned are ever Python objects."""
    if most is not None and most < 0:
        raise ValueError(f"most must be 0 or more, got {most}")
    storage.require(direct_labels_key(teacher))
    files = sorted(str(p) for p in storage.table_dir(direct_labels_key(teacher)).glob("*.parquet"))
    cap = "" if most is None else f"ORDER BY sha256({sql_literal(CENSUS_SUBSAMPLE_SALT)} || work_id) LIMIT {int(most)}"
    sql = f"""
        WITH t AS (
          SELECT * EXCLUDE (filename, file_row_number), filename AS _file, file_row_number AS _row
          FROM read_parquet(?::VARCHAR[], filename = true, file_row_number = true)
        ), newest AS (
          SELECT * FROM t WHERE status = 'labelled' AND source = 'teacher_call' AND work_id IS NOT NULL
          QUALIFY row_number() OVER (
            PARTITION BY work_id
            ORDER BY created_at DESC NULLS LAST, coalesce(label_id, '') DESC, _file DESC, _row DESC
          ) = 1
        ), kept AS (SELECT * FROM newest {cap})
        SELECT * EXCLUDE (_file, _row) FROM kept ORDER BY _file, _row
    """
    with scratch_connection(storage) as con:
        return con.execute(sql, [files]).to_arrow_table().to_pylist()


def model_version_for(
    labels: dict[str, list[dict]],
    weights: dict[str, float],
    feature_kind: str,
    references: dict[str, ReferenceSet] | None = None,
    c_grid: tuple[float, ...] = DEFAULT_C_GRID,
    distillation: dict | None = None,
) -> str:
    """``metacan-v<major>-hybrid-<12 hex>``: SHA-256 of the code version, parameters, the binary heads' C grid
    (``c_grid``), feature backend and its ``params`` (an encoder's source weights, recipe and library versions),
    holdout definition, every label
    (teacher, work, label id, design weight) (SPEC section 6), every reference set's labels (set, work, label id,
    training weight, text) and the distillation (``distillation``: the :attr:`.distill.Distiller.params` and the
    transfer sample's digest; None: no distillation)."""
    h = hashlib.sha256()
    h.update(f"{__version__}/{STUDENT_CODE_VERSION}/{feature_kind}/{HOLDOUT_VERSION}/{STUDENT_FIELDS}".encode())
    h.update(json.dumps(PARAMS, sort_keys=True, default=str).encode())
    if tuple(c_grid) != (PARAMS["logreg"]["C"],):  # the fixed default C hashes as before
        h.update(json.dumps({"c_grid": list(check_c_grid(c_grid))}).encode())
    h.update(json.dumps(feature_params(make_features(feature_kind)), sort_keys=True, default=str).encode())
    if distillation is not None:
        h.update(json.dumps({"distillation": distillation}, sort_keys=True, default=str).encode())
    for teacher in ROLE_TEACHERS:
        for r in sorted(labels[teacher], key=lambda r: r["work_id"]):
            h.update(
                json.dumps([teacher, r["work_id"], r["label_id"], weights.get(r["work_id"], 1.0)], default=str).encode()
            )
    for name, ref in sorted((references or {}).items()):
        for r in ref.labels:
            wid = r["work_id"]
            h.update(json.dumps(["reference", name, wid, r["label_id"], ref.weights[wid], ref.texts[wid]]).encode())
    return f"metacan-v{MODEL_MAJOR}-hybrid-{h.hexdigest()[:12]}"


def frame_rows_for(storage: MetacanStorage, ids: set[str]) -> dict[str, dict]:
    """``{id: {venue_key, text, language}}`` of the frame works in ``ids`` (a DuckDB semi join over the frame's
    files; ``language``: the frame's ISO 639-1 code or None, for the per-language holdout metrics)."""
    wanted = pa.table({"id": sorted(ids)})  # noqa: F841 (DuckDB replacement scan)
    with scratch_connection(storage) as con:
        table = con.execute(
            f"SELECT f.id, f.venue_id, f.language AS work_language, {', '.join('f.' + c for c in STUDENT_FIELDS)} "
            "FROM frame f SEMI JOIN wanted USING (id)"
        ).to_arrow_table()
    texts = student_texts(table)
    return {
        wid: {"venue_key": venue_key(wid, vid), "text": t, "language": lang}
        for wid, vid, t, lang in zip(
            table.column("id").to_pylist(),
            table.column("venue_id").to_pylist(),
            texts,
            table.column("work_language").to_pylist(),
            strict=False,
        )
    }


def transfer_texts(storage: MetacanStorage, works: int) -> list[str]:
    """The student texts of the frame's transfer sample (:func:`.distill.transfer_sample_sql`: the ``works`` works
    whose salted SHA-256 of the id sorts first), without the works of the frozen holdout or of a held-out venue (so
    no holdout work shapes a head, even unlabelled): at most ``works`` texts, in sample order."""
    if works <= 0:
        return []
    with scratch_connection(storage) as con:
        table = con.execute(
            f"SELECT id, venue_id, {', '.join(STUDENT_FIELDS)} FROM frame {transfer_sample_sql(works)}"
        ).to_arrow_table()
    ids = table.column("id").to_pylist()
    frozen = frozen_among(storage, ids)
    keep = [
        i
        for i, (wid, vid) in enumerate(zip(ids, table.column("venue_id").to_pylist(), strict=True))
        if wid not in frozen and not venue_held_out(venue_key(wid, vid))
    ]
    return student_texts(table.take(keep)) if keep else []


def frame_venues(storage: MetacanStorage) -> Iterator[pa.RecordBatch]:
    """The frame's ``id`` and ``venue_id``, in record batches (what :func:`~.holdout.freeze_holdout` reads)."""
    return storage.iter_batches("frame", columns=["id", "venue_id"])


def outside_holdout(rows: list[dict], holdout: set[str], frame_info: dict[str, dict]) -> list[dict]:
    """The label rows of frame works that may train: not in the frozen set (``holdout``: its works among
    the labelled ones, :func:`~.holdout.frozen_among`; even when a work's venue changed since) and not of a
    held-out venue."""
    return [
        r
        for r in rows
        if r["work_id"] in frame_info
        and r["work_id"] not in holdout
        and not venue_held_out(frame_info[r["work_id"]]["venue_key"])
    ]


def design_weights(storage: MetacanStorage, ids: set[str]) -> dict[str, dict]:
    """``{work id: {id, in_sample, design_weight}}`` of the ``sample_design`` rows of the works ``ids`` (the labelled
    ones: a DuckDB semi join, never the whole sampling frame as Python rows). Raises ValueError naming the works when
    an in-sample work of the whole table has no valid design weight (NULL, NaN or <= 0; SPEC section 5: 1/pi)."""
    storage.require("sample_design")
    files = str(storage.table_dir("sample_design") / "*.parquet")
    wanted = pa.table({"id": sorted(ids)})  # noqa: F841 (DuckDB replacement scan)
    with scratch_connection(storage) as con:
        con.execute(
            f"CREATE VIEW sample_design AS SELECT id, in_sample, design_weight FROM read_parquet({sql_literal(files)})"
        )
        n_bad, bad = con.execute(
            "SELECT count(*), list(id ORDER BY id)[1:5] FROM sample_design WHERE in_sample "
            "AND NOT coalesce(isfinite(design_weight) AND design_weight > 0, false)"
        ).fetchone()
        if n_bad:
            raise ValueError(
                f"sample_design: {n_bad} in-sample work(s) without a valid design_weight (NULL, NaN or <= 0; SPEC "
                f"section 5: 1/pi), e.g. {bad}: re-materialize sample_design"
            )
        rows = con.execute("SELECT * FROM sample_design SEMI JOIN wanted USING (id)").to_arrow_table().to_pylist()
    return {r["id"]: r for r in rows}


@dataclass(frozen=True)
class TrainingInputs:
    """What ``student_heads`` trains and evaluates on: per teacher its labels (frame works only; the
    sample teacher's on the sample only), the design weight of every labelled work, the frame rows (venue key,
    text) of the labelled works, the labelled works of the frozen holdout and its size."""

    labels: dict[str, list[dict]]
    weights: dict[str, float]
    frame_info: dict[str, dict]
    labelled_holdout: set[str]
    holdout_works: int
    references: dict[str, ReferenceSet] = field(default_factory=dict)
    transfer_texts: list[str] = field(default_factory=list)

    @cached_property
    def texts(self) -> dict[str, str]:
        """``{work id: student text}`` of the labelled works, built once (a property that rebuilt it made the holdout
        metrics quadratic: one 200,000-entry dict per evaluated label)."""
        return {wid: info["text"] for wid, info in self.frame_info.items()}

    def row_weights(self, teacher: str, rows: list[dict]) -> np.ndarray:
        """One weight per row: the design weight for the sample teacher, 1 for the census teacher."""
        return np.array([self.weights.get(r["work_id"], 1.0) if teacher == SAMPLE else 1.0 for r in rows])


def load_training_inputs(
    storage: MetacanStorage, run_id: str, reference_sets: list[str] | None = (), transfer_works: int = 0
) -> tuple[TrainingInputs, bool]:
    """The :class:`TrainingInputs` from the warehouse, freezing the holdout on the first run; returns
    ``(inputs, holdout newly frozen)``. ``reference_sets``: the imported teachers whose labels train heads of their
    own (:mod:`.reference_sets`; None: every imported teacher); ``transfer_works``: the frame works of the
    distillation's transfer sample (:func:`transfer_texts`; 0: none). Raises ValueError as :func:`design_weights`
    and :func:`~.reference_sets.load_reference_set`."""
    labels = {t: teacher_call_labels(storage, t, CENSUS_LABELS_MAX if t == CENSUS else None) for t in ROLE_TEACHERS}
    design = design_weights(storage, {r["work_id"] for rows in labels.values() for r in rows})
    labels[SAMPLE] = [r for r in labels[SAMPLE] if design.get(r["work_id"], {}).get("in_sample")]
    frame_info = frame_rows_for(storage, {r["work_id"] for t in ROLE_TEACHERS for r in labels[t]})
    labels = {t: [r for r in rows if r["work_id"] in frame_info] for t, rows in labels.items()}
    holdout_works, newly = freeze_holdout(storage, frame_venues(storage), run_id)
    weights = {wid: r["design_weight"] for wid, r in design.items()}
    references = load_reference_sets(storage, None if reference_sets is None else list(reference_sets))
    transfer = transfer_texts(storage, transfer_works)
    return TrainingInputs(
        labels, weights, frame_info, frozen_among(storage, frame_info), holdout_works, references, transfer
    ), newly


def fit_heads(
    feature_kind: str,
    train: dict[str, list[dict]],
    texts: dict[str, str],
    weights: dict[str, np.ndarray],
    references: dict[str, ReferenceSet] | None = None,
    groups: dict[str, str] | None = None,
    c_grid: tuple[float, ...] = DEFAULT_C_GRID,
    distiller: Distiller | None = None,
    transfer: list[str] | tuple[str, ...] = (),
) -> tuple[object, dict[str, dict[str, Head]], TransferSet | None]:
    """Fit the feature backend on the training texts and every head of both teachers and of every reference set
    (the heads side by side in worker processes when the training set is large enough to pay:
    :func:`~.heads.run_fits`).

    ``train[teacher]``: training label rows (never a holdout work); ``weights[teacher]``: one training
    weight per row; ``references``: the reference sets, each training one binary head per target it decides
    (:meth:`~.reference_sets.ReferenceSet.decided_targets`) with its own weights. ``c_grid``: the binary heads'
    C values (:class:`~.heads.BinaryHead`; two or more are chosen among by inner cross-validation grouped by
    ``groups``, ``{work id: venue key}`` of the role teachers' works, and by each set's own groups); the
    categorical heads keep ``PARAMS["logreg"]["C"]``. ``distiller``: when given, every trained binary head is
    distilled from the encoder's head on the same labels (:mod:`.distill`) through the transfer set of the training
    texts and ``transfer`` (unlabelled texts, e.g. the frame's transfer sample). Returns
    ``(vectorizer, heads[source][target], transfer set or None)``, sources in order: the role teachers, then the
    reference sets by name; raises ValueError with nothing to train on.
    """
    references = dict(sorted((references or {}).items()))
    train_texts = sorted(
        {texts[r["work_id"]] for t in ROLE_TEACHERS for r in train[t]}
        | {text for ref in references.values() for text in ref.texts.values()}
    )
    if not train_texts:
        raise ValueError(
            "student_heads: nothing to train on: no labelled teacher call of a frame work outside the holdout in "
            f"{', '.join(direct_labels_key(t) for t in ROLE_TEACHERS)} (is the frame empty, or did every call fail?) "
            "and no reference set; materialize frame and the teachers first"
        )
    # distillation regresses on the transfer texts' features: their words must be in the vocabulary
    vectorizer = make_features(feature_kind).fit([*train_texts, *transfer] if distiller is not None else train_texts)
    fits: dict[tuple[str, str], tuple] = {}  # (source, target) -> (fit method, arguments), in head order
    jobs: dict[tuple[str, str], tuple] = {}  # (source, target) -> (texts, y, w, groups) of each binary head
    for teacher in ROLE_TEACHERS:
        rows, w = train[teacher], weights[teacher]
        row_texts = [texts[r["work_id"]] for r in rows]
        X = transform(vectorizer, row_texts)
        row_groups = [(groups or {}).get(r["work_id"], r["work_id"]) for r in rows]
        for target in BINARY_TARGETS:
            idx = [i for i, r in enumerate(rows) if target_value(r, target) is not None]
            y = np.array([target_value(rows[i], target) for i in idx], dtype=int)
            g = [row_groups[i] for i in idx]
            fits[teacher, target] = (BinaryHead(target, c_grid).fit, (X[idx], y, w[idx], g))
            jobs[teacher, target] = ([row_texts[i] for i in idx], y, w[idx], g)
        for target, classes in CATEGORICAL_TARGETS.items():
            fits[teacher, target] = (CategoricalHead(target, classes).fit, (X, [r.get(target) for r in rows], w))
    for name, ref in references.items():
        X = transform(vectorizer, [ref.texts[r["work_id"]] for r in ref.labels])
        for target in ref.decided_targets():
            X_t, y, w = reference_arrays(ref, target, X)
            decided = [r for r in ref.labels if ref.value(r, target) is not None]
            g = [ref.groups[r["work_id"]] for r in decided]
            fits[name, target] = (BinaryHead(target, c_grid).fit, (X_t, y, w, g))
            jobs[name, target] = ([ref.texts[r["work_id"]] for r in decided], y, w, g)
    # the multi-class fits take most of the time: hand them out first
    order = sorted(fits, key=lambda k: k[1] not in CATEGORICAL_TARGETS)
    n_rows = sum(len(train[t]) for t in ROLE_TEACHERS) + sum(len(ref.labels) for ref in references.values())
    fitted = dict(zip(order, run_fits([fits[k] for k in order], n_rows), strict=True))
    transfer_set = None
    if distiller is not None:
        transfer_set = distiller.transfer(vectorizer, [*train_texts, *transfer])
        distiller.distil([DistilJob(fitted[k], *jobs[k]) for k in jobs], transfer_set)
    sources = [*ROLE_TEACHERS, *references]
    heads = {source: {target: fitted[s, target] for (s, target) in fits if s == source} for source in sources}
    return vectorizer, heads, transfer_set


def reference_arrays(ref: ReferenceSet, target: str, X) -> tuple[object, np.ndarray, np.ndarray]:
    """``(X rows, y, weights)`` of the works of ``ref`` whose label decides ``target`` (``X``: one row per label of
    ``ref``, in its order)."""
    idx = [i for i, r in enumerate(ref.labels) if ref.value(r, target) is not None]
    y = np.array([ref.value(ref.labels[i], target) for i in idx], dtype=int)
    w = np.array([ref.weights[ref.labels[i]["work_id"]] for i in idx], dtype=float)
    return X[idx], y, w


def reference_summaries(
    vectorizer,
    references: dict[str, ReferenceSet],
    folds: int = 5,
    c_grid: tuple[float, ...] = DEFAULT_C_GRID,
    distiller: Distiller | None = None,
    transfer: TransferSet | None = None,
) -> dict[str, dict]:
    """What the model version records of each reference set (:meth:`~.reference_sets.ReferenceSet.summary`), with
    per decided target the positives, the set's weighted rate (what its head is calibrated to) and AP/AUROC under
    grouped cross-validation on the set (groups: frame venue, else venue name, else title;
    :func:`~.heads.grouped_cv_metrics`, weighted when the set is; a C grid is searched inside each fold; with a
    ``distiller``, each fold's head is distilled as the shipped head is, through ``transfer`` without the fold's
    test texts: :func:`~.distill.distilled_cv_hook`)."""
    out = {}
    for name, ref in sorted(references.items()):
        X = transform(vectorizer, [ref.texts[r["work_id"]] for r in ref.labels])
        groups_all = [ref.groups[r["work_id"]] for r in ref.labels]
        targets = {}
        for target in ref.decided_targets():
            X_t, y, w = reference_arrays(ref, target, X)
            idx = [i for i, r in enumerate(ref.labels) if ref.value(r, target) is not None]
            hook = None
            if distiller is not None and transfer is not None:
                hook = distilled_cv_hook(distiller, [ref.texts[ref.labels[i]["work_id"]] for i in idx], transfer)
            cv = grouped_cv_metrics(
                X_t, y, [groups_all[i] for i in idx], w, folds, group_name="venue-or-title", c_grid=c_grid, distil=hook
            )
            targets[target] = {
                "labels": len(y),
                "positives": int(y.sum()),
                "weighted_rate": weighted_rate(y, w),
                "cv_ap": cv["ap"],
                "cv_auroc": cv["auroc"],
                "cv": cv["cv"],
            }
        out[name] = {**ref.summary(), "heads": targets}
    return out


def support_gates(
    labels: dict[str, list[dict]], weights: dict[str, float], heads: dict[str, dict[str, Head]]
) -> dict[str, GateResult]:
    """SPEC section 6 support gate of every sample-teacher head, on all labels of both teachers."""
    gates = {}
    for target in (*BINARY_TARGETS, *CATEGORICAL_TARGETS):
        if target in CATEGORICAL_TARGETS:
            has = {t: [r for r in labels[t] if r.get(target) is not None] for t in ROLE_TEACHERS}
        else:
            has = {t: [r for r in labels[t] if target_value(r, target) == 1] for t in ROLE_TEACHERS}
        pos_w = np.array([weights.get(r["work_id"], 1.0) for r in has[SAMPLE]])
        gate = support_gate(len(has[CENSUS]), len(has[SAMPLE]), kish_ess(pos_w))
        if gate.passed and heads[SAMPLE][target].status_ != "trained":
            gate = GateResult(
                False, gate.gemma_positives, gate.codex_positives, gate.kish_ess_positive, "codex head is constant"
            )
        gates[target] = gate
    return gates


def decision_rates(sample_labels: list[dict], weights: dict[str, float]) -> dict[str, float]:
    """The design-weighted sample-teacher rate of every binary target over all its sample labels (for
    quota calibration), over the labels that carry the target (an absent about_ca value is unknown, not a 0)."""
    w = np.array([weights.get(r["work_id"], 1.0) for r in sample_labels])
    known = {t: np.array([target_value(r, t) is not None for r in sample_labels], dtype=bool) for t in BINARY_TARGETS}
    return {
        t: weighted_rate(np.array([target_value(r, t) or 0 for r in sample_labels])[known[t]], w[known[t]])
        if len(w)
        else 0.0
        for t in BINARY_TARGETS
    }


def train_bundle(
    model_version: str,
    feature_kind: str,
    inputs: TrainingInputs,
    c_grid: tuple[float, ...] = DEFAULT_C_GRID,
    distiller: Distiller | None = None,
) -> StudentBundle:
    """Train ``model_version`` on ``inputs``: the heads on the labels outside the holdout (:func:`fit_heads`, the
    binary heads' C from ``c_grid``; distilled through the training texts and ``inputs.transfer_texts`` when a
    ``distiller`` is given), the support gates and decision rates on all labels; the bundle is complete when
    returned."""
    train = {t: outside_holdout(inputs.labels[t], inputs.labelled_holdout, inputs.frame_info) for t in ROLE_TEACHERS}
    weights = {t: inputs.row_weights(t, train[t]) for t in ROLE_TEACHERS}
    venues = {wid: info["venue_key"] for wid, info in inputs.frame_info.items()}
    vectorizer, heads, transfer = fit_heads(
        feature_kind, train, inputs.texts, weights, inputs.references, venues, c_grid, distiller, inputs.transfer_texts
    )
    return StudentBundle(
        vectorizer,
        heads,
        model_version=model_version,
        feature_kind=feature_kind,
        holdout_version=HOLDOUT_VERSION,
        training_ids={
            **{t: [r["work_id"] for r in train[t]] for t in ROLE_TEACHERS},
            **{name: [r["work_id"] for r in ref.labels] for name, ref in inputs.references.items()},
        },
        gates=support_gates(inputs.labels, inputs.weights, heads),
        rates=decision_rates(inputs.labels[SAMPLE], inputs.weights),
        reference_sets=reference_summaries(
            vectorizer, inputs.references, c_grid=c_grid, distiller=distiller, transfer=transfer
        ),
        distillation={}
        if transfer is None
        else {
            "encoder": distiller.encoder_kind,
            "ridge_alpha": distiller.alpha,
            "transfer_works": len(transfer.texts),
            "frame_transfer_works": len(inputs.transfer_texts),
        },
    )


def train_or_load(
    storage: MetacanStorage,
    inputs: TrainingInputs,
    feature_kind: str,
    run_id: str,
    c_grid: tuple[float, ...] = DEFAULT_C_GRID,
    distiller: Distiller | None = None,
) -> tuple[StudentBundle, bool]:
    """The model version of ``inputs`` (:func:`model_version_for`; with a ``distiller``, its parameters and the
    transfer texts' digest enter it): loaded when already published (a version
    is immutable: it is never retrained), else trained (:func:`train_bundle`) and published once. Returns
    ``(bundle, reused)``; raises :class:`~.models.ModelVersionError` for an altered or missing model file."""
    c_grid = check_c_grid(c_grid)
    distillation = None
    if distiller is not None:
        distillation = {**distiller.params, "transfer": transfer_digest(inputs.transfer_texts)}
    model_version = model_version_for(
        inputs.labels, inputs.weights, feature_kind, inputs.references, c_grid, distillation
    )
    bundle = load_published(storage, model_version)
    if bundle is not None:
        return bundle, True
    bundle = train_bundle(model_version, feature_kind, inputs, c_grid, distiller)
    summary = {
        "training_labels": {t: len(v) for t, v in bundle.training_ids.items()},
        "reference_sets": sorted(bundle.reference_sets),
        "holdout_version": HOLDOUT_VERSION,
        "distillation": dict(bundle.distillation),
    }
    publish(storage, bundle, kind="hybrid", run_id=run_id, feature_kind=feature_kind, summary=summary)
    return bundle, False


def training_set_table(bundle: StudentBundle, inputs: TrainingInputs) -> pa.Table:
    """``student_training_set``: which works trained which source's heads of ``bundle`` (role teachers and reference
    sets), with their frame venue keys (NULL for a reference work outside the frame: no frame venue holds it out)."""
    keys = {wid: info["venue_key"] for wid, info in inputs.frame_info.items()}
    for ref in inputs.references.values():
        keys.update({wid: ref.groups[wid] for wid in ref.frame_works})
    return pa.Table.from_pylist(
        [
            {"model_version": bundle.model_version, "teacher": t, "work_id": wid, "venue_key": keys.get(wid)}
            for t, ids in bundle.training_ids.items()
            for wid in ids
        ],
        schema=TRAINING_SET_SCHEMA,
    )
