"""What the audit study reads, fingerprinted: the asset ``audit_inputs`` stands between the stages that make the
machine output (the frame, every registry teacher's direct labels, the student and its decisions) and the audit
assets that measure it, so the lineage shows one named edge into the audit group instead of one per input.

Each input table gets one row: its row count and a content fingerprint, the sum over its rows of DuckDB's
``hash()`` of every column except the run bookkeeping (``run_id``, ``computed_at``, ``created_at``). The sum does not
depend on row order, changes when any row's content changes, and is comparable only between runs of the same
DuckDB version (it is not a cryptographic digest; the release's SHA-256 checksums are). A table not materialized
yet has 0 rows and no fingerprint. The asset's data version is the SHA-256 of the rows, so Dagster marks the
audit stale only when what it reads changed.
"""

from __future__ import annotations

import datetime as dt
import hashlib

import pyarrow as pa

from ..storage import MetacanStorage
from ..student.roles import direct_labels_key
from ..tables.audit import AUDIT_INPUTS_SCHEMA
from ..teachers.core.registry import load_registry

#: The run bookkeeping left out of a fingerprint: a re-run that writes the same rows keeps its fingerprint.
BOOKKEEPING = frozenset({"run_id", "computed_at", "created_at"})

#: The inputs of the audit study, in pipeline order: the tables (and assets) the audit assets read.
AUDIT_INPUTS: tuple[str, ...] = (
    "frame",
    "sample_design",
    "teacher_qualification",
    *(direct_labels_key(t) for t in load_registry()),
    "student_training_set",
    "student_heads",
    "predictions",
    "prediction_thresholds",
)


def fingerprint_inputs(storage: MetacanStorage, run_id: str, now: dt.datetime) -> pa.Table:
    """One row per table of :data:`AUDIT_INPUTS`: rows and fingerprint (see the module docstring)."""
    rows = []
    with storage.connect(read_only=True) as con:
        for name in AUDIT_INPUTS:
            if not storage.has_table(name):
                rows.append({"input": name, "rows": 0, "fingerprint": None, "note": "not materialized yet"})
                continue
            cols = [r[0] for r in con.execute(f'DESCRIBE "{name}"').fetchall() if r[0] not in BOOKKEEPING]
            listed = ", ".join(f'"{c}"' for c in cols)
            n, total = con.execute(f'SELECT count(*), sum(hash({listed})::HUGEINT) FROM "{name}"').fetchone()
            rows.append({"input": name, "rows": n, "fingerprint": f"{total or 0:032x}", "note": None})
    for row in rows:
        row["run_id"], row["computed_at"] = run_id, now
    return pa.Table.from_pylist(rows, schema=AUDIT_INPUTS_SCHEMA)


def data_version(table: pa.Table) -> str:
    """The SHA-256 of the (input, rows, fingerprint) triples: equal exactly when every input is unchanged."""
    triples = zip(*(table.column(c).to_pylist() for c in ("input", "rows", "fingerprint")), strict=True)
    return hashlib.sha256(repr(sorted(triples, key=lambda t: t[0])).encode()).hexdigest()
