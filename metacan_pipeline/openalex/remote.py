"""Input folders in object storage: an ``s3://bucket/prefix`` URL (or any other fsspec URL) read through fsspec
(s3fs for S3), so the 330 GB OpenAlex snapshot in the public bucket ``s3://openalex`` is read in place.

What a URL folder changes, and what it does not:

- Listing: one recursive listing (``fs.find(detail=True)``) gives every file with its size and its **version**, the
  object's ETag (else a version id, an md5 or a modification time, whatever the filesystem reports): object storage
  has no trustworthy mtime, so the version takes the place of ``mtime_ns`` in the inventory (column ``etag``), in
  the part's build key and in the check that a file is still the one the inventory took stock of.
- Reading: a file is copied through fsspec to a local file beside the part being built (or a temporary folder),
  then read by the same code as a local file (DuckDB fast path, exact path, gzip check, sha256), so a part built
  from a URL holds the same rows and the same sha256 as one built from a local copy, and the frame build id is the
  same. One network read per file; the disk held is one file per worker (at most about 1 GB for a snapshot part).
  A read that fails (a connection dropped, a timeout, a short body) is retried from where it stopped
  (:func:`copy_to`, ``METACAN_REMOTE_READ_ATTEMPTS`` attempts, exponential waits), then raised as
  :class:`RemoteReadError`, which the part build turns into a quarantine row naming the file and the reason.
- Access (``s3://``): anonymous when ``METACAN_S3_ANON=1`` or when botocore finds no credentials (a public bucket),
  else signed with the usual AWS environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``,
  instance roles); ``METACAN_S3_ENDPOINT_URL`` (else ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``) points at an
  S3-compatible server. Credentials are never put in a URL, a log line, a metadata entry or an error message:
  a URL carrying ``user:secret@`` is refused, and every message built from a storage error goes through
  :func:`scrub`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from .. import settings

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: Bytes asked of the store per read while copying a file (s3fs: one ranged GET each).
READ_BLOCK = 16 << 20
#: The keys of an fsspec ``info`` dict that identify one version of a file, best first.
_VERSION_KEYS = ("ETag", "etag", "VersionId", "version_id", "md5Hash", "md5", "mtime", "LastModified", "created")
#: Environment variables whose values must never appear in a message.
_SECRET_ENVS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECURITY_TOKEN")


class RemoteReadError(OSError):
    """A file in object storage could not be read whole after every attempt (the reason is in the message)."""


def is_url(value: str | os.PathLike) -> bool:
    """Whether ``value`` is a URL (``scheme://...``) rather than a local path."""
    return isinstance(value, str) and bool(_URL.match(value))


def normalize(url: str) -> str:
    """``url`` without trailing ``/``; raises ValueError naming the URL (without its secret) when it carries user
    info (``s3://key:secret@bucket``): credentials come from the AWS environment, never from a URL that is logged."""
    parts = urlsplit(url.strip())
    if "@" in parts.netloc:
        raise ValueError(
            f"OpenAlex input {parts.scheme}://{parts.netloc.rsplit('@', 1)[1]}{parts.path} carries credentials in its "
            f"URL: remove them and set them in the AWS environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or "
            f"AWS_PROFILE), which is never logged"
        )
    return url.strip().rstrip("/")


def scrub(text: str) -> str:
    """``text`` with the value of every AWS secret of the environment replaced by ``***``."""
    for name in _SECRET_ENVS:
        value = os.environ.get(name, "")
        if len(value) >= 4:
            text = text.replace(value, "***")
    return text


@functools.lru_cache(maxsize=8)
def _credentials_found(_env: tuple) -> bool:
    """Whether botocore's credential chain finds credentials (cached per AWS environment ``_env``)."""
    import botocore.session  # heavy, and needed only for an s3:// folder: imported when one is read

    try:
        return botocore.session.get_session().get_credentials() is not None
    except Exception:  # a broken profile: sign nothing, let the store answer
        return False


def storage_options(protocol: str) -> dict:
    """The fsspec options of a URL's filesystem: for ``s3``, ``anon`` (``METACAN_S3_ANON``, else anonymous when no
    AWS credentials are found) and ``endpoint_url`` (``METACAN_S3_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_S3``,
    ``AWS_ENDPOINT_URL``). Other protocols take their own environment (fsspec's ``FSSPEC_<PROTOCOL>_*``)."""
    if protocol not in ("s3", "s3a"):
        return {}
    anon = settings.s3_anon()
    if anon is None:
        anon = not _credentials_found(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
    options: dict = {"anon": anon}
    if endpoint := settings.s3_endpoint_url():
        options["endpoint_url"] = endpoint
    return options


def filesystem(url: str):
    """``(fsspec filesystem, path inside it)`` of ``url``, with :func:`storage_options`."""
    import fsspec  # only URL folders need it (and s3fs, which it loads): imported when one is read

    protocol = url.split("://", 1)[0].lower()
    return fsspec.core.url_to_fs(url, **storage_options(protocol))


def version_of(info: dict) -> str | None:
    """The version of one file from its fsspec ``info``: ETag (quotes dropped), else a version id, md5 or time."""
    for key in _VERSION_KEYS:
        value = info.get(key)
        if value not in (None, ""):
            return str(value).strip('"')
    return None


@dataclass(frozen=True)
class RemoteFile:
    """One file under a URL folder: its URL, its path relative to the folder, size and version."""

    url: str
    rel: str
    bytes: int
    etag: str | None

    @property
    def path(self) -> PurePosixPath:
        """The file's path inside the store (``bucket/prefix/...``), for its folder names."""
        return PurePosixPath(self.url.split("://", 1)[1])


def _retrying() -> Retrying:
    return Retrying(
        stop=stop_after_attempt(settings.remote_read_attempts()),
        wait=wait_exponential(multiplier=0.2, max=5),
        retry=retry_if_exception_type(RemoteReadError),
        reraise=True,
    )


def _read_error(url: str, exc: BaseException, what: str, detail: str = "") -> RemoteReadError:
    return RemoteReadError(scrub(f"{what} {url}{detail} failed ({type(exc).__name__}: {exc})"))


def list_files(url: str) -> list[RemoteFile]:
    """Every file under the URL folder ``url`` (recursively, sorted by path) with size and version. Raises
    FileNotFoundError naming the folder when nothing is there, RemoteReadError when the listing fails after
    every attempt."""
    fs, root = filesystem(url)
    root = root.rstrip("/")

    def listing() -> dict:
        try:
            fs.invalidate_cache(root)
            return fs.find(root, detail=True)
        except FileNotFoundError:
            return {}
        except Exception as exc:
            raise _read_error(url, exc, "listing") from None

    found = _retrying()(listing)
    if not found:
        raise FileNotFoundError(
            f"OpenAlex input folder {url} does not exist or is empty: set METACAN_OPENALEX_DIR to a folder (or an "
            f"s3:// URL) of OpenAlex JSON / JSON Lines / snapshot files; for a private bucket set the AWS credentials, "
            f"for an S3-compatible server METACAN_S3_ENDPOINT_URL"
        )
    out = []
    for path, info in sorted(found.items()):
        if info.get("type", "file") != "file" or not path.startswith(root + "/"):
            continue
        out.append(RemoteFile(fs.unstrip_protocol(path), path[len(root) + 1 :], int(info["size"]), version_of(info)))
    return out


def stat(url: str) -> tuple[int, str | None] | None:
    """``(size, version)`` of the file ``url`` as the store has it now (no cached listing), None when it is gone;
    retried as :func:`copy_to` is, then RemoteReadError."""
    fs, path = filesystem(url)

    def look() -> tuple[int, str | None] | None:
        try:
            fs.invalidate_cache(path)
            info = fs.info(path)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise _read_error(url, exc, "looking up") from None
        return int(info["size"]), version_of(info)

    return _retrying()(look)


def read_bytes(url: str) -> bytes:
    """The whole file ``url`` (a manifest, a small file), retried as :func:`copy_to` is."""
    fs, path = filesystem(url)

    def read() -> bytes:
        try:
            return fs.cat_file(path)
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise _read_error(url, exc, "reading") from None

    return _retrying()(read)


def copy_to(url: str, dest: Path, size: int, on_retry: Callable[[str], None] | None = None) -> None:
    """Copy the file ``url`` of ``size`` bytes to the local file ``dest``, in :data:`READ_BLOCK` reads. A failed
    attempt (a dropped connection, a timeout, a body shorter than ``size``) is retried from the bytes already
    copied, up to ``METACAN_REMOTE_READ_ATTEMPTS`` times with exponential waits; then RemoteReadError says why.
    FileNotFoundError when the file is gone. ``on_retry`` hears the reason of each failed attempt."""
    fs, path = filesystem(url)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(b"")
    attempt = 0

    def one() -> None:
        nonlocal attempt
        attempt += 1
        done = dest.stat().st_size
        try:
            with fs.open(path, "rb", block_size=READ_BLOCK, cache_type="none") as src, open(dest, "ab") as out:
                src.seek(done)
                while done < size and (chunk := src.read(min(READ_BLOCK, size - done))):
                    out.write(chunk)
                    done += len(chunk)
        except (FileNotFoundError, RemoteReadError):
            raise
        except Exception as exc:
            err = _read_error(url, exc, "reading", f" (attempt {attempt}, at byte {done} of {size})")
            if on_retry:
                on_retry(str(err))
            raise err from None
        if done < size:
            err = RemoteReadError(f"reading {url} stopped at byte {done} of {size} (attempt {attempt}): a short body")
            if on_retry:
                on_retry(str(err))
            raise err

    try:
        _retrying()(one)
    except RemoteReadError as exc:
        raise RemoteReadError(f"{exc}; gave up after {attempt} attempt(s)") from None


@contextlib.contextmanager
def readable(path: Path | str) -> Iterator[Path]:
    """A local path to read ``path`` from: ``path`` itself when local, else a copy in a temporary folder (deleted on
    exit) made by :func:`copy_to`. For the small files (entity lists, merged ids, a part re-read for abstracts)."""
    if not is_url(str(path)):
        yield Path(path)
        return
    url = str(path)
    found = stat(url)
    if found is None:
        raise FileNotFoundError(f"{url} is gone from object storage")
    with tempfile.TemporaryDirectory(prefix="metacan-remote-") as tmp:
        dest = Path(tmp) / PurePosixPath(url).name
        copy_to(url, dest, found[0])
        yield dest
