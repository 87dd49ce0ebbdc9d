"""Tests of metacan_pipeline.student.distill: heads distilled from the encoder's heads through a transfer set."""

from __future__ import annotations

import dagster as dg
import joblib
import numpy as np
import pytest
from scipy.special import expit

from metacan_pipeline.student.assets import student_heads
from metacan_pipeline.student.distill import DistilJob, Distiller, TransferSet, distil_heads
from metacan_pipeline.student.features import make_features, student_text
from metacan_pipeline.student.heads import BinaryHead, choose_c, fit_logreg
from metacan_pipeline.student.holdout import venue_held_out, venue_key
from metacan_pipeline.student.models import model_path
from metacan_pipeline.student.training import transfer_texts
from metacan_pipeline_tests.builders.common import sql
from metacan_pipeline_tests.builders.student import run_student, write_inputs

LABELLED = {
    "Peer review of grant applications at a national funder": 1,
    "Bibliometric analysis of citation patterns in medicine": 1,
    "Reproducibility of published psychology experiments": 1,
    "Research integrity policies at Canadian universities": 1,
    "Soil nitrogen dynamics in boreal forests": 0,
    "Cardiac surgery outcomes in older adults": 0,
    "Crystal structure of a bacterial membrane protein": 0,
    "Groundwater contamination near mining sites": 0,
    "Deep learning for galaxy image classification": 0,
    "Dietary fibre and the gut microbiome in mice": 0,
}
UNLABELLED = [
    "Scientometric indicators of university research performance",
    "Journal impact factors and the evaluation of researchers",
    "Questionable research practices among early-career scientists",
    "Preregistration and open data in clinical trials research",
    "Citation counts as a measure of scientific influence",
    "Wheat yield under drought in the Canadian prairies",
    "Heart failure readmissions after discharge",
    "Fossil insects from the Cretaceous of Alberta",
    "Sea ice thickness in the Beaufort Sea",
    "Protein folding simulations on graphics processors",
]


def _planted():
    texts = list(LABELLED)
    y = np.array([LABELLED[t] for t in texts])
    w = np.linspace(1.0, 2.0, len(texts))
    groups = [f"g{i % 5}" for i in range(len(texts))]
    return texts, y, w, groups


def test_a_distilled_head_is_the_mean_of_its_label_fit_and_the_regression_of_the_encoder_head():
    """The arithmetic, on planted embeddings: the head's log-odds are the mean of the label fit's log-odds and of a
    ridge regression, on the fast features of the transfer set, of the encoder head's log-odds."""
    from sklearn.linear_model import Ridge

    texts, y, w, groups = _planted()
    rng = np.random.default_rng(7)
    every = texts + UNLABELLED
    planted = {t: rng.normal(size=8).astype(np.float32) for t in every}
    embed = lambda ts: np.vstack([planted[t] for t in ts])  # noqa: E731
    vec = make_features("tfidf").fit(every)
    X = vec.transform(texts)
    head = BinaryHead("metaresearch", (1.0, 4.0)).fit(X, y, w, groups=groups)
    label = BinaryHead("metaresearch", (1.0, 4.0)).fit(X, y, w, groups=groups)  # the same fit, left alone
    transfer = TransferSet(every, vec.transform(every), embed(every))
    distil_heads([DistilJob(head, texts, y, w, groups)], transfer, embed, alpha=0.3)

    c, _ = choose_c(embed(texts), y, w, groups, (1.0, 4.0))
    target = fit_logreg(embed(texts), y, w, C=c).decision_function(embed(every))
    ridge = Ridge(alpha=0.3).fit(transfer.X, target)
    new = vec.transform(["Citation analysis of grant peer review", "Boreal forest soils"])
    expected = expit((label.estimator_.decision_function(new) + ridge.predict(new)) / 2)
    assert head.score_samples(new) == pytest.approx(expected, rel=1e-6)
    assert head.distilled_["transfer_works"] == len(every) and head.distilled_["encoder_c"] == c
    assert head.distilled_["agreement"] == pytest.approx(np.corrcoef(ridge.predict(transfer.X), target)[0, 1])


