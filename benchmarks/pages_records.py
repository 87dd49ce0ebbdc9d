"""The page benchmark's input: ``n`` published records (records.build_record) around one real frame row (the
first work of SOURCE_FILE through ``work_row`` and ``frame_row``), each with a fresh id ``W5<9 digits>``, a
synthetic title, year and routes and a mix of classifications. See bench_pages.py's docstring.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

from _common import SHARED_DATA, synthetic_title

SHARED = SHARED_DATA / "openalex"
SOURCE_FILE = "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json"
VERSIONS = ("metacan-v3-hybrid-931329e0061c", "metacan-v4-hybrid-0123456789ab")


def real_frame_row() -> dict:
    """The frame row of the first work of SOURCE_FILE (a real Canadian-funded work, admitted)."""
    from metacan_pipeline.frame.entities import EntityLists
    from metacan_pipeline.frame.routes import AdmissionRule, frame_row
    from metacan_pipeline.openalex.reader import Record
    from metacan_pipeline.openalex.works import work_row

    data = json.loads((SHARED / SOURCE_FILE).read_text())["payload"]["results"][0]
    entities = EntityLists({}, {}, {}, {"funder": "f", "source": "s", "institution": "i"})
    row, why = frame_row(
        work_row(Record(data, SOURCE_FILE, "payload.results[0]", None, "W")), entities, AdmissionRule()
    )
    if why != "admitted":
        raise SystemExit(f"{SOURCE_FILE}: the first work was not admitted ({why}); the benchmark needs a frame row")
    row["frame_build_id"] = "bench-pages"
    return row


def _label(wid: str, categories: list[str]) -> dict:
    return {
        "work_id": wid,
        "teacher": "gemma",
        "model": "gemma-3-270m-q4_k_m",
        "prompt_version": "v2",
        "record_view": "title_only",
        "status": "labelled",
        "categories": categories,
        "domain": None,
        "study_design": "observational",
        "genre": "empirical",
        "about_ca_system": False,
        "about_ca_topic": False,
        "confidence": "medium",
        "reason": "The title names a survey of peer review.",
        "error": None,
        "call_id": f"c-{wid}",
        "source": "teacher_call",
        "created_at": None,
    }


def _prediction(wid: str, version: str, consensus: list[str], candidate: list[str], rng: random.Random) -> dict:
    from metacan_pipeline.vocab import CATEGORICAL_TARGETS, CATEGORIES, PREDICTION_STATUS

    row = {
        "id": wid,
        "model_version": version,
        "candidate_categories": candidate,
        "consensus_categories": consensus,
        "category_scores_codex": [round(rng.random(), 4) for _ in CATEGORIES],
        "category_scores_gemma": [round(rng.random(), 4) for _ in CATEGORIES],
        "teacher_disagreement_score": rng.random(),
        "threshold_uncertainty_score": rng.random(),
        "prediction_status": PREDICTION_STATUS,
        "gemma_label_status": "labelled",
    }
    for t in ("about_ca_system", "about_ca_topic"):
        row.update({f"{t}_candidate": False, f"{t}_consensus": False, f"{t}_score_codex": 0.1, f"{t}_score_gemma": 0.1})
    for t, classes in CATEGORICAL_TARGETS.items():  # uniform scores, no class chosen
        row.update({f"{t}_scores_{teacher}": [1 / len(classes)] * len(classes) for teacher in ("codex", "gemma")})
        row.update(dict.fromkeys(f"{t}_{column}" for column in ("codex", "gemma", "candidate", "consensus")))
    return row


def _machine(wid: str, rng: random.Random) -> dict:
    from metacan_pipeline.vocab import SCORE_ONLY_IMMATURE

    g, c = rng.random(), rng.random()
    return {
        "id": wid,
        "score_gemma": g,
        "score_codex": c,
        "score_spread": abs(g - c),
        "validation_status": SCORE_ONLY_IMMATURE,
        "provisional": True,
        "baseline": True,
        "maturity_gate_passed": False,
        "rounds_run": 2,
        "arm_status": "x",
        "note": "Scores rank; they never assert a category.",
    }


def make_records(n: int, seed: int = 20260106) -> list[dict]:
    """``n`` published records (records.build_record) around one real frame row; see the module docstring."""
    return [record for chunk in record_chunks(n, n, seed) for record, _ in chunk]


def record_chunks(n: int, chunk: int, seed: int = 20260106) -> Iterator[list[tuple[dict, dict]]]:
    """The records of :func:`make_records` (the same ones, in the same order) as lists of at most ``chunk``
    ``(record, frame row)`` pairs, so a benchmark of many works holds one list at a time."""
    from metacan_pipeline.publish.records import build_record
    from metacan_pipeline.vocab import CATEGORIES

    rng = random.Random(seed)
    base = real_frame_row()
    cats = [c for c in CATEGORIES if c != "insufficient_payload"]
    out: list[tuple[dict, dict]] = []
    for i in range(n):
        wid = f"W5{i:09d}"
        w = copy.copy(base)
        w.update(
            id=wid,
            title_text=synthetic_title(rng),
            publication_year=rng.randint(1995, 2025),
            cited_by_count=rng.randint(0, 500),
        )
        w.update(
            {r: rng.random() < p for r, p in (("ca_aff", 0.8), ("ca_fund", 0.4), ("ca_venue", 0.1), ("about_ca", 0.2))}
        )
        u = rng.random()
        some = rng.sample(cats, rng.randint(1, 3))
        version = VERSIONS[i % 2]
        if u < 0.25:
            labels, pred = [_label(wid, some[:1])], _prediction(wid, version, [], some, rng)
        elif u < 0.60:
            labels, pred = [], _prediction(wid, version, some[:1], some, rng)
        elif u < 0.85:
            labels, pred = [], _prediction(wid, version, [], some, rng)
        else:
            labels, pred = [], None
        lineage = {
            "frame_build_id": "bench-pages",
            "frame_run_id": "r-frame",
            "input_kind": "input_file",
            "source_file": SOURCE_FILE,
            "source_locator": "payload.results[0]",
            "part_run_id": "r-frame",
            "entity_list_versions": "funder=f;institution=i;source=s",
            "lexicon_version": "bench",
            "teacher_calls": [
                {
                    "teacher": "gemma",
                    "model": lab["model"],
                    "prompt_version": "v2",
                    "prompt_sha": "0" * 64,
                    "record_view": "title_only",
                    "label_status": "labelled",
                    "source": "teacher_call",
                    "call_id": lab["call_id"],
                    "request_hash": "f" * 64,
                    "called_at": "2026-11-30T12:00:00Z",
                    "run_id": "r-labels",
                    "archive": "archive/gemma.jsonl.gz#L1",
                }
                for lab in labels
            ],
            "model_version": pred["model_version"] if pred else None,
            "student_run_id": "r-student" if pred else None,
            "machine_round": 1 if pred else None,
            "machine_scores_run_id": "r-student" if pred else None,
            "machine_validation_status": "score_only:v0-immature-baseline" if pred else None,
        }
        out.append((build_record(w, labels, pred, _machine(wid, rng) if pred else None, lineage), w))
        if len(out) == chunk:
            yield out
            out = []
    if out:
        yield out


def write_release_inputs(data: Path, works: int, chunk: int = 10_000) -> dict:
    """Write what ``site.build.build_release`` reads, for ``works`` records of :func:`record_chunks` under ``data``:
    ``work_records``, ``frame`` (each record's frame row, so the name lists agree) and an empty ``student_heads``;
    marks the folder complete with ``data/.prepared`` (``{"works", "record_chars"}``) and returns those figures and
    the seconds taken."""
    import hashlib

    import pyarrow as pa

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.tables.frame import FRAME_SCHEMA
    from metacan_pipeline.tables.publish import RECORDS_SCHEMA
    from metacan_pipeline.tables.student import HEADS_SCHEMA

    storage = MetacanStorage(data_dir=str(data))
    frames: list[pa.Table] = []
    chars = 0

    def records():
        nonlocal chars
        for pairs in record_chunks(works, chunk):
            rows = []
            for record, _ in pairs:
                text = json.dumps(record, ensure_ascii=False, default=str)
                chars += len(text)
                rows.append(
                    {
                        "id": record["id"],
                        "record_json": text,
                        "record_hash": hashlib.sha256(text.encode()).hexdigest()[:16],
                    }
                )
            frames.append(pa.Table.from_pylist([f for _, f in pairs], schema=FRAME_SCHEMA))
            yield pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA)

    t0 = time.perf_counter()
    n = storage.write_table("work_records", records(), schema=RECORDS_SCHEMA)
    storage.write_table("frame", iter(frames), schema=FRAME_SCHEMA)
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    (data / ".prepared").write_text(json.dumps({"works": n, "record_chars": chars}))
    return {"works": n, "record_chars": chars, "seconds": time.perf_counter() - t0}
