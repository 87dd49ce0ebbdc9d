"""The catalog of tables: every warehouse (Parquet) and DuckDB table of the pipeline, in one place.

One module per stage (`openalex`, `frame`, `sampling`, `teachers`, `student`, `publish`, `site`, `coding`,
`audit`, `release`) declares its tables as `Table` entries (`table.py`): the name, one line saying what a row
is, the asset that writes it, the primary key and the Arrow schema. Every column comes from the field
dictionary (`fields.py`: its type and description, declared once), and DuckDB DDL is derived from the Arrow
schema (`Table.ddl`). `catalog.py` assembles the stages' tables; every DuckDB table is created by
`create_tables`, which `metacan_pipeline.storage.MetacanStorage.connect` calls once per database file and
process: no stage creates a table of its own. `checks.py` builds the schema check of every stored table.

This package imports pyarrow, DuckDB, Dagster and `metacan_pipeline.vocab` only, so every stage can import its
schemas from here.
"""

from __future__ import annotations

from .catalog import catalog, create_tables, duckdb_table_names, layout_is_current
from .table import SQL_TYPES, Store, Table, transaction

__all__ = [
    "SQL_TYPES",
    "Store",
    "Table",
    "catalog",
    "create_tables",
    "duckdb_table_names",
    "layout_is_current",
    "transaction",
]
