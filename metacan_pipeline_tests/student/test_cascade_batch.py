"""Tests of the cascade coverage mode (``cascade_batch``): certified thresholds from the frozen holdout's teacher
labels, the band's most uncertain works added to batch ``cascade`` once, and a teacher covering that batch."""

import dagster as dg
import numpy as np
import pytest

from metacan_pipeline.release.bundle import copy_model_cards
from metacan_pipeline.student.assets import cascade_batch, predictions, student_heads
from metacan_pipeline.student.card import read_card, report_dir
from metacan_pipeline.student.cascade import certify_head
from metacan_pipeline.student.cascade_batch import CASCADE_BATCH
from metacan_pipeline.student.cascade_card import CARD_COLUMNS
from metacan_pipeline.student.training import design_weights, target_value, teacher_call_labels
from metacan_pipeline.teachers.core.registry import load_registry
from metacan_pipeline.teachers.labelling import select_works
from metacan_pipeline_tests.builders.common import root_error
from metacan_pipeline_tests.builders.student import run_student, write_inputs

CONFIG = {"teacher": "codex", "heads": ["metaresearch", "research_integrity"], "target": 0.7, "budget": 7}


def _cascade(storage, **config):
    return dg.materialize(
        [cascade_batch],
        resources={"storage": storage},
        run_config={"ops": {"cascade_batch": {"config": config}}},
        raise_on_error=False,
    )


def _batch(storage) -> list[tuple[str, str]]:
    with storage.connect(read_only=True) as con:
        return con.execute(
            "SELECT work_id, source FROM label_batches WHERE batch = ? ORDER BY work_id", [CASCADE_BATCH]
        ).fetchall()


@pytest.fixture
def scored(storage):
    write_inputs(storage)
    run_student(storage, student_heads, predictions)
    return storage


def test_the_band_goes_to_the_teacher_once_and_the_thresholds_are_certified_on_the_holdout(scored):
    storage = scored
    result = _cascade(storage, **CONFIG)
    assert result.success, root_error(result)
    rows = {r["target"]: r for r in storage.read_table("cascade_thresholds").to_pylist()}
    scores = {r["id"]: r for r in storage.read_table("student_scores").to_pylist()}
    labels = {r["work_id"]: r for r in teacher_call_labels(storage, "codex")}
    with storage.connect(read_only=True) as con:
        holdout = {r[0] for r in con.execute("SELECT work_id FROM student_holdout").fetchall()}
    calib = sorted(w for w in holdout if w in labels)
    weights = design_weights(storage, set(calib))
    decisions = storage.read_table("cascade_decisions").to_pylist()
    planned = sorted(w for w in scores if w not in holdout and w not in labels)
    assert len(planned) > 100 and len(calib) > 10
    batch = _batch(storage)
    for head in CONFIG["heads"]:
        row = rows[head]
        ys = [(w, target_value(labels[w], head)) for w in calib]
        ys = [(w, y) for w, y in ys if y is not None]
        want = certify_head(
            np.array([scores[w][f"codex__{head}"] for w, _ in ys]),
            np.array([y for _, y in ys]),
            0.7,
            weights=np.array([weights[w]["design_weight"] for w, _ in ys]),
            negative_recall=0.9,
        )
        assert (row["calibration_n"], row["calibration_positives"]) == (len(ys), sum(y for _, y in ys))
        assert row["bound_method"] == "clopper-pearson"
        assert row["positive_threshold"] == want.positive.threshold
        assert row["negative_threshold"] == want.negative_threshold
        if head == "metaresearch":  # separable titles: 11 of 25 calibration works positive, a certified top
            assert row["positive_threshold"] is not None and row["positive_bound"] >= 0.7
        t = want.positive.threshold
        assert row["decided_positive"] == sum(t is not None and scores[w][f"codex__{head}"] >= t for w in planned)
        mine = [d for d in decisions if d["target"] == head]
        assert sorted(d["id"] for d in mine) == planned  # every unlabelled work outside the holdout, once
        t_pos, t_neg = want.positive.threshold, want.negative_threshold
        for d in mine:
            if d["decision"] == "positive":
                assert d["score"] >= t_pos
            elif d["decision"] == "negative":
                assert d["score"] <= t_neg
            else:  # teacher or unsettled: the band
                assert (t_pos is None or d["score"] < t_pos) and (t_neg is None or d["score"] > t_neg)
        sent = {d["id"] for d in mine if d["decision"] == "teacher"}
        assert row["sent_to_teacher"] == len(sent) == min(7, row["sent_to_teacher"] + row["unsettled"])
        assert sent <= {w for w, _ in batch}
    assert all(s.startswith("cascade metacan-v") and s.endswith(": band") for _, s in batch)
    assert 7 <= len(batch) <= 14 and not {w for w, _ in batch} & (holdout | set(labels))

    # a re-run buys nothing twice: the same band works are already in the batch
    assert _cascade(storage, **CONFIG).success
    assert _batch(storage) == batch
    assert all(r["added_to_batch"] == 0 for r in storage.read_table("cascade_thresholds").to_pylist())

    # a teacher whose coverage is sample+batch:cascade labels the sample and exactly the batch's works
    spec = load_registry()["codex"].model_copy(update={"coverage": f"sample+batch:{CASCADE_BATCH}"})
    covered = {w["id"] for w in select_works(storage, spec)}
    in_sample = {r["id"] for r in storage.read_table("sample_design").to_pylist() if r["in_sample"]}
    assert covered == in_sample | {w for w, _ in batch}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"heads": ["genre"]}, "cascade heads ['genre']: expected one or more binary heads"),
        ({"teacher": "opus"}, "cascade teacher 'opus': expected one of"),
        ({"method": "wilson"}, "cascade method 'wilson': expected one of clopper-pearson, jeffreys"),
    ],
)
def test_bad_settings_name_the_setting(scored, config, message):
    result = _cascade(scored, **config)
    assert not result.success
    assert message in root_error(result)


