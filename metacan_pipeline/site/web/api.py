"""The JSON API's endpoints, a mixin of :class:`.app.Site`: what each route of
:data:`.openapi.API_ROUTES` answers, and the wrapper every API route goes through (:meth:`ApiEndpoints.api`: strict
parameter names, the ETag and a 304 on a match, cache headers, JSON errors in English).

The methods read the host's ``info`` (the release), ``row_cap``, ``envs`` (templates), ``summary``, ``_record`` and
``export`` (:class:`.app.Site`).
"""

from __future__ import annotations

import json
from functools import partial
from urllib.parse import urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from ...i18n import DEFAULT_LOCALE
from ..query.cohort import Cohort, parse_filters, parse_request
from ..query.params import FILTERS, CohortError, single_values
from . import languages
from .middleware import NO_STORE, SECURITY_HEADERS, cache_headers, etag, not_modified
from .openapi import API_ROUTES, ApiRoute, openapi_document, response_text, schema_text


class ApiEndpoints:
    """The API routes' endpoints (module docstring)."""

    def api(self, route: ApiRoute):
        """An API endpoint: strict parameter names, the ETag (304 on a match), cache headers, JSON errors."""
        fn = getattr(self, route.endpoint)
        #: an answer that depends on more than the release names it in ``<endpoint>_etag()`` (``api_recent``)
        extra = getattr(self, f"{route.endpoint}_etag", None)

        def endpoint(request: Request) -> Response:
            tag = etag(request, self.info.release_id + (f"+{extra()}" if extra else ""), self.row_cap)
            try:
                single_values(request.query_params.multi_items(), route.query)
                if not_modified(request, tag):
                    return Response(status_code=304, headers=cache_headers(tag))
                response = fn(request)
            except CohortError as exc:
                return api_error(400, str(exc))
            if response.status_code == 200:
                response.headers.update(cache_headers(tag))
            else:
                response.headers.update(NO_STORE)
            return response

        return endpoint

    def api_index(self, request: Request) -> Response:
        return JSONResponse(
            {
                "release_id": self.info.release_id,
                "classifier_versions": list(self.info.classifier_versions),
                "n_works": self.info.n_works,
                "endpoints": [r.path for r in API_ROUTES],
                "parameters": list(FILTERS),
                "openapi": "/api/v1/openapi.json",
            }
        )

    def api_works(self, request: Request) -> Response:
        cohort, listing = parse_request(request.query_params.multi_items(), self.info)
        s = self.summary(cohort, listing)
        next_url = None
        if s["next"]:
            next_url = url_with(
                "/api/v1/works", {**cohort.params(), "sort": listing.sort, "limit": listing.limit, "after": s["next"]}
            )
        body = _api_head(self, cohort, s) | {
            "works": [_work_item(r) for r in s["works"]],
            "next": s["next"],
            "next_url": next_url,
        }
        return JSONResponse(body)

    def api_count(self, request: Request) -> Response:
        values = single_values(request.query_params.multi_items(), FILTERS)
        cohort = parse_filters(values, self.info)
        s = self.summary(cohort)
        return JSONResponse(_api_head(self, cohort, s) | {"facets": s["facets"]})

    def api_work(self, request: Request) -> Response:
        try:
            record_json, path = self._record(request.path_params["id"])
        except HTTPException as exc:
            return api_error(404, str(exc.detail))
        return JSONResponse({"release_id": self.info.release_id, "page_path": path, "record": json.loads(record_json)})

    def api_export(self, request: Request) -> Response:
        return self.export(request)

    def api_saved(self, request: Request) -> Response:
        found = self.store.get(request.path_params["hash"])
        if found is None:
            return api_error(404, "no saved cohort of that hash on this site")
        return JSONResponse(
            {"query_hash": request.path_params["hash"], **found, "served_release_id": self.info.release_id}
        )

    def api_openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document(self.info))

    def api_docs(self, request: Request) -> Response:
        base = languages.site_base(request)
        links = [{"hreflang": h, "href": base + "/api/v1/docs"} for h in ("en", "x-default")]
        doc = openapi_document(self.info)
        template = self.envs[DEFAULT_LOCALE].get_template("api_docs.html.j2")
        html = template.render(
            doc=doc, schema_text=schema_text, response_text=partial(response_text, doc), alternates=links
        )
        return HTMLResponse(html, headers=SECURITY_HEADERS)


def _work_item(row: dict) -> dict:
    """A listed work for the API: what the page lists, with source and status on every category."""
    keep = (
        "id", "title", "year", "venue", "cited_by", "language", "type", "page_path", "classification_kind",
        "release_layer", "retraction_state", "cascade_decision",
    )  # fmt: skip
    return {
        **{k: row[k] for k in keep},
        "direct_labels": row["labels"],
        "classifier": {
            "model_version": row["model_version"],
            "prediction_status": row["prediction_status"],
            "decisions": row["decisions"],
        },
        "machine_scores_validation_status": row["validation_status"],
    }


def _api_head(site: ApiEndpoints, cohort: Cohort, s: dict) -> dict:
    return {
        "query_hash": s["query_hash"],
        "query_url": f"/q/{s['query_hash']}",
        "release_id": site.info.release_id,
        "classifier_version": cohort.classifier_version,
        "filters": cohort.filters,
        "count": s["count"],
        "coverage": s["coverage"],
        "coverage_sentence": s["coverage_sentence"],
        "did_you_mean": s["did_you_mean"],
    }


def api_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status, headers=NO_STORE)


def url_with(path: str, params: dict) -> str:
    """``path`` with ``params`` as its query string (none when empty)."""
    return path + ("?" + urlencode(params) if params else "")
