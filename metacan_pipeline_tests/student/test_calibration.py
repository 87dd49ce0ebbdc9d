"""Tests of metacan_pipeline.student.calibration: quota calibration, the support gate and threshold uncertainty."""

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from metacan_pipeline.student.calibration import quota_calibrate, support_gate, threshold_uncertainty_sql
from metacan_pipeline.student.heads import kish_ess, weighted_rate


def _quota(ids, scores, rate):
    con = duckdb.connect()
    con.register("scores", pa.table({"id": ids, "s": pa.array(scores, pa.float64())}))
    q = quota_calibrate(con, "scores", "s", rate, "metaresearch")
    positives = {r[0] for r in con.execute(f"SELECT id FROM scores WHERE {q.decides_sql('s')}").fetchall()}
    return q, positives


def test_quota_calibration_takes_top_k_with_id_tiebreak():
    q, pos = _quota(["W3", "W1", "W2", "W4"], [0.9, 0.5, 0.5, 0.1], rate=0.5)
    assert (q.k, q.threshold, q.boundary_id) == (2, 0.5, "W1") and pos == {"W3", "W1"}
    q, pos = _quota(["W3", "W1", "W2", "W4"], [0.9, 0.5, 0.5, 0.1], rate=0.1)
    assert q.k == 0 and q.threshold is None and pos == set()


def test_quota_decision_matches_the_sorted_top_k_on_ties_and_awkward_floats():
    rng = np.random.default_rng(7)
    ids = [f"W{i}" for i in rng.permutation(5000)]
    scores = np.round(rng.random(5000), 2)  # many ties
    scores[:50] = 0.1 + 0.2  # 0.30000000000000004: a threshold a DECIMAL literal would round
    for rate in (0.0, 0.013, 0.5, 0.999, 1.0):
        q, pos = _quota(ids, scores.tolist(), rate)
        expected = {ids[i] for i in sorted(range(5000), key=lambda i: (-scores[i], ids[i]))[: round(rate * 5000)]}
        assert q.k == len(expected) and pos == expected


def test_support_gate_and_kish():
    w = np.array([1.0] * 10 + [10.0])
    assert kish_ess(w) == pytest.approx(400 / 110)
    assert weighted_rate(np.array([1, 0, 0]), np.array([2.0, 1.0, 1.0])) == 0.5
    g = support_gate(25, 19, 12.0)
    assert not g.passed and "codex positives 19 < 20" in g.reason
    assert support_gate(20, 20, 10.0).passed


@pytest.mark.parametrize(
    "s, t, expected",
    [
        (0.2, 0.2, 1.0),
        (0.1, 0.2, 0.5),
        (0.6, 0.2, 0.5),
        (1.0, 0.2, 0.0),
        (0.0, 0.2, 0.0),
        (0.9, 0.8, 0.5),
        (0.0, 0.0, 1.0),
        (0.5, 0.0, 0.5),
        (1.0, 1.0, 1.0),
        (0.5, 1.0, 0.5),
    ],
)
def test_threshold_uncertainty(s, t, expected):
    """SPEC section 6: clamp01(1 - |s - t| / (t if s < t else 1 - t)), including thresholds at 0 and 1."""
    got = duckdb.sql(f"SELECT {threshold_uncertainty_sql(repr(s) + '::DOUBLE', t)}").fetchone()[0]
    assert got == pytest.approx(expected)
