"""The model card's cascade section: the certified thresholds a cascade (``cascade_batch``) found for a model version.

:func:`card_cascade` turns the ``cascade_thresholds`` rows of one run into the card JSON's ``cascade`` list;
:func:`cascade_markdown` renders it under "## Cascade" (:func:`.card.card_markdown`); :func:`.card.add_cascade` writes
both into the version's card files, so the release bundle's copy of the card names the thresholds behind every
certified decision its records carry.
"""

from __future__ import annotations

#: The ``cascade_thresholds`` columns the card keeps for each head.
CARD_COLUMNS = (
    "target",
    "teacher",
    "bound_method",
    "bound_level",
    "calibration_n",
    "calibration_positives",
    "precision_target",
    "positive_threshold",
    "positive_bound",
    "npv_target",
    "negative_threshold",
    "negative_bound",
    "negative_vacuous",
    "recall_target",
    "works_planned",
    "decided_positive",
    "decided_negative",
    "sent_to_teacher",
    "unsettled",
)


def card_cascade(rows: list[dict]) -> list[dict]:
    """The card's ``cascade``: one entry per head of ``rows`` (``cascade_thresholds``), its :data:`CARD_COLUMNS`
    (``bound_method`` Clopper-Pearson for a row written before the column existed), by head."""
    out = []
    for row in sorted(rows, key=lambda r: r["target"]):
        entry = {c: row.get(c) for c in CARD_COLUMNS}
        entry["bound_method"] = entry["bound_method"] or "clopper-pearson"
        out.append(entry)
    return out


def _t(value) -> str:
    return "none certified" if value is None else f"{value:.3f}"


def _b(value) -> str:
    return "" if value is None else f" (lower bound {value:.3f})"


def cascade_markdown(entries: list[dict]) -> list[str]:
    """The card's "## Cascade" lines for the card's ``cascade`` entries (none: no line)."""
    if not entries:
        return []
    e0 = entries[0]
    lines = [
        "",
        "## Cascade",
        "",
        f"The cascade (asset `cascade_batch`) lets the student decide where its threshold is certified: on held-out works "
        f"the teacher labelled, the one-sided {e0['bound_level']:.0%} lower bound ({e0['bound_method']}) of the precision "
        "of the works scored at or above t+, or of the negative predictive value of those at or below t-, is at or above "
        "the target. Works between t- and t+ go to the teacher within its call budget; the rest of them stay unsettled. "
        "A certified decision is a machine decision, never a validated label.",
        "",
        "| head | teacher | bound | held-out labels (positives) | precision target: t+ | NPV target: t- | recall kept "
        "| decided positive / negative | to the teacher | unsettled |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        recall = "no cap" if e["recall_target"] is None else f"{e['recall_target']:g}"
        vacuous = (
            "; met by the base rate alone" if e["negative_vacuous"] and e["negative_threshold"] is not None else ""
        )
        lines.append(
            f"| {e['target']} | {e['teacher']} | {e['bound_method']}, {e['bound_level']:.0%} | {e['calibration_n']} "
            f"({e['calibration_positives']}) | {e['precision_target']:g}: {_t(e['positive_threshold'])}"
            f"{_b(e['positive_bound'] if e['positive_threshold'] is not None else None)} | {e['npv_target']:g}: "
            f"{_t(e['negative_threshold'])}{_b(e['negative_bound'] if e['negative_threshold'] is not None else None)}"
            f"{vacuous} | {recall} | {e['decided_positive']} / {e['decided_negative']} of {e['works_planned']} | "
            f"{e['sent_to_teacher']} | {e['unsettled']} |"
        )
    return lines
