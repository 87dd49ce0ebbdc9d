"""Tests of metacan_pipeline.student.evaluation: binary metrics and the expected calibration error."""

import numpy as np
import pytest

from metacan_pipeline.student.evaluation import binary_metrics, expected_calibration_error


def test_binary_metrics_and_ece_by_hand():
    y = np.array([1, 0, 1, 0])
    s = np.array([0.95, 0.85, 0.15, 0.05])
    # bins [0.9,1): score .95 rate 1; [0.8,.9): .85 vs 0; [0.1,.2): .15 vs 1; [0,.1): .05 vs 0
    assert expected_calibration_error(y, s, np.ones(4)) == pytest.approx((0.05 + 0.85 + 0.85 + 0.05) / 4)
    m = binary_metrics(y, s)
    assert m["ap"] == pytest.approx((1 + 2 / 3) / 2) and m["auroc"] == pytest.approx(0.75)
    assert binary_metrics(np.array([0, 0]), np.array([0.1, 0.2]))["ap"] is None
    assert binary_metrics(np.array([]), np.array([]))["note"].startswith("not evaluated")
