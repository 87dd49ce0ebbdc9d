"""Facet typeahead: ``/api/v1/facets/<venue|institution|funder|topic>?q=<prefix>``, the values of a facet
that begin with a prefix, with their number of works, most first, under the current cohort or the whole release.

Parameters are strict (:func:`..query.params.single_values`): ``q`` is the prefix (case-insensitive, at most
:data:`..query.params.MAX_TEXT` characters; empty or absent: the facet's largest values), ``limit`` (1 to
:data:`MAX_SUGGESTIONS`, default :data:`DEFAULT_SUGGESTIONS`), and every cohort filter of :data:`..query.params.FILTERS`
but the text query (here ``q`` is the prefix). The facet's own filter is left out of its counts, as the home page's
facets do (a venue's suggestions are the alternatives to the venue chosen). Without a cohort filter the counts come
from ``facet_value_counts`` (written at build time, :mod:`..build.figures`); with one, from the cohort's ``work_facets`` rows
restricted to the matching codes. The prefix reaches DuckDB as a parameter of ``starts_with``, so ``%`` and ``_`` are
plain characters.

The home page's facet inputs carry a ``<datalist>`` that ``/static/typeahead.js`` fills from this route as the user
types (the page works without it: the inputs are plain text fields of the GET form).
"""

from __future__ import annotations

from importlib import resources

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..build.figures import TYPEAHEAD_FACETS
from ..query.clauses import clauses, where_sql
from ..query.cohort import parse_filters
from ..query.params import FILTERS, MAX_TEXT, Param, single_values

DEFAULT_SUGGESTIONS, MAX_SUGGESTIONS = 10, 50
#: The cohort filters the typeahead accepts: all but the text query, whose name is the prefix here.
COHORT_FILTERS = tuple(n for n in FILTERS if n != "q")
TYPEAHEAD_PARAMS = (
    Param(
        "q",
        "text",
        "The beginning of the value (case-insensitive); empty: the facet's largest values.",
        max_length=MAX_TEXT,
    ),
    Param(
        "limit",
        "integer",
        "Values returned, most works first.",
        bounds=(1, MAX_SUGGESTIONS),
        default=str(DEFAULT_SUGGESTIONS),
    ),
)
_OWN = {p.name: p for p in TYPEAHEAD_PARAMS}
NAME_FACETS = ("institution", "funder")
SCRIPT = resources.files("metacan_pipeline.site").joinpath("static/typeahead.js").read_bytes()


def suggestions(con, facet: str, prefix: str, limit: int, coded: list) -> list[dict]:
    """``[{"value", "count"}]``: ``facet``'s values beginning with ``prefix`` (any case), most works first, at most
    ``limit``, counted over ``coded`` (a cohort's coded clauses; empty: the whole release)."""
    match = "SELECT code FROM facet_value_counts WHERE facet = ? AND starts_with(lower(value), ?)"
    where, params = where_sql(coded, exclude=facet)
    if not coded or where == "true":
        rows = con.execute(
            "SELECT value, n FROM facet_value_counts WHERE facet = ? AND n > 0 AND starts_with(lower(value), ?) "
            "ORDER BY n DESC, value LIMIT ?",
            [facet, prefix.lower(), limit],
        ).fetchall()
    else:
        codes = (
            f"SELECT code, count(*) AS n FROM (SELECT unnest(w.{facet}) AS code FROM work_facets w WHERE {where}) "
            f"WHERE code IN ({match}) GROUP BY code"
            if facet in NAME_FACETS
            else f"SELECT w.{facet} AS code, count(*) AS n FROM work_facets w WHERE ({where}) AND w.{facet} IN ({match}) "
            "GROUP BY 1"
        )
        rows = con.execute(
            f"SELECT k.value, g.n FROM ({codes}) g JOIN facet_value_counts k ON k.facet = ? AND k.code = g.code "
            "ORDER BY g.n DESC, k.value LIMIT ?",
            [*params, facet, prefix.lower(), facet, limit],
        ).fetchall()
    return [{"value": v, "count": n} for v, n in rows]


class TypeaheadEndpoints:
    """The typeahead route and its script, a mixin of :class:`.app.Site` (reads ``release``, ``info``)."""

    def api_facet_values(self, request: Request) -> Response:
        facet = request.path_params["facet"]
        if facet not in TYPEAHEAD_FACETS:
            raise HTTPException(404, f"no typeahead for {facet[:40]!r}: the facets are {', '.join(TYPEAHEAD_FACETS)}")
        values = single_values(request.query_params.multi_items(), (*COHORT_FILTERS, *_OWN))
        prefix = _OWN["q"].check(values.pop("q", ""), self.info)
        limit = _OWN["limit"].check(values.pop("limit"), self.info) if "limit" in values else DEFAULT_SUGGESTIONS
        cohort = parse_filters(values, self.info)
        coded = clauses(cohort, coded=True)
        con = self.release.cursor()
        try:
            found = suggestions(con, facet, prefix, limit, coded)
        finally:
            con.close()
        scope = "cohort" if [c for c in coded if c.group != facet] else "release"
        return JSONResponse(
            {
                "facet": facet,
                "q": prefix,
                "limit": limit,
                "release_id": self.info.release_id,
                "scope": scope,
                "filters": cohort.filters,
                "query_hash": cohort.query_hash(),
                "values": found,
            }
        )

    def typeahead_script(self, request: Request) -> Response:
        return Response(
            SCRIPT,
            media_type="text/javascript; charset=utf-8",
            headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"},
        )
