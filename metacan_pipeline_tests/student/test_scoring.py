"""Tests of metacan_pipeline.student.scoring: predictions written per file equal the single query."""

import datetime as dt

import numpy as np
import pyarrow as pa

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.calibration import quota_calibrate
from metacan_pipeline.student.scoring import prediction_batches, predictions_sql, scratch_connection
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.vocab import BINARY_TARGETS, CATEGORICAL_TARGETS, CATEGORIES


def _scores(ids: list[str], rng: np.random.Generator) -> pa.Table:
    cols: dict = {"id": ids, "held_out": [False] * len(ids)}
    for teacher in ("codex", "gemma"):
        for t in BINARY_TARGETS:
            cols[f"{teacher}__{t}"] = rng.random(len(ids)).round(2)  # rounded: ties at the quota boundary
        for t, classes in CATEGORICAL_TARGETS.items():
            p = rng.dirichlet(np.ones(len(classes)), size=len(ids))
            cols[f"{teacher}__{t}"] = pa.array(p.tolist(), pa.list_(pa.float64()))
            cols[f"{teacher}__{t}__argmax"] = [classes[i] for i in p.argmax(axis=1)]
    return pa.table(cols)


def _label(wid: str, rng: np.random.Generator, status: str, at: dt.datetime) -> dict:
    ok = status == "labelled"
    row = {f.name: None for f in LABELS_SCHEMA}
    row.update(
        {
            "label_id": f"{wid}-{at.isoformat()}",
            "work_id": wid,
            "teacher": "gemma",
            "status": status,
            "created_at": at,
            "source": "teacher_call",
            "categories": [c for c in CATEGORIES if rng.random() < 0.3] if ok else None,
            "about_ca_system": bool(rng.random() < 0.3) if ok else None,
            "about_ca_topic": bool(rng.random() < 0.3) if ok else None,
        }
    )
    for t, classes in CATEGORICAL_TARGETS.items():
        row[t] = classes[int(rng.integers(len(classes)))] if ok and rng.random() < 0.9 else None
    return row


def test_per_file_predictions_equal_the_single_query(tmp_path):
    rng = np.random.default_rng(7)
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    ids = [f"W{i:04d}" for i in range(300)]
    files = [ids[:100], ids[100:200][::-1], ids[200:]]  # the second file out of id order
    storage.write_table("student_scores", [_scores(f, rng) for f in files])
    t0 = dt.datetime(2026, 1, 1)
    labels = [
        _label(w, rng, "failed" if i % 17 == 0 else "labelled", t0) for i, w in enumerate(ids) if i % 11
    ]  # every 11th: none
    labels += [_label(w, rng, "labelled", t0 - dt.timedelta(days=1)) for w in ids[::7]]  # older labels, replaced
    labels += [_label(w, rng, "failed", t0 + dt.timedelta(days=1)) for w in ids[5::23]]  # newer failures, replacing
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(labels, schema=LABELS_SCHEMA))
    gated = {t: t not in ("sts", "genre") for t in (*BINARY_TARGETS, *CATEGORICAL_TARGETS)}
    with scratch_connection(storage) as con:
        quotas = {
            t: quota_calibrate(con, "student_scores", f'"codex__{t}"', 0.1, t) for t in BINARY_TARGETS if gated[t]
        }
        whole = con.execute(predictions_sql("mv", quotas, gated)).to_arrow_table()
        parts = pa.Table.from_batches(list(prediction_batches(con, storage, "mv", quotas, gated, batch_size=40)))
    assert whole.num_rows == parts.num_rows == 300
    assert parts.sort_by("id").equals(whole.sort_by("id"))
    unlabelled = set(ids) - {r["work_id"] for r in labels}
    assert (
        unlabelled
        and {
            w
            for w, s in zip(
                parts.column("id").to_pylist(), parts.column("gemma_label_status").to_pylist(), strict=False
            )
            if s == "missing"
        }
        == unlabelled
    )


def test_the_student_scratch_duckdb_holds_its_memory_to_one_gigabyte(tmp_path):
    """The student's private DuckDB is limited to 1 GB (DuckDB's default is 80% of RAM) and spills under
    data/tmp."""
    storage = MetacanStorage(data_dir=str(tmp_path))
    with scratch_connection(storage) as con:
        limit, temp, threads = con.execute(
            "SELECT current_setting('memory_limit'), current_setting('temp_directory'), current_setting('threads')"
        ).fetchone()
    assert (limit, temp, threads) == ("953.6 MiB", str(tmp_path / "tmp"), 2)
