"""A frame build, one input file (a "part") at a time: its routed works, its id index, its quarantine
rows and its build-manifest row, written together and atomically.

Layout, under ``warehouse/frame_parts/<partition key>/<part token>/``: ``routed.parquet`` (frame rows
of every work on which a route fires, before the admission filter; :data:`ROUTED_SCHEMA`),
``index.parquet`` (every work read: id, updated_date, where; for newest-wins across parts),
``quarantine.parquet`` and ``manifest.json`` (the build-manifest row, :data:`MANIFEST_SCHEMA`). The
folder is assembled under a temporary name and renamed into place, so a part is either finished or
absent: an interrupted build resumes at the first unfinished part and never reads a finished part
twice (its ``build_key`` = file path, size, mtime, entity-list versions, lexicon and code version).

A file in object storage (an ``s3://`` input folder: :mod:`metacan_pipeline.openalex.remote`) is identified by
its size and version (ETag) in place of its mtime, in the build key and in the check that it is still the file
the inventory took stock of. It is copied into the part's temporary folder (reads retried from where they
stopped) and read from there by the same code as a local file, then the copy is deleted before the folder is
renamed into place. A file that cannot be read whole after every attempt gives a part holding one quarantine
row with the reason (``read_path`` ``failed``): the frame merges without it and says so, and the next
``frame_parts`` run reads that file again (:func:`finished` with ``retry_failed_reads``).

With ``METACAN_PARTS_URL`` the parts live in object storage instead (``parts_root`` is then that URL, a ``str``):
each part is built the same way in a local temporary folder of the worker, then published by
:mod:`.part_store` (its files uploaded, then a completion marker written last with one PUT), so a part there is
finished or absent too, and the same resume rule holds against the bucket.
"""

from __future__ import annotations

import datetime as dt
import gc
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock

from .. import settings
from ..openalex.lexicon import LEXICON_VERSION
from ..openalex.reader import QUARANTINE_COLUMNS
from ..openalex.remote import RemoteReadError, copy_to, is_url, scrub
from ..openalex.remote import stat as remote_stat
from ..openalex.staging import ReadStats, read_work_batches
from ..storage import process_tag, sweep_dead
from ..tables.frame import QUARANTINE_SCHEMA, ROUTED_SCHEMA
from ..tables.openalex import INDEX_SCHEMA
from . import part_store
from .entities import EntityLists
from .routes import route_row

PART_CODE_VERSION = (
    "part-v7"  # v3: host_venue, Crossref types, tar members; v4: other_institutions, ca_funder_names; v5: ca_authors;
    # v6: pmid; v7: authorships (every authorship with its author id and institutions)
)

#: Frame rows before admission (no ``frame_build_id`` yet: the merge stamps it).
#: One row per finished part (the build manifest).


@dataclass(frozen=True)
class PartJob:
    """One file to build: where it is, which partition it belongs to, what the manifest says of it."""

    path: str
    source_file: str
    partition_key: str
    bytes: int
    mtime_ns: int
    manifest_record_count: int | None
    manifest_status: str  # listed | not_in_manifest | no_manifest
    etag: str | None = None  # the object's version, for a file in object storage (``path`` is then its URL)

    @property
    def is_remote(self) -> bool:
        return is_url(self.path)

    def version(self) -> str:
        """How the inventory saw the file, as a message says it."""
        if self.is_remote:
            return f"{self.bytes} bytes, ETag {self.etag}"
        return f"{self.bytes} bytes, mtime_ns {self.mtime_ns}"


class InputChanged(Exception):
    """The file is not the one ``openalex_inventory`` took stock of (rewritten, resized or gone since)."""


def _check_unchanged(job: PartJob, when: str) -> None:
    """Raise :class:`InputChanged` unless ``job.path`` still has the size and mtime (object storage: the size
    and ETag) of the inventory: a part is kept under a build key made of them, so it must hold exactly that file."""
    if job.is_remote:
        found = remote_stat(job.path)
        same = found is not None and found == (job.bytes, job.etag)
        now = "gone" if found is None else f"{found[0]} bytes, ETag {found[1]}"
    else:
        try:
            st = os.stat(job.path)
            now = f"{st.st_size} bytes, mtime_ns {st.st_mtime_ns}"
            same = (st.st_size, st.st_mtime_ns) == (job.bytes, job.mtime_ns)
        except FileNotFoundError:
            same, now = False, "gone"
    if not same:
        raise InputChanged(
            f"{job.source_file} changed since openalex_inventory took stock of it{when} ({job.version()}; now {now}), "
            f"so its part was not built: re-run the job frame_refresh (openalex_inventory), "
            f"then frame_build (the sensor frame_build_after_refresh does it); parts already built are not read again."
        )


