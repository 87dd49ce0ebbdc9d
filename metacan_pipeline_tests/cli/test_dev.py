"""``metacan dev`` stops with every process of the Dagster UI on SIGTERM and SIGINT, also when started as a background
job of a non-interactive shell (SIGINT inherited ignored). Real processes: one webserver at a time."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from metacan_pipeline.tables.fields import FIELDS
from metacan_pipeline_tests.stub_teacher.process import die_with_parent

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_background_job() -> None:  # pragma: no cover - runs between fork and exec
    """What ``cmd &`` in a non-interactive shell does to the job (SIGINT ignored), and no orphan if the test dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _in_groups(pgids: set[int]) -> list[str]:
    left = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(p.pid) in pgids and _alive(p):
                left.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:120]}")
    return left


def _started_ui(tmp_path: Path) -> tuple[subprocess.Popen, Path, str]:
    """``metacan dev`` on a free port over a new data dir, as a background job; returns (process, log, URL) once
    the UI answers HTTP and its webserver and daemon are running."""
    port, log = _free_port(), tmp_path / "dev.log"
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "metacan_pipeline.cli",
                "dev",
                "--data-dir",
                str(tmp_path / "data"),
                "--port",
                str(port),
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_as_background_job,
        )
    deadline = time.monotonic() + 240
    while True:
        assert proc.poll() is None, f"metacan dev exited with {proc.returncode} during start-up:\n{log.read_text()}"
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=2.0).status_code == 200:
                cmdlines = [" ".join(p.cmdline()) for p in psutil.Process(proc.pid).children(recursive=True)]
                if any("dagster_webserver" in c for c in cmdlines) and any("dagster._daemon" in c for c in cmdlines):
                    return proc, log, f"http://127.0.0.1:{port}"
        assert time.monotonic() < deadline, f"the UI did not answer within 240s:\n{log.read_text()}"
        time.sleep(1.0)


COLUMNS = """query Columns($path: [String!]!) { assetNodeOrError(assetKey: {path: $path}) { __typename
  ... on AssetNode { metadataEntries { ... on TableSchemaMetadataEntry { label schema { columns { name description } } } } } } }"""


def _ui_columns(url: str, asset: str, timeout_s: float = 120.0) -> dict[str, str]:
    """The column descriptions the UI shows for ``asset`` (its definition's column schema), once its code location
    has loaded."""
    deadline = time.monotonic() + timeout_s
    while True:
        body = httpx.post(f"{url}/graphql", json={"query": COLUMNS, "variables": {"path": [asset]}}, timeout=60).json()
        node = body["data"]["assetNodeOrError"]
        if node["__typename"] == "AssetNode":
            (schema,) = [e["schema"] for e in node["metadataEntries"] if e.get("label") == "dagster/column_schema"]
            return {c["name"]: c["description"] for c in schema["columns"]}
        assert time.monotonic() < deadline, f"{asset} not in the UI after {timeout_s:.0f}s: {body}"
        time.sleep(2.0)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_metacan_dev_started_in_the_background_stops_with_every_process_of_the_ui(tmp_path, signum):
    proc, log, url = _started_ui(tmp_path)
    tree, pgids = [], set()
    try:
        # the UI it serves shows each catalog column with its description from the field dictionary
        assert _ui_columns(url, "sample_design")["design_weight"] == FIELDS["design_weight"].description
        tree = psutil.Process(proc.pid).children(recursive=True)
        pgids = {os.getpgid(p.pid) for p in [psutil.Process(proc.pid), *tree]}
        assert len(tree) >= 3  # dagster dev, its webserver and daemon (and code servers)
        os.kill(proc.pid, signum)
        assert proc.wait(timeout=30) == 0, log.read_text()
        deadline = time.monotonic() + 5  # a process killed last may take a moment to be reaped
        while (left := [p for p in tree if _alive(p)] + _in_groups(pgids)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left == [], log.read_text()
        text = log.read_text()
        assert f"metacan dev: {signal.Signals(signum).name} received" in text and "metacan dev: stopped" in text
    finally:  # whatever a failure left behind
        for pgid in {proc.pid, *pgids}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.kill()


def test_metacan_dev_on_a_port_in_use_says_what_to_do_and_starts_nothing(tmp_path):
    """A port already listened on stops ``metacan dev`` before any Dagster process starts (a second UI on one
    instance would run a second daemon)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "metacan_pipeline.cli", "dev", "--port", str(port), "--data-dir", str(tmp_path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.returncode == 1
    assert f"metacan dev: port {port} on 127.0.0.1 is in use" in out.stderr and "--port" in out.stderr
    assert "Dagster instance" not in out.stdout and not (tmp_path / "dagster_home").exists()
