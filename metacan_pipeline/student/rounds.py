"""Machine scores: the active-learning student, retrained in rounds (SPEC section 7).

One TF-IDF + logistic-regression *arm* per teacher (gemma, codex) on the ``metaresearch`` target,
trained on every labelled teacher call of that teacher outside the held-out venues (unweighted: the
active-learning batches are not a probability sample). Each materialization of ``machine_scores``
scores the whole frame in batches; it is a new *round* only when the arms' training labels changed
since the last round (re-materializing with nothing new re-scores, and adds no round: otherwise five
idle re-runs would "pass" the gate by not moving).

Per round, on the frozen holdout (:mod:`.holdout`), the arms' scores are stored
(``machine_round_scores``) so that every later round compares all rounds on the same works and the
same, current labels. Neither the holdout nor its scores become Python objects (at 4.3 million
frame works the holdout holds hundreds of thousands of works): the holdout is scored in record batches
(:func:`store_holdout_scores`), and the gate reads the stored scores one round (and the round before it) of
one arm at a time as numpy arrays (:func:`maturity_gate`). The *maturity gate* passes when, for every arm:

- relative AP gain over the last 5 rounds, (AP_r - AP_{r-4}) / AP_{r-4}, is below 2% (AP of each round's
  holdout scores against the arm teacher's current holdout labels; needs 5 rounds and both classes);
- churn of the positive set between consecutive rounds is below 0.05 for 3 rounds running (positive
  set = the top k holdout works by score, ties by work id, k = round(teacher's positive rate on the holdout
  x works both rounds scored);
  churn = |P_r symmetric-difference P_{r-1}| / |P_r union P_{r-1}|);
- Spearman rho of consecutive rounds' holdout scores is above 0.98 for 3 rounds running.

Passing means "stopped moving", not "right": rows then carry ``score_only:mature``, otherwise
``score_only:v0-immature-baseline``; neither ever yields a category label (SPEC section 8).

Each new round proposes the next teacher batch from a fresh reservoir (sampling-frame works outside the
held-out venues that codex, the sample-covering teacher, has not labelled and no earlier round
proposed; gemma covers every work already): the largest
arm spread, the scores closest to 0.5 (mean of the arms), and random sentinels (salted hash order),
recorded with the round in ``machine_round_proposals``; the asset ``label_batches``
(:mod:`metacan_pipeline.teachers.core.batches`) adds them to ``label_batches`` as batch :data:`ACTIVE_BATCH`.
A teacher with coverage ``batch:active_learning`` (or ``sample+batch:active_learning``) labels them on
its next run.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from scipy.stats import spearmanr
from sklearn.metrics import average_precision_score

from ..storage import MetacanStorage, sql_literal
from ..tables.student import MACHINE_SCHEMA, ROUND_SCORES_SCHEMA
from ..vocab import ACTIVE_LEARNING_BATCH, SCORE_ONLY_IMMATURE, SCORE_ONLY_MATURE
from .features import STUDENT_FIELDS, make_features, transform
from .heads import BinaryHead
from .holdout import freeze_holdout, frozen_among
from .models import Scorer
from .roles import CENSUS, ROLE_TEACHERS, SAMPLE, direct_labels_key
from .scoring import BATCH_SIZE, score_batches, score_column, scratch_connection, student_texts
from .training import CENSUS_LABELS_MAX, frame_rows_for, frame_venues, outside_holdout, teacher_call_labels

#: One arm per student teacher, sample teacher first (:data:`~.roles.ROLE_TEACHERS`).
ARMS = ROLE_TEACHERS
ACTIVE_BATCH = ACTIVE_LEARNING_BATCH
ROUNDS_CODE_VERSION = "machine-rounds-v1"
AP_GAIN_MAX, AP_WINDOW = 0.02, 5  # SPEC section 7
CHURN_MAX, RHO_MIN, STABLE_ROUNDS = 0.05, 0.98, 3  # SPEC section 7
TARGET = "metaresearch"


NOTE_IMMATURE = (
    "Baseline scores from an immature model (maturity gate not passed after {rounds} training round{s}: {reason}). "
    "Scores rank; they never assert a category."
)
NOTE_MATURE = (
    "The maturity gate passed after {rounds} training rounds: the scores stopped moving on the frozen holdout, "
    "which does not make them right. Scores rank; they never assert a category."
)


def training_signature(train: dict[str, list[dict]]) -> str:
    """SHA-256 (16 hex) of the code version and every arm's training labels (work, label id)."""
    h = hashlib.sha256(ROUNDS_CODE_VERSION.encode())
    for arm in ARMS:
        for r in sorted(train[arm], key=lambda r: r["work_id"]):
            h.update(json.dumps([arm, r["work_id"], r["label_id"]]).encode())
    return h.hexdigest()[:16]


