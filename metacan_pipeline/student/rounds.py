"""Machine scores: the active-learning student, retrained in rounds (SPEC section 7, issue 5).

One TF-IDF + logistic-regression *arm* per teacher (gemma, codex) on the ``metaresearch`` target,
trained on every labelled teacher call of that teacher outside the held-out venues (unweighted: the
active-learning batches are not a probability sample). Each materialization of ``machine_scores``
scores the whole frame in batches; it is a new *round* only when the arms' training labels changed
since the last round (re-materializing with nothing new re-scores, and adds no round: otherwise five
idle re-runs would "pass" the gate by not moving).

Per round, on the frozen holdout (:mod:`.holdout`), the arms' scores are stored
(``machine_round_scores``) so that every later round compares all rounds on the same works and the
same, current labels. The *maturity gate* passes when, for every arm:

- relative AP gain over the last 5 rounds, (AP_r - AP_{r-4}) / AP_{r-4}, is below 2% (AP of each round's
  holdout scores against the arm teacher's current holdout labels; needs 5 rounds and both classes);
- churn of the positive set between consecutive rounds is below 0.05 for 3 rounds running (positive
  set = the top k holdout works by score, k = round(teacher's positive rate on the holdout x holdout size);
  churn = |P_r symmetric-difference P_{r-1}| / |P_r union P_{r-1}|);
- Spearman rho of consecutive rounds' holdout scores is above 0.98 for 3 rounds running.

Passing means "stopped moving", not "right": rows then carry ``score_only:mature``, otherwise
``score_only:v0-immature-baseline``; neither ever yields a category label (SPEC section 8).

Each new round proposes the next teacher batch from a fresh reservoir (sampling-frame works outside the
held-out venues that codex, the sample-covering teacher, has not labelled and no earlier round
proposed; gemma covers every work already): the largest
arm spread, the scores closest to 0.5 (mean of the arms), and random sentinels (salted hash order),
recorded with the round in ``machine_round_proposals``; the asset ``label_batches``
(:mod:`metacan_pipeline.teachers.batches`) adds them to ``label_batches`` as batch :data:`ACTIVE_BATCH`.
A teacher with coverage ``batch:active_learning`` (or ``sample+batch:active_learning``) labels them on
its next run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
from scipy.stats import spearmanr
from sklearn.metrics import average_precision_score

from ..storage import MetacanStorage, sql_literal
from ..tables.student import MACHINE_SCHEMA
from ..vocab import ACTIVE_LEARNING_BATCH, SCORE_ONLY_IMMATURE, SCORE_ONLY_MATURE
from .features import make_features, transform
from .heads import BinaryHead
from .holdout import freeze_holdout
from .models import Scorer
from .roles import CENSUS, SAMPLE, STUDENT_TEACHERS, direct_labels_key
from .scoring import score_batches, score_column
from .training import CENSUS_LABELS_MAX, frame_rows_for, frame_venues, outside_holdout, teacher_call_labels

#: One arm per student teacher, sample teacher first (:data:`~.roles.STUDENT_TEACHERS`).
ARMS = STUDENT_TEACHERS
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
    frozen holdout and the arms' training labels (outside the holdout)."""

    labels: dict[str, list[dict]]
    frame_info: dict[str, dict]
    holdout: set[str]
    train: dict[str, list[dict]]

    def holdout_labels(self) -> dict[str, dict[str, int]]:
        """``{arm: {work id: 0/1}}``: the arm teacher's current labels of the frozen holdout's works."""
        return {a: {r["work_id"]: _is_target(r) for r in self.labels[a] if r["work_id"] in self.holdout} for a in ARMS}


def load_arm_inputs(storage: MetacanStorage, run_id: str) -> ArmInputs:
    """:class:`ArmInputs` from the warehouse (freezing the holdout on the first student run). The census teacher's
    arm reads at most :data:`~.training.CENSUS_LABELS_MAX` of its labels, the subsample ``student_heads`` reads."""
    labels = {a: teacher_call_labels(storage, a, CENSUS_LABELS_MAX if a == CENSUS else None) for a in ARMS}
    frame_info = frame_rows_for(storage, {r["work_id"] for a in ARMS for r in labels[a]})
    holdout, _ = freeze_holdout(storage, frame_venues(storage), run_id)
    train = {a: outside_holdout(labels[a], holdout, frame_info) for a in ARMS}
    return ArmInputs(labels, frame_info, holdout, train)


def next_round(storage: MetacanStorage, signature: str) -> tuple[int, bool]:
    """``(round number, is a new round)``: a new round when the training signature changed since the last one."""
    with storage.connect() as con:
        last = con.execute(
            "SELECT round, training_signature FROM machine_rounds ORDER BY round DESC LIMIT 1"
        ).fetchone()
    if last is None:
        return 1, True
    return (last[0] + 1, True) if last[1] != signature else (last[0], False)


