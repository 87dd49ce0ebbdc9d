"""Tests of metacan_pipeline.student.predicting (student/assets.py before the split): the predictions asset."""

import dagster as dg
import pyarrow as pa
import pytest

from metacan_pipeline.student.assets import predictions, student_heads
from metacan_pipeline.student.models import load_published
from metacan_pipeline.student.predicting import current_model_version
from metacan_pipeline.student.scoring import score_batches
from metacan_pipeline.tables.student import student_scores_schema
from metacan_pipeline.vocab import CATEGORIES, PREDICTION_STATUS
from metacan_pipeline_tests.builders.common import sql
from metacan_pipeline_tests.builders.student import N_WORKS, record_qualification, run_student, write_inputs
from metacan_pipeline_tests.builders.teachers import labels, write_labels


def test_absent_about_ca_labels_do_not_deflate_the_quota_rate(storage):
    """A teacher source may declare about_ca_* absent (NULL). The design-weighted rate (and so k) must be
    over the labels that carry the field; before, NULL counted as negative: rate 0.1 for a true 0.2, k halved."""
    write_inputs(storage)
    codex = labels(storage, "codex")
    for i, r in enumerate(codex):
        if i % 2:
            r["about_ca_topic"] = None
    write_labels(storage, "codex", codex)
    run_student(storage, student_heads, predictions)
    known = [r["about_ca_topic"] for r in codex if r["about_ca_topic"] is not None]
    true_rate = sum(known) / len(known)  # equal design weights
    ((rate, k),) = sql(storage, "SELECT rate, k FROM prediction_thresholds WHERE target = 'about_ca_topic'")
    assert rate == pytest.approx(true_rate) and k == round(true_rate * N_WORKS)


def test_absent_gemma_about_ca_is_not_a_disagreement(storage):
    """teacher_disagreement_score is max |codex score - gemma label| over the targets gemma labelled: an
    absent (NULL) gemma about_ca value is unknown, not a 0 (SPEC section 8: absence is not a negative); a codex head
    that gives no score enters no term."""
    write_inputs(storage)
    g = labels(storage, "gemma")
    for r in g:
        r["about_ca_topic"] = r["about_ca_system"] = None
    write_labels(storage, "gemma", g)
    run_student(storage, student_heads, predictions)
    gem = {r["work_id"]: r for r in g}
    for p in storage.read_table("predictions").to_pylist():
        cats = gem[p["id"]]["categories"]
        # a head that gives no score (null: its labels held one class) is no disagreement either
        expected = max(
            abs(s - int(c in cats))
            for s, c in zip(p["category_scores_codex"], _categories(), strict=False)
            if s is not None
        )
        assert p["teacher_disagreement_score"] == pytest.approx(expected), p["id"]


def _categories():
    from metacan_pipeline.vocab import CATEGORIES

    return CATEGORIES


def test_work_ids_with_quotes_and_non_ascii_are_decided_by_score_then_id(storage):
    """Ids with a quote and non-ASCII characters reach the quota SQL as literals: the decisions must still
    be exactly the top k by (score desc, id asc)."""
    frame = write_inputs(storage)
    rename = {
        r["id"]: f"W{r['id'][1:]}" + ("O'Brien" if i % 3 == 0 else "é" if i % 3 == 1 else "")
        for i, r in enumerate(frame)
    }
    for name in ("frame", "sample_design"):
        t = storage.read_table(name).to_pylist()
        for r in t:
            r["id"] = rename[r["id"]]
        storage.write_table(name, pa.Table.from_pylist(t))
    for teacher in ("codex", "gemma"):
        rows = labels(storage, teacher)
        for r in rows:
            r["work_id"] = rename[r["work_id"]]
        write_labels(storage, teacher, rows)
    run_student(storage, student_heads, predictions)
    scores = {r["id"]: r["codex__metaresearch"] for r in storage.read_table("student_scores").to_pylist()}
    ((k, boundary),) = sql(storage, "SELECT k, boundary_id FROM prediction_thresholds WHERE target = 'metaresearch'")
    order = sorted(scores, key=lambda w: (-scores[w], w.encode()))
    assert boundary == order[k - 1]
    gemma = {r["work_id"]: r["categories"] for r in labels(storage, "gemma")}
    decided = set(order[:k])
    for p in storage.read_table("predictions").to_pylist():
        assert ("metaresearch" in p["candidate_categories"]) == (p["id"] in decided or "metaresearch" in gemma[p["id"]])