def _is_target(r: dict) -> int:
    return int(TARGET in (r["categories"] or []))


def fit_arms(train: dict[str, list[dict]], texts: dict[str, str]) -> Scorer:
    """A :class:`~.models.Scorer` with one TF-IDF + logistic-regression arm per teacher (unweighted)."""
    train_texts = sorted({texts[r["work_id"]] for a in ARMS for r in train[a]})
    if not train_texts:
        raise ValueError(
            "machine_scores: nothing to train on: no labelled teacher call of a frame work outside the holdout in "
            f"{', '.join(direct_labels_key(a) for a in ARMS)}; materialize frame and the teachers first"
        )
    vectorizer = make_features("tfidf").fit(train_texts)
    heads = {}
    for arm in ARMS:
        rows = train[arm]
        y = np.array([_is_target(r) for r in rows], dtype=int)
        X = transform(vectorizer, [texts[r["work_id"]] for r in rows])
        heads[arm] = {TARGET: BinaryHead(TARGET).fit(X, y, sample_weight=np.ones(len(rows)))}
    return Scorer(vectorizer, heads)


@dataclass(frozen=True)
class ArmInputs:
    """What one round reads: every arm's teacher-call labels, the frame rows of the labelled works, the
    labelled works of the frozen holdout, the holdout's size and the arms' training labels (outside the holdout)."""

    labels: dict[str, list[dict]]
    frame_info: dict[str, dict]
    labelled_holdout: set[str]
    holdout_works: int
    train: dict[str, list[dict]]

    def holdout_labels(self) -> pa.Table:
        """The arm teachers' current labels of the frozen holdout's works: one row per arm and labelled holdout
        work, columns ``arm``, ``work_id`` and ``positive`` (0/1, the label asserts :data:`TARGET`)."""
        rows = [
            (a, r["work_id"], _is_target(r))
            for a in ARMS
            for r in self.labels[a]
            if r["work_id"] in self.labelled_holdout
        ]
        return pa.table(
            {
                "arm": pa.array([r[0] for r in rows], pa.string()),
                "work_id": pa.array([r[1] for r in rows], pa.string()),
                "positive": pa.array([r[2] for r in rows], pa.int8()),
            }
        )


def load_arm_inputs(storage: MetacanStorage, run_id: str) -> ArmInputs:
    """:class:`ArmInputs` from the warehouse (freezing the holdout on the first student run). The census teacher's
    arm reads at most :data:`~.training.CENSUS_LABELS_MAX` of its labels, the subsample ``student_heads`` reads."""
    labels = {a: teacher_call_labels(storage, a, CENSUS_LABELS_MAX if a == CENSUS else None) for a in ARMS}
    labelled = {r["work_id"] for a in ARMS for r in labels[a]}
    frame_info = frame_rows_for(storage, labelled)
    holdout_works, _ = freeze_holdout(storage, frame_venues(storage), run_id)
    held = frozen_among(storage, labelled)
    train = {a: outside_holdout(labels[a], held, frame_info) for a in ARMS}
    return ArmInputs(labels, frame_info, held, holdout_works, train)


def next_round(storage: MetacanStorage, signature: str) -> tuple[int, bool]:
    """``(round number, is a new round)``: a new round when the training signature changed since the last one."""
    with storage.connect() as con:
        last = con.execute(
            "SELECT round, training_signature FROM machine_rounds ORDER BY round DESC LIMIT 1"
        ).fetchone()
    if last is None:
        return 1, True
    return (last[0] + 1, True) if last[1] != signature else (last[0], False)


