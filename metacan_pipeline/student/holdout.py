"""The student's holdout: defined once, grouped by venue, used by every metric (SPEC sections 6-7).

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

The frozen set is only ever read in DuckDB: its size (:func:`freeze_holdout`), the labelled works in it
(:func:`frozen_among`), and joins with the frame and the round scores (:mod:`.rounds`). At 4.3 million frame
works it holds hundreds of thousands of works; none of them becomes a Python object.

Changing the rule (fraction or salt) is a new :data:`HOLDOUT_VERSION`; an existing frozen set of another
version is refused with an error that says how to start again.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

import pyarrow as pa

from ..storage import MetacanStorage
from ..tables import transaction

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


def freeze_holdout(storage: MetacanStorage, frame_batches: Iterable[pa.RecordBatch], run_id: str) -> tuple[int, bool]:
    """Freeze the holdout from ``frame_batches`` (record batches of the frame with ``id`` and ``venue_id``) when
    the table ``student_holdout`` is empty: every work the rule holds out, batch by batch, in one transaction
    (a failure freezes nothing). Returns ``(works in the frozen holdout, newly_frozen)``.

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
        if not versions:
            with transaction(con):
                for b in frame_batches:
                    keys = [
                        venue_key(w, v) for w, v in zip(b["id"].to_pylist(), b["venue_id"].to_pylist(), strict=True)
                    ]
                    held = pa.table({"work_id": b["id"], "venue_key": pa.array(keys, pa.string())}).filter(  # noqa: F841
                        pa.array([venue_held_out(k) for k in keys], pa.bool_())
                    )
                    con.execute(
                        "INSERT INTO student_holdout SELECT work_id, venue_key, ?, now(), ? FROM held",
                        [HOLDOUT_VERSION, run_id],
                    )
        return con.execute("SELECT count(*) FROM student_holdout").fetchone()[0], not versions


def frozen_among(storage: MetacanStorage, ids: Iterable[str]) -> set[str]:
    """The works of ``ids`` (the labelled works a caller holds anyway) that are in the frozen holdout."""
    wanted = pa.table({"work_id": pa.array(sorted(set(ids)), pa.string())})  # noqa: F841 (DuckDB replacement scan)
    with storage.connect() as con:
        rows = con.execute("SELECT work_id FROM student_holdout SEMI JOIN wanted USING (work_id)").fetchall()
    return {r[0] for r in rows}
