"""Tests of metacan_pipeline.publish.manifest: which pages are rendered again, the manifest upsert and withdrawals."""

import datetime as dt

import pytest

from metacan_pipeline.publish.manifest import (
    ManifestRow,
    newest_render,
    note_rendered,
    page_path_ok,
    pages_to_render,
    read_manifest,
    withdraw,
    works_gone,
)
from metacan_pipeline.publish.pages import write_atomic
from metacan_pipeline.storage import MetacanStorage


def test_pages_to_render_names_each_reason_a_page_is_rendered_again(tmp_path):
    site = tmp_path / "site"
    for wid in ("W1", "W2", "W3", "W4"):
        write_atomic(site / "works" / "v1" / f"{wid}.html", "page")
        write_atomic(site / "records" / f"{wid}.json", "{}")
    hashes = {"W1": "h1", "W2": "h2-new", "W3": "h3", "W4": "h4", "W5": "h5"}
    manifest = {
        "W1": ManifestRow("h1", "r", "works/v1/W1.html", "ok"),  # unchanged
        "W2": ManifestRow("h2", "r", "works/v1/W2.html", "ok"),  # record changed
        "W3": ManifestRow("h3", "old", "works/v1/W3.html", "ok"),  # renderer changed
        "W4": ManifestRow("h4", "r", "works/v1/W4.html", "failed"),  # abstract fetch failed last time
        "W9": ManifestRow("h9", "r", "works/v1/W9.html", "ok"),  # left the frame
    }
    assert pages_to_render(hashes, manifest, "r", site) == {"W2", "W3", "W5"}
    assert pages_to_render(hashes, manifest, "r", site, retry_abstracts=True) == {"W2", "W3", "W4", "W5"}
    assert pages_to_render(hashes, manifest, "r", site, rerender_all=True) == set(hashes)
    (site / "records" / "W1.json").unlink()  # a record file gone: rendered again
    assert "W1" in pages_to_render(hashes, manifest, "r", site)
    traversal = {**manifest, "W1": ManifestRow("h1", "r", "../../etc/passwd", "ok")}
    assert not page_path_ok("W1", "../../etc/passwd") and "W1" in pages_to_render(hashes, traversal, "r", site)
    assert works_gone(hashes, manifest) == {"W9": "works/v1/W9.html"}
    with pytest.raises(ValueError, match="refusing to publish work id"):
        pages_to_render({"W1/../x": "h"}, {}, "r", site)


def test_manifest_upsert_and_withdrawal_on_a_real_catalog(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    at = dt.datetime(2026, 1, 2, 3, 4, 5)
    row = {"record_hash": "h", "renderer": "r", "abstract_status": "ok", "rendered_at": at, "run_id": "run"}
    rows = [{"id": wid, "page_path": f"works/v1/{wid}.html", **row} for wid in ("W1", "W2")]
    assert note_rendered(storage, rows) == 2 and note_rendered(storage, rows[:1]) == 1  # the upsert replaces W1
    assert read_manifest(storage) == {w: ManifestRow("h", "r", f"works/v1/{w}.html", "ok") for w in ("W1", "W2")}
    assert newest_render(storage) == at
    for path in ("works/v1/W2.html", "works/v0/W2.html", "records/W2.json"):
        write_atomic(storage.site_dir / path, "x")
    assert withdraw(storage, {"W2": "works/v1/W2.html"}) == 1 and withdraw(storage, {}) == 0
    assert set(read_manifest(storage)) == {"W1"}
    assert not (storage.site_dir / "works/v1/W2.html").exists() and not (storage.site_dir / "records/W2.json").exists()
    assert (storage.site_dir / "works/v0/W2.html").exists()  # an earlier version's permalink stays
