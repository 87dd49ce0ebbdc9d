"""Teacher builders for tests: direct-label rows, a valid label and reply, frame rows that trigger stub faults, and a teacher spec."""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg
import pyarrow as pa

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.teachers.assets import imported_labels, teacher_agreement
from metacan_pipeline.teachers.core.registry import TeacherSpec
from metacan_pipeline_tests.builders.common import XSS


def labels(storage, teacher):
    return storage.read_table(f"direct_labels_{teacher}").to_pylist()


def write_labels(storage, teacher, rows):
    storage.write_table(f"direct_labels_{teacher}", pa.Table.from_pylist(rows, schema=LABELS_SCHEMA))


RUN_LOG = logging.getLogger("break")


GOOD_LABEL = {
    "id": "W1",
    "categories": ["metaresearch"],
    "domain": "reporting",
    "study_design": "observational",
    "genre": "empirical",
    "about_ca_system": False,
    "about_ca_topic": True,
    "confidence": "high",
    "reason": "Audits reporting of trials.",
}


def materialize(tmp_path: Path, config: dict | None = None) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [imported_labels, teacher_agreement],
        resources={"storage": MetacanStorage(data_dir=str(tmp_path / "data"))},
        run_config={"ops": {"imported_labels": {"config": config or {}}}},
        instance=dg.DagsterInstance.ephemeral(),
    )


def label_row(wid, teacher, categories, status="labelled"):
    return {
        "work_id": wid,
        "teacher": teacher,
        "model": "m",
        "prompt_version": "v1",
        "record_view": "title_only",
        "view_hash": "h",
        "status": status,
        "categories": categories,
        "domain": None,
        "study_design": "observational",
        "genre": "empirical",
        "about_ca_system": False,
        "about_ca_topic": False,
        "confidence": "low",
        "reason": f"because {XSS}",
        "error": None,
        "attempts": 1,
        "call_id": "c1",
        "label_id": "l1",
        "run_id": "r",
        "source": "teacher_call",
        "created_at": None,
    }


GOOD_REPLY = {
    "id": "W1",
    "categories": ["metaresearch", "metaresearch", "open_science"],
    "domain": "reproducibility",
    "study_design": "observational",
    "genre": "empirical",
    "about_ca_system": False,
    "about_ca_topic": True,
    "confidence": "medium",
    "reason": "x" * 500,
}


def frame_rows(n: int, faults: dict[int, str] | None = None) -> list[dict]:
    faults = faults or {}
    return [
        {
            "id": f"W{1000 + i}",
            "title_text": f"Study {i} of research practice" + (f" FAULT:{faults[i]}" if i in faults else ""),
            "publication_year": 2020,
            "language": "en",
            "type": "article",
            "venue_name": None,
            "topic": None,
            "field": None,
            "in_sampling_frame": True,
            "sampling_frame_exclusion": None,
            "has_abstract": False,
        }
        for i in range(n)
    ]


def spec_for(url: str, **kw) -> TeacherSpec:
    base = {
        "name": "stub",
        "base_url": url,
        "model": "stub-teacher",
        "works_per_call": 4,
        "concurrency": 4,
        "structured_output": "json_schema",
        "system_role": "yes",
        "max_transport_attempts": 2,
        "price_input_per_1k": 0.001,
        "price_output_per_1k": 0.002,
    }
    return TeacherSpec(**{**base, **kw})
