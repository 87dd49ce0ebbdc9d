"""Integration: `dagster dev` in headless Chromium materializes the graph and shows it, with stub registry teachers."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from metacan_pipeline.instance import DAGSTER_YAML
from metacan_pipeline_tests.browser import REPO, PageWatch, artifacts_dir
from metacan_pipeline_tests.stub_teacher.app import DEFAULT_MODEL
from metacan_pipeline_tests.stub_teacher.process import die_with_parent, run_stub

pytestmark = [pytest.mark.browser, pytest.mark.slow]


LOCATION = "metacan_pipeline"  # workspace.yaml's location_name
RUN_DONE = {"SUCCESS", "FAILURE", "CANCELED"}

LAUNCH_RUN = """
mutation LaunchRun($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message stack }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
    ... on InvalidStepError { invalidStepKey }
    ... on InvalidOutputError { stepKey invalidOutputName }
    ... on RunConflict { message }
    ... on UnauthorizedError { message }
    ... on PresetNotFoundError { message }
    ... on ConflictingExecutionParamsError { message }
    ... on NoModeProvidedError { message }
  }
}"""
RUN_STATUS = """query RunStatus($runId: ID!) { runOrError(runId: $runId) { __typename ... on Run { status } ... on PythonError { message } } }"""
RUN_ERRORS = """
query RunErrors($runId: ID!) {
  logsForRun(runId: $runId) {
    __typename
    ... on EventConnection { events { __typename
      ... on MessageEvent { message level stepKey }
      ... on ErrorEvent { error { message stack } } } }
    ... on PythonError { message }
  }
}"""
PARTITION_KEYS = (
    """{ assetNodeOrError(assetKey: {path: ["frame_parts"]}) { __typename ... on AssetNode { partitionKeys } } }"""
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _registry(path: Path, base_url: str) -> Path:
    """A teacher registry with both required teachers on the stub (gemma over the frame, codex the sample)."""
    path.write_text(
        "".join(
            f'[teachers.{name}]\nbase_url = "{base_url}"\nmodel = "{DEFAULT_MODEL}"\nrecord_view = "{view}"\ncoverage = "{coverage}"\n'
            f"works_per_call = 5\n\n"
            for name, view, coverage in (("gemma", "title_only", "all"), ("codex", "title_abstract", "sample"))
        )
    )
    return path


@contextlib.contextmanager
def dagster_dev(env: dict[str, str], log_path: Path, startup_timeout_s: float = 180.0) -> Iterator[str]:
    """``dagster dev -w workspace.yaml`` on a free port; yields the webserver's URL once /server_info
    answers. The process leads its own group, which is stopped (SIGTERM, then SIGKILL) on the way out."""
    port = _free_port()
    dagster = Path(sys.executable).with_name("dagster")
    argv = ([str(dagster)] if dagster.exists() else [sys.executable, "-m", "dagster"]) + [
        "dev",
        "-w",
        "workspace.yaml",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"dagster dev exited with code {proc.returncode} during start-up:\n{_tail(log_path)}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/server_info", timeout=2.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"dagster dev did not answer {url}/server_info within {startup_timeout_s:.0f}s:\n{_tail(log_path)}"
                )
            time.sleep(0.5)
        yield url
    finally:
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the process group, wait ``grace_s`` for its leader, then SIGKILL whatever is left of the group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the webserver, daemon and code servers of a dev that lingered
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def _tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"


class GraphQL:
    def __init__(self, url: str) -> None:
        self.url = f"{url}/graphql"

    def __call__(self, query: str, **variables) -> dict:
        response = httpx.post(self.url, json={"query": query, "variables": variables}, timeout=120.0)
        assert response.status_code == 200, (
            f"GraphQL HTTP {response.status_code} for {variables}: {response.text[:4000]}"
        )
        body = response.json()
        assert not body.get("errors"), f"GraphQL errors for {variables}: {body['errors']}"
        return body["data"]

    def launch(self, job: str, tags: dict[str, str] | None = None) -> str:
        params = {
            "selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__", "jobName": job},
            "runConfigData": {},
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]},
        }
        result = self(LAUNCH_RUN, params=params)["launchRun"]
        assert result["__typename"] == "LaunchRunSuccess", f"launchRun {job}: {result}"
        return result["run"]["runId"]

    def wait(self, run_id: str, what: str, timeout_s: float = 900.0) -> None:
        """Poll until the run ends; fail with its error events unless it succeeded."""
        deadline = time.monotonic() + timeout_s
        while True:
            run = self(RUN_STATUS, runId=run_id)["runOrError"]
            assert run["__typename"] == "Run", f"{what} {run_id}: {run}"
            if run["status"] in RUN_DONE:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"{what} run {run_id} still {run['status']} after {timeout_s:.0f}s")
            time.sleep(1.0)
        if run["status"] != "SUCCESS":
            pytest.fail(f"{what} run {run_id} ended {run['status']}:\n" + "\n".join(self.errors(run_id)))

    def errors(self, run_id: str) -> list[str]:
        logs = self(RUN_ERRORS, runId=run_id)["logsForRun"]
        out = []
        for e in logs.get("events", []):
            if e.get("error"):
                out.append(
                    f"[{e['__typename']} {e.get('stepKey')}] {e['error']['message']}\n{''.join(e['error'].get('stack') or [])}"
                )
            elif e.get("level") in ("ERROR", "CRITICAL"):
                out.append(f"[{e['__typename']} {e.get('stepKey')}] {e.get('message')}")
        return out or [f"(no error events; logsForRun answered {logs.get('__typename')})"]


def _env(tmp_path: Path, data: Path, openalex: Path, teachers: Path, openalex_api_url: str) -> dict[str, str]:
    home = tmp_path / "dagster_home"
    home.mkdir()
    # Telemetry off (no calls out); one run at a time, since the asset sensor frame_build_after_refresh
    # starts a frame_build run after each inventory, and it would otherwise build the frame beside ours.
    (home / "dagster.yaml").write_text(DAGSTER_YAML)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("METACAN_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        METACAN_DATA_DIR=str(data),
        METACAN_OPENALEX_DIR=str(openalex),
        METACAN_TEACHERS_FILE=str(teachers),
        METACAN_OPENALEX_API_URL=openalex_api_url,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    return env


def test_dagster_ui_materializes_the_graph_and_shows_it(tmp_path, small_input, browser, openalex_api):
    artifacts = artifacts_dir()
    data = tmp_path / "data"
    with run_stub() as (stub_url, _):
        env = _env(tmp_path, data, small_input, _registry(tmp_path / "teachers.toml", stub_url), openalex_api.base_url)
        with dagster_dev(env, tmp_path / "dagster_dev.log") as url:
            gql = GraphQL(url)
            gql.wait(gql.launch("frame_refresh"), "frame_refresh")
            keys = gql(PARTITION_KEYS)["assetNodeOrError"]["partitionKeys"]
            assert keys, "frame_refresh registered no openalex_partitions"
            gql.wait(
                gql.launch(
                    "metacan_build",
                    {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
                ),
                "metacan_build",
            )
            gql("mutation { setNuxSeen }")  # the first-visit "Join the Dagster community" dialog would cover the page

            page = browser.new_page(viewport={"width": 1920, "height": 1080})
            watch = PageWatch().attach(page)
            try:
                _asset_graph(page, url, artifacts / "asset_graph.png")
                _frame_row_count(page, url, data)
                _student_plot(page, url, artifacts / "student_heads_plot.png")
                page.goto(f"{url}/automation")
                page.get_by_text("weekly_frame_refresh", exact=True).first.wait_for(timeout=60_000)
                assert page.get_by_text("weekly_api_refresh", exact=True).first.is_visible()
            except Exception:
                with contextlib.suppress(Exception):
                    page.screenshot(path=str(artifacts / "ui_failure.png"))
                raise
            finally:
                page.close()
            assert watch.page_errors == [], f"uncaught errors in the Dagster UI: {watch.page_errors}"
    _work_page(browser, data, artifacts / "work_page.png")


def _asset_graph(page, url: str, shot: Path) -> None:
    """The global asset lineage with every group expanded (Alt+E, kept in local storage), reloaded so
    that it zooms to fit the expanded graph. The graph of five groups is taller than a 1080-pixel window at the
    smallest zoom the UI allows (the ingestion group fell below the fold), so this page gets a taller window."""
    page.set_viewport_size({"width": 1920, "height": 2400})
    page.goto(f"{url}/asset-groups")
    page.get_by_text("ingestion").first.wait_for(timeout=60_000)
    page.keyboard.press("Alt+e")  # "Expand all groups"
    page.get_by_text("work_pages", exact=True).first.wait_for(timeout=30_000)
    page.reload()
    for name in ("frame", "frame_parts", "sample_design", "student_heads", "predictions", "work_records", "work_pages"):
        node = page.get_by_text(name, exact=True).first
        node.wait_for(timeout=30_000)
        assert node.is_visible(), f"asset {name} is not visible in the asset graph"
    page.wait_for_timeout(1000)  # the zoom-to-fit animation
    page.screenshot(path=str(shot))
    page.set_viewport_size({"width": 1920, "height": 1080})


def _frame_row_count(page, url: str, data: Path) -> None:
    """The frame's asset page shows the row count of the last materialization (dagster/row_count)."""
    from metacan_pipeline.storage import MetacanStorage

    with MetacanStorage(data_dir=str(data)).connect(read_only=True) as con:
        rows = con.execute("SELECT count(*) FROM frame").fetchone()[0]
    assert rows > 0
    page.goto(f"{url}/assets/frame")
    page.get_by_text("Row count", exact=True).first.wait_for(timeout=60_000)
    text = page.inner_text("body")
    assert re.search(rf"Row count\s+{rows}\b", text), f"frame page does not show 'Row count {rows}':\n{text[:2000]}"
    assert "Columns" in text and "invisible_to_affiliation_only" in text, "frame page shows no column schema"


