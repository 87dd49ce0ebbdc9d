"""The blocking check on the release database (SPEC section 9): the current release holds exactly the works of the
published records (``work_records``), and its FTS5 index holds one row per work of the release.
:func:`release_problems` is a plain function (tested alone); the asset check wraps it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dagster as dg
import duckdb

from ..storage import MetacanStorage, sql_literal
from .build.release import current_release_id, database_path, index_path


def release_problems(data_dir: str | Path, records: str | Path) -> tuple[int, list[str]]:
    """``(works in the current release, problems)``: every way the release at ``data_dir`` disagrees with the
    published records (``records``: a Parquet file or glob with an ``id`` column, the ``work_records`` files).

    A problem names how many works differ and the first (by id): records that are not works of the release, works
    that are not published records, and an FTS5 index whose ``work_keys`` rows are not one row per work of the
    release (compared by count, distinct count and sum of the work keys: a missing, repeated or foreign key changes
    one of them). Raises ``ReleaseUnavailable`` when there is no current release."""
    data_dir = Path(data_dir)
    rid = current_release_id(data_dir)
    source = f"read_parquet({sql_literal(str(records))}, hive_partitioning=false)"
    con = duckdb.connect(str(database_path(data_dir, rid)), read_only=True)
    try:
        works, keys = con.execute("SELECT count(*), coalesce(sum(work_key), 0) FROM works").fetchone()
        missing = con.execute(
            f"SELECT count(*), min(id) FROM (SELECT id FROM {source} EXCEPT SELECT id FROM works)"
        ).fetchone()
        extra = con.execute(
            f"SELECT count(*), min(id) FROM (SELECT id FROM works EXCEPT SELECT id FROM {source})"
        ).fetchone()
    finally:
        con.close()
    problems = []
    if missing[0]:
        problems.append(f"{missing[0]} published records are not works of {rid} (the first: {missing[1]})")
    if extra[0]:
        problems.append(f"{extra[0]} works of {rid} are not published records (the first: {extra[1]})")
    index = sqlite3.connect(f"file:{index_path(data_dir, rid)}?mode=ro", uri=True)
    try:
        rows, distinct, total = index.execute(
            "SELECT count(*), count(DISTINCT work_key), coalesce(sum(work_key), 0) FROM work_keys"
        ).fetchone()
    except sqlite3.Error as exc:
        problems.append(f"the FTS5 index of {rid} cannot be read ({exc}): materialize site_database again")
    else:
        if (rows, distinct, total) != (works, works, keys):
            problems.append(
                f"the FTS5 index of {rid} holds {rows} rows of {distinct} works for the release's {works} works "
                f"(work keys summing to {total}, not {keys})"
            )
    finally:
        index.close()
    return works, problems


@dg.asset_check(
    asset="site_database",
    blocking=True,
    description="SPEC section 9: the served release holds exactly the works of the published records, and its "
    "full-text index one row per work.",
)
def site_database_matches_records(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when the current release and ``work_records`` hold different works, or its FTS5 index misses a work."""
    works, problems = release_problems(storage.root, storage.table_dir("work_records") / "*.parquet")
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"works": works, "problems_count": len(problems), "problems": "\n".join(problems) or "none"},
    )
