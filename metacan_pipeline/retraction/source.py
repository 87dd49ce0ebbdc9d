"""Where the Retraction Watch file comes from, and its archive.

The file is ``METACAN_RETRACTION_WATCH_FILE`` (a local copy), else a download from ``METACAN_RETRACTION_WATCH_URL``
(each materialization downloads it again: that is the refresh), else nothing: no Retraction Watch file is
configured, and every work is "not checked". Nothing is downloaded in the default run.

Whatever is read is first archived, gzip-compressed and named by its content hash, under
``<data dir>/retraction_watch/rw-<12 hex>.csv.gz`` with a sidecar ``rw-<12 hex>.json`` (source without query
string, retrieval time, the file's own date, SHA-256 and size of the uncompressed file); the notices are read from
the archived copy, so what was read is what is kept. The same content is archived once (the first sidecar stays).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import gzip
import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from .. import settings
from ..http import public_url, retry_after_seconds
from ..storage import scratch_path

#: The archive folder under the data folder.
ARCHIVE_DIR = "retraction_watch"
#: The status of the source row when no file is configured (``loaded`` otherwise).
NOT_CONFIGURED = "not_configured"
LOADED = "loaded"
#: Seconds a download may take in all (the export is about 60 MB).
DOWNLOAD_TIMEOUT_S = 600.0
#: Download attempts (a 429 or 5xx answer or a broken connection is tried again, after its Retry-After).
DOWNLOAD_ATTEMPTS = 3


class RetractionWatchDownloadError(RuntimeError):
    """The Retraction Watch URL did not give the file."""


@dataclass(frozen=True)
class ArchivedFile:
    """One archived Retraction Watch file: what the ``retraction_watch_source`` row says of it."""

    rw_version: str
    source: str
    file: str
    sha256: str
    bytes: int
    retrieved_at: str
    file_date: str | None

    @property
    def path(self) -> Path:
        return Path(self.file)


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def archive(src: Path, archive_dir: Path, source: str, retrieved_at: str, file_date: str | None) -> ArchivedFile:
    """Archive the file ``src`` (plain CSV, or gzip: then its content is what is hashed) under ``archive_dir`` by its
    content hash (gzip, plus a JSON sidecar) and return what was archived; a file already archived keeps its first
    sidecar (its first retrieval)."""
    compressed = _is_gzip(src)
    digest = hashlib.sha256()
    size = 0
    with gzip.open(src, "rb") if compressed else open(src, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    sha = digest.hexdigest()
    version = f"rw-{sha[:12]}"
    archive_dir.mkdir(parents=True, exist_ok=True)
    target = archive_dir / f"{version}.csv.gz"
    sidecar = archive_dir / f"{version}.json"
    if target.exists() and sidecar.exists():
        return ArchivedFile(**{**json.loads(sidecar.read_text("utf-8")), "file": str(target)})
    tmp = scratch_path(archive_dir, f".{version}.tmp-")
    if compressed:  # an archived copy given back (METACAN_RETRACTION_WATCH_FILE=<archive>/rw-....csv.gz)
        shutil.copyfile(src, tmp)
    else:
        with open(src, "rb") as fin, gzip.open(tmp, "wb", compresslevel=6) as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    tmp.rename(target)
    entry = ArchivedFile(version, source, str(target), sha, size, retrieved_at, file_date)
    meta = {k: v for k, v in asdict(entry).items() if k != "file"}
    tmp_meta = scratch_path(archive_dir, f".{version}.json.tmp-")
    tmp_meta.write_text(json.dumps(meta, indent=2, sort_keys=True), "utf-8")
    tmp_meta.rename(sidecar)
    return entry


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def from_file(path: Path, archive_dir: Path) -> ArchivedFile:
    """Archive the local file ``path``; its date is its modification time (UTC)."""
    mtime = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).replace(microsecond=0).isoformat()
    return archive(path, archive_dir, str(path), _now(), mtime)


def download(url: str, archive_dir: Path, client: httpx.Client | None = None) -> ArchivedFile:
    """Download ``url`` (redirects followed, streamed to a scratch file) and archive it; its date is the server's
    ``Last-Modified`` when given. A 429 or 5xx answer or a broken connection is tried :data:`DOWNLOAD_ATTEMPTS` times
    (waiting its Retry-After, else 2 s); raises :class:`RetractionWatchDownloadError` naming the URL (without its
    query string) and what it answered."""
    own = client is None
    client = client or httpx.Client(follow_redirects=True, timeout=httpx.Timeout(60.0, read=DOWNLOAD_TIMEOUT_S))
    shown = public_url(url)
    archive_dir.mkdir(parents=True, exist_ok=True)
    tmp = scratch_path(archive_dir, ".download.tmp-")
    problem = ""
    try:
        for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
            wait = 2.0
            try:
                with client.stream("GET", url) as resp:
                    if resp.status_code == 200:
                        with open(tmp, "wb") as fh:
                            for chunk in resp.iter_bytes(1 << 20):
                                fh.write(chunk)
                        if tmp.stat().st_size == 0:
                            raise RetractionWatchDownloadError(f"{shown} answered an empty file")
                        return archive(tmp, archive_dir, shown, _now(), _http_date(resp.headers.get("last-modified")))
                    problem = f"HTTP {resp.status_code}"
                    if resp.status_code != 429 and resp.status_code < 500:
                        break
                    wait = retry_after_seconds(resp.headers.get("retry-after"), cap_s=60.0) or wait
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if attempt < DOWNLOAD_ATTEMPTS:
                time.sleep(wait)
        raise RetractionWatchDownloadError(
            f"the Retraction Watch file could not be downloaded from {shown} ({problem}); check "
            f"{settings.RETRACTION_WATCH_URL_ENV}, or give a local copy in {settings.RETRACTION_WATCH_FILE_ENV}"
        )
    finally:
        tmp.unlink(missing_ok=True)
        if own:
            client.close()


def _http_date(value: str | None) -> str | None:
    if not value:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).isoformat()


def configured_file(data_dir: Path, client: httpx.Client | None = None) -> ArchivedFile | None:
    """The configured Retraction Watch file, archived: ``METACAN_RETRACTION_WATCH_FILE``, else a download of
    ``METACAN_RETRACTION_WATCH_URL``, else None (none configured: no network is used)."""
    archive_dir = Path(data_dir) / ARCHIVE_DIR
    local = settings.retraction_watch_file()
    if local is not None:
        return from_file(local, archive_dir)
    url = settings.retraction_watch_url()
    if url is not None:
        return download(url, archive_dir, client)
    return None


def archived_versions(data_dir: Path) -> list[str]:
    """The versions archived under ``data_dir`` (oldest file first)."""
    folder = Path(data_dir) / ARCHIVE_DIR
    if not folder.is_dir():
        return []
    files = sorted(folder.glob("rw-*.csv.gz"), key=os.path.getmtime)
    return [f.name.removesuffix(".csv.gz") for f in files]