def test_the_jeffreys_bound_certifies_when_asked_and_the_thresholds_say_so(scored, tmp_path):
    """The records say which bound certified a decision: the method is a setting and a column, and the thresholds are
    Jeffreys' (tighter than Clopper-Pearson's, so the positive side of the separable head certifies lower)."""
    storage = scored
    result = _cascade(storage, **{**CONFIG, "heads": ["metaresearch"], "method": "jeffreys"})
    assert result.success, root_error(result)
    (row,) = storage.read_table("cascade_thresholds").to_pylist()
    scores = {r["id"]: r["codex__metaresearch"] for r in storage.read_table("student_scores").to_pylist()}
    labels = {r["work_id"]: r for r in teacher_call_labels(storage, "codex")}
    with storage.connect(read_only=True) as con:
        holdout = {r[0] for r in con.execute("SELECT work_id FROM student_holdout").fetchall()}
    ys = [(w, target_value(labels[w], "metaresearch")) for w in sorted(holdout) if w in labels]
    ys = [(w, y) for w, y in ys if y is not None]
    weights = design_weights(storage, {w for w, _ in ys})
    args = (np.array([scores[w] for w, _ in ys]), np.array([y for _, y in ys]), 0.7)
    kw = {"weights": np.array([weights[w]["design_weight"] for w, _ in ys]), "negative_recall": 0.9}
    jeffreys, exact = certify_head(*args, method="jeffreys", **kw), certify_head(*args, **kw)
    assert row["bound_method"] == "jeffreys"
    assert (row["positive_threshold"], row["positive_bound"]) == (jeffreys.positive.threshold, jeffreys.positive.bound)
    assert row["negative_bound"] == jeffreys.negative.bound
    assert jeffreys.positive.bound > exact.positive.bound  # a different bound, not the default under another name
    # the model card names the thresholds (JSON and Markdown), and a release bundle's copy of the card does too
    card = read_card(storage.root, row["model_version"])
    assert card["cascade"] == [{c: row[c] for c in CARD_COLUMNS}]
    markdown = (report_dir(storage.root, row["model_version"]) / "model_card.md").read_text()
    assert "## Cascade" in markdown and "one-sided 95% lower bound (jeffreys)" in markdown
    assert (
        f"| metaresearch | codex | jeffreys, 95% | {len(ys)} ({sum(y for _, y in ys)}) | "
        f"0.7: {jeffreys.positive.threshold:.3f} (lower bound {jeffreys.positive.bound:.3f}) |"
    ) in markdown
    bundle = tmp_path / "bundle"
    copy_model_cards(storage.root, row["model_version"], bundle)
    assert (bundle / "model_cards" / row["model_version"] / "model_card.md").read_text() == markdown


def test_a_teacher_that_labelled_every_work_leaves_nothing_to_plan(scored):
    """The census teacher of the builders labelled the whole frame: no work to decide or send, nothing added."""
    result = _cascade(scored, teacher="gemma")
    assert result.success, root_error(result)
    (row,) = scored.read_table("cascade_thresholds").to_pylist()
    assert (row["works_planned"], row["sent_to_teacher"], row["added_to_batch"]) == (0, 0, 0)
    assert row["calibration_n"] > 40  # every labelled holdout work certifies
    assert scored.read_table("cascade_decisions").num_rows == 0 and _batch(scored) == []


def test_a_head_that_gives_no_score_is_left_out_of_the_cascade_and_says_why(scored):
    """The builders' teachers never call a work about_ca_system: that head learned from negatives only, its scores
    are null, so it certifies and sends nothing while the other head is planned as usual."""
    result = _cascade(scored, **{**CONFIG, "heads": ["about_ca_system", "metaresearch"]})
    assert result.success, root_error(result)
    heads = {
        r["teacher"]: r for r in scored.read_table("student_heads").to_pylist() if r["target"] == "about_ca_system"
    }
    n = heads["codex"]["n_train"]
    assert [r["target"] for r in scored.read_table("cascade_thresholds").to_pylist()] == ["metaresearch"]
    assert {r["target"] for r in scored.read_table("cascade_decisions").to_pylist()} == {"metaresearch"}
    md = result.asset_materializations_for_node("cascade_batch")[0].metadata
    assert md["heads_without_score"].value == {
        "about_ca_system": f"no positive direct label to learn from (0 positives of {n} labels)"
    }
