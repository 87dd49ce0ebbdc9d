"""The assets ``audit_inputs`` and ``scoring_inputs`` (:mod:`metacan_pipeline.fingerprints`): one named edge per input
into their group, a fingerprint per input table that ignores run
bookkeeping and follows content, and a data version that changes exactly when an input does. Materialized through
Dagster on a real warehouse; the fingerprint is recomputed here from the rows with DuckDB's hash()."""

from __future__ import annotations

import dagster as dg
import duckdb
import pyarrow as pa

from metacan_pipeline.audit.inputs import AUDIT_INPUTS, audit_inputs
from metacan_pipeline.definitions import defs
from metacan_pipeline.student.assets import SCORING_INPUTS
from metacan_pipeline.student.roles import direct_labels_key
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline_tests.builders.teachers import label_row

CODEX = direct_labels_key("codex")


def labels(run_id: str, first_categories: list[str]) -> pa.Table:
    rows = [label_row("W1", "codex", first_categories), label_row("W2", "codex", ["open_science"])]
    for r in rows:
        r["run_id"] = run_id
    return pa.Table.from_pylist(rows, schema=LABELS_SCHEMA)


def materialize(storage) -> dg.AssetMaterialization:
    result = dg.materialize([audit_inputs], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    assert result.success
    return result.asset_materializations_for_node("audit_inputs")[0]


def expected_fingerprint(table: pa.Table) -> str:
    con = duckdb.connect()
    con.register("t", table.drop_columns(["run_id", "created_at"]))
    cols = ", ".join(f'"{c}"' for c in table.column_names if c not in ("run_id", "created_at"))
    return f"{con.execute(f'SELECT sum(hash({cols})::HUGEINT) FROM t').fetchone()[0]:032x}"


def test_fingerprints_follow_content_not_run_bookkeeping(storage):
    storage.write_table(CODEX, labels("run-a", ["metaresearch"]))
    first = materialize(storage)
    rows = {r["input"]: r for r in storage.read_table("audit_inputs").to_pylist()}
    assert set(rows) == set(AUDIT_INPUTS)
    assert rows[CODEX]["rows"] == 2
    assert rows[CODEX]["fingerprint"] == expected_fingerprint(labels("run-a", ["metaresearch"]))
    assert rows["predictions"]["rows"] == 0 and rows["predictions"]["fingerprint"] is None
    assert rows["predictions"]["note"] == "not materialized yet"
    assert first.metadata["changed_since_last_run"].value == "(first run)"

    # the same rows written by another run: same fingerprint, same data version, nothing changed
    storage.write_table(CODEX, labels("run-b", ["metaresearch"]))
    second = materialize(storage)
    assert second.tags["dagster/data_version"] == first.tags["dagster/data_version"]
    assert second.metadata["changed_since_last_run"].value == ""

    # one label changes: its table's fingerprint and the data version change, and the metadata names the table
    storage.write_table(CODEX, labels("run-b", ["open_science"]))
    third = materialize(storage)
    after = {r["input"]: r for r in storage.read_table("audit_inputs").to_pylist()}
    assert after[CODEX]["fingerprint"] == expected_fingerprint(labels("run-b", ["open_science"]))
    assert after[CODEX]["fingerprint"] != rows[CODEX]["fingerprint"]
    assert third.tags["dagster/data_version"] != first.tags["dagster/data_version"]
    assert third.metadata["changed_since_last_run"].value == CODEX


def edges_into(group: str) -> set[tuple[str, str]]:
    graph = defs.resolve_asset_graph()
    inside = {k for k in graph.get_all_asset_keys() if graph.get(k).group_name == group}
    return {
        (p.to_user_string(), k.to_user_string()) for k in inside for p in graph.get(k).parent_keys if p not in inside
    }


def test_the_audit_and_scoring_groups_read_the_other_stages_through_their_inputs_asset():
    # every edge from another stage into the group ends at its inputs asset, one per input table
    assert edges_into("audit") == {(name, "audit_inputs") for name in AUDIT_INPUTS}
    assert edges_into("scoring") == {(name, "scoring_inputs") for name in SCORING_INPUTS}
    graph = defs.resolve_asset_graph()
    for asset in ("student_heads", "student_training_set", "predictions", "machine_scores", "prevalence"):
        assert dg.AssetKey("scoring_inputs") in graph.get(dg.AssetKey(asset)).parent_keys
    for asset in ("audit_protocol", "audit_sample", "coding_tasks", "filter_recall", "validation_report"):
        assert dg.AssetKey("audit_inputs") in graph.get(dg.AssetKey(asset)).parent_keys
