"""In-place migrations of a DuckDB store written by an earlier layout, run by :func:`.catalog.create_tables`
before any table is created. Nothing is lost: old rows are kept or copied. Rows are inserted by position
(``INSERT INTO t SELECT * FROM batch``, :func:`metacan_pipeline.teachers.core.store.append_rows`), so a column
added to a table of the catalog goes last, where ``ALTER TABLE ... ADD COLUMN`` puts it."""

from __future__ import annotations

from collections.abc import Mapping

import duckdb

from .table import Table, transaction

#: The prompt lock (``teachers/prompts/versions.toml``) of the versions a store of the first layout can hold: the
#: versions published while that layout was written. A published version's SHA never changes, so the labels of
#: such a store keep their key (a test holds these lines equal to the lock).
FIRST_LAYOUT_PROMPT_SHAS: dict[str, str] = {"v1": "2e6be285408c4cd0", "v2": "a33a025f61dc5f8c"}


def columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    """The columns of ``table`` in the main schema, in order (empty when it does not exist)."""
    return [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND table_schema = 'main' "
            "ORDER BY ordinal_position",
            [table],
        ).fetchall()
    ]


def migrate(
    con: duckdb.DuckDBPyConnection, tables: Mapping[str, Table], legacy_prompt_shas: dict[str, str] | None = None
) -> None:
    """Migrate the label store of an earlier layout to the catalog's ``tables``: the first layout
    (:func:`migrate_first_layout`), then one whose ``teacher_calls`` has no ``endpoint`` column
    (:func:`add_call_endpoint`), then the tables that had a key index the catalog no longer declares
    (:func:`drop_key_indexes`)."""
    migrate_first_layout(con, tables["teacher_labels"], legacy_prompt_shas)
    add_call_endpoint(con)
    drop_key_indexes(con, tables)


def drop_key_indexes(con: duckdb.DuckDBPyConnection, tables: Mapping[str, Table]) -> None:
    """A table the catalog (``tables``) declares without a key index (``Table.key_index``, e.g. ``teacher_labels``) that
    has a primary key in this store is rebuilt in the catalog's layout, every row copied: DuckDB cannot drop a
    primary key in place."""
    keyed = {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM duckdb_constraints() WHERE schema_name = 'main' AND constraint_type = 'PRIMARY KEY'"
        ).fetchall()
    }
    for table in tables.values():
        if table.store != "duckdb" or table.key_index or table.name not in keyed:
            continue
        with transaction(con):
            rebuild(con, table, "keyed")


def rebuild(con: duckdb.DuckDBPyConnection, table: Table, suffix: str) -> None:
    """Rebuild ``table`` in the catalog's layout: the stored one
    is renamed ``<name>_<suffix>``, the catalog's is created, the columns both have are copied, the old one is dropped
    (inside the caller's transaction)."""
    shared = ", ".join(c for c in columns(con, table.name) if c in table.schema.names)
    con.execute(f"ALTER TABLE {table.name} RENAME TO {table.name}_{suffix}")
    con.execute(table.ddl())
    con.execute(f"INSERT INTO {table.name} ({shared}) SELECT {shared} FROM {table.name}_{suffix}")
    con.execute(f"DROP TABLE {table.name}_{suffix}")


def add_call_endpoint(con: duckdb.DuckDBPyConnection) -> None:
    """``teacher_calls`` of a store written before a teacher could call several endpoints gets the
    column ``endpoint`` (VARCHAR, the catalog's last column), in place: every row is kept, and the calls made
    before it say NULL (the one endpoint their teacher had; its base URL was not recorded)."""
    cols = columns(con, "teacher_calls")
    if cols and "endpoint" not in cols:
        con.execute("ALTER TABLE teacher_calls ADD COLUMN endpoint VARCHAR")


def migrate_first_layout(
    con: duckdb.DuckDBPyConnection, labels: Table, legacy_prompt_shas: dict[str, str] | None = None
) -> None:
    """Migrate the label store of the first layout to the catalog's ``teacher_labels`` (``labels``).

    ``teacher_calls`` held request and reply bodies: it is renamed ``teacher_calls_v1`` and kept (its rows
    stay readable). ``teacher_labels`` lacked ``prompt_sha`` and ``source_ref``: it is rebuilt in the
    catalog's layout with every row copied, and ``legacy_prompt_shas`` (by default
    :data:`FIRST_LAYOUT_PROMPT_SHAS`) maps a prompt version to the SHA of its unchanged, locked text, so old
    labels keep their key.
    """
    calls_v1 = "request_json" in columns(con, "teacher_calls")
    old = columns(con, "teacher_labels")
    labels_v1 = bool(old) and not (old[-1] == "created_at" and "prompt_sha" in old)
    if not calls_v1 and not labels_v1:
        return
    if legacy_prompt_shas is None:
        legacy_prompt_shas = FIRST_LAYOUT_PROMPT_SHAS
    # one transaction: a process killed half way (the copy of millions of labels takes seconds) leaves the store of
    # the first layout, migrated again by the next open; step by step, the labels were left in teacher_labels_old or
    # without their prompt_sha, and the next open saw a current layout and never looked again
    with transaction(con):
        if calls_v1:
            con.execute("ALTER TABLE teacher_calls RENAME TO teacher_calls_v1")
        if labels_v1:
            rebuild(con, labels, "old")
            for version, sha in legacy_prompt_shas.items():
                con.execute(
                    "UPDATE teacher_labels SET prompt_sha = ? WHERE prompt_sha IS NULL AND prompt_version = ?",
                    [sha, version],
                )
