"""Tests of pages stored precompressed (metacan_pipeline.publish.page_files and work_pages' ``page_encoding``): a
gzip page and record file hold exactly the plain file's bytes, a re-run rewrites nothing unchanged, switching
encodings keeps one file per URL, and a withdrawn work leaves no file in either encoding."""

from __future__ import annotations

import datetime as dt
import gzip
import json

import dagster as dg
import pyarrow as pa
import pytest

from metacan_pipeline.definitions import build_resources
from metacan_pipeline.publish.assets import PagesConfig, work_pages, work_records
from metacan_pipeline.publish.checks import records_may_ship
from metacan_pipeline.publish.page_files import encoded, read_site_file, stored_name, write_site_file
from metacan_pipeline.publish.page_writer import PageWriter
from metacan_pipeline.publish.pages import environment, page_path
from metacan_pipeline.settings import page_encoding
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline.tables.student import HEADS_SCHEMA, MACHINE_SCHEMA, PRED_SCHEMA
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.student import machine_row, prediction_row
from metacan_pipeline_tests.builders.teachers import label_row

VERSION = "metacan-v0-hybrid-000000000000"
CONTEXT = {
    "n_codex_labels": 12,
    "gated_heads": 3,
    "total_heads": 14,
    "rendered_at": "2026-12-07 16:00 UTC",
    "page_run_id": "run-fixed",
}


def _world(storage: MetacanStorage, openalex_dir, n: int = 3) -> list[str]:
    """A frame of ``n`` copies of one real frame work under ids W9000001.., each with a gemma label, a prediction and
    machine scores (the last one unscored: no prediction)."""
    base = real_frame_row(openalex_dir)
    rows = [{**base, "id": f"W900000{i}"} for i in range(1, n + 1)]
    storage.write_table("frame", pa.Table.from_pylist(rows, schema=FRAME_SCHEMA))
    labels = [label_row(r["id"], "gemma", ["sts"]) for r in rows]
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(labels, schema=LABELS_SCHEMA))
    storage.write_table("direct_labels_codex", pa.Table.from_pylist([], schema=LABELS_SCHEMA))
    preds = [prediction_row(r["id"]) for r in rows[:-1]]
    storage.write_table("predictions", pa.Table.from_pylist(preds, schema=PRED_SCHEMA))
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    storage.write_table(
        "machine_scores", pa.Table.from_pylist([machine_row(r["id"]) for r in rows], schema=MACHINE_SCHEMA)
    )
    return [r["id"] for r in rows]


def _run(resources, assets, **config) -> dg.ExecuteInProcessResult:
    result = dg.materialize(
        assets,
        resources=resources,
        run_config=dg.RunConfig({"work_pages": PagesConfig(fetch_abstracts=False, **config)})
        if work_pages in assets
        else None,
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    return result


def _pages_md(result) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node("work_pages")[0].metadata.items()}


