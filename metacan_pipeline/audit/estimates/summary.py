"""The validation report as Markdown for the Dagster UI: per code source a table of every system's precision, recall
and F1 with their gate, where the coding stands, the inter-coder agreement (pooled and per stratum), the prevalence
(human-only and prediction-powered), the differential error by group, and the gate rows the run appended."""

from __future__ import annotations

import pandas as pd

from ..protocol.locked import AuditProtocol
from .agreement import ALL_STRATA
from .report import HUMAN, NO_CODES, TRAINED_APART, ValidationReport, overall
from .status import CodingStatus, status_sentence


def _cell(row: dict | None, min_n: int) -> str:
    if row is None:
        return "-"
    if row["value"] is None or pd.isna(row["value"]):
        if row["n"]:
            return f"not reported: fewer than the protocol's minimum of {min_n} (n={row['n']})"
        return "not reported: no coded cases"
    return f"{row['value']:.2f} [{row['lower']:.2f}, {row['upper']:.2f}]"


_HEADER = "| system | precision | recall | F1 | coded positives n | effective n | gate |"


def summary_markdown(source: str, report: ValidationReport, protocol: AuditProtocol) -> str:
    """One Markdown table per head: each system's precision, recall, F1 with 95% intervals, n, Kish n and gate."""
    label = {
        HUMAN: "human codes",
        TRAINED_APART: f"{TRAINED_APART}: human codes of the works that trained or calibrated the classifier "
        "(reported apart: not in the audited population, never the gate)",
    }.get(source, f"{source} (MACHINE-ADJUDICATED: not human validation)")
    parts = [f"**{label}**"]
    for head in protocol.head_names:
        rates = report.error_rates
        systems = sorted(set(rates.loc[rates["head"] == head, "system"]))
        if not systems:
            parts.append(f"*{head}*: {NO_CODES}")
            continue
        lines = [f"*{head}*", "", _HEADER, "|---|---|---|---|---|---|---|"]
        for s in systems:
            p, r, f = (overall(report, s, head, m) for m in ("precision", "recall", "f1"))
            g = report.gate.loc[(report.gate["system"] == s) & (report.gate["head"] == head)]
            gate = "-" if g.empty else str(g.iloc[0]["reason"])
            n_eff = "-" if r is None or pd.isna(r["n_effective"]) else f"{r['n_effective']:.1f}"
            cells = " | ".join(_cell(x, protocol.min_n) for x in (p, r, f))
            lines.append(f"| {s} | {cells} | {r['n'] if r else '-'} | {n_eff} | {gate} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _number(value, digits: int = 3) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value):.{digits}f}"


def _interval(value, lower, upper, digits: int = 3) -> str:
    """``value [lower, upper]``; ``undefined`` for no value; the value alone when its interval is undefined."""
    if value is None or pd.isna(value):
        return "undefined"
    if lower is None or pd.isna(lower) or upper is None or pd.isna(upper):
        return f"{value:.{digits}f} (no interval: a jackknife replicate is undefined)"
    return f"{value:.{digits}f} [{lower:.{digits}f}, {upper:.{digits}f}]"


def stratum_label(stratum: str, weighting: str) -> str:
    """How a row of ``validation_agreement`` names its works: ``all (design-weighted)``, ``all (raw, unweighted)``
    or the stratum's name."""
    if stratum != ALL_STRATA:
        return stratum
    return "all (design-weighted)" if weighting == "design" else "all (raw, unweighted)"


def agreement_markdown(report: ValidationReport) -> str:
    """The inter-coder agreement table (before adjudication) as Markdown: per head Cohen's kappa and Krippendorff's
    alpha with their 95% jackknife intervals, over every work coded twice (design-weighted: the frame's estimate;
    raw) and per stratum (where the positives are: a pooled table at low prevalence is mostly free agreement)."""
    rows = report.agreement
    if rows.empty:
        return "_(no work coded by two coders yet)_"
    lines = [
        "| head | works | Cohen's kappa [95% CI] | Krippendorff's alpha [95% CI] | works coded twice | effective n |",
        "|---|---|---|---|---|---|",
    ]
    for (head, stratum, weighting), part in rows.groupby(["head", "stratum", "weighting"], sort=False):
        stat = {r["statistic"]: r for r in part.to_dict("records")}
        k, a = stat["cohen_kappa"], stat["krippendorff_alpha"]
        lines.append(
            f"| {head} | {stratum_label(stratum, weighting)} | {_interval(k['value'], k['lower'], k['upper'])} | "
            f"{_interval(a['value'], a['lower'], a['upper'])} | {k['n']} | {_number(k['n_effective'], 1)} |"
        )
    return "\n".join(lines)


def coding_markdown(status: CodingStatus | None) -> str:
    """Where the coding stands (:func:`.status.status_sentence`), or a note when the store was not read."""
    return "_(coding store not read)_" if status is None else status_sentence(status)


def prevalence_markdown(report: ValidationReport, min_n: int) -> str:
    """Prevalence per head as Markdown: the human-only estimate and each system's prediction-powered one with 95%
    intervals, n and Kish n, and the PPI interval's width against the human-only one."""
    rows = report.prevalence
    if rows.empty:
        return f"_{NO_CODES}_"
    lines = [
        "| head | method | estimate [95% CI] | n | effective n | width vs human-only | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows.to_dict("records"):
        ratio = r["width_ratio"]
        if ratio is None or pd.isna(ratio):
            width = "-"
        else:
            width = f"{ratio:.2f}x ({abs(1 - ratio):.0%} {'narrower' if ratio < 1 else 'wider'})"
        lines.append(
            f"| {r['head']} | {r['method']} | {_cell(r, min_n)} | {r['n']} | {_number(r['n_effective'], 1)} | "
            f"{width} | {r['note'] or ''} |"
        )
    return "\n".join(lines)


def differential_markdown(report: ValidationReport, min_n: int) -> str:
    """Differential error as Markdown: per system and head, precision and recall with 95% intervals, n and Kish n
    by language, route, genre (the human code's) and abstract availability."""
    rates = report.error_rates
    rates = rates.loc[(rates["group_by"] != "all") & rates["metric"].isin(["precision", "recall"])]
    if rates.empty:
        return f"_{NO_CODES}_"
    lines = [
        "| system | head | by | group | precision [95% CI] | n (effective) | recall [95% CI] | n (effective) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (system, head, by, group), part in rates.groupby(["system", "head", "group_by", "group"], sort=True):
        m = {r["metric"]: r for r in part.to_dict("records")}
        cells = []
        for metric in ("precision", "recall"):
            r = m.get(metric)
            cells += [_cell(r, min_n), "-" if r is None else f"{r['n']} ({_number(r['n_effective'], 1)})"]
        lines.append(f"| {system} | {head} | {by} | {group} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def gate_markdown(rows: list[dict]) -> str:
    """The ``human_validation`` rows of one run as a Markdown table (head, passed, lower bounds, counts, reason):
    ``n_coded`` is the final human codes on the head in the audited sample (trained works are reported apart)."""
    gate = (
        "| head | passed | precision lower | recall lower | coded positives | final codes (audited sample) | reason |\n"
    )
    return (
        gate
        + "|---|---|---|---|---|---|---|\n"
        + "".join(
            f"| {r['head']} | {r['passed']} | {_fmt(r['precision_lower'])} | {_fmt(r['recall_lower'])} | "
            f"{r['coded_positives']} | {r['n_coded']} | {r['reason']} |\n"
            for r in rows
        )
    )


def apart_markdown(trained: int, trained_coded: bool, adjudicators: list[str]) -> str:
    """What the gate leaves out and why: the drawn works of the ``trained_on`` stratum (``trained``; reported
    apart when ``trained_coded``) and every machine adjudicator's codes (``adjudicators``)."""
    parts = [
        f"Reported apart: {trained} drawn works of the trained_on stratum: they trained or calibrated the classifier "
        "under test, so they are outside the audited population and never enter the gate"
        + (f" (their report is the code source {TRAINED_APART})." if trained_coded else " (none coded yet).")
    ]
    if adjudicators:
        parts.append(
            f"Machine adjudicators ({', '.join(adjudicators)}): reported as their own code sources, MACHINE-"
            "ADJUDICATED, never human validation and never the gate."
        )
    return "\n\n".join(parts)
