"""Where things live on disk: Parquet tables, the DuckDB catalog, published outputs.

Layout under ``data_dir`` (default ``data/``, or ``$METACAN_DATA_DIR``), ARCHITECTURE "Storage":

- ``warehouse/<table>/part-*.parquet``: large tables, each written into a temporary folder and renamed
  into place, so a crash never leaves half a table.
- ``metacan.duckdb``: the query engine; holds the small append-only tables (teacher calls and labels)
  and one view per Parquet table, so ``SELECT * FROM frame`` works in any DuckDB client.
- ``site/``: published work records (JSON) and pages (HTML).
- ``logs/``: logs of the embedded teacher server.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import shutil
import socket
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock
from pydantic import Field

from . import settings
from .tables import create_tables, layout_is_current

DEFAULT_DATA_DIR = settings.DEFAULT_DATA_DIR


def sql_literal(value: str) -> str:
    """A SQL string literal for DuckDB (quotes doubled), for paths in statements that take no parameters."""
    return "'" + value.replace("'", "''") + "'"


def process_tag() -> str:
    """``<host>-pid<pid>``: names a scratch folder after the process that writes it, so that a later build can tell
    one left by a killed process from a live one's (:func:`scratch_path`). The host keeps letters, digits, ``.``
    and ``_`` (the kernel takes any bytes as a host name; the tag is part of a file name and of a glob pattern)."""
    return f"{re.sub(r'[^A-Za-z0-9_.]', '_', socket.gethostname())}-pid{os.getpid()}"


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_dead(parent: Path, prefix: str) -> int:
    """Remove the entries ``<parent>/<prefix><host>-pid<pid>-*`` of this host whose process is gone (a build killed
    with SIGKILL or by the OOM killer never cleans up: a ``work_records`` build at 4.3M works is 1.4 GB); returns
    how many. Another host's (a shared file system) and a live process's are left alone."""
    host = process_tag().rsplit("-pid", 1)[0]
    gone = 0
    for path in parent.glob(f"{glob.escape(prefix + host)}-pid*-*"):
        pid = path.name[len(prefix) + len(host) + 4 :].split("-", 1)[0]
        # ASCII digits that fit a pid_t: int('²') raises, os.kill of a larger number too; such a name is not ours
        if pid.isascii() and pid.isdigit() and int(pid) < 2**31 and not process_alive(int(pid)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            gone += 1
    return gone


def scratch_path(parent: Path, prefix: str) -> Path:
    """A new name ``<parent>/<prefix><host>-pid<pid>-<8 hex>`` for this process's scratch folder or file, after
    removing those of this host's dead processes (:func:`sweep_dead`). Not created."""
    sweep_dead(parent, prefix)
    return parent / f"{prefix}{process_tag()}-{uuid.uuid4().hex[:8]}"


def id_ranges(con: duckdb.DuckDBPyConnection, relation: str, range_works: int) -> list[str]:
    """The ``id`` values of ``relation`` in ascending ranges of ``range_works`` ids, as SQL conditions on ``{key}``
    (replace it with the column), then the NULL ids (last, where ``ORDER BY id`` puts them). Only the ids are sorted:
    a stage that joins large tables does it one range at a time (``work_records``, ``work_lineage``)."""
    if range_works < 1:
        raise ValueError(f"range_works must be at least 1, got {range_works}")
    lows = [
        r[0]
        for r in con.execute(
            f"SELECT id FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS n FROM {relation} WHERE id IS NOT NULL) "
            "WHERE n % ? = 0 ORDER BY id",
            [range_works],
        ).fetchall()
    ]
    return [
        f"{{key}} >= {sql_literal(lo)}" + (f" AND {{key}} < {sql_literal(hi)}" if hi is not None else "")
        for lo, hi in zip(lows, [*lows[1:], None], strict=True)
    ] + ["{key} IS NULL"]


def default_data_dir() -> str:
    """The data folder: ``$METACAN_DATA_DIR`` when set, else ``data`` (:func:`metacan_pipeline.settings.data_dir`)."""
    return settings.data_dir()


def _create_tables_once(con: duckdb.DuckDBPyConnection) -> None:
    """Create the catalog's DuckDB tables, migrating a store of an earlier layout, unless they all exist with
    all their columns (one cheap query on later connections)."""
    if not layout_is_current(con):
        create_tables(con)


#: The source of a table view as :meth:`MetacanStorage.refresh_view` writes it: ``<warehouse>/<name>/*.parquet``.
_VIEW_SOURCE = re.compile(r"read_parquet\('(?P<warehouse>.+)/(?P<name>[^/']+)/\*\.parquet'")


