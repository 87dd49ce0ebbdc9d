"""Tests of metacan_pipeline.definitions: the Definitions load, jobs, schedules and blocking checks."""

import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg

from metacan_pipeline.definitions import ALL_ASSETS, defs
from metacan_pipeline.tables import catalog
from metacan_pipeline.tables.asset_columns import DESCRIBED_STORES
from metacan_pipeline.tables.checks import CHECK_NAME, _key_pattern

REPO = Path(__file__).resolve().parents[1]
WORK_RECORDS = dg.AssetKey("work_records")
ALL_KEYS = {k.to_user_string() for a in ALL_ASSETS for k in a.keys}


def test_definitions_load():
    dg.Definitions.validate_loadable(defs)
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    assert {s.group_name for s in specs.values()} == {"ingestion", "labeling", "scoring", "publishing", "audit"}
    assert specs["frame"].group_name == "ingestion" and specs["work_pages"].group_name == "publishing"
    for spec in specs.values():
        assert spec.description and len(spec.description) > 80, f"{spec.key} needs a real docstring"
    # one spec per table: a multi_asset (frame, student_heads, predictions, ...) has one per table it writes
    assert len(specs) == sum(len(a.keys) for a in ALL_ASSETS) == len(ALL_KEYS)
    assert {"openalex_quarantine", "frame_build_manifest", "student_training_set", "student_scores"} <= set(specs)
    assert {"prediction_thresholds", "label_batches", "teacher_disagreements", "work_lineage"} <= set(specs)
    assert specs["frame_parts"].partitions_def.name == "openalex_partitions"


#: The warnings on what the map may claim (a role teacher not qualified, a deciding head not validated), by asset.
CLAIMS = {
    "gemma_qualified": "direct_labels_gemma",
    "codex_qualified": "direct_labels_codex",
    "predictions_may_claim": "predictions",
    "prevalence_may_claim": "prevalence",
    "records_may_claim": "work_records",
}


def test_blocking_checks_guard_what_ships():
    graph = defs.resolve_asset_graph()
    checks = {k.name: graph.get_check_spec(k) for k in graph.asset_check_keys if k.name != CHECK_NAME}
    assert set(checks) == {
        "frame_ids_unique",
        "frame_routes_have_evidence",
        "frame_stores_no_abstract_text",
        "frame_build_manifest_covers_snapshot",
        "sample_design_partitions_frame",
        "gemma_covers_its_works",
        "codex_covers_its_works",
        "records_may_ship",
        "records_human_layers_backed",
        "records_in_one_release_layer",
        "predictions_scores_in_unit_interval",
        "predictions_score_every_frame_work_once",
        "predictions_no_decision_without_gate",
        "student_holdout_disjoint_from_training",
        "audit_sample_partitions_frame",
        "release_matches_its_hashes",
        "site_database_matches_records",
        "work_retractions_within_frame",
        *CLAIMS,
    }
    assert (
        checks["records_may_ship"].blocking and checks["records_may_ship"].asset_key.to_user_string() == "work_records"
    )
    # each check attaches to the table it reads; the holdout check blocks the scores of a leaking model
    assert checks["student_holdout_disjoint_from_training"].asset_key == dg.AssetKey("student_training_set")
    assert dg.AssetKey("student_training_set") in graph.get(dg.AssetKey("student_scores")).parent_keys
    assert {checks[n].asset_key.to_user_string() for n in checks if n.startswith("predictions_")} == {"predictions"}
    # the audit sample's partition check blocks; the protocol comes first, the classifier under test before it
    assert checks["audit_sample_partitions_frame"].asset_key == dg.AssetKey("audit_sample")
    assert dg.AssetKey("audit_protocol") in graph.get(dg.AssetKey("audit_sample")).parent_keys
    # the gate comes after the audit sample, and the records (with their human layers) after the gate
    assert dg.AssetKey("audit_sample") in graph.get(dg.AssetKey("validation_report")).parent_keys
    assert {dg.AssetKey("validation_report"), dg.AssetKey("human_codes")} <= graph.get(WORK_RECORDS).parent_keys
    assert checks["records_human_layers_backed"].blocking
    # Retraction Watch reaches the records, and its join may not name a work outside the frame
    assert dg.AssetKey("work_retractions") in graph.get(WORK_RECORDS).parent_keys
    assert dg.AssetKey("frame") in graph.get(dg.AssetKey("work_retractions")).parent_keys
    # the cascade's certified decisions reach the records in the run that certified them
    assert dg.AssetKey("cascade_batch") in graph.get(WORK_RECORDS).parent_keys
    assert checks["work_retractions_within_frame"].blocking
    assert checks["records_human_layers_backed"].asset_key == WORK_RECORDS
    assert checks["records_in_one_release_layer"].blocking
    assert checks["records_in_one_release_layer"].asset_key == WORK_RECORDS
    # the statistics page's instruments are built into the release database after they ran
    assert {dg.AssetKey("filter_recall"), dg.AssetKey("venue_known_item_recall")} <= graph.get(
        dg.AssetKey("site_database")
    ).parent_keys
    assert checks["site_database_matches_records"].asset_key == dg.AssetKey("site_database")
    # the protocol locks the classifier under test: it reads the decisions through the audit's inputs
    assert dg.AssetKey("audit_inputs") in graph.get(dg.AssetKey("audit_protocol")).parent_keys
    assert {dg.AssetKey("predictions"), dg.AssetKey("prediction_thresholds")} <= graph.get(
        dg.AssetKey("audit_inputs")
    ).parent_keys
    # every check blocks what is downstream except the manifest coverage warning, the sample teacher's coverage (a
    # budget may defer works) and the warnings on what the map may claim
    assert {n for n, c in checks.items() if not c.blocking} == {
        "frame_build_manifest_covers_snapshot",
        "codex_covers_its_works",
        *CLAIMS,
    }
    assert {n: checks[n].asset_key.to_user_string() for n in CLAIMS} == CLAIMS


