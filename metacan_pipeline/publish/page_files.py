"""The files of the static site as stored on disk: a page or a record file at the name its URL gives
(``works/<model_version>/<id>.html``, ``records/<id>.json``), or precompressed beside it as ``<name>.gz`` only
(:data:`metacan_pipeline.settings.PAGE_ENCODINGS`, the ``work_pages`` option ``page_encoding``).

A gzip file holds exactly the UTF-8 bytes of the plain file; it is written with no file name and a zero
modification time, so the same text always gives the same bytes (a page rendered again from an unchanged record
is an unchanged file). The URL stays the plain name: ``metacan serve --work-pages static`` and any static server that
serves precompressed files (nginx ``gzip_static``; docs/usage.md) answer it from the ``.gz`` file with
``Content-Encoding: gzip``, or decompressed to a client that does not accept gzip.
"""

from __future__ import annotations

import gzip
from pathlib import Path

#: The suffix of a precompressed file.
GZ = ".gz"
#: zlib's default level: at 4.3M pages level 9 saves little more and costs about twice the time.
GZIP_LEVEL = 6


def stored_name(url_path: str, encoding: str) -> str:
    """The file that holds ``url_path`` (relative to the site root) under ``encoding``: the name itself
    (``plain``), or the name plus ``.gz`` (``gzip``)."""
    if encoding == "gzip":
        return url_path + GZ
    if encoding == "plain":
        return url_path
    raise ValueError(f"page encoding {encoding!r} must be plain or gzip")


def url_name(stored: str) -> str:
    """The URL path a stored file answers (its name without ``.gz``)."""
    return stored.removesuffix(GZ)


def encoded(text: str, encoding: str) -> bytes:
    """``text`` as stored under ``encoding``: its UTF-8 bytes, gzip-compressed for ``gzip`` (no name, mtime 0)."""
    data = text.encode("utf-8")
    if encoding == "gzip":
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    if encoding == "plain":
        return data
    raise ValueError(f"page encoding {encoding!r} must be plain or gzip")


def write_site_file(site_dir: Path, url_path: str, text: str, encoding: str) -> str:
    """Write ``text`` as the file of ``url_path`` under ``site_dir`` in ``encoding``, through a sibling temporary
    file and a rename (never half a file), then remove the file of the other encoding if one is there (a site
    switched from plain to gzip, or back, keeps one file per URL). Returns the stored name, relative to
    ``site_dir``."""
    stored = stored_name(url_path, encoding)
    path = site_dir / stored
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(encoded(text, encoding))
    tmp.replace(path)
    other = site_dir / (url_path if encoding == "gzip" else url_path + GZ)
    other.unlink(missing_ok=True)
    return stored


def remove_site_file(site_dir: Path, url_path: str) -> None:
    """Remove the file of ``url_path`` under ``site_dir`` in either encoding (a withdrawn work)."""
    (site_dir / url_path).unlink(missing_ok=True)
    (site_dir / (url_path + GZ)).unlink(missing_ok=True)


def read_site_file(site_dir: Path, url_path: str) -> str | None:
    """The text of ``url_path`` under ``site_dir``, from its plain file or its ``.gz`` file; None when neither
    exists."""
    path = site_dir / url_path
    if path.is_file():
        return path.read_text(encoding="utf-8")
    gz = site_dir / (url_path + GZ)
    if gz.is_file():
        return gzip.decompress(gz.read_bytes()).decode("utf-8")
    return None
