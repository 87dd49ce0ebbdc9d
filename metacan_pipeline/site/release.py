"""Release databases on disk, and opening the current one read-only (issue 15).

Layout under ``<data dir>/site/releases/``:

- ``<release_id>.duckdb``: the release database (tables of :mod:`metacan_pipeline.tables.site`);
- ``<release_id>.fts.sqlite``: its full-text index (:mod:`.fts`);
- ``current.json``: ``{"release_id", "database", "fts_index"}``, the release the site serves, replaced atomically
  (temporary sibling + rename) after both files are complete.

A release id is ``release-<12 hex>`` of a SHA-256 over the release layout version, every published record's
``(id, record_hash)`` in id order and the page context: the same records give the same id, so an unchanged
re-run rewrites nothing, and a citation naming a release names exactly one set of records.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ..vocab import CATEGORIES
from . import fts

POINTER = "current.json"
ASSET = "site_database"


class ReleaseUnavailable(RuntimeError):
    """No release database can be served: the message names the file and the asset to materialize."""


def releases_dir(data_dir: str | Path) -> Path:
    return Path(data_dir).resolve() / "site" / "releases"


def database_path(data_dir: str | Path, release_id: str) -> Path:
    return releases_dir(data_dir) / f"{release_id}.duckdb"


def index_path(data_dir: str | Path, release_id: str) -> Path:
    return releases_dir(data_dir) / f"{release_id}.fts.sqlite"


def write_pointer(data_dir: str | Path, release_id: str) -> Path:
    """Make ``release_id`` the current release (atomic rename of ``current.json``); returns its path."""
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
    if not isinstance(release_id, str) or not release_id.startswith("release-") or "/" in release_id:
        raise ReleaseUnavailable(f"the release pointer {path} names {release_id!r}, which is not a release id")
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
    def classifier_version(self) -> str:
        """The classifier version(s) of the release as one string (``none`` when no work has a prediction)."""
        return ",".join(self.classifier_versions) or "none"


class Release:
    """The current release, opened read-only: ``duckdb`` (one connection; use :meth:`cursor` per request, one per
    thread), the FTS5 index (:meth:`search`) and ``info``.

    Raises :class:`ReleaseUnavailable` naming the file and the asset ``site_database`` when the pointer, the
    database or the index is missing or is not a release database (corrupt, or of another layout).
    """

    def __init__(self, data_dir: str | Path, release_id: str | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self._lock = threading.Lock()
        self.release_id = release_id or current_release_id(self.data_dir)
        self.db_path = database_path(self.data_dir, self.release_id)
        self.fts_path = index_path(self.data_dir, self.release_id)
        for path in (self.db_path, self.fts_path):
            if not path.is_file():
                raise ReleaseUnavailable(
                    f"the release database file {path} is missing; materialize the asset {ASSET!r} "
                    f"(`metacan run`, or the Dagster UI) to build it."
                )
        try:
            self.duckdb = duckdb.connect(str(self.db_path), read_only=True)
            self.info = _read_info(self.duckdb)
        except (duckdb.Error, TypeError, ValueError) as exc:
            raise ReleaseUnavailable(
                f"{self.db_path} is not a readable release database ({str(exc).splitlines()[0]}); "
                f"delete it and materialize the asset {ASSET!r} again."
            ) from None
        if self.info.release_id != self.release_id:
            raise ReleaseUnavailable(
                f"{self.db_path} holds release {self.info.release_id}, not {self.release_id}; "
                f"materialize the asset {ASSET!r} again."
            )
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
