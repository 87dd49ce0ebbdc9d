"""The column schema every asset declares in its definition, from the catalog: the Dagster UI shows each column's
type and description on the asset's page before (and beside) any materialization.

An asset's table is the catalog table of its name (``direct_labels_<teacher>`` stands for every teacher's asset),
else the first table in catalog order that it writes (``written_by``) to a store users query: a warehouse
(Parquet) table, a DuckDB table or a SQLite store's table. Part files of the frame (``frame_parts``), batches
handed between functions and the tables of a release database (``site_database`` writes a dozen) name no single
table of the asset, so those assets declare none; their materializations carry their own schema.
"""

from __future__ import annotations

import warnings

import dagster as dg

from ..meta import column_schema
from .catalog import catalog
from .checks import _key_pattern
from .table import Table

#: The stores whose tables an asset's column schema may describe.
DESCRIBED_STORES = ("warehouse", "duckdb", "sqlite")

#: The metadata key of a column schema (the Dagster UI's "Columns").
COLUMN_SCHEMA = "dagster/column_schema"


def asset_table(key: str) -> Table | None:
    """The catalog table whose columns the asset ``key`` declares (see the module's docstring), or None."""
    tables = [t for t in catalog().values() if t.store in DESCRIBED_STORES and t.schema is not None]
    named = [t for t in tables if _key_pattern(t.name).fullmatch(key)]
    written = [t for t in tables if _key_pattern(t.written_by).fullmatch(key)]
    return (named or written or [None])[0]


def with_column_schema(spec: dg.AssetSpec) -> dg.AssetSpec:
    """``spec`` with the column schema of its catalog table (names, types, descriptions) in its metadata, unless
    it declares one already or has no table."""
    table = asset_table(spec.key.to_user_string())
    if table is None or COLUMN_SCHEMA in (spec.metadata or {}):
        return spec
    return spec.merge_attributes(metadata={COLUMN_SCHEMA: column_schema(table.schema)})


def describe_columns(defs: dg.Definitions) -> dg.Definitions:
    """``defs`` with every asset spec passed through :func:`with_column_schema`."""
    with warnings.catch_warnings():
        # Definitions.map_asset_specs is marked "preview" in the pinned Dagster; its behaviour is what we need.
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return defs.map_asset_specs(func=with_column_schema)
