"""A Dask worker preload for the worker-death tests of ``frame_parts`` (test_parts.py, test_object_storage.py), not a
test module.

In every worker process it starts in, it wraps :func:`metacan_pipeline.frame.parts._write_rows`: the first build of
the part whose ``source_file`` is ``$METACAN_TEST_KILL_PART`` writes the part's rows into its temporary folder,
records its process id in ``$METACAN_TEST_KILL_DIR/killed`` and SIGKILLs its own process there, mid-part (the
temporary folder holds the rows, the manifest is unwritten, the part's lock is held). Every later build of that part
leaves ``rebuilt-<pid>`` in the same folder; every build of any part leaves ``built-<pid>-<16 hex of its file>``.

With ``$METACAN_TEST_KILL_AFTER_UPLOAD`` (a part file name, parts in object storage: ``METACAN_PARTS_URL``) that first
build dies later instead: right after uploading that file of the part to the store, before the part's other files
and its completion marker (:func:`metacan_pipeline.frame.part_store.build`); the store path of that upload is
recorded in ``$METACAN_TEST_KILL_DIR/uploaded`` first.
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

from metacan_pipeline.frame import part_store, parts

_real_write_rows = parts._write_rows
_real_filesystem = part_store.filesystem
_armed = False  # this process builds the doomed part and dies after its upload (one thread per worker)


def _write_rows(job, source, entities, stats, tmp, batch_rows, fast):
    global _armed
    routed = _real_write_rows(job, source, entities, stats, tmp, batch_rows, fast)
    folder = Path(os.environ["METACAN_TEST_KILL_DIR"])
    pid = os.getpid()
    (folder / f"built-{pid}-{hashlib.sha256(job.source_file.encode()).hexdigest()[:16]}").touch()
    if job.source_file == os.environ["METACAN_TEST_KILL_PART"]:
        try:
            fd = os.open(folder / "killed", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            (folder / f"rebuilt-{pid}").touch()
        else:
            os.write(fd, str(pid).encode())
            os.close(fd)
            if os.environ.get("METACAN_TEST_KILL_AFTER_UPLOAD"):
                _armed = True
            else:
                os.kill(pid, signal.SIGKILL)
    return routed


class _DyingStore:
    """A part store's filesystem whose ``put_file`` kills the process after the armed upload."""

    def __init__(self, fs) -> None:
        self._fs = fs

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def put_file(self, lpath, rpath, *args, **kwargs):
        out = self._fs.put_file(lpath, rpath, *args, **kwargs)
        if _armed and str(rpath).rsplit("/", 1)[-1] == os.environ["METACAN_TEST_KILL_AFTER_UPLOAD"]:
            folder = Path(os.environ["METACAN_TEST_KILL_DIR"])
            (folder / "uploaded").write_text(str(rpath))
            os.kill(os.getpid(), signal.SIGKILL)
        return out


def _filesystem(url: str):
    fs, path = _real_filesystem(url)
    return _DyingStore(fs), path


def dask_setup(worker) -> None:  # distributed calls it once the worker has started
    parts._write_rows = _write_rows
    part_store.filesystem = _filesystem
