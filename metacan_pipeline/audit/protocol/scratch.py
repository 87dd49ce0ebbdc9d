"""The audit's private DuckDB: an in-memory connection with views over warehouse tables, for the audit sample's draw,
the coding tasks and the validation report. Imports no stage above storage, so the coding commands load without the
teacher registry."""

from __future__ import annotations

from collections.abc import Iterable

import duckdb

from ...storage import MetacanStorage, sql_literal

#: The memory of the audit's private DuckDB (:func:`scratch`); past it, DuckDB spills under ``warehouse/.spill-audit``.
SCRATCH_MEMORY_LIMIT = "1GB"


def scratch(storage: MetacanStorage, names: Iterable[str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection (2 threads, :data:`SCRATCH_MEMORY_LIMIT`, spilling under
    ``warehouse/.spill-audit``) with a view over each warehouse table of ``names`` that exists (no lock taken)."""
    spill = storage.warehouse / ".spill-audit"
    con = duckdb.connect(config={"threads": 2, "memory_limit": SCRATCH_MEMORY_LIMIT, "temp_directory": str(spill)})
    for name in names:
        if storage.has_table(name):
            pattern = sql_literal(str(storage.table_dir(name) / "*.parquet"))
            con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM read_parquet({pattern})')
    return con
