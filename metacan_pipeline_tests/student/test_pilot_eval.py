"""Tests of metacan_pipeline.student.pilot_eval on the MetaCan pilot labels in ../shared/data (figures measured on
those files)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest
from typer.testing import CliRunner

from metacan_pipeline.cli import app
from metacan_pipeline.openalex.abstract import markup_to_text
from metacan_pipeline.student.pilot_eval import evaluate_pilot, pilot_works
from metacan_pipeline_tests.builders.common import SHARED

PILOT = SHARED / "data" / "metacan_pilot"


@pytest.fixture(scope="module")
def pilot():
    if not (PILOT / "labels_joined.json").exists():
        pytest.fail(f"real data not found at {PILOT}: the tests need ../shared/data beside the checkout")
    return PILOT


def test_pilot_works_map_title_only_text_groups_labels_and_weights(pilot):
    works, dropped = pilot_works(pilot)
    originals = {}
    for path in sorted(pilot.glob("chunks/chunk_*.json")) + sorted(pilot.glob("chunks_b/chunk_*.json")):
        for rec in json.loads(path.read_text(encoding="utf-8")):
            originals.setdefault(rec["id"], rec)
    assert len(works) == 1431 and dropped == {"no_text_a": 496, "no_text_b": 496, "empty_title": 1, "failed_labels": 0}
    with_abstract = [w for w in works if originals[w.id]["abstract"]]
    assert len(with_abstract) == 611
    for w in works:  # exactly title | venue | topic | keywords | field | type | language: no abstract, no year
        rec = originals[w.id]
        assert w.text == f"{markup_to_text(rec['title'])} |  |  |  |  | {rec['type']} | {rec['lang']}"
        assert w.group.startswith("title:")  # no pilot work record names a venue
    assert sum(originals[w.id]["abstract"][-60:] in w.text for w in with_abstract) == 0
    marked = next(w for w in works if w.id == "W1493387337")  # title with <sup>*</sup>, reduced as the frame does
    assert marked.text.startswith(
        "National representation in the anaesthesia literature: a bibliometric analysis of highly cited "
        "anaesthesia journals * |"
    )
    assert (marked.y_a, marked.y_b, marked.stratum, marked.weight) == (1, 1, "positive", 1.0)
    joined = [w for w in works if w.stratum is not None]
    assert Counter(w.stratum for w in joined) == {"boundary": 598, "settled_out": 104, "positive": 58, "paratext": 33}
    # settled_out: published weight 8.005 x 600 works in labels_joined / 104 with text
    assert {round(w.weight, 3) for w in joined if w.stratum == "settled_out"} == {46.183}
    assert all(w.y_a is not None and w.y_b is not None for w in joined)
    assert sum(w.y_a is None for w in works) == 638  # random-sample works only screener b labelled


def test_tfidf_head_on_screener_a_beats_chance_with_venue_groups_kept_in_one_fold(pilot, recorded_folds):
    r = evaluate_pilot(pilot, features="tfidf", screener="a")
    assert (r.n, r.positives, r.groups, r.folds, r.without_venue, r.in_shared_groups) == (793, 58, 790, 5, 793, 6)
    assert r.weighted and r.positive_rate == pytest.approx(0.0106, abs=0.0002)  # the pilot's design-weighted prevalence
    assert r.cv == "5-fold grouped by title"  # no pilot work names a venue (module docstring)
    assert r.ap == pytest.approx(0.250, abs=0.02) and r.ap > 10 * r.positive_rate
    assert r.auroc == pytest.approx(0.823, abs=0.02) and r.auroc > 0.5
    # the folds grouped_cv_metrics used: each group (a venue, here a title) lies in one fold
    assert len(recorded_folds) == 5
    fold_of: dict[str, set[int]] = defaultdict(set)
    tested = []
    for k, (train, test, groups) in enumerate(recorded_folds):
        assert len(groups) == 793
        assert {groups[i] for i in train}.isdisjoint({groups[i] for i in test})
        for i in test:
            fold_of[groups[i]].add(k)
        tested.extend(test)
    assert sorted(tested) == list(range(793))  # every work tested exactly once
    assert all(len(f) == 1 for f in fold_of.values()) and len(fold_of) == 790
    assert fold_of["title:reply"] and fold_of["title:book reviews"]


def test_tfidf_head_on_screener_b(pilot):
    r = evaluate_pilot(pilot, features="tfidf", screener="b")
    assert (r.n, r.positives, r.groups) == (793, 83, 790)
    assert r.positive_rate == pytest.approx(0.0233, abs=0.0005)
    assert r.ap == pytest.approx(0.243, abs=0.02) and r.ap > 5 * r.positive_rate
    assert r.auroc == pytest.approx(0.860, abs=0.02)
    every = evaluate_pilot(pilot, features="tfidf", screener="b", works="all")
    assert (every.n, every.positives, every.weighted) == (1431, 90, False)
    assert every.ap == pytest.approx(0.258, abs=0.02) and every.auroc == pytest.approx(0.771, abs=0.02)


@pytest.mark.slow
def test_minilm_head_on_screener_a(pilot):
    r = evaluate_pilot(pilot, features="minilm", screener="a")
    assert (r.n, r.positives, r.groups) == (793, 58, 790)
    assert r.ap == pytest.approx(0.460, abs=0.03) and r.auroc == pytest.approx(0.951, abs=0.02)


def test_bad_arguments_are_refused(pilot, tmp_path):
    with pytest.raises(ValueError, match="expected one of a, b"):
        evaluate_pilot(pilot, screener="c")
    with pytest.raises(ValueError, match="screener b's set"):
        evaluate_pilot(pilot, screener="a", works="all")
    with pytest.raises(ValueError, match="no design weights"):
        evaluate_pilot(pilot, screener="b", works="all", weighted=True)
    with pytest.raises(ValueError, match="tfidf, tfidf-char, title-char, minilm"):
        evaluate_pilot(pilot, features="bert")
    with pytest.raises(FileNotFoundError, match="labels_joined.json"):
        evaluate_pilot(tmp_path)


def test_cli_prints_the_table(pilot):
    res = CliRunner().invoke(app, ["evaluate-pilot", "--labels", "a", "--features", "tfidf", "--pilot-dir", str(pilot)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("a "))
    assert line.split()[:8] == ["a", "joined", "tfidf", "793", "58", "0.0106", "790", "5"]
    assert "793 of 793 works name no venue" in res.output
    bad = CliRunner().invoke(app, ["evaluate-pilot", "--labels", "a", "--works", "all", "--pilot-dir", str(pilot)])
    assert bad.exit_code == 2 and "screener b's set" in bad.output
