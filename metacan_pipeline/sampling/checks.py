"""The sampling stage's blocking check: the strata partition the sampling frame and every selection
probability is positive (SPEC section 5)."""

import dagster as dg

from ..storage import MetacanStorage


@dg.asset_check(
    asset="sample_design",
    blocking=True,
    description="Strata partition the sampling frame and every pi > 0 (SPEC section 5).",
)
def sample_design_partitions_frame(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails when stratum sizes do not sum to the sampling-frame size, or any pi is 0 or NULL."""
    with storage.connect() as con:
        frame_n = con.execute("SELECT count(*) FROM frame WHERE in_sampling_frame").fetchone()[0]
        design_n, strata_sum, bad_pi = con.execute(
            """SELECT count(*), (SELECT sum(s) FROM (SELECT DISTINCT stratum, stratum_size s FROM sample_design)),
                      count(*) FILTER (selection_probability IS NULL OR selection_probability <= 0)
               FROM sample_design"""
        ).fetchone()
    strata_sum = strata_sum or 0
    return dg.AssetCheckResult(
        passed=frame_n == design_n == strata_sum and bad_pi == 0,
        metadata={
            "sampling_frame_size": frame_n,
            "design_rows": design_n,
            "sum_of_stratum_sizes": strata_sum,
            "rows_with_pi_not_positive": bad_pi,
        },
    )
