"""Integration: a work's lineage from the Dagster UI in headless Chromium: the Launchpad of ``work_lineage_report``
opens pre-filled, the run writes the work's table, and its run link opens the run that built the frame.

The world's frame was built as ``metacan run`` builds it, so the sensor ``frame_build_after_refresh`` of ``dagster
dev`` leaves its inventory alone; any run it did start would queue before the job (``max_concurrent_runs: 1``), so
the job never reads the warehouse while a run writes it."""

from __future__ import annotations

import contextlib
import os

import pytest

from metacan_pipeline.instance import DAGSTER_YAML
from metacan_pipeline.publish.lineage_report import EXAMPLE_WORK, JOB_NAME, OP_NAME
from metacan_pipeline_tests.browser import REPO, PageWatch, artifacts_dir
from metacan_pipeline_tests.builders.lineage import lineage_world
from metacan_pipeline_tests.integration.test_ui_browser import LAUNCH_RUN, LOCATION, GraphQL, dagster_dev

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_launchpad_writes_a_works_lineage_whose_run_link_opens_the_run(tmp_path, browser):
    world = lineage_world(tmp_path)
    (world["home"] / "dagster.yaml").write_text(DAGSTER_YAML)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("METACAN_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(world["home"]),
        METACAN_DATA_DIR=str(world["data"]),
        METACAN_OPENALEX_DIR=str(world["inp"]),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    artifacts = artifacts_dir()
    first, frame_run = world["first"], world["frame_run"]
    with dagster_dev(env, tmp_path / "dagster_dev.log") as url:
        gql = GraphQL(url)
        gql("mutation { setNuxSeen }")  # the first-visit dialog would cover the page
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        watch = PageWatch().attach(page)
        try:
            # the Launchpad opens with the example config
            page.goto(f"{url}/locations/{LOCATION}/jobs/{JOB_NAME}/playground")
            page.get_by_text(EXAMPLE_WORK).first.wait_for(timeout=120_000)
            assert OP_NAME in page.inner_text("body")
            page.screenshot(path=str(artifacts / "lineage_launchpad.png"))

            # what the Launch button sends, with this world's work in the config
            params = {
                "selector": {
                    "repositoryLocationName": LOCATION,
                    "repositoryName": "__repository__",
                    "jobName": JOB_NAME,
                },
                "runConfigData": {"ops": {OP_NAME: {"config": {"works": [first]}}}},
                "executionMetadata": {"tags": []},
            }
            launched = gql(LAUNCH_RUN, params=params)["launchRun"]
            assert launched["__typename"] == "LaunchRunSuccess", launched
            run_id = launched["run"]["runId"]
            gql.wait(run_id, JOB_NAME, timeout_s=300)

            # the run's page shows the work's table; its frame-build run link opens the run that built the frame
            page.goto(f"{url}/runs/{run_id}")
            row = page.locator("tr", has_text=first).filter(has_text="[Show Markdown]").first
            row.get_by_text("[Show Markdown]").click(timeout=60_000)
            link = page.locator(f'a[href="/runs/{frame_run}"]').first
            link.wait_for(timeout=30_000)
            dialog = page.inner_text("body")
            assert "frame build" in dialog and world["build"] in dialog and "frame_build_manifest" in dialog
            page.screenshot(path=str(artifacts / "lineage_markdown.png"))
            link.click()
            page.wait_for_url(f"{url}/runs/{frame_run}*", timeout=60_000)
            page.get_by_text("frame_build", exact=True).first.wait_for(timeout=60_000)
            page.get_by_text("RUN_SUCCESS", exact=True).first.wait_for(timeout=60_000)  # its logs loaded
            page.screenshot(path=str(artifacts / "lineage_frame_run.png"))
        except Exception:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(artifacts / "lineage_failure.png"))
            raise
        finally:
            page.close()
    assert watch.page_errors == [], f"uncaught errors in the Dagster UI: {watch.page_errors}"
