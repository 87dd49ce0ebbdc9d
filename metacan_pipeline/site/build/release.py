"""Release databases on disk, and opening the current one read-only.

Layout under ``<data dir>/site/releases/``:

- ``<release_id>.duckdb``: the release database (tables of :mod:`metacan_pipeline.tables.site`);
- ``<release_id>.fts.sqlite``: its full-text index (:mod:`.fts`);
- ``<release_id>.manifest.json``: what the build wrote (both files' sizes in bytes and SHA-256, every release
  table's row count), written once when the release first becomes current; start-up verifies the files against it
  (:func:`verify_release`), so a truncated, replaced or overwritten file is a start-up error, not a site that
  counts 60 works and exports none;
- ``<release_id>.verified.json``: each file's size, modification time and SHA-256 when its checksum last matched,
  so a restart hashes only a file that changed since (a 4.3M-work release database is tens of GB);
- ``current.json``: ``{"release_id", "database", "fts_index"}``, the release the site serves, replaced atomically
  (temporary sibling + rename) after both files are complete.

A release id is ``release-<12 hex>`` of a SHA-256 over the release layout version, every published record's
``(id, record_hash)`` in id order and the page context: the same records give the same id, so an unchanged
re-run rewrites nothing, and a citation naming a release names exactly one set of records.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import uuid
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import duckdb

from ...tables.site import release_tables
from ...vocab import CATEGORIES
from . import fts

POINTER = "current.json"
ASSET = "site_database"
#: What a release id is (``release-`` and 12 hex digits of a SHA-256, :func:`.build.release_id_of`).
RELEASE_ID_RE = re.compile(r"release-[0-9a-f]{12}")
#: How much of an unexpected value an error message repeats (the rest is counted, never echoed).
ECHO_CHARS = 40


class ReleaseUnavailable(RuntimeError):
    """No release database can be served: the message names the file and the asset to materialize."""


def releases_dir(data_dir: str | Path) -> Path:
    return Path(data_dir).resolve() / "site" / "releases"


def database_path(data_dir: str | Path, release_id: str) -> Path:
    return releases_dir(data_dir) / f"{release_id}.duckdb"


def index_path(data_dir: str | Path, release_id: str) -> Path:
    return releases_dir(data_dir) / f"{release_id}.fts.sqlite"


def manifest_path(data_dir: str | Path, release_id: str) -> Path:
    return releases_dir(data_dir) / f"{release_id}.manifest.json"


def verified_path(data_dir: str | Path, release_id: str) -> Path:
    return releases_dir(data_dir) / f"{release_id}.verified.json"


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def shorten(value: object, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` when short, else the repr of its first ``limit`` characters and how long it was: an error
    never echoes a long value back in full."""
    text = str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def _write_json(path: Path, body: dict) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def table_row_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """``{table: rows}`` of every release table (:func:`metacan_pipeline.tables.site.release_tables`)."""
    return {t.name: con.execute(f'SELECT count(*) FROM "{t.name}"').fetchone()[0] for t in release_tables()}


def record_manifest(data_dir: str | Path, release_id: str) -> Path:
    """Write ``<release_id>.manifest.json``: both files' sizes and every table's row count, read from the files
    just built (:func:`verify_release` checks them at every start-up). Returns its path."""
    db, index = database_path(data_dir, release_id), index_path(data_dir, release_id)
    con = duckdb.connect(str(db), read_only=True)
    try:
        counts = table_row_counts(con)
    finally:
        con.close()
    body = {
        "release_id": release_id,
        "database_bytes": db.stat().st_size,
        "fts_index_bytes": index.stat().st_size,
        "database_sha256": file_sha256(db),
        "fts_index_sha256": file_sha256(index),
        "row_counts": counts,
    }
    path = manifest_path(data_dir, release_id)
    _write_json(path, body)
    return path


