"""Tests of the reference sets (metacan_pipeline.student.reference_sets): imported labels that train heads of their
own, also for works outside the frame, with the texts the import carries (teachers.imports.texts)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from metacan_pipeline.cli.run_summary import holdout_lines
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.assets import predictions, student_heads
from metacan_pipeline.student.holdout import venue_held_out, venue_key
from metacan_pipeline.student.models import load_published
from metacan_pipeline.student.reference_sets import reference_no_score, reference_score_columns
from metacan_pipeline.teachers.imports.texts import pilot_texts, text_row
from metacan_pipeline.vocab import BINARY_TARGETS, REFERENCE_GATE_REASON
from metacan_pipeline_tests.builders.common import metadata, root_error, sql
from metacan_pipeline_tests.builders.student import run_student, write_inputs
from metacan_pipeline_tests.builders.teachers import GOOD_LABEL, materialize


def test_text_row_reads_a_work_record_as_the_frame_would():
    row = text_row(
        {
            "id": "https://openalex.org/W42",
            "title": "Using <i>lme4</i> &amp; friends",
            "venue": " Journal of Things ",
            "keywords": "reproducibility; ; open data",
            "lang": "fr",
        },
        "f.json",
    )
    assert row == {
        "work_id": "W42",
        "title_text": "Using lme4 & friends",
        "keywords": ["reproducibility", "open data"],
        "file": "f.json",
        "venue_name": "Journal of Things",
        "topic": None,
        "field": None,
        "language": "fr",
        "type": None,
    }
    assert text_row({"id": "W1", "title": "  "}, "f") is None
    assert text_row({"id": "not an id", "title": "A title"}, "f") is None
    assert text_row(["W1", "A title"], "f") is None


def test_pilot_texts_read_every_work_file_of_the_real_pilot(pilot_dir: Path):
    rows = {r["work_id"]: r for r in pilot_texts(pilot_dir)}
    # chunks/ (775), chunks_b/ (600) and frame1k/chunks/ (750) less the ids they share and one empty title
    assert len(rows) == 2245
    assert rows["W2592716210"]["venue_name"] == "Revue de droit Université de Sherbrooke"
    assert rows["W2592716210"]["language"] == "fr" and rows["W2592716210"]["field"] == "Social Sciences"
    assert rows["W1965131991"]["title_text"] == "Home nocturnal hemodialysis in children"


def _label_file(tmp_path: Path, frame_ids: list[str]) -> Path:
    """A label file in our schema with titles: three frame works and one work outside the frame."""
    records = [
        {**GOOD_LABEL, "id": wid, "title": f"Reporting quality of trials {i}", "venue": "Trials Journal"}
        for i, wid in enumerate(frame_ids)
    ]
    records.append(
        {
            **GOOD_LABEL,
            "id": "W999000111",
            "categories": [],
            "domain": "not_metaresearch",
            "title": "Soil nitrogen in boreal forests",
        }
    )
    path = tmp_path / "earlier_study.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _import(tmp_path: Path, pilot_dir: Path, label_file: Path) -> None:
    result = materialize(
        tmp_path,
        {
            "pilot_dirs": [str(pilot_dir)],
            "files": [
                {
                    "path": str(label_file),
                    "teacher": "earlier_study",
                    "model": "people",
                    "prompt_version": "their-protocol",
                    "record_view": "title_abstract",
                    "source": "our earlier study",
                }
            ],
        },
    )
    assert result.success
    assert metadata(result, "imported_labels")["work_texts_read"] == 2245 + 4


def test_reference_sets_train_heads_of_their_own_with_their_design(tmp_path: Path, pilot_dir: Path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    frame = write_inputs(storage)
    held = next(r["id"] for r in frame if venue_held_out(venue_key(r["id"], r["venue_id"])))
    free = [r["id"] for r in frame if not venue_held_out(venue_key(r["id"], r["venue_id"]))][:2]
    _import(tmp_path, pilot_dir, _label_file(tmp_path, [held, *free]))

    result = run_student(storage, student_heads)
    assert result.success
    heads = {
        (r["teacher"], r["target"]): r
        for r in storage.read_table("student_heads").to_pylist()
        if r["teacher"] not in ("gemma", "codex")
    }
    a = heads["pilot_a", "metaresearch"]
    # the pilot's 793 screened works with a saved text; weighted by design x N_h/n_h, the rate is the pilot's
    # published design-weighted prevalence (0.0106)
    assert (a["labels"], a["positives"]) == (793, 58)
    assert a["weighted_rate"] == pytest.approx(0.010559, abs=1e-6)
    assert a["gate_passed"] is False and a["gate_reason"] == REFERENCE_GATE_REASON
    assert a["holdout_n"] == 0 and 0.5 < a["auroc"] <= 1 and "design-weighted" in a["metric_note"]
    b = heads["pilot_b", "metaresearch"]
    assert (b["labels"], b["positives"]) == (1431, 90) and "unweighted" in b["metric_note"]
    assert ("pilot_a", "about_ca_system") not in heads  # pilot_a's labels leave about_ca absent
    # the frame work of a held-out venue never trains; the work outside the frame does, with its own text
    study = sql(storage, "SELECT work_id FROM student_training_set WHERE teacher = 'earlier_study'")
    assert sorted(r[0] for r in study) == sorted([*free, "W999000111"])
    version = sql(storage, "SELECT DISTINCT model_version FROM student_heads")[0][0]
    bundle = load_published(storage, version)
    assert bundle.reference_sets["earlier_study"]["in_holdout_left_out"] == 1
    assert bundle.reference_sets["earlier_study"]["in_frame"] == 2
    assert sorted(bundle.heads["pilot_a"]) == ["metaresearch"]
    card = json.loads((storage.root / "reports" / version / "model_card.json").read_text())
    sets = {t["name"]: t for t in card["training_sets"] if t["kind"] == "reference_set"}
    assert sets["pilot_a"]["design_weights"] is True and sets["pilot_a"]["training_works"] == 793
    assert sets["pilot_b"]["design_weights"] is False
    limits = " ".join(x["text"] for x in card["limits"])
    assert "of pilot_a" not in limits and "about_ca_system, metaresearch" not in limits  # no holdout or gate sentence
    [card_a] = [h for h in card["heads"] if h["source"] == "pilot_a"]
    assert card_a["claim"]["decides"] is False and card_a["metrics"]["auroc"]["value"] == pytest.approx(a["auroc"])
    md = metadata(result, "student_heads")["reference_sets"]
    assert "| pilot_a | claude-sonnet-4-6 | 793 | design | metaresearch | 58 | 0.0106 |" in md
    with storage.connect() as con:
        line = holdout_lines(con, {"student_holdout"})[1]
    assert line.startswith("Reference sets the heads also learned from") and "pilot_a 793 works, 58 positives" in line
    assert "(design-weighted)" in line and "pilot_b 1431 works, 90 positives" in line

    # every frame work gets each reference head's score, beside the role teachers' heads
    assert dg.materialize(
        [predictions], resources={"storage": storage}, selection=dg.AssetSelection.assets(predictions)
    ).success
    n, lo, hi = sql(
        storage,
        "SELECT count(pilot_a__metaresearch), min(pilot_a__metaresearch), max(pilot_a__metaresearch) FROM student_scores",
    )[0]
    assert n == len(frame) and 0 <= lo < hi <= 1
    # what the records join: the reference-set heads' score columns, and no role teacher's
    assert set(reference_score_columns(storage)) == {
        *(f"frame1k_{arm}__{t}" for arm in ("gpt", "grok", "opus") for t in ("metaresearch", "about_ca_system")),
        "pilot_a__metaresearch",
        "pilot_b__metaresearch",
        "pilot_b__about_ca_system",
        *(f"earlier_study__{t}" for t in BINARY_TARGETS),
    }
    # the earlier study's heads whose training works are all negative (or all positive) give no score, and say why
    rows = [r for r in storage.read_table("student_heads").to_pylist() if r["teacher"] == "earlier_study"]
    silent = {
        f"earlier_study__{r['target']}": (
            f"no positive direct label to learn from (0 positives of {r['n_train']} labels)"
            if r["train_positives"] == 0
            else f"no negative direct label to learn from ({r['n_train']} positives of {r['n_train']} labels)"
        )
        for r in rows
        if r["train_positives"] in (0, r["n_train"])
    }
    assert len(silent) < len(rows) and any("no negative" in v for v in silent.values())
    assert any("no positive" in v for v in silent.values())
    assert reference_no_score(storage) == silent
    for c in silent:
        assert sql(storage, f"SELECT count({c}), count(*) FROM student_scores")[0] == (0, len(frame))

    # no reference set: the role teachers' heads only, under another model version
    result = dg.materialize(
        [student_heads],
        resources={"storage": storage},
        run_config={"ops": {"student_heads": {"config": {"reference_sets": []}}}},
    )
    assert result.success
    assert sql(storage, "SELECT DISTINCT teacher FROM student_heads ORDER BY 1") == [("codex",), ("gemma",)]
    assert sql(storage, "SELECT DISTINCT model_version FROM student_heads")[0][0] != version


def test_an_unknown_reference_set_is_refused_naming_the_imported_teachers(tmp_path: Path, pilot_dir: Path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    write_inputs(storage)
    assert materialize(tmp_path, {"pilot_dirs": [str(pilot_dir)]}).success
    result = dg.materialize(
        [student_heads],
        resources={"storage": storage},
        run_config={"ops": {"student_heads": {"config": {"reference_sets": ["pilot_c"]}}}},
        raise_on_error=False,
    )
    assert not result.success
    msg = root_error(result)
    assert "'pilot_c'" in msg and "pilot_a, pilot_b" in msg, msg
    result = dg.materialize(
        [student_heads],
        resources={"storage": storage},
        run_config={"ops": {"student_heads": {"config": {"reference_sets": ["gemma"]}}}},
        raise_on_error=False,
    )
    assert not result.success and "role teacher" in root_error(result)
