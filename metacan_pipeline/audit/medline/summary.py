"""Study design against MEDLINE as Markdown (the Dagster UI, the validation report) and as one compact line
(``metacan summary``)."""

from __future__ import annotations

import pandas as pd

from .nlm import HAND, MACHINE_GROUPS, NLM_CLASSES

MEANS = (
    "MEDLINE publication types are assigned by NLM independently of this project: only records NLM indexed by hand "
    "are the reference; Curated and Automated records are agreement with another machine, never the reference. A "
    "record indexed before its class's publication type existed is not data for that class. A class is gated on the "
    "lower 95% bound; one that fails ships as a score, marked unvalidated."
)


def _cell(value, lower, k: int, n: int) -> str:
    if n == 0 or value is None or pd.isna(value):
        return "n = 0"
    return f"{value:.2f} (>= {lower:.2f}; {k}/{n})"


def medline_markdown(table: pd.DataFrame, note: str | None = None) -> str:
    """Per class, a table of sources (rows): on the hand-indexed records n, agreement, precision and recall with
    their lower bounds and the gate; then agreement with Curated and Automated records."""
    parts = ["**Study design against MEDLINE.** " + MEANS]
    if note:
        parts.append(f"_{note}_")
    if table.empty:
        return "\n\n".join([*parts, "_(nothing measured)_"])
    for design, rows in table.groupby("design", sort=False):
        cls = NLM_CLASSES[design]
        since = f"from {cls.introduced}" if cls.introduced else "every year"
        names = ", ".join(f'"{n}"' for n in cls.publication_types) or "none"
        head = (
            f"*{design}* (NLM: {names}; eligible {since})\n\n"
            "| source | hand-indexed n | agreement | precision | recall | gate | "
            + " | ".join(f"{g} agreement" for g in MACHINE_GROUPS)
            + " |\n|---|---|---|---|---|---|"
            + "---|" * len(MACHINE_GROUPS)
        )
        body = []
        for source, per in rows.groupby("source", sort=False):
            by = {r["indexing"]: r for _, r in per.iterrows()}
            h = by[HAND]
            tp, fp, fn, tn = (int(h[k]) for k in ("true_positive", "false_positive", "false_negative", "true_negative"))
            n = tp + fp + fn + tn
            gate = ("passed: " if _passed(h["passed"]) else "failed: ") + str(h["gate"])
            machine = [
                _cell(
                    by[g]["agreement"],
                    by[g]["agreement_lower"],
                    int(by[g]["true_positive"] + by[g]["true_negative"]),
                    int(by[g]["n"]),
                )
                for g in MACHINE_GROUPS
            ]
            body.append(
                f"| {source} | {n} | {_cell(h['agreement'], h['agreement_lower'], tp + tn, n)} | "
                f"{_cell(h['precision'], h['precision_lower'], tp, tp + fp)} | {_cell(h['recall'], h['recall_lower'], tp, tp + fn)} | "
                f"{gate} | " + " | ".join(machine) + " |"
            )
        parts.append(head + "\n" + "\n".join(body))
    return "\n\n".join(parts)


def _passed(value) -> bool:
    return value is not None and not pd.isna(value) and bool(value)


def medline_line(table: pd.DataFrame) -> str | None:
    """One compact line: per class the sources that passed the MEDLINE gate, and how many failed; None without
    rows."""
    if table.empty:
        return None
    hand = table[table["indexing"] == HAND]
    n = int(hand.groupby("design")["n"].max().max() or 0)
    cells = []
    for design, rows in hand.groupby("design", sort=False):
        passed = rows.loc[rows["passed"].map(_passed), "source"].tolist()
        cells.append(f"{design} {'+'.join(passed) if passed else 'unvalidated'}")
    notes = [g for g in hand["gate"].dropna().unique() if g.startswith("no MEDLINE answers")]
    tail = f" ({notes[0].split(';')[0]})" if notes else ""
    return f"study design vs MEDLINE (hand-indexed, up to n = {n}): " + ", ".join(cells) + tail
