"""Tests of metacan_pipeline.teachers.assets: the direct_labels_<teacher> factory, its keys, dependencies and
checks; an interrupted teacher step stops the run (no retry) and a re-run buys only what it lacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import duckdb
import httpx
import pytest

from metacan_pipeline_tests.stub_teacher.process import run_stub


def test_the_role_assets_are_the_teachers_the_registry_names_and_depend_on_the_frame_by_key():
    """census_direct_labels / sample_direct_labels follow [roles]; each direct-label asset reads frame (and the
    sample teacher sample_design) by key, and its coverage check is attached to the table it reads."""
    import dagster as dg

    from metacan_pipeline.teachers.assets import ROLES, census_direct_labels, sample_direct_labels
    from metacan_pipeline.teachers.checks import TEACHER_CHECKS
    from metacan_pipeline.teachers.core.registry import direct_labels_table, load_roles

    assert ROLES == load_roles() == {"census": "gemma", "sample": "codex"}
    assert (
        census_direct_labels.key
        == dg.AssetKey(direct_labels_table(ROLES["census"]))
        == dg.AssetKey("direct_labels_gemma")
    )
    assert {k.path[-1] for k in census_direct_labels.asset_deps[census_direct_labels.key]} == {"frame"}
    assert {k.path[-1] for k in sample_direct_labels.asset_deps[sample_direct_labels.key]} == {"frame", "sample_design"}
    assert {spec.asset_key.path[-1] for check in TEACHER_CHECKS for spec in check.check_specs} == {
        "direct_labels_gemma",
        "direct_labels_codex",
    }


INTERRUPTED_RUN = """
import json, sys
import dagster as dg
from metacan_pipeline.cli.run import interrupt_on_sigterm
from metacan_pipeline.resources import OpenAlexFiles
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.teachers.assets import census_direct_labels
from metacan_pipeline.teachers.calling.server import EmbeddedLlamaServer
from metacan_pipeline_tests.builders.common import OPENALEX
from metacan_pipeline_tests.builders.site import site_world
url, data, fresh = sys.argv[1], sys.argv[2], sys.argv[3] == "fresh"
storage = MetacanStorage(data_dir=data)
if fresh:
    site_world(storage, OPENALEX, n=60)
interrupt_on_sigterm()  # as metacan run does
print("ready", flush=True)
result = dg.materialize(
    [census_direct_labels],
    resources={"storage": storage, "openalex": OpenAlexFiles(input_dirs=[str(OPENALEX)]),
               "llm_server": EmbeddedLlamaServer(log_dir=data)},
    run_config={"ops": {"direct_labels_gemma": {"config": {"base_url": url, "concurrency": 1, "works_per_call": 1}}}},
    instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
)
print(json.dumps({"success": result.success, "events": [e.event_type_value for e in result.all_events]}), flush=True)
"""


def _stats(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/stats").json()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_an_interrupted_teacher_step_stops_the_run_and_a_rerun_buys_only_what_it_lacks(tmp_path, sig):
    """Dagster's RetryPolicy retries an interrupted step: a teacher step sent SIGTERM went on labelling 5 s later.
    Now the run stops (no STEP_UP_FOR_RETRY), keeps the labels it stored, and the next run sends the rest."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def run(url: str, mode: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-c", INTERRUPTED_RUN, url, str(tmp_path), mode],
            cwd=repo,
            stdout=subprocess.PIPE,
            text=True,
        )

    with run_stub(latency_ms=150) as (url, _):
        child = run(url, "fresh")
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 120
        while _stats(url)["calls"] < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
        child.send_signal(sig)
        out, _ = child.communicate(timeout=60)
        first = json.loads(out.strip().splitlines()[-1])
        sent_by_first = _stats(url)["works"]
        time.sleep(1.0)  # no retry 5 s later either: nothing more reaches the teacher
        assert _stats(url)["works"] == sent_by_first
        assert first["success"] is False and "STEP_UP_FOR_RETRY" not in first["events"]
        assert "STEP_FAILURE" in first["events"] and 5 <= sent_by_first < 60  # the 6th call was in flight
        with duckdb.connect(str(tmp_path / "metacan.duckdb"), read_only=True) as con:
            kept = con.execute(
                "SELECT count(DISTINCT work_id) FROM teacher_labels WHERE status = 'labelled'"
            ).fetchone()[0]
        assert sent_by_first - 1 <= kept <= sent_by_first  # at most the call in flight was lost

        second = run(url, "again")
        out, _ = second.communicate(timeout=120)
        assert json.loads(out.strip().splitlines()[-1])["success"] is True
        assert _stats(url)["works"] - sent_by_first == 60 - kept  # only the works without a stored label


