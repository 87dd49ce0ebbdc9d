"""Tables of the sampling stage (:mod:`metacan_pipeline.sampling`, SPEC section 5)."""

from __future__ import annotations

import pyarrow as pa

from . import Table

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
STAGED_STRATA_SCHEMA = pa.schema([("id", pa.string()), ("stratum", pa.string()), ("hash", pa.string())])
DESIGN_PLAN_SCHEMA = pa.schema([("stratum", pa.string()), ("big_n", pa.int64()), ("n", pa.int64())])