def store_holdout_scores(storage: MetacanStorage, bundle: Scorer, holdout: set[str], round_no: int) -> int:
    """Write every arm's scores of the frozen holdout's works for ``round_no`` (``machine_round_scores``,
    replacing the round's earlier rows); returns the rows written."""
    hold_info = frame_rows_for(storage, holdout)
    hold_ids = sorted(hold_info)
    X = bundle.vectorizer.transform([hold_info[w]["text"] for w in hold_ids]) if hold_ids else None
    rows = [
        (round_no, a, w, float(s))
        for a in ARMS
        for w, s in zip(hold_ids, bundle.heads[a][TARGET].score_samples(X) if hold_ids else [], strict=False)
    ]
    with storage.connect() as con:
        con.execute("DELETE FROM machine_round_scores WHERE round = ?", [round_no])
        if rows:
            con.executemany("INSERT INTO machine_round_scores VALUES (?, ?, ?, ?)", rows)
    return len(rows)


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


@dataclass(frozen=True)
class GateReport:
    """The maturity gate's verdict and the per-round series it was read from."""

    passed: bool
    reason: str
    series: dict  # arm -> {"ap": [...], "churn": [...], "rho": [...]} (round order; churn/rho from round 2)


def _positive_set(scores: dict[str, float], k: int) -> set[str]:
    return set(sorted(scores, key=lambda w: (-scores[w], w))[:k])


def maturity_gate(history: dict[int, dict[str, dict[str, float]]], labels: dict[str, dict[str, int]]) -> GateReport:
    """SPEC section 7 maturity gate over ``history`` ({round: {arm: {work_id: holdout score}}}) and the
    current frozen-holdout labels ({arm: {work_id: 0/1}}). See the module docstring for the three rules."""
    rounds = sorted(history)
    series, fails = {}, []
    for arm in ARMS:
        lab = labels.get(arm, {})
        ap, churn, rho = [], [], []
        for i, r in enumerate(rounds):
            sc = history[r].get(arm, {})
            ids = [w for w in lab if w in sc]
            y = np.array([lab[w] for w in ids])
            ap.append(float(average_precision_score(y, [sc[w] for w in ids])) if len(set(y.tolist())) == 2 else None)
            if i:
                prev = history[rounds[i - 1]].get(arm, {})
                common = sorted(set(sc) & set(prev))
                k = round(float(np.mean(list(lab.values()))) * len(common)) if lab else 0
                p_now, p_prev = (
                    _positive_set({w: sc[w] for w in common}, k),
                    _positive_set({w: prev[w] for w in common}, k),
                )
                union = p_now | p_prev
                churn.append(len(p_now ^ p_prev) / len(union) if union else 0.0)
                a, b = [sc[w] for w in common], [prev[w] for w in common]
                rho.append(1.0 if np.allclose(a, b) else float(spearmanr(a, b).statistic) if len(common) > 2 else None)
        series[arm] = {"ap": ap, "churn": churn, "rho": rho}
        if len(rounds) < AP_WINDOW:
            fails.append(f"{arm}: {len(rounds)} round(s) of the {AP_WINDOW} the AP rule needs")
            continue
        first, last = ap[-AP_WINDOW], ap[-1]
        if first is None or last is None or first <= 0:
            fails.append(
                f"{arm}: AP not evaluable on the frozen holdout (needs positive and negative teacher labels there)"
            )
        elif (last - first) / first >= AP_GAIN_MAX:
            fails.append(
                f"{arm}: AP gain {(last - first) / first:.1%} over the last {AP_WINDOW} rounds >= {AP_GAIN_MAX:.0%}"
            )
        if any(c is None or c >= CHURN_MAX for c in churn[-STABLE_ROUNDS:]):
            fails.append(f"{arm}: churn of the positive set not < {CHURN_MAX} for {STABLE_ROUNDS} rounds running")
        if any(x is None or x <= RHO_MIN for x in rho[-STABLE_ROUNDS:]):
            fails.append(f"{arm}: Spearman rho not > {RHO_MIN} for {STABLE_ROUNDS} rounds running")
    return GateReport(not fails, "passed" if not fails else "; ".join(fails), series)


def round_history(storage: MetacanStorage) -> dict[int, dict[str, dict[str, float]]]:
    """Every stored round's frozen-holdout scores: {round: {arm: {work_id: score}}}."""
    with storage.connect() as con:
        rows = con.execute("SELECT round, arm, work_id, score FROM machine_round_scores").fetchall()
    out: dict[int, dict[str, dict[str, float]]] = {}
    for r, arm, wid, s in rows:
        out.setdefault(r, {}).setdefault(arm, {})[wid] = s
    return out


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
        ("largest arm spread", f"ORDER BY score_spread DESC, id LIMIT {n_spread}"),
        ("closest to 0.5", f"ORDER BY abs((score_codex + score_gemma) / 2 - 0.5), id LIMIT {n_uncertain}"),
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
    asset ``label_batches`` (:mod:`metacan_pipeline.teachers.batches`).

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
    """A markdown table of one round's proposals (work, reason, scores), or a note that there are none."""
    if not proposed:
        return "_(none this run)_"
    return "| work | reason | codex | gemma | spread |\n|---|---|---|---|---|\n" + "".join(
        f"| {w} | {why} | {c:.3f} | {g:.3f} | {s:.3f} |\n" for w, why, c, g, s in proposed
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
