"""Suggestions for the values of a text filter, read from a release: the values that begin with a prefix, and the
nearest values to one that no work holds ("did you mean").

Both compare values as the filters do (:mod:`.clauses`): folded, ``lower(strip_accents(value))``
(``facet_codes.norm``), so a suggestion is one folded value shown in its most frequent spelling
(``facet_value_counts``, :mod:`..build.figures`) and its count is the number of works the filter with that value
selects: exact, with every spelling of it.

- :func:`prefix_values`: the values whose folded form begins with the folded prefix, most works first, counted under
  a cohort's filters but the facet's own (the whole release when there are none).
- :func:`did_you_mean`: for each value of a cohort's text filters (not their exclusions) that no work of the release
  holds, the values of the release nearest to it by Jaro-Winkler similarity of the folded forms (DuckDB's
  ``jaro_winkler_similarity``; at least :data:`SIMILAR_MIN`), most similar first, each with its works in the whole
  release.
"""

from __future__ import annotations

from typing import Any

from ..build.facet_columns import NAME_TABLES
from .clauses import Clause, where_sql
from .cohort import Cohort
from .params import OR_SEPARATOR, TEXT_FILTERS

#: The least Jaro-Winkler similarity (0-1) of a value offered for one no work holds: "natur" and "nature" are
#: 0.97, "toronto" and "university of toronto" 0.48 (too far to be offered as a misspelling of it).
SIMILAR_MIN = 0.8
#: Values offered per unknown value.
DID_YOU_MEAN_MAX = 3


def prefix_values(con, facet: str, prefix: str, limit: int, coded: list[Clause]) -> list[dict[str, Any]]:
    """``[{"value", "count"}]``: ``facet``'s values whose folded form begins with ``prefix`` folded, most works first
    (then by value), at most ``limit``, counted over ``coded`` (a cohort's coded clauses; the facet's own group is
    left out; empty: the whole release)."""
    where, params = where_sql(coded, exclude=facet)
    if where == "true":
        rows = con.execute(
            "SELECT value, n FROM facet_value_counts WHERE facet = ? AND n > 0 "
            "AND starts_with(norm, lower(strip_accents(?))) ORDER BY n DESC, norm LIMIT ?",
            [facet, prefix, limit],
        ).fetchall()
        return [{"value": v, "count": n} for v, n in rows]
    if facet in NAME_TABLES:  # a work counted once when two of its names fold alike
        codes, n = f"unnest(w.{facet})", "count(DISTINCT x.work_key)"
    else:
        codes, n = f"w.{facet}", "count(*)"
    rows = con.execute(
        "WITH m AS (SELECT code, norm FROM facet_codes WHERE facet = ? "
        "AND starts_with(norm, lower(strip_accents(?)))), "
        f"g AS (SELECT m.norm, {n} AS n FROM (SELECT w.work_key, {codes} AS code FROM work_facets w WHERE {where}) x "
        "JOIN m ON m.code = x.code GROUP BY m.norm) "
        "SELECT v.value, g.n FROM g JOIN facet_value_counts v ON v.facet = ? AND v.norm = g.norm "
        "ORDER BY g.n DESC, g.norm LIMIT ?",
        [facet, prefix, *params, facet, limit],
    ).fetchall()
    return [{"value": v, "count": n} for v, n in rows]


def did_you_mean(con, cohort: Cohort) -> dict[str, list[dict[str, Any]]]:
    """``{filter: [{"given", "values": [{"value", "count"}]}]}``: for each value of the cohort's text filters that no
    work of the release holds (folded), the release's nearest values (module docstring); a filter none of whose
    values is unknown, or whose unknown values have no near value, is left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in TEXT_FILTERS:
        if name not in cohort.filters:
            continue
        for given in cohort.filters[name].split(OR_SEPARATOR):
            known = con.execute(
                "SELECT count(*) FROM facet_codes WHERE facet = ? AND norm = lower(strip_accents(?))", [name, given]
            ).fetchone()[0]
            if known:
                continue
            rows = con.execute(
                "SELECT value, n FROM (SELECT value, n, norm, jaro_winkler_similarity(norm, lower(strip_accents(?))) "
                "AS s FROM facet_value_counts WHERE facet = ? AND n > 0) WHERE s >= ? ORDER BY s DESC, n DESC, value "
                "LIMIT ?",
                [given, name, SIMILAR_MIN, DID_YOU_MEAN_MAX],
            ).fetchall()
            if rows:
                out.setdefault(name, []).append({"given": given, "values": [{"value": v, "count": n} for v, n in rows]})
    return out


def replaced(cohort: Cohort, name: str, given: str, value: str) -> dict[str, str]:
    """The cohort's parameters with ``given``, one of the values of the text filter ``name``, replaced by ``value``
    (what a "did you mean" link asks for)."""
    values = [value if v == given else v for v in cohort.filters[name].split(OR_SEPARATOR)]
    return {**cohort.params(), name: OR_SEPARATOR.join(values)}
