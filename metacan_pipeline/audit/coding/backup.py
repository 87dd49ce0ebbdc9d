"""The coding store's backup: a consistent copy through SQLite's online backup, the write-ahead log included."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .base import StoreBase
from .errors import CodingError


class BackupMixin(StoreBase):
    """Copying the whole store to a new file."""

    def backup(self, dest: Path | str) -> int:
        """Copy the whole store, the answers still in its write-ahead log included, to ``dest`` (a new file) through
        SQLite's online backup, consistent while the pages and the CLI write; returns the answers copied. A copy of
        ``coding.sqlite`` alone misses every answer the log has not checkpointed yet. Raises :class:`CodingError`
        when ``dest`` exists (a backup never overwrites another)."""
        dest = Path(dest)
        if dest.exists():
            raise CodingError("backup", f"{dest} exists: name a new file (a backup never overwrites another)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        target = sqlite3.connect(dest)
        try:
            self._con.backup(target)
            return target.execute("SELECT count(*) FROM coding_answers").fetchone()[0]
        finally:
            target.close()
