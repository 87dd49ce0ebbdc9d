"""Stratified sample design over the sampling frame (SPEC section 5).

Strata partition the sampling frame (frame rows with ``in_sampling_frame``): here the route
combination crossed with abstract availability. Within a stratum works are ordered by a salted
SHA-256 of the id and the first ``n_h`` are taken, ``n_h = max(min_per_stratum, round(fraction *
N_h))`` capped at ``N_h``; ``pi = n_h / N_h`` and ``design_weight = 1 / pi``. Every stratum gets at
least one draw, so no work has selection probability 0. The sample is drawn after the frame filter.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

import pyarrow as pa

DESIGN_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("stratum", pa.string()),
        ("stratum_size", pa.int64()),
        ("stratum_sample_size", pa.int64()),
        ("hash_rank", pa.int64()),
        ("selection_probability", pa.float64()),
        ("design_weight", pa.float64()),
        ("in_sample", pa.bool_()),
    ]
)


def salted_hash(work_id: str, salt: str) -> str:
    """Hex SHA-256 of ``salt:id``: a stable, unpredictable order within a stratum."""
    return hashlib.sha256(f"{salt}:{work_id}".encode()).hexdigest()


def stratum_of(row: dict) -> str:
    """``<route combination>|abstract`` or ``...|no_abstract``."""
    return f"{row['route_key']}|{'abstract' if row['has_abstract'] else 'no_abstract'}"


def draw_sample(rows: list[dict], fraction: float, min_per_stratum: int, salt: str) -> list[dict]:
    """Design rows (:data:`DESIGN_SCHEMA`) for every sampling-frame row in ``rows``.

    ``rows`` need ``id``, ``route_key``, ``has_abstract``. Raises ValueError for a fraction outside
    (0, 1] or ``min_per_stratum < 1`` (either would give some work selection probability 0).
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"sample fraction must be in (0, 1], got {fraction}")
    if min_per_stratum < 1:
        raise ValueError(f"min_per_stratum must be >= 1 so that every pi > 0, got {min_per_stratum}")
    strata: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        strata[stratum_of(r)].append(r)
    out = []
    for stratum, members in sorted(strata.items()):
        members = sorted(members, key=lambda r: (salted_hash(r["id"], salt), r["id"]))
        big_n = len(members)
        n = min(big_n, max(min_per_stratum, round(fraction * big_n)))
        pi = n / big_n
        for rank, r in enumerate(members):
            out.append(
                {
                    "id": r["id"],
                    "stratum": stratum,
                    "stratum_size": big_n,
                    "stratum_sample_size": n,
                    "hash_rank": rank,
                    "selection_probability": pi,
                    "design_weight": 1.0 / pi,
                    "in_sample": rank < n,
                }
            )
    return out
