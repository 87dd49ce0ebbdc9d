"""The stub as a process: ``main`` (the command line, serving on uvicorn with one or several workers), ``run_stub`` (a
subprocess a test or benchmark drives, always stopped) and ``stop_stub``."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import httpx
import uvicorn
from uvicorn.supervisors import Multiprocess

from metacan_pipeline_tests.stub_teacher.app import DEFAULT_MODEL, StubOptions, StubTeacher
from metacan_pipeline_tests.stub_teacher.counters import STATE_BYTES

REPO = Path(__file__).resolve().parents[2]
MODULE = "metacan_pipeline_tests.stub_teacher"  # run with ``python -m``
DESCRIPTION = "A local OpenAI-compatible STUB teacher for tests and benchmarks (no model: labels come from a hash)."
ANNOUNCE = "STUB_URL"


_ENV = "METACAN_STUB_TEACHER"


def die_with_parent() -> None:  # pragma: no cover - runs between fork and exec, or in a worker
    """Linux: SIGKILL this process when its parent dies (even by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _worker_app() -> StubTeacher:
    """The app factory of a ``--workers N`` worker (options from the environment the supervisor set)."""
    spec = json.loads(os.environ[_ENV])
    die_with_parent()
    if os.getppid() != spec["supervisor_pid"]:  # the supervisor died before prctl
        os._exit(1)
    return StubTeacher(StubOptions(**spec["options"]), state_path=spec["state_path"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=DESCRIPTION)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (announced on stdout)")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--latency-ms", type=float, default=0.0, help="asyncio.sleep per call (simulated model time)")
    ap.add_argument("--burst-429", type=int, default=0, help="the first N chat calls get 429 + Retry-After: 0")
    ap.add_argument("--reject-json-schema", action="store_true", help="HTTP 400 to response_format json_schema")
    ap.add_argument("--honour-max-tokens", action="store_true", help="cut replies longer than max_tokens*4 chars")
    ap.add_argument("--metaresearch-ids", default="", help="file of work ids to label metaresearch (all others: not)")
    ap.add_argument("--fail-status", type=int, default=0, help="answer every chat call with this HTTP status")
    ap.add_argument("--hang-after", type=int, default=0, help="calls after the first N (per worker) never answer")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--log-level", default="warning")
    args = ap.parse_args(argv)
    options = StubOptions(
        model=args.model,
        latency_ms=args.latency_ms,
        burst_429=args.burst_429,
        reject_json_schema=args.reject_json_schema,
        honour_max_tokens=args.honour_max_tokens,
        metaresearch_ids=args.metaresearch_ids,
        fail_status=args.fail_status,
        hang_after=args.hang_after,
    )
    common = dict(
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level=args.log_level,
        timeout_graceful_shutdown=2,
        backlog=4096,
    )
    state_path = None
    if args.workers <= 1:
        config = uvicorn.Config(StubTeacher(options), **common)
    else:
        fd, state_path = tempfile.mkstemp(prefix="metacan-stub-", suffix=".counters")
        os.ftruncate(fd, STATE_BYTES)
        os.close(fd)
        os.environ[_ENV] = json.dumps(
            {"options": asdict(options), "state_path": state_path, "supervisor_pid": os.getpid()}
        )
        config = uvicorn.Config(f"{__name__}:_worker_app", factory=True, workers=args.workers, **common)
    sock = config.bind_socket()
    sock.listen(config.backlog)  # listening from here on: connections queue until a worker accepts
    print(f"{ANNOUNCE} http://{args.host}:{sock.getsockname()[1]}/v1", flush=True)
    try:
        if args.workers <= 1:
            uvicorn.Server(config).run(sockets=[sock])
        else:
            Multiprocess(config, sockets=[sock]).run()
    finally:
        if state_path:
            with contextlib.suppress(OSError):
                os.unlink(state_path)


_RUN_OPTIONS = {
    "model",
    "metaresearch_ids",
    "latency_ms",
    "burst_429",
    "reject_json_schema",
    "honour_max_tokens",
    "fail_status",
    "hang_after",
    "workers",
    "host",
    "port",
    "log_level",
}


class StubStartError(RuntimeError):
    pass


@contextlib.contextmanager
def run_stub(startup_timeout_s: float = 30.0, **options) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start the stub as a subprocess; yield ``(base_url, process)`` once ``/v1/models`` answers; always stop it.

    ``options`` are the command-line flags in Python spelling (``latency_ms=20, burst_429=3,
    reject_json_schema=True, workers=2, fail_status=503, ...``); ``port`` (default 0, a free one) lets a test
    start a server again where one it killed listened. The process leads its own process group (stopped with
    SIGTERM then SIGKILL to the group) and gets SIGKILL from the kernel if the caller dies. A test may
    SIGKILL ``process`` itself; leaving the block is still clean.
    """
    unknown = set(options) - _RUN_OPTIONS
    if unknown:
        raise TypeError(f"unknown stub option(s) {sorted(unknown)}; known: {sorted(_RUN_OPTIONS)}")
    argv = [sys.executable, "-m", MODULE, "--port", str(options.pop("port", 0))]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv += [flag, str(value)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=die_with_parent if sys.platform == "linux" else None,
    )
    try:
        deadline = time.monotonic() + startup_timeout_s
        base_url = None
        while base_url is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([proc.stdout], [], [], remaining)[0]:
                raise StubStartError(f"stub did not announce its URL within {startup_timeout_s:.0f}s: {argv}")
            line = proc.stdout.readline().decode(errors="replace")
            if not line:
                raise StubStartError(f"stub exited with code {proc.wait()} before announcing its URL: {argv}")
            if line.startswith(ANNOUNCE + " "):
                base_url = line.split(None, 1)[1].strip()
        while True:
            if proc.poll() is not None:
                raise StubStartError(f"stub exited with code {proc.returncode} during start-up: {argv}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise StubStartError(f"stub did not answer {base_url}/models within {startup_timeout_s:.0f}s")
            time.sleep(0.05)
        yield base_url, proc
    finally:
        stop_stub(proc)


def stop_stub(proc: subprocess.Popen) -> None:
    """SIGTERM the stub's process group, SIGKILL after 5 s; then SIGKILL any worker left in the group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # workers of a supervisor that was SIGKILLed
    if proc.stdout is not None:
        proc.stdout.close()
