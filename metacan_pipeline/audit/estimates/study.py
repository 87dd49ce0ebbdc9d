"""A study as plain tables: what the validation report reads, under coders' pseudonyms (SPEC section 10).

:class:`Study` is one protocol's study as :data:`metacan_pipeline.tables.audit.STUDY_TABLES` hold it: the drawn audit
sample (stratum, N_h, n_h, pi, design weight), the coding tasks (queue position, evidence version), every answer and
adjudication ever appended under the coder's pseudonym (:mod:`..coding.pseudonyms`), the machine adjudicators' codes,
every system's decisions on the drawn works (with the classifier's score and threshold) and the frame-wide decision
means. It is the report's only input:

- :func:`export_study` reads it from the warehouse and the coding store (what ``validation_report`` and a release
  cut do);
- :func:`study_from_tables` takes it from a release bundle's Parquet tables (what ``metacan verify-release`` does);
- :func:`report_inputs_of` turns it into :class:`.validation.ReportInputs`; the final human codes are recomputed by
  the coding store's own rules on a temporary store holding the released answers (:func:`scratch_store`);
- :func:`report_tables` gives the six validation tables of a run (``validation_error_rates``, ``validation_confusion``,
  ``validation_prevalence``, ``validation_agreement``, ``validation_gate``, ``human_codes``) as Arrow tables.

So the published tables and the tables recomputed from a bundle come from one code path on the same pseudonymised
input, and agree cell for cell.
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ...storage import MetacanStorage
from ...tables.audit import (
    HUMAN_CODES_SCHEMA,
    STUDY_TABLES,
    VALIDATION_AGREEMENT_SCHEMA,
    VALIDATION_CONFUSION_SCHEMA,
    VALIDATION_ERROR_RATES_SCHEMA,
    VALIDATION_GATE_SCHEMA,
    VALIDATION_PREVALENCE_SCHEMA,
)
from ..coding.errors import CodingError
from ..coding.rules import ROLES
from ..coding.store import CodingStore
from ..coding.validate import CODE_FIELDS, validate_answer
from ..protocol.classifier import score_sql
from ..protocol.locked import AuditProtocol
from ..protocol.scratch import scratch
from . import validation
from .report import ValidationReport

#: The report tables a run writes: ``{table: (attribute of ValidationReport, schema)}``.
REPORT_TABLES = {
    "validation_error_rates": ("error_rates", VALIDATION_ERROR_RATES_SCHEMA),
    "validation_confusion": ("confusion", VALIDATION_CONFUSION_SCHEMA),
    "validation_prevalence": ("prevalence", VALIDATION_PREVALENCE_SCHEMA),
    "validation_agreement": ("agreement", VALIDATION_AGREEMENT_SCHEMA),
}
#: Every table a report run writes, in the order a release lists them.
VALIDATION_TABLES = (*REPORT_TABLES, "validation_gate", "human_codes")


@dataclass(frozen=True)
class Study:
    """One protocol's study (module docstring): ``tables`` maps each name of ``STUDY_TABLES`` to its Arrow table."""

    protocol: AuditProtocol
    tables: dict[str, pa.Table]


def _table(name: str, rows: list[dict] | pd.DataFrame) -> pa.Table:
    schema = STUDY_TABLES[name]
    if isinstance(rows, pd.DataFrame):
        return pa.Table.from_pandas(rows[schema.names], schema=schema, preserve_index=False)
    return pa.Table.from_pylist(rows, schema=schema)


def classifier_scores(storage: MetacanStorage, protocol: AuditProtocol, ids: list[str]) -> pd.DataFrame:
    """``id, head, score``: the classifier version's score on every evaluated head of the works ``ids``."""
    parts = []
    with scratch(storage, ["predictions"]) as con:
        con.register("wanted", pa.table({"id": pa.array(ids, pa.string())}))
        for head in protocol.head_names:
            parts.append(
                con.execute(
                    f"SELECT p.id, '{head}' AS head, CAST({score_sql(head)} AS DOUBLE) AS score "
                    "FROM predictions p JOIN wanted USING (id) WHERE p.model_version = ?",
                    [protocol.classifier_version],
                ).df()
            )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["id", "head", "score"])


