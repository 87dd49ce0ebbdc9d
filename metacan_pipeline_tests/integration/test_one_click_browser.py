"""Integration: in `dagster dev`, one click on "Launch Run" in the Launchpad of ``metacan_all`` (headless Chromium, no
partition chosen, no config written) materializes the whole default graph with stub registry teachers, and the API
refresh, which buys OpenAlex calls, does not run; the labels' asset page then shows the warning check that says their
teacher is not qualified."""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

import pytest

from metacan_pipeline.frame.schedules import WHOLE_GRAPH_TAG
from metacan_pipeline_tests.browser import PageWatch
from metacan_pipeline_tests.integration.test_ui_browser import LOCATION, GraphQL, _env, _registry, dagster_dev
from metacan_pipeline_tests.stub_teacher.process import run_stub

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUNS_TAGGED = """
query Tagged($key: String!, $value: String!) {
  runsOrError(filter: {tags: [{key: $key, value: $value}]}) { __typename ... on Runs { results { runId jobName status } } }
}"""
RUNS_OF = """query RunsOf($job: String!) { runsOrError(filter: {pipelineName: $job}) { ... on Runs { results { runId } } } }"""
LAST_MATERIALIZATION = """
query Last($path: [String!]!) { assetNodeOrError(assetKey: {path: $path}) { __typename
  ... on AssetNode { assetMaterializations(limit: 1) { runId } } } }"""
#: Where the real data is (the pilot labels of the qualification test): passed on to `dagster dev` when set, so that
#: a checkout that is not beside ``shared/`` (a git worktree) finds it.
DATA_LOCATIONS = ("METACAN_SHARED_DIR", "METACAN_PILOT_DIR")
#: The graph's last assets: each materialized by the build run the one click launched.
LAST_ASSETS = ("work_records", "work_pages", "site_database")


CHECKS = """
query Checks($path: [String!]!) { assetNodeOrError(assetKey: {path: $path}) { ... on AssetNode {
  assetChecksOrError { ... on AssetChecks { checks { name
    executionForLatestMaterialization { status evaluation { severity success } } } } } } } }"""
SENSOR_SKIPS = """
{ sensorOrError(sensorSelector: {repositoryName: "__repository__", repositoryLocationName: "metacan_pipeline",
  sensorName: "frame_build_after_refresh"}) { __typename
  ... on Sensor { sensorState { ticks(limit: 50, statuses: [SKIPPED]) { skipReason } } } } }"""
REFRESH_METADATA = """
{ assetNodeOrError(assetKey: {path: ["openalex_api_refresh"]}) { ... on AssetNode { assetMaterializations(limit: 1) {
  metadataEntries { label ... on BoolMetadataEntry { boolValue } ... on TextMetadataEntry { text } } } } } }"""


def _sensor_skipped(gql: GraphQL, reasons: list[str], timeout_s: float = 180.0) -> None:
    """Wait for the daemon's ticks of frame_build_after_refresh (one a minute) to have skipped with every reason."""
    deadline = time.monotonic() + timeout_s
    while True:
        sensor = gql(SENSOR_SKIPS)["sensorOrError"]
        assert sensor["__typename"] == "Sensor", sensor
        skipped = [t["skipReason"] or "" for t in sensor["sensorState"]["ticks"]]
        missing = [r for r in reasons if not any(r in text for text in skipped)]
        if not missing:
            return
        assert time.monotonic() < deadline, f"frame_build_after_refresh never skipped with {missing}: {skipped}"
        time.sleep(5.0)


def _refresh_metadata(gql: GraphQL) -> dict:
    (materialization,) = gql(REFRESH_METADATA)["assetNodeOrError"]["assetMaterializations"]
    return {e["label"]: e.get("boolValue", e.get("text")) for e in materialization["metadataEntries"]}


def _materialized_by(gql: GraphQL, asset: str) -> str | None:
    node = gql(LAST_MATERIALIZATION, path=[asset])["assetNodeOrError"]
    assert node["__typename"] == "AssetNode", f"{asset}: {node}"
    return node["assetMaterializations"][0]["runId"] if node["assetMaterializations"] else None


