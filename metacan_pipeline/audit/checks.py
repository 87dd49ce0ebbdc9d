"""The blocking check on ``audit_sample`` (SPEC sections 5 and 10): under the current protocol the strata
partition the frame and the design is what the rule says.

:func:`sample_problems` is a plain function over a DuckDB connection (tested on its own); the asset check
:func:`audit_sample_partitions_frame` wraps it. Only the current protocol is checked against the frame: an older
protocol's sample was drawn on the frame build it names, and stays as it was.
"""

from __future__ import annotations

import dagster as dg
import duckdb

from ..storage import MetacanStorage
from .protocol.locked import EXCLUDED_TRAINED, current_protocol_id

#: Relative tolerance of the float comparisons (pi = n_h / N_h, design_weight = 1 / pi).
TOLERANCE = 1e-12

_PROBLEMS_SQL = """
WITH s AS (SELECT * FROM audit_sample WHERE protocol_id = $pid),
strata AS (
  SELECT stratum, count(*) AS rows, min(stratum_size) AS n_big, max(stratum_size) AS n_big_max,
         min(stratum_sample_size) AS n_small, max(stratum_sample_size) AS n_small_max,
         count(*) FILTER (in_sample) AS drawn
  FROM s GROUP BY stratum)
SELECT
  (SELECT count(*) FROM frame f WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = f.id)) AS frame_works_missing,
  (SELECT count(*) FROM s WHERE NOT EXISTS (SELECT 1 FROM frame f WHERE f.id = s.id)) AS rows_not_in_frame,
  (SELECT count(*) FROM (SELECT id FROM s GROUP BY id HAVING count(*) > 1)) AS ids_more_than_once,
  (SELECT coalesce(sum(n_big), 0) FROM strata) - (SELECT count(*) FROM frame) AS stratum_sizes_minus_frame_size,
  (SELECT count(*) FROM strata WHERE n_big <> n_big_max OR n_big <> rows) AS strata_whose_size_is_not_their_rows,
  (SELECT count(*) FROM strata WHERE n_small <> n_small_max OR drawn <> n_small) AS strata_whose_draws_are_not_n_h,
  (SELECT count(*) FROM s WHERE stratum <> $excluded
     AND (selection_probability IS NULL OR isnan(selection_probability) OR NOT selection_probability > 0)) AS rows_with_pi_not_positive,
  (SELECT count(*) FROM s WHERE stratum <> $excluded AND selection_probability > 0
     AND abs(selection_probability - stratum_sample_size / stratum_size) > $tol * selection_probability)
     AS rows_with_pi_not_n_h_over_N_h,
  (SELECT count(*) FROM s WHERE stratum <> $excluded AND selection_probability > 0
     AND (design_weight IS NULL OR abs(design_weight - 1 / selection_probability) > $tol * design_weight))
     AS rows_with_weight_not_one_over_pi,
  (SELECT count(*) FROM s WHERE stratum = $excluded
     AND (in_sample OR selection_probability <> 0 OR design_weight IS NOT NULL OR NOT trained_on))
     AS excluded_rows_not_excluded,
  (SELECT count(*) FROM s WHERE in_sample IS NULL OR trained_on IS NULL) AS rows_with_null_flags
"""


def sample_problems(con: duckdb.DuckDBPyConnection, protocol_id: str) -> dict[str, int]:
    """Counts of every way the ``audit_sample`` rows of ``protocol_id`` can break the design (all 0 when sound):
    frame works without a row, rows of works not in the frame, ids twice, stratum sizes not summing to the frame
    size, a stratum whose N_h is not its row count, a stratum whose in-sample count is not its n_h, a pi not > 0
    (outside the excluded trained stratum, whose rows must have pi 0, no weight, no draw), a pi other than
    n_h / N_h, a design weight other than 1 / pi, NULL flags. A protocol with no rows misses every frame work."""
    cur = con.execute(_PROBLEMS_SQL, {"pid": protocol_id, "excluded": EXCLUDED_TRAINED, "tol": TOLERANCE})
    names = [d[0] for d in cur.description]
    return dict(zip(names, (int(v) for v in cur.fetchone()), strict=True))


@dg.asset_check(
    asset="audit_sample",
    blocking=True,
    description="Under the current protocol the audit strata partition the frame, every pi > 0, n_h works drawn per "
    "stratum, design_weight = 1 / pi (SPEC sections 5 and 10).",
)
def audit_sample_partitions_frame(storage: MetacanStorage) -> dg.AssetCheckResult:
    """Fails on any problem :func:`sample_problems` counts for the current protocol, or when there is none."""
    with storage.connect() as con:
        pid = current_protocol_id(con)
        problems = sample_problems(con, pid) if pid else {"no_current_protocol": 1}
    return dg.AssetCheckResult(passed=not any(problems.values()), metadata={"protocol_id": pid or "none", **problems})
