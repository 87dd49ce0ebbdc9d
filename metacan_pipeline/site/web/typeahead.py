"""Value suggestions for the text filters: ``/api/v1/suggest?facet=<filter>&prefix=<beginning>`` (every text
filter: language, type, field, topic, venue, institution, funder, keyword) and the older
``/api/v1/facets/<facet>?q=<prefix>``: the values of a facet that begin with a prefix, case and accents ignored (a
value is a folded value in its most frequent spelling, :mod:`..query.suggest`), with the number of works the filter
with that value selects, most first, under the current cohort or the whole release.

Parameters are strict (:func:`..query.params.single_values`): the prefix (``prefix``, or ``q`` on the older route; at
most :data:`..query.params.MAX_TEXT` characters; empty or absent: the facet's largest values), ``limit`` (1 to
:data:`MAX_SUGGESTIONS`, default :data:`DEFAULT_SUGGESTIONS`), and every cohort filter of :data:`..query.params.FILTERS`
(on the older route all but the text query, whose name is the prefix there). The facet's own filter and its exclusion
are left out of its counts, as the home page's facets do (a venue's suggestions are the alternatives to the venue
chosen). Without a cohort filter the counts come from ``facet_value_counts`` (written at build time,
:mod:`..build.figures`); with one, from the cohort's ``work_facets`` rows restricted to the matching codes. The prefix
reaches DuckDB as a parameter of ``starts_with``, so ``%`` and ``_`` are plain characters.

The home page's text inputs carry a ``<datalist>`` that ``/static/typeahead.js`` fills from ``/api/v1/suggest`` as the
user types (the page works without it: the inputs are plain text fields of the GET form).
"""

from __future__ import annotations

from importlib import resources

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...i18n import N_
from ..build import fts
from ..build.figures import TYPEAHEAD_FACETS
from ..query.clauses import clauses
from ..query.cohort import parse_filters
from ..query.params import FILTERS, MAX_TEXT, CohortError, Param, single_values
from ..query.suggest import prefix_values

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
SUGGEST_PARAMS = (
    Param("facet", "choice", "The text filter whose values are suggested.", choices=TYPEAHEAD_FACETS, required=True),
    Param(
        "prefix",
        "text",
        "The beginning of the value (case and accents ignored: nat finds Nature, montr finds Montréal); empty: the "
        "facet's largest values.",
        max_length=MAX_TEXT,
    ),
    TYPEAHEAD_PARAMS[1],
)
_SUGGEST = {p.name: p for p in SUGGEST_PARAMS}
SCRIPT = resources.files("metacan_pipeline.site").joinpath("static/typeahead.js").read_bytes()


def suggestions(con, facet: str, prefix: str, limit: int, coded: list) -> list[dict]:
    """``[{"value", "count"}]``: ``facet``'s values beginning with ``prefix`` (case and accents ignored), most works
    first, at most ``limit``, counted over ``coded`` (a cohort's coded clauses; empty: the whole release):
    :func:`..query.suggest.prefix_values`."""
    return prefix_values(con, facet, prefix, limit, coded)


class TypeaheadEndpoints:
    """The typeahead route and its script, a mixin of :class:`.app.Site` (reads ``release``, ``info``)."""

    def api_facet_values(self, request: Request) -> Response:
        facet = request.path_params["facet"]
        if facet not in TYPEAHEAD_FACETS:
            raise HTTPException(404, f"no typeahead for {facet[:40]!r}: the facets are {', '.join(TYPEAHEAD_FACETS)}")
        values = single_values(request.query_params.multi_items(), (*COHORT_FILTERS, *_OWN))
        prefix = _OWN["q"].check(values.pop("q", ""), self.info)
        return self._suggested(facet, prefix, values, "q")

    def api_suggest(self, request: Request) -> Response:
        """``/api/v1/suggest?facet=<text filter>&prefix=<beginning>``: :meth:`api_facet_values` with the facet as a
        parameter (every text filter) and the prefix named ``prefix``, so the cohort's text query ``q`` may be
        given and narrows the counts."""
        values = single_values(request.query_params.multi_items(), (*FILTERS, *_SUGGEST))
        if "facet" not in values:
            raise CohortError(N_("facet is required: one of %(facets)s.", facets=", ".join(TYPEAHEAD_FACETS)))
        facet = _SUGGEST["facet"].check(values.pop("facet"), self.info)
        prefix = _SUGGEST["prefix"].check(values.pop("prefix", ""), self.info)
        return self._suggested(facet, prefix, values, "prefix")

    def _suggested(self, facet: str, prefix: str, values: dict[str, str], prefix_name: str) -> Response:
        limit = _OWN["limit"].check(values.pop("limit"), self.info) if "limit" in values else DEFAULT_SUGGESTIONS
        cohort = parse_filters(values, self.info)
        coded = clauses(cohort, coded=True)
        con = self.release.cursor()
        try:
            if cohort.words:  # the text query's matches, which the coded clauses read
                index = self.release.search_index()
                try:
                    con.register("fts_hits", fts.search(index, cohort.words))
                finally:
                    index.close()
            found = suggestions(con, facet, prefix, limit, coded)
        finally:
            con.close()
        scope = "cohort" if [c for c in coded if c.group != facet] else "release"
        return JSONResponse(
            {
                "facet": facet,
                prefix_name: prefix,
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