def test_predictions_follow_spec_section_6(storage):
    write_inputs(storage)
    result = run_student(storage, student_heads, predictions)
    assert all(c.passed for c in result.get_asset_check_evaluations())
    # the scores' column schema in the UI: every written column, each described (one column per head)
    written = {
        e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()
    }
    shown = {c.name: c.description for c in written["student_scores"]["dagster/column_schema"].schema.columns}
    assert list(shown) == storage.read_table("student_scores").column_names and all(shown.values())
    assert shown["codex__metaresearch"].startswith("the score in [0, 1] of teacher codex's head metaresearch")
    assert shown["gemma__genre__argmax"] == "the most probable class of teacher gemma's head genre"
    scores = {r["id"]: r for r in storage.read_table("student_scores").to_pylist()}
    preds = {r["id"]: r for r in storage.read_table("predictions").to_pylist()}
    gemma = {r["work_id"]: r for r in storage.read_table("direct_labels_gemma").to_pylist()}
    thresholds = {r["target"]: r for r in storage.read_table("prediction_thresholds").to_pylist()}
    assert len(preds) == N_WORKS and {r["prediction_status"] for r in preds.values()} == {PREDICTION_STATUS}

    t = thresholds["metaresearch"]
    assert t["gate_passed"] and t["rate"] == 0.5  # 120 positives among the 240 sample labels, equal weights
    assert t["k"] == round(t["rate"] * N_WORKS)
    order = sorted(scores, key=lambda w: (-scores[w]["codex__metaresearch"], w))
    decided = set(order[: t["k"]])
    assert t["boundary_id"] == order[t["k"] - 1] and t["threshold"] == scores[order[t["k"] - 1]]["codex__metaresearch"]
    assert thresholds["metaepi_narrow"]["k"] is None  # failed the gate: no quota, no decision
    for wid, p in preds.items():
        g_meta = "metaresearch" in gemma[wid]["categories"]
        assert ("metaresearch" in p["candidate_categories"]) == (wid in decided or g_meta)
        assert ("metaresearch" in p["consensus_categories"]) == (wid in decided and g_meta)
        assert "metaepi_narrow" not in p["consensus_categories"]
        g_bin = [int(c in gemma[wid]["categories"]) for c in CATEGORIES] + [
            int(gemma[wid]["about_ca_system"]),
            int(gemma[wid]["about_ca_topic"]),
        ]
        c_s = p["category_scores_codex"] + [p["about_ca_system_score_codex"], p["about_ca_topic_score_codex"]]
        assert p["teacher_disagreement_score"] == pytest.approx(
            max(abs(a - b) for a, b in zip(c_s, g_bin, strict=False) if a is not None)
        )
        s_meta, thr = scores[wid]["codex__metaresearch"], t["threshold"]
        tu = [
            max(
                0.0,
                min(
                    1.0,
                    1
                    - abs(scores[wid][f"codex__{h}"] - thresholds[h]["threshold"])
                    / (
                        thresholds[h]["threshold"]
                        if scores[wid][f"codex__{h}"] < thresholds[h]["threshold"]
                        else 1 - thresholds[h]["threshold"]
                    ),
                ),
            )
            for h in thresholds
            if thresholds[h]["k"]
        ]
        assert p["threshold_uncertainty_score"] == pytest.approx(max(tu))
        assert p["genre_candidate"] == gemma[wid]["genre"]
        assert p["genre_consensus"] == (gemma[wid]["genre"] if p["genre_codex"] == gemma[wid]["genre"] else None)
        assert s_meta == p["category_scores_codex"][0] and thr is not None
    assert sum("metaresearch" in p["candidate_categories"] for p in preds.values()) >= t["k"]


