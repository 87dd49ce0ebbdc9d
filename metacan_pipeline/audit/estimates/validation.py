"""What the ``validation_report`` asset reads and writes (SPEC section 10).

:func:`assemble_inputs` gathers, for the current protocol (from a :class:`.study.Study`, :func:`.study.report_inputs`): its audit sample (drawn works; those of the ``trained_on``
stratum, which trained or calibrated the classifier, are outside the audited population and reported apart, SPEC
section 10; the frame-wide means leave every such work out too), the final human codes of the
coding store (two coders agreed, or an adjudication: a single coder's answer waits for the second and estimates
nothing), the two coders' answers before adjudication, the machine adjudicators' codes, the decisions of every
system on the sampled works and the classifier's frame-wide decision means. Systems are ``teacher:<name>`` (the direct
labels of each registry teacher; a failed or missing label is no decision, never a negative, SPEC section 4) and
``classifier:<version>:<rule>`` (the protocol's classifier version under the consensus and candidate rules; a head
whose support gate did not pass has no decisions). Genre groups are the human code's genre (``(missing)`` for a
work not coded yet).

:func:`run_report` runs :func:`metacan_pipeline.audit.estimates.report.validation_report` once per code source: ``human``,
``human:trained_on`` (the coded works of the trained stratum, apart), and each machine adjudicator (``machine-adjudicator:<name>``, restricted to sampled works, labelled machine-adjudicated).
:func:`human_validation_rows` turns the human run's gate on the protocol's rule into one ``human_validation`` row per
evaluated head, every head present: with no codes the reason is ``no coded works``. A machine adjudicator's gate is
stored in ``validation_gate`` only, never in ``human_validation``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from ...storage import MetacanStorage
from ...student.estimands import ESTIMAND_ROUTES, ESTIMANDS
from ...student.roles import CENSUS, direct_labels_key
from ...tables.audit import HUMAN_VALIDATION_SCHEMA
from ...teachers.core.registry import load_registry
from ...vocab import BINARY_TARGETS, CATEGORIES
from ..coding.adjudication import head_of
from ..protocol.classifier import state_sql
from ..protocol.locked import AuditProtocol
from ..protocol.scratch import scratch
from .gate import GateThresholds
from .report import (
    CODER_CODE_COLUMNS,
    ESTIMAND_HEAD,
    HUMAN,
    HUMAN_CODE_COLUMNS,
    NO_CODES,
    TRAINED_APART,
    ValidationReport,
    overall,
    validation_report,
)
from .status import CodingStatus, coding_status

HUMAN_BASES = ("agreed", "adjudicated")
RULES = ("consensus", "candidate")
#: Every registry teacher, in registry order: each one's direct labels are a system of the report, not only the two
#: the student learns from.
REPORT_TEACHERS: tuple[str, ...] = tuple(load_registry())
#: The columns of a drawn work the report reads (the design and the groups).
SAMPLE_COLUMNS = (
    "id", "stratum", "selection_probability", "design_weight", "stratum_size", "stratum_sample_size", "language",
    "route_key", "has_abstract",
)  # fmt: skip


def classifier_system(version: str, rule: str) -> str:
    return f"classifier:{version}:{rule}"


def head_value(code: Mapping, head: str) -> int | None:
    """A code's value on a binary head: 1 / 0, None when the code says nothing (no categories, no boolean, or the
    head is one the two coders of an agreed code differed on outside the evaluated heads: :func:`head_of`)."""
    return head_of(code, head)


@dataclass
class ReportInputs:
    """Everything one report run reads (module docstring); ``trained``: the drawn works that trained or calibrated
    the classifier (the ``trained_on`` stratum), left out of the audited population and reported apart;
    ``trained_left_out``: their count; ``machine_outside``: per adjudicator, codes on works not drawn;
    ``unresolved``: the works with no final human code whose coders' (or adjudicator's) latest answer is
    unresolved (:func:`unresolved_ids`); ``status``: where the coding of the drawn works stands (:mod:`.status`)."""

    protocol: AuditProtocol
    sample: pd.DataFrame
    human: list[dict]
    coder_codes: pd.DataFrame
    machine: dict[str, pd.DataFrame]
    decisions: pd.DataFrame
    frame_means: pd.DataFrame
    trained: pd.DataFrame | None = None
    trained_left_out: int = 0
    machine_outside: dict[str, int] = field(default_factory=dict)
    single_coder: int = 0
    unresolved: frozenset[str] = frozenset()
    status: CodingStatus | None = None


@dataclass(frozen=True)
class SampleParts:
    """A protocol's audit sample split by population: ``sample`` the drawn works of the audited population (the
    frame minus the works that trained or calibrated the classifier), ``trained`` the drawn works of the
    ``trained_on`` stratum (reported apart), ``trained_ids`` every frame work that trained or calibrated it, drawn
    or not (left out of the frame-wide decision means, so the PPI estimate has the audited population too)."""

    sample: pd.DataFrame
    trained: pd.DataFrame
    trained_ids: list[str]


def load_sample(storage: MetacanStorage, protocol_id: str) -> SampleParts:
    """The :class:`SampleParts` of ``protocol_id`` (``SAMPLE_COLUMNS``, sorted by id). Raises ValueError when the
    protocol has no drawn sample (materialize audit_sample first)."""
    if not storage.has_table("audit_sample"):
        raise ValueError(f"no audit_sample yet: materialize audit_sample for protocol {protocol_id} first")
    # the drawn works and the trained-on ones only: the table has a row per frame work and protocol
    mine = ("protocol_id", "=", protocol_id)
    rows = storage.read_table(
        "audit_sample", filters=[[mine, ("in_sample", "=", True)], [mine, ("trained_on", "=", True)]]
    ).to_pandas()
    drawn = rows.loc[rows["in_sample"]]
    if drawn.empty:
        raise ValueError(f"protocol {protocol_id} has no drawn audit sample: materialize audit_sample first")
    trained = drawn["trained_on"].astype(bool)

    def part(mask) -> pd.DataFrame:
        return drawn.loc[mask, list(SAMPLE_COLUMNS)].sort_values("id").reset_index(drop=True)

    return SampleParts(part(~trained), part(trained), sorted(rows.loc[rows["trained_on"].astype(bool), "id"]))


def code_frame(
    codes: Iterable[Mapping], heads: list[str], ids: set[str], unresolved: Iterable[str] = ()
) -> pd.DataFrame:
    """``id, head, code`` for every code of a sampled work and every head (code None: says nothing), and
    ``"unresolved"`` on every head for each sampled work of ``unresolved`` (works with no code, coded unresolved)."""
    rows = [{"id": c["id"], "head": h, "code": head_value(c, h)} for c in codes if c["id"] in ids for h in heads]
    rows += [{"id": w, "head": h, "code": "unresolved"} for w in sorted(set(unresolved) & ids) for h in heads]
    return pd.DataFrame(rows, columns=list(HUMAN_CODE_COLUMNS))


def unresolved_ids(answers: Iterable[Mapping], final: Iterable[Mapping]) -> frozenset[str]:
    """The works with no ``final`` code of which some latest answer (a coder's or the adjudicator's) is unresolved:
    their coders could not decide and no adjudication has settled them yet."""
    settled = {c["id"] for c in final}
    return frozenset(a["id"] for a in answers if a["unresolved"] and a["id"] not in settled)


def coder_frame(answers: Iterable[Mapping], heads: list[str], ids: set[str]) -> pd.DataFrame:
    """``id, head, first, second``: the latest ``code`` answers of the two coders of each sampled work with two
    (coders in name order), ``"unresolved"`` for an unresolved answer."""
    by_work: dict[str, list[Mapping]] = {}
    for a in answers:
        if a["role"] == "code" and a["id"] in ids:
            by_work.setdefault(a["id"], []).append(a)
    rows = []
    for wid, pair in by_work.items():
        if len(pair) != 2:
            continue
        first, second = sorted(pair, key=lambda a: a["coder"])
        for h in heads:
            values = ["unresolved" if a["unresolved"] else head_value(a, h) for a in (first, second)]
            rows.append({"id": wid, "head": h, "first": values[0], "second": values[1]})
    return pd.DataFrame(rows, columns=list(CODER_CODE_COLUMNS))


def decision_frames(
    storage: MetacanStorage, protocol: AuditProtocol, ids: list[str], outside: Iterable[str] = ()
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``system, id, head, decision`` on the sampled works and ``system, head, frame_mean, frame_n`` (the classifier
    rules' decision means over every frame work the classifier version scored, and the census teacher's over every
    work it labelled), the works of ``outside`` (those outside the audited population: they trained or calibrated
    the classifier) left out of the means."""
    teachers = [t for t in REPORT_TEACHERS if storage.has_table(direct_labels_key(t))]
    gated = [h.head for h in protocol.heads if h.gate_passed]
    version = protocol.classifier_version
    parts, means = [], []
    with scratch(storage, ["predictions", "frame", *(direct_labels_key(t) for t in teachers)]) as con:
        # an Arrow table, not SQL text: no quoting, and an audit sample with no coded work yet is an empty table
        con.register("sampled_ids", pa.table({"id": pa.array(ids, pa.string())}))
        con.execute("CREATE TEMP TABLE sampled AS SELECT id FROM sampled_ids")
        con.register("outside_ids", pa.table({"id": pa.array(sorted(set(outside)), pa.string())}))
        con.execute("CREATE TEMP TABLE outside AS SELECT id FROM outside_ids")
        for rule in RULES:
            system = classifier_system(version, rule)
            for h in gated:
                decided = f"CAST({state_sql(h, rule)} AS INTEGER)"
                parts.append(
                    con.execute(
                        f"SELECT '{system}' AS system, p.id, '{h}' AS head, {decided} AS decision "
                        "FROM predictions p JOIN sampled USING (id) WHERE p.model_version = ?",
                        [version],
                    ).df()
                )
                mean, n = con.execute(
                    f"SELECT avg({decided}), count(*) FROM predictions p WHERE p.model_version = ? "
                    "AND p.id NOT IN (SELECT id FROM outside)",
                    [version],
                ).fetchone()
                means.append({"system": system, "head": h, "frame_mean": mean, "frame_n": n})
        for t in teachers:
            for h in protocol.head_names:
                value = f"list_contains(l.categories, '{h}')" if h in CATEGORIES else f"l.{h}"
                parts.append(
                    con.execute(
                        f"SELECT 'teacher:{t}' AS system, l.work_id AS id, '{h}' AS head, "
                        f'CAST({value} AS INTEGER) AS decision FROM "{direct_labels_key(t)}" l '
                        "JOIN sampled s ON s.id = l.work_id WHERE l.status = 'labelled'"
                    ).df()
                )
                if t == CENSUS:  # it labels every frame work: its frame-wide mean powers a PPI estimate too
                    mean, n = con.execute(
                        f'SELECT avg(CAST({value} AS INTEGER)), count(*) FROM "{direct_labels_key(t)}" l '
                        "WHERE l.status = 'labelled' AND l.work_id NOT IN (SELECT id FROM outside)"
                    ).fetchone()
                    if n:
                        means.append({"system": f"teacher:{t}", "head": h, "frame_mean": mean, "frame_n": n})
        means += _estimand_means(con, version, teachers, gated, protocol.head_names)
    columns = ["system", "id", "head", "decision"]
    decisions = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    decisions = decisions.dropna(subset=["decision"]).drop_duplicates(["system", "id", "head"], keep="last")
    return decisions[columns], pd.DataFrame(means, columns=["system", "head", "frame_mean", "frame_n"])


