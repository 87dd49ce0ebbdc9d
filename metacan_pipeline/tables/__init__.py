"""The catalog of tables: every warehouse (Parquet) and DuckDB table of the pipeline, in one place.

One module per stage (:mod:`.openalex`, :mod:`.frame`, :mod:`.sampling`, :mod:`.teachers`,
:mod:`.student`, :mod:`.publish`, :mod:`.site`, :mod:`.coding`, :mod:`.audit`, :mod:`.release`) declares its tables as :class:`Table` entries: the name, one line
saying what a row is, the asset that writes it, the primary key and the Arrow schema. DuckDB DDL is
derived from the Arrow schema (:meth:`Table.ddl`), so a column is declared once. Every DuckDB table is
created by :func:`create_tables`, which :meth:`metacan_pipeline.storage.MetacanStorage.connect` calls
once per database file and process: no stage creates a table of its own.

This package is a leaf: it imports pyarrow and :mod:`metacan_pipeline.vocab` only, so every stage can
import its schemas from here.
"""

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
    ``duckdb`` (a table in ``metacan.duckdb``, created by :func:`create_tables`) or ``part`` (a file in
    each frame part, ``data/warehouse/frame_parts/<partition>/<file>/<name>.parquet``) or ``batch``
    (record batches handed from one function to the next, never stored) or ``release`` (a table of each
    release database ``data/site/releases/<release_id>.duckdb``, created by the asset ``site_database``) or
    ``sqlite`` (the served site's ``data/site/queries.sqlite`` or the coding store ``data/audit/coding.sqlite``; the
    DDL's type names are valid SQLite affinities).
    ``schema``: the Arrow schema; ``None`` for a table whose columns depend on configuration
    (``student_scores``: one column per head). ``json_columns``: DuckDB ``JSON`` columns (Arrow strings); in a
    SQLite table they are ``TEXT`` (a ``JSON`` type name would give them NUMERIC affinity, which turns a JSON
    number into a number). ``key_index``: the primary key is declared in the DDL (an index DuckDB keeps);
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
    key_index: bool = True

    def ddl(self) -> str:
        """``CREATE TABLE IF NOT EXISTS`` for a DuckDB table (catalog or release database), from its Arrow schema."""
        if self.store not in ("duckdb", "release", "sqlite") or self.schema is None:
            raise ValueError(f"table {self.name!r} is not a DuckDB table of the catalog")
        json_type = "TEXT" if self.store == "sqlite" else "JSON"
        cols = [f"{f.name} {json_type if f.name in self.json_columns else SQL_TYPES[f.type]}" for f in self.schema]
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


def _catalog() -> dict[str, Table]:
    from . import audit, coding, frame, openalex, publish, release, sampling, site, student, teachers

    out: dict[str, Table] = {}
    for module in (openalex, frame, sampling, teachers, student, publish, site, coding, audit, release):
        for table in module.TABLES:
            if table.name in out:
                raise ValueError(f"table {table.name!r} is declared twice in the catalog")
            out[table.name] = table
    return out


def catalog() -> dict[str, Table]:
    """Every table of the pipeline by name (warehouse, DuckDB and part files)."""
    global _CATALOG
    if _CATALOG is None:
        _CATALOG = _catalog()
    return _CATALOG


_CATALOG: dict[str, Table] | None = None


def duckdb_table_names() -> list[str]:
    """The names of the catalog's DuckDB tables."""
    return [t.name for t in catalog().values() if t.store == "duckdb"]


def layout_is_current(con: duckdb.DuckDBPyConnection) -> bool:
    """True when every DuckDB table of the catalog exists with all its columns and no table declared without
    a key index has one (one query): else :func:`create_tables` has a table to create or a store of an
    earlier layout to migrate."""
    tables = [t for t in catalog().values() if t.store == "duckdb" and t.schema is not None]
    have, keyed = con.execute(
        "SELECT (SELECT count(*) FROM duckdb_columns() WHERE schema_name = 'main' AND table_name IN (SELECT unnest(?)) "
        "AND list_contains(?, table_name || '.' || column_name)), "
        "(SELECT count(*) FROM duckdb_constraints() WHERE schema_name = 'main' AND constraint_type = 'PRIMARY KEY' "
        "AND table_name IN (SELECT unnest(?)))",
        [
            [t.name for t in tables],
            [f"{t.name}.{f.name}" for t in tables for f in t.schema],
            [t.name for t in tables if not t.key_index] or [""],
        ],
    ).fetchone()
    return have == sum(len(t.schema) for t in tables) and keyed == 0


def create_tables(con: duckdb.DuckDBPyConnection, legacy_prompt_shas: dict[str, str] | None = None) -> None:
    """Create every DuckDB table of the catalog that does not exist yet, after migrating a store of an
    earlier layout in place (:func:`.migrations.migrate`, which takes ``legacy_prompt_shas``). Idempotent."""
    from .migrations import migrate

    migrate(con, legacy_prompt_shas)
    for table in catalog().values():
        if table.store == "duckdb":
            con.execute(table.ddl())
