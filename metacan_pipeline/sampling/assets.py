"""The ``sample_design`` asset and its blocking check (SPEC section 5)."""


from collections import Counter

import dagster as dg
import pyarrow as pa

from ..frame.assets import frame
from ..meta import counts_markdown, table_metadata
from ..storage import MetacanStorage
from .design import DESIGN_SCHEMA, draw_sample


class SampleDesignConfig(dg.Config):
    """Sample size and hash salt; a new salt draws a new sample."""

    fraction: float = 0.3
    min_per_stratum: int = 1
    salt: str = "metacan-sample-v1"


@dg.asset(group_name="labeling", kinds={"python", "parquet"}, code_version="1", owners=["team:metacan"], deps=[frame])
def sample_design(context: dg.AssetExecutionContext, config: SampleDesignConfig, storage: MetacanStorage) -> dg.MaterializeResult:
    """Strata, selection probabilities and design weights over the sampling frame (SPEC section 5).

    One row per sampling-frame work (``in_sampling_frame``): stratum (route combination x abstract
    availability), N_h, n_h, salted-hash rank, ``selection_probability = n_h / N_h``,
    ``design_weight = 1 / pi`` and ``in_sample``. The ``codex`` teacher labels the works in the sample.
    """
    rows = storage.read_table("frame", ["id", "route_key", "has_abstract", "in_sampling_frame"]).to_pylist()
    eligible = [r for r in rows if r["in_sampling_frame"]]
    design = draw_sample(eligible, config.fraction, config.min_per_stratum, config.salt)
    n = storage.write_table("sample_design", pa.Table.from_pylist(design, schema=DESIGN_SCHEMA))
    sizes = {r["stratum"]: r["stratum_size"] for r in design}
    sampled = Counter(r["stratum"] for r in design if r["in_sample"])
    context.log.info(f"sample_design: {n} sampling-frame works in {len(sizes)} strata; {sum(sampled.values())} in the sample")
    return dg.MaterializeResult(
        metadata=table_metadata(
            DESIGN_SCHEMA, n, [r for r in design if r["in_sample"]], ["id", "stratum", "selection_probability", "design_weight"],
            strata=len(sizes),
            sample_size=sum(sampled.values()),
            stratum_sizes=counts_markdown(sizes, "stratum", "N_h"),
            stratum_sample_sizes=counts_markdown(dict(sampled), "stratum", "n_h"),
        )
    )


@dg.asset_check(asset=sample_design, blocking=True, description="Strata partition the sampling frame and every pi > 0 (SPEC section 5).")
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
        metadata={"sampling_frame_size": frame_n, "design_rows": design_n, "sum_of_stratum_sizes": strata_sum, "rows_with_pi_not_positive": bad_pi},
    )
