"""The JSON API's routes, and its OpenAPI 3.1 document generated from them.

:data:`API_ROUTES` lists every route under ``/api/v1/`` once: its path, the :class:`~.app.Site` method that answers
it, what it answers, its query parameters (names of :data:`..query.params.PARAMS`, or of :data:`EXTRA_PARAMS`) and path
parameters. The app's routes and the API index are built from it, and :func:`openapi_document` describes every
parameter from its :class:`~.params.Param` (type, bounds, vocabulary, default, meaning), with the served release's
own vocabularies for teachers, classifier versions and score arms, so the document cannot drift from the parser.
``/api/v1/openapi.json`` serves the document; ``/api/v1/docs`` renders it as one HTML page (no script).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ... import __version__
from ..build.release import ReleaseInfo
from ..query.params import FILTERS, LISTING, PARAMS, Param
from .dossier import DOSSIER_PARAMS, DOSSIER_QUERY
from .export import FORMATS
from .middleware import API_MAX_AGE
from .people import NETWORK_PARAMS, NETWORK_QUERY, PEOPLE_SUGGEST_PARAMS
from .recent import PAGE_PARAM as RECENT_PAGE
from .score_api import MAX_WORKS, request_schema
from .typeahead import COHORT_FILTERS, SUGGEST_PARAMS, TYPEAHEAD_FACETS, TYPEAHEAD_PARAMS

EXTRA_PARAMS = {
    "format": Param(
        "format",
        "choice",
        "The export's format (CSV, JSON Lines, Parquet, or references: RIS, BibTeX).",
        choices=tuple(FORMATS),
        default="csv",
    ),
    "meta": Param(
        "meta",
        "choice",
        "1: the export's description (query hash, release, classifier version, filters, cohort count, row cap, "
        "rows, truncated) as JSON, in place of the rows: the sidecar of a CSV download.",
        choices=("0", "1"),
        default="0",
    ),
}


@dataclass(frozen=True)
class ApiRoute:
    """One route of the API (module docstring): GET, or POST with a JSON body."""

    path: str
    endpoint: str
    summary: str
    query: tuple[str, ...] = ()
    path_params: tuple[tuple[str, str, str], ...] = ()  # (name, pattern, meaning)
    media_types: tuple[str, ...] = ("application/json",)
    #: parameters of this route only, by name (they take precedence over PARAMS of the same name)
    own: tuple[Param, ...] = ()
    #: the HTTP method; a POST route takes a JSON body and no query parameter
    method: str = "GET"
    #: a POST route's body: its JSON Schema for the served release
    body: Callable[[ReleaseInfo], dict] | None = None


API_ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute("/api/v1/", "api_index", "The served release (id, classifier versions, works) and the routes."),
    ApiRoute(
        "/api/v1/works",
        "api_works",
        "A page of the cohort's works with the source and status of every category, the count and coverage; "
        "next_url gives the next page.",
        FILTERS + LISTING,
    ),
    ApiRoute(
        "/api/v1/works/{id}",
        "api_work",
        "One work's published record (the JSON its page is rendered from).",
        path_params=(("id", r"^W\d+$", "An OpenAlex work id: W followed by digits."),),
    ),
    ApiRoute("/api/v1/count", "api_count", "The cohort's exact count, coverage and facet counts.", FILTERS),
    ApiRoute(
        "/api/v1/export",
        "api_export",
        "The cohort streamed, every record column, at most the server's row cap (declared in the X-Metacan-* "
        "headers; meta=1 gives that description as JSON instead of the rows).",
        FILTERS + ("format", "meta"),
        media_types=(*FORMATS.values(), "application/json"),  # application/json: the meta=1 description
    ),
    ApiRoute(
        "/api/v1/queries/{hash}",
        "api_saved",
        "A saved cohort: its filters, the release and classifier version it was made on.",
        path_params=(("hash", "^[0-9a-f]{12}$", "The cohort's query hash (12 hex), as in its /q/ link."),),
    ),
    ApiRoute(
        "/api/v1/statistics",
        "api_statistics",
        "The statistics page's figures over the whole release (computed when it was built): the frame by year, "
        "route overlaps, by field and language, the abstract gap, the top venues, funders and institutions "
        "(top_venues, top_funders, top_institutions: works, labelled works, works without an abstract), the abstract "
        "gap by work type (abstract_gap_by_type), labelled works by year and by language (labelled_by_year, "
        "labelled_by_language: works, labelled, classified), direct labels by teacher, category and study "
        "design with their source and status, classifier decisions by category, teacher pairs, and the pipeline's "
        "prevalence rows (design-based 95% CI, classify-and-count, screener-swap range) per category and per estimand "
        "of the protocol (column estimand), and each estimand's definition (estimands).",
    ),
    ApiRoute(
        "/api/v1/facets/{facet}",
        "api_facet_values",
        "Typeahead: the facet's values beginning with q (any case), most works first, counted under the cohort's "
        "filters (the facet's own filter and the text query left out; none: the whole release).",
        ("q", "limit", *COHORT_FILTERS),
        path_params=(("facet", "^(" + "|".join(TYPEAHEAD_FACETS) + ")$", "The facet to complete."),),
        own=TYPEAHEAD_PARAMS,
    ),
    ApiRoute(
        "/api/v1/suggest",
        "api_suggest",
        "Suggestions: the values of a text filter (facet) whose folded form (case and accents ignored) begins with "
        "prefix, each in its most frequent spelling, with the works the filter with that value would select, most "
        "first, counted under the cohort's filters (the facet's own filter and its exclusion left out; none: the "
        "whole release).",
        ("facet", "prefix", "limit", *FILTERS),
        own=SUGGEST_PARAMS,
    ),
    ApiRoute(
        "/api/v1/dossier",
        "api_dossier",
        "The disagreement dossier: per teacher pair, the cohort's works both labelled and those they disagree on "
        "(by head); a page of those works (pair and head narrow it) with every teacher's verdict and reason, source "
        "and status; next_url gives the next page.",
        DOSSIER_QUERY,
        own=DOSSIER_PARAMS,
    ),
    ApiRoute(
        "/api/v1/authors/{id}",
        "api_author",
        "One author of the release: OpenAlex id, ORCID and name as OpenAlex gives them (never inferred), works in the "
        "release, counts by year and by category (direct labels and classifier decisions with their source and "
        "status), Canadian institutions by year, top Canadian co-authors, and the newest works with the source and "
        "status of every category; works_url lists them all.",
        path_params=(("id", r"^A\d{1,19}$", "An OpenAlex author id: A followed by digits."),),
    ),
    ApiRoute(
        "/api/v1/institutions/{id}",
        "api_institution",
        "One institution of the release: OpenAlex id, ROR, name and country as OpenAlex gives them, works in the "
        "release, counts by year and by category, the Canadian institutions sharing most works with it, and the "
        "newest works with the source and status of every category; works_url lists them all.",
        path_params=(("id", r"^I\d{1,19}$", "An OpenAlex institution id: I followed by digits."),),
    ),
    ApiRoute(
        "/api/v1/people",
        "api_people_suggest",
        "Suggestions for the author and institution_id filters: the release's authors or institutions whose name, or a "
        "word of it, begins with prefix (case and accents ignored), with their OpenAlex id and works in the release, "
        "most first.",
        tuple(p.name for p in PEOPLE_SUGGEST_PARAMS),
        own=PEOPLE_SUGGEST_PARAMS,
    ),
    ApiRoute(
        "/api/v1/network",
        "api_network",
        "The cohort's co-authorship network among Canadian authors (kind=authors) or Canadian institutions "
        "(kind=institutions): the nodes (at most nodes, most works in the cohort first; candidates: how many the cohort "
        "holds) and the edges between them, weighted by the works they share.",
        NETWORK_QUERY,
        own=NETWORK_PARAMS,
    ),
    ApiRoute(
        "/api/v1/score",
        "api_score",
        f"Scores a batch of at most {MAX_WORKS:,} works (JSON body) with the student model version the release names, "
        "as `metacan score` does: per work its id, per source and binary head the score and its percentile within "
        "the frame, per categorical head the most probable class and its probability, model_version and "
        "validation_status (machine_predicted_unvalidated: scores rank, they assert nothing); refused works are "
        "listed in rejected with their index and reason. 413 over the bound.",
        method="POST",
        body=request_schema,
    ),
    ApiRoute(
        "/api/v1/recent",
        "api_recent",
        "The rolling layer: the release's works that arrived after the newest frozen release, newest updated_date "
        "first, 100 a page, each with the input it arrived through, its direct labels and the classifier categories "
        "it may show (a rolling work shows none until that classifier version passes human validation); and the "
        "OpenAlex API refresh's sync status (every window, its dates, works harvested and added, the windows that did "
        "not complete).",
        ("page",),
        own=(RECENT_PAGE,),
    ),
    ApiRoute("/api/v1/openapi.json", "api_openapi", "This document (OpenAPI 3.1)."),
    ApiRoute("/api/v1/docs", "api_docs", "This API described for people (HTML).", media_types=("text/html",)),
)

DESCRIPTION = (
    "Read-only JSON API of the metacan evidence browser over one release database. Parameters are strict: an "
    "unknown or repeated parameter, a value outside its vocabulary or bounds, or contradictory filters answer 400 "
    "with one sentence in error.message; an empty value is an unset parameter. The API, its error sentences and "
    "this document are in English only (the HTML pages are also in French, under /fr/). Every answer may be read "
    "from any origin (CORS, GET only: POST /api/v1/score, which scores a batch of works and stores nothing, "
    "answers scripts and this site's own pages). A release-bound answer carries an ETag (the release id, the path and the "
    f"sorted parameters) and Cache-Control: public, max-age={API_MAX_AGE}; send it back in If-None-Match for a "
    "304; errors carry Cache-Control: no-store. Each client address has a token bucket (the server's setting "
    "METACAN_SITE_RATE_LIMIT); an empty bucket answers 429 with Retry-After in seconds."
)


def _parameter(param: Param, release: ReleaseInfo) -> dict:
    return {
        "name": param.name,
        "in": "query",
        "required": param.required,
        "description": param.doc,
        "schema": param.schema(release),
    }


def _operation(route: ApiRoute, release: ReleaseInfo) -> dict:
    own = {p.name: p for p in route.own}
    params = [_parameter(own.get(n) or PARAMS.get(n) or EXTRA_PARAMS[n], release) for n in route.query]
    params += [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": doc,
            "schema": {"type": "string", "pattern": pattern},
        }
        for name, pattern, doc in route.path_params
    ]
    ok_schema = {"$ref": "#/components/schemas/Object"}
    content = {m: {"schema": ok_schema if m == "application/json" else {"type": "string"}} for m in route.media_types}
    if route.method == "POST":
        responses = {
            "200": {"description": route.summary, "content": content},
            "400": {"$ref": "#/components/responses/Refused"},
            "413": _error("Too large: a body over the byte limit.", "Cache-Control"),
            "429": {"$ref": "#/components/responses/TooManyRequests"},
            "503": _error("No usable model file for the version on this server.", "Cache-Control"),
        }
        operation = {
            "operationId": route.endpoint,
            "summary": route.summary,
            "parameters": params,
            "requestBody": {"required": True, "content": {"application/json": {"schema": route.body(release)}}},
            "responses": responses,
        }
        return {"post": operation}
    responses = {
        "200": {"description": route.summary, "headers": _header_refs("ETag", "Cache-Control"), "content": content},
        "304": {
            "description": "Not modified: the If-None-Match ETag is this answer's.",
            "headers": _header_refs("ETag"),
        },
    }
    if route.query:
        responses["400"] = {"$ref": "#/components/responses/Refused"}
    if route.path_params:
        responses["404"] = {"$ref": "#/components/responses/NotFound"}
    responses["429"] = {"$ref": "#/components/responses/TooManyRequests"}
    operation = {"operationId": route.endpoint, "summary": route.summary, "parameters": params, "responses": responses}
    return {"get": operation}


def _header_refs(*names: str) -> dict:
    return {n: {"$ref": f"#/components/headers/{n}"} for n in names}


def _error(description: str, *headers: str) -> dict:
    out = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    return out | ({"headers": _header_refs(*headers)} if headers else {})


def openapi_document(release: ReleaseInfo) -> dict:
    """The OpenAPI 3.1 document of :data:`API_ROUTES` over ``release`` (module docstring)."""
    error = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["status", "message"],
                "properties": {"status": {"type": "integer"}, "message": {"type": "string"}},
            }
        },
    }
    headers = {
        "ETag": {"description": "Validator of a release-bound answer.", "schema": {"type": "string"}},
        "Cache-Control": {
            "description": f"public, max-age={API_MAX_AGE}; no-store on errors.",
            "schema": {"type": "string"},
        },
        "Retry-After": {
            "description": "Seconds until the client's bucket holds a token.",
            "schema": {"type": "integer"},
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "metacan evidence browser API",
            "version": __version__,
            "description": DESCRIPTION + f" Served release: {release.release_id}.",
        },
        "paths": {r.path: _operation(r, release) for r in API_ROUTES},
        "components": {
            "schemas": {"Error": error, "Object": {"type": "object"}},
            "headers": headers,
            "responses": {
                "Refused": _error("Refused parameters: error.message says why, in one sentence.", "Cache-Control"),
                "NotFound": _error("No such work or saved cohort.", "Cache-Control"),
                "TooManyRequests": _error("The client's bucket is empty.", "Retry-After", "Cache-Control"),
            },
        },
    }


def schema_text(schema: dict) -> str:
    """A parameter's schema in one line for the HTML page: type, allowed values or bounds, default."""
    parts = [schema.get("type", "string")]
    if "enum" in schema:
        values = [str(v) for v in schema["enum"] if v != ""]  # "": an optional parameter left empty is unset
        parts.append("one of " + ", ".join(values) if values else "none in this release")
    if "minimum" in schema:
        parts.append(f"{schema['minimum']} to {schema['maximum']}")
    if "maxLength" in schema:
        parts.append(f"at most {schema['maxLength']} characters")
    if "pattern" in schema:
        parts.append(f"matching {schema['pattern']}")
    if "default" in schema:
        parts.append(f"default {schema['default']}")
    return "; ".join(parts)


def response_text(doc: dict, response: dict) -> str:
    """A response's description (following a ``$ref`` into ``components``) for the HTML page."""
    ref = response.get("$ref")
    if ref:
        response = doc["components"]["responses"][ref.rsplit("/", 1)[1]]
    return response["description"]
