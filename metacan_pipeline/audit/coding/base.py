"""The coding store's file and transactions: one SQLite connection in WAL mode with a busy timeout, guarded by a lock,
and every write one short ``BEGIN IMMEDIATE`` transaction that checks and appends together, so the served site
(threads) and the ``metacan`` CLI (another process) can use the file at once."""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self
from urllib.parse import quote

from ...tables.coding import ADDED_COLUMNS, TABLES, coding_store_ddl
from .errors import CodingStoreError, store_error
from .rules import CLAIM_TTL


def add_missing_columns(con: sqlite3.Connection) -> None:
    """Add each column of :data:`metacan_pipeline.tables.coding.ADDED_COLUMNS` a store written before it lacks, last,
    in place (every row kept; null in the rows written before it). Inside the caller's transaction."""
    for table, column, sql_type in ADDED_COLUMNS:
        present = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
        if present and column not in present:
            con.execute(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}")


class StoreBase:
    """The connection, its lock and the transactions every part of
    :class:`metacan_pipeline.audit.coding.store.CodingStore` uses (the contract is on that class)."""

    def __init__(self, path: Path | str, *, claim_ttl: dt.timedelta = CLAIM_TTL, read_only: bool = False) -> None:
        self.path = Path(path)
        self.claim_ttl = claim_ttl
        self.read_only = read_only
        self._lock = threading.RLock()
        try:
            self._con = self._open_read_only() if read_only else self._open()
        except sqlite3.Error as exc:
            raise store_error(self.path, exc, read_only=read_only) from None
        except OSError as exc:  # the folder cannot be created
            raise CodingStoreError(
                self.path, f"cannot create the folder of coding store {self.path} ({exc.strerror}): check --data-dir"
            ) from None

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10.0)
        con.row_factory = sqlite3.Row
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA busy_timeout=10000")
            con.execute("BEGIN IMMEDIATE")
            for statement in coding_store_ddl():
                con.execute(statement)
            add_missing_columns(con)
            con.execute("COMMIT")
        except BaseException:
            con.close()
            raise
        return con

    def _open_read_only(self) -> sqlite3.Connection:
        """The file opened read-only (``mode=ro``); in a folder this user cannot write and without a ``-wal`` file (the
        store was closed cleanly, so no writer is at work), as an immutable file, since WAL mode needs a ``-shm``."""
        if not self.path.is_file():
            raise CodingStoreError(
                self.path,
                f"no coding store at {self.path}: check --data-dir ($METACAN_DATA_DIR); `metacan coders add NAME` "
                "creates it",
            )
        uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
        try:
            con = self._connect_checked(uri)
        except sqlite3.OperationalError as exc:
            if "unable to open" not in str(exc) or Path(f"{self.path}-wal").exists():
                raise
            con = self._connect_checked(uri + "&immutable=1")
        return con

    def _connect_checked(self, uri: str) -> sqlite3.Connection:
        con = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None, timeout=10.0)
        con.row_factory = sqlite3.Row
        try:
            con.execute("PRAGMA busy_timeout=10000")
            present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except BaseException:
            con.close()
            raise
        missing = [t.name for t in TABLES if t.name not in present]
        if missing:
            con.close()
            raise CodingStoreError(
                self.path,
                f"coding store {self.path} lacks the tables {missing}: it is not a metacan coding store (or one of an "
                "older version, which `metacan coders add` or an import brings up to date)",
            )
        return con

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._con.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction (``BEGIN IMMEDIATE``: the write lock first, so checks and appends are atomic
        across processes). A SQLite failure of the file (read-only, busy, corrupt) is a :class:`CodingStoreError`."""
        if self.read_only:
            raise CodingStoreError(self.path, f"coding store {self.path} was opened read-only: nothing can be written")
        with self._lock:
            try:
                self._con.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise store_error(self.path, exc) from None
            try:
                yield self._con
            except sqlite3.IntegrityError:
                self._con.execute("ROLLBACK")
                raise
            except sqlite3.Error as exc:
                if self._con.in_transaction:
                    self._con.execute("ROLLBACK")
                raise store_error(self.path, exc) from None
            except BaseException:
                self._con.execute("ROLLBACK")
                raise
            try:
                self._con.execute("COMMIT")
            except sqlite3.Error as exc:
                raise store_error(self.path, exc) from None

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction (a consistent snapshot over several queries). A SQLite failure of the file (corrupt
        pages, busy) is a :class:`CodingStoreError`."""
        with self._lock:
            try:
                self._con.execute("BEGIN")
                try:
                    yield self._con
                finally:
                    self._con.execute("COMMIT")
            except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
                if isinstance(exc, sqlite3.IntegrityError | sqlite3.ProgrammingError):
                    raise
                raise store_error(self.path, exc) from None
