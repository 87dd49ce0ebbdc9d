"""The schema check generated from the catalog: for every stored table that is an asset key (a warehouse table,
read through its DuckDB view over the Parquet files, or a DuckDB table), the stored columns and their types
must be the catalog's, in order.

One multi-asset check (one step, one result per table) rather than one step per table, so a run pays for one
step. It does not block: one step over every table runs after the last of them is written, so it could hold
nothing back, and a schema drift is a defect to fix in the writer, not a reason to withhold what is downstream
(the blocking checks of each stage guard what ships).
"""

import re
from collections.abc import Iterable

import dagster as dg
import duckdb

from .catalog import catalog
from .table import SQL_TYPES, Table

#: The name of every table's schema check (a check key is the asset key and this name).
CHECK_NAME = "schema_matches_catalog"

#: The stores whose tables the DuckDB catalog holds (a view over Parquet, or a table).
CHECKED_STORES = ("warehouse", "duckdb")


def _key_pattern(name: str) -> re.Pattern[str]:
    """The asset keys a catalog name stands for: itself, or every key of a template (``direct_labels_<teacher>``)."""
    return re.compile(re.sub(r"<[a-z_]+>", "[A-Za-z0-9_]+", re.escape(name)))


def checked_tables(asset_keys: Iterable[str]) -> dict[str, Table]:
    """The stored catalog table of each asset key that has one (with a fixed schema), by asset key."""
    tables = [t for t in catalog().values() if t.store in CHECKED_STORES and t.schema is not None]
    out: dict[str, Table] = {}
    for key in asset_keys:
        for table in tables:
            if _key_pattern(table.name).fullmatch(key):
                out[key] = table
    return out


def _describe(con: duckdb.DuckDBPyConnection, relation: str) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute(f"DESCRIBE {relation}").fetchall()]


def expected_columns(table: Table) -> list[tuple[str, str]]:
    """The DuckDB column types the catalog declares for ``table``: its DDL's for a DuckDB table; for a warehouse
    table, the types DuckDB reads from Parquet written with its Arrow schema."""
    if table.store == "duckdb":
        return [(f.name, "JSON" if f.name in table.json_columns else SQL_TYPES[f.type]) for f in table.schema]
    con = duckdb.connect()
    try:
        con.register("expected", table.schema.empty_table())
        return _describe(con, "expected")
    finally:
        con.close()


def schema_problems(con: duckdb.DuckDBPyConnection, name: str, table: Table) -> list[str]:
    """How the stored relation ``name`` differs from the catalog's ``table`` (empty: it matches): a missing
    relation, missing or extra columns, columns out of order, or a column of another type."""
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ? "
        "UNION ALL SELECT count(*) FROM duckdb_views() WHERE schema_name = 'main' AND view_name = ?",
        [name, name],
    ).fetchall()
    if not any(n for (n,) in exists):
        return [f"{name}: not stored (no DuckDB table or view of that name)"]
    have = _describe(con, f'"{name}"')
    want = expected_columns(table)
    problems = []
    have_types, want_types = dict(have), dict(want)
    if missing := [c for c in want_types if c not in have_types]:
        problems.append(f"missing columns: {', '.join(missing)}")
    if extra := [c for c in have_types if c not in want_types]:
        problems.append(f"columns the catalog does not declare: {', '.join(extra)}")
    for column, kind in want:
        if column in have_types and have_types[column] != kind:
            problems.append(f"{column}: stored as {have_types[column]}, the catalog says {kind}")
    if not problems and [c for c, _ in have] != [c for c, _ in want]:
        problems.append("columns in another order than the catalog's (rows are inserted by position)")
    return problems


def schema_checks(asset_keys: Iterable[str]) -> dg.AssetChecksDefinition:
    """One non-blocking check per stored catalog table among ``asset_keys`` (all in one step): the stored columns
    and types are the catalog's. Reads the storage resource ``storage`` (a ``MetacanStorage``)."""
    tables = checked_tables(asset_keys)
    specs = [
        dg.AssetCheckSpec(
            CHECK_NAME,
            asset=key,
            blocking=False,
            description=f"The stored columns of {key} and their types are the catalog's ({table.store} table).",
        )
        for key, table in sorted(tables.items())
    ]

    @dg.multi_asset_check(specs=specs, can_subset=True, required_resource_keys={"storage"}, name="schema_checks")
    def _schema_checks(context: dg.AssetCheckExecutionContext):
        with context.resources.storage.connect(read_only=True) as con:
            for check_key in sorted(context.selected_asset_check_keys, key=lambda k: k.asset_key.to_user_string()):
                key = check_key.asset_key.to_user_string()
                problems = schema_problems(con, key, tables[key])
                yield dg.AssetCheckResult(
                    asset_key=check_key.asset_key,
                    check_name=CHECK_NAME,
                    passed=not problems,
                    severity=dg.AssetCheckSeverity.ERROR,
                    metadata={"problems": dg.MetadataValue.json(problems), "columns": len(tables[key].schema)},
                )

    return _schema_checks
