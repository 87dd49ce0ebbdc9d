"""Recall against reference sets that need no probability sample: the original protocol's instruments ii and iii.

**Filter recall (instrument ii).** "Any filter's recall is measured directly against the works that already carry
full-rubric labels: run the filter over them and count what it drops." The references are the direct labels of each
*qualified* teacher (``teacher:<name>``) and the final human codes of the current protocol (``human``: two coders
agreed or an adjudicator settled), never mixed. For every reference, filter (:mod:`.filters`) and category, the
reference positives in the frame are counted with what the filter keeps and drops; recall = kept / positives with a
Clopper-Pearson interval. Without any reference, every filter still has its rows: n = 0 and :data:`NO_REFERENCE`.

**Known-item recall on a venue reference set (instrument iii).** The frame's works published in the pinned venues
(:mod:`.venues`) are meta-research by where they appeared. For each system (candidate and consensus on
``metaresearch``, each registry teacher's direct labels, each published student head's top decile of the frame on
``metaresearch``), overall and per language, abstract availability and venue: the reference works it decided on,
those it put in ``metaresearch`` and those it missed; recall with a Clopper-Pearson interval. A work the system has
no decision on (no prediction, no label, a failed label) is counted apart (``undecided``), never as a miss. This is a
non-probability bound on recall for the hard cases, reported apart from the design-based estimates.

The counts are DuckDB queries over a connection with views named as the warehouse tables (``frame``,
``predictions``, ``direct_labels_<teacher>``, ``human_codes``); the intervals are scipy's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import duckdb
import pandas as pd
from scipy.stats import binomtest

from ...tables.fields import PUBLISHED_TEACHERS
from ...vocab import CATEGORIES, INSUFFICIENT_PAYLOAD
from .filters import Filter
from .venues import VenueList

#: The interval of every recall: exact binomial (Clopper-Pearson), scipy's ``binomtest(...).proportion_ci``.
INTERVAL_METHOD = "clopper-pearson"
CONFIDENCE = 0.95
#: The categories a filter's recall is measured on (``insufficient_payload`` is a teacher declining to judge).
RECALL_CATEGORIES: tuple[str, ...] = tuple(c for c in CATEGORIES if c != INSUFFICIENT_PAYLOAD)
KNOWN_ITEM_CATEGORY = "metaresearch"
HUMAN = "human"
NO_SOURCE = "none"
NO_REFERENCE = "no reference yet: no qualified teacher's direct labels and no final human code"
NO_POSITIVES = "no reference positives in this category"
NON_PROBABILITY = "known-item recall: a non-probability bound on recall for the hard cases, not a design-based estimate"
GROUPINGS: tuple[str, ...] = ("all", "language", "has_abstract", "venue")
#: The note of a decision rule that put no frame work in any category (its misses say so, not the rule's quality).
NO_RULE_DECISIONS = (
    "no frame work has a {rule} category: no head decides yet (a role teacher not qualified, or no head passed its "
    "support gate)"
)
UNKNOWN = "(unknown)"

#: What each instrument means, in the original protocol's words (section 6.1), shown with its table.
FILTER_RECALL_MEANS = (
    "Any filter's recall is measured directly against the works that already carry full-rubric labels: run the "
    "filter over them and count what it drops. No filter enters the pipeline without its recall measured this way "
    "first."
)
KNOWN_ITEM_MEANS = (
    "Known-item recall on a venue reference set is a non-probability estimate. It bounds and diagnoses recall on the "
    "hard cases; it does not replace the design-weighted population estimate. Both are reported, separately, and "
    "neither is presented as the other."
)


def recall_interval(hits: int, n: int) -> tuple[float | None, float | None, float | None]:
    """``(hits / n, lower, upper)`` with the 95% Clopper-Pearson interval; ``(None, None, None)`` when ``n`` is 0."""
    if n == 0:
        return None, None, None
    if not 0 <= hits <= n:
        raise ValueError(f"recall: {hits} hits out of {n} works is not a count")
    ci = binomtest(hits, n).proportion_ci(confidence_level=CONFIDENCE, method="exact")
    return hits / n, float(ci.low), float(ci.high)


@dataclass(frozen=True)
class ReferenceSource:
    """One reference of filter recall: its name (``teacher:<name>`` or ``human``) and a DuckDB relation of
    ``id, categories`` (one row per work)."""

    name: str
    relation: str


def teacher_reference(teacher: str) -> ReferenceSource:
    """A qualified teacher's direct labels as a reference (labelled works only: a failed label is unknown)."""
    from ...student.roles import direct_labels_key  # here: the roles module loads the teacher registry on import

    return ReferenceSource(
        f"teacher:{teacher}",
        f"SELECT work_id AS id, categories FROM \"{direct_labels_key(teacher)}\" WHERE status = 'labelled'",
    )