def _estimand_means(con, version: str, teachers: list[str], gated: list[str], head_names: list[str]) -> list[dict]:
    """``system, head, frame_mean, frame_n`` of every estimand (head ``estimand:<name>``) a system decides on every head
    of (the classifier rules: the gated heads; the census teacher: the protocol's heads): the share of the frame works
    it puts in the estimand (its heads decided, and one of the estimand's routes in the frame). None when the frame
    has no route columns (a frame the ``frame`` asset did not build). ``outside`` works are left out, as above."""
    present = {"frame", "predictions"} & {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    if "frame" not in present:
        return []
    columns = {r[0] for r in con.execute("DESCRIBE frame").fetchall()}
    if any(c not in columns for c in ESTIMAND_ROUTES):
        return []
    flags = ", ".join(f"coalesce(bool_or({c}), false) AS {c}" for c in ESTIMAND_ROUTES)
    con.execute(f"CREATE OR REPLACE TEMP TABLE frame_routes AS SELECT id, {flags} FROM frame GROUP BY id")
    means = []

    def on(e) -> str:
        return "(" + " OR ".join(f"coalesce(r.{c}, false)" for c in e.routes) + ")" if e.routes else "true"

    if "predictions" in present:
        for rule in RULES:
            for e in ESTIMANDS:
                if not all(h in gated for h in e.heads):
                    continue
                decided = " AND ".join([*(f"({state_sql(h, rule)})" for h in e.heads), on(e)])
                mean, n = con.execute(
                    f"SELECT avg(CAST({decided} AS INTEGER)), count(*) FROM predictions p "
                    "LEFT JOIN frame_routes r ON r.id = p.id WHERE p.model_version = ? "
                    "AND p.id NOT IN (SELECT id FROM outside)",
                    [version],
                ).fetchone()
                system = classifier_system(version, rule)
                means.append({"system": system, "head": ESTIMAND_HEAD.format(e.name), "frame_mean": mean, "frame_n": n})
    if CENSUS in teachers:
        for e in ESTIMANDS:
            if not all(h in head_names for h in e.heads):
                continue
            value = " AND ".join(
                [*(f"list_contains(l.categories, '{h}')" if h in CATEGORIES else f"l.{h}" for h in e.heads), on(e)]
            )
            mean, n = con.execute(
                f'SELECT avg(CAST({value} AS INTEGER)), count(*) FROM "{direct_labels_key(CENSUS)}" l '
                "LEFT JOIN frame_routes r ON r.id = l.work_id "
                "WHERE l.status = 'labelled' AND l.work_id NOT IN (SELECT id FROM outside)"
            ).fetchone()
            if n:
                means.append(
                    {
                        "system": f"teacher:{CENSUS}",
                        "head": ESTIMAND_HEAD.format(e.name),
                        "frame_mean": mean,
                        "frame_n": n,
                    }
                )
    return means


def assemble_inputs(
    protocol: AuditProtocol,
    sample: pd.DataFrame,
    trained: pd.DataFrame,
    adjudicated: list[dict],
    answers: list[dict],
    machine_rows: Iterable[Mapping],
    decisions: pd.DataFrame,
    means: pd.DataFrame,
) -> ReportInputs:
    """The :class:`ReportInputs` of one report (module docstring): ``sample`` and ``trained`` the drawn works of the
    audited population and of the ``trained_on`` stratum (:data:`SAMPLE_COLUMNS`, sorted by id), ``adjudicated`` and
    ``answers`` what :meth:`CodingStore.adjudicated_codes` and :meth:`CodingStore.latest_answers` give for the
    protocol, ``machine_rows`` the machine adjudicators' codes (``adjudicator, id, head, code``), ``decisions`` and
    ``means`` what :func:`decision_frames` gives. Pure: reads nothing."""
    heads = protocol.head_names
    sample, trained = sample.copy(), trained.copy()
    ids = set(sample["id"])
    human = [c for c in adjudicated if c["basis"] in HUMAN_BASES]
    genre = {c["id"]: c["genre"] for c in human}
    sample["genre"] = sample["id"].map(genre)
    trained["genre"] = trained["id"].map(genre)
    machine, outside = {}, {}
    for row in machine_rows:
        machine.setdefault(row["adjudicator"], []).append(row)
    frames = {}
    for name, rows in machine.items():
        inside = [r for r in rows if r["id"] in ids and r["head"] in heads]
        outside[name] = len({r["id"] for r in rows}) - len({r["id"] for r in inside})
        frames[name] = pd.DataFrame(
            [{"id": r["id"], "head": r["head"], "code": r["code"]} for r in inside], columns=list(HUMAN_CODE_COLUMNS)
        )
    return ReportInputs(
        protocol=protocol,
        sample=sample,
        human=human,
        coder_codes=coder_frame(answers, heads, ids),
        machine=frames,
        decisions=decisions,
        frame_means=means,
        trained=trained,
        trained_left_out=len(trained),
        machine_outside=outside,
        single_coder=sum(1 for c in adjudicated if c["basis"] == "single_coder"),
        unresolved=unresolved_ids(answers, human),
        status=coding_status(answers, human, ids, trained["id"]),
    )


def run_report(inputs: ReportInputs) -> dict[str, ValidationReport]:
    """The report per code source: ``human`` first (human codes on every binary target: the prevalence of every
    category and about-Canada flag from the codes; error rates, PPI and the gate where a system decides, i.e. on the
    protocol's heads); then ``human:trained_on`` when works of the ``trained_on``
    stratum were coded: the same human codes on the works that trained or calibrated the classifier, a report of
    their own stratum apart from the audited population (no PPI: no frame mean of that population; its gate is
    never human validation); then every machine adjudicator (no agreement table: a machine adjudicator has no two
    coders)."""
    p = inputs.protocol
    thresholds = GateThresholds(p.gate.precision_lower, p.gate.recall_lower, p.gate.min_coded_positives)
    ids = set(inputs.sample["id"])
    options = {"thresholds": thresholds, "min_n": p.min_n}
    out = {
        HUMAN: validation_report(
            inputs.sample,
            code_frame(inputs.human, list(BINARY_TARGETS), ids, inputs.unresolved),
            inputs.decisions,
            inputs.frame_means,
            inputs.coder_codes,
            **options,
        )
    }
    trained = inputs.trained
    if trained is not None and not trained.empty:
        codes = code_frame(inputs.human, list(BINARY_TARGETS), set(trained["id"]), inputs.unresolved)
        if codes["code"].map(lambda c: c in (0, 1)).any():
            no_means = inputs.frame_means.iloc[:0]
            out[TRAINED_APART] = validation_report(trained, codes, inputs.decisions, no_means, **options)
    for source, codes in sorted(inputs.machine.items()):
        out[source] = validation_report(inputs.sample, codes, inputs.decisions, inputs.frame_means, **options)
    return out


def stamped(frame: pd.DataFrame, protocol: AuditProtocol, source: str, run_id: str, now: dt.datetime) -> pd.DataFrame:
    """A report table with the protocol, classifier version, code source, run and time in front."""
    out = frame.copy()
    out.insert(0, "code_source", source)
    out.insert(0, "classifier_version", protocol.classifier_version)
    out.insert(0, "protocol_id", protocol.protocol_id)
    out["run_id"] = run_id
    out["computed_at"] = pd.Timestamp(now)
    return out


def _float(row: dict | None, key: str) -> float | None:
    value = None if row is None else row.get(key)
    return None if value is None or pd.isna(value) else float(value)


def human_validation_rows(inputs: ReportInputs, report: ValidationReport, run_id: str, now: dt.datetime) -> list[dict]:
    """One ``human_validation`` row per evaluated head of the protocol: the gate on the protocol's rule against the
    human codes. A head with no gate row did not pass: ``no coded works``, or no decisions (its support gate)."""
    p = inputs.protocol
    system = classifier_system(p.classifier_version, p.decision_rule)
    codes = code_frame(inputs.human, p.head_names, set(inputs.sample["id"]))
    gates = report.gate
    rows = []
    for head in p.heads:
        coded = codes.loc[codes["head"] == head.head, "code"].notna()
        hit = gates.loc[(gates["system"] == system) & (gates["head"] == head.head)]
        prec, rec = overall(report, system, head.head, "precision"), overall(report, system, head.head, "recall")
        if not hit.empty:
            g = hit.iloc[0]
            passed, reason, positives = bool(g["passed"]), str(g["reason"]), int(g["coded_positives"])
        else:
            passed, positives = False, int(codes.loc[codes["head"] == head.head, "code"].fillna(0).sum())
            if not coded.any():
                reason = NO_CODES
            elif not head.gate_passed:
                reason = (
                    f"no decisions under {p.classifier_version}: its support gate did not pass ({head.gate_reason})"
                )
            else:
                reason = "no decision of the classifier on a coded work"
        rows.append(
            {
                "protocol_id": p.protocol_id,
                "classifier_version": p.classifier_version,
                "head": head.head,
                "passed": passed,
                "precision": _float(prec, "value"),
                "precision_lower": _float(prec, "lower"),
                "recall": _float(rec, "value"),
                "recall_lower": _float(rec, "lower"),
                "coded_positives": positives,
                "n_coded": int(coded.sum()),
                "reason": reason,
                "run_id": run_id,
                "computed_at": now,
            }
        )
    return rows


def gate_frame(reports: dict[str, ValidationReport], protocol: AuditProtocol) -> dict[str, pd.DataFrame]:
    """Each source's gate table with ``human_validation``: True only for the human codes on the protocol's rule."""
    system = classifier_system(protocol.classifier_version, protocol.decision_rule)
    out = {}
    for source, report in reports.items():
        g = report.gate.copy()
        g["human_validation"] = (source == HUMAN) & (g["system"] == system)
        out[source] = g
    return out


def human_code_rows(inputs: ReportInputs, run_id: str) -> list[dict]:
    """The ``human_codes`` rows: the final human code of every coded work of the protocol (sampled or not)."""
    keep = ("categories", "domain", "study_design", "genre", "about_ca_system", "about_ca_topic")
    return [
        {
            "protocol_id": c["protocol_id"],
            "id": c["id"],
            "basis": c["basis"],
            **{k: c[k] for k in keep},
            "coders": list(c["coders"]),
            "answer_ids": list(c["answer_ids"]),
            "run_id": run_id,
        }
        for c in inputs.human
    ]


#: What a gate row says; a run whose rows say the same as the newest stored ones appends nothing.
GATE_FIGURES = (
    "passed",
    "precision",
    "precision_lower",
    "recall",
    "recall_lower",
    "coded_positives",
    "n_coded",
    "reason",
)

_NEWEST_SQL = """
SELECT * EXCLUDE (rn) FROM (
  SELECT *, row_number() OVER (PARTITION BY head ORDER BY computed_at DESC, run_id DESC) AS rn
  FROM human_validation WHERE protocol_id = ? AND classifier_version = ?) WHERE rn = 1
"""


def append_human_validation(storage: MetacanStorage, rows: list[dict]) -> bool:
    """Append one run's gate rows to the DuckDB table ``human_validation`` (never updated), unless the newest stored
    row of every head of the protocol and version says the same (:data:`GATE_FIGURES`): then nothing is appended, so
    a re-run on unchanged codes leaves the gate, the records and the pages as they were. Returns whether it appended."""
    if not rows:
        return False
    table = pa.Table.from_pylist(rows, schema=HUMAN_VALIDATION_SCHEMA)
    with storage.connect() as con:
        cur = con.execute(_NEWEST_SQL, [rows[0]["protocol_id"], rows[0]["classifier_version"]])
        names = [d[0] for d in cur.description]
        newest = {r["head"]: r for r in (dict(zip(names, v, strict=True)) for v in cur.fetchall())}
        same = set(newest) == {r["head"] for r in rows} and all(
            newest[r["head"]][k] == r[k] for r in rows for k in GATE_FIGURES
        )
        if same:
            return False
        con.register("new_rows", table)
        con.execute("INSERT INTO human_validation SELECT * FROM new_rows")
        con.unregister("new_rows")
    return True