def read_manifest(data_dir: str | Path, release_id: str) -> dict:
    """The build's manifest of a release. Raises :class:`ReleaseUnavailable` naming it when it is missing or
    unreadable."""
    path = manifest_path(data_dir, release_id)
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(body.get("row_counts"), dict) or body.get("release_id") != release_id:
            raise ValueError("it names no row counts of this release")
        return body
    except FileNotFoundError:
        raise ReleaseUnavailable(
            f"the release manifest {path} is missing, so the release files cannot be checked against what the build "
            f"wrote; materialize the asset {ASSET!r} again to rebuild the release and its manifest."
        ) from None
    except (OSError, ValueError, AttributeError) as exc:
        raise ReleaseUnavailable(
            f"the release manifest {path} is unreadable ({exc}); materialize the asset {ASSET!r} again."
        ) from None


def verify_sizes(data_dir: str | Path, release_id: str, manifest: dict) -> None:
    """Raise :class:`ReleaseUnavailable` naming the file when a release file's size is not the one the build
    wrote (a truncated copy, a half-finished transfer, another file put in its place)."""
    for path, key in (
        (database_path(data_dir, release_id), "database_bytes"),
        (index_path(data_dir, release_id), "fts_index_bytes"),
    ):
        size, want = path.stat().st_size, manifest.get(key)
        if size != want:
            wrote = f"{want:,}" if isinstance(want, int) else repr(want)
            raise ReleaseUnavailable(
                f"{path} is {size:,} bytes, but the build of {release_id} wrote {wrote} bytes "
                f"(truncated, or another file put in its place?); materialize the asset {ASSET!r} again."
            )


def verify_checksums(data_dir: str | Path, release_id: str, manifest: dict) -> None:
    """Raise :class:`ReleaseUnavailable` naming the file when its SHA-256 is not the one the build recorded (bytes
    overwritten in place keep the size, and the tables may still count right). A file whose size and modification
    time are those of its last matching check (``<release_id>.verified.json``) is not hashed again. A manifest that
    records no checksum (written before they were recorded) is refused too: nothing could tell damaged bytes from the
    build's, so the release is built again (``site_database`` does so when it finds one)."""
    stamp_path = verified_path(data_dir, release_id)
    try:
        stamps = json.loads(stamp_path.read_text(encoding="utf-8"))
        stamps = stamps if isinstance(stamps, dict) else {}
    except (OSError, ValueError):
        stamps = {}
    changed = False
    for path, key in (
        (database_path(data_dir, release_id), "database_sha256"),
        (index_path(data_dir, release_id), "fts_index_sha256"),
    ):
        want = manifest.get(key)
        if not isinstance(want, str) or len(want) != 64:
            raise ReleaseUnavailable(
                f"the release manifest {manifest_path(data_dir, release_id)} records no SHA-256 of {path.name} "
                f"(written by an older version), so its bytes cannot be checked; materialize the asset {ASSET!r} "
                "again to build the release with checksums."
            )
        st = path.stat()
        seen = [st.st_size, st.st_mtime_ns, want]
        if stamps.get(path.name) == seen:
            continue
        got = file_sha256(path)
        if got != want:
            raise ReleaseUnavailable(
                f"{path} has SHA-256 {got[:16]}..., but the build of {release_id} wrote {str(want)[:16]}... (its "
                f"bytes were overwritten or damaged); materialize the asset {ASSET!r} again."
            )
        stamps[path.name], changed = seen, True
    if changed:
        try:  # a read-only data folder only costs the next start-up another hash
            _write_json(stamp_path, stamps)
        except OSError:
            pass


def verify_counts(path: Path, counts: dict[str, int], manifest: dict) -> None:
    """Raise :class:`ReleaseUnavailable` naming the file and the table when a table's row count differs from the
    build's (the file is damaged)."""
    for table, want in manifest["row_counts"].items():
        if counts.get(table) != want:
            raise ReleaseUnavailable(
                f"{path}: table {table} holds {counts.get(table)!r} rows, but the build wrote {want}; the file is "
                f"damaged. Materialize the asset {ASSET!r} again."
            )


