"""``metacan dev``: the Dagster UI over ``workspace.yaml`` on the instance ``metacan run`` uses. Imports no stage: the
UI loads the definitions itself and shows any error in them.

It stops on SIGTERM, SIGINT (Ctrl-C) and SIGHUP wherever it was started, with every process of the UI: ``dagster dev``
runs in a process group of its own that this command stops (:func:`run_until_stopped`). A job started in the
background by a non-interactive shell inherits SIGINT ignored, and ``dagster dev`` gives SIGTERM the handler SIGINT
has, so on its own it would ignore both; here both stop it, and ``dagster dev`` starts with SIGINT at its default.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import typer

from ..instance import instance_home
from ..storage import default_data_dir
from .options import DATA_DIR_HELP

#: Where ``dagster dev`` serves the UI (its default host).
UI_HOST = "127.0.0.1"
#: The signals that stop ``metacan dev`` (and, forwarded as SIGTERM, every process of the UI).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

#: Seconds the UI's processes get to stop after SIGTERM before whatever is left is killed (SIGKILL).
STOP_GRACE_S = 15.0


def dev(
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
    port: int = typer.Option(3000, help="Port of the Dagster UI."),
) -> None:
    """Start the Dagster UI (``dagster dev -w workspace.yaml``) on the instance ``metacan run`` uses; Ctrl-C,
    SIGTERM or SIGHUP stops it with its webserver, daemon and code servers."""
    if port_in_use(UI_HOST, port):
        typer.echo(
            f"metacan dev: port {port} on {UI_HOST} is in use (another server, perhaps another Dagster UI on this "
            "instance, is listening there); stop it, or choose another port with --port "
            '(make dev DEV_ARGS="--port 3001")',
            err=True,
        )
        raise typer.Exit(1)
    home = instance_home(data_dir or default_data_dir())
    typer.echo(f"Dagster instance: {home} (the one metacan run uses); UI on http://localhost:{port}")
    dagster = Path(sys.executable).with_name("dagster")
    raise typer.Exit(run_until_stopped([str(dagster), "dev", "-w", "workspace.yaml", "-p", str(port)]))


def port_in_use(host: str, port: int) -> bool:
    """True when ``host:port`` cannot be bound because a server listens there (checked by binding and closing a
    socket, as the webserver will bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def run_until_stopped(argv: Sequence[str], grace_s: float = STOP_GRACE_S) -> int:
    """Run ``argv`` in a new session (its own process group) until it exits or this process gets a signal of
    :data:`STOP_SIGNALS`, and return the exit status: the command's own when it ended by itself, 0 when it was
    stopped on request (128 + N for a command killed by signal N). Stopping: SIGTERM to the group and to every descendant outside it, ``grace_s`` seconds for
    all of them to exit (a second stop signal cuts this short), then SIGKILL of whatever is left. The command
    starts with SIGINT at its default even when this process inherited it ignored."""
    received: list[int] = []

    def note(signum: int, _frame) -> None:
        received.append(signum)

    # Handlers first: a signal from here on is noted, and the command's exec resets them to the default.
    previous = {s: signal.signal(s, note) for s in STOP_SIGNALS}
    try:
        child = subprocess.Popen(list(argv), start_new_session=True)
        while not received and child.poll() is None:
            time.sleep(0.5)  # a signal is noted by its handler; the loop sees it within half a second
        if not received:
            return child.returncode if child.returncode >= 0 else 128 - child.returncode
        name = signal.Signals(received[0]).name
        typer.echo(f"metacan dev: {name} received, stopping the Dagster UI (webserver, daemon, code servers)", err=True)
        left = stop_tree(child, grace_s, received)
        if left:
            typer.echo(f"metacan dev: killed {left} process(es) still running after {grace_s:.0f}s", err=True)
        typer.echo("metacan dev: stopped", err=True)
        return 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def stop_tree(child: subprocess.Popen, grace_s: float, received: list[int] | None = None) -> int:
    """Stop ``child`` (the leader of its own process group) and all its descendants: SIGTERM, up to ``grace_s``
    seconds (less when ``received`` grows: a second stop signal), then SIGKILL. Returns how many had to be killed."""
    procs = _tree(child.pid)
    seen = len(received or ())
    _signal_all(child.pid, procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and len(received or ()) <= seen:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=0.2)
        procs = [p for p in {*procs, *_tree(child.pid)} if _alive(p)]
        if child.poll() is not None and not procs and not _group_alive(child.pid):
            return 0
    left = [p for p in procs if _alive(p)]
    _signal_all(child.pid, left, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=5)
    psutil.wait_procs(left, timeout=5)
    return len(left)


def _tree(pid: int) -> list[psutil.Process]:
    """``pid`` and its descendants now (empty when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _group_alive(pgid: int) -> bool:
    """A process of the group ``pgid`` is still running (zombies aside)."""
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(p.pid) == pgid and _alive(p):
                return True
    return False


def _signal_all(pgid: int, procs: list[psutil.Process], signum: int) -> None:
    """``signum`` to the process group ``pgid`` and to each of ``procs`` (a descendant may have left the group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signum)
