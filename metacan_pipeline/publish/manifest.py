"""Which work pages to render, and the record of what was rendered (SPEC section 9, incremental pages).

The DuckDB table ``page_manifest`` (catalog: :mod:`metacan_pipeline.tables.publish`) holds one row per
published page: the record hash and the renderer fingerprint it was rendered from, its path, the status
of its abstract, when and by which run. A page is rendered again only when one of those no longer
matches (:func:`pages_to_render`); works that left the frame are withdrawn (:func:`withdraw`); each
chunk of rendered pages is noted in one set-based upsert (:func:`note_rendered`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from .. import __version__, settings
from ..openalex.ids import is_work_id
from ..storage import MetacanStorage
from ..tables.publish import PAGE_MANIFEST_SCHEMA

_HERE = Path(__file__).resolve().parent


class ManifestRow(NamedTuple):
    """What ``page_manifest`` says of one page (the columns :func:`pages_to_render` compares)."""

    record_hash: str
    renderer: str
    page_path: str | None
    abstract_status: str | None


def renderer_fingerprint() -> str:
    """SHA-256 (16 hex) of what turns a record into a page: the templates, the static files, the package
    version, the configured report URL (:func:`metacan_pipeline.settings.report_url`) and the served site's address
    (:func:`metacan_pipeline.settings.site_url`). Stored with each page, so a changed template or setting re-renders
    every page without being asked."""
    digest = hashlib.sha256(__version__.encode())
    digest.update(f"\0report_url={settings.report_url() or ''}\0".encode())  # the pages' "report a problem" link
    if site := settings.site_url():  # the static pages' explore links (unset: the fingerprint of before)
        digest.update(f"site_url={site}\0".encode())
    for folder in (_HERE / "templates", _HERE / "static"):
        for path in sorted(folder.iterdir()):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def safe_id(work_id: str) -> str:
    """A work id that may become a file name; ValueError otherwise (ids must match ^W\\d+$)."""
    if not is_work_id(work_id):
        raise ValueError(f"refusing to publish work id {work_id!r}: ids must match ^W\\d+$")
    return work_id


def page_path_ok(wid: str, page: str | None) -> bool:
    """True when a stored page path is what :func:`.pages.page_path` makes: ``works/<version>/<id>.html``."""
    return bool(page) and re.fullmatch(rf"works/[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}/{wid}\.html", page) is not None


def is_published(site_dir: Path, wid: str, page: str | None) -> bool:
    """True when the work's record file and the page the manifest names both exist under ``site_dir``; a
    manifest path that :func:`page_path_ok` refuses counts as missing (the page is rendered again)."""
    return page_path_ok(wid, page) and (site_dir / page).exists() and (site_dir / "records" / f"{wid}.json").exists()


def record_hashes(storage: MetacanStorage) -> dict[str, str]:
    """``{work id: record_hash}`` of every row of ``work_records`` (streamed: two short columns)."""
    hashes: dict[str, str] = {}
    for b in storage.iter_batches("work_records", columns=["id", "record_hash"]):
        hashes.update(zip(b.column("id").to_pylist(), b.column("record_hash").to_pylist(), strict=False))
    return hashes


def read_manifest(storage: MetacanStorage) -> dict[str, ManifestRow]:
    """``{work id: ManifestRow}`` of every page ``page_manifest`` records."""
    with storage.connect() as con:
        rows = con.execute("SELECT id, record_hash, renderer, page_path, abstract_status FROM page_manifest").fetchall()
    return {r[0]: ManifestRow(*r[1:]) for r in rows}


def pages_to_render(
    hashes: dict[str, str],
    manifest: dict[str, ManifestRow],
    renderer: str,
    site_dir: Path,
    *,
    rerender_all: bool = False,
    retry_abstracts: bool = False,
) -> set[str]:
    """The ids of the works whose page must be rendered this run.

    A page is rendered when ``rerender_all``, when the manifest has no row for it, when its record hash or
    the renderer fingerprint differs from the ones it was rendered from, when its record file or page is
    missing (:func:`is_published`), or, with ``retry_abstracts``, when its abstract was not shown last time
    (status ``failed`` or ``off``). Raises ValueError naming an id that is not ``^W\\d+$`` (:func:`safe_id`).
    """
    todo = set()
    for wid, digest in hashes.items():
        last = manifest.get(safe_id(wid))
        if (
            rerender_all
            or last is None
            or last.record_hash != digest
            or last.renderer != renderer
            or not is_published(site_dir, wid, last.page_path)
            or (retry_abstracts and last.abstract_status in ("failed", "off"))
        ):
            todo.add(wid)
    return todo


def works_gone(hashes: dict[str, str], manifest: dict[str, ManifestRow]) -> dict[str, str | None]:
    """``{work id: page path}`` of the pages in the manifest whose work has no record any more (left the frame)."""
    return {wid: last.page_path for wid, last in manifest.items() if wid not in hashes}


def withdraw(storage: MetacanStorage, gone: dict[str, str | None]) -> int:
    """Remove the record file and current page of works that left the frame, and their manifest rows;
    returns how many works were withdrawn. Pages of earlier model versions stay where they are: their
    permalinks were published. Paths that :func:`page_path_ok` refuses are never deleted."""
    if not gone:
        return 0
    for wid, page in gone.items():
        if is_work_id(wid):
            (storage.site_dir / "records" / f"{wid}.json").unlink(missing_ok=True)
            if page_path_ok(wid, page):
                (storage.site_dir / page).unlink(missing_ok=True)
    with storage.connect() as con:
        con.register("gone", pa.table({"id": list(gone)}))
        con.execute("DELETE FROM page_manifest WHERE id IN (SELECT id FROM gone)")
    return len(gone)


def note_rendered(storage: MetacanStorage, rows: Iterable[dict]) -> int:
    """Upsert ``rows`` (dicts with the columns of ``PAGE_MANIFEST_SCHEMA``) into ``page_manifest`` in one
    set-based statement (executemany would cost a statement per page); returns the number of rows."""
    rendered = pa.Table.from_pylist(list(rows), schema=PAGE_MANIFEST_SCHEMA)
    columns = ", ".join(PAGE_MANIFEST_SCHEMA.names)
    with storage.connect() as con:
        con.register("rendered", rendered)
        con.execute(f"INSERT OR REPLACE INTO page_manifest ({columns}) SELECT {columns} FROM rendered")
    return rendered.num_rows


def newest_render(storage: MetacanStorage) -> dt.datetime | None:
    """When the newest page in ``page_manifest`` was rendered (UTC, naive), or None for an empty manifest."""
    with storage.connect(read_only=True) as con:
        return con.execute("SELECT max(rendered_at) FROM page_manifest").fetchone()[0]