def verify_release(data_dir: str | Path, release_id: str) -> None:
    """Check a release's files against its manifest (sizes, checksums, then every table's row count); raises
    :class:`ReleaseUnavailable` naming the file and the asset when they disagree or cannot be read."""
    manifest = read_manifest(data_dir, release_id)
    verify_sizes(data_dir, release_id, manifest)
    verify_checksums(data_dir, release_id, manifest)
    db = database_path(data_dir, release_id)
    con = open_database(db)
    try:
        verify_counts(db, table_row_counts(con), manifest)
    except duckdb.Error as exc:
        raise unreadable(db, exc) from None
    finally:
        con.close()


def unreadable(path: Path, exc: BaseException) -> ReleaseUnavailable:
    """The start-up error of a release database DuckDB could not open or read: in use by another process (a lock),
    or damaged."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "Could not set lock" in text or "Conflicting lock" in text:
        holder = re.search(r"held in (.*?\(PID \d+\))", text)
        who = holder.group(1) if holder else "another process"
        return ReleaseUnavailable(
            f"{path} is in use by another process ({who}), which holds it open for writing; DuckDB lets no reader "
            f"in meanwhile. Wait for that process (a {ASSET!r} build?) to finish, or stop it, then start again."
        )
    return ReleaseUnavailable(
        f"{path} is not a readable release database ({text}); delete it and materialize the asset {ASSET!r} again."
    )


def open_database(path: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a release database; :func:`unreadable`'s error when DuckDB refuses it."""
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise unreadable(path, exc) from None


