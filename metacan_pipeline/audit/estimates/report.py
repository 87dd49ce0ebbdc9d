"""The validation report of an audit protocol as long tables (SPEC section 10).

:func:`validation_report` turns the audit sample, the adjudicated human codes, the systems' decisions and their
frame-wide decision means into five pandas DataFrames, one per future table of the ``validation_report`` asset,
with the columns of :data:`ERROR_RATE_COLUMNS`, :data:`CONFUSION_COLUMNS`, :data:`PREVALENCE_COLUMNS`,
:data:`AGREEMENT_COLUMNS` and :data:`GATE_COLUMNS` in that order. Pure: it reads nothing and writes nothing.

Inputs (one row each; extra columns are ignored):

- ``sample``: every sampled work of the protocol's audit sample, :data:`SAMPLE_COLUMNS` (``id``, the design columns
  of :data:`metacan_pipeline.audit.estimates.design_based.DESIGN_COLUMNS`, and the grouping columns :data:`GROUPINGS`). Works
  that trained or calibrated the classifier under test are the caller's to exclude or to report apart (SPEC
  section 10).
- ``human_codes``: ``id, head, code``, the final human code per work and head: 0 / 1, ``"unresolved"`` when its
  coders answered unresolved (and no adjudication resolved it), or None when it has none yet. Both are left out of
  every rate (the estimand is the rate among resolved works) and counted apart: ``unresolved`` counts the sampled
  works whose code is ``"unresolved"``; ``not_yet_coded`` the sampled works with no code on the head (None, or no
  row: never coded, or waiting for a second coder or an adjudication).
- ``decisions``: ``system, id, head, decision`` (0 / 1), e.g. system ``"teacher:gemma"`` or
  ``"classifier:<model_version>:consensus"``; rows for works outside the sample are ignored, and a sampled work
  without a decision is left out of that system's rates (the note counts it: a missing label is unknown, never a
  negative, SPEC section 4).
- ``frame_means``: ``system, head, frame_mean`` (optionally ``frame_n``, default the design's frame size): the
  mean decision over every frame work, for the prediction-powered prevalence.
- ``coder_codes`` (optional): ``id, head, first, second``, the two independent codings before adjudication
  (0 / 1 / a class / ``"unresolved"``; None when missing), for the agreement table: per head, over every work coded
  twice (stratum ``"all"``, raw and design-weighted) and per stratum, each with its jackknife interval
  (:mod:`.agreement`).

Rates are reported per group of :data:`GROUPINGS` beside ``group_by = "all"`` (differential error); each row
carries ``n`` and the Kish ``n_effective``, and a rate on fewer than ``min_n`` cases has a null value and the note
``"fewer than 30 coded cases (n=12): not reported"``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...student.estimands import ESTIMAND_ROUTES, ESTIMANDS
from .agreement import head_agreement
from .design_based import DEFAULT_MIN_N, DESIGN_COLUMNS, Design, Estimate, confusion, f1, precision, prevalence, recall
from .gate import DEFAULT_THRESHOLDS, GateThresholds, head_gate
from .ppi import ppi_mean

GROUPINGS: tuple[str, ...] = ("language", "route_key", "genre", "has_abstract")
SAMPLE_COLUMNS: tuple[str, ...] = ("id", *DESIGN_COLUMNS, *GROUPINGS)
HUMAN_CODE_COLUMNS: tuple[str, ...] = ("id", "head", "code")
DECISION_COLUMNS: tuple[str, ...] = ("system", "id", "head", "decision")
FRAME_MEAN_COLUMNS: tuple[str, ...] = ("system", "head", "frame_mean")
CODER_CODE_COLUMNS: tuple[str, ...] = ("id", "head", "first", "second")
METRICS: tuple[str, ...] = ("precision", "recall", "f1")

ERROR_RATE_COLUMNS: tuple[str, ...] = (
    "system", "head", "group_by", "group", "metric",
    "value", "lower", "upper", "se", "n", "n_effective", "unresolved", "not_yet_coded", "note",
)  # fmt: skip
CONFUSION_COLUMNS: tuple[str, ...] = ("system", "head", "group_by", "group", "cell", "count", "weighted")
PREVALENCE_COLUMNS: tuple[str, ...] = (
    "head", "method", "value", "lower", "upper", "se", "width_ratio", "n", "n_effective", "unresolved",
    "not_yet_coded", "note",
)  # fmt: skip
AGREEMENT_COLUMNS: tuple[str, ...] = (
    "head", "stratum", "statistic", "weighting", "value", "lower", "upper", "n", "n_effective",
)  # fmt: skip
GATE_COLUMNS: tuple[str, ...] = ("system", "head", "passed", "judged", "reason", "coded_positives", "n_effective")

_METRIC_FUNCTIONS = {"precision": precision, "recall": recall, "f1": f1}


@dataclass(frozen=True)
class ValidationReport:
    """The five long tables of a protocol's validation report (module docstring)."""

    error_rates: pd.DataFrame
    confusion: pd.DataFrame
    prevalence: pd.DataFrame
    agreement: pd.DataFrame
    gate: pd.DataFrame