def test_every_stored_table_that_is_an_asset_has_a_schema_check_that_does_not_block():
    graph = defs.resolve_asset_graph()
    schema = [graph.get_check_spec(k) for k in graph.asset_check_keys if k.name == CHECK_NAME]
    checked = {s.asset_key.to_user_string() for s in schema}
    assert {"frame", "sample_design", "direct_labels_gemma", "direct_labels_codex", "predictions"} <= checked
    assert {"work_records", "audit_sample", "validation_gate", "human_codes", "label_batches"} <= checked
    assert checked <= ALL_KEYS and "frame_parts" not in checked and "student_scores" not in checked
    assert not any(s.blocking for s in schema)


def _job_assets(name):
    return {k.to_user_string() for k in defs.resolve_job_def(name).asset_layer.executable_asset_keys}


def test_main_job_and_weekly_refresh_schedule():
    # the one-click job metacan_all runs frame_refresh, then metacan_build over every partition (test_one_click.py)
    assert _job_assets("frame_refresh") | _job_assets("metacan_build") == ALL_KEYS - {"openalex_api_refresh"}
    schedule = defs.resolve_schedule_def("weekly_frame_refresh")
    assert schedule.cron_schedule == "0 3 * * 1" and schedule.job_name == "frame_refresh"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING  # offline and free: users rely on it
    sensor = defs.resolve_sensor_def("frame_build_after_refresh")
    assert sensor.job_name == "frame_build" and sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_api_refresh_runs_only_in_its_own_job_and_stopped_schedule():
    # it buys API calls: never part of `metacan run` (frame_refresh + metacan_build / frame_build) or the main job
    for job in ("metacan_all", "metacan_build", "frame_refresh", "frame_build"):
        assert "openalex_api_refresh" not in _job_assets(job), job
    assert _job_assets("frame_refresh") == {"openalex_inventory", "canadian_entities"}
    assert _job_assets("api_refresh") == {"openalex_api_refresh", "openalex_inventory"}
    schedule = defs.resolve_schedule_def("weekly_api_refresh")
    assert schedule.cron_schedule == "0 4 * * 1" and schedule.execution_timezone == "America/Toronto"
    assert schedule.job_name == "api_refresh" and schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert "buys API calls" in schedule.description
    graph = defs.resolve_asset_graph()
    assert dg.AssetKey("openalex_api_refresh") in graph.get(dg.AssetKey("openalex_inventory")).parent_keys
    assert graph.get(dg.AssetKey("openalex_api_refresh")).parent_keys == {dg.AssetKey("canadian_entities")}
    assert graph.get(dg.AssetKey("openalex_api_refresh")).group_name == "ingestion"


