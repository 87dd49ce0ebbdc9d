"""The shape of a catalog entry (:class:`Table`), the DuckDB types of the catalog's Arrow types, and the one
transaction helper every writer of the DuckDB catalog uses. Every stage's table module imports this one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import duckdb
import pyarrow as pa

Store = Literal["warehouse", "duckdb", "part", "batch", "release", "sqlite"]

#: DuckDB column types of the Arrow types the catalog uses (a DuckDB table's DDL is derived from its schema).
SQL_TYPES: dict[pa.DataType, str] = {
    pa.string(): "VARCHAR",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.timestamp("us"): "TIMESTAMP",
    pa.timestamp("s"): "TIMESTAMP",
    pa.list_(pa.string()): "VARCHAR[]",
    pa.list_(pa.int32()): "INTEGER[]",
}


@dataclass(frozen=True)
class Table:
    """One table of the catalog.

    ``store``: ``warehouse`` (Parquet under ``data/warehouse/<name>/``, a DuckDB view over it),
    ``duckdb`` (a table in ``metacan.duckdb``, created by :func:`.catalog.create_tables`) or ``part`` (a file in
    each frame part, ``data/warehouse/frame_parts/<partition>/<file>/<name>.parquet``) or ``batch``
    (record batches handed from one function to the next, never stored) or ``release`` (a table of each
    release database ``data/site/releases/<release_id>.duckdb``, created by the asset ``site_database``) or
    ``sqlite`` (the served site's ``data/site/queries.sqlite`` or the coding store ``data/audit/coding.sqlite``; the
    DDL's type names are valid SQLite affinities).
    ``schema``: the Arrow schema; ``None`` for a table whose columns depend on configuration
    (``student_scores``: one column per head). ``json_columns``: DuckDB ``JSON`` columns (Arrow strings); in a
    SQLite table they are ``TEXT`` (a ``JSON`` type name would give them NUMERIC affinity, which turns a JSON
    number into a number). ``zstd_columns``: columns the DDL asks DuckDB to store ZSTD-compressed (``USING
    COMPRESSION zstd``: long text read one row at a time, e.g. a work's record JSON, which DuckDB's own choice stored
    dictionary + FSST-compressed at about ten times ZSTD's size; a file in a storage format before v1.2.0 ignores it).
    ``key_index``: the primary key is declared in the DDL (an index DuckDB keeps);
    ``False`` for a table with a row per frame work written by many short transactions, whose writer keeps
    the key itself: each transaction's checkpoint would write the changed parts of an index of millions of
    keys (:func:`metacan_pipeline.teachers.core.store.append_rows`).
    """

    name: str
    row: str
    written_by: str
    schema: pa.Schema | None
    primary_key: tuple[str, ...] = ()
    store: Store = "warehouse"
    json_columns: frozenset[str] = field(default_factory=frozenset)
    zstd_columns: frozenset[str] = field(default_factory=frozenset)
    key_index: bool = True

    def ddl(self) -> str:
        """``CREATE TABLE IF NOT EXISTS`` for a DuckDB table (catalog or release database), from its Arrow schema."""
        if self.store not in ("duckdb", "release", "sqlite") or self.schema is None:
            raise ValueError(f"table {self.name!r} is not a DuckDB table of the catalog")
        json_type = "TEXT" if self.store == "sqlite" else "JSON"
        cols = [
            f"{f.name} {json_type if f.name in self.json_columns else SQL_TYPES[f.type]}"
            + (" USING COMPRESSION zstd" if f.name in self.zstd_columns else "")
            for f in self.schema
        ]
        key = self.primary_key if self.key_index else ()
        if len(key) == 1:
            cols = [c + " PRIMARY KEY" if c.split(" ")[0] == key[0] else c for c in cols]
        elif key:
            cols.append(f"PRIMARY KEY ({', '.join(key)})")
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({', '.join(cols)})"


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """The block's statements in one DuckDB transaction: committed at its end, rolled back by any exception (a
    process killed inside it leaves none of them)."""
    con.execute("BEGIN")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
