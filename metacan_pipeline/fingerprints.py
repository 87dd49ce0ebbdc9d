"""The inputs of a stage, fingerprinted: an asset that stands between the assets a stage reads and the assets of the
stage, so the lineage shows one named edge per input into the stage's group instead of one per (input, asset) pair.

Each input table gets one row: its row count and a content fingerprint, the sum over its rows of DuckDB's ``hash()``
of every column except the run bookkeeping (:data:`BOOKKEEPING`). The sum does not depend on row order, changes when
any row's content changes, and is comparable only between runs of the same DuckDB version (it is not a cryptographic
digest; the release's SHA-256 checksums are). A table not materialized yet has 0 rows and no fingerprint. The
asset's data version is the SHA-256 of the rows, so Dagster marks the stage stale only when what it reads changed.
"""

import datetime as dt
import hashlib
from collections.abc import Sequence

import dagster as dg
import pyarrow as pa

from .meta import table_metadata
from .storage import MetacanStorage
from .tables.student import INPUTS_SCHEMA

#: The run bookkeeping left out of a fingerprint: a re-run that writes the same rows keeps its fingerprint.
BOOKKEEPING = frozenset({"run_id", "computed_at", "created_at"})


def fingerprint_tables(storage: MetacanStorage, names: Sequence[str], run_id: str, now: dt.datetime) -> pa.Table:
    """One row per table of ``names``: rows and fingerprint (see the module docstring)."""
    rows = []
    with storage.connect(read_only=True) as con:
        for name in names:
            if not storage.has_table(name):
                rows.append({"input": name, "rows": 0, "fingerprint": None, "note": "not materialized yet"})
                continue
            cols = [r[0] for r in con.execute(f'DESCRIBE "{name}"').fetchall() if r[0] not in BOOKKEEPING]
            listed = ", ".join(f'"{c}"' for c in cols)
            n, total = con.execute(f'SELECT count(*), sum(hash({listed})::HUGEINT) FROM "{name}"').fetchone()
            rows.append({"input": name, "rows": n, "fingerprint": f"{total or 0:032x}", "note": None})
    for row in rows:
        row["run_id"], row["computed_at"] = run_id, now
    return pa.Table.from_pylist(rows, schema=INPUTS_SCHEMA)


def data_version(table: pa.Table) -> str:
    """The SHA-256 of the (input, rows, fingerprint) triples: equal exactly when every input is unchanged."""
    triples = zip(*(table.column(c).to_pylist() for c in ("input", "rows", "fingerprint")), strict=True)
    return hashlib.sha256(repr(sorted(triples, key=lambda t: t[0])).encode()).hexdigest()


def inputs_asset(name: str, group: str, inputs: Sequence[str], description: str) -> dg.AssetsDefinition:
    """The asset ``name`` of group ``group``: writes the table ``name`` (:data:`INPUTS_SCHEMA`, one row per table of
    ``inputs``), depends on ``inputs``, and reports which inputs changed since its last run."""

    @dg.asset(
        name=name,
        group_name=group,
        kinds={"python", "duckdb"},
        code_version="1",
        owners=["team:metacan"],
        deps=list(inputs),
        description=description,
    )
    def _inputs(context: dg.AssetExecutionContext, storage: MetacanStorage) -> dg.MaterializeResult:
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        table = fingerprint_tables(storage, inputs, context.run.run_id, now)
        previous = storage.read_table(name).to_pylist() if storage.has_table(name) else []
        before = {r["input"]: (r["rows"], r["fingerprint"]) for r in previous}
        changed = [r["input"] for r in table.to_pylist() if before.get(r["input"]) != (r["rows"], r["fingerprint"])]
        n = storage.write_table(name, table)
        context.log.info(f"{name}: {n} inputs, changed since the last run: {', '.join(changed) or 'none'}")
        shown = table.drop_columns(["run_id", "computed_at"]).to_pylist()
        return dg.MaterializeResult(
            data_version=dg.DataVersion(data_version(table)),
            metadata=table_metadata(
                INPUTS_SCHEMA,
                n,
                None,
                None,
                changed_since_last_run=", ".join(changed) if previous else "(first run)",
                inputs=dg.MetadataValue.md(
                    "| input | rows | fingerprint |\n|---|---:|---|\n"
                    + "\n".join(f"| `{r['input']}` | {r['rows']} | {r['fingerprint'] or r['note']} |" for r in shown)
                ),
            ),
        )

    return _inputs
