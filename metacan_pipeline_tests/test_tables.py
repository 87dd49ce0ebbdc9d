"""Tests of metacan_pipeline.tables: the catalog of tables."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
import pytest

from metacan_pipeline.meta import column_schema
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables import SQL_TYPES, catalog, create_tables, duckdb_table_names
from metacan_pipeline.tables.checks import CHECK_NAME, checked_tables, schema_checks, schema_problems
from metacan_pipeline.tables.fields import FIELDS, column, columns, description
from metacan_pipeline.tables.migrations import FIRST_LAYOUT_PROMPT_SHAS
from metacan_pipeline.teachers.core.rubric import prompt_lock
from metacan_pipeline_tests.builders.frame import build_frame

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


def test_every_column_of_every_table_is_in_the_field_dictionary_and_has_a_description():
    for name, table in catalog().items():
        for f in table.schema or []:
            assert f.name in FIELDS, f"{name}.{f.name} is not in the field dictionary"
            assert description(f), f"{name}.{f.name} has no description"
    # a column keeps the dictionary's type unless its table overrides it explicitly
    frame, facets = catalog()["frame"].schema, catalog()["work_facets"].schema
    assert frame.field("language").type == FIELDS["language"].type == pa.string()
    assert facets.field("language").type == pa.int32() and "facet_codes" in description(facets.field("language"))


def test_a_column_outside_the_dictionary_is_refused_unless_declared_with_its_type_and_description():
    with pytest.raises(KeyError, match="not in the field dictionary"):
        columns("id", "no_such_column")
    with pytest.raises(KeyError, match="give it a type and a description"):
        column("no_such_column", pa.int64())
    assert description(column("id", description="an entity id")) == "an entity id"


def test_the_dagster_column_schema_shows_each_column_description():
    shown = column_schema(catalog()["sample_design"].schema)
    by_name = {c.name: c for c in shown.columns}
    assert by_name["design_weight"].description == FIELDS["design_weight"].description
    assert by_name["design_weight"].type == "double"
    assert column_schema(pa.schema([("x", pa.int64())])).columns[0].description is None


def test_the_first_layout_prompt_shas_are_the_prompt_lock_of_those_versions():
    assert FIRST_LAYOUT_PROMPT_SHAS.items() <= prompt_lock().items()


def test_the_catalog_imports_at_module_level_and_nothing_above_its_layer():
    allowed = {"metacan_pipeline.tables", "metacan_pipeline.vocab", "metacan_pipeline.meta", "metacan_pipeline.i18n"}
    for path in (PACKAGE / "tables").glob("*.py"):
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                assert id(node) in top, f"{path.name}:{node.lineno} imports inside a function"
            if isinstance(node, ast.ImportFrom) and node.level:
                target = ".".join(
                    ["metacan_pipeline", "tables"][: 3 - node.level] + ([node.module] if node.module else [])
                )
                assert any(target == a or target.startswith(a + ".") for a in allowed), f"{path.name}: {target}"


def _materialize_sample_design(storage: MetacanStorage, schema: pa.Schema) -> dg.AssetCheckEvaluation:
    @dg.asset(name="sample_design")
    def sample_design(storage: MetacanStorage) -> None:
        storage.write_table("sample_design", schema.empty_table(), schema)

    result = dg.materialize([sample_design, schema_checks(["sample_design"])], resources={"storage": storage})
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


def test_the_schema_check_passes_on_the_catalog_schema_and_fails_on_a_column_of_another_type(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    good = catalog()["sample_design"].schema
    assert _materialize_sample_design(storage, good).passed
    bad = pa.schema([pa.field(f.name, pa.string()) if f.name == "design_weight" else f for f in good])
    evaluation = _materialize_sample_design(storage, bad)
    assert not evaluation.passed and evaluation.check_name == CHECK_NAME
    assert evaluation.metadata["problems"].value == ["design_weight: stored as VARCHAR, the catalog says DOUBLE"]


def test_the_schema_check_reads_duckdb_tables_and_names_missing_and_extra_columns(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    batches = catalog()["label_batches"]
    with storage.connect() as con:
        assert schema_problems(con, "label_batches", batches) == []
        con.execute("ALTER TABLE label_batches DROP COLUMN source")
        con.execute("ALTER TABLE label_batches ADD COLUMN origin VARCHAR")
        assert schema_problems(con, "label_batches", batches) == [
            "missing columns: source",
            "columns the catalog does not declare: origin",
        ]
        assert schema_problems(con, "frame", catalog()["frame"]) == [
            "frame: not stored (no DuckDB table or view of that name)"
        ]


def test_schema_checks_cover_the_stored_tables_among_the_asset_keys_templates_included():
    tables = checked_tables(["frame", "direct_labels_gemma", "label_batches", "frame_parts", "student_scores", "x"])
    assert {k: t.name for k, t in tables.items()} == {
        "frame": "frame",
        "direct_labels_gemma": "direct_labels_<teacher>",
        "label_batches": "label_batches",
    }


@pytest.mark.slow
def test_the_frame_build_writes_its_tables_as_the_catalog_declares_them(tmp_path, small_input):
    _, result = build_frame(tmp_path / "data", small_input)
    evaluations = [e for e in result.get_asset_check_evaluations() if e.check_name == CHECK_NAME]
    assert {"frame", "openalex_quarantine", "frame_build_manifest"} <= {
        e.asset_key.to_user_string() for e in evaluations
    }
    assert [e.metadata["problems"].value for e in evaluations if not e.passed] == []
