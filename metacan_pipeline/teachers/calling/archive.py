"""The audit trail of teacher calls: compressed archive files, written ahead of DuckDB (SPEC section 4).

Each labelling run of a teacher writes one archive file
``<data>/teacher_archive/<teacher>/<YYYY-MM-DD>/<run id>-<8 hex>.jsonl.gz``: one JSON line per event,
gzip-flushed as soon as it is written, so a process killed with ``kill -9`` loses nothing it had
finished (a truncated gzip stream is read up to its last flush):

- ``{"kind": "call", "row": <teacher_calls row>, "request": <request body>, "response": <raw reply text>}``
- ``{"kind": "label", "row": <teacher_labels row>}``

:class:`LabelWriter` also buffers the rows and inserts them into DuckDB every ``flush_s`` seconds (or
``flush_rows`` rows) and when it closes, then records the file as complete in ``teacher_archives``.
:func:`recover` replays any archive file that is not complete and whose writer is gone (a killed run)
into DuckDB before the next run looks up what is already labelled: inserts are keyed by call id and
label id, so a replay counts no call and no cost twice.
"""

from __future__ import annotations

import gzip
import threading
import uuid
import zlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import orjson
from filelock import FileLock, Timeout

from ...storage import MetacanStorage
from ..core.store import append_rows, now_utc

ARCHIVE_DIR = "teacher_archive"


def read_archive(path: Path, damaged: list[str] | None = None) -> Iterator[dict]:
    """The events of one archive file, in order; a stream cut by a crash ends at its last complete line.
    A line that is not a JSON object is skipped and described in ``damaged`` (when given)."""
    decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            try:
                pending += decomp.decompress(chunk)
            except zlib.error:
                break
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    event = exc
                if isinstance(event, dict):
                    yield event
                elif damaged is not None:
                    damaged.append(f"a line that is not a JSON object ({str(event)[:80]})")


class LabelWriter:
    """Archive every call and outcome of one run of one teacher, then store them in DuckDB in batches.

    Use as a context manager; :meth:`add_call` and :meth:`add_labels` take ``teacher_calls`` /
    ``teacher_labels`` row dicts (:mod:`..core.store`). The archive is written in the caller's thread (so an
    event is on disk before the caller moves on); DuckDB inserts run in a background thread every
    ``flush_s`` seconds so that the event loop sending calls never waits for the catalog. An insert that
    fails is raised again by the next :meth:`add_call` or by :meth:`close`.
    """

    def __init__(self, storage: MetacanStorage, teacher: str, run_id: str, flush_s: float = 2.0) -> None:
        self.storage, self.teacher, self.run_id, self.flush_s = storage, teacher, run_id, flush_s
        day = now_utc().strftime("%Y-%m-%d")
        self.rel = f"{ARCHIVE_DIR}/{teacher}/{day}/{run_id}-{uuid.uuid4().hex[:8]}.jsonl.gz"
        self.path = storage.root / self.rel
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = FileLock(str(self.path) + ".lock")
        self.lock.acquire()
        self.gz = gzip.open(self.path, "wb", compresslevel=1)  # the event loop writes it: speed over size
        self.lines = self.n_calls = self.n_labels = 0
        self.calls: list[dict] = []
        self.labels: list[dict] = []
        self._buffer_lock = threading.Lock()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._flush_loop, name=f"label-writer-{teacher}", daemon=True)
        self._thread.start()

    def __enter__(self) -> LabelWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, events: list[dict]) -> None:
        self.gz.write(b"".join(orjson.dumps(e) + b"\n" for e in events))
        self.gz.flush()  # zlib sync flush + write: on disk (in the OS) even if the process is killed next
        self.lines += len(events)

    def add_call(self, row: dict, request: dict, response: str | None) -> None:
        """Archive one call (its request and raw reply) and queue its ``teacher_calls`` row."""
        if self._error:
            raise self._error
        row = {**row, "archive_path": self.rel, "archive_line": self.lines + 1}
        self._write([{"kind": "call", "row": row, "request": request, "response": response}])
        with self._buffer_lock:
            self.calls.append(row)
        self.n_calls += 1

    def add_labels(self, rows: list[dict]) -> None:
        """Archive final outcomes (one flush for all) and queue their ``teacher_labels`` rows."""
        self._write([{"kind": "label", "row": r} for r in rows])
        with self._buffer_lock:
            self.labels.extend(rows)
        self.n_labels += len(rows)

    def flush(self) -> None:
        """Insert the queued rows into DuckDB (one short transaction under the catalog lock)."""
        with self._buffer_lock:
            calls, labels, self.calls, self.labels = self.calls, self.labels, [], []
        if calls or labels:
            with self.storage.connect() as con:
                append_rows(con, calls, labels)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_s):
            try:
                self.flush()
            except BaseException as exc:  # re-raised in the caller's thread
                self._error = exc
                return

    def close(self) -> None:
        """Stop the background inserts, flush, close the archive file, and record it as complete."""
        if self.gz.closed:
            return
        self._stop.set()
        self._thread.join()
        self.gz.close()
        if self._error:
            raise self._error
        self.flush()
        with self.storage.connect() as con:
            con.execute(
                "INSERT OR REPLACE INTO teacher_archives VALUES (?,?,?,?,?,?,?,?,?)",
                [self.rel, self.teacher, self.run_id, self.lines, self.n_calls, self.n_labels, False, now_utc(), None],
            )
        self.lock.release()
        Path(self.lock.lock_file).unlink(missing_ok=True)  # the file is complete and recorded: nobody locks it again