def _files(storage: MetacanStorage) -> dict[str, tuple[int, bytes]]:
    """Every file of the site under works/ and records/: ``{relative path: (mtime_ns, bytes)}``."""
    site = storage.site_dir
    return {
        str(p.relative_to(site)): (p.stat().st_mtime_ns, p.read_bytes())
        for folder in ("works", "records")
        for p in sorted((site / folder).rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def world(tmp_path, openalex_dir):
    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    ids = _world(resources["storage"], openalex_dir)
    return resources, ids


def test_a_gzip_page_and_record_file_decompress_to_the_plain_files_byte_for_byte(world, tmp_path):
    resources, ids = world
    storage = resources["storage"]
    _run(resources, [work_records, records_may_ship])
    chunk = [
        (r["id"], json.loads(r["record_json"]), r["record_json"], r["record_hash"])
        for r in storage.read_table("work_records").to_pylist()
    ]
    sites = {}
    for encoding in ("plain", "gzip"):
        target = MetacanStorage(data_dir=str(tmp_path / encoding))
        writer = PageWriter(
            target,
            environment(),
            CONTEXT,
            None,
            renderer="r1",
            run_id="run-fixed",
            rendered_at=dt.datetime(2026, 12, 7, 16),
            encoding=encoding,
        )
        rows = writer.write(chunk)
        assert [r["page_path"] for r in rows] == [stored_name(page_path(rec), encoding) for _, rec, _, _ in chunk]
        sites[encoding] = (target, writer)
    plain, gz = _files(sites["plain"][0]), _files(sites["gzip"][0])
    assert sorted(gz) == sorted(f + ".gz" for f in plain) and len(plain) == 2 * len(ids)
    for name, (_, data) in plain.items():
        assert gzip.decompress(gz[name + ".gz"][1]) == data  # the same page, the same record JSON
        assert read_site_file(sites["gzip"][0].site_dir, name) == data.decode("utf-8")
    # what the manifest says it wrote is what is on disk; the gzip site is about a quarter of the plain one
    assert sites["gzip"][1].bytes_written == sum(len(d) for f, (_, d) in gz.items() if f.startswith("works/"))
    assert sites["gzip"][1].bytes_written < 0.4 * sites["plain"][1].bytes_written
    record = json.loads(gzip.decompress((sites["gzip"][0].site_dir / f"records/{ids[0]}.json.gz").read_bytes()))
    assert record["id"] == ids[0] and record["direct_labels"][0]["teacher"] == "gemma"


def test_the_same_text_gives_the_same_gzip_bytes_and_one_file_per_url(tmp_path):
    text = "<p>Évaluation des pairs</p>\n" * 50
    assert encoded(text, "gzip") == encoded(text, "gzip")  # no name, mtime 0: an unchanged page is unchanged bytes
    assert gzip.decompress(encoded(text, "gzip")) == text.encode("utf-8") == encoded(text, "plain")
    assert write_site_file(tmp_path, "works/v1/W1.html", text, "plain") == "works/v1/W1.html"
    assert write_site_file(tmp_path, "works/v1/W1.html", text, "gzip") == "works/v1/W1.html.gz"
    assert sorted(p.name for p in (tmp_path / "works/v1").iterdir()) == ["W1.html.gz"]
    write_site_file(tmp_path, "works/v1/W1.html", text, "plain")
    assert sorted(p.name for p in (tmp_path / "works/v1").iterdir()) == ["W1.html"]
    assert read_site_file(tmp_path, "works/v1/W2.html") is None
    with pytest.raises(ValueError, match="'brotli' must be plain or gzip"):
        encoded(text, "brotli")


def test_the_setting_and_the_option_name_a_bad_encoding(monkeypatch):
    monkeypatch.delenv("METACAN_PAGE_ENCODING", raising=False)
    assert page_encoding() == "plain"
    monkeypatch.setenv("METACAN_PAGE_ENCODING", " GZIP ")
    assert page_encoding() == "gzip" and page_encoding("plain") == "plain"
    monkeypatch.setenv("METACAN_PAGE_ENCODING", "zstd")
    with pytest.raises(ValueError, match=r"METACAN_PAGE_ENCODING='zstd' must be one of plain, gzip"):
        page_encoding()
    with pytest.raises(ValueError, match=r"page_encoding='br' must be one of plain, gzip"):
        page_encoding("br")


def test_gzip_pages_are_rendered_once_rewritten_never_unchanged_and_withdrawn_whole(world):
    resources, ids = world
    storage = resources["storage"]
    first = _pages_md(_run(resources, [work_records, records_may_ship, work_pages], page_encoding="gzip"))
    assert first["pages_rendered"] == 3 and first["page_encoding"] == "gzip"
    files = _files(storage)
    want = {f"works/{VERSION}/{w}.html.gz" for w in ids[:2]} | {f"works/unscored/{ids[2]}.html.gz"}
    assert {f for f in files if f.startswith("works/")} == want
    assert {f for f in files if f.startswith("records/")} == {f"records/{w}.json.gz" for w in ids}
    assert first["page_bytes_written"] == sum(len(d) for f, (_, d) in files.items() if f.startswith("works/"))
    with storage.connect(read_only=True) as con:
        assert {r[0] for r in con.execute("SELECT page_path FROM page_manifest").fetchall()} == want
    # the index links the URL (the plain name) a server answers from the .gz file
    index = (storage.site_dir / "index.html").read_text()
    assert f"works/{VERSION}/{ids[0]}.html" in index and ".html.gz" not in index

    # nothing changed: no page rendered, every file the same bytes at the same modification time
    again = _pages_md(_run(resources, [work_pages], page_encoding="gzip"))
    assert again["pages_rendered"] == 0 and again["page_bytes_written"] == 0 and _files(storage) == files

    # back to plain: every page once, the .gz files gone; then gzip again through the setting
    plain = _pages_md(_run(resources, [work_pages], page_encoding="plain"))
    assert plain["pages_rendered"] == 3
    assert set(_files(storage)) == {f.removesuffix(".gz") for f in files}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("METACAN_PAGE_ENCODING", "gzip")
        assert _pages_md(_run(resources, [work_pages]))["pages_rendered"] == 3
    assert set(_files(storage)) == set(files)

    # a work that left the frame: its page and record file go, in the encoding they were stored in
    frame = storage.read_table("frame").to_pylist()
    storage.write_table("frame", pa.Table.from_pylist(frame[1:], schema=FRAME_SCHEMA))
    gone = _pages_md(_run(resources, [work_records, records_may_ship, work_pages], page_encoding="gzip"))
    assert gone["pages_withdrawn"] == 1
    assert not any(ids[0] in f for f in _files(storage)) and len(_files(storage)) == 4


def test_a_bad_page_encoding_fails_the_run_naming_it(world):
    resources, _ = world
    result = dg.materialize(
        [work_records, records_may_ship, work_pages],
        resources=resources,
        run_config=dg.RunConfig({"work_pages": PagesConfig(fetch_abstracts=False, page_encoding="zip")}),
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    text = str(failure.event_specific_data.error)
    assert "page_encoding='zip' must be one of plain, gzip; no page was rendered" in text
    assert not (resources["storage"].site_dir / "works").exists()