class MetacanStorage(dg.ConfigurableResource):
    """Parquet tables and the DuckDB catalog under one data folder (ARCHITECTURE "Storage").

    DuckDB allows one writing process per file: every write goes through :meth:`connect`, which
    holds a file lock for the (short) transaction, and no HTTP or LLM work happens inside it.
    """

    data_dir: str = Field(
        default=DEFAULT_DATA_DIR, description="Folder for the warehouse, the DuckDB file and the published site."
    )

    # ---- paths -------------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        return Path(self.data_dir).resolve()

    @property
    def warehouse(self) -> Path:
        return self.root / "warehouse"

    @property
    def duckdb_path(self) -> Path:
        return self.root / "metacan.duckdb"

    @property
    def site_dir(self) -> Path:
        return self.root / "site"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def table_dir(self, name: str) -> Path:
        return self.warehouse / name

    def has_table(self, name: str) -> bool:
        return any(self.table_dir(name).glob("*.parquet"))

    # ---- Parquet -----------------------------------------------------------------------------
    def write_table(
        self,
        name: str,
        batches: pa.Table | Iterable[pa.Table | pa.RecordBatch],
        schema: pa.Schema | None = None,
    ) -> int:
        """Write a table atomically as ``warehouse/<name>/part-*.parquet``; returns its row count.

        ``batches`` is a whole :class:`pyarrow.Table` or an iterable of tables/record batches (one
        file per element, so memory stays at one batch). An empty input writes one empty file with
        ``schema`` so readers still see the columns. The previous version is replaced only after the
        new one is complete (rename of a sibling temporary folder).
        """
        target = self.table_dir(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = scratch_path(target.parent, f".{name}.tmp-")
        tmp.mkdir()
        rows = 0
        parts = 0
        items = [batches] if isinstance(batches, pa.Table) else batches
        try:
            for item in items:
                table = item if isinstance(item, pa.Table) else pa.Table.from_batches([item])
                if schema is not None:
                    table = table.cast(schema)
                if table.num_rows == 0 and parts > 0:
                    continue
                pq.write_table(table, tmp / f"part-{parts:05d}.parquet", compression="zstd")
                rows += table.num_rows
                parts += 1
            if parts == 0:
                if schema is None:
                    raise ValueError(f"table {name!r}: no rows and no schema given")
                pq.write_table(schema.empty_table(), tmp / "part-00000.parquet")
            old = target.parent / f".{name}.old-{uuid.uuid4().hex[:8]}"
            if target.exists():
                target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.refresh_view(name)
        return rows

    def adopt_table(self, name: str, folder: Path) -> None:
        """Make ``folder`` (Parquet files on the same file system) the table ``name``, atomically."""
        target = self.table_dir(name)
        old = target.parent / f".{name}.old-{uuid.uuid4().hex[:8]}"
        if target.exists():
            target.rename(old)
        folder.rename(target)
        shutil.rmtree(old, ignore_errors=True)
        self.refresh_view(name)

    def read_table(self, name: str, columns: list[str] | None = None, filters: list | None = None) -> pa.Table:
        """Read a warehouse table (the rows that pass pyarrow's ``filters``, else all of it). Raises
        FileNotFoundError naming the asset to materialize."""
        self.require(name)
        return pq.read_table(self.table_dir(name), columns=columns, filters=filters)

    def iter_batches(
        self, name: str, batch_size: int = 50_000, columns: list[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Stream a warehouse table in record batches (flat memory for frame-sized tables)."""
        self.require(name)
        for path in sorted(self.table_dir(name).glob("*.parquet")):
            yield from pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=columns)

    def require(self, name: str) -> None:
        if not self.has_table(name):
            raise FileNotFoundError(
                f"table {name!r} not found under {self.warehouse}: materialize the asset {name!r} first "
                f"(Dagster UI, or `metacan run`)"
            )

    # ---- DuckDB ------------------------------------------------------------------------------
    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A DuckDB connection to ``metacan.duckdb`` under a cross-process file lock (a read-only connection to a
        folder where the lock file cannot be created, such as a read-only mount, goes on without it).

        Keep the ``with`` block short: it serialises every writer of the catalog. The first writing
        connection of this process to a database file creates every DuckDB table of the catalog
        (:func:`metacan_pipeline.tables.create_tables`).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        read_only = read_only and self.duckdb_path.exists()
        lock = FileLock(str(self.duckdb_path) + ".lock")
        try:
            lock.acquire()
            locked = True
        except OSError as exc:
            # a folder this user may only read (a read-only mount, a shared copy): readers go on without the lock
            if not (read_only and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)):
                raise
            locked = False
        try:
            con = duckdb.connect(str(self.duckdb_path), read_only=read_only)
            try:
                if not read_only:
                    _create_tables_once(con)
                self._repoint_views(con, read_only)
                yield con
            finally:
                con.close()
        finally:
            if locked:
                lock.release()

    def _repoint_views(self, con: duckdb.DuckDBPyConnection, read_only: bool) -> None:
        """Point every table view that reads another folder's warehouse (this data folder was copied or moved: a view
        holds an absolute path) at this folder's: replaced in the catalog when writing, shadowed by a temporary view
        of the same name in a read-only connection. Without it, a copy of ``data/`` would read the original's tables."""
        here = str(self.warehouse)
        rows = con.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary AND schema_name = 'main' "
            "AND contains(sql, 'read_parquet(')"
        ).fetchall()
        for name, sql in rows:
            m = _VIEW_SOURCE.search(sql)
            if m is None or m.group("name") != name or m.group("warehouse") == here:
                continue
            pattern = sql_literal(str(self.table_dir(name) / "*.parquet"))
            kind = "TEMP VIEW" if read_only else "VIEW"
            con.execute(
                f'CREATE OR REPLACE {kind} "{name}" AS SELECT * FROM read_parquet({pattern}, hive_partitioning=false)'
            )

    def refresh_view(self, name: str) -> None:
        """(Re)create the DuckDB view ``<name>`` over ``warehouse/<name>/*.parquet``."""
        pattern = sql_literal(str(self.table_dir(name) / "*.parquet"))
        with self.connect() as con:
            con.execute(
                f'CREATE OR REPLACE VIEW "{name}" AS SELECT * FROM read_parquet({pattern}, hive_partitioning=false)'
            )
