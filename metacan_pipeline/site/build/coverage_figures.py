"""The figures a group asks for first, computed once when a release is built (:func:`coverage_statistics`, rows of
``release_statistics`` beside those of :mod:`.figures`):

- ``top_venues``, ``top_funders``, ``top_institutions``: the :data:`TOP` values with the most works (a Canadian
  institution among the work's affiliations; a funder of the work), each with its works, the works a teacher
  labelled and the works without an abstract; ties by value.
- ``abstract_gap_by_type``: per work type, its works and those without an abstract in OpenAlex.
- ``labelled_by_year`` and ``labelled_by_language``: per publication year (every year) and per language, the works,
  those with a labelled direct label of any teacher and those whose record ships a category (a labelled direct
  label's category or a classifier decision): the coverage of the direct labels where a group reads it.

A value that is not recorded (no venue, type, year or language) is the row whose ``value`` is null.
"""

from __future__ import annotations

import duckdb

#: Values listed per top figure.
TOP = 25
_COUNTS = (
    "count(*) AS works, count(*) FILTER (WHERE w.labelled) AS labelled, "
    "count(*) FILTER (WHERE NOT coalesce(w.has_abstract, false)) AS no_abstract"
)
_COVERAGE = (
    "count(*) AS works, count(*) FILTER (WHERE w.labelled) AS labelled, "
    "count(*) FILTER (WHERE w.classified) AS classified"
)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict]:
    return con.execute(sql, params or []).to_arrow_table().to_pylist()


def _by_code(facet: str, counts: str, order: str) -> str:
    """Per value of a coded column facet of ``work_facets``: its counts."""
    return (
        f"SELECT k.value, {counts} FROM work_facets w LEFT JOIN facet_codes k ON k.facet = '{facet}' "
        f"AND k.code = w.{facet} GROUP BY 1 ORDER BY {order}"
    )


def _top_names(facet: str) -> str:
    """The :data:`TOP` names of a name facet (``institution``, ``funder``) by works, each work counted once."""
    return (
        f"SELECT k.value, {_COUNTS} FROM (SELECT work_key, labelled, has_abstract, unnest({facet}) AS code "
        f"FROM work_facets) w JOIN facet_codes k ON k.facet = '{facet}' AND k.code = w.code "
        f"GROUP BY 1 ORDER BY works DESC, 1 LIMIT {TOP}"
    )


def coverage_statistics(con: duckdb.DuckDBPyConnection) -> dict[str, list[dict]]:
    """The figures of the module docstring over a release database's ``work_facets`` and ``facet_codes``."""
    return {
        "top_venues": _rows(
            con,
            f"SELECT k.value, {_COUNTS} FROM work_facets w JOIN facet_codes k ON k.facet = 'venue' "
            f"AND k.code = w.venue GROUP BY 1 ORDER BY works DESC, 1 LIMIT {TOP}",
        ),
        "top_funders": _rows(con, _top_names("funder")),
        "top_institutions": _rows(con, _top_names("institution")),
        "abstract_gap_by_type": _rows(con, _by_code("type", _COUNTS, "works DESC, 1 NULLS LAST")),
        "labelled_by_year": _rows(
            con, f"SELECT w.year AS value, {_COVERAGE} FROM work_facets w GROUP BY 1 ORDER BY 1 NULLS LAST"
        ),
        "labelled_by_language": _rows(con, _by_code("language", _COVERAGE, "works DESC, 1 NULLS LAST")),
    }
