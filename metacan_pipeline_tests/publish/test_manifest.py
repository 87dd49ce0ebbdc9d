"""Tests of metacan_pipeline.publish.manifest: which pages are rendered again, the manifest upsert and withdrawals."""

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metacan_pipeline.publish.manifest import (
    newest_render,
    note_rendered,
    page_path_ok,
    pages_to_render,
    snapshot_manifest,
    withdraw,
    works_gone,
)
from metacan_pipeline.publish.page_writer import write_atomic
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.publish import RECORDS_SCHEMA

AT = dt.datetime(2026, 1, 2, 3, 4, 5)


def _records(storage: MetacanStorage, hashes: dict[str, str], per_part: int = 2) -> None:
    """``work_records`` holding ``hashes`` (id: record hash), ``per_part`` rows a Parquet file."""
    rows = [{"id": wid, "record_json": "{}", "record_hash": h} for wid, h in hashes.items()]
    parts = [pa.Table.from_pylist(rows[i : i + per_part], schema=RECORDS_SCHEMA) for i in range(0, len(rows), per_part)]
    storage.write_table("work_records", parts, schema=RECORDS_SCHEMA)


def _manifest(storage: MetacanStorage, rows: dict[str, tuple[str, str, str, str]]) -> None:
    """Replace ``page_manifest`` with ``rows`` (id: record hash, renderer, page path, abstract status)."""
    with storage.connect() as con:
        con.execute("DELETE FROM page_manifest")
    names = ("record_hash", "renderer", "page_path", "abstract_status")
    note_rendered(
        storage,
        [{"id": w, **dict(zip(names, v, strict=True)), "rendered_at": AT, "run_id": "r0"} for w, v in rows.items()],
    )


def _todo(storage: MetacanStorage, tmp_path, renderer: str = "r", **flags) -> set[str]:
    """The ids :func:`pages_to_render` plans to render (checking the plan holds every record, in table order)."""
    manifest = snapshot_manifest(storage, tmp_path / "manifest.parquet")
    plan = pages_to_render(storage, manifest, renderer, tmp_path / "plan.parquet", **flags)
    table = pq.read_table(plan.path)
    ids = [b["id"] for b in storage.read_table("work_records", ["id"]).to_pylist()]
    assert table.column("id").to_pylist() == ids and plan.works == len(ids)
    todo = {w for w, render in zip(ids, table.column("render").to_pylist(), strict=True) if render}
    assert plan.to_render == len(todo)
    return todo


def test_pages_to_render_names_each_reason_a_page_is_rendered_again(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site = storage.site_dir
    for wid in ("W1", "W2", "W3", "W4"):
        write_atomic(site / "works" / "v1" / f"{wid}.html", "page")
        write_atomic(site / "records" / f"{wid}.json", "{}")
    hashes = {"W1": "h1", "W2": "h2-new", "W3": "h3", "W4": "h4", "W5": "h5"}
    _records(storage, hashes)
    manifest = {
        "W1": ("h1", "r", "works/v1/W1.html", "ok"),  # unchanged
        "W2": ("h2", "r", "works/v1/W2.html", "ok"),  # record changed
        "W3": ("h3", "old", "works/v1/W3.html", "ok"),  # renderer changed
        "W4": ("h4", "r", "works/v1/W4.html", "failed"),  # abstract fetch failed last time
        "W9": ("h9", "r", "works/v1/W9.html", "ok"),  # left the frame
    }
    _manifest(storage, manifest)
    assert _todo(storage, tmp_path) == {"W2", "W3", "W5"}
    assert _todo(storage, tmp_path, retry_abstracts=True) == {"W2", "W3", "W4", "W5"}
    assert _todo(storage, tmp_path, rerender_all=True) == set(hashes)
    (site / "records" / "W1.json").unlink()  # a record file gone: rendered again
    assert "W1" in _todo(storage, tmp_path)
    write_atomic(site / "records" / "W1.json", "{}")
    assert "W1" not in _todo(storage, tmp_path)
    _manifest(storage, {**manifest, "W1": ("h1", "r", "../../etc/passwd", "ok")})
    assert not page_path_ok("W1", "../../etc/passwd") and "W1" in _todo(storage, tmp_path)
    gone = works_gone(storage, snapshot_manifest(storage, tmp_path / "manifest.parquet"))
    assert dict(gone) == {"W9": "works/v1/W9.html"}
    _records(storage, {"W1/../x": "h"})
    with pytest.raises(ValueError, match="refusing to publish work id"):
        _todo(storage, tmp_path)


def test_manifest_upsert_and_withdrawal_on_a_real_catalog(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    row = {"record_hash": "h", "renderer": "r", "abstract_status": "ok", "rendered_at": AT, "run_id": "run"}
    rows = [{"id": wid, "page_path": f"works/v1/{wid}.html", **row} for wid in ("W1", "W2")]
    assert note_rendered(storage, rows) == 2 and note_rendered(storage, rows[:1]) == 1  # the upsert replaces W1
    snapshot = pq.read_table(snapshot_manifest(storage, tmp_path / "m.parquet")).sort_by("id").to_pylist()
    assert snapshot == [
        {"id": w, "record_hash": "h", "renderer": "r", "page_path": f"works/v1/{w}.html", "abstract_status": "ok"}
        for w in ("W1", "W2")
    ]
    assert newest_render(storage) == AT
    for path in ("works/v1/W2.html", "works/v0/W2.html", "records/W2.json"):
        write_atomic(storage.site_dir / path, "x")
    assert withdraw(storage, [("W2", "works/v1/W2.html")]) == 1 and withdraw(storage, []) == 0
    with storage.connect(read_only=True) as con:
        assert con.execute("SELECT id FROM page_manifest").fetchall() == [("W1",)]
    assert not (storage.site_dir / "works/v1/W2.html").exists() and not (storage.site_dir / "records/W2.json").exists()
    assert (storage.site_dir / "works/v0/W2.html").exists()  # an earlier version's permalink stays


def test_works_that_left_the_frame_are_found_by_an_anti_join_and_withdrawn_chunk_by_chunk(tmp_path):
    """Five of eight rendered works leave the frame: each one's files and row go, withdrawn three at a time,
    and the works still in the frame keep theirs."""
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    ids = [f"W{i}" for i in range(1, 9)]
    _manifest(storage, {w: ("h", "r", f"works/v1/{w}.html", "ok") for w in ids})
    for w in ids:
        write_atomic(storage.site_dir / "works" / "v1" / f"{w}.html", "page")
        write_atomic(storage.site_dir / "records" / f"{w}.json", "{}")
    _records(storage, {"W2": "h", "W5": "h", "W8": "h"})
    gone = works_gone(storage, snapshot_manifest(storage, tmp_path / "manifest.parquet"))
    assert withdraw(storage, gone, chunk=3) == 5
    with storage.connect(read_only=True) as con:
        assert con.execute("SELECT id FROM page_manifest ORDER BY id").fetchall() == [("W2",), ("W5",), ("W8",)]
    kept = {p.stem for p in (storage.site_dir / "records").glob("*.json")}
    assert kept == {p.stem for p in (storage.site_dir / "works" / "v1").glob("*.html")} == {"W2", "W5", "W8"}
