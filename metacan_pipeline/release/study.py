"""The audit study a release holds, and the recomputation of its validation tables from the bundle alone.

A bundle whose ``validation_report`` tables are frozen also holds the study they rest on
(:mod:`metacan_pipeline.audit.estimates.study`), as ``tables/study_*.parquet``: the audit sample, the coding tasks,
every answer and adjudication under the coders' pseudonyms, the machine adjudicators' codes, every system's decisions
on the drawn works (with the classifier's score and threshold) and the frame-wide decision means; the locked protocol
is ``tables/audit_protocols.parquet``. :func:`recompute` rebuilds every validation table from those files with the
estimator code the asset runs, in a temporary folder (no data folder, no network), and compares them cell by cell
with the frozen ones: floats within a relative 1e-9 (NaN equals NaN), everything else exactly.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..audit.estimates import study as audit_study
from ..audit.estimates import validation
from ..audit.protocol.locked import AuditProtocol
from ..tables.audit import HUMAN_VALIDATION_SCHEMA, STUDY_TABLES
from ..tables.audit import TABLES as AUDIT_CATALOG

#: What each study table of a bundle holds (its README and ``release.json`` say it).
STUDY_DESCRIPTIONS = {
    "study_sample": "the audit sample: every drawn work of the study with its stratum, N_h (stratum_size), n_h "
    "(stratum_sample_size), selection probability pi, design weight 1/pi, and its language, abstract and route groups; "
    "trained_on: drawn from the works that trained or calibrated the classifier (reported apart)",
    "study_tasks": "the coding tasks: each work's queue position and the SHA-256 of the evidence it shows",
    "study_answers": "every answer (role code) and adjudication (role adjudication) ever appended, under the coder's "
    "pseudonym (coder-<10 hex>, stable per coder and study, keyed by a secret that never leaves the coding store): "
    "answer id, work, role, the SPEC section 3 fields, unresolved, the evidence version shown, time, source; "
    "append order seq (the latest answer per coder and role counts)",
    "study_machine_codes": "the machine adjudicators' codes (a code source of its own, never human validation)",
    "study_decisions": "every system's decision on every drawn work and head (teachers' direct labels, the "
    "classifier's consensus and candidate rules), with the classifier's score and the head's threshold",
    "study_frame_means": "each system's mean decision over the audited population (the prediction-powered prevalence)",
    "study_coding": "what the coding store kept of the protocol: its content hash (the seed of the coder pairs) and "
    "the evaluated heads (a pair that differs only on other fields needs no adjudication); no row: every field counts",
}
REL_TOL, ABS_TOL = 1e-9, 1e-12
#: The gate table a release freezes whole (every run's rows): its newest row per head is compared.
GATE_TABLE = "human_validation"
_EPOCH = dt.datetime(1970, 1, 1)


@dataclass(frozen=True)
class Difference:
    """One cell (or row) where a frozen validation table and its recomputation differ."""

    table: str
    key: str
    column: str
    published: object
    recomputed: object

    def __str__(self) -> str:
        return f"{self.table} [{self.key}] {self.column}: published {self.published!r}, recomputed {self.recomputed!r}"


@dataclass(frozen=True)
class Recomputed:
    """The outcome of :func:`recompute`: tables and cells compared, and every difference."""

    tables: int
    cells: int
    differences: list[Difference]


def freeze_study(study: audit_study.Study, folder: Path) -> dict[str, int]:
    """Write ``study``'s tables into ``folder`` (``<name>.parquet``, rows in a fixed order, zstd), returns rows per
    table."""
    order = {
        "study_sample": ["id"],
        "study_tasks": ["position", "id"],
        "study_answers": ["seq"],
        "study_machine_codes": ["adjudicator", "id", "head"],
        "study_decisions": ["system", "head", "id"],
        "study_frame_means": ["system", "head"],
        "study_coding": ["protocol_id"],
    }
    counts = {}
    for name, table in study.tables.items():
        table = table.sort_by([(c, "ascending") for c in order[name]])
        pq.write_table(table, folder / f"{name}.parquet", compression="zstd")
        counts[name] = table.num_rows
    return counts


def _protocol(tables: Path, protocol_id: str) -> AuditProtocol:
    """The locked protocol ``protocol_id`` of the bundle, re-hashed; ValueError naming the file otherwise."""
    path = tables / "audit_protocols.parquet"
    rows = [r for r in pq.read_table(path).to_pylist() if r["protocol_id"] == protocol_id]
    if not rows:
        raise ValueError(f"{path} holds no protocol {protocol_id!r}, which the study tables name")
    protocol = AuditProtocol.from_json(rows[0]["protocol_json"])
    if protocol.protocol_id != protocol_id or protocol.content_sha256 != rows[0]["content_sha256"]:
        raise ValueError(f"{path}: protocol {protocol_id}'s JSON no longer hashes to its id and content_sha256")
    return protocol


def recomputed_tables(tables: Path) -> dict[str, pa.Table]:
    """Every validation table recomputed from the study and protocol files in ``tables`` (without their run
    columns). Raises ValueError naming the file when a study file is missing or names no single protocol."""
    read = {}
    for name in STUDY_TABLES:
        path = tables / f"{name}.parquet"
        if not path.is_file():
            raise ValueError(f"{path} is missing: the validation tables cannot be recomputed without it")
        read[name] = pq.read_table(path)
    pids = set(read["study_sample"].column("protocol_id").to_pylist())
    if len(pids) != 1:
        raise ValueError(f"{tables / 'study_sample.parquet'} names {len(pids)} protocols; a release holds one study")
    protocol = _protocol(tables, pids.pop())
    study = audit_study.study_from_tables(protocol, read)
    inputs = audit_study.report_inputs_of(study)
    reports = validation.run_report(inputs)
    out = audit_study.report_tables(inputs, reports, "", _EPOCH)
    gate = validation.human_validation_rows(inputs, reports[validation.HUMAN], "", _EPOCH)
    out[GATE_TABLE] = pa.Table.from_pylist(gate, schema=HUMAN_VALIDATION_SCHEMA)
    return {
        name: t.drop_columns([c for c in ("run_id", "computed_at") if c in t.column_names]) for name, t in out.items()
    }


def newest_gate(published: pa.Table, protocol_id: str) -> pa.Table:
    """The newest ``human_validation`` row per head of ``protocol_id`` (what records and the layer rule read), without
    its run columns: the published gate that the recomputed one must equal."""
    rows: dict[tuple, dict] = {}
    for r in published.to_pylist():
        k = (r["protocol_id"], r["classifier_version"], r["head"])
        if r["protocol_id"] == protocol_id and (k not in rows or str(r["computed_at"]) >= str(rows[k]["computed_at"])):
            rows[k] = r
    table = pa.Table.from_pylist(list(rows.values()), schema=published.schema)
    return table.drop_columns([c for c in ("run_id", "computed_at") if c in table.column_names])


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return a == b


def compare(name: str, published: pa.Table, recomputed: pa.Table, key: tuple[str, ...]) -> tuple[int, list[Difference]]:
    """Cells compared and every difference between two versions of the table ``name``, rows matched on ``key``."""
    columns = [c for c in published.column_names if c not in key]
    if recomputed.column_names != published.column_names:
        return 0, [Difference(name, "(columns)", "(all)", published.column_names, recomputed.column_names)]

    out, cells = [], 0

    def rows(t: pa.Table, side: str) -> dict[tuple, dict]:
        got: dict[tuple, dict] = {}
        for r in t.to_pylist():
            k = tuple(r[c] for c in key)
            if k in got:  # a key twice: one of the two rows would go unchecked
                label = ", ".join(f"{c}={v}" for c, v in zip(key, k, strict=True))
                out.append(Difference(name, label, "(row)", f"{side} twice", "once"))
            got[k] = r
        return got

    mine, theirs = rows(published, "published"), rows(recomputed, "recomputed")
    for k in sorted(mine.keys() | theirs.keys(), key=repr):
        label = ", ".join(f"{c}={v}" for c, v in zip(key, k, strict=True))
        if k not in theirs or k not in mine:
            out.append(Difference(name, label, "(row)", "present" if k in mine else "absent",
                                  "present" if k in theirs else "absent"))  # fmt: skip
            continue
        for c in columns:
            cells += 1
            if not _same(mine[k][c], theirs[k][c]):
                out.append(Difference(name, label, c, mine[k][c], theirs[k][c]))
    return cells, out


def recompute(folder: Path) -> Recomputed:
    """Recompute every frozen validation table of the bundle in ``folder`` from its study and compare (module
    docstring). A bundle with no validation table frozen has nothing to recompute (0 tables). Raises ValueError naming
    the file when a study or validation file is missing or unreadable."""
    tables = folder / "tables"
    frozen = [n for n in audit_study.VALIDATION_TABLES if (tables / f"{n}.parquet").is_file()]
    studied = [n for n in STUDY_TABLES if (tables / f"{n}.parquet").is_file()]
    if not frozen and not studied:  # no audit study shipped: no head may claim to have passed human validation
        gate = tables / f"{GATE_TABLE}.parquet"
        claims = [r for r in pq.read_table(gate).to_pylist() if r["passed"]] if gate.is_file() else []
        return Recomputed(
            0,
            0,
            [
                Difference(
                    GATE_TABLE,
                    f"protocol_id={r['protocol_id']}, head={r['head']}",
                    "passed",
                    True,
                    "no study in the bundle to recompute it from",
                )  # fmt: skip
                for r in claims
            ],
        )
    if len(frozen) != len(audit_study.VALIDATION_TABLES):
        missing = sorted(set(audit_study.VALIDATION_TABLES) - set(frozen))
        raise ValueError(f"{tables / (missing[0] + '.parquet')} is missing: the bundle's validation tables are partial")
    ours = recomputed_tables(tables)
    keys = {t.name: t.primary_key for t in AUDIT_CATALOG} | {GATE_TABLE: ("protocol_id", "classifier_version", "head")}
    cells, differences = 0, []
    if not (tables / f"{GATE_TABLE}.parquet").is_file():
        raise ValueError(f"{tables / (GATE_TABLE + '.parquet')} is missing: the published gate cannot be checked")
    pid = pq.read_table(tables / "study_sample.parquet", columns=["protocol_id"]).column(0)[0].as_py()
    for name in [*frozen, GATE_TABLE]:
        published = pq.read_table(tables / f"{name}.parquet")
        if name == GATE_TABLE:
            published = newest_gate(published, pid)
        recomputed = (
            ours[name].cast(published.schema) if ours[name].schema.names == published.schema.names else ours[name]
        )
        n, diff = compare(name, published, recomputed, keys[name])
        cells += n
        differences += diff
    return Recomputed(len(frozen) + 1, cells, differences)
