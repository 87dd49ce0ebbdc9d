"""The cascade as a coverage mode: a teacher labels only the works the student cannot settle.

A teacher whose registry entry has ``coverage = "sample+batch:cascade"`` labels the design-weighted sample (what
the student trains on) and the works of batch :data:`CASCADE_BATCH` of ``label_batches``, which the asset
``cascade_batch`` fills. Per configured binary head of that teacher (:class:`CascadeSettings`), on the current model
version's ``student_scores``:

- **Calibration**: the frozen holdout's works (``student_holdout``: never trained on) that the teacher labelled,
  their scores and the teacher's 1/0 labels, with design weights for the sample teacher (1 for the census teacher);
  :func:`.cascade.certify_head` certifies the positive threshold (precision) and the negative one (NPV, capped by a
  certified recall when ``recall`` is set).
- **Plan**: every other frame work the teacher has not labelled: the certified thresholds decide what they can;
  the band's ``budget`` works closest to its middle (:func:`.cascade.plan_cascade`) are added to the batch (source
  ``cascade <model version> <head>: band``), once: a work already in the batch or labelled is never sent again, so a
  re-run buys nothing twice. The rest of the band stays unsettled (no decision) until a later run's budget.

Writes ``cascade_thresholds`` (one row per head: the certificate and the plan's counts) and ``cascade_decisions``
(one row per planned work and head: score and decision ``positive`` / ``negative`` / ``teacher`` / ``unsettled``).
A certified decision is a machine decision (``machine_predicted_unvalidated``), never a validated label.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from ..storage import MetacanStorage, sql_literal
from ..tables.student import CASCADE_DECISIONS_SCHEMA, CASCADE_THRESHOLDS_SCHEMA
from ..vocab import BINARY_TARGETS, CONSTANT_HEAD_STATUS
from .cascade import METHODS, HeadThresholds, certify_head, plan_cascade
from .roles import ROLE_TEACHERS, SAMPLE
from .scoring import score_column
from .training import design_weights, target_value, teacher_call_labels

#: The ``label_batches`` batch the cascade fills.
CASCADE_BATCH = "cascade"


@dataclass(frozen=True)
class CascadeSettings:
    """What the cascade certifies and spends: the teacher (a role teacher's name), its binary heads, the precision
    ``target`` (and ``negative_target`` for NPV, default the same), the certified ``recall`` the negative side must
    keep (None: no cap), the bound's ``confidence`` and ``method`` (:data:`.cascade.METHODS`) and the ``budget`` of
    teacher calls one run adds."""

    teacher: str
    heads: tuple[str, ...]
    target: float = 0.9
    negative_target: float | None = None
    recall: float | None = 0.9
    confidence: float = 0.95
    budget: int = 100
    method: str = "clopper-pearson"

    def check(self) -> None:
        """Raises ValueError naming the bad setting and what it may be."""
        if self.teacher not in ROLE_TEACHERS:
            raise ValueError(f"cascade teacher {self.teacher!r}: expected one of {', '.join(ROLE_TEACHERS)}")
        bad = [h for h in self.heads if h not in BINARY_TARGETS]
        if bad or not self.heads:
            raise ValueError(
                f"cascade heads {list(self.heads)!r}: expected one or more binary heads of {', '.join(BINARY_TARGETS)}"
            )
        for name in ("target", "negative_target", "recall", "confidence"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value < 1.0:
                raise ValueError(f"cascade {name} {value!r}: expected a share strictly between 0 and 1")
        if self.method not in METHODS:
            raise ValueError(f"cascade method {self.method!r}: expected one of {', '.join(METHODS)}")
        if self.budget < 0:
            raise ValueError(f"cascade budget {self.budget!r}: expected a whole number of teacher calls, 0 or more")


@dataclass(frozen=True)
class HeadCascade:
    """One head's certificate and plan."""

    head: str
    thresholds: HeadThresholds
    calibration_n: int
    calibration_positives: int
    ids: list[str]
    scores: np.ndarray
    decisions: np.ndarray
    added: int


def _scores(storage: MetacanStorage, columns: list[str], where: str = "") -> pa.Table:
    path = sql_literal(str(storage.table_dir("student_scores") / "*.parquet"))
    with duckdb.connect() as con:
        cols = ", ".join(f'"{c}"' for c in columns)
        return con.execute(f"SELECT id, {cols} FROM read_parquet({path}) {where} ORDER BY id").to_arrow_table()


def _holdout(storage: MetacanStorage) -> set[str]:
    with storage.connect(read_only=True) as con:
        return {r[0] for r in con.execute("SELECT work_id FROM student_holdout").fetchall()}


def _batched(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT work_id FROM label_batches WHERE batch = ?", [CASCADE_BATCH]).fetchall()}


def no_score_heads(storage: MetacanStorage, teacher: str, heads: tuple[str, ...]) -> dict[str, str]:
    """``{head: reason}`` of the heads of ``teacher`` among ``heads`` that give no score (``student_heads`` status
    ``constant: <reason>``): their ``student_scores`` column is null, so they can certify and plan nothing."""
    if not storage.has_table("student_heads"):
        return {}
    rows = storage.read_table("student_heads", ["teacher", "target", "status"]).to_pylist()
    return {
        r["target"]: r["status"].removeprefix(CONSTANT_HEAD_STATUS)
        for r in rows
        if r["teacher"] == teacher and r["target"] in heads and (r["status"] or "").startswith(CONSTANT_HEAD_STATUS)
    }


def run_cascade(
    storage: MetacanStorage, settings: CascadeSettings, model_version: str, skipped: dict[str, str] | None = None
) -> list[HeadCascade]:
    """Certify and plan every head of ``settings`` (module docstring) and add the teacher's works to the batch.
    A head that gives no score (:func:`no_score_heads`) is left out: nothing is certified, planned or sent for it,
    and ``skipped`` (when given) receives ``{head: reason}``.
    Raises ValueError for bad settings or when ``student_scores`` lacks a head's column."""
    settings.check()
    storage.require("student_scores")
    columns = [score_column(settings.teacher, h) for h in settings.heads]
    scores = _scores(storage, columns)
    missing = [c for c in columns if c not in scores.column_names]
    if missing:
        raise ValueError(f"student_scores has no column {', '.join(missing)}: materialize predictions first")
    without_score = no_score_heads(storage, settings.teacher, settings.heads)
    labels = {r["work_id"]: r for r in teacher_call_labels(storage, settings.teacher)}
    holdout = _holdout(storage)
    ids = scores.column("id").to_pylist()
    calib = [i for i, w in enumerate(ids) if w in holdout and w in labels]
    rest = np.array([i for i, w in enumerate(ids) if w not in holdout and w not in labels], dtype=int)
    weights = np.ones(len(calib))
    if settings.teacher == SAMPLE and calib:
        design = design_weights(storage, {ids[i] for i in calib})
        weights = np.array([design.get(ids[i], {}).get("design_weight") or 1.0 for i in calib])
    out: list[HeadCascade] = []
    with storage.connect() as con:
        batched = _batched(con)
        for head, col in zip(settings.heads, columns, strict=True):
            if head in without_score:
                if skipped is not None:
                    skipped[head] = without_score[head]
                continue
            s = scores.column(col).to_numpy(zero_copy_only=False).astype(float)
            known = [(k, target_value(labels[ids[i]], head)) for k, i in enumerate(calib)]
            known = [(k, y) for k, y in known if y is not None]
            idx = np.array([calib[k] for k, _ in known], dtype=int)
            y = np.array([y for _, y in known], dtype=int)
            w = weights[[k for k, _ in known]] if known else np.ones(0)
            thresholds = certify_head(
                s[idx],
                y,
                settings.target,
                weights=w,
                negative_target=settings.negative_target,
                confidence=settings.confidence,
                method=settings.method,
                negative_recall=settings.recall,
            )
            plan = plan_cascade(s[rest], thresholds, settings.budget)
            send = [
                ids[i] for i, d in zip(rest, plan.decisions, strict=True) if d == "teacher" and ids[i] not in batched
            ]
            if send:
                con.executemany(
                    "INSERT INTO label_batches VALUES (?, ?, now(), ?)",
                    [[CASCADE_BATCH, w_id, f"cascade {model_version} {head}: band"] for w_id in send],
                )
                batched.update(send)
            out.append(
                HeadCascade(
                    head, thresholds, len(y), int(y.sum()), [ids[i] for i in rest], s[rest], plan.decisions, len(send)
                )
            )
    return out


def thresholds_table(
    results: list[HeadCascade], settings: CascadeSettings, model_version: str, run_id: str
) -> pa.Table:
    """The ``cascade_thresholds`` rows of one run."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    rows = []
    for r in results:
        t = r.thresholds
        counts = {d: int((r.decisions == d).sum()) for d in ("positive", "negative", "teacher", "unsettled")}
        rows.append(
            {
                "run_id": run_id,
                "computed_at": now,
                "model_version": model_version,
                "teacher": settings.teacher,
                "target": r.head,
                "precision_target": settings.target,
                "npv_target": settings.negative_target if settings.negative_target is not None else settings.target,
                "recall_target": settings.recall,
                "bound_level": settings.confidence,
                "bound_method": settings.method,
                "calibration_n": r.calibration_n,
                "calibration_positives": r.calibration_positives,
                "positive_threshold": t.positive.threshold,
                "positive_bound": t.positive.bound,
                "negative_threshold": t.negative_threshold,
                "negative_bound": t.negative.bound,
                "negative_vacuous": t.negative.vacuous,
                "works_planned": len(r.ids),
                "decided_positive": counts["positive"],
                "decided_negative": counts["negative"],
                "sent_to_teacher": counts["teacher"],
                "added_to_batch": r.added,
                "unsettled": counts["unsettled"],
            }
        )
    return pa.Table.from_pylist(rows, schema=CASCADE_THRESHOLDS_SCHEMA)


def decisions_table(results: list[HeadCascade], model_version: str) -> pa.Table:
    """The ``cascade_decisions`` rows: one per planned work and head."""
    return pa.table(
        {
            "id": [w for r in results for w in r.ids],
            "model_version": [model_version] * sum(len(r.ids) for r in results),
            "target": [r.head for r in results for _ in r.ids],
            "score": np.concatenate([r.scores for r in results]) if results else np.zeros(0),
            "decision": [str(d) for r in results for d in r.decisions],
        },
        schema=CASCADE_DECISIONS_SCHEMA,
    )