def test_an_unqualified_census_teacher_enters_no_candidate_or_consensus(storage):
    """SPEC section 4: the census teacher failed its qualification test (its newest result): its labels
    stay published beside the prediction, but candidate = the sample teacher's decisions alone and nothing
    is a consensus."""
    write_inputs(storage)
    g = labels(storage, "gemma")
    for r in g[::7]:  # gemma-only calls, which an unqualified census teacher must not add to the candidate
        r["categories"] = sorted(set(r["categories"]) | {"metaresearch"})
    write_labels(storage, "gemma", g)
    record_qualification(storage, "gemma", agree=False)
    run_student(storage, student_heads, predictions)
    t = {r["target"]: r for r in storage.read_table("prediction_thresholds").to_pylist()}["metaresearch"]
    scores = {r["id"]: r["codex__metaresearch"] for r in storage.read_table("student_scores").to_pylist()}
    decided = set(sorted(scores, key=lambda w: (-scores[w], w))[: t["k"]])
    gemma = {r["work_id"]: r for r in storage.read_table("direct_labels_gemma").to_pylist()}
    preds = storage.read_table("predictions").to_pylist()
    assert t["gate_passed"] and len(decided) == t["k"] == round(0.5 * N_WORKS)
    assert sum("metaresearch" in gemma[p["id"]]["categories"] and p["id"] not in decided for p in preds) > 0
    for p in preds:
        assert ("metaresearch" in p["candidate_categories"]) == (p["id"] in decided)
        assert p["consensus_categories"] == [] and p["genre_candidate"] is None
        assert p["genre_gemma"] == gemma[p["id"]]["genre"]  # still shown, as a direct label


def test_an_unqualified_sample_teacher_decides_no_head(storage):
    write_inputs(storage)
    record_qualification(storage, "codex", agree=False)
    run_student(storage, student_heads, predictions)
    thresholds = storage.read_table("prediction_thresholds").to_pylist()
    assert not any(r["gate_passed"] for r in thresholds) and {r["k"] for r in thresholds} == {None}
    assert all(r["gate_reason"].startswith("sample teacher not qualified (kappa 0.00") for r in thresholds)
    gemma = {r["work_id"]: r for r in storage.read_table("direct_labels_gemma").to_pylist()}
    for p in storage.read_table("predictions").to_pylist():
        assert p["candidate_categories"] == [c for c in CATEGORIES if c in gemma[p["id"]]["categories"]]
        assert p["consensus_categories"] == [] and p["genre_codex"] is None


@pytest.mark.slow
def test_scoring_on_the_dask_scheduler_that_the_setting_names_equals_scoring_here(storage, monkeypatch):
    """With METACAN_DASK_SCHEDULER set, predictions score the frame on that scheduler's workers: the same
    student_scores, row for row and in frame order, as scoring in this process; the scheduler is left running."""
    from distributed import Client, LocalCluster

    write_inputs(storage)
    run_student(storage, student_heads)
    bundle = load_published(storage, current_model_version(storage))
    here = pa.Table.from_batches(list(score_batches(storage, bundle, batch_size=64, progress=False)))
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        there = pa.Table.from_batches(
            list(score_batches(storage, bundle, batch_size=64, progress=False, scheduler=cluster.scheduler_address))
        )
        monkeypatch.setenv("METACAN_DASK_SCHEDULER", cluster.scheduler_address)
        instance = dg.DagsterInstance.ephemeral()
        result = dg.materialize([predictions], resources={"storage": storage}, instance=instance)
        said = [e.user_message for e in instance.all_logs(result.run_id)]
        assert f"student scoring on the Dask scheduler at {cluster.scheduler_address} (2 worker(s) now)" in said
        with Client(cluster.scheduler_address, timeout="10s") as client:  # not closed by the scoring
            assert len(client.scheduler_info()["workers"]) == 2
    assert here.num_rows == N_WORKS and there.equals(here)
    assert storage.read_table("student_scores").equals(here)


def test_a_student_scores_column_nobody_described_is_refused_by_name():
    written = pa.schema([("id", pa.string()), ("codex__metaresearch", pa.float64()), ("calibrated", pa.float64())])
    with pytest.raises(ValueError, match="'calibrated' has no description"):
        student_scores_schema(written)
    described = student_scores_schema(written.remove(2))
    assert [f.metadata[b"description"] for f in described] == [
        b"OpenAlex short work id (W123...)",
        b"the score in [0, 1] of teacher codex's head metaresearch (a score, never a category; null when the head "
        b"gives no score: its training labels held one class)",
    ]
