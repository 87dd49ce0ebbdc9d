"""Frame builders for tests: a frame built through Dagster and a frame row made from a real work record."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from metacan_pipeline.definitions import build_resources, materialize_in_process
from metacan_pipeline.frame.entities import EntityLists
from metacan_pipeline.frame.routes import AdmissionRule, frame_row
from metacan_pipeline.openalex.reader import Record
from metacan_pipeline.openalex.works import work_row


def build_frame(data: Path, inp: Path, instance: dg.DagsterInstance | None = None):
    instance = instance or dg.DagsterInstance.ephemeral()
    return instance, materialize_in_process(instance, build_resources(str(data), str(inp)), through="frame")


ENTITIES = EntityLists({}, {}, {}, {"funder": "f", "source": "s", "institution": "i"})


def real_frame_row(openalex_dir, **overrides):
    data = json.loads((openalex_dir / "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json").read_text())[
        "payload"
    ]["results"][0]
    data = {**data, **overrides}
    row, why = frame_row(
        work_row(
            Record(data, "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json", "payload.results[0]", None, "W")
        ),
        ENTITIES,
        AdmissionRule(),
    )
    assert why == "admitted"
    row["frame_build_id"] = "test-run"
    return row
