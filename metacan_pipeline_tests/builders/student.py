"""Student builders for tests: synthetic frame, sample design, labels and qualification for a student run, and prediction and machine-score rows."""

from __future__ import annotations

import datetime as dt
import hashlib

import dagster as dg
import pyarrow as pa

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.checks import PREDICTION_CHECKS
from metacan_pipeline.student.holdout import venue_held_out, venue_key
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.teachers.core.registry import load_registry
from metacan_pipeline.teachers.qualification import (
    draw_reference_set,
    judge,
    load_qualification,
    reference_sha,
    store_result,
)
from metacan_pipeline.vocab import CATEGORICAL_TARGETS, PREDICTION_STATUS, SCORE_ONLY_IMMATURE
from metacan_pipeline_tests.builders.common import PILOT, sql
from metacan_pipeline_tests.builders.teachers import labels, write_labels


def prediction_row(wid):
    row = {
        "id": wid,
        "model_version": "metacan-v0-hybrid-000000000000",
        "candidate_categories": [],
        "consensus_categories": [],
        "category_scores_codex": [0.1] * 9,
        "category_scores_gemma": [0.2] * 9,
        "teacher_disagreement_score": 0.9,
        "threshold_uncertainty_score": 0.0,
        "prediction_status": PREDICTION_STATUS,
        "gemma_label_status": "labelled",
    }
    for t in ("about_ca_system", "about_ca_topic"):
        row.update({f"{t}_candidate": False, f"{t}_consensus": False, f"{t}_score_codex": 0.1, f"{t}_score_gemma": 0.1})
    for t, classes in CATEGORICAL_TARGETS.items():
        row.update(
            {
                f"{t}_scores_codex": [1 / len(classes)] * len(classes),
                f"{t}_scores_gemma": [1 / len(classes)] * len(classes),
                f"{t}_codex": None,
                f"{t}_gemma": None,
                f"{t}_candidate": None,
                f"{t}_consensus": None,
            }
        )
    return row


def machine_row(wid):
    return {
        "id": wid,
        "score_gemma": 0.3,
        "score_codex": 0.1,
        "score_spread": 0.2,
        "validation_status": SCORE_ONLY_IMMATURE,
        "provisional": True,
        "baseline": True,
        "maturity_gate_passed": False,
        "rounds_run": 1,
        "arm_status": "x",
        "note": "Scores rank; they never assert a category.",
    }


N_WORKS, N_VENUES = 480, 47  # 47: prime, so every venue mixes positive and negative titles
POS_TITLES = [
    "Meta-research audit of reporting quality in {} trials",
    "Reproducibility of published {} studies: a meta-research survey",
    "Research integrity and peer review in {} journals",
]
NEG_TITLES = [
    "Soil nitrogen cycling in {} boreal forests",
    "Catalytic oxidation of {} alcohols",
    "Ice sheet dynamics near {} glaciers",
]
WORDS = ["cardiology", "oncology", "ecology", "physics", "nursing", "surgery", "economics", "geology"]