def store_holdout_scores(storage: MetacanStorage, bundle: Scorer, round_no: int, batch_size: int = BATCH_SIZE) -> int:
    """Write every arm's scores of the frozen holdout's frame works for ``round_no`` (``machine_round_scores``,
    replacing the round's earlier rows in one transaction); returns the rows written.

    In record batches of ``batch_size`` works, as :func:`~.scoring.score_batches` scores the frame: the holdout's
    ids are copied from the catalog to a Parquet file (the catalog lock held for the copy only), semi-joined with
    the frame's files in a scratch DuckDB, and each batch's texts are vectorised and scored by every arm into a
    Parquet file; DuckDB then moves those files into the table.
    """
    scratch = storage.warehouse / ".spill-holdout-scores"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        ids_file = sql_literal(str(Path(tmp) / "holdout_ids.parquet"))
        with storage.connect() as con:
            con.execute(f"COPY (SELECT work_id AS id FROM student_holdout) TO {ids_file} (FORMAT parquet)")
        rows = 0
        with scratch_connection(storage) as con:
            reader = con.execute(
                f"SELECT f.id, {', '.join('f.' + c for c in STUDENT_FIELDS)} "
                f"FROM frame f SEMI JOIN read_parquet({ids_file}) h USING (id)"
            ).to_arrow_reader(batch_size)
            for i, batch in enumerate(reader):
                X = bundle.vectorizer.transform(student_texts(batch))
                for arm in ARMS:
                    scores = np.asarray(bundle.heads[arm][TARGET].score_samples(X), dtype=np.float64)
                    part = pa.table(
                        [
                            pa.array(np.full(batch.num_rows, round_no, dtype=np.int32)),
                            pa.array([arm] * batch.num_rows, pa.string()),
                            batch.column("id"),
                            pa.array(scores),
                        ],
                        schema=ROUND_SCORES_SCHEMA,
                    )
                    pq.write_table(part, Path(tmp) / f"scores-{i:05d}-{arm}.parquet")
                    rows += batch.num_rows
        parts = sql_literal(str(Path(tmp) / "scores-*.parquet"))
        with storage.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute("DELETE FROM machine_round_scores WHERE round = ?", [round_no])
                if rows:
                    con.execute(
                        f"INSERT INTO machine_round_scores SELECT round, arm, work_id, score FROM read_parquet({parts})"
                    )
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
    return rows


