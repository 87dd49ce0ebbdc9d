"""The served evidence browser (issue 15): a Starlette ASGI app over the current release database.

Pages are server-rendered (Jinja2, autoescape) and need no JavaScript: the cohort builder ``/`` (a GET form,
exact count, facet counts as links, a page of works with the source and status of every category shown, a
next-page link), ``/q/<12 hex>`` (a saved cohort, re-counted, with a citation sentence naming the release),
the work page at the static site's own path ``/works/<model_version>/<id>.html`` (the same template,
:func:`metacan_pipeline.publish.pages.render_work`; ``/works/<id>`` redirects there), ``/records/<id>.json``,
and ``/export.csv`` / ``/export.jsonl`` (streamed, capped: :mod:`.export`). The JSON API under ``/api/v1/``:
``works`` (a page), ``works/<id>``, ``count`` (count, facets, coverage), ``export?format=csv|jsonl``,
``queries/<hash>``. Parameters are parsed strictly (:mod:`.cohort`): a refused request is HTTP 400 with one
sentence (an HTML page, or ``{"error": {"status", "message"}}`` under ``/api/``).

:func:`create_app` opens the release read-only when it is called, so a missing or corrupt release database is a
start-up error (:class:`.release.ReleaseUnavailable`, naming the file and the asset ``site_database``).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import __version__
from ..openalex.ids import is_work_id
from ..publish.pages import environment as page_environment
from ..publish.pages import render_work
from ..vocab import CATEGORIES, DOMAINS, GENRES, STUDY_DESIGNS
from . import strings
from .cohort import BOOLEAN_FILTERS, FILTERS, Cohort, CohortError, parse_filters, parse_request, single_values
from .export import FORMATS, csv_chunks, export_headers, export_meta, jsonl_chunks
from .queries import CohortQuery
from .release import Release
from .saved import QueryStore

DEFAULT_ROW_CAP = 100_000
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def site_environment() -> Environment:
    env = Environment(
        loader=PackageLoader("metacan_pipeline.site", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default_for_string=True, default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["category"] = strings.category_name
    env.filters["num"] = lambda n: f"{n:,}"
    env.filters["combine"] = lambda a, b: {**a, **{k: str(v) for k, v in b.items()}}
    return env


class Site:
    """The app's state: the release, the saved cohorts, the templates, the export row cap."""

    def __init__(self, data_dir: str | Path, row_cap: int) -> None:
        self.release = Release(data_dir)
        self.info = self.release.info
        self.store = QueryStore(Path(data_dir).resolve() / "site" / "queries.sqlite")
        self.env, self.page_env = site_environment(), page_environment()
        self.row_cap = row_cap
        ctx = dict(self.info.page_context)
        ctx["constant_heads"] = {tuple(h) for h in ctx.get("constant_heads", [])}
        self.page_context = {**ctx, "rendered_at": "served live from the release database", "page_run_id": "none"}

    def render(self, name: str, status: int = 200, **ctx) -> HTMLResponse:
        html = self.env.get_template(name).render(t=strings.STRINGS, release=self.info, version=__version__, **ctx)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    # ---- helpers -------------------------------------------------------------------------------------------
    def summary(self, cohort: Cohort, listing=None) -> dict:
        with CohortQuery(self.release, cohort) as q:
            out = {"count": q.count(), "coverage": q.coverage(), "facets": q.facets()}
            if listing is not None:
                out["works"], out["next"] = q.page(listing)
        out["coverage_sentence"] = strings.coverage_sentence(out["coverage"], cohort.classifier_version)
        out["query_hash"] = self.store.save(cohort)
        return out

    def html_errors(self, fn):
        def endpoint(request: Request) -> Response:
            try:
                return fn(request)
            except CohortError as exc:
                return self.render("error.html.j2", status=400, message=str(exc))

        return endpoint

    def api_errors(self, fn):
        def endpoint(request: Request) -> Response:
            try:
                return fn(request)
            except CohortError as exc:
                return _api_error(400, str(exc))

        return endpoint

    def home(self, request: Request) -> Response:
        cohort, listing = parse_request(request.query_params.multi_items(), self.info)
        summary = self.summary(cohort, listing)
        params = cohort.params()
        sort_params = {**params, "sort": listing.sort, "limit": str(listing.limit)}
        return self.render(
            "home.html.j2",
            cohort=cohort,
            form=dict(request.query_params),
            listing=listing,
            s=summary,
            params=params,
            url=_url,
            next_url=_url("/", {**sort_params, "after": summary["next"]}) if summary["next"] else None,
            first_url=_url("/", sort_params) if listing.after else None,
            vocab={"category": CATEGORIES, "domain": DOMAINS, "study_design": STUDY_DESIGNS, "genre": GENRES},
            booleans=BOOLEAN_FILTERS,
            query_url=f"/q/{summary['query_hash']}",
        )

    def saved(self, request: Request) -> Response:
        query_hash = request.path_params["query_hash"]
        found = self.store.get(query_hash)
        if found is None:
            raise HTTPException(404, f"no saved cohort {query_hash[:12]!r} on this site")
        params = {k: (repr(v) if isinstance(v, float) else str(v)) for k, v in found["filters"].items()}
        if found["release_id"] != self.info.release_id:
            return self.render("query.html.j2", found=found, query_hash=query_hash, other=True, params=params, url=_url)
        cohort = parse_filters(params, self.info)
        summary = self.summary(cohort)
        link = str(request.url_for("saved", query_hash=query_hash))
        citation = strings.citation_sentence(
            summary["count"], query_hash, self.info.release_id, cohort.classifier_version, link
        )
        return self.render(
            "query.html.j2", found=found, query_hash=query_hash, other=False, params=params, url=_url, s=summary,
            citation=citation, cohort=cohort,
        )  # fmt: skip

    def work_page(self, request: Request) -> Response:
        version, file = request.path_params["version"], request.path_params["file"]
        wid = file.removesuffix(".html")
        record_json, path = self._record(wid)
        if path != f"works/{version}/{file}":
            raise HTTPException(404, f"{wid} is not shown under classifier version {version[:80]!r}; see /{path}")
        html = render_work(self.page_env, json.loads(record_json), None, self.page_context)
        return HTMLResponse(html, headers=SECURITY_HEADERS)

    def work_redirect(self, request: Request) -> Response:
        _, path = self._record(request.path_params["wid"])
        return RedirectResponse("/" + path, status_code=307)

    def record(self, request: Request) -> Response:
        record_json, _ = self._record(request.path_params["file"].removesuffix(".json"))
        return Response(record_json, media_type="application/json", headers={"X-Content-Type-Options": "nosniff"})

    def _record(self, wid: str) -> tuple[str, str]:
        if not is_work_id(wid):
            raise HTTPException(404, f"{wid[:40]!r} is not a work id (W followed by digits)")
        con = self.release.cursor()
        try:
            # by work_key (the id's digits) first: its zone maps find the row; a scan of id took 0.1-0.2 s at 4.3M works
            row = con.execute(
                "SELECT record_json, page_path FROM works WHERE work_key = ? AND id = ?",
                [min(int(wid[1:]), 2**63 - 1), wid],
            ).fetchone()
        finally:
            con.close()
        if row is None:
            raise HTTPException(404, f"{wid} is not in release {self.info.release_id}")
        return row

    def export(self, request: Request, fmt: str | None = None) -> Response:
        values = single_values(request.query_params.multi_items(), FILTERS + (() if fmt else ("format",)))
        fmt = fmt or values.pop("format", "csv")
        if fmt not in FORMATS:
            raise CohortError(f"format {fmt[:20]!r} is not one of {', '.join(FORMATS)}.")
        cohort = parse_filters(values, self.info)
        query = CohortQuery(self.release, cohort)
        try:
            meta = export_meta(query, query.count(), self.row_cap)
        except BaseException:
            query.close()
            raise
        self.store.save(cohort)
        chunks = csv_chunks(query, meta) if fmt == "csv" else jsonl_chunks(query, meta)
        return StreamingResponse(chunks, media_type=FORMATS[fmt], headers=export_headers(meta, fmt))

    def export_csv(self, request: Request) -> Response:
        return self.export(request, "csv")

    def export_jsonl(self, request: Request) -> Response:
        return self.export(request, "jsonl")

    # ---- API ---------------------------------------------------------------------------------------------
    def api_index(self, request: Request) -> Response:
        return JSONResponse(
            {
                "release_id": self.info.release_id,
                "classifier_versions": list(self.info.classifier_versions),
                "n_works": self.info.n_works,
                "endpoints": [
                    "/api/v1/works",
                    "/api/v1/works/{id}",
                    "/api/v1/count",
                    "/api/v1/export",
                    "/api/v1/queries/{hash}",
                ],
                "parameters": list(FILTERS),
            }
        )

    def api_works(self, request: Request) -> Response:
        cohort, listing = parse_request(request.query_params.multi_items(), self.info)
        s = self.summary(cohort, listing)
        next_url = None
        if s["next"]:
            next_url = _url(
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
        wid = request.path_params["wid"]
        try:
            record_json, path = self._record(wid)
        except HTTPException as exc:
            return _api_error(404, exc.detail)
        return JSONResponse({"release_id": self.info.release_id, "page_path": path, "record": json.loads(record_json)})

    def api_export(self, request: Request) -> Response:
        return self.export(request)

    def api_saved(self, request: Request) -> Response:
        found = self.store.get(request.path_params["query_hash"])
        if found is None:
            return _api_error(404, "no saved cohort of that hash on this site")
        return JSONResponse(
            {"query_hash": request.path_params["query_hash"], **found, "served_release_id": self.info.release_id}
        )

    def index_redirect(self, request: Request) -> Response:
        return RedirectResponse("/", status_code=307)

    async def http_error(self, request: Request, exc: HTTPException) -> Response:
        if request.url.path.startswith("/api/"):
            return _api_error(exc.status_code, exc.detail)
        return self.render("error.html.j2", status=exc.status_code, message=exc.detail)


def _url(path: str, params: dict) -> str:
    return path + ("?" + urlencode(params) if params else "")


def _work_item(row: dict) -> dict:
    """A listed work for the API: what the page lists, with source and status on every category."""
    keep = ("id", "title", "year", "venue", "cited_by", "language", "type", "page_path", "classification_kind")
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


def create_app(data_dir: str | Path, row_cap: int = DEFAULT_ROW_CAP) -> Starlette:
    """The ASGI app over the current release under ``data_dir``. Raises :class:`.release.ReleaseUnavailable`."""
    site = Site(data_dir, row_cap)
    html, api = site.html_errors, site.api_errors
    routes = [
        Route("/", html(site.home), name="home"),
        Route("/index.html", site.index_redirect),
        Route("/q/{query_hash}", html(site.saved), name="saved"),
        Route("/works/{wid}", site.work_redirect),
        Route("/works/{version}/{file}", site.work_page),
        Route("/records/{file}", site.record),
        Route("/export.csv", html(site.export_csv)),
        Route("/export.jsonl", html(site.export_jsonl)),
        Route("/api/v1/", site.api_index),
        Route("/api/v1/works", api(site.api_works)),
        Route("/api/v1/works/{wid}", api(site.api_work)),
        Route("/api/v1/count", api(site.api_count)),
        Route("/api/v1/export", api(site.api_export)),
        Route("/api/v1/queries/{query_hash}", site.api_saved),
    ]
    app = Starlette(
        routes=routes, exception_handlers={HTTPException: site.http_error}, middleware=[Middleware(NoSniff)]
    )
    app.state.site = site
    return app


class NoSniff:
    """ASGI middleware: ``X-Content-Type-Options: nosniff`` on every response (exports and JSON carry raw data)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        async def send_nosniff(message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-content-type-options"]
                message = {**message, "headers": [*headers, (b"x-content-type-options", b"nosniff")]}
            await send(message)

        await self.app(scope, receive, send_nosniff if scope["type"] == "http" else send)


def _api_head(site: Site, cohort: Cohort, s: dict) -> dict:
    return {
        "query_hash": s["query_hash"],
        "query_url": f"/q/{s['query_hash']}",
        "release_id": site.info.release_id,
        "classifier_version": cohort.classifier_version,
        "filters": cohort.filters,
        "count": s["count"],
        "coverage": s["coverage"],
        "coverage_sentence": s["coverage_sentence"],
    }


def _api_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status)