def _student_plot(page, url: str, shot: Path) -> None:
    """The reliability plot of student_heads (a PNG in markdown metadata) loads in the UI."""
    page.goto(f"{url}/assets/student_heads?view=events")
    row = page.locator("tr", has_text="reliability_plot_codex")
    row.get_by_text("[Show Markdown]").click(timeout=60_000)
    img = page.locator('img[src^="data:image/png"]').first
    img.wait_for(timeout=30_000)
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=img.element_handle(), timeout=30_000)
    page.screenshot(path=str(shot))
    page.keyboard.press("Escape")


def _work_page(browser, data: Path, shot: Path) -> None:
    """The lme4 work page, opened from disk as a reader would (file://): its abstract came live from (a
    loopback stub of) OpenAlex, and its two collapsed sections open from the keyboard (Tab to the
    summary, Enter), as a reader without a mouse would open them."""
    pages = sorted((data / "site").glob("works/*/W1951724000.html"))
    assert len(pages) == 1, f"no single lme4 page under {data / 'site'}: {pages}"
    path = pages[0]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = PageWatch().attach(page)
    try:
        page.goto(path.as_uri(), wait_until="load")
        text = page.inner_text("body")
        assert "W1951724000" in text and "Maximum likelihood or restricted maximum likelihood" in text
        assert "Fetched live from OpenAlex" in text
        summaries = page.locator("summary")
        assert summaries.count() == 2
        for i in range(summaries.count()):
            for _ in range(60):  # Tab through the page's links until the summary has the focus
                page.keyboard.press("Tab")
                if page.evaluate("i => document.activeElement === document.querySelectorAll('summary')[i]", i):
                    break
            else:
                raise AssertionError(f"summary {i} never takes the keyboard focus")
            assert page.evaluate("i => document.querySelectorAll('details')[i].open", i) is False
            page.keyboard.press("Enter")
            assert page.evaluate("i => document.querySelectorAll('details')[i].open", i) is True
        text = page.inner_text("body")
        assert "Distilled classifier scores by category" in text and "Teacher calls behind the direct labels" in text
        page.screenshot(path=str(shot), full_page=True)
    finally:
        page.close()
    assert watch.page_errors == [] and watch.console_errors == [], (
        f"{path.name}: {watch.page_errors + watch.console_errors}"
    )
