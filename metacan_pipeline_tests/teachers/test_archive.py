"""Tests of metacan_pipeline.teachers.calling.archive: the archive of teacher replies."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.teachers.calling.archive import ARCHIVE_DIR
from metacan_pipeline.teachers.labelling import label_works
from metacan_pipeline_tests.builders.teachers import RUN_LOG, frame_rows, spec_for
from metacan_pipeline_tests.stub_teacher.process import run_stub


def _write_archive(storage: MetacanStorage, teacher: str, name: str, payload: bytes) -> Path:
    path = storage.root / ARCHIVE_DIR / teacher / "2026-12-01" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(payload))
    return path


@pytest.mark.parametrize(
    "bad_line",
    [
        b"\x8b\x1f\x00garbage-after-bit-rot\n",
        b'{"kind": "call"}\n',
        b'{"kind": "label", "row": {"label_id": "L1", "created_at": "yesterday"}}\n',
    ],
)
def test_a_damaged_archive_file_does_not_stop_every_teacher(tmp_path, bad_line):
    """One damaged file in data/teacher_archive (a line that decodes to garbage, an event without its row,
    a row with a bad timestamp): recover() reports the file (and what it could read) and the run goes on."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    good = {
        "kind": "label",
        "row": {
            "label_id": "L0",
            "work_id": "W1",
            "teacher": "other",
            "status": "failed",
            "error": "x",
            "created_at": "2026-12-01T00:00:00",
        },
    }
    _write_archive(storage, "other", "dead-run-0000.jsonl.gz", orjson.dumps(good) + b"\n" + bad_line)
    with run_stub() as (url, _):
        try:
            stats = label_works(storage, spec_for(url), frame_rows(4), run_id="r1", log=RUN_LOG, base_url=lambda: url)
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"a damaged archive of teacher 'other' stopped teacher 'stub': {type(exc).__name__}: {exc}")
    assert stats.outcomes == {"labelled": 4}