def test_a_head_that_is_not_trained_is_left_as_it_is():
    texts, _, w, groups = _planted()
    vec = make_features("tfidf").fit(texts)
    head = BinaryHead("metaresearch").fit(vec.transform(texts), np.zeros(len(texts), dtype=int), w, groups=groups)
    transfer = TransferSet(texts, vec.transform(texts), np.eye(len(texts), dtype=np.float32))
    distil_heads([DistilJob(head, texts, np.zeros(len(texts)), w, groups)], transfer, lambda ts: None, alpha=0.3)
    assert not hasattr(head, "distilled_") and head.no_score_reason.startswith("no positive direct label")


def test_transfer_set_without_drops_the_rows_of_the_given_texts():
    X = np.arange(12.0).reshape(4, 3)
    ts = TransferSet(["a", "b", "c", "d"], X, X * 10)
    out = ts.without({"b", "d", "zz"})
    assert out.texts == ["a", "c"] and out.X.tolist() == [X[0].tolist(), X[2].tolist()]
    assert out.E.tolist() == [(X[0] * 10).tolist(), (X[2] * 10).tolist()]


@pytest.mark.slow
def test_the_encoder_lends_the_fast_features_what_the_labels_never_said():
    """With the real int8 MiniLM encoder: works about research assessment whose words no labelled work uses rank
    above the unrelated ones once the head is distilled through unlabelled texts, where the label fit alone cannot
    tell them apart as well."""
    texts, y, w, groups = _planted()
    distiller = Distiller()
    vec = make_features("tfidf").fit(texts + UNLABELLED)
    label = BinaryHead("metaresearch", (1.0, 4.0)).fit(vec.transform(texts), y, w, groups=groups)
    head = BinaryHead("metaresearch", (1.0, 4.0)).fit(vec.transform(texts), y, w, groups=groups)
    distiller.distil([DistilJob(head, texts, y, w, groups)], distiller.transfer(vec, texts + UNLABELLED))
    meta = ["Altmetric attention scores of journal articles", "Gender gaps in research funding success rates"]
    other = ["Permafrost thaw and carbon release in the Yukon", "Knee replacement rehabilitation protocols"]
    new = vec.transform(meta + other)
    distilled, alone = head.score_samples(new), label.score_samples(new)
    assert min(distilled[:2]) > max(distilled[2:])  # every meta-research work above every other one
    gap = lambda s: s[:2].mean() - s[2:].mean()  # noqa: E731
    assert gap(distilled) > gap(alone)
    assert head.distilled_["agreement"] > 0.5


@pytest.mark.slow
def test_student_heads_distils_through_a_frame_sample_without_holdout_works(storage):
    frame = write_inputs(storage)
    md = run_student(storage, student_heads).asset_materializations_for_node("student_heads")[0].metadata
    bundle = joblib.load(model_path(storage, md["model_version"].value))
    holdout = {r[0] for r in sql(storage, "SELECT work_id FROM student_holdout")}
    sample = transfer_texts(storage, 10_000)
    kept = [r for r in frame if r["id"] not in holdout and not venue_held_out(venue_key(r["id"], r["venue_id"]))]
    assert 0 < len(kept) < len(frame) and sorted(sample) == sorted(student_text(r) for r in kept)
    assert len(transfer_texts(storage, 50)) <= 50 and transfer_texts(storage, 0) == []
    assert bundle.distillation["encoder"] == "minilm-onnx" and bundle.distillation["frame_transfer_works"] == len(
        sample
    )
    trained = bundle.heads["gemma"]["metaresearch"]
    assert (
        trained.status_ == "trained" and trained.distilled_["transfer_works"] == bundle.distillation["transfer_works"]
    )
    assert "Distillation: each trained binary head" in md["card_distillation"].value

    # without distillation: another model version, heads fitted on their labels alone
    off = dg.materialize(
        [student_heads],
        resources={"storage": storage},
        run_config={"ops": {"student_heads": {"config": {"distill": False}}}},
    )
    md_off = off.asset_materializations_for_node("student_heads")[0].metadata
    assert md_off["model_version"].value != md["model_version"].value
    plain = joblib.load(model_path(storage, md_off["model_version"].value))
    assert plain.distillation == {} and not hasattr(plain.heads["gemma"]["metaresearch"], "distilled_")
    assert md_off["card_distillation"].value.startswith("- Distillation: none")
