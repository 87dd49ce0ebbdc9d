"""Facet counts by year and language, stored when a release is built.

A cohort's facets are counted under every filter but the facet's own. When those other filters are only a year
range and/or a language (the usual first filters: year 2015-2022 + language en holds about a fifth of the release),
each facet is a sum over a few cells of a table counted once per release, ``year_language_counts``: one row per
(year, language code, facet, code) with its number of works, written by :func:`write_year_language_counts` from
``work_facets``:

- every column facet (``language``, ``type``, ``field``, ``topic``, ``venue``, ``classification_kind``,
  ``release_layer``, ``retraction_state``: their
  ``facet_codes`` codes, NULL for a work without a value), ``year`` (code = the year) and every boolean facet
  (code 1 = yes, 0 = no);
- every name facet and the classifier facet (one row per code of the works' code lists);
- ``label`` (the direct-label facet): one row per teacher and category, with the works counted distinct and the
  qualification sentence of the labels;
- ``_coverage``: the works (code 0), with a labelled direct label (1), scored (2) and decided (3).

Year and language are the columns ``year`` and ``language`` of ``work_facets`` under the same names, so a cohort's own
coded clauses (:func:`..query.clauses.where_sql`) select the cells of the table as they select the works of ``work_facets``:
a year range keeps its years (never a NULL year), a language its code, and a cell is a disjoint set of works, so the
sum over the cells in range is the count over the works in range, exactly. :func:`facet_items` orders and cuts each
facet as :class:`..query.facets.FacetCounter` does (``site/test_cube.py`` compares both, and direct DuckDB counts, for
year ranges, open-ended ones, an empty one and languages). :class:`..query.facets.FacetCounter` reads it for every facet
whose other filters are only year and language (so also the year-range facet of year + funder, say), and
:class:`..query.cohort_query.CohortQuery` its count and coverage when the cohort has no other filter. A release of an earlier
layout has no such table: its cohorts are counted as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from ...tables.site import CODED_FACETS
from .facet_columns import BOOLEAN_COLUMNS, COLUMN_FACETS, LIST_FACETS, NAME_TABLES, TOP_N

#: The filter groups the table is keyed by: a facet is read from it when its other filters are among these.
CUBE_GROUPS = frozenset({"year", "language"})
#: The column facets listed by their first ``TOP_N`` values (``year`` lists every year).
TOP_N_FACETS = CODED_FACETS
#: The coverage counts stored under facet ``_coverage``, by code.
COVERAGE = ("works", "direct", "scored", "decided")


def facet_count_sql(source: str, keys: tuple[str, ...] = (), facets: Sequence[str] | None = None) -> str:
    """SQL of the rows ``(*keys, facet, code, teacher, category, qualification, n)``: every facet's count over the
    ``work_facets`` rows of ``source`` (a table name or a parenthesised query), grouped by ``keys`` (columns of
    ``work_facets``) besides; ``facets``: only these (default all, with ``label`` and ``_coverage``). The cells of
    ``year_language_counts`` are these rows over ``work_facets`` keyed by year and language; the same counts over any
    other rows (:func:`cube_rows`' complement) are comparable with them cell for cell. Zero counts are left out."""
    want = set(facets) if facets is not None else None
    key = "".join(f"w.{k}, " for k in keys)
    by = f"GROUP BY {', '.join(f'w.{k}' for k in keys)}, facet, code" if keys else "GROUP BY facet, code"
    parts = []
    for c in COLUMN_FACETS:
        if want is None or c in want:
            parts.append(
                f"SELECT {key}'{c}' AS facet, CAST(w.{c} AS INTEGER) AS code, count(*) AS n FROM {source} w {by}"
            )
    for name, column in BOOLEAN_COLUMNS.items():
        if want is None or name in want:
            parts.append(
                f"SELECT {key}'{name}' AS facet, CAST(w.{column} AS INTEGER) AS code, count(*) AS n FROM {source} w "
                f"WHERE w.{column} IS NOT NULL {by}"
            )
    for name in LIST_FACETS:
        if want is None or name in want:
            parts.append(
                f"SELECT {key}'{name}' AS facet, code, count(*) AS n FROM "
                f"(SELECT {key}unnest(w.{name}) AS code FROM {source} w) w {by}"
            )
    if want is None or "_coverage" in want:
        flags = ("count(*)", *(f"count(*) FILTER (WHERE w.{flag})" for flag in ("labelled", "scored", "decided")))
        parts.append(
            f"SELECT {key}'_coverage' AS facet, unnest([0, 1, 2, 3]) AS code, unnest([c0, c1, c2, c3]) AS n FROM "
            f"(SELECT {key}{', '.join(f'{f} AS c{i}' for i, f in enumerate(flags))} FROM {source} w"
            f"{' GROUP BY ALL' if keys else ''}) w"
        )
    pieces = []
    if parts:
        counts = " UNION ALL ".join(f"SELECT * FROM ({p})" for p in parts)
        pieces.append(
            f"SELECT {key}facet, code, NULL AS teacher, NULL AS category, NULL AS qualification, n FROM ({counts}) w "
            "WHERE n > 0"
        )
    if want is None or "label" in want:
        # the direct-label facet: teacher and category, works counted distinct (FacetCounter._label)
        pieces.append(
            f"SELECT {key}'label' AS facet, NULL AS code, l.teacher, l.category, "
            "any_value(l.qualification) AS qualification, count(DISTINCT l.work_key) AS n "
            "FROM (SELECT work_key, teacher, qualification, unnest(categories) AS category "
            f"FROM work_labels WHERE status = 'labelled') l JOIN {source} w ON w.work_key = l.work_key AND w.labelled "
            f"GROUP BY {key}l.teacher, l.category"
        )
    if not pieces:
        raise ValueError(f"no facet to count among {sorted(want or [])}")
    return " UNION ALL ".join(pieces)


def write_year_language_counts(con) -> int:
    """Count every facet of ``work_facets`` per year and language into ``year_language_counts`` (the build, after
    ``sql/facets.sql``), in (facet, language, year) order so a language's or a year range's cells are found by zone
    maps; returns the rows written."""
    con.execute(
        "INSERT INTO year_language_counts "
        f"SELECT * FROM ({facet_count_sql('work_facets', ('year', 'language'))}) "
        "ORDER BY facet, language NULLS LAST, year NULLS LAST, code NULLS LAST, teacher, category"
    )
    return con.execute("SELECT count(*) FROM year_language_counts").fetchone()[0]


def cube_rows(con, selections: list[tuple[list[str], str, list]], minus: str | None = None) -> list[tuple] | None:
    """The summed cells of ``year_language_counts`` for each ``(facets, where over w, params)``: rows ``(facet, code,
    value, model_version, mode, prediction_status, teacher, category, qualification, n)``, codes decoded through
    ``facet_codes``; None for a release without the table (an earlier layout).

    ``minus``: a table of a complement's ``work_facets`` rows, works that the summed cells hold and the cohort does
    not (the cells' filters and NOT the cohort's other filter): their counts (:func:`facet_count_sql`) are taken off
    each facet's sums, so the rows are the cohort's own, exactly, at the cost of counting the complement. With
    ``minus``, ``selections`` holds one selection (the cells the complement is part of)."""
    if not selections:
        return []
    conds, params = [], []
    for facets, where, p in selections:
        conds.append(f"(w.facet IN ({', '.join(repr(f) for f in facets)}) AND ({where}))")
        params += p
    summed = (
        "SELECT w.facet, w.code, w.teacher, w.category, any_value(w.qualification) AS qualification, "
        f"CAST(sum(w.n) AS BIGINT) AS n FROM year_language_counts w WHERE {' OR '.join(conds)} "
        "GROUP BY w.facet, w.code, w.teacher, w.category"
    )
    if minus is not None:
        if len(selections) != 1:
            raise ValueError("a complement is taken off one selection of cells")
        comp = facet_count_sql(minus, facets=selections[0][0])
        summed = (
            f"SELECT s.facet, s.code, s.teacher, s.category, s.qualification, s.n - coalesce(c.n, 0) AS n "
            f"FROM ({summed}) s LEFT JOIN ({comp}) c ON c.facet = s.facet AND c.code IS NOT DISTINCT FROM s.code "
            "AND c.teacher IS NOT DISTINCT FROM s.teacher AND c.category IS NOT DISTINCT FROM s.category "
            "WHERE s.n > coalesce(c.n, 0)"
        )
    # the listed facets keep their first TOP_N values here already (the order facet_items gives), not all of a venue's
    # thousands: fetching and sorting them in Python took longer than the sum itself at 4.3M works
    listed = ", ".join(repr(f) for f in (*TOP_N_FACETS, *NAME_TABLES))
    try:
        return con.execute(
            f"WITH g AS ({summed}) "
            "SELECT g.facet, g.code, k.value, k.model_version, k.mode, k.prediction_status, g.teacher, g.category, "
            "g.qualification, g.n FROM g LEFT JOIN facet_codes k ON k.facet = g.facet AND k.code = g.code "
            f"QUALIFY g.facet NOT IN ({listed}) "
            f"OR row_number() OVER (PARTITION BY g.facet ORDER BY g.n DESC, k.value NULLS LAST) <= {TOP_N}",
            params,
        ).fetchall()
    except duckdb.CatalogException:
        return None


def coverage_of(rows: list[tuple]) -> dict[str, int]:
    """The cohort's coverage (``works``, ``direct``, ``scored``, ``decided``) from its ``_coverage`` cells."""
    got = {code: n for facet, code, *_, n in rows if facet == "_coverage"}
    return {name: got.get(i, 0) for i, name in enumerate(COVERAGE)}


def by_facet(rows: list[tuple]) -> dict[str, list[tuple]]:
    """The rows of :func:`cube_rows` by facet."""
    out: dict[str, list[tuple]] = {}
    for r in rows:
        out.setdefault(r[0], []).append(r)
    return out


def facet_items(name: str, mine: list[tuple]) -> list[dict[str, Any]]:
    """The items of facet ``name`` (a :data:`..query.facets.FACETS` group) from its summed cells (its rows of
    :func:`by_facet`), ordered and cut as :class:`..query.facets.FacetCounter` gives them."""
    if name == "year":
        got = sorted(((code, n) for _, code, *_, n in mine), key=lambda t: (t[0] is None, -(t[0] or 0)))
        return [{"value": c, "count": n} for c, n in got]
    if name in BOOLEAN_COLUMNS:
        counts = {code: n for _, code, *_, n in mine}
        return [{"value": "yes", "count": counts.get(1, 0)}, {"value": "no", "count": counts.get(0, 0)}]
    if name == "label":
        got = sorted(((r[6], r[7], r[8], r[9]) for r in mine), key=lambda t: (t[0], -t[3], t[1]))
        return [{"teacher": t, "value": c, "qualification": q, "count": n} for t, c, q, n in got]
    if name == "classifier":
        got = sorted(((r[3], r[4], r[2], r[5], r[9]) for r in mine), key=lambda t: (t[0], t[1], -t[4], t[2]))
        return [
            {"model_version": v, "mode": m, "value": c, "prediction_status": s, "count": n} for v, m, c, s, n in got
        ]
    if name in NAME_TABLES:
        got = sorted(((r[2], r[9]) for r in mine if r[2] is not None), key=lambda t: (-t[1], t[0]))
        return [{"value": v, "count": n} for v, n in got[:TOP_N]]
    got = sorted(((r[2], r[9]) for r in mine), key=lambda t: (-t[1], t[0] is None, t[0] or ""))
    return [{"value": v, "count": n} for v, n in got[:TOP_N]]
