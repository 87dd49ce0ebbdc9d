"""Saved cohorts behind ``/q/<12 hex>`` links: ``<data dir>/site/queries.sqlite``, the site's only writable file.

A row is written the first time a cohort is shown (content-addressed: the hash is of the canonical filters, the
release id and the classifier version, so writing it again changes nothing) and never changed; the release
databases stay read-only.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
import threading
from pathlib import Path

from ...tables.site import SAVED_QUERIES
from ..query.cohort import Cohort

HASH_RE = re.compile(r"[0-9a-f]{12}")


class QueryStoreUnavailable(RuntimeError):
    """The saved-cohorts file cannot be opened or is not one: the message names the file and what to do."""


class QueryStore:
    """The saved cohorts (one SQLite file; one connection guarded by a lock, as requests run on threads).

    Raises :class:`QueryStoreUnavailable` naming the file when it is not a SQLite database, is damaged, holds a
    ``saved_queries`` table of another shape, or cannot be written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._con = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise QueryStoreUnavailable(
                f"cannot open the saved cohorts file {path} ({exc}): the site saves every cohort it shows there, so "
                f"that its /q/ link resolves. Serve a data folder this process may write to (a read-only one: serve a "
                f"copy)."
            ) from None
        try:
            problems = [r[0] for r in self._con.execute("PRAGMA quick_check").fetchall() if r[0] != "ok"]
            if problems:
                raise sqlite3.DatabaseError("; ".join(problems[:3]))
            self._con.execute(SAVED_QUERIES.ddl())
            self._con.execute(f"SELECT {', '.join(SAVED_QUERIES.schema.names)} FROM saved_queries LIMIT 0")
        except sqlite3.Error as exc:
            self._con.close()
            raise QueryStoreUnavailable(
                f"{path} is not a readable store of saved cohorts ({exc}). It holds the cohorts the /q/ links name: "
                f"restore it from a backup, or move it aside to start an empty one (links made before then answer 404 "
                f"until their cohort is shown again)."
            ) from None
        try:  # every cohort shown is saved: a store that cannot be written would answer every cohort with an error
            self._con.execute("BEGIN IMMEDIATE")
            self._con.execute("DELETE FROM saved_queries WHERE query_hash = 'write-probe'")
            self._con.execute("ROLLBACK")
        except sqlite3.Error as exc:
            self._con.close()
            raise QueryStoreUnavailable(
                f"{path} cannot be written ({exc}): the site saves every cohort it shows there, so that its /q/ link "
                f"resolves. Serve a data folder this process may write to (a read-only one: serve a copy)."
            ) from None

    def save(self, cohort: Cohort) -> str:
        """Store the cohort under its hash (no change when it is there); returns the hash."""
        h = cohort.query_hash()
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._lock:
            self._con.execute(
                "INSERT OR IGNORE INTO saved_queries VALUES (?, ?, ?, ?, ?)",
                [
                    h,
                    json.dumps(cohort.filters, sort_keys=True),
                    cohort.release.release_id,
                    cohort.classifier_version,
                    now,
                ],
            )
        return h

    def get(self, query_hash: str) -> dict | None:
        """``{"filters", "release_id", "classifier_version", "created_at"}`` of a saved cohort, or None."""
        if not HASH_RE.fullmatch(query_hash):
            return None
        with self._lock:
            row = self._con.execute(
                "SELECT filters, release_id, classifier_version, created_at FROM saved_queries WHERE query_hash = ?",
                [query_hash],
            ).fetchone()
        if row is None:
            return None
        return {"filters": json.loads(row[0]), "release_id": row[1], "classifier_version": row[2], "created_at": row[3]}

    def close(self) -> None:
        self._con.close()
