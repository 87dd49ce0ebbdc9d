"""Tables of the sampling stage (:mod:`metacan_pipeline.sampling`, SPEC section 5)."""

from __future__ import annotations

from .fields import column, columns
from .table import Table

DESIGN_SCHEMA = columns(
    "id",
    "stratum",
    "stratum_size",
    "stratum_sample_size",
    "hash_rank",
    "selection_probability",
    "design_weight",
    "in_sample",
)

TABLES = [
    Table(
        "sample_design",
        "one sampling-frame work: its stratum, salted-hash rank, selection probability, design weight, in sample or not",
        "sample_design",
        DESIGN_SCHEMA,
        ("id",),
    ),
]


#: The sample design's scratch files (``sampling/design.py``, deleted when the design is drawn): every sampling-frame
#: work with its stratum and salted hash, and one row per stratum with its size and sample size.
STAGED_STRATA_SCHEMA = columns("id", "stratum", "hash")
DESIGN_PLAN_SCHEMA = columns("stratum", "big_n", column("n", description="n_h: works drawn from the stratum"))
