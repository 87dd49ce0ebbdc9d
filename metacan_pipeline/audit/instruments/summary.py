"""Filter recall and known-item venue recall as Markdown (the Dagster UI, ``metacan summary``), each headed by the
original protocol's sentence for what the figures mean; known-item recall in its own section, marked as a
non-probability bound and kept apart from the design-based estimates of the validation report."""

from __future__ import annotations

import pandas as pd

from .recall import FILTER_RECALL_MEANS, KNOWN_ITEM_MEANS, NO_REFERENCE, NO_SOURCE
from .venues import VenueList


def _figure(recall, lower, upper, kept: int, n: int) -> str:
    if n == 0 or recall is None or pd.isna(recall):
        return "n = 0"
    return f"{recall:.3f} [{lower:.3f}, {upper:.3f}] ({kept}/{n})"


def filter_recall_markdown(table: pd.DataFrame) -> str:
    """Per reference, a table of filters (rows) by category (columns): recall [95% Clopper-Pearson] (kept/n), or
    ``n = 0``; with no reference, one line per filter saying so."""
    parts = ["**Filter recall** (instrument ii). " + FILTER_RECALL_MEANS]
    if table.empty:
        return "\n\n".join([*parts, "_(no filter measured)_"])
    for source, rows in table.groupby("reference_source", sort=False):
        if source == NO_SOURCE:
            lines = "\n".join(f"- {f}: n = 0, {NO_REFERENCE}" for f in rows["filter_name"].drop_duplicates())
            parts.append(f"*No reference yet.*\n\n{lines}")
            continue
        categories = list(dict.fromkeys(rows["category"]))
        head = "| filter | " + " | ".join(categories) + " |\n|---|" + "---|" * len(categories)
        body = []
        for name, per_filter in rows.groupby("filter_name", sort=False):
            cells = {
                r["category"]: _figure(r["recall"], r["lower"], r["upper"], r["kept"], r["n"])
                for _, r in per_filter.iterrows()
            }
            body.append(f"| {name} | " + " | ".join(cells.get(c, "-") for c in categories) + " |")
        parts.append(f"*Reference: {source}*\n\n" + head + "\n" + "\n".join(body))
    definitions = table.drop_duplicates("filter_name")
    parts.append("Filters: " + "; ".join(f"`{r.filter_name}`: {r.filter_definition}" for r in definitions.itertuples()))
    return "\n\n".join(parts)


def known_item_markdown(table: pd.DataFrame, venues: VenueList) -> str:
    """Known-item recall on the venue reference set, in its own section: the protocol's sentence, the list (version,
    pinned and not pinned venues), then per grouping a table of systems by group."""
    pinned = ", ".join(f"{name} ({sid})" for sid, name in venues.pinned.items()) or "none"
    missing = ", ".join(venues.not_pinned)
    parts = [
        "**Known-item recall on the venue reference set** (instrument iii): a NON-PROBABILITY bound on recall for the "
        "hard cases, reported apart from the design-based estimates. " + KNOWN_ITEM_MEANS,
        f"Venue list {venues.version} (SHA-256 {venues.sha256[:12]}): pinned {pinned}"
        + (f"; not pinned (no confirmed OpenAlex source id, no works): {missing}" if missing else ""),
    ]
    if table.empty:
        return "\n\n".join([*parts, "_(no system measured)_"])
    for group_by, rows in table.groupby("group_by", sort=False):
        groups = list(dict.fromkeys(rows["group"]))
        head = "| system | " + " | ".join(groups) + " |\n|---|" + "---|" * len(groups)
        body = []
        for system, per_system in rows.groupby("system", sort=False):
            cells = {
                r["group"]: _figure(r["recall"], r["lower"], r["upper"], r["detected"], r["n"])
                + (f", {r['undecided']} undecided" if r["undecided"] else "")
                for _, r in per_system.iterrows()
            }
            body.append(f"| {system} | " + " | ".join(cells.get(g, "-") for g in groups) + " |")
        parts.append(
            f"*By {group_by}* (reference works: {int(rows.loc[rows['system'] == rows['system'].iloc[0], 'reference_works'].sum())})\n\n"
            + head
            + "\n"
            + "\n".join(body)
        )
    notes = table.dropna(subset=["note"]).drop_duplicates("system")
    if not notes.empty:
        parts.append("Notes: " + "; ".join(f"{r.system}: {r.note}" for r in notes.itertuples()))
    return "\n\n".join(parts)


def instruments_pointer_markdown() -> str:
    """What the validation report says of the two instruments it does not hold: their meaning in the protocol's
    words and the assets whose tables hold their figures, apart from its design-based estimates."""
    return (
        "**Recall without a probability sample** (reported apart from these design-based estimates). Filter recall "
        f"(asset `filter_recall`, instrument ii): {FILTER_RECALL_MEANS} Known-item recall on the venue reference set "
        f"(asset `venue_known_item_recall`, instrument iii): {KNOWN_ITEM_MEANS}"
    )