def student_frame_rows():
    rows = []
    for i in range(N_WORKS):
        pos = i % 4 == 0
        title = (POS_TITLES if pos else NEG_TITLES)[i % 3].format(WORDS[i % len(WORDS)])
        rows.append(
            {
                "id": f"W{100000 + i}",
                "title_text": title,
                "venue_name": f"Journal {i % N_VENUES}",
                "venue_id": f"https://openalex.org/S{500 + i % N_VENUES}",
                "topic": "Topic " + WORDS[(i // 3) % 8],
                "field": "Medicine" if i % 2 else "Earth Sciences",
                "keywords": [],  # the frame's column (a student field); no keyword, so the texts stay the titles'
                "type": "article",
                "language": "en",
            }
        )
    return rows


def student_label(teacher: str, wid: str, title: str, flip: bool = False) -> dict:
    meta = ("meta-research" in title.lower() or "integrity" in title.lower()) != flip
    label_id = hashlib.sha256(f"{teacher}:{wid}:{flip}".encode()).hexdigest()[
        :32
    ]  # deterministic: sentinels hash the labels
    return {
        "label_id": label_id,
        "work_id": wid,
        "teacher": teacher,
        "model": "m",
        "prompt_version": "v2",
        "prompt_sha": "x",
        "record_view": "title_only",
        "view_hash": "h",
        "status": "labelled",
        "categories": ["metaresearch"] + (["research_integrity"] if "integrity" in title.lower() else [])
        if meta
        else [],
        "domain": "reproducibility" if meta else None,
        "study_design": "observational" if meta else "bench_or_experimental",
        "genre": "empirical" if int(wid[1:]) % 3 else "review",
        "about_ca_system": False,
        "about_ca_topic": int(wid[1:]) % 5 == 0,
        "confidence": "high",
        "reason": "synthetic",
        "error": None,
        "attempts": 1,
        "call_id": "c",
        "run_id": "r",
        "source": "teacher_call",
        "source_ref": None,
        "created_at": dt.datetime(2026, 11, 30),
    }


def write_inputs(
    storage: MetacanStorage, flip_holdout: bool = False, in_sample=lambda i, held: i % 2 == 0
) -> list[dict]:
    """Frame, sample design (weight 2; by default every other work in the sample), gemma labels on every
    work and codex labels on the sample. ``in_sample(index, held_out)`` chooses the sample."""
    frame = student_frame_rows()
    storage.write_table("frame", pa.Table.from_pylist(frame))
    held = {r["id"] for r in frame if venue_held_out(venue_key(r["id"], r["venue_id"]))}
    sample = [in_sample(i, r["id"] in held) for i, r in enumerate(frame)]
    storage.write_table(
        "sample_design",
        pa.Table.from_pylist(
            [{"id": r["id"], "in_sample": sample[i], "design_weight": 2.0} for i, r in enumerate(frame)]
        ),
    )
    gemma = [student_label("gemma", r["id"], r["title_text"], flip_holdout and r["id"] in held) for r in frame]
    codex = [
        student_label("codex", r["id"], r["title_text"], flip_holdout and r["id"] in held)
        for i, r in enumerate(frame)
        if sample[i]
    ]
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(gemma, schema=LABELS_SCHEMA))
    storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    record_qualification(storage, "gemma")
    record_qualification(storage, "codex")
    return frame


def record_qualification(storage: MetacanStorage, teacher: str, agree: bool = True) -> None:
    """Store a qualification result for a registry teacher whose labels a test writes directly (no calls):
    ``metacan_pipeline.teachers.qualification.judge`` on the real frame1k reference set of a teacher
    that gives every reference work its reference label (``agree``: qualified, kappa 1) or calls every
    work not meta-research (not qualified, kappa 0)."""
    cfg = load_qualification()
    works = draw_reference_set(PILOT, cfg, set())
    result = judge(works, {w.row["id"]: w.reference if agree else 0 for w in works}, cfg)
    store_result(storage, load_registry()[teacher], cfg, result, "test", reference_sha(works))


def run_student(storage: MetacanStorage, *assets, raise_on_error: bool = True) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [*assets, *PREDICTION_CHECKS],
        resources={"storage": storage},
        raise_on_error=raise_on_error,
        selection=dg.AssetSelection.assets(*assets),
    )


def move_holdout_works(storage, n=3) -> list[str]:
    """Give ``n`` frozen-holdout works a venue the holdout rule does not hold out (OpenAlex re-assigns a
    source, or a work without a venue gets one), and add a new gemma label so the student retrains."""
    held = sorted(r[0] for r in sql(storage, "SELECT work_id FROM student_holdout"))
    free = next(
        f"https://openalex.org/S{k}" for k in range(9000, 10000) if not venue_held_out(f"https://openalex.org/S{k}")
    )
    moved = held[:n]
    frame = storage.read_table("frame").to_pylist()
    for r in frame:
        if r["id"] in moved:
            r["venue_id"] = free
    storage.write_table("frame", pa.Table.from_pylist(frame))
    g = labels(storage, "gemma")
    g[1]["label_id"] = "relabelled"
    write_labels(storage, "gemma", g)
    return moved


# Frame rows (the columns the student reads) of works of three subjects.
REPRO = {
    "id": "W1",
    "title_text": "Reproducibility of published psychology experiments",
    "venue_name": "Psychological Science",
    "type": "article",
    "language": "en",
}
SOIL = {
    "id": "W4",
    "title_text": "Nitrogen cycling in boreal forest soils",
    "venue_name": "Soil Biology and Biochemistry",
    "type": "article",
    "language": "en",
}


def list_rows(frame: list[dict]) -> list[dict]:
    """Frame rows as the ``id,title,...`` rows of a list that ``metacan score`` reads."""
    return [
        {
            "id": r["id"],
            "title": r["title_text"],
            "venue": r["venue_name"],
            "topic": r["topic"],
            "field": r["field"],
            "type": r["type"],
            "language": r["language"],
        }
        for r in frame
    ]
