"""The frozen-holdout part of ``machine_scores`` written over Python objects (commit a48d457): the holdout read as a set of every work, its scores written from a list of tuples, every round's scores
read into ``{round: {arm: {work_id: score}}}`` and the maturity gate computed over those dicts. Kept, unchanged but
for the names, as the reference the tests of :mod:`metacan_pipeline.student.rounds` compare the new gate with, and as
the baseline of ``benchmarks/bench_machine_rounds.py``; nothing in the pipeline imports it."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import average_precision_score

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.models import Scorer
from metacan_pipeline.student.rounds import (
    AP_GAIN_MAX,
    AP_WINDOW,
    ARMS,
    CHURN_MAX,
    RHO_MIN,
    STABLE_ROUNDS,
    TARGET,
    GateReport,
)
from metacan_pipeline.student.training import frame_rows_for


def frozen_holdout(storage: MetacanStorage) -> set[str]:
    """Every work of the frozen holdout (what ``freeze_holdout`` returned once the holdout was frozen)."""
    with storage.connect() as con:
        return {r[0] for r in con.execute("SELECT work_id FROM student_holdout").fetchall()}


def holdout_labels(labels: dict[str, list[dict]], holdout: set[str]) -> dict[str, dict[str, int]]:
    """``{arm: {work id: 0/1}}``: the arm teacher's labels of the frozen holdout's works (``ArmInputs.holdout_labels``)."""
    return {
        a: {r["work_id"]: int(TARGET in (r["categories"] or [])) for r in labels[a] if r["work_id"] in holdout}
        for a in ARMS
    }


def store_holdout_scores(storage: MetacanStorage, bundle: Scorer, holdout: set[str], round_no: int) -> int:
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


def _positive_set(scores: dict[str, float], k: int) -> set[str]:
    return set(sorted(scores, key=lambda w: (-scores[w], w))[:k])


def maturity_gate(history: dict[int, dict[str, dict[str, float]]], labels: dict[str, dict[str, int]]) -> GateReport:
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
    with storage.connect() as con:
        rows = con.execute("SELECT round, arm, work_id, score FROM machine_round_scores").fetchall()
    out: dict[int, dict[str, dict[str, float]]] = {}
    for r, arm, wid, s in rows:
        out.setdefault(r, {}).setdefault(arm, {})[wid] = s
    return out
