"""The student's holdout: defined once, grouped by venue, used by every metric (SPEC sections 6-7, issue 5).

*Rule.* A venue is held out when the salted SHA-256 of its key, read as a number in [0, 1), is below
:data:`HOLDOUT_FRACTION`. The key is the OpenAlex source id (``venue_id``); a work without a venue is
its own group (``no-venue:<work id>``). Because the rule depends on the venue only, every work of a
held-out venue is held out, now and in every later frame: no venue's style leaks from training into
evaluation (the original system's leak showed AP 0.969 against an honest 0.152).

*Frozen set.* The first time the student is trained, the frame works that the rule holds out are
written to the DuckDB table ``student_holdout`` (``work_id, venue_key, holdout_version, frozen_at,
run_id``) and never changed afterwards: every metric (head AP/AUROC/ECE, the machine-score rounds'
maturity gate) is computed on those works, so a metric never moves because its pool moved (the
original system once measured on a pool that shrank as the loop ran). Works that join the frame later
in a held-out venue are kept out of training by the rule, but do not join the frozen set.

Changing the rule (fraction or salt) is a new :data:`HOLDOUT_VERSION`; an existing frozen set of another
version is refused with an error that says how to start again.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

from ..storage import MetacanStorage

HOLDOUT_FRACTION = 0.2
HOLDOUT_SALT = "metacan-student-holdout"
HOLDOUT_VERSION = f"venue-sha256-{HOLDOUT_SALT}-{HOLDOUT_FRACTION}"


def venue_key(work_id: str, venue_id: str | None) -> str:
    """The grouping key of a work: its OpenAlex source id, or ``no-venue:<work id>`` when it has none."""
    return venue_id or f"no-venue:{work_id}"


@functools.lru_cache(maxsize=1 << 16)
def venue_held_out(key: str) -> bool:
    """True when the venue ``key`` is in the holdout (salted SHA-256 / 2^256 < :data:`HOLDOUT_FRACTION`)."""
    digest = hashlib.sha256(f"{HOLDOUT_SALT}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < HOLDOUT_FRACTION


def freeze_holdout(
    storage: MetacanStorage, frame_rows: Iterable[tuple[str, str | None]], run_id: str
) -> tuple[set[str], bool]:
    """The frozen holdout's work ids, defining it from ``frame_rows`` ((work id, venue id) pairs) when
    the table ``student_holdout`` is empty. Returns ``(ids, newly_frozen)``.

    Raises ValueError when the stored set was frozen under another :data:`HOLDOUT_VERSION`.
    """
    with storage.connect() as con:
        versions = [r[0] for r in con.execute("SELECT DISTINCT holdout_version FROM student_holdout").fetchall()]
        if versions and versions != [HOLDOUT_VERSION]:
            raise ValueError(
                f"student_holdout in {storage.duckdb_path} was frozen under {versions}, the code defines {HOLDOUT_VERSION!r}: "
                f"metrics across the two are not comparable. To start the holdout again on purpose, DROP TABLE student_holdout "
                f"(every later metric then starts a new series)"
            )
        if versions:
            return {r[0] for r in con.execute("SELECT work_id FROM student_holdout").fetchall()}, False
        rows = [
            (wid, key, HOLDOUT_VERSION, run_id) for wid, vid in frame_rows if venue_held_out(key := venue_key(wid, vid))
        ]
        if rows:
            con.executemany("INSERT INTO student_holdout VALUES (?, ?, ?, now(), ?)", rows)
        return {r[0] for r in rows}, True