def machine_batches(
    storage: MetacanStorage, bundle: Scorer, status: str, note: str, rounds: int, gate_passed: bool, log
):
    """``machine_scores`` record batches (:data:`MACHINE_SCHEMA`): every frame work's arm scores
    (``score_codex`` = the sample teacher's arm, ``score_gemma`` = the census teacher's), their spread and
    the round's validation status."""
    arm_status = "; ".join(f"{a}: {bundle.heads[a][TARGET].status_}" for a in ARMS)
    for b in score_batches(storage, bundle, log=log):
        g, c = b.column(score_column(CENSUS, TARGET)), b.column(score_column(SAMPLE, TARGET))
        n = b.num_rows
        yield pa.RecordBatch.from_pydict(
            {
                "id": b.column("id"),
                "score_gemma": g,
                "score_codex": c,
                "score_spread": pc.abs(pc.subtract(g, c)),  # null where an arm gives no score
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


@dataclass(frozen=True)
class GateReport:
    """The maturity gate's verdict and the per-round series it was read from."""

    passed: bool
    reason: str
    series: dict  # arm -> {"ap": [...], "churn": [...], "rho": [...]} (round order; churn/rho from round 2)


def stored_rounds(storage: MetacanStorage) -> list[int]:
    """The rounds with frozen-holdout scores in ``machine_round_scores``, ascending."""
    with storage.connect() as con:
        return [r[0] for r in con.execute("SELECT DISTINCT round FROM machine_round_scores ORDER BY round").fetchall()]


def _round_arrays(
    storage: MetacanStorage, arm: str, round_no: int, prev: int | None, labels: pa.Table
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One arm's stored holdout scores of ``round_no`` as numpy arrays, in work id order: the scores and 0/1
    labels of the works of ``labels`` (the arm's, :meth:`ArmInputs.holdout_labels`) the round scored, then the
    round's and round ``prev``'s scores of the works both scored (empty without ``prev``)."""
    with storage.connect() as con:
        con.register("gate_labels", labels)
        lab = con.execute(
            "SELECT s.score, l.positive FROM machine_round_scores s JOIN gate_labels l USING (work_id) "
            "WHERE s.round = ? AND s.arm = ? ORDER BY s.work_id",
            [round_no, arm],
        ).fetchnumpy()
        pair = con.execute(
            "SELECT a.score AS now, b.score AS prev FROM machine_round_scores a JOIN machine_round_scores b "
            "USING (arm, work_id) WHERE a.arm = ? AND a.round = ? AND b.round = ? ORDER BY a.work_id",
            [arm, round_no, -1 if prev is None else prev],
        ).fetchnumpy()
    return (
        np.asarray(lab["score"], dtype=np.float64),
        np.asarray(lab["positive"], dtype=np.int64),
        np.asarray(pair["now"], dtype=np.float64),
        np.asarray(pair["prev"], dtype=np.float64),
    )


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Boolean mask of the positive set: the ``k`` highest scores, ties by position (the arrays are in work id
    order, and a stable sort keeps it among equal scores)."""
    mask = np.zeros(len(scores), dtype=bool)
    mask[np.argsort(-scores, kind="stable")[:k]] = True
    return mask


def _arm_series(storage: MetacanStorage, arm: str, rounds: list[int], labels: pa.Table) -> dict:
    """``{"ap": [...], "churn": [...], "rho": [...]}`` of one arm over ``rounds`` (churn and rho from the second)."""
    positives, n_labels = int(pc.sum(labels["positive"]).as_py() or 0), labels.num_rows
    ap, churn, rho = [], [], []
    for i, r in enumerate(rounds):
        scores, y, now, prev = _round_arrays(storage, arm, r, rounds[i - 1] if i else None, labels)
        ap.append(float(average_precision_score(y, scores)) if y.size and y.min() != y.max() else None)
        if not i:
            continue
        k = round(positives / n_labels * len(now)) if n_labels else 0
        p_now, p_prev = _top_k(now, k), _top_k(prev, k)
        union, both = int(np.count_nonzero(p_now | p_prev)), int(np.count_nonzero(p_now & p_prev))
        churn.append((union - both) / union if union else 0.0)
        rho.append(1.0 if np.allclose(now, prev) else float(spearmanr(now, prev).statistic) if len(now) > 2 else None)
    return {"ap": ap, "churn": churn, "rho": rho}


def _arm_fails(arm: str, s: dict, rounds: int) -> list[str]:
    """Why one arm's series ``s`` over ``rounds`` rounds fails the gate (nothing when it passes)."""
    if rounds < AP_WINDOW:
        return [f"{arm}: {rounds} round(s) of the {AP_WINDOW} the AP rule needs"]
    fails = []
    first, last = s["ap"][-AP_WINDOW], s["ap"][-1]
    if first is None or last is None or first <= 0:
        fails.append(
            f"{arm}: AP not evaluable on the frozen holdout (needs positive and negative teacher labels there)"
        )
    elif (last - first) / first >= AP_GAIN_MAX:
        fails.append(
            f"{arm}: AP gain {(last - first) / first:.1%} over the last {AP_WINDOW} rounds >= {AP_GAIN_MAX:.0%}"
        )
    if any(c is None or c >= CHURN_MAX for c in s["churn"][-STABLE_ROUNDS:]):
        fails.append(f"{arm}: churn of the positive set not < {CHURN_MAX} for {STABLE_ROUNDS} rounds running")
    if any(x is None or x <= RHO_MIN for x in s["rho"][-STABLE_ROUNDS:]):
        fails.append(f"{arm}: Spearman rho not > {RHO_MIN} for {STABLE_ROUNDS} rounds running")
    return fails


def maturity_gate(storage: MetacanStorage, labels: pa.Table) -> GateReport:
    """SPEC section 7 maturity gate over every round stored in ``machine_round_scores`` and the current
    frozen-holdout labels (``labels``: :meth:`ArmInputs.holdout_labels`). See the module docstring for the
    three rules.

    Per arm and round: AP of the round's scores of the labelled holdout works (scikit-learn; None without both
    classes); from the second round on, against the round before over the works both scored, the churn of the
    top-k positive sets (:func:`_top_k`) and Spearman rho (SciPy, ties ranked by their mean; 1.0 when the
    scores are all close, None for 2 works or fewer). Only one round pair of one arm is read at a time
    (:func:`_round_arrays`): numpy arrays, never a Python object per work.
    """
    rounds = stored_rounds(storage)
    series, fails = {}, []
    for arm in ARMS:
        series[arm] = _arm_series(storage, arm, rounds, labels.filter(pc.equal(labels["arm"], arm)))
        fails += _arm_fails(arm, series[arm], len(rounds))
    return GateReport(not fails, "passed" if not fails else "; ".join(fails), series)


def propose_next_batch(
    con,
    machine_scores_glob: str,
    sampling_frame_glob: str,
    labelled: pa.Table,
    round_no: int,
    sizes: tuple[int, int, int],
    salt: str,
) -> list[tuple[str, str, float, float, float]]:
    """The next teacher batch from the fresh reservoir: ``sizes`` = (largest spread, closest to 0.5, sentinels).

    The reservoir: works of the sampling frame (``sample_design``: a work outside it gets a rule label,
    not a teacher call) outside the held-out venues, not yet labelled, never proposed before (by a round,
    ``machine_round_proposals``, or in batch :data:`ACTIVE_BATCH` of ``label_batches``).

    ``labelled``: Arrow table of work ids (column ``id``) the batch's teacher (codex) already labelled. Reads the
    scores with DuckDB; returns (work_id, reason, score_codex, score_gemma, score_spread) rows.
    """
    con.register("labelled_ids", labelled)
    con.execute(f"""CREATE OR REPLACE TEMP VIEW reservoir AS SELECT id, score_codex, score_gemma, score_spread
        FROM read_parquet({sql_literal(machine_scores_glob)}) m
        WHERE NOT held_out AND id NOT IN (SELECT id FROM labelled_ids)
          AND id IN (SELECT id FROM read_parquet({sql_literal(sampling_frame_glob)}))
          AND id NOT IN (SELECT work_id FROM machine_round_proposals)
          AND id NOT IN (SELECT work_id FROM label_batches WHERE batch = '{ACTIVE_BATCH}')""")
    n_spread, n_uncertain, n_sentinel = sizes
    picked: list[tuple] = []
    queries = [
        # an arm that gives no score (null) leaves the spread unknown (last) and the mean to the other arm
        ("largest arm spread", f"ORDER BY score_spread DESC NULLS LAST, id LIMIT {n_spread}"),
        (
            "closest to 0.5",
            "ORDER BY abs(coalesce((score_codex + score_gemma) / 2, score_codex, score_gemma) - 0.5) NULLS LAST, id "
            f"LIMIT {n_uncertain}",
        ),
        ("random sentinel", f"ORDER BY sha256('{salt}:{round_no}:' || id) LIMIT {n_sentinel}"),
    ]
    for reason, order in queries:
        taken = [p[0] for p in picked]
        con.register("taken_ids", pa.table({"id": pa.array(taken, pa.string())}))
        rows = con.execute(
            f"SELECT id, score_codex, score_gemma, score_spread FROM reservoir "
            f"WHERE id NOT IN (SELECT id FROM taken_ids) {order}"
        ).fetchall()
        picked += [(wid, reason, c, g, s) for wid, c, g, s in rows]
    return picked


def status_for(gate: GateReport, rounds: int) -> tuple[str, str]:
    """(validation_status, note) of every machine-score row under ``gate`` after ``rounds`` rounds."""
    if gate.passed:
        return SCORE_ONLY_MATURE, NOTE_MATURE.format(rounds=rounds)
    return SCORE_ONLY_IMMATURE, NOTE_IMMATURE.format(rounds=rounds, s="" if rounds == 1 else "s", reason=gate.reason)


def propose_for_round(
    storage: MetacanStorage, inputs: ArmInputs, round_no: int, sizes: tuple[int, int, int], salt: str
) -> list[tuple[str, str, float, float, float]]:
    """:func:`propose_next_batch` over the ``machine_scores`` just written: the works the sample teacher
    has not labelled yet."""
    labelled = pa.table({"id": pa.array(sorted({r["work_id"] for r in inputs.labels[SAMPLE]}), pa.string())})
    with storage.connect() as con:
        return propose_next_batch(
            con,
            str(storage.table_dir("machine_scores") / "*.parquet"),
            str(storage.table_dir("sample_design") / "*.parquet"),
            labelled,
            round_no,
            sizes,
            salt=salt,
        )


def record_round(
    storage: MetacanStorage,
    round_no: int,
    run_id: str,
    signature: str,
    inputs: ArmInputs,
    gate: GateReport,
    proposed: list[tuple],
) -> None:
    """Insert the round (``machine_rounds``) and its proposals (``machine_round_proposals``) in one
    transaction: they land together or not at all. The proposals reach ``label_batches`` through the
    asset ``label_batches`` (:mod:`metacan_pipeline.teachers.core.batches`).

    Raises RuntimeError when a concurrent run recorded the same round first (the primary key refuses the
    insert before any proposal is written twice)."""
    with storage.connect() as con:
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(
                "INSERT INTO machine_rounds VALUES (?, ?, now(), ?, ?, ?, ?, ?, ?)",
                [
                    round_no,
                    run_id,
                    signature,
                    json.dumps({a: len(inputs.train[a]) for a in ARMS}),
                    json.dumps(gate.series),
                    gate.passed,
                    gate.reason,
                    len(proposed),
                ],
            )
            if proposed:
                con.executemany(
                    "INSERT INTO machine_round_proposals VALUES (?, ?, ?, ?, ?, ?)", [(round_no, *p) for p in proposed]
                )
            con.execute("COMMIT")
        except duckdb.ConstraintException as exc:
            con.execute("ROLLBACK")
            raise RuntimeError(
                f"machine_scores: round {round_no} was recorded by another run while this one trained; "
                "materialize machine_scores again (it re-scores and adds a round only for new labels)"
            ) from exc


def rounds_markdown(storage: MetacanStorage) -> str:
    """A markdown table of every recorded round (round, time, training labels, gate, proposals)."""
    with storage.connect() as con:
        rows = con.execute(
            "SELECT round, created_at, training_labels, maturity_gate_passed, proposed FROM machine_rounds ORDER BY round"
        ).fetchall()
    return "| round | at | training labels | gate passed | proposed |\n|---|---|---|---|---|\n" + "".join(
        f"| {r} | {t:%Y-%m-%d %H:%M} | {tl} | {g} | {p} |\n" for r, t, tl, g, p in rows
    )


def proposals_markdown(proposed: list[tuple]) -> str:
    """A markdown table of one round's proposals (work, reason, scores; "no score" where an arm gives none), or a
    note that there are none."""
    if not proposed:
        return "_(none this run)_"

    def f(x) -> str:
        return "no score" if x is None else f"{x:.3f}"

    return "| work | reason | codex | gemma | spread |\n|---|---|---|---|---|\n" + "".join(
        f"| {w} | {why} | {f(c)} | {f(g)} | {f(s)} |\n" for w, why, c, g, s in proposed
    )


def machine_preview(storage: MetacanStorage) -> list[dict]:
    """The 10 ``machine_scores`` rows of largest arm spread (then id)."""
    with duckdb.connect() as con:
        return (
            con.execute(
                "SELECT id, score_gemma, score_codex, score_spread, validation_status FROM read_parquet(?) "
                "ORDER BY score_spread DESC, id LIMIT 10",
                [str(storage.table_dir("machine_scores") / "*.parquet")],
            )
            .to_arrow_table()
            .to_pylist()
        )