def build_key(job: PartJob, entities: EntityLists) -> str:
    """The identity of a finished part: same key, same output (so it is never read again). A file in object
    storage counts by its ETag where a local file counts by its mtime."""
    payload = json.dumps(
        [
            job.source_file,
            job.bytes,
            f"etag:{job.etag}" if job.is_remote else job.mtime_ns,
            sorted(entities.versions.items()),
            LEXICON_VERSION,
            PART_CODE_VERSION,
        ]
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def parts_location(data_parts: Path) -> Path | str:
    """Where the finished parts are: ``METACAN_PARTS_URL`` (an object-storage folder) when set, else the local folder
    ``data_parts`` (``warehouse/frame_parts``). Raises ValueError naming the variable when it is not such a URL."""
    return settings.parts_url() or data_parts


def part_dir(parts_root: Path, partition_key: str, source_file: str) -> Path:
    """``<parts_root>/<partition key>/<16 hex of the file path>``."""
    return Path(parts_root) / partition_key / hashlib.sha256(source_file.encode()).hexdigest()[:16]


def finished(parts_root: Path | str, job: PartJob, key: str, retry_failed_reads: bool = False) -> dict | None:
    """The manifest row of ``job`` if it is built with ``key``, else None. With ``retry_failed_reads`` a part whose
    file could not be read from object storage (``read_path`` ``failed``) counts as not built, so it is read again.
    Parts in object storage (``parts_root`` a URL): :func:`.part_store.finished` (its completion marker)."""
    if is_url(parts_root):
        url = part_store.part_url(str(parts_root), job.partition_key, job.source_file)
        return part_store.finished(url, key, retry_failed_reads)
    mf = part_dir(parts_root, job.partition_key, job.source_file) / "manifest.json"
    try:
        row = json.loads(mf.read_text())
    except (OSError, ValueError):
        return None
    if retry_failed_reads and row.get("read_path") == "failed":
        return None
    return row if row.get("build_key") == key else None


def part_jobs(
    inventory_rows: list[dict], path_of: Callable[[str], Path], keys: set[str] | None = None
) -> list[PartJob]:
    """The part to build for every present, supported file of the inventory (``openalex_inventory``
    rows), in the partitions ``keys`` (all when None); ``path_of`` maps a ``source_file`` to its path
    (:meth:`OpenAlexFiles.path_of`). A snapshot partition without a manifest is ``no_manifest``."""
    return [
        PartJob(
            str(path_of(r["source_file"])),
            r["source_file"],
            r["partition_key"],
            r["bytes"],
            r["mtime_ns"],
            r["manifest_record_count"],
            "no_manifest" if r["manifest_status"] == "not_snapshot" else r["manifest_status"],
            r.get("etag"),
        )
        for r in inventory_rows
        if r["present"] and r["manifest_status"] != "unsupported" and (keys is None or r["partition_key"] in keys)
    ]


def split_finished(
    jobs: list[PartJob], parts_root: Path | str, entities: EntityLists, retry_failed_reads: bool = False
) -> tuple[list[dict], list[tuple[PartJob, str]]]:
    """``(manifest rows of the parts already built with their current build key, (job, key) of the
    others)``: what a build can skip unread and what it must build (``retry_failed_reads``: :func:`finished`).
    Parts in object storage: one listing of the bucket and the markers read concurrently."""
    keyed = [(job, build_key(job, entities)) for job in jobs]
    if is_url(parts_root):
        root = str(parts_root)
        rows = part_store.finished_many(
            root,
            [(part_store.part_url(root, job.partition_key, job.source_file), key) for job, key in keyed],
            retry_failed_reads,
        )
    else:
        rows = [finished(parts_root, job, key, retry_failed_reads) for job, key in keyed]
    done, todo = [], []
    for (job, key), row in zip(keyed, rows, strict=True):
        (done.append(row) if row else todo.append((job, key)))
    return done, todo


def reason_class(reason: str) -> str:
    """The class of a quarantine reason (its text before any ``:`` or ``(``), for counts by reason."""
    return reason.split(":")[0].split("(")[0].strip()


def quarantine_reasons(parts_root: Path | str, rows: list[dict]) -> Counter:
    """Quarantined records by reason class over the parts of the manifest ``rows``."""
    out: Counter = Counter()
    for row in rows:
        if row["quarantined"] and part_store.OBJECTS_KEY in row:  # a part in object storage
            q = part_store.read_table(row, "quarantine.parquet", columns=["reason"])
            out.update(reason_class(r) for r in q.column("reason").to_pylist())
        elif row["quarantined"]:
            q = pq.read_table(
                part_dir(parts_root, row["partition_key"], row["source_file"]) / "quarantine.parquet",
                columns=["reason"],
            )
            out.update(reason_class(r) for r in q.column("reason").to_pylist())
    return out


_sha256 = part_store.sha256_of


@contextmanager
def readable_parts(parts_root: Path | str, rows: list[dict], scratch: Path) -> Iterator[list[Path]]:
    """The local folders of the finished parts ``rows``, in their order, for the merge to read with DuckDB: the part
    folders themselves, or (parts in object storage) copies downloaded into a temporary folder under ``scratch``,
    checked against their markers' SHA-256 and removed on exit (:func:`.part_store.download`)."""
    if not is_url(parts_root):
        yield [part_dir(Path(parts_root), r["partition_key"], r["source_file"]) for r in rows]
        return
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".frame-parts-", dir=scratch) as tmp:
        yield part_store.download(rows, Path(tmp))