def test_one_click_in_the_launchpad_runs_the_whole_graph_without_the_api_refresh(
    tmp_path, small_input, browser, openalex_api
):
    data = tmp_path / "data"
    with run_stub() as (stub_url, _):
        env = _env(tmp_path, data, small_input, _registry(tmp_path / "teachers.toml", stub_url), openalex_api.base_url)
        env.update({k: os.environ[k] for k in DATA_LOCATIONS if k in os.environ})
        with dagster_dev(env, tmp_path / "dagster_dev.log") as url:
            gql = GraphQL(url)
            gql("mutation { setNuxSeen }")  # the first-visit "Join the Dagster community" dialog would cover the page
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            watch = PageWatch().attach(page)
            try:
                run_id = _launch_from_the_launchpad(page, url, tmp_path)
                t0 = time.monotonic()
                gql.wait(run_id, "metacan_all", timeout_s=3600.0)
                elapsed = time.monotonic() - t0
                launched = gql(RUNS_TAGGED, key=WHOLE_GRAPH_TAG, value=run_id)["runsOrError"]["results"]
                by_job = {r["jobName"]: r for r in launched}
                assert sorted(by_job) == ["frame_refresh", "metacan_build"] and len(launched) == 2, launched
                assert {r["status"] for r in launched} == {"SUCCESS"}
                build = by_job["metacan_build"]["runId"]
                assert {a: _materialized_by(gql, a) for a in LAST_ASSETS} == dict.fromkeys(LAST_ASSETS, build)
                assert _materialized_by(gql, "openalex_inventory") == by_job["frame_refresh"]["runId"]
                # the API refresh never ran: no materialization, no route query to (the stub of) OpenAlex, no window
                assert _materialized_by(gql, "openalex_api_refresh") is None
                assert [h for h in openalex_api.hits if not h.get("filter", "").startswith("ids.openalex")] == []
                assert not list((data / "openalex_api").glob("window=*"))
                _follow_the_build_link(page, url, run_id, build, tmp_path)
                _see_the_qualification_warning(page, gql, url, tmp_path)
                again = _materialize_all_from_the_lineage_view(page, gql, url, tmp_path)
                gql.wait(again, "Materialize all", timeout_s=3600.0)
                assert {a: _materialized_by(gql, a) for a in LAST_ASSETS} == dict.fromkeys(LAST_ASSETS, again)
                # there the refresh is selected, yet it buys nothing: a materialization that says so, no route query
                assert _materialized_by(gql, "openalex_api_refresh") == again
                assert _refresh_metadata(gql)["harvested"] is False
                assert [h for h in openalex_api.hits if not h.get("filter", "").startswith("ids.openalex")] == []
                assert not list((data / "openalex_api").glob("window=*"))
                # neither inventory started a second frame build: the sensor skips them (the last one's tick is
                # awaited; the first one's may be folded into it when the daemon is slow, so no frame_build run at all)
                _sensor_skipped(gql, [f"run {again} materializes the frame after its inventory"])
                assert gql(RUNS_OF, job="frame_build")["runsOrError"]["results"] == []
            except Exception:
                with contextlib.suppress(Exception):
                    page.screenshot(path=str(tmp_path / "one_click_failure.png"))
                raise
            finally:
                page.close()
            assert watch.page_errors == [], f"uncaught errors in the Dagster UI: {watch.page_errors}"
    print(f"one-click whole-graph run: {elapsed:.0f}s from launch to success")


def _launch_from_the_launchpad(page, url: str, shots: Path) -> str:
    """Open the Launchpad of metacan_all, click "Launch Run" with the config as the UI offers it; returns the run id
    of the run page the UI opens."""
    page.goto(f"{url}/locations/{LOCATION}/jobs/metacan_all/playground")
    launch = page.get_by_role("button", name="Launch Run")
    launch.wait_for(timeout=120_000)
    page.wait_for_timeout(1500)  # the config editor's validation
    assert launch.is_enabled(), "Launch Run is disabled in the Launchpad of metacan_all"
    page.screenshot(path=str(shots / "one_click_launchpad.png"))
    launch.click()
    page.wait_for_url(re.compile(r".*/runs/[0-9a-f-]{36}.*"), timeout=120_000)
    return re.search(r"/runs/([0-9a-f-]{36})", page.url).group(1)


def _follow_the_build_link(page, url: str, run_id: str, build: str, shots: Path) -> None:
    """The finished one-click run links the build run it launched; the link opens that run."""
    page.goto(f"{url}/runs/{run_id}")
    page.get_by_text("RUN_SUCCESS").first.wait_for(timeout=120_000)
    page.get_by_text(f"metacan_build run {build} succeeded", exact=False).first.wait_for(timeout=60_000)
    page.screenshot(path=str(shots / "one_click_run.png"))
    page.locator(f'a[href$="/runs/{build}"]').first.click(timeout=60_000)
    page.wait_for_url(re.compile(rf".*/runs/{build}.*"), timeout=60_000)
    page.get_by_text("RUN_SUCCESS").first.wait_for(timeout=120_000)
    page.screenshot(path=str(shots / "one_click_build_run.png"))


def _see_the_qualification_warning(page, gql: GraphQL, url: str, shots: Path) -> None:
    """The stub teachers are not qualified (too few reference cases): each one's direct labels carry a failed
    WARN-severity check ``<teacher>_qualified``, in GraphQL and on the asset's checks tab."""
    for teacher in ("gemma", "codex"):
        node = gql(CHECKS, path=[f"direct_labels_{teacher}"])["assetNodeOrError"]
        checks = {c["name"]: c["executionForLatestMaterialization"] for c in node["assetChecksOrError"]["checks"]}
        execution = checks[f"{teacher}_qualified"]
        assert execution["status"] == "FAILED", execution
        assert execution["evaluation"] == {"severity": "WARN", "success": False}, execution
    page.goto(f"{url}/assets/direct_labels_gemma?view=checks")
    page.get_by_text("gemma_qualified").first.wait_for(timeout=60_000)
    page.screenshot(path=str(shots / "qualification_warning.png"))


def _materialize_all_from_the_lineage_view(page, gql: GraphQL, url: str, shots: Path) -> str:
    """ "Materialize all" in the global lineage view, "All" partitions (the dialog opens on none), launch; returns the
    id of the run it launched (one partition: one run of every asset)."""
    page.goto(f"{url}/asset-groups")
    page.get_by_text("ingestion").first.wait_for(timeout=60_000)
    page.get_by_role("button", name="Materialize all").first.click(timeout=60_000)
    dialog = page.locator("[role=dialog]").first
    dialog.get_by_text("0 partitions").wait_for(timeout=60_000)  # Dagster's default for dynamic partitions
    dialog.get_by_role("button", name="All", exact=True).click()
    dialog.get_by_text("1 partition", exact=True).wait_for(timeout=30_000)
    launch = dialog.get_by_role("button", name="Launch 1 run")
    assert launch.is_enabled()
    page.screenshot(path=str(shots / "materialize_all_dialog.png"))
    launch.click()
    deadline = time.monotonic() + 60
    while not (runs := gql(RUNS_OF, job="__ASSET_JOB")["runsOrError"]["results"]):
        assert time.monotonic() < deadline, "Materialize all launched no run"
        time.sleep(1.0)
    (run,) = runs
    return run["runId"]
