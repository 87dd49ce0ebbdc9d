"""Which work pages to render, and the record of what was rendered (SPEC section 9, incremental pages).

The DuckDB table ``page_manifest`` (catalog: :mod:`metacan_pipeline.tables.publish`) holds one row per
published page: the record hash and the renderer fingerprint it was rendered from, its path, the status
of its abstract, when and by which run. A page is rendered again only when one of those no longer
matches (:func:`pages_to_render`); works that left the frame are withdrawn (:func:`works_gone`,
:func:`withdraw`); each chunk of rendered pages is noted in one set-based upsert (:func:`note_rendered`).

Nothing here holds a row per work in Python: the manifest is copied to a Parquet file
(:func:`snapshot_manifest`), joined with ``work_records`` in a private DuckDB with bounded memory, and what
comes out (the plan, the withdrawn works) is streamed in Arrow batches.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__, settings
from ..openalex.ids import is_work_id
from ..storage import MetacanStorage, sql_literal
from ..tables.publish import PAGE_MANIFEST_SCHEMA, PAGE_PLAN_SCHEMA
from .page_files import GZ, remove_site_file, url_name

_HERE = Path(__file__).resolve().parent


class PagePlan(NamedTuple):
    """Which pages one ``work_pages`` run renders (:func:`pages_to_render`): ``path``, a Parquet file
    (``PAGE_PLAN_SCHEMA``) with one row ``(id, render)`` per row of ``work_records``, in the order
    :meth:`~metacan_pipeline.storage.MetacanStorage.iter_batches` reads them; ``works``, its rows; ``to_render``, the
    rows whose ``render`` is true."""

    path: Path
    works: int
    to_render: int


def renderer_fingerprint() -> str:
    """SHA-256 (16 hex) of what turns a record into a page: the templates, the static files, the package
    version, the configured report URL (:func:`metacan_pipeline.settings.report_url`), the served site's address
    (:func:`metacan_pipeline.settings.site_url`) and the Dagster UI's (:func:`metacan_pipeline.settings.dagster_ui_url`).
    Stored with each page, so a changed template or setting re-renders every page without being asked."""
    digest = hashlib.sha256(__version__.encode())
    digest.update(f"\0report_url={settings.report_url() or ''}\0".encode())  # the pages' "report a problem" link
    if site := settings.site_url():  # the static pages' explore links (unset: the fingerprint of before)
        digest.update(f"site_url={site}\0".encode())
    if ui := settings.dagster_ui_url():  # the lineage's run links (unset: the fingerprint of before)
        digest.update(f"dagster_ui_url={ui}\0".encode())
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
    """True when a stored page path is what :func:`.pages.page_path` makes, ``works/<version>/<id>.html``, or its
    precompressed file (``.html.gz``, :mod:`.page_files`)."""
    return (
        bool(page) and re.fullmatch(rf"works/[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}/{wid}\.html(?:\.gz)?", page) is not None
    )


def is_published(site_dir: Path, wid: str, page: str | None) -> bool:
    """True when the page the manifest names and the work's record file in the same encoding (``records/<id>.json``
    beside a ``.html`` page, ``records/<id>.json.gz`` beside a ``.html.gz`` one) both exist under ``site_dir``; a
    manifest path that :func:`page_path_ok` refuses counts as missing (the page is rendered again)."""
    if not page_path_ok(wid, page):
        return False
    record = f"records/{wid}.json" + (GZ if page.endswith(GZ) else "")
    return (site_dir / page).exists() and (site_dir / record).exists()


#: The plan's private DuckDB: bounded memory, spilling beside the warehouse (a frame of 4.3M works sorts
#: its narrow rows on disk, not in this process).
_DUCKDB_CONFIG = {"memory_limit": "512MB", "threads": 2}
_MANIFEST_COLUMNS = "id, record_hash, renderer, page_path, abstract_status"
#: Rows per Arrow batch streamed out of DuckDB (ids and short strings: a few MB).
_BATCH = 50_000


def _scratch_duckdb(storage: MetacanStorage) -> duckdb.DuckDBPyConnection:
    spill = storage.warehouse / ".spill-pages"
    return duckdb.connect(config={**_DUCKDB_CONFIG, "temp_directory": str(spill)})


def snapshot_manifest(storage: MetacanStorage, dest: Path) -> Path:
    """Copy the columns :func:`pages_to_render` compares (id, record hash, renderer, page path, abstract status)
    of every ``page_manifest`` row to the Parquet file ``dest``, in DuckDB: the catalog's lock is held for the
    copy only, and no row becomes a Python object. Returns ``dest``."""
    with storage.connect() as con:
        con.execute(
            f"COPY (SELECT {_MANIFEST_COLUMNS} FROM page_manifest) TO {sql_literal(str(dest))} (FORMAT parquet)"
        )
    return dest


def _records_glob(storage: MetacanStorage) -> str:
    storage.require("work_records")
    return sql_literal(str(storage.table_dir("work_records") / "*.parquet"))


def pages_to_render(
    storage: MetacanStorage,
    manifest: Path,
    renderer: str,
    out: Path,
    *,
    rerender_all: bool = False,
    retry_abstracts: bool = False,
    encoding: str = "plain",
) -> PagePlan:
    """Decide which works' pages are rendered this run and write the plan to ``out`` (:class:`PagePlan`).

    ``manifest``: the Parquet snapshot of ``page_manifest`` (:func:`snapshot_manifest`). A page is rendered
    when ``rerender_all``, when the manifest has no row for it, when its record hash or the renderer
    fingerprint differs from the ones it was rendered from, when its record file or page under
    ``storage.site_dir`` is missing (:func:`is_published`), when it is stored in another encoding than ``encoding``
    (``plain`` or ``gzip``, :mod:`.page_files`: switching renders every page once), or, with ``retry_abstracts``,
    when its abstract was not shown last time (status ``failed`` or ``off``). DuckDB joins ``work_records`` with the manifest
    (bounded memory, spilling to disk) and puts the rows back in the table's file order; the file checks
    run in Python over the streamed Arrow batches, and the plan is written batch by batch, so memory does
    not grow with the frame. Raises ValueError naming an id that is not ``^W\\d+$`` (:func:`safe_id`).
    """
    site_dir = storage.site_dir
    sql = f"""
        SELECT r.id, m.page_path,
               coalesce($rerender_all OR m.id IS NULL OR m.record_hash IS DISTINCT FROM r.record_hash
                        OR m.renderer IS DISTINCT FROM $renderer
                        OR ($retry AND m.abstract_status IN ('failed', 'off'))
                        OR ends_with(m.page_path, '{GZ}') IS DISTINCT FROM $gzip, false) AS stale
        FROM read_parquet({_records_glob(storage)}, filename = true, file_row_number = true,
                          hive_partitioning = false) r
        LEFT JOIN read_parquet({sql_literal(str(manifest))}) m ON m.id = r.id
        ORDER BY r.filename, r.file_row_number
    """
    works = to_render = 0
    con = _scratch_duckdb(storage)
    try:
        params = {
            "rerender_all": rerender_all,
            "renderer": renderer,
            "retry": retry_abstracts,
            "gzip": encoding == "gzip",
        }
        reader = con.execute(sql, params).to_arrow_reader(_BATCH)
        with pq.ParquetWriter(out, PAGE_PLAN_SCHEMA) as writer:
            for batch in reader:
                ids = batch.column("id").to_pylist()
                render = []
                for wid, page, stale in zip(
                    ids, batch.column("page_path").to_pylist(), batch.column("stale").to_pylist(), strict=True
                ):
                    safe_id(wid)
                    render.append(stale or not is_published(site_dir, wid, page))
                writer.write_table(pa.table({"id": ids, "render": render}, schema=PAGE_PLAN_SCHEMA))
                works += len(ids)
                to_render += sum(render)
    finally:
        con.close()
    return PagePlan(out, works, to_render)


def works_gone(storage: MetacanStorage, manifest: Path) -> Iterator[tuple[str, str | None]]:
    """``(work id, page path)`` of each page in the manifest snapshot ``manifest`` whose work has no record any
    more (left the frame): an anti-join in DuckDB, streamed in Arrow batches."""
    sql = (
        f"SELECT m.id, m.page_path FROM read_parquet({sql_literal(str(manifest))}) m "
        f"ANTI JOIN read_parquet({_records_glob(storage)}, hive_partitioning = false) r ON r.id = m.id"
    )
    con = _scratch_duckdb(storage)
    try:
        for batch in con.execute(sql).to_arrow_reader(_BATCH):
            yield from zip(batch.column("id").to_pylist(), batch.column("page_path").to_pylist(), strict=True)
    finally:
        con.close()


def withdraw(storage: MetacanStorage, gone: Iterable[tuple[str, str | None]], chunk: int = 10_000) -> int:
    """Remove the record file and current page of works that left the frame (plain or ``.gz``), and their manifest rows;
    ``gone``: ``(work id, page path)`` pairs (:func:`works_gone`), handled ``chunk`` at a time (the files, then
    one DELETE). Returns how many works were withdrawn. Pages of earlier model versions stay where they are:
    their permalinks were published. Paths that :func:`page_path_ok` refuses are never deleted."""
    n = 0
    pairs = iter(gone)
    while batch := list(itertools.islice(pairs, chunk)):
        for wid, page in batch:
            if is_work_id(wid):
                remove_site_file(storage.site_dir, f"records/{wid}.json")
                if page_path_ok(wid, page):
                    remove_site_file(storage.site_dir, url_name(page))
        with storage.connect() as con:
            con.register("gone", pa.table({"id": [wid for wid, _ in batch]}))
            con.execute("DELETE FROM page_manifest WHERE id IN (SELECT id FROM gone)")
        n += len(batch)
    return n


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