def build_part(
    job: PartJob,
    parts_root: str,
    entities: EntityLists,
    key: str,
    run_id: str,
    batch_rows: int = 20_000,
    fast: bool = True,
) -> dict:
    """Read one file and write its part folder; returns its manifest row. Never raises for bad
    content (bad records are quarantine rows); raises OSError only if the output cannot be written.

    Holds a lock file per part while it builds, so two runs that reach the same part (say the
    sensor's and a manual one) build it once: the second finds it finished and returns its row.
    Under the lock, temporary folders of this part left by a killed build are removed.

    ``parts_root`` an object-storage URL (``METACAN_PARTS_URL``): a part finished there is returned unread; else it is
    built in a temporary folder of this machine (:func:`remote_build_scratch`) and published by
    :func:`.part_store.build` (no lock: a marker always names a whole set of objects, so two racing builds leave it
    finished or absent)."""
    if is_url(parts_root):
        url = part_store.part_url(parts_root, job.partition_key, job.source_file)
        done = part_store.finished(url, key, retry_failed_reads=True)
        if done is not None:
            return done
        with remote_build_scratch() as scratch:
            return part_store.build(
                url,
                key,
                lambda folder: _build_part_locked(job, folder, entities, key, run_id, batch_rows, fast),
                Path(scratch),
            )
    final = part_dir(Path(parts_root), job.partition_key, job.source_file)
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final.parent / f".{final.name}.lock")):
        for stale in final.parent.glob(
            f".tmp-{final.name}-*"
        ):  # left by a killed build: no live builder holds the lock
            shutil.rmtree(stale, ignore_errors=True)
        done = finished(Path(parts_root), job, key, retry_failed_reads=True)
        return done if done is not None else _build_part_locked(job, final, entities, key, run_id, batch_rows, fast)


def remote_build_scratch() -> tempfile.TemporaryDirectory:
    """A temporary folder for one part build whose part goes to object storage, in ``<tmp>/metacan-part-builds-<uid>/``
    under ``<host>-pid<pid>-``; folders there of this host's processes that are gone (a worker killed mid-part: its
    copy of the input can be GBs) are removed first. Another host's folders, and a live process's, are left alone.
    The name is easy to guess in a /tmp everyone writes to: when it is not a folder of this user that others may not
    write to (a symlink, a file, another owner's), the build gets a private temporary folder instead, with no sweep."""
    root = Path(tempfile.gettempdir()) / f"metacan-part-builds-{os.getuid()}"
    try:
        root.mkdir(mode=0o700)
    except FileExistsError:
        pass
    made = os.lstat(root)
    if not stat.S_ISDIR(made.st_mode) or made.st_uid != os.getuid() or made.st_mode & 0o022:
        return tempfile.TemporaryDirectory(prefix="metacan-part-")
    sweep_dead(root, "")
    return tempfile.TemporaryDirectory(prefix=f"{process_tag()}-", dir=root)


def _fetch(job: PartJob, tmp: Path) -> Path:
    """The local file to read ``job`` from: its path, or (object storage) a copy in ``tmp/.input/`` under the
    object's own name (the readers go by it). Raises RemoteReadError when the copy fails after every attempt,
    InputChanged when the object is gone."""
    if not job.is_remote:
        return Path(job.path)
    local = tmp / ".input" / job.path.rsplit("/", 1)[-1]
    try:
        copy_to(job.path, local, job.bytes)
    except FileNotFoundError:
        _check_unchanged(job, " (while its part was being read)")
        raise
    return local