def _event_rows(path: Path) -> tuple[list[dict], list[dict], list[str]]:
    """The call and label rows of one archive file, and what could not be read (a damaged line, an event
    without its row, a row without its id or with a bad time)."""
    damaged: list[str] = []
    calls, labels = [], []
    for ev in read_archive(path, damaged):
        row, kind = ev.get("row"), ev.get("kind")
        key = {"call": "call_id", "label": "label_id"}.get(kind)
        if key is None or not isinstance(row, dict) or not isinstance(row.get(key), str):
            damaged.append(f"a {kind or 'kind-less'} event without its row or {key or 'id'}")
            continue
        try:
            if isinstance(row.get("created_at"), str):
                row["created_at"] = datetime.fromisoformat(row["created_at"])
        except ValueError:
            damaged.append(f"{key} {row[key]}: created_at {row['created_at']!r} is not a time")
            continue
        (calls if kind == "call" else labels).append(row)
    return calls, labels, damaged


def recover(storage: MetacanStorage, log=None) -> dict[str, int]:
    """Replay archive files of runs that died before closing them into DuckDB; returns counts
    ``{"files", "calls", "labels", "damaged"}``. A file whose writer still holds its lock (a live run)
    is left alone. A damaged line is skipped and the rest of its file replayed; a file that cannot be
    stored at all is recorded with the cause (``teacher_archives.note``) and not tried again. Neither
    stops the run: one bad file never blocks a teacher."""
    root = storage.root / ARCHIVE_DIR
    found = {"files": 0, "calls": 0, "labels": 0, "damaged": 0}
    if not root.is_dir():
        return found
    with storage.connect() as con:
        done = {r[0] for r in con.execute("SELECT archive_path FROM teacher_archives").fetchall()}
    for path in sorted(root.rglob("*.jsonl.gz")):
        rel = path.relative_to(storage.root).as_posix()
        if rel in done:
            continue
        lock = FileLock(str(path) + ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue
        try:
            calls, labels, damaged = _event_rows(path)
            note = f"{len(damaged)} damaged: {'; '.join(damaged[:3])}" if damaged else None
            with storage.connect() as con:
                before = con.execute(
                    "SELECT (SELECT count(*) FROM teacher_calls), (SELECT count(*) FROM teacher_labels)"
                ).fetchone()
                try:
                    append_rows(con, calls, labels)
                except Exception as exc:  # noqa: BLE001 - recorded and reported, never blocks the run
                    note = f"not stored: {type(exc).__name__}: {str(exc)[:300]}"
                after = con.execute(
                    "SELECT (SELECT count(*) FROM teacher_calls), (SELECT count(*) FROM teacher_labels)"
                ).fetchone()
                run_id = calls[0].get("run_id") if calls else (labels[0].get("run_id") if labels else None)
                con.execute(
                    "INSERT OR REPLACE INTO teacher_archives VALUES (?,?,?,?,?,?,?,?,?)",
                    [
                        rel,
                        path.parts[-3],
                        run_id,
                        len(calls) + len(labels),
                        len(calls),
                        len(labels),
                        True,
                        now_utc(),
                        note,
                    ],
                )
            found["files"] += 1
            found["calls"] += after[0] - before[0]
            found["labels"] += after[1] - before[1]
            found["damaged"] += len(damaged) + (1 if note and note.startswith("not stored") else 0)
            if log:
                log.info(
                    f"recovered {after[0] - before[0]} calls and {after[1] - before[1]} labels from {rel} (a run that did not finish)"
                )
                if note:
                    log.warning(f"teacher archive {rel}: {note}")
        finally:
            lock.release()
    return found
