"""The Retraction Watch stage's check: Retraction Watch never admits a work to the frame."""

import dagster as dg

from ..storage import MetacanStorage


def works_outside_frame(con) -> int:
    """The ``work_retractions`` works that are not frame works (0: the join started from the frame)."""
    return con.execute(
        "SELECT count(DISTINCT id) FROM work_retractions WHERE id NOT IN (SELECT id FROM frame)"
    ).fetchone()[0]


@dg.asset_check(
    asset="work_retractions",
    blocking=True,
    description="Every work with a Retraction Watch notice is a frame work (Retraction Watch admits none).",
)
def work_retractions_within_frame(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when ``work_retractions`` names a work the frame does not hold."""
    with storage.connect(read_only=True) as con:
        outside = works_outside_frame(con)
    return dg.AssetCheckResult(passed=outside == 0, metadata={"works_outside_frame": outside})
