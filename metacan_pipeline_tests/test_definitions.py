"""Tests of metacan_pipeline.definitions: the Definitions load, jobs, schedules and blocking checks."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from metacan_pipeline.definitions import ALL_ASSETS, defs
from metacan_pipeline.tables.checks import CHECK_NAME

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
        "predictions_scores_in_unit_interval",
        "predictions_score_every_frame_work_once",
        "predictions_no_decision_without_gate",
        "student_holdout_disjoint_from_training",
        "audit_sample_partitions_frame",
        "release_matches_its_hashes",
        "site_database_matches_records",
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
    assert checks["records_human_layers_backed"].asset_key == WORK_RECORDS
    assert checks["site_database_matches_records"].asset_key == dg.AssetKey("site_database")
    assert {dg.AssetKey("predictions"), dg.AssetKey("prediction_thresholds")} <= graph.get(
        dg.AssetKey("audit_protocol")
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
    assert _job_assets("metacan_all") == ALL_KEYS - {"openalex_api_refresh"}
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
    assert "release" in _job_assets("metacan_all") and "release" in _job_assets("metacan_build")
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