#: The code sources of a report: the human codes, and those on the works that trained or calibrated the classifier
#: (reported apart); the note of a report without coded works.
HUMAN = "human"
TRAINED_APART = "human:trained_on"
NO_CODES = "no coded works"


def _require(frame: pd.DataFrame, columns: tuple[str, ...], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise KeyError(f"validation report: {name} has no column {missing} (expected {list(columns)})")


def _code(value: object, where: str) -> float:
    """A human code or decision as 1.0 / 0.0, nan for None / nan / ``"unresolved"``; ValueError naming ``where``."""
    if (
        value is None
        or (isinstance(value, str) and value == "unresolved")
        or (not isinstance(value, str) and pd.isna(value))
    ):
        return math.nan
    if value in (0, 1):  # also True / False, 0.0 / 1.0
        return float(value)
    raise ValueError(f"validation report: {where} is {value!r}; expected 0, 1 or None (unresolved)")


def _positions(sample_ids: pd.Index, frame: pd.DataFrame, name: str, *, keys: tuple[str, ...]) -> np.ndarray:
    """Positions in the sample of ``frame.id`` (-1 outside it), after refusing duplicate ``keys``."""
    dup = frame.duplicated(list(keys))
    if dup.any():
        row = frame.loc[dup].iloc[0]
        raise ValueError(f"validation report: {name} has two rows for {', '.join(f'{k}={row[k]!r}' for k in keys)}")
    return sample_ids.get_indexer(frame["id"])


def _vectors(
    frame: pd.DataFrame, positions: np.ndarray, by: list[str], value: str, size: int, name: str
) -> dict[tuple, np.ndarray]:
    """Per key of ``by``, a sample-aligned vector of ``value`` (nan where no row)."""
    out: dict[tuple, np.ndarray] = {}
    for key, rows in frame.assign(_pos=positions).loc[positions >= 0].groupby(by, sort=True):
        v = np.full(size, np.nan)
        v[rows["_pos"].to_numpy()] = [
            _code(x, f"{name} of work {i!r}") for x, i in zip(rows[value], rows["id"], strict=True)
        ]
        out[key if isinstance(key, tuple) else (key,)] = v
    return out


def _label(value: object) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "(missing)"
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    return str(value)


def _groups(sample: pd.DataFrame) -> Iterator[tuple[str, str, np.ndarray | None]]:
    """``("all", "all", None)``, then ``(column, value, mask)`` for each value of each grouping column."""
    yield "all", "all", None
    for column in GROUPINGS:
        labels = sample[column].map(_label).to_numpy()
        for group in sorted(set(labels)):
            yield column, group, labels == group


def _estimate_row(estimate: Estimate) -> dict:
    return {
        "value": estimate.value,
        "lower": estimate.lower,
        "upper": estimate.upper,
        "se": estimate.se,
        "n": estimate.n,
        "n_effective": estimate.n_effective,
    }


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _missing_note(count: int) -> str:
    return f"{count} sampled works without a decision left out" if count else ""


def _uncoded(inside: np.ndarray, y: np.ndarray, unresolved: np.ndarray) -> dict[str, int]:
    """``unresolved`` and ``not_yet_coded`` among the sampled works ``inside`` (module docstring)."""
    return {
        "unresolved": int((inside & unresolved).sum()),
        "not_yet_coded": int((inside & np.isnan(y) & ~unresolved).sum()),
    }


def _system_rows(
    system: str,
    head: str,
    y: np.ndarray,
    unresolved: np.ndarray,
    d: np.ndarray,
    design: Design,
    sample: pd.DataFrame,
    options: dict,
) -> tuple[list[dict], list[dict], dict[str, Estimate]]:
    """Error-rate and confusion rows of one (system, head), and its overall precision and recall; ``unresolved``
    marks the sampled works whose code is ``"unresolved"``."""
    rates, cells, overall = [], [], {}
    for group_by, group, mask in _groups(sample):
        inside = np.ones(design.size, dtype=bool) if mask is None else mask
        key = {"system": system, "head": head, "group_by": group_by, "group": group}
        uncoded = _uncoded(inside, y, unresolved)
        no_decision = _missing_note(int((inside & ~np.isnan(y) & np.isnan(d)).sum()))
        for metric in METRICS:
            e = _METRIC_FUNCTIONS[metric](y, d, design, within=mask, **options)
            rates.append(
                {
                    **key,
                    "metric": metric,
                    **_estimate_row(e),
                    **uncoded,
                    "note": _join(e.note, no_decision),
                }
            )
            if mask is None:
                overall[metric] = e
        c = confusion(y, d, design, within=mask)
        for cell in ("tp", "fp", "fn", "tn"):
            cells.append({**key, "cell": cell, "count": getattr(c, cell), "weighted": getattr(c, f"{cell}_weighted")})
    return rates, cells, overall


def _prevalence_rows(
    head: str,
    y: np.ndarray,
    unresolved: np.ndarray,
    decisions: dict,
    means: pd.DataFrame,
    design: Design,
    options: dict,
) -> list[dict]:
    uncoded = _uncoded(np.ones(design.size, dtype=bool), y, unresolved)
    human = prevalence(y, design, **options)
    rows = [
        {
            "head": head,
            "method": "human",
            **_estimate_row(human),
            "width_ratio": None,
            **uncoded,
            "note": human.note,
        }
    ]
    for _, m in means.loc[means["head"] == head].sort_values("system").iterrows():
        d = decisions.get((m["system"], head), np.full(design.size, np.nan))
        frame_n = m.get("frame_n")
        frame_n = None if frame_n is None or pd.isna(frame_n) else int(frame_n)
        est = ppi_mean(y, d, design, float(m["frame_mean"]), frame_n=frame_n, **options)
        no_decision = _missing_note(int((~np.isnan(y) & np.isnan(d)).sum()))
        rows.append(
            {
                "head": head,
                "method": f"ppi:{m['system']}",
                **_estimate_row(est.ppi),
                "width_ratio": est.width_ratio,
                **uncoded,
                "note": _join(est.ppi.note, no_decision),
            }
        )
    return rows


#: The ``head`` of an estimand's prevalence rows: ``estimand:<name>`` (:mod:`metacan_pipeline.student.estimands`).
ESTIMAND_HEAD = "estimand:{}"


def sample_routes(sample: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per route of :data:`~metacan_pipeline.student.estimands.ESTIMAND_ROUTES`, whether each sampled work's
    ``route_key`` (the frame's ``ca_aff+ca_fund``-style key; ``none`` or missing: no route) holds it."""
    keys = [set(k.split("+")) if isinstance(k, str) else set() for k in sample["route_key"]]
    return {r: np.array([r in k for k in keys], dtype=bool) for r in ESTIMAND_ROUTES}


def _member(values: list[np.ndarray], on: np.ndarray) -> np.ndarray:
    """1.0 where every head's value is 1 and ``on``, 0.0 where every head is known and not so, nan where a head is
    unknown (a work whose membership is unknown is left out, never a negative)."""
    stacked = np.vstack(values)
    known = ~np.isnan(stacked).any(axis=0)
    return np.where(known, ((stacked == 1).all(axis=0) & on).astype(float), np.nan)


def _estimand_prevalence_rows(
    sample: pd.DataFrame,
    codes: dict,
    unresolved: dict,
    decided: dict,
    means: pd.DataFrame,
    design: Design,
    options: dict,
) -> list[dict]:
    """Prevalence rows of every estimand whose heads are all coded (head ``estimand:<name>``): the human codes of its
    heads and the sampled work's routes (``route_key``) give its code; a system deciding on every one of its heads
    gives its decision, and its frame mean (``frame_means`` row of head ``estimand:<name>``) its PPI estimate."""
    routes = sample_routes(sample)
    rows = []
    for e in ESTIMANDS:
        if any((h,) not in codes for h in e.heads):
            continue
        on = np.zeros(design.size, dtype=bool) if e.routes else np.ones(design.size, dtype=bool)
        for r in e.routes:
            on |= routes[r]
        head = ESTIMAND_HEAD.format(e.name)
        y = _member([codes[(h,)] for h in e.heads], on)
        flags = np.zeros(design.size, dtype=bool)
        for h in e.heads:
            flags |= unresolved[h]
        systems = {s for s, _ in decided}
        mine = {
            (s, head): _member([decided[(s, h)] for h in e.heads], on)
            for s in systems
            if all((s, h) in decided for h in e.heads)
        }
        rows += _prevalence_rows(head, y, flags, mine, means, design, options)
    return rows


def _agreement_rows(
    coder_codes: pd.DataFrame | None, sample_ids: pd.Index, weights: np.ndarray, strata: np.ndarray, level: float
) -> list[dict]:
    if coder_codes is None:
        return []
    _require(coder_codes, CODER_CODE_COLUMNS, "coder_codes")
    positions = _positions(sample_ids, coder_codes, "coder_codes", keys=("id", "head"))
    if (positions < 0).any():
        raise ValueError(
            f"validation report: coder_codes names work {coder_codes['id'].iloc[int(np.argmax(positions < 0))]!r}, "
            "which is not in the audit sample"
        )
    rows = []
    for head, part in coder_codes.assign(_pos=positions).groupby("head", sort=True):
        pos = part["_pos"].to_numpy()
        pairs = head_agreement(
            part["first"].tolist(), part["second"].tolist(), weights[pos], [str(s) for s in strata[pos]], level
        )
        for a in pairs:
            rows.append(
                {
                    "head": head,
                    "stratum": a.stratum,
                    "statistic": a.statistic,
                    "weighting": a.weighting,
                    "value": a.value,
                    "lower": a.lower,
                    "upper": a.upper,
                    "n": a.n,
                    "n_effective": a.n_effective,
                }
            )
    return rows


def _frame(rows: list[dict], columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(columns))


def validation_report(
    sample: pd.DataFrame,
    human_codes: pd.DataFrame,
    decisions: pd.DataFrame,
    frame_means: pd.DataFrame,
    coder_codes: pd.DataFrame | None = None,
    *,
    thresholds: GateThresholds = DEFAULT_THRESHOLDS,
    min_n: int = DEFAULT_MIN_N,
    level: float = 0.95,
) -> ValidationReport:
    """The validation report of one protocol (module docstring): error rates with their intervals per system, head
    and group, confusion matrices, human and prediction-powered prevalence, inter-coder agreement and the gate.

    Raises KeyError for a missing input column, ValueError (naming the work) for a duplicate sample id or
    (id, head) code, a code or decision that is not 0 / 1 / None, a human code of a work outside the sample, or a
    design the checks of :meth:`Design.of` refuse.
    """
    for frame, columns, name in (
        (sample, SAMPLE_COLUMNS, "sample"),
        (human_codes, HUMAN_CODE_COLUMNS, "human_codes"),
        (decisions, DECISION_COLUMNS, "decisions"),
        (frame_means, FRAME_MEAN_COLUMNS, "frame_means"),
    ):
        _require(frame, columns, name)
    sample = sample.reset_index(drop=True)
    if sample["id"].duplicated().any():
        raise ValueError(
            f"validation report: work {sample.loc[sample['id'].duplicated(), 'id'].iloc[0]!r} is twice in the sample"
        )
    if sample.empty:  # nothing to code yet (every drawn work trained the classifier): an empty report, no gate row
        if not human_codes.empty:
            raise ValueError(
                f"validation report: work {human_codes['id'].iloc[0]!r} has a human code but the audit sample is empty"
            )
        return ValidationReport(
            *(
                _frame([], columns)
                for columns in (
                    ERROR_RATE_COLUMNS,
                    CONFUSION_COLUMNS,
                    PREVALENCE_COLUMNS,
                    AGREEMENT_COLUMNS,
                    GATE_COLUMNS,
                )
            )
        )
    design = Design.from_frame(sample)
    ids = pd.Index(sample["id"])
    code_pos = _positions(ids, human_codes, "human_codes", keys=("id", "head"))
    if (code_pos < 0).any():
        outside = human_codes["id"].iloc[int(np.argmax(code_pos < 0))]
        raise ValueError(f"validation report: work {outside!r} has a human code but is not in the audit sample")
    codes = _vectors(human_codes, code_pos, ["head"], "code", design.size, "human code")
    marked = human_codes.assign(_pos=code_pos).loc[lambda f: f["code"].map(lambda c: isinstance(c, str))]
    unresolved = {}
    for (head,) in codes:
        flags = np.zeros(design.size, dtype=bool)
        flags[marked.loc[marked["head"] == head, "_pos"].to_numpy()] = True
        unresolved[head] = flags
    decided = _vectors(
        decisions, _positions(ids, decisions, "decisions", keys=("system", "id", "head")), ["system", "head"],
        "decision", design.size, "decision",
    )  # fmt: skip
    options = {"min_n": min_n, "level": level}
    rates, cells, prevalences, gates = [], [], [], []
    for (head,), y in codes.items():
        prevalences += _prevalence_rows(head, y, unresolved[head], decided, frame_means, design, options)
    prevalences += _estimand_prevalence_rows(sample, codes, unresolved, decided, frame_means, design, options)
    for (head,), y in codes.items():
        for (system, decision_head), d in decided.items():
            if decision_head != head:
                continue
            r, c, overall = _system_rows(system, head, y, unresolved[head], d, design, sample, options)
            rates += r
            cells += c
            positives = overall["recall"].n
            g = head_gate(overall["precision"], overall["recall"], positives, thresholds)
            gates.append(
                {
                    "system": system,
                    "head": head,
                    "passed": g.passed,
                    "judged": g.judged,
                    "reason": g.reason,
                    "coded_positives": positives,
                    "n_effective": overall["recall"].n_effective,
                }
            )
    return ValidationReport(
        error_rates=_frame(rates, ERROR_RATE_COLUMNS),
        confusion=_frame(cells, CONFUSION_COLUMNS),
        prevalence=_frame(prevalences, PREVALENCE_COLUMNS),
        agreement=_frame(
            _agreement_rows(coder_codes, ids, design.weight, sample["stratum"].to_numpy(), level), AGREEMENT_COLUMNS
        ),
        gate=_frame(gates, GATE_COLUMNS),
    )


def overall(report: ValidationReport, system: str, head: str, metric: str) -> dict | None:
    """The row of ``metric`` of ``system`` on ``head`` over every sampled work (``group_by = "all"``), or None."""
    r = report.error_rates
    hit = r.loc[(r["system"] == system) & (r["head"] == head) & (r["group_by"] == "all") & (r["metric"] == metric)]
    return None if hit.empty else hit.iloc[0].to_dict()