def export_study(storage: MetacanStorage, store: CodingStore, protocol: AuditProtocol) -> Study:
    """The study of ``protocol`` as the warehouse and the coding store hold it now, coders under their pseudonyms.
    Raises ValueError when the protocol has no drawn sample (materialize audit_sample first)."""
    pid = protocol.protocol_id
    parts = validation.load_sample(storage, pid)
    sample = pd.concat(
        [parts.sample.assign(trained_on=False), parts.trained.assign(trained_on=True)], ignore_index=True
    ).sort_values("id")
    sample.insert(0, "protocol_id", pid)
    drawn = sorted(sample["id"])
    decisions, means = validation.decision_frames(storage, protocol, drawn, parts.trained_ids)
    scores = classifier_scores(storage, protocol, drawn)
    thresholds = {h.head: h.threshold for h in protocol.heads}
    decisions = decisions.merge(scores, on=["id", "head"], how="left")  # keeps the decisions' order
    teacher = ~decisions["system"].str.startswith("classifier:")
    decisions["threshold"] = decisions["head"].map(thresholds).astype("float64")
    decisions.loc[teacher, ["score", "threshold"]] = None
    machine = [
        {"protocol_id": pid, "adjudicator": r["adjudicator"], "id": r["id"], "head": r["head"], "code": r["code"]}
        for r in store.machine_codes(pid)
    ]
    tables = {
        "study_sample": _table("study_sample", sample),
        "study_tasks": _table("study_tasks", store.released_tasks(pid)),
        "study_answers": _table("study_answers", store.released_answers(pid)),
        "study_machine_codes": _table("study_machine_codes", machine),
        "study_decisions": _table("study_decisions", decisions.assign(protocol_id=pid)),
        "study_frame_means": _table("study_frame_means", means.assign(protocol_id=pid)),
        "study_coding": _table("study_coding", [{"protocol_id": pid, **kept}] if (kept := store.study(pid)) else []),
    }
    return Study(protocol, tables)


def study_from_tables(protocol: AuditProtocol, tables: Mapping[str, pa.Table]) -> Study:
    """The study of ``protocol`` from tables a release holds: every name of ``STUDY_TABLES``, the rows of ``protocol``
    only. Raises ValueError naming a missing table or column."""
    out = {}
    for name, schema in STUDY_TABLES.items():
        if name not in tables:
            raise ValueError(f"the study table {name!r} is missing")
        table = tables[name]
        missing = [c for c in schema.names if c not in table.column_names]
        if missing:
            raise ValueError(f"the study table {name!r} has no column {missing}")
        table = table.select(schema.names).cast(schema)
        rows = table.filter(pc.equal(table["protocol_id"], protocol.protocol_id))
        out[name] = rows
    return Study(protocol, out)


@contextmanager
def scratch_store(
    tasks: Iterable[Mapping[str, Any]], answers: Iterable[Mapping[str, Any]], coding: Iterable[Mapping[str, Any]] = ()
) -> Iterator[CodingStore]:
    """A temporary coding store (removed on exit) holding released ``tasks`` and ``answers`` (as
    :meth:`CodingStore.released_tasks` and :meth:`CodingStore.released_answers` give them), the answers appended in
    ``seq`` order, so the latest answer per coder and role is the one the study's own store counts, and what the
    store kept of the protocol (``coding``: its evaluated heads, which decide what needs adjudication)."""
    answers = list(answers)
    for a in answers:  # the store's own answer rules: a released answer outside them is refused, not recomputed
        given = {f: a.get(f) for f in (*CODE_FIELDS, "unresolved")}
        given["categories"] = None if given["categories"] is None else list(given["categories"])
        try:
            if a.get("role") not in ROLES:
                raise CodingError("role", f"role {a.get('role')!r} is not one of {list(ROLES)}")
            validate_answer(given, str(a.get("id")))
        except CodingError as exc:
            raise ValueError(
                f"study_answers: answer {a.get('answer_id')} on {a.get('id')} breaks a rule: {exc}"
            ) from None
    with tempfile.TemporaryDirectory(prefix="metacan-study-") as tmp, CodingStore(Path(tmp) / "coding.sqlite") as store:
        with store._write() as con:
            con.executemany(
                "INSERT INTO coding_tasks (protocol_id, id, position, evidence_sha256) VALUES (?, ?, ?, ?)",
                [[t["protocol_id"], t["id"], int(t["position"]), t["evidence_sha256"]] for t in tasks],
            )
            con.executemany(
                "INSERT INTO coding_answers (answer_id, protocol_id, id, coder, role, categories, domain, study_design, "
                "genre, about_ca_system, about_ca_topic, confidence, unresolved, note, evidence_sha256, submitted_at, "
                "source, provenance) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, NULL)",
                [
                    [
                        a["answer_id"], a["protocol_id"], a["id"], a["coder"], a["role"],
                        None if a["categories"] is None else json.dumps(list(a["categories"])),
                        a["domain"], a["study_design"], a["genre"], a["about_ca_system"], a["about_ca_topic"],
                        a["confidence"], int(bool(a["unresolved"])), a["evidence_sha256"], a["submitted_at"],
                        a["source"],
                    ]
                    for a in sorted(answers, key=lambda a: int(a["seq"]))
                ],
            )  # fmt: skip
        for kept in coding:
            store.record_study(kept["protocol_id"], kept["content_sha256"], list(kept["heads"]))
        yield store


