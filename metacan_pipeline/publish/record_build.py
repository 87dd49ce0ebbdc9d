"""Building the ``work_records`` table: range by range of frame ids (:mod:`.record_inputs`), in spawned worker
processes when there are several ranges, adopted atomically; and the count of records changed since the last build.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from .. import settings
from ..release.layer import LayerRule
from ..storage import MetacanStorage, scratch_path, sql_literal, sweep_dead
from ..tables.publish import RECORDS_SCHEMA
from .record_inputs import RANGE_WORKS, range_batches, ranged_connection, record_ranges
from .records import RecordBatches


class RecordWorkerDied(RuntimeError):
    """A worker process of a ``work_records`` build ended without an answer (SIGKILL: the OOM killer, ``kill -9``)."""


@dataclass(frozen=True)
class RecordBuild:
    """What every range of a ``work_records`` build shares (picklable: it travels to the worker processes)."""

    data_dir: str
    label_tables: tuple[str, ...]
    release_frame: Path | None
    qualification: dict[str, str] | None
    passing: dict[str, list[dict]] | None
    layer: LayerRule | None
    batch_rows: int = 5000
    #: the MEDLINE gate's verdicts on study-design classes (:func:`.medline_layer.read_medline_verdicts`)
    medline: dict[tuple[str, str], dict] | None = None


def build_range(build: RecordBuild, where: str, index: int, folder: Path) -> tuple[int, int, int, list[dict]]:
    """Write the records of one range of ids (:func:`.record_inputs.record_ranges`) as ``folder/part-<index>-<batch>.parquet``;
    returns ``(records, human-coded, human-validated, the first ten rows)``. Raises :class:`RecordInputError`
    as :class:`.records.RecordBatches`. DuckDB spills under ``.spill-records/<folder name>-<index>``, this range's own."""
    storage = MetacanStorage(data_dir=build.data_dir)
    batches = RecordBatches({}, build.qualification, build.passing, build.layer, build.medline)
    spill = _range_spill(folder, index)
    spill.mkdir(parents=True, exist_ok=True)
    con = ranged_connection(storage, list(build.label_tables), build.release_frame, spill)
    rows = 0
    try:
        for j, inputs in enumerate(range_batches(con, where, build.batch_rows)):
            table = batches.table(inputs)
            pq.write_table(table, folder / f"part-{index:05d}-{j:05d}.parquet", compression="zstd")
            rows += table.num_rows
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)
    return rows, batches.human_coded, batches.human_validated, batches.preview


def _range_spill(folder: Path, index: int) -> Path:
    """The spill folder of range ``index`` of the build into ``folder`` (:func:`build_range`)."""
    return folder.parent / ".spill-records" / f"{folder.name}-{index:05d}"


