"""Tests of metacan_pipeline.tables: the catalog of tables."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pyarrow as pa

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables import SQL_TYPES, catalog, create_tables, duckdb_table_names

PACKAGE = Path(__file__).resolve().parents[1] / "metacan_pipeline"


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [table],
    ).fetchall()


def test_create_tables_makes_every_duckdb_table_with_the_catalog_columns_and_is_idempotent():
    con = duckdb.connect()
    create_tables(con)
    create_tables(con)
    for name in duckdb_table_names():
        table = catalog()[name]
        want = [(f.name, "JSON" if f.name in table.json_columns else SQL_TYPES[f.type]) for f in table.schema]
        assert _columns(con, name) == want, name
    assert con.execute("SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY'").fetchone()[
        0
    ] == sum(1 for n in duckdb_table_names() if catalog()[n].primary_key and catalog()[n].key_index)


def test_storage_creates_the_tables_when_it_opens_and_keeps_their_rows(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    with storage.connect() as con:
        assert sorted(r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()) == sorted(
            duckdb_table_names()
        )
        con.execute("INSERT INTO label_batches VALUES ('b', 'W1', now(), 'test')")
    with storage.connect() as con:  # a second connection neither drops nor re-creates anything
        assert con.execute("SELECT count(*) FROM label_batches").fetchone()[0] == 1
    with storage.connect(read_only=True) as con:
        assert con.execute("SELECT work_id FROM label_batches").fetchall() == [("W1",)]


def test_every_entry_says_what_a_row_is_and_who_writes_it():
    for name, table in catalog().items():
        assert table.row and table.written_by, name
        assert table.schema is None or isinstance(table.schema, pa.Schema), name
        assert set(table.primary_key) <= set(table.schema.names if table.schema is not None else table.primary_key)


def test_no_table_is_declared_outside_the_catalog():
    offenders = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in PACKAGE.rglob("*.py")
        if "tables" not in path.relative_to(PACKAGE).parts
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"CREATE (OR REPLACE )?TABLE|pa\.schema\(", line)
    ]
    assert offenders == []