def test_a_failing_teacher_step_is_retried_but_an_interrupt_or_a_config_failure_is_not():
    import dagster as dg
    from dagster._core.errors import DagsterExecutionInterruptedError

    from metacan_pipeline.teachers.calling.retry import retried_unless_interrupted

    with pytest.raises(dg.RetryRequested) as retry:
        with retried_unless_interrupted(0):
            raise httpx.ConnectError("the teacher server went away")
    assert retry.value.max_retries == 2 and 0 <= retry.value.seconds_to_wait <= 10  # 5 s +- 5 s of jitter
    assert isinstance(retry.value.__cause__, httpx.ConnectError)
    with pytest.raises(dg.RetryRequested) as retry:
        with retried_unless_interrupted(1):
            raise OSError("disk full")
    assert 10 <= retry.value.seconds_to_wait <= 20  # the second retry: (2^2 - 1) x 5 s +- 5 s
    for stop in (
        DagsterExecutionInterruptedError(),
        KeyboardInterrupt(),
        dg.Failure("bad config", allow_retries=False),
    ):
        with pytest.raises(type(stop)):
            with retried_unless_interrupted(0):
                raise stop
    with pytest.raises(KeyboardInterrupt):  # a signal during a DuckDB query: not retried
        with retried_unless_interrupted(0):
            raise duckdb.InterruptException("Query interrupted")


def test_the_eta_is_the_pace_since_the_first_answer_not_since_a_cold_start():
    import logging

    from metacan_pipeline.teachers.calling.sending import Progress
    from metacan_pipeline.teachers.core.stats import LabelRunStats

    progress = Progress("gemma", 100, LabelRunStats(), logging.getLogger("eta"), every_s=1e9)
    assert progress.eta(time.monotonic()) == "after the first answer"
    progress.t0 -= 300  # the first answer took 300 s (a cold server)
    progress.update(10)
    start = progress.first[0]
    assert progress.eta(start + 5) == "after the next answer"
    progress.update(10)  # 10 more works...
    assert progress.eta(start + 20) == "160s"  # ...in 20 s: 80 left at 0.5 works/s, not 80 x 300 s / 20
    progress.close()


def test_an_error_an_interrupt_caused_stops_the_step_instead_of_retrying_it():
    """A signal during a DuckDB query can surface as ``RuntimeError('Query interrupted')`` whose context is Dagster's
    interrupt: retrying it would go on labelling after Ctrl-C."""
    import dagster as dg
    from dagster._core.errors import DagsterExecutionInterruptedError

    from metacan_pipeline.teachers.calling.retry import retried_unless_interrupted

    def query_interrupted_by_dagster():
        try:
            raise DagsterExecutionInterruptedError()
        except DagsterExecutionInterruptedError:
            raise RuntimeError("Query interrupted") from None  # no cause: the interrupt stays its context

    for body in (query_interrupted_by_dagster, lambda: (_ for _ in ()).throw(RuntimeError("Query interrupted"))):
        with pytest.raises(KeyboardInterrupt) as stopped:
            with retried_unless_interrupted(0):
                body()
        assert isinstance(stopped.value.__cause__, RuntimeError)
    with pytest.raises(dg.RetryRequested):  # another RuntimeError is still a failure to retry
        with retried_unless_interrupted(0):
            raise RuntimeError("Query failed: disk I/O error")
