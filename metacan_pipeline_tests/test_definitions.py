import dagster as dg

from metacan_pipeline.definitions import ALL_ASSETS, defs


def test_definitions_load():
    dg.Definitions.validate_loadable(defs)
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    assert {s.group_name for s in specs.values()} == {"ingestion", "labeling", "scoring", "publishing"}
    assert specs["frame"].group_name == "ingestion" and specs["work_pages"].group_name == "publishing"
    for spec in specs.values():
        assert spec.description and len(spec.description) > 80, f"{spec.key} needs a real docstring"
    assert len(specs) == len(ALL_ASSETS) == 12
    assert specs["frame_parts"].partitions_def.name == "openalex_partitions"


def test_blocking_checks_guard_what_ships():
    graph = defs.resolve_asset_graph()
    checks = {k.name: graph.get_check_spec(k) for k in graph.asset_check_keys}
    assert set(checks) == {"frame_ids_unique", "frame_routes_have_evidence", "frame_stores_no_abstract_text",
                           "frame_build_manifest_covers_snapshot", "sample_design_partitions_frame", "gemma_covers_frame", "records_may_ship"}
    assert checks["records_may_ship"].blocking and checks["records_may_ship"].asset_key.to_user_string() == "work_records"
    # every check blocks what is downstream except the manifest coverage warning
    assert {n for n, c in checks.items() if not c.blocking} == {"frame_build_manifest_covers_snapshot"}


def test_main_job_and_weekly_refresh_schedule():
    job = defs.resolve_job_def("metacan_all")
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == {a.key.to_user_string() for a in ALL_ASSETS}
    schedule = defs.resolve_schedule_def("weekly_frame_refresh")
    assert schedule.cron_schedule == "0 3 * * 1" and schedule.job_name == "frame_refresh"