def _exit_with_parent() -> None:
    """Initializer of a record worker process: end it as soon as the process that started it is gone. A pool's
    workers are never told that their parent was killed (SIGKILL, the OOM killer): they went on building the queued
    ranges into a build folder no one would adopt, then waited for work forever."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


#: At most this many record worker processes.
RECORD_WORKERS_MAX = 4
#: Memory one record worker may take: about 350 MB before any work, DuckDB's 2 GB limit (:func:`ranged_connection`)
#: and a batch of records in Python.
RECORD_WORKER_MEMORY = int(2.5 * 2**30)


def record_workers() -> int:
    """Worker processes of a ``work_records`` build: ``$METACAN_RECORD_WORKERS`` when set, else one per core this
    process may use (dask's count: CPU affinity and a container's cgroup CPU quota), at most
    :data:`RECORD_WORKERS_MAX` and at most one per :data:`RECORD_WORKER_MEMORY` of the memory distributed sees
    (the machine's, a container's cgroup limit or the process's rlimit): four workers on an 8 GB machine would be
    OOM-killed."""
    # distributed is heavy to import (about a second, and it starts threads): only a records build needs it,
    # never the spawned record workers, which import this module.
    from dask.system import cpu_count
    from distributed.system import MEMORY_LIMIT

    if (configured := settings.record_workers()) is not None:
        return configured
    return max(1, min(RECORD_WORKERS_MAX, cpu_count(), MEMORY_LIMIT // RECORD_WORKER_MEMORY))


@contextlib.contextmanager
def worker_pool(workers: int, doing: str, kept: str = "") -> Iterator[ProcessPoolExecutor]:
    """``workers`` spawned worker processes for work_records (a step process has threads: no fork), each ending when
    its parent does. Any exception in the block terminates them now: the tasks running and queued would otherwise run
    to their end first (an interrupted build went on for two ranges' time). A worker that dies raises
    :class:`RecordWorkerDied`, saying it happened ``doing``, what to lower, and ``kept``."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_exit_with_parent) as pool:
        try:
            yield pool
        except BrokenProcessPool:
            raise RecordWorkerDied(
                f"a work_records worker process died {doing} ({workers} workers): most often the out-of-memory killer "
                f"(each worker may take about {RECORD_WORKER_MEMORY / 2**30:.1f} GB); set "
                f"{settings.RECORD_WORKERS_ENV}=1 (or a smaller number) and materialize work_records again{kept}"
            ) from None
        except BaseException:
            for process in (pool._processes or {}).values():
                process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def write_records(storage: MetacanStorage, build: RecordBuild, workers: int, range_works: int = RANGE_WORKS) -> dict:
    """Build ``work_records`` range by range (:func:`build_range`), in ``workers`` processes when there is more than
    one range of ``range_works`` ids, each range's files named in id order, and adopt them as the table atomically
    (a failure leaves the previous table). Returns ``{records, human_coded, human_validated, preview, ranges (of
    ids, the NULL-id one not counted), workers}``. Every range is built by the same code whatever the workers, so the
    table is the same."""
    con = ranged_connection(storage, list(build.label_tables), build.release_frame)
    try:
        ranges = record_ranges(con, range_works)
    finally:
        con.close()
    storage.warehouse.mkdir(parents=True, exist_ok=True)
    folder = scratch_path(storage.warehouse, ".work_records.build-")
    sweep_dead(_range_spill(folder, 0).parent, ".work_records.build-")  # a killed build's spill folders
    folder.mkdir()
    workers = max(1, min(workers, len(ranges) - 1))
    try:
        if workers == 1:
            results = [build_range(build, where, k, folder) for k, where in enumerate(ranges)]
        else:
            with worker_pool(workers, "while building", "; the previous work_records is kept") as pool:
                futures = [pool.submit(build_range, build, where, k, folder) for k, where in enumerate(ranges)]
                results = [f.result() for f in futures]
        if not any(folder.iterdir()):
            pq.write_table(RECORDS_SCHEMA.empty_table(), folder / "part-00000-00000.parquet")
        storage.adopt_table("work_records", folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        spills = _range_spill(folder, 0).parent
        for spill in spills.glob(f"{folder.name}-*"):  # a killed worker's
            shutil.rmtree(spill, ignore_errors=True)
        with contextlib.suppress(OSError):
            spills.rmdir()  # unless another build of this warehouse spills there
    preview = [row for *_, rows in results for row in rows][:10]
    return {
        "records": sum(r[0] for r in results),
        "human_coded": sum(r[1] for r in results),
        "human_validated": sum(r[2] for r in results),
        "preview": preview,
        "ranges": len(ranges) - 1,  # of ids: the NULL-id range is not one
        "workers": workers,
    }


def keep_previous_hashes(storage: MetacanStorage) -> Path | None:
    """Copy ``(id, record_hash)`` of the current ``work_records`` table to a scratch Parquet file in the warehouse
    (DuckDB, streamed: nothing of it in Python) and return its path; None before the first
    materialization. :func:`count_changed` reads it once the new table is written; the caller deletes it."""
    if not storage.has_table("work_records"):
        return None
    path = Path(f"{scratch_path(storage.warehouse, '.work_records-previous-')}.parquet")
    con = duckdb.connect(config={"memory_limit": "1GB", "temp_directory": str(storage.warehouse / ".spill-records")})
    try:
        source = sql_literal(str(storage.table_dir("work_records") / "*.parquet"))
        con.execute(
            f"COPY (SELECT id, record_hash FROM read_parquet({source}, hive_partitioning=false)) "
            f"TO {sql_literal(str(path))} (FORMAT parquet)"
        )
    finally:
        con.close()
    return path


def count_changed(storage: MetacanStorage, previous: Path | None) -> int:
    """The records of the current ``work_records`` that are new or whose ``record_hash`` differs from the one
    :func:`keep_previous_hashes` kept in ``previous`` (None: every record is new). Counted in DuckDB."""
    source = sql_literal(str(storage.table_dir("work_records") / "*.parquet"))
    con = duckdb.connect(config={"memory_limit": "1GB", "temp_directory": str(storage.warehouse / ".spill-records")})
    try:
        if previous is None:
            return con.execute(f"SELECT count(*) FROM read_parquet({source}, hive_partitioning=false)").fetchone()[0]
        return con.execute(
            f"SELECT count(*) FROM read_parquet({source}, hive_partitioning=false) n "
            f"LEFT JOIN read_parquet({sql_literal(str(previous))}) o ON o.id = n.id "
            "WHERE o.record_hash IS DISTINCT FROM n.record_hash"
        ).fetchone()[0]
    finally:
        con.close()
