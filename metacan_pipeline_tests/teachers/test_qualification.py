"""Tests of metacan_pipeline.teachers.qualification: the frontier reference set, the test, both outcomes
with a real (stub) teacher endpoint, and what an unqualified teacher may still decide (nothing)."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest
from sklearn.metrics import cohen_kappa_score

from metacan_pipeline.teachers.core.reference import R1_ARMS, frame1k_labels
from metacan_pipeline.teachers.core.views import record_view
from metacan_pipeline.teachers.qualification import (
    IN_SCOPE,
    NOT_QUALIFIED,
    OUT,
    QUALIFIED,
    TOO_FEW,
    QualificationConfig,
    current_qualification,
    draw_reference_set,
    frontier_kappa,
    judge,
    load_qualification,
    qualify,
)
from metacan_pipeline_tests.builders.common import PILOT
from metacan_pipeline_tests.builders.teachers import RUN_LOG, spec_for
from metacan_pipeline_tests.stub_teacher.process import run_stub

CFG = QualificationConfig(negatives=30, min_works=50)  # 34 in scope + 30 drawn negatives


def test_reference_set_takes_every_frontier_positive_and_weights_the_drawn_negatives():
    works = draw_reference_set(PILOT, CFG, set())
    by = {s: [w for w in works if w.stratum == s] for s in (IN_SCOPE, OUT)}
    assert len(by[IN_SCOPE]) == 34 and {w.pi for w in by[IN_SCOPE]} == {1.0}
    assert len(by[OUT]) == 30 and all(
        w.pi == pytest.approx(30 / 716) and w.weight == pytest.approx(716 / 30) for w in by[OUT]
    )
    # the reference label is the adjudicated scope: 16 positives, all in the in-scope stratum
    assert sum(w.reference for w in works) == 16 and not any(w.reference for w in by[OUT])
    assert sum(w.weight for w in works) == pytest.approx(750)
    # the drawn set is the same every time (salted hash order), another salt draws other negatives
    again = draw_reference_set(PILOT, CFG, set())
    assert [w.row["id"] for w in again] == [w.row["id"] for w in works]
    other = draw_reference_set(PILOT, QualificationConfig(negatives=30, salt="other"), set())
    assert {w.row["id"] for w in other if w.stratum == OUT} != {w.row["id"] for w in by[OUT]}


def test_frontier_kappa_on_the_weighted_set_equals_the_pairwise_kappa_of_all_750_works():
    """The negatives left out are all-OUT for every arm, so the design weights restore the 750-work table."""
    ref = frame1k_labels(PILOT)
    ids = list(ref.records)
    full = [
        cohen_kappa_score([ref.labels[a][i] for i in ids], [ref.labels[b][i] for i in ids])
        for j, a in enumerate(R1_ARMS)
        for b in R1_ARMS[j + 1 :]
    ]
    assert frontier_kappa(draw_reference_set(PILOT, CFG, set())) == pytest.approx(sum(full) / 3)
    assert sum(full) / 3 == pytest.approx(0.6185, abs=1e-4)


def test_judge_passes_the_frontier_arms_and_fails_a_teacher_that_never_says_metaresearch():
    works = draw_reference_set(PILOT, CFG, set())
    opus = judge(works, {w.row["id"]: w.arms["opus_r1"] for w in works}, CFG)
    assert opus.status == QUALIFIED and opus.kappa == pytest.approx(0.6729, abs=1e-4)
    assert opus.needed_kappa == pytest.approx(0.6 * 0.6185, abs=1e-4) and opus.labelled == 64
    never = judge(works, {w.row["id"]: 0 for w in works}, CFG)
    assert never.status == NOT_QUALIFIED and never.kappa == 0.0 and never.teacher_positives == 0
    assert never.note() == "teacher not qualified (kappa 0.00 on 64 reference works (16 positive); needs 0.37)"
    # too few judged works: no verdict either way, and the labels decide nothing
    few = judge(works, {w.row["id"]: w.reference for w in works[:20]}, CFG)
    assert few.status == TOO_FEW and not few.counts and "too few cases" in few.note()


def test_reference_works_are_shown_in_the_teachers_own_view_with_canadian_names_marked():
    works = {w.row["id"]: w for w in draw_reference_set(PILOT, CFG, {"canadian institutes of health research"})}
    view = record_view(works["W1255795715"].row, "title_only")
    assert view["institutions"] == [
        "University of Toronto (Canada)",
        "Toronto Rehabilitation Institute (Canada)",
        "University Health Network (Canada)",
        "Baycrest Hospital (Canada)",
    ]
    assert view["funders"] == [] and "abstract" not in view
    cihr = [w for w in works.values() if "Canadian Institutes of Health Research" in w.row["funder_names"]]
    assert len(cihr) == 2
    for w in cihr:  # on the Canadian funder list: marked, and listed before the other funders
        assert record_view(w.row, "title_only")["funders"][0] == "Canadian Institutes of Health Research (Canada)"
    with_abstract = next(w for w in works.values() if w.abstract)
    assert record_view(with_abstract.row, "title_abstract", with_abstract.abstract)["abstract"].startswith(
        with_abstract.abstract[:50]
    )


@pytest.mark.parametrize("agrees", [True, False])
def test_qualification_through_a_real_endpoint_both_outcomes_and_a_rerun_buys_nothing(storage, tmp_path, agrees):
    """The stub teacher told the reference positives agrees with the reference (qualified, kappa 1); the stub's
    hash labels (about 10% metaresearch, unrelated to the works) do not (not qualified). Stored, cached."""
    works = draw_reference_set(PILOT, CFG, set())
    positives = tmp_path / "positives.txt"
    positives.write_text("\n".join(w.row["id"] for w in works if w.reference))
    options = {"metaresearch_ids": str(positives)} if agrees else {}
    spec = None
    with run_stub(**options) as (url, _):
        spec = spec_for(url, name="stubq", prompt_version="v3", works_per_call=5)
        result = qualify(storage, spec, works, CFG, run_id="r1", log=RUN_LOG, base_url=lambda: url)
        calls = httpx.get(url.removesuffix("/v1") + "/stats").json()["calls"]
        again = qualify(storage, spec, works, CFG, run_id="r2", log=RUN_LOG, base_url=lambda: url)
        assert httpx.get(url.removesuffix("/v1") + "/stats").json()["calls"] == calls  # nothing bought twice
    assert result.labelled == 64 and result.reference_positives == 16 and calls == 13  # 64 works, 5 per call
    if agrees:
        assert result.status == QUALIFIED and result.kappa == pytest.approx(1.0) and result.counts
    else:
        assert result.status == NOT_QUALIFIED and result.kappa < 0.37 and not result.counts
    assert again == result
    row = current_qualification(storage, spec, CFG)
    assert row["status"] == result.status and row["run_id"] == "r2" and row["record_view"] == "title_only@v2"
    assert row["config_hash"] == CFG.config_hash and row["note"] == result.note()


def test_a_changed_configuration_is_a_new_test(storage, tmp_path):
    packaged = load_qualification()
    assert packaged.negatives == 16 and packaged.min_works == 40  # the default, fixed before the test runs
    assert QualificationConfig(min_kappa_ratio=0.5).config_hash != packaged.config_hash
    with pytest.raises(ValueError, match="unknown keys"):
        QualificationConfig.from_table({"min_kappa": 0.4}, "registry x")
    for bad, key in (
        ({"min_kappa_ratio": "high"}, "min_kappa_ratio"),
        ({"min_works": True}, "min_works"),  # a TOML boolean is not a count
        ({"negatives": -3}, "negatives"),
        ({"salt": ""}, "salt"),
        ({"reference": "frame2k"}, "reference"),
    ):
        with pytest.raises(ValueError, match=f"registry x: \\[qualification\\]: .*{key}"):
            QualificationConfig.from_table(bad, "registry x")
    with pytest.raises(ValueError, match="registry x: qualification must be a table"):
        QualificationConfig.from_table(5, "registry x")
    assert QualificationConfig.from_table(None, "registry x") == packaged  # the packaged values are the defaults


def test_an_incomplete_or_malformed_reference_folder_is_refused_naming_the_file(tmp_path):
    import shutil

    pilot = tmp_path / "pilot"
    shutil.copytree(PILOT / "frame1k", pilot / "frame1k")
    (pilot / "frame1k" / "grok_r1" / "labels_03.json").unlink()
    with pytest.raises(ValueError, match="incomplete .*'unlabelled_grok_r1': 50"):
        draw_reference_set(pilot, CFG, set())
    (pilot / "frame1k" / "chunks" / "chunk_02.json").write_text('{"works": []}')
    with pytest.raises(ValueError, match="chunk_02.json: expected a JSON list of objects"):
        draw_reference_set(pilot, CFG, set())
    (pilot / "frame1k" / "chunks" / "chunk_02.json").write_bytes(b"\xff\xfe[]")
    with pytest.raises(ValueError, match="chunk_02.json: not UTF-8 JSON"):
        draw_reference_set(pilot, CFG, set())


def test_a_reference_the_frontier_arms_do_not_agree_on_judges_no_one():
    works = draw_reference_set(PILOT, CFG, set())
    # two arms that contradict each other on every work (the third unlabelled)
    flipped = [replace(w, arms={"opus_r1": w.reference, "codex_r1": 1 - w.reference, "grok_r1": None}) for w in works]
    assert frontier_kappa(flipped) < 0
    never = judge(flipped, {w.row["id"]: 0 for w in flipped}, QualificationConfig(min_works=10, min_positives=3))
    assert never.status == TOO_FEW  # a negative needed kappa would let a teacher that never says yes pass
