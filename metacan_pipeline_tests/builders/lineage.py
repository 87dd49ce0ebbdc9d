"""A world for the lineage tests: a frame built through Dagster on a Dagster home of its own, its ``work_lineage``,
and one planted direct label whose run the instance does not hold."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pyarrow as pa

from metacan_pipeline.publish.lineage import build_lineage
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline_tests.builders.common import OPENALEX, sql
from metacan_pipeline_tests.builders.frame import build_frame
from metacan_pipeline_tests.builders.openalex import SMALL_INPUT_FILES
from metacan_pipeline_tests.builders.teachers import label_row

#: A Dagster run id that no run of the world's instance has (the run of the planted direct label).
FOREIGN_RUN = "0f0f0f0f-1111-4222-8333-444455556666"


def lineage_world(tmp: Path) -> dict:
    """Under ``tmp``: the small real input (``openalex/``), a Dagster home (``dagster_home/``, the instance of every
    run), and the data folder (``data/``) of one ``frame_refresh`` + ``frame_build``; ``work_lineage`` built from that
    frame and a frame-rule direct label of gemma (run :data:`FOREIGN_RUN`) on the first work with a DOI. Returns
    ``instance``, ``storage``, ``data``, ``inp``, ``home``, ``first`` (that work), its ``doi`` and ``build``, and
    ``frame_run`` (the run that built the frame)."""
    inp = tmp / "openalex"
    inp.mkdir()
    for name in SMALL_INPUT_FILES:
        shutil.copy(OPENALEX / name, inp / name)
    data, home = tmp / "data", tmp / "dagster_home"
    home.mkdir()
    instance = dg.DagsterInstance.local_temp(str(home))
    _, result = build_frame(data, inp, instance)
    assert result.success
    storage = MetacanStorage(data_dir=str(data))
    [(first, build, doi)] = sql(
        storage, "SELECT id, frame_build_id, doi FROM frame WHERE doi IS NOT NULL ORDER BY id LIMIT 1"
    )
    label = {
        **label_row(first, "gemma", ["metaresearch"]),
        "run_id": FOREIGN_RUN,
        "call_id": None,
        "source": "frame_rule",
    }
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist([label], schema=LABELS_SCHEMA))
    build_lineage(storage, ["direct_labels_gemma"])
    return {
        "instance": instance,
        "storage": storage,
        "data": data,
        "inp": inp,
        "home": home,
        "first": first,
        "doi": doi,
        "build": build,
        "frame_run": result.run_id,
    }