def report_inputs_of(study: Study) -> validation.ReportInputs:
    """The report's inputs (:class:`.validation.ReportInputs`) of ``study``: the final human codes and the latest
    answers from :func:`scratch_store` (the coding store's own rules), the rest from the study's tables."""
    t = study.tables
    sample = t["study_sample"].to_pandas()
    trained = sample["trained_on"].astype(bool)

    def part(mask) -> pd.DataFrame:
        return sample.loc[mask, list(validation.SAMPLE_COLUMNS)].sort_values("id").reset_index(drop=True)

    pid = study.protocol.protocol_id
    with scratch_store(
        t["study_tasks"].to_pylist(), t["study_answers"].to_pylist(), t["study_coding"].to_pylist()
    ) as store:
        adjudicated, latest = store.adjudicated_codes(pid), store.latest_answers(pid)
    decisions = t["study_decisions"].to_pandas()[["system", "id", "head", "decision"]]
    decisions["decision"] = decisions["decision"].astype("int64")
    means = t["study_frame_means"].to_pandas()[["system", "head", "frame_mean", "frame_n"]]
    return validation.assemble_inputs(
        study.protocol,
        part(~trained),
        part(trained),
        adjudicated,
        latest,
        t["study_machine_codes"].to_pylist(),
        decisions,
        means,
    )


def report_inputs(storage: MetacanStorage, store: CodingStore, protocol: AuditProtocol) -> validation.ReportInputs:
    """The inputs of one report run of ``protocol``: :func:`report_inputs_of` of :func:`export_study`."""
    return report_inputs_of(export_study(storage, store, protocol))


def _arrow(frames: list[pd.DataFrame], schema: pa.Schema) -> pa.Table:
    """The frames as one Arrow table of ``schema`` (one per code source, in order)."""
    return pa.concat_tables([pa.Table.from_pandas(f, schema=schema, preserve_index=False) for f in frames])


def report_tables(
    inputs: validation.ReportInputs, reports: dict[str, ValidationReport], run_id: str, now: dt.datetime
) -> dict[str, pa.Table]:
    """The six tables of :data:`VALIDATION_TABLES` of one run: each source's report tables stamped with the protocol,
    classifier version, source, ``run_id`` and ``now`` (:func:`.validation.stamped`), the gates with their
    ``human_validation`` flag, and the final human codes."""
    protocol = inputs.protocol
    out = {}
    for name, (attr, schema) in REPORT_TABLES.items():
        frames = [validation.stamped(getattr(r, attr), protocol, s, run_id, now) for s, r in reports.items()]
        out[name] = _arrow(frames, schema)
    gates = validation.gate_frame(reports, protocol)
    frames = [validation.stamped(g, protocol, s, run_id, now) for s, g in gates.items()]
    out["validation_gate"] = _arrow(frames, VALIDATION_GATE_SCHEMA)
    out["human_codes"] = pa.Table.from_pylist(validation.human_code_rows(inputs, run_id), schema=HUMAN_CODES_SCHEMA)
    return out
