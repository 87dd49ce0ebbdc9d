"""A Dask worker preload for the worker-death tests of ``frame_parts`` (test_parts.py), not a test module.

In every worker process it starts in, it wraps :func:`metacan_pipeline.frame.parts._write_rows`: the first build of
the part whose ``source_file`` is ``$METACAN_TEST_KILL_PART`` writes the part's rows into its temporary folder,
records its process id in ``$METACAN_TEST_KILL_DIR/killed`` and SIGKILLs its own process there, mid-part (the
temporary folder holds the rows, the manifest is unwritten, the part's lock is held). Every later build of that part
leaves ``rebuilt-<pid>`` in the same folder; every build of any part leaves ``built-<pid>-<16 hex of its file>``.
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

from metacan_pipeline.frame import parts

_real_write_rows = parts._write_rows


def _write_rows(job, source, entities, stats, tmp, batch_rows, fast):
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
            os.kill(pid, signal.SIGKILL)
    return routed


def dask_setup(worker) -> None:  # distributed calls it once the worker has started
    parts._write_rows = _write_rows