#: The final human codes of the current protocol (the ``human_codes`` table: two coders agreed, or adjudicated).
HUMAN_REFERENCE = ReferenceSource(HUMAN, "SELECT id, categories FROM human_codes WHERE categories IS NOT NULL")


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _category_list(categories: Iterable[str]) -> str:
    return "[" + ", ".join(_literal(c) for c in categories) + "]::VARCHAR[]"


def filter_counts(
    con: duckdb.DuckDBPyConnection,
    sources: list[ReferenceSource],
    filters: list[Filter],
    categories: tuple[str, ...] = RECALL_CATEGORIES,
) -> pd.DataFrame:
    """Per source and category: ``n`` (reference positives in the frame), ``outside`` (reference positives whose
    work is not in the frame: left out) and ``kept_<i>`` (positives filter ``i`` keeps), one query."""
    if not sources:
        return pd.DataFrame(columns=["source", "category", "n", "outside", *(f"kept_{i}" for i in range(len(filters)))])
    refs = " UNION ALL ".join(
        f"SELECT DISTINCT {_literal(s.name)} AS source, id, unnest(categories) AS category FROM ({s.relation})"
        for s in sources
    )
    kept = ", ".join(f"count(f.id) FILTER (WHERE {flt.predicate}) AS kept_{i}" for i, flt in enumerate(filters))
    return con.execute(
        f"""WITH ref AS (SELECT * FROM ({refs}) WHERE list_contains({_category_list(categories)}, category))
            SELECT r.source, r.category, count(f.id) AS n, count(*) - count(f.id) AS outside, {kept}
            FROM ref r LEFT JOIN frame f ON f.id = r.id GROUP BY ALL ORDER BY ALL"""
    ).df()


def filter_recall_rows(
    counts: pd.DataFrame,
    sources: list[str],
    filters: list[Filter],
    categories: tuple[str, ...] = RECALL_CATEGORIES,
) -> list[dict]:
    """One row per source (in order; :data:`NO_SOURCE` alone when there is none), filter and category: n, kept,
    dropped, recall and its interval, and a note when there is nothing to measure."""
    by_key = {(r["source"], r["category"]): r for r in counts.to_dict("records")}
    rows = []
    for source in sources or [NO_SOURCE]:
        for i, flt in enumerate(filters):
            for category in categories:
                found = by_key.get((source, category))
                n = 0 if found is None else int(found["n"])
                kept = 0 if found is None else int(found[f"kept_{i}"])
                recall, lower, upper = recall_interval(kept, n)
                note = NO_REFERENCE if not sources else (NO_POSITIVES if n == 0 else None)
                if found is not None and int(found["outside"]):
                    outside = f"{int(found['outside'])} reference positives outside the frame left out"
                    note = outside if note is None else f"{note}; {outside}"
                rows.append(
                    {
                        "reference_source": source,
                        "filter_name": flt.name,
                        "filter_kind": flt.kind,
                        "filter_definition": flt.definition,
                        "category": category,
                        "n": n,
                        "kept": kept,
                        "dropped": n - kept,
                        "recall": recall,
                        "lower": lower,
                        "upper": upper,
                        "interval_method": INTERVAL_METHOD,
                        "note": note,
                    }
                )
    return rows


# ---- known-item recall on the venue reference set ---------------------------------------------------------------


@dataclass(frozen=True)
class KnownItemSystem:
    """A system judged on the venue reference set: its name, a DuckDB relation of ``id, decision`` (only the works it
    decided on) and a note shown on its rows (a teacher's qualification standing), or None."""

    name: str
    relation: str
    note: str | None = None


_METARESEARCH = f"'{KNOWN_ITEM_CATEGORY}'"


def prediction_systems(con: duckdb.DuckDBPyConnection) -> list[KnownItemSystem]:
    """Candidate, consensus and each published student head's top decile, from ``predictions`` (none without it); a
    rule that put no frame work in any category carries :data:`NO_RULE_DECISIONS`.

    Top decile: the ``ceil(N / 10)`` frame works with the highest ``metaresearch`` score of the head (ties broken by
    id), over every scored work of ``predictions``."""
    if not _has_view(con, "predictions"):
        return []
    columns = {r[0] for r in con.execute("DESCRIBE predictions").fetchall()}
    systems = []
    for rule in ("candidate", "consensus"):
        decided = con.execute(f"SELECT count(*) FROM predictions WHERE len({rule}_categories) > 0").fetchone()[0]
        systems.append(
            KnownItemSystem(
                rule,
                f"SELECT id, list_contains(coalesce({rule}_categories, []::VARCHAR[]), {_METARESEARCH}) AS decision "
                "FROM predictions",
                None if decided else NO_RULE_DECISIONS.format(rule=rule),
            )
        )
    index = CATEGORIES.index(KNOWN_ITEM_CATEGORY) + 1
    for teacher in PUBLISHED_TEACHERS:
        col = f"category_scores_{teacher}"
        if col not in columns:
            continue
        scored = f"SELECT id, {col}[{index}] AS score FROM predictions WHERE {col}[{index}] IS NOT NULL"
        systems.append(
            KnownItemSystem(
                f"student:{teacher}:top_decile",
                f"""SELECT id, row_number() OVER (ORDER BY score DESC, id) <= ceil(count(*) OVER () / 10.0) AS decision
                    FROM ({scored})""",
            )
        )
    return systems


