"""Tests of the model card (metacan_pipeline.student.card) and the bootstrap intervals behind it
(metacan_pipeline.student.evaluation): figures checked against scikit-learn computed here."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from metacan_pipeline.student.assets import student_heads
from metacan_pipeline.student.card import CARD_JSON, CARD_MD, card_files, read_card, report_dir
from metacan_pipeline.student.evaluation import (
    bootstrap_intervals,
    expected_calibration_error,
    weighted_metrics,
)
from metacan_pipeline.student.features import student_text
from metacan_pipeline.student.models import load_published
from metacan_pipeline.student.training import target_value
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.vocab import PREDICTION_STATUS
from metacan_pipeline_tests.builders.common import sql
from metacan_pipeline_tests.builders.student import run_student, student_label, write_inputs


def test_weighted_metrics_equal_scikit_learn_with_ties_and_zero_weights():
    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(6, 200))
        y = rng.integers(0, 2, n)
        s = np.round(rng.random(n), 1 if trial % 2 else 5)  # many ties, or few
        w = rng.random(n) * 3
        rows = np.vstack([w, w * rng.integers(0, 3, n)])  # the second row: a bootstrap draw, some works out
        got = weighted_metrics(y, s, rows)
        for i, row in enumerate(rows):
            if row[y == 1].sum() == 0 or row[y == 0].sum() == 0:
                assert np.isnan(got["ap"][i]) and np.isnan(got["auroc"][i])
                continue
            assert got["ap"][i] == pytest.approx(average_precision_score(y, s, sample_weight=row), abs=1e-12)
            assert got["auroc"][i] == pytest.approx(roc_auc_score(y, s, sample_weight=row), abs=1e-12)
            assert got["ece"][i] == pytest.approx(expected_calibration_error(y, s, row), abs=1e-12)


def test_bootstrap_intervals_are_seeded_and_hold_the_estimate():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 300)
    s = np.clip(y * 0.3 + rng.random(300) * 0.7, 0, 1)
    w = rng.choice([1.0, 4.0], 300)
    a, b = bootstrap_intervals(y, s, w), bootstrap_intervals(y, s, w)
    assert a == b and a["replicates"] == 1000 and a["replicates_defined"] == 1000
    ap = average_precision_score(y, s, sample_weight=w)
    assert a["ap"][0] < ap < a["ap"][1] and a["ap"][1] - a["ap"][0] < 0.2
    assert a["auroc"][0] < roc_auc_score(y, s, sample_weight=w) < a["auroc"][1]
    assert bootstrap_intervals(y, s, w, seed=4) != a  # the seed is what makes it repeatable
    # one class: no AP/AUROC interval, an ECE one all the same
    one = bootstrap_intervals(np.zeros(20), s[:20])
    assert one["ap"] is None and one["auroc"] is None and one["ece"] is not None
    with pytest.raises(ValueError, match="3 labels, 2 scores and 3 weights"):
        bootstrap_intervals(np.ones(3), np.ones(2), np.ones(3))


def _mixed_world(storage):
    """The student world with a third of the holdout's labels flipped (so its figures are neither 0 nor 1) and every
    other work in French."""
    frame = write_inputs(storage)
    frame = [{**r, "language": "fr" if (i // 2) % 2 else "en"} for i, r in enumerate(frame)]  # both in the sample
    storage.write_table("frame", pa.Table.from_pylist(frame))
    run_student(storage, student_heads)  # freezes the holdout
    held = {r[0] for r in sql(storage, "SELECT work_id FROM student_holdout")}
    flip = {wid for wid in held if int(wid[1:]) % 3 == 0}
    for teacher in ("gemma", "codex"):
        rows = storage.read_table(f"direct_labels_{teacher}").to_pylist()
        titles = {r["id"]: r["title_text"] for r in frame}
        rows = [student_label(teacher, r["work_id"], titles[r["work_id"]], r["work_id"] in flip) for r in rows]
        storage.write_table(f"direct_labels_{teacher}", pa.Table.from_pylist(rows, schema=LABELS_SCHEMA))
    return frame, held


def test_card_figures_equal_scikit_learn_on_the_holdout_in_both_languages(storage):
    frame, held = _mixed_world(storage)
    md = run_student(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
    version = md["model_version"].value
    card = read_card(storage.root, version)
    assert card["model_version"] == version and card["features"]["kind"] == "tfidf+title-char"
    assert {t["name"]: (t["kind"], t["design_weights"]) for t in card["training_sets"]} == {
        "codex": ("sample_teacher", True),
        "gemma": ("census_teacher", False),
    }
    assert all(t["qualification"]["status"] == "qualified" for t in card["training_sets"])

    # the figures scikit-learn gives on the holdout's labelled codex works, design weight 2 each
    bundle = load_published(storage, version)
    texts = {r["id"]: student_text(r) for r in frame}
    lang = {r["id"]: r["language"] for r in frame}
    codex = [r for r in storage.read_table("direct_labels_codex").to_pylist() if r["work_id"] in held]
    y = np.array([target_value(r, "metaresearch") for r in codex])
    s = bundle.heads["codex"]["metaresearch"].score_samples(
        bundle.vectorizer.transform([texts[r["work_id"]] for r in codex])
    )
    w = np.full(len(y), 2.0)
    head = next(h for h in card["heads"] if (h["source"], h["target"]) == ("codex", "metaresearch"))
    ap, auroc = average_precision_score(y, s, sample_weight=w), roc_auc_score(y, s, sample_weight=w)
    assert 0.2 < ap < 0.95  # a holdout with flipped labels: a figure that can be wrong
    assert head["holdout_n"] == len(y)
    assert head["metrics"]["ap"]["value"] == pytest.approx(ap, abs=1e-12)
    assert head["metrics"]["auroc"]["value"] == pytest.approx(auroc, abs=1e-12)
    assert head["metrics"]["ap"]["ci_low"] <= ap <= head["metrics"]["ap"]["ci_high"]
    assert head["metrics"]["ece"]["value"] == pytest.approx(expected_calibration_error(y, s, w), abs=1e-12)
    for code in ("en", "fr"):
        m = np.array([lang[r["work_id"]] == code for r in codex])
        got = head["by_language"][code]
        assert got["n"] == m.sum() and got["positives"] == y[m].sum()
        assert got["metrics"]["ap"]["value"] == pytest.approx(average_precision_score(y[m], s[m]), abs=1e-12)
        assert got["metrics"]["auroc"]["value"] == pytest.approx(roc_auc_score(y[m], s[m]), abs=1e-12)

    # a categorical head: top-1 accuracy per language, against the labels by hand
    genre = next(h for h in card["heads"] if (h["source"], h["target"]) == ("codex", "genre"))
    cat = bundle.heads["codex"]["genre"]
    probs = cat.score_samples(bundle.vectorizer.transform([texts[r["work_id"]] for r in codex]))
    correct = np.array([cat.classes_[k] == r["genre"] for k, r in zip(probs.argmax(axis=1), codex, strict=True)])
    assert genre["metrics"]["accuracy"]["value"] == pytest.approx(correct.mean(), abs=1e-12)
    for code in ("en", "fr"):
        m = np.array([lang[r["work_id"]] == code for r in codex])
        got = genre["by_language"][code]["metrics"]["accuracy"]
        assert got["value"] == pytest.approx(correct[m].mean(), abs=1e-12) and got["ci_low"] <= got["value"]

    # the same figures in the student_heads table, with the same intervals
    [(t_ap, low, high)] = sql(
        storage,
        "SELECT ap, ap_ci_low, ap_ci_high FROM student_heads WHERE teacher = 'codex' AND target = 'metaresearch'",
    )
    assert (t_ap, low, high) == (
        head["metrics"]["ap"]["value"],
        head["metrics"]["ap"]["ci_low"],
        head["metrics"]["ap"]["ci_high"],
    )
    # what each head may claim, verbatim
    assert head["claim"]["decides"] is True and head["claim"]["status"] == PREDICTION_STATUS
    narrow = next(h for h in card["heads"] if (h["source"], h["target"]) == ("codex", "metaepi_narrow"))
    # no positive in its labels: it fails the support gate and, more basically, gives no score
    assert narrow["claim"]["decides"] is False and narrow["support_gate"]["reason"].startswith("scores only")
    assert narrow["claim"]["text"].startswith("No score: no positive direct label to learn from")
    assert not any(h["claim"]["decides"] for h in card["heads"] if h["source"] == "gemma")
    # a head whose training labels are all negative gives no score, and the card says why
    for source in ("codex", "gemma"):
        silent = next(h for h in card["heads"] if (h["source"], h["target"]) == (source, "about_ca_system"))
        n = bundle.heads[source]["about_ca_system"].n_train_
        assert n > 0 and bundle.heads[source]["about_ca_system"].positives_ == 0
        reason = f"no positive direct label to learn from (0 positives of {n} labels)"
        assert silent["no_score"] == reason and silent["claim"]["decides"] is False
        assert (
            silent["claim"]["text"]
            == f"No score: {reason}; a head that saw one class ranks nothing, so it writes no score."
        )
    assert head["no_score"] is None and genre["no_score"] is None
    limits = " ".join(x["text"] for x in card["limits"])
    assert "never its abstract" in limits and "failed the support gate" in limits
    assert "no labelled work in fr" not in limits  # both languages are in the holdout

    # the files, the Markdown and the Dagster metadata
    assert [p.name for p in card_files(storage.root, version)] == [
        CARD_JSON,
        CARD_MD,
        "reliability_codex.png",
        "reliability_gemma.png",
    ]
    text = (report_dir(storage.root, version) / CARD_MD).read_text()
    line = next(x for x in text.splitlines() if x.startswith("| codex | metaresearch |"))  # the Heads table's
    assert f"# Model card: {version}" in text and f"| {len(y)} | {ap:.3f} [" in line and PREDICTION_STATUS in line
    assert md["model_card"].value == text
    assert md["card_ap_codex_metaresearch"].value.startswith(f"{ap:.3f} [")
    # a re-materialization reuses the version and writes the same card, byte for byte
    before = (report_dir(storage.root, version) / CARD_JSON).read_bytes()
    run_student(storage, student_heads)
    assert (report_dir(storage.root, version) / CARD_JSON).read_bytes() == before


def test_a_bundle_with_reference_sets_names_them_and_claims_scores_only(storage):
    """A bundle that learned from a reference set (``reference_sets`` on the bundle) gets a training-set entry and
    machine-score-only claims for that source."""
    import dataclasses

    from metacan_pipeline.student.card import build_card
    from metacan_pipeline.student.evaluation import HoldoutReport

    write_inputs(storage)
    version = (run_student(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata)[
        "model_version"
    ].value
    bundle = load_published(storage, version)
    rows = storage.read_table("student_heads").to_pylist()
    ref_rows = [
        {**r, "teacher": "pilot_b", "gate_passed": None, "gate_reason": None} for r in rows if r["teacher"] == "gemma"
    ]

    summary = {"model": "gpt-5.6-sol", "source": "MetaCan pilot screening", "works": 793, "weighted": True, "heads": {}}
    with_refs = dataclasses.replace(
        bundle, reference_sets={"pilot_b": summary}, training_ids={**bundle.training_ids, "pilot_b": ["W1", "W2"]}
    )
    standing = {t: {"status": "qualified", "kappa": 1.0, "note": "teacher qualified"} for t in ("codex", "gemma")}
    card = build_card(
        with_refs,
        HoldoutReport(rows + ref_rows, {}, {}),
        standing,
        created_at=None,
        code_version="x",
        holdout_works=1,
    )
    ref = next(t for t in card["training_sets"] if t["name"] == "pilot_b")
    assert ref == {
        **ref,
        "kind": "reference_set",
        "description": "gpt-5.6-sol labels imported from MetaCan pilot screening",
        "works": 793,
        "design_weights": True,
        "training_works": 2,
        "qualification": None,
    }
    claims = {h["claim"]["text"] for h in card["heads"] if h["source"] == "pilot_b" and h["no_score"] is None}
    assert claims == {"Machine scores only, never a validated label: it learned from the reference set pilot_b."}
    silent = {h["claim"]["text"] for h in card["heads"] if h["source"] == "pilot_b" and h["no_score"] is not None}
    assert silent and all(c.startswith("No score: no positive direct label to learn from") for c in silent)
    assert any("reference set (pilot_b)" in x["text"] for x in card["limits"])
    json.dumps(card, allow_nan=False)  # JSON as it is
