"""Counters shared by the stub's workers: int64 cells in a memory-mapped file, one slot per worker."""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
from collections.abc import Iterator

from metacan_pipeline_tests.stub_teacher.protocol import FAULT_MODES

COUNTERS: tuple[str, ...] = (
    "calls",
    "works",
    "works_received",
    "prompt_tokens",
    "completion_tokens",
    "http_200",
    "http_400",
    "http_429",
    "http_500",
    "dropped",
    "fail_status",
    "hung",
) + tuple(f"fault_{m}" for m in FAULT_MODES)
_IX = {name: i for i, name in enumerate(COUNTERS)}
_HEADER_CELLS, _SLOT_CELLS, _MAX_SLOTS = 8, 32, 64  # header: [0] next slot, [1] 429 tickets taken
STATE_BYTES = 8 * (_HEADER_CELLS + _SLOT_CELLS * _MAX_SLOTS)
assert len(COUNTERS) <= _SLOT_CELLS


class Counters:
    """int64 cells in an mmap: a header and one slot per worker (no contention on the hot path).

    ``path=None``: an anonymous map (one worker, no locking). Otherwise a file made by the supervisor;
    ``fcntl.flock`` guards only the slot claim and the 429 tickets.
    """

    def __init__(self, path: str | None = None) -> None:
        self._fd = os.open(path, os.O_RDWR) if path else None
        self._map = mmap.mmap(self._fd if self._fd is not None else -1, STATE_BYTES)
        self.cells = memoryview(self._map).cast("q")
        with self._locked():
            slot = self.cells[0]
            self.cells[0] = slot + 1
        self.base = _HEADER_CELLS + (slot % _MAX_SLOTS) * _SLOT_CELLS

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self._fd is None:
            yield
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def add(self, name: str, n: int = 1) -> None:
        self.cells[self.base + _IX[name]] += n

    def take_429_ticket(self, limit: int) -> bool:
        """True for the first ``limit`` calls over all workers."""
        if limit <= 0 or self.cells[1] >= limit:  # monotonic: no lock once the burst is over
            return False
        with self._locked():
            if self.cells[1] >= limit:
                return False
            self.cells[1] += 1
            return True

    def snapshot(self) -> dict:
        slots = min(self.cells[0], _MAX_SLOTS)
        tot = {
            name: sum(self.cells[_HEADER_CELLS + s * _SLOT_CELLS + i] for s in range(slots)) for name, i in _IX.items()
        }
        return {
            "calls": tot["calls"],
            "works": tot["works"],
            "works_received": tot["works_received"],
            "prompt_tokens": tot["prompt_tokens"],
            "completion_tokens": tot["completion_tokens"],
            "status": {
                "200": tot["http_200"],
                "400": tot["http_400"],
                "429": tot["http_429"],
                "500": tot["http_500"],
                "dropped": tot["dropped"],
                "fail_status": tot["fail_status"],
            },
            "faults": {m: tot[f"fault_{m}"] for m in FAULT_MODES},
            "workers_started": self.cells[0],
        }