def teacher_system(teacher: str, note: str | None) -> KnownItemSystem:
    """A registry teacher's direct labels on ``metaresearch`` (labelled works only)."""
    from ...student.roles import direct_labels_key  # here: the roles module loads the teacher registry on import

    return KnownItemSystem(
        f"teacher:{teacher}",
        f"SELECT work_id AS id, list_contains(coalesce(categories, []::VARCHAR[]), {_METARESEARCH}) AS decision "
        f"FROM \"{direct_labels_key(teacher)}\" WHERE status = 'labelled'",
        note,
    )


def _has_view(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = ?", [name]).fetchone()[0])


def venue_reference(con: duckdb.DuckDBPyConnection, venues: VenueList) -> pd.DataFrame:
    """The reference set: every frame work whose primary source is a pinned venue (``id, venue, language,
    has_abstract``; the venue by its list name, groups as text)."""
    pinned = venues.pinned
    if not pinned:
        return pd.DataFrame(columns=["id", "venue", "language", "has_abstract"])
    con.register("reference_venue_ids", pd.DataFrame({"source_id": list(pinned), "venue": list(pinned.values())}))
    try:
        return con.execute(
            f"""SELECT f.id, v.venue, coalesce(f.language, '{UNKNOWN}') AS language,
                       coalesce(CAST(f.has_abstract AS VARCHAR), '{UNKNOWN}') AS has_abstract
                FROM frame f JOIN reference_venue_ids v
                  ON v.source_id = regexp_replace(f.venue_id, '^https?://openalex.org/', '')
                ORDER BY f.id"""
        ).df()
    finally:
        con.unregister("reference_venue_ids")


def system_decisions(con: duckdb.DuckDBPyConnection, system: KnownItemSystem, ids: list[str]) -> dict[str, bool]:
    """``{id: decision}`` of ``system`` on the works ``ids`` it decided on."""
    if not ids:
        return {}
    con.register("reference_ids", pd.DataFrame({"id": ids}))
    try:
        rows = con.execute(
            f"SELECT s.id, bool_or(s.decision) FROM ({system.relation}) s JOIN reference_ids r USING (id) GROUP BY 1"
        ).fetchall()
    finally:
        con.unregister("reference_ids")
    return {i: bool(d) for i, d in rows}


def known_item_rows(
    reference: pd.DataFrame, decisions: Mapping[str, Mapping[str, bool]], notes: Mapping[str, str | None]
) -> list[dict]:
    """One row per system (in ``decisions`` order), grouping (:data:`GROUPINGS`) and group: the reference works, those
    decided on (``n``), ``detected`` (put in ``metaresearch``), ``missed``, ``undecided``, recall and its interval."""
    rows = []
    for system, decided in decisions.items():
        frame = reference.assign(
            decided=reference["id"].map(lambda i, d=decided: i in d),
            detected=reference["id"].map(lambda i, d=decided: bool(d.get(i, False))),
        )
        for group_by in GROUPINGS:  # "all" always has its row; a grouping has one per group present
            groups = [("all", frame)] if group_by == "all" else sorted(frame.groupby(group_by), key=lambda g: g[0])
            rows += [_known_item_row(system, group_by, str(g), part, notes.get(system)) for g, part in groups]
    return rows


def _known_item_row(system: str, group_by: str, group: str, part: pd.DataFrame, note: str | None) -> dict:
    n, detected = int(part["decided"].sum()), int(part["detected"].sum())
    recall, lower, upper = recall_interval(detected, n)
    if len(part) == 0:
        note = "; ".join(x for x in ("no frame work in a pinned venue", note) if x)
    return {
        "system": system,
        "category": KNOWN_ITEM_CATEGORY,
        "group_by": group_by,
        "group": group,
        "reference_works": len(part),
        "n": n,
        "detected": detected,
        "missed": n - detected,
        "undecided": len(part) - n,
        "recall": recall,
        "lower": lower,
        "upper": upper,
        "interval_method": INTERVAL_METHOD,
        "estimate_kind": NON_PROBABILITY,
        "note": note,
    }
