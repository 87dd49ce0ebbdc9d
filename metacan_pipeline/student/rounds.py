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
written to ``label_batches`` as batch :data:`ACTIVE_BATCH`. A teacher with coverage
``batch:active_learning`` (or ``sample+batch:active_learning``) labels them on its next run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from scipy.stats import spearmanr
from sklearn.metrics import average_precision_score

from ..storage import MetacanStorage, sql_literal
from ..vocab import SCORE_ONLY_IMMATURE, SCORE_ONLY_MATURE
from .features import make_features, transform
from .heads import fit_binary

ARMS = ("codex", "gemma")
ACTIVE_BATCH = "active_learning"
ROUNDS_CODE_VERSION = "machine-rounds-v1"
AP_GAIN_MAX, AP_WINDOW = 0.02, 5  # SPEC section 7
CHURN_MAX, RHO_MIN, STABLE_ROUNDS = 0.05, 0.98, 3  # SPEC section 7


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


def fit_arms(train: dict[str, list[dict]], texts: dict[str, str]) -> dict:
    """A scoring bundle (:func:`~.scoring.score_batches`) with one TF-IDF + logistic-regression arm per teacher."""
    train_texts = sorted({texts[r["work_id"]] for a in ARMS for r in train[a]})
    if not train_texts:
        raise ValueError(
            "machine_scores: nothing to train on: no labelled teacher call of a frame work outside the holdout in "
            f"{', '.join(f'direct_labels_{a}' for a in ARMS)}; materialize frame and the teachers first"
        )
    vectorizer = make_features("tfidf").fit(train_texts)
    heads = {}
    for arm in ARMS:
        rows = train[arm]
        y = np.array([int("metaresearch" in (r["categories"] or [])) for r in rows], dtype=int)
        heads[arm] = {
            "metaresearch": fit_binary(
                "metaresearch", transform(vectorizer, [texts[r["work_id"]] for r in rows]), y, np.ones(len(rows))
            )
        }
    return {"vectorizer": vectorizer, "heads": heads}


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
    not a teacher call) outside the held-out venues, not yet labelled, never proposed before.

    ``labelled``: Arrow table of work ids (column ``id``) the batch's teacher (codex) already labelled. Reads the
    scores with DuckDB; returns (work_id, reason, score_codex, score_gemma, score_spread) rows.
    """
    con.register("labelled_ids", labelled)
    con.execute(f"""CREATE OR REPLACE TEMP VIEW reservoir AS SELECT id, score_codex, score_gemma, score_spread
        FROM read_parquet({sql_literal(machine_scores_glob)}) m
        WHERE NOT held_out AND id NOT IN (SELECT id FROM labelled_ids)
          AND id IN (SELECT id FROM read_parquet({sql_literal(sampling_frame_glob)}))
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
