"""Tests of metacan_pipeline.student.pilot_frame1k on the MetaCan frame1k arms in ../shared/data, cross-validated by
venue (figures measured on those files)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from metacan_pipeline.cli import app
from metacan_pipeline.openalex.abstract import markup_to_text
from metacan_pipeline.student import pilot_frame1k
from metacan_pipeline.student.features import make_features
from metacan_pipeline.student.pilot_frame1k import evaluate_frame1k, frame1k_works
from metacan_pipeline.teachers.core.reference import FRAME1K_ARMS, R1_ARMS
from metacan_pipeline_tests.builders.common import SHARED

PILOT = SHARED / "data" / "metacan_pilot"
FRAME1K = PILOT / "frame1k"

# measured on the real files (tfidf and minilm, 5 folds grouped by venue): arm -> (positives, positive venue
# groups, positives per test fold, tfidf AP, tfidf AUROC, minilm AP, minilm AUROC)
MEASURED = {
    "opus_r1": (28, 28, [9, 5, 5, 6, 3], 0.066, 0.559, 0.073, 0.623),
    "codex_r1": (20, 20, [5, 5, 4, 5, 1], 0.075, 0.635, 0.138, 0.746),
    "grok_r1": (14, 14, [3, 4, 2, 2, 3], 0.138, 0.503, 0.125, 0.652),
    "adjudicated": (16, 16, [5, 4, 3, 2, 2], 0.123, 0.648, 0.141, 0.737),
}


@pytest.fixture(scope="module")
def pilot():
    if not (FRAME1K / "chunks").is_dir():
        pytest.fail(f"real data not found at {FRAME1K}: the tests need ../shared/data beside the checkout")
    return PILOT


@pytest.fixture(scope="module")
def records(pilot):
    return {
        r["id"]: r
        for p in sorted((FRAME1K / "chunks").glob("chunk_*.json"))
        for r in json.loads(p.read_text(encoding="utf-8"))
    }


def test_frame1k_works_text_groups_and_labels(pilot, records):
    works, dropped = frame1k_works(pilot)
    assert len(works) == 750 and set(dropped.values()) == {0}
    for w in works:  # exactly title | venue | topic | keywords | field | type | language: no abstract, year,
        rec = records[w.id]  # affiliation, funder; the files carry no keywords
        assert w.text == " | ".join(
            [
                markup_to_text(rec["title"]),
                rec.get("venue") or "",
                rec.get("topic") or "",
                "",
                rec.get("field") or "",
                rec["type"],
                rec["lang"],
            ]
        )
        assert w.group == (rec["venue"] if rec.get("venue") else f"no-venue:{w.id}")
    assert sum(w.venue is None for w in works) == 44 and len({w.venue for w in works if w.venue}) == 548
    assert len({w.group for w in works}) == 592
    assert {a: sum(w.labels[a] for w in works) for a in FRAME1K_ARMS} == {a: m[0] for a, m in MEASURED.items()}
    # the labels are the tiers T1/T2 of each arm's file
    for arm in R1_ARMS:
        tiers = {
            r["id"]: r["tier"]
            for p in sorted((FRAME1K / arm).glob("labels_*.json"))
            for r in json.loads(p.read_text(encoding="utf-8"))
        }
        assert {w.id: w.labels[arm] for w in works} == {i: int(t in ("T1", "T2")) for i, t in tiers.items()}
    # adjudicated: the verdict where there is one (24 works), else the arms' unanimous scope
    verdicts = {
        v["id"]: v["tier"]
        for p in sorted((FRAME1K / "adjudication").glob("verdict_*.json"))
        for v in json.loads(p.read_text(encoding="utf-8"))
    }
    judged = [w for w in works if w.id in verdicts]
    assert len(judged) == 24 and all(w.labels["adjudicated"] == int(verdicts[w.id] in ("T1", "T2")) for w in judged)
    assert sum(len({w.labels[a] for a in R1_ARMS}) > 1 for w in judged) == 23
    for w in works:
        if w.id not in verdicts:
            assert len({w.labels[a] for a in R1_ARMS}) == 1 and w.labels["adjudicated"] == w.labels["opus_r1"]
    marked = next(w for w in works if w.id == "W2592716210")
    assert marked.text == (
        "Les droits linguistiques au Canada | Revue de droit Université de Sherbrooke | "
        "Legal Language and Interpretation |  | Social Sciences | article | fr"
    )


def test_no_abstract_text_reaches_the_student(pilot, records, tmp_path, monkeypatch):
    """A copy of frame1k whose abstracts are all replaced by a marker: the student sees the same texts and
    measures the same AP, and the marker reaches no text the feature backend is given."""
    copy = tmp_path / "metacan_pilot"
    shutil.copytree(FRAME1K, copy / "frame1k")
    marker = "ABSTRACTMARKER"
    for path in (copy / "frame1k" / "chunks").glob("chunk_*.json"):
        recs = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps([{**r, "abstract": f"{marker} {r['id']}"} for r in recs]), encoding="utf-8")
    real, _ = frame1k_works(pilot)
    marked, _ = frame1k_works(copy)
    assert [w.text for w in marked] == [w.text for w in real]
    assert sum(bool(records[w.id].get("abstract")) for w in real) == 587

    seen: list[str] = []

    class Recording:
        def __init__(self):
            self.inner = make_features("tfidf")

        def fit(self, texts):
            seen.extend(texts)
            self.inner.fit(texts)
            return self

        def transform(self, texts):
            seen.extend(texts)
            return self.inner.transform(texts)

    monkeypatch.setattr(pilot_frame1k, "make_features", lambda kind: Recording())
    monkeypatch.setattr(pilot_frame1k, "_MATRICES", {})
    r = evaluate_frame1k(copy, "tfidf", "grok_r1")
    assert len(seen) == 1500 and not any(marker in t for t in seen)
    assert r.ap == pytest.approx(MEASURED["grok_r1"][3], abs=0.02)


@pytest.mark.parametrize("arm", list(FRAME1K_ARMS))
def test_tfidf_head_by_venue_folds(pilot, arm, recorded_folds):
    pos, pos_groups, per_fold, ap, auroc, _, _ = MEASURED[arm]
    r = evaluate_frame1k(pilot, "tfidf", arm)
    assert (r.n, r.positives, r.groups, r.venues, r.without_venue, r.positive_groups) == (
        750,
        pos,
        592,
        548,
        44,
        pos_groups,
    )
    assert (r.folds, r.fold_positives, r.cv, r.note) == (5, per_fold, "5-fold grouped by venue", "")
    assert r.positive_rate == pytest.approx(pos / 750)
    assert r.ap == pytest.approx(ap, abs=0.02) and r.auroc == pytest.approx(auroc, abs=0.02)
    # the folds grouped_cv_metrics used: train and test venue groups are disjoint in every fold
    assert len(recorded_folds) == 5
    tested = []
    for train, test, groups in recorded_folds:
        assert len(groups) == 750
        assert {groups[i] for i in train}.isdisjoint({groups[i] for i in test})
        tested.extend(test)
    assert sorted(tested) == list(range(750))  # every work tested exactly once


@pytest.mark.slow
def test_minilm_head_by_venue(pilot, recorded_folds):
    results = {arm: evaluate_frame1k(pilot, "minilm", arm) for arm in FRAME1K_ARMS}
    for arm, r in results.items():
        pos, _, per_fold, _, _, ap, auroc = MEASURED[arm]
        assert (r.n, r.positives, r.groups, r.folds, r.fold_positives) == (750, pos, 592, 5, per_fold)
        assert r.ap == pytest.approx(ap, abs=0.03) and r.auroc == pytest.approx(auroc, abs=0.03)
    # one embedding of the 750 texts serves all four arms
    assert [r.features_reused for r in results.values()].count(False) <= 1
    assert len(recorded_folds) == 20
    for train, test, groups in recorded_folds:
        assert {groups[i] for i in train}.isdisjoint({groups[i] for i in test})


def test_fewer_folds_when_fewer_venue_groups_hold_a_positive(pilot):
    r = evaluate_frame1k(pilot, "tfidf", "grok_r1", folds=20)  # 14 positives, each in its own venue group
    assert (r.folds, r.positive_groups, sum(r.fold_positives)) == (14, 14, 14)
    assert r.note == "14 venue groups hold a positive: 14 folds instead of 20" and r.cv == "14-fold grouped by venue"
    assert r.ap is not None


def test_bad_arguments_are_refused(pilot, tmp_path):
    with pytest.raises(ValueError, match="opus_r1, codex_r1, grok_r1, adjudicated"):
        evaluate_frame1k(pilot, arm="a")
    with pytest.raises(ValueError, match="tfidf, tfidf-char, title-char, minilm"):
        evaluate_frame1k(pilot, features="bert", arm="grok_r1")
    with pytest.raises(FileNotFoundError, match="chunk_"):
        evaluate_frame1k(tmp_path, arm="grok_r1")


def test_cli_prints_the_frame1k_table(pilot):
    res = CliRunner().invoke(
        app,
        [
            "evaluate-pilot",
            "--set",
            "frame1k",
            "--labels",
            "grok_r1",
            "--labels",
            "adjudicated",
            "--features",
            "tfidf",
            "--pilot-dir",
            str(pilot),
        ],
    )
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("grok_r1 "))
    assert line.split()[:10] == ["grok_r1", "tfidf", "750", "14", "0.0187", "592", "548", "44", "5", "3/4/2/2/3"]
    assert any(x.startswith("adjudicated ") for x in res.output.splitlines())
    assert "548 venues + 44 works without a venue (one group each) = 592 groups" in res.output
    assert "Left out: nothing" in res.output
    for args, message in (
        (["--works", "all"], "--works applies to --set screening only"),
        (["--labels", "a"], "frame1k arm 'a'"),
        (["--set", "other"], "expected one of screening, frame1k"),
    ):
        bad = CliRunner().invoke(app, ["evaluate-pilot", "--set", "frame1k", *args, "--pilot-dir", str(pilot)])
        assert bad.exit_code == 2 and message in bad.output, bad.output
