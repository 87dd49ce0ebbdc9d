"""Finished parts in object storage (``METACAN_PARTS_URL``): part builds on workers that share no disk.

Object storage has no rename, so a part is published in two steps instead of a folder renamed into place:

- its files (``routed.parquet``, ``index.parquet``, ``quarantine.parquet``: :data:`PART_FILES`), built whole in a
  local temporary folder of the worker by the same code as a local part, are uploaded under a data prefix of their
  own, ``<parts url>/<partition key>/<16 hex of the file path>/<build key>-<8 hex>/`` (a multipart upload appears
  only when complete; an upload never overwrites another build's objects);
- then the completion marker ``<part>/manifest.json`` is written with one PUT: its ``format``, ``build_key``, the
  data prefix (``data``), each file's size and SHA-256 (``files``) and the build-manifest row (``row``).

A part is finished when its marker parses, has this format and the current build key, and every file it names is
in the store with the size it names (:func:`_valid`); anything else (no marker: a build killed after its uploads;
a marker of another build key; a missing or resized object) is absent, and the next ``frame_parts`` run builds it.
A marker always names a whole set of objects, so two builds of one part racing each other leave a finished part
(the last marker wins) or, at worst, an absent one (rebuilt next time): never a mixture. After its marker, a build
deletes every other data prefix of its part (stale builds of another key, objects of builds killed before their
marker). The merge downloads the parts' files to a local temporary folder, checks each SHA-256 against the marker,
and reads them with DuckDB as local parts (:func:`download`: measured faster than DuckDB reading through fsspec).

Access and credentials are those of input folders in object storage (:func:`metacan_pipeline.openalex.remote.filesystem`:
the usual AWS environment, ``METACAN_S3_ENDPOINT_URL``); every message built from a storage error is scrubbed.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import fsspec
import pyarrow.parquet as pq

from ..openalex.remote import scrub, storage_options

#: The files of a part, uploaded before its marker.
PART_FILES = ("routed.parquet", "index.parquet", "quarantine.parquet")
#: The completion marker, written last with a single PUT.
MARKER = "manifest.json"
MARKER_FORMAT = "metacan-part/1"
#: Keys a finished remote part's row carries besides the build-manifest columns: where its objects are, and their
#: sizes and SHA-256 (from the marker), for the merge and ``quarantine_reasons``.
OBJECTS_KEY, OBJECT_FILES_KEY = "objects", "object_files"


def filesystem(url: str):
    """``(fsspec filesystem, path inside it)`` of ``url`` with the options of input folders in object storage and no
    listings cache: parts are written by other processes, so every listing must ask the store (fsspec's cache keeps
    the listings of deeper folders even after ``invalidate_cache`` of their parent)."""
    protocol = url.split("://", 1)[0].lower()
    return fsspec.core.url_to_fs(url, use_listings_cache=False, **storage_options(protocol))


def part_url(root: str, partition_key: str, source_file: str) -> str:
    """``<root>/<partition key>/<16 hex of the file path>``: the same names as a local part folder."""
    return f"{root}/{partition_key}/{hashlib.sha256(source_file.encode()).hexdigest()[:16]}"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _store_error(what: str, url: str, exc: BaseException) -> OSError:
    return OSError(scrub(f"{what} {url} failed ({type(exc).__name__}: {exc})"))


def _valid(
    url: str, raw: bytes | None, key: str, sizes: dict[str, int], base: str, retry_failed_reads: bool
) -> dict | None:
    """The row of the part at ``url`` (store path ``base``) if its marker ``raw`` is whole, of build key ``key``, and
    every object it names is in ``sizes`` (store path: size) with its size; else None (the part is absent)."""
    if raw is None:
        return None
    try:
        marker = json.loads(raw)
        ok = (
            marker["format"] == MARKER_FORMAT
            and marker["build_key"] == key
            and marker["row"]["build_key"] == key
            and set(marker["files"]) == set(PART_FILES)
            and all(sizes.get(f"{base}/{marker['data']}/{n}") == f["bytes"] for n, f in marker["files"].items())
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not ok or (retry_failed_reads and marker["row"].get("read_path") == "failed"):
        return None
    return {**marker["row"], OBJECTS_KEY: f"{url}/{marker['data']}", OBJECT_FILES_KEY: marker["files"]}


def finished_many(root: str, wanted: list[tuple[str, str]], retry_failed_reads: bool = False) -> list[dict | None]:
    """For each ``(part url, build key)`` of ``wanted`` (parts under ``root``, or ``root`` itself), its row if finished
    with that key (:func:`_valid`), else None: one listing of ``root`` (no cache) and the markers read concurrently."""
    if not wanted:
        return []
    fs, base = filesystem(root)
    base = base.rstrip("/")
    try:
        fs.invalidate_cache(base)
        try:
            listing = fs.find(base, detail=True)
        except FileNotFoundError:
            listing = {}
        sizes = {p: int(i.get("size") or 0) for p, i in listing.items() if i.get("type", "file") == "file"}
        paths = {url: fs._strip_protocol(url).rstrip("/") for url, _ in wanted}
        markers = [f"{p}/{MARKER}" for p in paths.values() if f"{p}/{MARKER}" in sizes]
        raw = fs.cat(markers, on_error="return") if markers else {}
    except Exception as exc:  # the store did not answer: no part can be said finished, so fail loudly
        raise _store_error("listing the parts at", root, exc) from None
    raw = {fs._strip_protocol(p): v for p, v in raw.items()}
    out = []
    for url, key in wanted:
        got = raw.get(f"{paths[url]}/{MARKER}")
        out.append(_valid(url, got if isinstance(got, bytes) else None, key, sizes, paths[url], retry_failed_reads))
    return out


def finished(url: str, key: str, retry_failed_reads: bool = False) -> dict | None:
    """The row of the part at ``url`` if it is finished with build key ``key`` (:func:`finished_many` of one, listing
    only the part's own prefix)."""
    return finished_many(url, [(url, key)], retry_failed_reads)[0]


def build(url: str, key: str, build_local: Callable[[Path], dict], scratch: Path) -> dict:
    """Publish the part at ``url``: ``build_local(folder)`` builds it whole in the local ``folder`` (under
    ``scratch``, a temporary folder of the worker, removed by the caller) and returns its row; its files are uploaded
    under a new data prefix, then the marker is written, then every other data prefix of the part is deleted.
    Returns the row as :func:`finished` would. Raises OSError (scrubbed) when the store refuses a write."""
    local = scratch / "part"
    row = build_local(local)
    fs, base = filesystem(url)
    base = base.rstrip("/")
    data = f"{key}-{uuid.uuid4().hex[:8]}"
    files = {name: {"bytes": (local / name).stat().st_size, "sha256": sha256_of(local / name)} for name in PART_FILES}
    try:
        for name in PART_FILES:
            fs.put_file(str(local / name), f"{base}/{data}/{name}")
    except Exception as exc:
        raise _store_error("uploading the part", url, exc) from None
    marker = {"format": MARKER_FORMAT, "build_key": key, "data": data, "files": files, "row": row}
    try:
        fs.pipe_file(f"{base}/{MARKER}", json.dumps(marker).encode())  # one PUT: the part is finished from here on
    except Exception as exc:
        raise _store_error("writing the completion marker of", url, exc) from None
    _remove_others(fs, base, data)
    return {**row, OBJECTS_KEY: f"{url}/{data}", OBJECT_FILES_KEY: files}


def _remove_others(fs, base: str, keep: str) -> None:
    """Delete every data prefix of the part at ``base`` but ``keep`` (best effort: a leftover is only disk)."""
    try:
        fs.invalidate_cache(base)
        for entry in fs.ls(base, detail=True):
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            if entry.get("type") == "directory" and name != keep:
                fs.rm(entry["name"], recursive=True)
    except (FileNotFoundError, OSError):
        pass


def read_table(row: dict, name: str, columns: list[str] | None = None):
    """The part file ``name`` of the finished remote part ``row``, read from the store."""
    url = f"{row[OBJECTS_KEY]}/{name}"
    fs, path = filesystem(url)
    try:
        with fs.open(path, "rb") as fh:
            return pq.read_table(fh, columns=columns)
    except Exception as exc:
        raise _store_error("reading", url, exc) from None


def download(rows: list[dict], dest: Path) -> list[Path]:
    """Copy the files of the finished remote parts ``rows`` to ``dest/<i>/`` (concurrent GETs), each checked against
    the size and SHA-256 of its marker; returns the local folders, in the order of ``rows``. Raises OSError naming the
    part when a file is gone or differs from its marker (the store changed after the parts were checked)."""
    if not rows:
        return []
    fs, _ = filesystem(rows[0][OBJECTS_KEY])
    dirs = [dest / str(i) for i in range(len(rows))]
    sources, targets = [], []
    for row, d in zip(rows, dirs, strict=True):
        d.mkdir(parents=True, exist_ok=True)
        for name in PART_FILES:
            sources.append(fs._strip_protocol(f"{row[OBJECTS_KEY]}/{name}"))
            targets.append(str(d / name))
    try:
        fs.get(sources, targets)
    except Exception as exc:
        raise _store_error("downloading the parts from", rows[0][OBJECTS_KEY].rsplit("/", 3)[0], exc) from None
    for row, d in zip(rows, dirs, strict=True):
        for name, want in row[OBJECT_FILES_KEY].items():
            f = d / name
            if not f.exists() or f.stat().st_size != want["bytes"] or sha256_of(f) != want["sha256"]:
                raise OSError(
                    f"{row['source_file']}: its part's {name} at {row[OBJECTS_KEY]} is not the file its completion "
                    f"marker names (changed or removed since it was checked): materialize frame_parts again"
                )
    return dirs


def routed_files(root: str) -> list[str]:
    """The URL of every ``routed.parquet`` object under ``root`` (finished or not), for the abstract-column check."""
    fs, base = filesystem(root)
    base = base.rstrip("/")
    fs.invalidate_cache(base)
    try:
        found = fs.glob(f"{base}/*/*/*/routed.parquet")
    except FileNotFoundError:
        return []
    return sorted(fs.unstrip_protocol(p) for p in found)
