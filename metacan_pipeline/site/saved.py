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

from ..tables.site import SAVED_QUERIES
from .cohort import Cohort

HASH_RE = re.compile(r"[0-9a-f]{12}")


class QueryStore:
    """The saved cohorts (one SQLite file; one connection guarded by a lock, as requests run on threads)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._con = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._con.execute(SAVED_QUERIES.ddl())

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