def _unreadable_row(job: PartJob, reason: str) -> tuple[dict, dict]:
    """The quarantine row and the manifest fields of a part whose file could not be read from object storage."""
    quarantine = {
        "source_file": job.source_file,
        "locator": "file",
        "line": None,
        "reason": f"unreadable from object storage: {reason}; the next frame_parts run reads it again",
        "excerpt": "",
    }
    return quarantine, {"read_path": "failed", "fallback_reason": reason[:300], "sha256": None}


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the block, back as it was after. A part's rows are dicts and lists
    without reference cycles, freed by reference counting as each batch is written; with the collector on, its
    passes over the live rows took about a fifth of a part's Python time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _write_rows(
    job: PartJob, source: Path, entities: EntityLists, stats: ReadStats, tmp: Path, batch_rows: int, fast: bool
) -> int:
    """Read ``source`` (the file of ``job``) batch by batch into ``tmp/index.parquet`` and ``tmp/routed.parquet``;
    returns the routed rows written."""
    entity_ids = {
        "institution": sorted(entities.institutions),
        "funder": sorted(entities.funders),
        "source": sorted(entities.sources),
    }
    writers: dict[str, pq.ParquetWriter] = {}

    def write(name: str, table: pa.Table) -> None:
        if name not in writers:
            writers[name] = pq.ParquetWriter(tmp / f"{name}.parquet", table.schema, compression="zstd")
        writers[name].write_table(table)

    routed = 0
    batches = read_work_batches(
        source, job.source_file, entity_ids, stats, batch_rows, fast, expected_records=job.manifest_record_count
    )
    with _gc_paused():
        for batch in batches:
            if batch is None:  # the fast path gave up part-way: start the file again on the exact path
                for w in writers.values():
                    w.close()
                writers.clear()
                for f in tmp.glob("*.parquet"):
                    f.unlink()
                routed = 0
                continue
            if batch.index.num_rows:  # the later candidate slices of one read batch carry no index rows
                write("index", batch.index.cast(INDEX_SCHEMA))
            rows = [r for r in (route_row(w, entities) for w in batch.candidates) if r is not None]
            if rows:
                write("routed", pa.Table.from_pylist(rows, schema=ROUTED_SCHEMA))
                routed += len(rows)
    for w in writers.values():
        w.close()
    return routed


def _build_part_locked(
    job: PartJob, final: Path, entities: EntityLists, key: str, run_id: str, batch_rows: int, fast: bool
) -> dict:
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        stats = ReadStats()
        failed: dict | None = None
        try:
            _check_unchanged(job, "")
            source = _fetch(job, tmp)
        except RemoteReadError as exc:  # the store did not answer (whole) after every attempt
            quarantined, failed = _unreadable_row(job, scrub(str(exc)))
            stats.quarantine.append(quarantined)
            stats.counts.update({"quarantined": 1, "file_errors": 1})
            source = None
        routed = 0 if source is None else _write_rows(job, source, entities, stats, tmp, batch_rows, fast)
        for name, schema in (("index", INDEX_SCHEMA), ("routed", ROUTED_SCHEMA)):
            if not (tmp / f"{name}.parquet").exists():
                pq.write_table(schema.empty_table(), tmp / f"{name}.parquet")
        pq.write_table(
            pa.Table.from_pylist(
                [{k: q[k] for k in QUARANTINE_COLUMNS} for q in stats.quarantine], schema=QUARANTINE_SCHEMA
            ),
            tmp / "quarantine.parquet",
        )
        records_read = stats.records_read
        if job.manifest_status != "listed":
            count_check = job.manifest_status
        else:
            count_check = "ok" if records_read == job.manifest_record_count else "mismatch"
        row = {
            "partition_key": job.partition_key,
            "source_file": job.source_file,
            "bytes": job.bytes,
            "mtime_ns": job.mtime_ns,
            "etag": job.etag,
            "sha256": None if source is None else _sha256(source),
            "build_key": key,
            "manifest_record_count": job.manifest_record_count,
            "records_read": records_read,
            "work_records": stats.counts["W"],
            "routed": routed,
            "quarantined": stats.counts["quarantined"],
            "count_check": count_check,
            "read_path": stats.read_path,
            "fallback_reason": stats.fallback_reason,
            "started_at": started.isoformat(timespec="seconds"),
            "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "seconds": round(time.perf_counter() - t0, 3),
            "run_id": run_id,
            **(failed or {}),
        }
        if source is not None and job.is_remote:
            shutil.rmtree(tmp / ".input")  # the copy of the object: not part of the part
        (tmp / "manifest.json").write_text(json.dumps(row))
        _check_unchanged(job, " (while its part was being read)")
        if final.exists():  # a stale build of this file (other key): replaced only now that the new one is whole
            shutil.rmtree(final)
        tmp.rename(final)
        return row
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
