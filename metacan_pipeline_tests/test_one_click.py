"""The one-click job ``metacan_all`` and the whole-graph runs it shares with ``metacan run``: no partition to choose, no
config to write, the API refresh only when chosen, a failed run named and linked, the frame built once."""

from __future__ import annotations

import json

import dagster as dg
import pytest
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill

from metacan_pipeline import settings
from metacan_pipeline.definitions import ALL_ASSETS, build_resources, defs, whole_graph_runs
from metacan_pipeline.frame.api_refresh import API_REFRESH_JOB
from metacan_pipeline.frame.partitions import openalex_partitions
from metacan_pipeline.frame.schedules import WHOLE_GRAPH_TAG, frame_built_with
from metacan_pipeline_tests.builders.openalex import LoopbackOpenAlex

ALL_KEYS = {k.to_user_string() for a in ALL_ASSETS for k in a.keys}


def _job_assets(name: str) -> set[str]:
    return {k.to_user_string() for k in defs.resolve_job_def(name).asset_layer.executable_asset_keys}


def test_metacan_all_needs_no_partition_and_no_config_and_runs_every_asset_but_the_api_refresh():
    job = defs.resolve_job_def("metacan_all")
    assert job.partitions_def is None and not job.asset_layer.executable_asset_keys
    assert dg.validate_run_config(job, {}) is not None  # the Launchpad's empty config is valid as it stands
    assert [n.name for n in job.graph.nodes] == ["materialize_whole_graph"]
    # the runs it launches: frame_refresh, then metacan_build over every partition, which is everything but the refresh
    assert _job_assets("frame_refresh") | _job_assets("metacan_build") == ALL_KEYS - {"openalex_api_refresh"}
    assert not _job_assets("frame_refresh") & _job_assets("metacan_build")
    assert defs.resolve_job_def("metacan_build").partitions_def == openalex_partitions


def _step_failure(result: dg.ExecuteInProcessResult) -> dg.DagsterEvent:
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    return failure


def test_metacan_all_stops_at_the_failed_run_and_links_it(tmp_path):
    empty = tmp_path / "openalex"
    empty.mkdir()
    instance = dg.DagsterInstance.ephemeral()
    result = defs.resolve_job_def("metacan_all").execute_in_process(
        instance=instance, resources=build_resources(str(tmp_path / "data"), str(empty)), raise_on_error=False
    )
    assert not result.success
    runs = {r.job_name: r for r in instance.get_runs()}
    assert set(runs) == {"metacan_all", "frame_refresh"}  # no build after the failed refresh
    refresh = runs["frame_refresh"]
    assert refresh.status == dg.DagsterRunStatus.FAILURE and refresh.tags[WHOLE_GRAPH_TAG] == result.run_id
    error = _step_failure(result).step_failure_data
    assert error.user_failure_data.description.startswith(
        f"frame_refresh run {refresh.run_id} failed after "
    ) and error.user_failure_data.description.endswith(
        "at step(s) ['openalex_inventory']: open that run for its log, fix the cause, then launch metacan_all again "
        "(finished work is kept)"
    )
    link = error.user_failure_data.metadata["frame_refresh run"]
    assert isinstance(link, dg.DagsterRunMetadataValue) and link.run_id == refresh.run_id


def test_metacan_all_refuses_a_bad_setting_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(settings.RECORD_WORKERS_ENV, "0")  # read by work_records, near the end of a run
    instance = dg.DagsterInstance.ephemeral()
    result = defs.resolve_job_def("metacan_all").execute_in_process(
        instance=instance, resources=build_resources(str(tmp_path / "data"), str(tmp_path)), raise_on_error=False
    )
    assert not result.success and [r.job_name for r in instance.get_runs()] == ["metacan_all"]
    assert _step_failure(result).step_failure_data.user_failure_data.description == (
        "metacan_all: METACAN_RECORD_WORKERS='0' must be a whole number from 1 to 64 (worker processes)"
    )
    assert not (tmp_path / "data").exists()


def _sensor_tick(instance: dg.DagsterInstance):
    sensor = defs.resolve_sensor_def("frame_build_after_refresh")
    return sensor.evaluate_tick(dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))


@pytest.fixture()
def openalex_api(openalex_dir):
    """OpenAlex on loopback: the affiliation route's query answers the real lme4 work, the other routes nothing."""
    lme4 = json.loads((openalex_dir / "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json").read_text())
    lme4 = lme4["payload"]["results"][0]
    api = LoopbackOpenAlex(lambda path, q: [lme4] if q.get("filter", "").startswith("authorships.institutions") else [])
    yield api
    api.shutdown()