def test_a_release_is_cut_only_on_request():
    # the release check blocks and attaches to the release; the release comes after the checked records
    graph = defs.resolve_asset_graph()
    check = graph.get_check_spec(dg.AssetCheckKey(dg.AssetKey("release"), "release_matches_its_hashes"))
    assert check.blocking
    assert dg.AssetKey("work_records") in graph.get(dg.AssetKey("release")).parent_keys
    assert dg.AssetKey("release") in graph.get(dg.AssetKey("site_database")).parent_keys
    # the weekly refresh and the frame build never run it; the whole-graph jobs run it with cut: false by default
    for job in ("frame_refresh", "frame_build", "api_refresh"):
        assert "release" not in _job_assets(job), job
    assert "release" in _job_assets("metacan_build")  # the second run of metacan_all and of metacan run
    from metacan_pipeline.release.assets import ReleaseConfig

    assert ReleaseConfig().cut is False


def test_the_workspace_loads_as_dagster_dev_loads_it(tmp_path):
    """`dagster definitions validate -w workspace.yaml` (the loader of `dagster dev`, which refuses a module with more
    than one Definitions object at its top level) passes on the project's workspace."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("dagster")), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "All code locations passed validation" in done.stdout + done.stderr


#: A Sphinx role (``:class:`x```, ``:data:`x```, ...): the Dagster UI shows it as raw text.
SPHINX_ROLE = re.compile(r":[a-z]+:`")
#: A schema constant (`PREVALENCE_SCHEMA`), a class (`ApiRefreshConfig`) or a module's member (`pages.render_index`).
CODE_NAME = re.compile(r"\b[A-Z][A-Z_]*_SCHEMA\b|(?<!`)`([A-Z][a-z]+[A-Z]\w*|[a-z_]+\.[A-Za-z_]+)`(?!`)")


def test_asset_and_check_descriptions_are_plain_markdown_for_users():
    graph = defs.resolve_asset_graph()
    shown = {f"asset {s.key.to_user_string()}": s.description for s in defs.resolve_all_asset_specs()}
    shown |= {f"check {k.to_user_string()}": graph.get_check_spec(k).description for k in graph.asset_check_keys}
    assert len(shown) == len(ALL_KEYS) + len(graph.asset_check_keys)
    assert [name for name, text in shown.items() if not text] == []
    assert {name: SPHINX_ROLE.findall(text) for name, text in shown.items() if SPHINX_ROLE.search(text)} == {}
    # nor a name only the code knows (a schema constant, a config class, a module's function)
    assert {name: CODE_NAME.findall(text) for name, text in shown.items() if CODE_NAME.search(text)} == {}


def test_every_asset_that_writes_a_catalog_table_shows_its_described_columns():
    """Every column of the catalog has a description, and every asset that writes a stored catalog table (one of its
    name, or one it is the writer of) declares a column schema: that table's columns, each with its description."""
    tables = catalog().values()
    assert [f"{t.name}.{f.name}" for t in tables if t.schema for f in t.schema if not column_description(f)] == []
    stored = [t for t in tables if t.store in DESCRIBED_STORES and t.schema is not None]
    declared = {}
    for spec in defs.resolve_all_asset_specs():
        key = spec.key.to_user_string()
        named = [t for t in stored if _key_pattern(t.name).fullmatch(key)]
        written = named or [t for t in stored if _key_pattern(t.written_by).fullmatch(key)]
        schema = spec.metadata.get("dagster/column_schema")
        if not written:
            assert schema is None, key
            continue
        assert schema is not None, f"{key} writes {[t.name for t in written]} but declares no column schema"
        shown = [(c.name, c.type, c.description) for c in schema.columns]
        expected = [(f.name, str(f.type), column_description(f)) for f in written[0].schema]
        assert shown == expected, key
        declared[key] = written[0].name
    # the tables whose names differ from their asset's: the first the asset writes, the one its materialization shows
    assert declared["validation_report"] == "human_validation" and declared["work_pages"] == "page_manifest"
    assert declared["direct_labels_gemma"] == declared["direct_labels_codex"] == "direct_labels_<teacher>"
    assert {"frame", "predictions", "prevalence", "work_records", "teacher_qualification", "coding_tasks"} <= set(
        declared
    )


def column_description(field) -> str:
    return (field.metadata or {}).get(b"description", b"").decode().strip()
