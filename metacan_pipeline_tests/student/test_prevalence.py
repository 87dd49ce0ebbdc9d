"""Tests of metacan_pipeline.student.prevalence: stratified rates and the pilot screeners' published prevalence."""

import math

import dagster as dg
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.prevalence import prevalence, stratified_rate
from metacan_pipeline.teachers.import_assets import ImportedLabelsConfig, imported_labels
from metacan_pipeline_tests.builders import SHARED


def test_stratified_rate_by_hand():
    # stratum a: 2 of 4 sampled works positive, weight 2 each (N_a = 8); stratum b: census of 2, one positive
    y, w, h = [1, 1, 0, 0, 1, 0], [2, 2, 2, 2, 1, 1], ["a"] * 4 + ["b"] * 2
    e = stratified_rate(y, w, h)
    # p = (2+2+1) / (8+2) = 0.5; u = w (y - p) / 10: a -> 0.1, 0.1, -0.1, -0.1 (mean 0), b -> 0.05, -0.05
    # var = (1 - 4/8) * 4/3 * 4 * 0.01 + (1 - 2/2) * ... = 0.5 * 4/3 * 0.04 = 0.026667
    assert e.rate == pytest.approx(0.5) and e.se == pytest.approx(math.sqrt(0.5 * 4 / 3 * 0.04))
    assert e.ci_low == pytest.approx(0.5 - 1.959964 * e.se, abs=1e-6) and e.strata_single == 0
    census = stratified_rate([1, 0, 0, 0], [1, 1, 1, 1], ["all"] * 4)
    assert census.rate == 0.25 and census.se == 0 and census.ci_low == census.ci_high == 0.25  # no sampling variance
    assert stratified_rate([1], [3.0], ["x"]).strata_single == 1
    with pytest.raises(ValueError, match="> 0"):
        stratified_rate([1], [0.0], ["x"])


def test_the_pilot_screeners_published_prevalence_and_the_swap_range(tmp_path):
    resources = {"storage": MetacanStorage(data_dir=str(tmp_path))}
    storage = resources["storage"]
    import pyarrow as pa

    storage.write_table("frame", pa.table({"id": pa.array([], pa.string())}))
    run_config = dg.RunConfig(
        {"imported_labels": ImportedLabelsConfig(pilot_dirs=[str(SHARED / "data" / "metacan_pilot")])}
    )
    result = dg.materialize(
        [imported_labels, prevalence],
        resources=resources,
        run_config=run_config,
        selection=[imported_labels.key, prevalence.key],
        raise_on_error=True,
    )
    assert result.success
    rows = {
        (r["teacher"], r["method"]): r
        for r in storage.read_table("prevalence").to_pylist()
        if r["category"] == "metaresearch"
    }
    a, b = rows[("pilot_a", "design_weighted_teacher_rate")], rows[("pilot_b", "design_weighted_teacher_rate")]
    # SOURCES.md: design-weighted in-scope prevalence A 0.0106, B 0.0237 (1,290 double-screened works, weights sum 5,493)
    assert (
        round(a["rate"], 4) == 0.0106
        and round(b["rate"], 4) == 0.0237
        and a["n"] == 1290
        and round(a["n_weighted"]) == 5493
    )
    # A's in-scope works all sit in strata taken whole (selection probability 1): no sampling variance; B's do not
    assert a["se"] == pytest.approx(0, abs=1e-12) and 0.002 < b["se"] < 0.005 and b["ci_low"] < 0.0237 < b["ci_high"]
    swap = rows[(None, "screener_swap_range")]
    assert (swap["ci_low"], swap["ci_high"]) == (a["rate"], b["rate"])


def test_classify_and_count_is_the_candidate_share_and_is_not_computed_while_a_teacher_is_unqualified(storage):
    from metacan_pipeline.student.assets import predictions, student_heads
    from metacan_pipeline.student.prevalence import classify_and_count_rows
    from metacan_pipeline_tests.builders import N_WORKS, record_qualification, run_student, write_inputs

    write_inputs(storage)
    run_student(storage, student_heads, predictions)
    preds = storage.read_table("predictions").to_pylist()
    share = sum("metaresearch" in p["candidate_categories"] for p in preds) / N_WORKS
    rows = {(r["method"], r["category"]): r for r in classify_and_count_rows(storage)}
    assert share > 0 and rows[("classify_and_count", "metaresearch")]["rate"] == pytest.approx(share)
    record_qualification(storage, "codex", agree=False)  # the newest result counts
    rows = {(r["method"], r["category"]): r for r in classify_and_count_rows(storage)}
    row = rows[("classify_and_count", "metaresearch")]
    assert row["rate"] is None and row["design"].startswith("not computed: teacher not qualified (kappa 0.00")
