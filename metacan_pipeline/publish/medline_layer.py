"""What MEDLINE says of a record's study-design labels (SPEC section 11).

The gate of :mod:`metacan_pipeline.audit.medline` (table ``medline_study_design``, hand-indexed rows) judges each
study-design class per source of labels. On a record, each direct label whose ``study_design`` is a MEDLINE class of
a measured source carries ``study_design_medline``:

- the class passed for the label's teacher: ``{"status": "agrees_with_medline", "n", "precision_lower",
  "recall_lower"}``, shown as "agrees with MEDLINE on n hand-indexed records (lower bound x)";
- it failed (too few records, a low bound, no answer, no NLM type): ``{"status": "unvalidated", "reason"}``.

The MEDLINE gate only takes a claim away, never grants one: a label keeps ``label_status``
``direct_label_unvalidated`` either way, and nothing of the audit gate (``human_validation``) changes. Before
``medline_study_design`` has rows, records carry nothing of it (and stay byte-identical).
"""

from __future__ import annotations

from collections.abc import Mapping

import duckdb

from ..audit.medline.nlm import HAND, MEDLINE_CLASSES
from ..storage import MetacanStorage

AGREES = "agrees_with_medline"
UNVALIDATED = "unvalidated"

#: The newest run's hand-indexed rows of ``medline_study_design``.
VERDICTS_SQL = f"""
SELECT design, source, passed, n, precision_lower, recall_lower, gate FROM medline_study_design
WHERE indexing = '{HAND}' AND run_id = (SELECT arg_max(run_id, computed_at) FROM medline_study_design)
"""


def medline_verdicts(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], dict]:
    """``{(design, source): {"passed", "n", "precision_lower", "recall_lower", "gate"}}`` of the newest run (empty
    before any)."""
    cur = con.execute(VERDICTS_SQL)
    names = [d[0] for d in cur.description]
    out = {}
    for values in cur.fetchall():
        row = dict(zip(names, values, strict=True))
        out[(row.pop("design"), row.pop("source"))] = row
    return out


def read_medline_verdicts(storage: MetacanStorage) -> dict[tuple[str, str], dict]:
    """:func:`medline_verdicts` on the catalog (a short read-only connection; empty when the table is absent)."""
    with storage.connect(read_only=True) as con:
        try:
            return medline_verdicts(con)
        except duckdb.CatalogException:
            return {}


def study_design_entry(label: Mapping, verdicts: Mapping[tuple[str, str], dict]) -> dict | None:
    """The ``study_design_medline`` of one direct label entry, or None (no MEDLINE class, no verdict)."""
    design = label.get("study_design")
    if label.get("status") != "labelled" or design not in MEDLINE_CLASSES:
        return None
    verdict = verdicts.get((design, f"teacher:{label.get('teacher')}"))
    if verdict is None:
        return None
    if verdict["passed"]:
        return {
            "status": AGREES,
            "n": int(verdict["n"]),
            "precision_lower": verdict["precision_lower"],
            "recall_lower": verdict["recall_lower"],
        }
    return {"status": UNVALIDATED, "reason": verdict["gate"]}


def apply_medline(record: dict, verdicts: Mapping[tuple[str, str], dict] | None) -> None:
    """Sets ``study_design_medline`` on each direct label of ``record`` that has one (module docstring)."""
    if not verdicts:
        return
    for label in record.get("direct_labels") or []:
        entry = study_design_entry(label, verdicts)
        if entry is not None:
            label["study_design_medline"] = entry


def medline_violations(record: Mapping, verdicts: Mapping[tuple[str, str], dict]) -> list[str]:
    """Every ``agrees_with_medline`` of ``record`` without a passing newest MEDLINE row of its class and teacher (a
    claim the gate did not make); ``unvalidated`` takes no claim and is never a violation."""
    out = []
    for label in record.get("direct_labels") or []:
        entry = label.get("study_design_medline") or {}
        if entry.get("status") != AGREES:
            continue
        design, source = label.get("study_design"), f"teacher:{label.get('teacher')}"
        verdict = verdicts.get((design, source))
        if verdict is None or not verdict["passed"]:
            out.append(
                f"{record.get('id')}: {source}'s study design {design} says it agrees with MEDLINE, but the newest "
                "MEDLINE gate row of that class and teacher did not pass"
            )
    return out