def test_the_api_refresh_runs_only_when_chosen_and_the_sensor_leaves_a_whole_graph_inventory_alone(
    tmp_path, small_input, openalex_api, monkeypatch
):
    monkeypatch.setenv("OPENALEX_API_KEY", "sk-test-4242")
    monkeypatch.setenv(settings.API_URL_ENV, openalex_api.base_url)
    instance = dg.DagsterInstance.ephemeral()
    resources = build_resources(str(tmp_path / "data"), str(small_input))
    runs = list(whole_graph_runs(instance, resources, through="frame"))
    assert [(name, r.success) for name, r, _ in runs] == [("frame_refresh", True), ("frame_build", True)]
    assert openalex_api.hits == [] and not any(
        k.startswith("window=") for k in instance.get_dynamic_partitions("openalex_partitions")
    )
    assert {r.tags[WHOLE_GRAPH_TAG] for r in instance.get_runs()} == {"metacan run"}
    tick = _sensor_tick(instance)  # the inventory of a whole-graph run: the frame was built by that run's frame_build
    assert tick.run_requests == [] and "part of a whole-graph materialization (metacan run)" in tick.skip_message

    chosen = list(
        whole_graph_runs(instance, resources, through="frame", api_refresh=True, tags={WHOLE_GRAPH_TAG: "r1"})
    )
    assert [(name, r.success) for name, r, _ in chosen] == [
        ("frame_refresh", True),
        ("api_refresh", True),
        ("frame_build", True),
    ]
    assert openalex_api.hits  # bought from the (stub) API, only when chosen
    windows = [k for k in instance.get_dynamic_partitions("openalex_partitions") if k.startswith("window=")]
    assert len(windows) == 1
    built = {m.partition for m in chosen[-1][1].asset_materializations_for_node("frame_parts")}
    assert built == set(instance.get_dynamic_partitions("openalex_partitions")) and windows[0] in built

    # an inventory taken by any other run (the weekly schedule's) still starts a frame build over every partition
    weekly = defs.resolve_job_def("frame_refresh").execute_in_process(instance=instance, resources=resources)
    (request,) = _sensor_tick(instance).run_requests
    keys = instance.get_dynamic_partitions("openalex_partitions")
    assert request.run_key == weekly.run_id and len(keys) == 2
    assert request.tags["dagster/asset_partition_range_start"] == keys[0]
    assert request.tags["dagster/asset_partition_range_end"] == keys[-1]


def test_the_api_refresh_buys_nothing_in_a_run_that_selects_more_than_it(
    tmp_path, small_input, openalex_api, monkeypatch
):
    """The lineage view's "Materialize all" (a run selecting the refresh among other assets) harvests nothing and the
    rest of the run goes on; the refresh materialized on its own, or in its job, harvests."""
    monkeypatch.setenv("OPENALEX_API_KEY", "sk-test-4242")
    monkeypatch.setenv(settings.API_URL_ENV, openalex_api.base_url)
    instance = dg.DagsterInstance.ephemeral()
    resources = build_resources(str(tmp_path / "data"), str(small_input))
    keys = [dg.AssetKey(k) for k in ("canadian_entities", "openalex_api_refresh", "openalex_inventory")]
    wide = dg.materialize(ALL_ASSETS, selection=keys, instance=instance, resources=resources)
    assert wide.success and openalex_api.hits == [] and not (tmp_path / "data" / "openalex_api").exists()
    (refresh,) = wide.asset_materializations_for_node("openalex_api_refresh")
    assert refresh.metadata["harvested"].value is False and refresh.metadata["calls_made"].value == 0
    assert refresh.metadata["why"].value.startswith(
        f"openalex_api_refresh: not harvested: run {wide.run_id} materializes 3 assets"
    )
    assert "launch the job api_refresh, or materialize openalex_api_refresh on its own" in refresh.metadata["why"].value
    assert wide.asset_materializations_for_node("openalex_inventory")  # the run went on
    assert instance.get_dynamic_partitions("openalex_partitions") == ["files"]

    alone = dg.materialize(ALL_ASSETS, selection=keys[1:], instance=instance, resources=resources)
    assert alone.success and openalex_api.hits
    (refresh,) = alone.asset_materializations_for_node("openalex_api_refresh")
    assert "harvested" not in refresh.metadata and refresh.metadata["calls_made"].value == len(openalex_api.hits)
    (window,) = [k for k in instance.get_dynamic_partitions("openalex_partitions") if k != "files"]
    assert window == refresh.metadata["window"].value and (tmp_path / "data" / "openalex_api" / window).is_dir()
    assert defs.resolve_job_def(API_REFRESH_JOB).name == "api_refresh"


def test_the_frame_needs_no_second_build_after_a_run_that_built_it():
    """The sensor's rule: no frame build after the inventory of a whole-graph run, of a run that also materialized the
    frame or of a backfill that does (the lineage view's "Materialize all"); a build after the weekly refresh, the API
    refresh or an inventory alone."""
    instance = dg.DagsterInstance.ephemeral()
    keys = lambda *names: frozenset(dg.AssetKey(n) for n in names)
    run = lambda job, selection=None, **tags: dg.DagsterRun(
        job_name=job, run_id="r-1", asset_selection=selection, tags=tags
    )
    assert frame_built_with(run("frame_refresh", **{WHOLE_GRAPH_TAG: "run-9"}), instance) == (
        "the inventory of run r-1 is part of a whole-graph materialization (run-9), which builds the frame itself"
    )
    everything = keys("canadian_entities", "openalex_inventory", "frame_parts", "frame", "work_pages")
    assert frame_built_with(run("__ASSET_JOB", everything), instance) == (
        "run r-1 materializes the frame after its inventory"
    )
    for backfill_id, targets in (("bf-all", everything), ("bf-parts", keys("openalex_inventory", "frame_parts"))):
        instance.add_backfill(
            PartitionBackfill(
                backfill_id=backfill_id,
                status=BulkActionStatus.REQUESTED,
                from_failure=False,
                tags={},
                backfill_timestamp=0.0,
                asset_selection=sorted(targets),
                serialized_asset_backfill_data=None,
                asset_backfill_data=None,
            )
        )
    first_run = run("__ASSET_JOB", keys("canadian_entities", "openalex_inventory"), **{"dagster/backfill": "bf-all"})
    assert frame_built_with(first_run, instance) == (
        "run r-1 belongs to backfill bf-all, which materializes the frame after its inventory"
    )
    assert (
        frame_built_with(run("__ASSET_JOB", keys("openalex_inventory"), **{"dagster/backfill": "bf-parts"}), instance)
        is None
    )
    assert frame_built_with(run("frame_refresh"), instance) is None
    assert frame_built_with(run("api_refresh"), instance) is None
    assert frame_built_with(run("__ASSET_JOB", keys("openalex_inventory", "frame_parts")), instance) is None
    assert frame_built_with(None, instance) is None