def write_pointer(data_dir: str | Path, release_id: str) -> Path:
    """Make ``release_id`` the current release (atomic rename of ``current.json``); returns its path. A release
    without a manifest gets one first (:func:`record_manifest`: its files as they are now)."""
    if not manifest_path(data_dir, release_id).is_file():
        record_manifest(data_dir, release_id)
    folder = releases_dir(data_dir)
    path = folder / POINTER
    tmp = folder / f".{POINTER}.{uuid.uuid4().hex[:8]}"
    body = {
        "release_id": release_id,
        "database": database_path(data_dir, release_id).name,
        "fts_index": index_path(data_dir, release_id).name,
    }
    tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def current_release_id(data_dir: str | Path) -> str:
    """The id ``current.json`` names. Raises :class:`ReleaseUnavailable` when it is missing or unreadable."""
    path = releases_dir(data_dir) / POINTER
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        release_id = body["release_id"]
    except FileNotFoundError:
        raise ReleaseUnavailable(
            f"no release database to serve: {path} does not exist. Materialize the asset {ASSET!r} "
            f"(`metacan run`, or the Dagster UI) to build one."
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReleaseUnavailable(
            f"the release pointer {path} is unreadable ({exc}); materialize the asset {ASSET!r} again to rewrite it."
        ) from None
    if not isinstance(release_id, str) or not RELEASE_ID_RE.fullmatch(release_id):
        raise ReleaseUnavailable(
            f"the release pointer {path} names {shorten(release_id)}, which is not a release id "
            f"(release- and 12 hex digits); materialize the asset {ASSET!r} again to rewrite it."
        )
    return release_id


@dataclass(frozen=True)
class ReleaseInfo:
    """The ``release_info`` row of a release database."""

    release_id: str
    n_works: int
    classifier_versions: tuple[str, ...]
    teachers: tuple[str, ...]
    score_arms: tuple[str, ...]
    built_at: str
    page_context: dict
    #: classifier version -> the categories none of whose heads passed the support gate (SPEC section 6)
    ungated: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def teacher_pairs(self) -> tuple[str, ...]:
        """Every pair of the release's teachers as the dossier names it (``"a vs b"``, names sorted)."""
        return tuple(f"{a} vs {b}" for a, b in combinations(sorted(self.teachers), 2))

    @property
    def classifier_version(self) -> str:
        """The classifier version(s) of the release as one string (``none`` when no work has a prediction)."""
        return ",".join(self.classifier_versions) or "none"


class Release:
    """The current release, opened read-only: ``duckdb`` (one connection; use :meth:`cursor` per request, one per
    thread), the FTS5 index (:meth:`search`) and ``info``.

    Raises :class:`ReleaseUnavailable` naming the file and the asset ``site_database`` when the pointer, the
    database, the index or the manifest is missing, when a file's size, checksum or a table's row count is not what the build
    wrote (:func:`verify_release`), when the database is in use by a writing process, or when it is not a release
    database (corrupt, or of another layout).
    """

    def __init__(self, data_dir: str | Path, release_id: str | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self._lock = threading.Lock()
        self.release_id = release_id or current_release_id(self.data_dir)
        if not RELEASE_ID_RE.fullmatch(self.release_id):
            raise ReleaseUnavailable(f"{shorten(self.release_id)} is not a release id (release- and 12 hex digits)")
        self.db_path = database_path(self.data_dir, self.release_id)
        self.fts_path = index_path(self.data_dir, self.release_id)
        for path in (self.db_path, self.fts_path):
            if not path.is_file():
                raise ReleaseUnavailable(
                    f"the release database file {path} is missing; materialize the asset {ASSET!r} "
                    f"(`metacan run`, or the Dagster UI) to build it."
                )
        manifest = read_manifest(self.data_dir, self.release_id)
        verify_sizes(self.data_dir, self.release_id, manifest)
        verify_checksums(self.data_dir, self.release_id, manifest)
        self.duckdb = open_database(self.db_path)
        try:
            self.info = _read_info(self.duckdb)
            counts = table_row_counts(self.duckdb)
        except (duckdb.Error, TypeError, ValueError) as exc:
            self.duckdb.close()
            raise unreadable(self.db_path, exc) from None
        if self.info.release_id != self.release_id:
            self.duckdb.close()
            raise ReleaseUnavailable(
                f"{self.db_path} holds release {self.info.release_id}, not {self.release_id}; "
                f"materialize the asset {ASSET!r} again."
            )
        try:
            verify_counts(self.db_path, counts, manifest)
        except ReleaseUnavailable:
            self.duckdb.close()
            raise
        try:
            fts.open_index(self.fts_path).close()
        except sqlite3.Error as exc:
            raise ReleaseUnavailable(
                f"{self.fts_path} is not a readable full-text index ({exc}); delete it and materialize the asset "
                f"{ASSET!r} again."
            ) from None

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of its own for one request (DuckDB connections are not shared between threads; the
        parent hands them out one at a time)."""
        with self._lock:
            return self.duckdb.cursor()

    def search_index(self) -> sqlite3.Connection:
        """A read-only connection to the full-text index, for one request (checked at start-up)."""
        return fts.open_index(self.fts_path, check=False)

    def close(self) -> None:
        self.duckdb.close()


def _read_info(con: duckdb.DuckDBPyConnection) -> ReleaseInfo:
    row = con.execute(
        "SELECT release_id, n_works, classifier_versions, teachers, score_arms, CAST(built_at AS VARCHAR), "
        "CAST(page_context AS VARCHAR) FROM release_info"
    ).fetchall()
    if len(row) != 1:
        raise ValueError(f"release_info holds {len(row)} rows, not 1")
    rid, n, versions, teachers, arms, built_at, ctx = row[0]
    ungated = con.execute(
        "SELECT model_version, list(target ORDER BY target) FROM (SELECT model_version, target FROM classifier_heads "
        "WHERE target IN (SELECT unnest(?::VARCHAR[])) GROUP BY ALL HAVING NOT bool_or(coalesce(gate_passed, false))) "
        "GROUP BY model_version",
        [list(CATEGORIES)],
    ).fetchall()
    return ReleaseInfo(
        rid,
        n,
        tuple(versions),
        tuple(teachers),
        tuple(arms),
        built_at,
        json.loads(ctx),
        {v: tuple(t) for v, t in ungated},
    )
