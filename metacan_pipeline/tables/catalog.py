"""The catalog assembled: every stage's tables by name, and the creation of the DuckDB catalog's tables."""

from __future__ import annotations

import duckdb

from . import audit, coding, frame, medline, openalex, publish, release, sampling, site, student, teachers
from .migrations import migrate
from .table import Table

#: The stage modules of the catalog, in stage order (each declares its tables in ``TABLES``).
STAGE_MODULES = (openalex, frame, sampling, teachers, student, publish, site, coding, audit, medline, release)


def _assemble() -> dict[str, Table]:
    out: dict[str, Table] = {}
    for module in STAGE_MODULES:
        for table in module.TABLES:
            if table.name in out:
                raise ValueError(f"table {table.name!r} is declared twice in the catalog")
            out[table.name] = table
    return out


_CATALOG = _assemble()


def catalog() -> dict[str, Table]:
    """Every table of the pipeline by name (warehouse, DuckDB, part files, release databases, SQLite stores)."""
    return _CATALOG


def duckdb_table_names() -> list[str]:
    """The names of the catalog's DuckDB tables."""
    return [t.name for t in _CATALOG.values() if t.store == "duckdb"]


def layout_is_current(con: duckdb.DuckDBPyConnection) -> bool:
    """True when every DuckDB table of the catalog exists with all its columns and no table declared without
    a key index has one (one query): else :func:`create_tables` has a table to create or a store of an
    earlier layout to migrate."""
    tables = [t for t in _CATALOG.values() if t.store == "duckdb" and t.schema is not None]
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
    migrate(con, _CATALOG, legacy_prompt_shas)
    for table in _CATALOG.values():
        if table.store == "duckdb":
            con.execute(table.ddl())
