"""The served evidence browser: a Starlette ASGI app over the current release database.

Pages are server-rendered (Jinja2, autoescape) and need no JavaScript: the cohort builder ``/`` (a GET form,
exact count, facet counts as links, a page of works with the source and status of every category shown, a
next-page link), ``/q/<12 hex>`` (a saved cohort, re-counted, with a citation sentence naming the release),
the work page at the static site's own path ``/works/<model_version>/<id>.html`` (the same template,
:func:`metacan_pipeline.publish.pages.render_work`, with the abstract fetched live from OpenAlex for each request and
never stored: :meth:`Site.abstract_of`; or, with ``work_pages="static"``, the English page ``work_pages`` stored,
precompressed or not: :mod:`.static_pages`; ``/works/<id>`` redirects there), ``/records/<id>.json``, the model card of the release's classifier version (``/models/<model_version>``, ``/model``,
and its JSON at ``/models/<model_version>/model_card.json``: :mod:`.model_card`),
and ``/export.csv`` / ``/export.jsonl`` / ``/export.parquet`` / ``/export.ris`` / ``/export.bib`` (streamed, capped:
:mod:`.export`, :mod:`.citations`). Every page is in English and, under
``/fr/``, in French (:mod:`.languages`: hreflang links, the switch, the ``Accept-Language`` redirect of ``/``).

The JSON API under ``/api/v1/`` (:data:`.openapi.API_ROUTES`): ``works`` (a page), ``works/<id>``, ``count`` (count,
facets, coverage), ``export?format=csv|jsonl``, ``queries/<hash>``, ``POST score`` (a bounded batch of works scored by the
student, :mod:`.score_api`), ``openapi.json`` and ``docs``. Parameters are
parsed strictly (:mod:`..query.cohort`): a refused request is HTTP 400 with one sentence (an HTML page in the page's
language, or ``{"error": {"status", "message"}}`` in English under ``/api/``). API answers carry CORS headers, an
ETag and ``Cache-Control`` (a matching ``If-None-Match`` is 304), and each client address has a token bucket
(:mod:`.middleware`); the API's endpoints are :class:`.api.ApiEndpoints`, which :class:`Site` extends.

:func:`create_app` opens the release read-only when it is called, so a missing or corrupt release database is a
start-up error (:class:`..build.release.ReleaseUnavailable`, naming the file and the asset ``site_database``).
"""

from __future__ import annotations

import contextlib
import json
from functools import partial
from http import HTTPStatus
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from ... import __version__, settings
from ...i18n import DEFAULT_LOCALE, LOCALES, N_, Sentence, format_number, language_name, translations
from ...openalex.ids import is_work_id
from ...publish.abstract_cascade import AbstractCascade
from ...publish.abstracts import Abstract, AbstractFetcher, WorkIds
from ...publish.pages import environment as page_environment
from ...publish.pages import qualification_words, render_work
from ...release.release_layers import RELEASE_LAYERS
from ...vocab import CASCADE_DECISIONS, CATEGORIES, DOMAINS, GENRES, RETRACTION_STATES, STUDY_DESIGNS, display_name
from ..build.release import Release
from ..query.cohort import Cohort, parse_filters, parse_request
from ..query.cohort_query import CohortQuery
from ..query.params import BOOLEAN_FILTERS, FILTERS, ID_PATTERNS, PARAMS, CohortError, single_values
from ..query.people import AUTHOR_FACET_MAX, author_facet
from ..query.suggest import did_you_mean, replaced
from ..query.trend import cohort_trend
from ..query.versions import group_versions
from . import guide, languages, strings
from .api import ApiEndpoints, api_error, url_with
from .citations import bibtex_chunks, ris_chunks
from .coding_pages import default_abstracts
from .discovery import DiscoveryEndpoints, cite_as, work_cite_as
from .dossier import DossierEndpoints
from .export import FORMATS, csv_chunks, export_headers, export_meta, jsonl_chunks, parquet_chunks
from .guide import GuideEndpoints, guide_links, link_first_uses
from .icon import favicon
from .middleware import (
    HOME_CSP,
    NO_STORE,
    SECURITY_HEADERS,
    ApiCors,
    ApiErrors,
    NoSniff,
    RateLimit,
    RelativeRedirects,
    client_limiter,
    export_refusal,
)
from .model_card import ModelCardEndpoints
from .openapi import API_ROUTES
from .people import PeopleEndpoints
from .recent import RecentEndpoints
from .saved import QueryStore
from .score_api import ScoreEndpoints
from .static_pages import WORK_PAGE_SOURCES, static_page
from .statistics import StatisticsEndpoints
from .trend_view import trend_figure
from .typeahead import TYPEAHEAD_FACETS, TypeaheadEndpoints

DEFAULT_ROW_CAP = 100_000
SERVER_ERROR = N_(
    "Something went wrong on the server while answering this request; it is logged. Try again, or report the address."
)


def site_environment(locale: str = DEFAULT_LOCALE) -> Environment:
    """The templates of the site's pages in ``locale``: gettext installed (newstyle ``_()``), and the filters that
    show labels, parameter values, category names and counts in that language."""
    env = Environment(
        loader=PackageLoader("metacan_pipeline.site", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default_for_string=True, default=True),
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.i18n"],
    )
    env.install_gettext_translations(translations(locale), newstyle=True)
    env.filters["category"] = partial(strings.category_name, locale=locale)
    env.filters["named"] = partial(strings.vocab_name, locale=locale)
    env.filters["head"] = partial(strings.head_name, locale=locale)
    env.filters["status"] = partial(status_link, locale=locale)
    env.filters["label"] = partial(strings.label, locale=locale)
    env.filters["word"] = partial(strings.value_word, locale=locale)
    env.filters["num"] = partial(format_number, locale=locale)
    env.filters["language"] = partial(language_name, locale=locale)
    env.filters["combine"] = lambda a, b: {**a, **{k: str(v) for k, v in b.items()}}
    env.filters["qualification"] = partial(qualification_words, tr=translations(locale))
    env.globals["category_names"] = {c: strings.category_name(c, locale) for c in CATEGORIES}
    env.globals["names"] = strings.vocab_names(locale)  # {vocabulary: {code: display name}}, for the choices
    env.globals["colon"] = translations(locale).gettext(strings.COLON)
    #: a text box accepts what the server accepts (the parameter's own limit), no more
    env.globals["max_length"] = {name: p.max_length for name, p in PARAMS.items() if p.max_length}
    env.globals["id_patterns"] = ID_PATTERNS  # the id filters' boxes check their ids in the browser too
    return env


#: The text filters the home page offers as a choice of the release's values (the others are text boxes with
#: suggestions).
CHOICE_FILTERS = ("language", "type", "field")


def status_link(status: str | None, locale: str = DEFAULT_LOCALE) -> Markup:
    """A status as pages show it: the code verbatim (statuses ship verbatim, SPEC section 8), linked to its
    explanation on the methods page, with its display name in ``locale`` as the link's title."""
    if not status:
        return Markup("")
    name = display_name("status", status, locale)
    href = f"{languages.PREFIXES[locale]}/methods#{guide.status_anchor(status)}"
    return Markup('<a class="status" href="{}" title="{}"><code>{}</code></a>').format(href, name, status)


def _lang(request: Request) -> str:
    return getattr(request.state, "lang", None) or languages.split_path(request.url.path)[0]


class Site(
    ApiEndpoints,
    StatisticsEndpoints,
    TypeaheadEndpoints,
    DossierEndpoints,
    ModelCardEndpoints,
    ScoreEndpoints,
    DiscoveryEndpoints,
    GuideEndpoints,
    PeopleEndpoints,
    RecentEndpoints,
):
    """The app's state: the release, the saved cohorts, the templates per language, the export row cap."""

    def __init__(
        self,
        data_dir: str | Path,
        row_cap: int,
        abstracts: AbstractCascade | AbstractFetcher | None = None,
        work_pages: str = "live",
    ) -> None:
        self.release = Release(data_dir)
        self.data_dir = Path(data_dir).resolve()
        #: the static site's folder when English work pages are the files work_pages wrote (None: rendered live)
        self.static_site = self.data_dir / "site" if work_pages == "static" else None
        self.abstracts = abstracts
        self.info = self.release.info
        self.store = QueryStore(Path(data_dir).resolve() / "site" / "queries.sqlite")
        self.envs = {lo: site_environment(lo) for lo in LOCALES}
        self.page_envs = {
            lo: page_environment(None if lo == DEFAULT_LOCALE else translations(lo), locale=lo) for lo in LOCALES
        }
        self.row_cap = row_cap
        self.limiter = None
        self._choices: dict[str, list[dict]] | None = None
        ctx = dict(self.info.page_context)
        ctx["constant_heads"] = {tuple(h) for h in ctx.get("constant_heads", [])}
        self.page_context = {
            **ctx,
            "rendered_at": "served live from the release database",
            "page_run_id": "none",
            "report_url": settings.report_url(),
            "dagster_ui": settings.dagster_ui_url(),
            "served": True,
        }

    def choices(self) -> dict[str, list[dict]]:
        """The values the home page offers for each filter of :data:`CHOICE_FILTERS`, with their works in the
        release, most first (``facet_value_counts``: one per folded value, in its most frequent spelling); read once."""
        if self._choices is None:
            con = self.release.cursor()
            try:
                rows = con.execute(
                    "SELECT facet, value, n FROM facet_value_counts WHERE facet IN (SELECT unnest(?::VARCHAR[])) "
                    "AND n > 0 ORDER BY facet, n DESC, value",
                    [list(CHOICE_FILTERS)],
                ).fetchall()
            finally:
                con.close()
            self._choices = {name: [] for name in CHOICE_FILTERS}
            for facet, value, n in rows:
                self._choices[facet].append({"value": value, "count": n})
        return self._choices

    def render(self, request: Request, name: str, status: int = 200, **ctx) -> HTMLResponse:
        """A page of the site in the request's language, the first use of each glossary term in its ``<main>``
        linked to the glossary (:func:`.guide.link_first_uses`; not on the glossary itself)."""
        lang = _lang(request)
        html = (
            self.envs[lang]
            .get_template(name)
            .render(
                release=self.info,
                version=__version__,
                lang=lang,
                prefix=languages.PREFIXES[lang],
                alternates=languages.alternates(request),
                switch=languages.switch(request, lang),
                **ctx,
            )
        )
        if name != "glossary.html.j2":
            html = link_first_uses(html, lang)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    def error_page(self, request: Request, status: int, message: str) -> HTMLResponse:
        tr = translations(_lang(request))
        if isinstance(message, Sentence):
            message = message.translate(tr)
        elif status in strings.STATUS_PHRASES and message == HTTPStatus(status).phrase:
            message = tr.gettext(strings.STATUS_PHRASES[status])
        heading = tr.gettext(strings.STATUS_PHRASES[400])
        prefix = languages.PREFIXES[_lang(request)]
        back = prefix + "/"
        # a refused address longer than any of the site's links to the language homes, not to its twins
        request.state.no_twin = len(request.url.path) + len(request.url.query) > languages.MAX_TWIN
        if status == 400 and request.url.path in (back, *(f"/export.{f}" for f in FORMATS)):  # the cohort builder's
            back = url_with(back, self.usable_params(request.query_params.multi_items()))
        return self.render(request, "error.html.j2", status=status, heading=heading, message=message, back=back)

    def usable_params(self, items) -> dict[str, str]:
        """The most of a refused request's parameters the cohort builder accepts together: a parameter is kept when
        it parses with those kept so far, else a pair is, when the two need each other (a classifier mode and its
        category); passes until nothing is added."""
        kept: dict[str, str] = {}
        items = list(items)
        repeated = {k for k in dict(items) if sum(1 for n, v in items if n == k and v) > 1}  # refused: which one?
        pending = [(k, v) for k, v in dict(items).items() if v and k != "after" and k not in repeated]

        def accepts(extra: list[tuple[str, str]]) -> bool:
            try:
                parse_request([*kept.items(), *extra], self.info)
            except CohortError:
                return False
            return True

        while True:
            left = [p for p in pending if p[0] not in kept]
            found = next((p for p in left if accepts([p])), None)
            if found is not None:
                kept[found[0]] = found[1]
                continue
            pairs = ((a, b) for i, a in enumerate(left) for b in left[i + 1 :])
            pair = next((ab for ab in pairs if accepts(list(ab))), None)
            if pair is None:
                return {k: v for k, v in pending if k in kept}  # in the request's order
            kept.update(pair)

    # ---- wrappers ------------------------------------------------------------------------------------------
    def html(self, fn, lang: str):
        """An HTML endpoint in ``lang``: a refused request is the error page, in that language."""

        def endpoint(request: Request) -> Response:
            request.state.lang = lang
            try:
                return fn(request)
            except CohortError as exc:
                return self.error_page(request, 400, exc.sentence)

        return endpoint

    # ---- helpers -------------------------------------------------------------------------------------------
    def summary(self, cohort: Cohort, listing=None, lang: str = DEFAULT_LOCALE, grouped: bool = False) -> dict:
        """The cohort's count, coverage, facets and (with ``listing``) a page of its works; ``grouped`` (the home
        page): the page's works with their other OpenAlex ids, each work once
        (:func:`..query.versions.group_versions`), and the cohort's trend (:func:`..query.trend.cohort_trend`)."""
        with CohortQuery(self.release, cohort) as q:
            out = {"count": q.count(), "coverage": q.coverage(), "facets": q.facets()}
            out["facets"]["author"] = author_facet(q)
            if listing is not None:
                out["works"], out["next"] = q.page(listing)
                if grouped:
                    out["works"] = group_versions(q.con, out["works"])
                    out["trend"] = cohort_trend(q)
            # no work: the nearest values of the release to each text filter value no work holds
            out["did_you_mean"] = did_you_mean(q.con, cohort) if out["count"] == 0 else {}
        out["coverage_sentence"] = strings.coverage_sentence(out["coverage"], cohort.classifier_version, lang)
        out["query_hash"] = self.store.save(cohort)
        return out

    # ---- pages ---------------------------------------------------------------------------------------------
    def home(self, request: Request) -> Response:
        lang = _lang(request)
        if lang == DEFAULT_LOCALE and (redirect := languages.home_redirect(request)) is not None:
            return redirect
        prefix = languages.PREFIXES[lang]
        items, notices = forgive_form(request.query_params.multi_items())
        cohort, listing = parse_request(items, self.info)
        summary = self.summary(cohort, listing, lang, grouped=True)
        params = cohort.params()
        sort_params = {**params, "sort": listing.sort, "limit": str(listing.limit)}
        response = self.render(
            request,
            "home.html.j2",
            cohort=cohort,
            form=dict(items),
            notices=[translations(lang).gettext(n) for n in notices],
            listing=listing,
            s=summary,
            params=params,
            url=url_with,
            next_url=url_with(prefix + "/", {**sort_params, "after": summary["next"]}) if summary["next"] else None,
            first_url=url_with(prefix + "/", sort_params) if listing.after else None,
            vocab={
                "category": CATEGORIES,
                "domain": DOMAINS,
                "study_design": STUDY_DESIGNS,
                "genre": GENRES,
                "retraction_state": RETRACTION_STATES,
                "cascade_decision": CASCADE_DECISIONS,
            },
            booleans=BOOLEAN_FILTERS,
            author_facet_max=AUTHOR_FACET_MAX,
            release_layers=RELEASE_LAYERS,
            query_url=f"{prefix}/q/{summary['query_hash']}",
            typeahead=TYPEAHEAD_FACETS,
            choices=self.choices(),
            replaced=partial(replaced, cohort),
            trend=trend_figure(summary["trend"], summary["count"], lang),
        )
        response.headers["Content-Security-Policy"] = HOME_CSP  # the typeahead script, from this site only
        if lang == DEFAULT_LOCALE:
            response.headers["Vary"] = languages.HOME_VARY
        return response

    def saved(self, request: Request) -> Response:
        lang = _lang(request)
        query_hash = request.path_params["query_hash"]
        found = self.store.get(query_hash)
        if found is None:
            raise HTTPException(404, N_("no saved cohort %(hash)r on this site", hash=query_hash[:12]))
        params = {k: (repr(v) if isinstance(v, float) else str(v)) for k, v in found["filters"].items()}
        ctx = {"found": found, "query_hash": query_hash, "params": params, "url": url_with}
        if found["release_id"] != self.info.release_id:
            return self.render(request, "query.html.j2", other=True, **ctx)
        cohort = parse_filters(params, self.info)
        summary = self.summary(cohort, lang=lang)
        link = languages.site_base(request) + request.app.url_path_for(f"saved_{lang}", query_hash=query_hash)
        citation = strings.citation_sentence(
            summary["count"], query_hash, self.info.release_id, cohort.classifier_version, link, lang
        )
        response = self.render(
            request, "query.html.j2", other=False, s=summary, citation=citation, cohort=cohort, **ctx
        )
        response.headers.update(cite_as(link))
        return response

    def work_page(self, request: Request) -> Response:
        lang = _lang(request)
        version, file = request.path_params["version"], request.path_params["file"]
        wid = file.removesuffix(".html")
        record_json, path = self._record(wid)
        if path != f"works/{version}/{file}":
            raise HTTPException(
                404,
                N_(
                    "%(id)s is not shown under classifier version %(version)r; see %(path)s",
                    id=wid,
                    version=version[:80],
                    path=f"{languages.PREFIXES[lang]}/{path}",
                ),
            )
        if self.static_site is not None and lang == DEFAULT_LOCALE:
            headers = {**SECURITY_HEADERS, **work_cite_as(json.loads(record_json))}
            stored = static_page(self.static_site, path, request.headers.get("accept-encoding"), headers)
            if stored is not None:
                return stored
        ctx = {
            **self.page_context,
            "lang": lang,
            "alternates": languages.alternates(request),
            "switch": languages.switch(request, lang),
            "explore": languages.PREFIXES[lang],
            "guide": guide_links(lang),
        }
        if lang != DEFAULT_LOCALE:
            ctx["rendered_at"] = translations(lang).gettext(N_("served live from the release database"))
        record = json.loads(record_json)
        html = link_first_uses(
            render_work(self.page_envs[lang], record, self.abstract_of(record), ctx), lang, "article"
        )
        return HTMLResponse(html, headers={**SECURITY_HEADERS, **work_cite_as(record)})

    def abstract_of(self, record: dict) -> Abstract | None:
        """The abstract a served work page shows, fetched live through the abstract cascade (SPEC sections 2 and 9:
        never stored; the answers live in its bounded in-memory cache only): OpenAlex is not asked again for a work
        the frame saw without an abstract (the later sources are, by its DOI); ``failed`` when no source gave one and
        one did not answer within its short timeouts (the page says the abstract is unavailable), None when the site
        has no fetcher. A plain OpenAlex fetcher (:class:`.abstracts.AbstractFetcher`) answers ``none`` without a
        request for such a work."""
        if self.abstracts is None:
            return None
        wid = record["id"]
        if not record.get("has_abstract") and not isinstance(self.abstracts, AbstractCascade):
            return Abstract(wid, "none", None, None, None)
        ids = WorkIds(wid, record.get("doi") or None, None, bool(record.get("has_abstract")))
        return self.abstracts.fetch([ids])[wid]

    def work_redirect(self, request: Request) -> Response:
        wid = request.path_params["wid"]
        if is_work_id(wid.upper()) and (to := languages.canonical_redirect(request, wid, wid.upper())) is not None:
            return to
        _, path = self._record(wid)
        return RedirectResponse(f"{languages.PREFIXES[_lang(request)]}/{path}", status_code=307)

    def record(self, request: Request) -> Response:
        file = request.path_params["file"]
        wid = file[:-5] if file.lower().endswith(".json") else file
        if is_work_id(wid.upper()) and (to := languages.canonical_redirect(request, file, wid.upper() + ".json")):
            return to
        record_json, _ = self._record(wid)
        return Response(record_json, media_type="application/json", headers={"X-Content-Type-Options": "nosniff"})

    def _record(self, wid: str) -> tuple[str, str]:
        """``(record JSON, page path)`` of a work id, its letter in either case; 404 naming the id otherwise."""
        wid = wid.upper() if is_work_id(wid.upper()) else wid
        if not is_work_id(wid):
            raise HTTPException(404, N_("%(id)r is not a work id (W followed by digits)", id=wid[:40]))
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
            raise HTTPException(404, N_("%(id)s is not in release %(release)s", id=wid, release=self.info.release_id))
        return row

    def export(self, request: Request, fmt: str | None = None) -> Response:
        if (refused := export_refusal(self.limiter, request)) is not None:  # the API's are limited by RateLimit
            response = self.error_page(request, 429, refused[0])
            response.headers.update({**NO_STORE, "Retry-After": refused[1]})
            return response
        values = single_values(request.query_params.multi_items(), FILTERS + ("meta",) + (() if fmt else ("format",)))
        fmt = fmt or values.pop("format", "csv")
        if fmt not in FORMATS:
            raise CohortError(
                N_("format %(format)r is not one of %(formats)s.", format=fmt[:20], formats=", ".join(FORMATS))
            )
        sidecar = values.pop("meta", "0")
        if sidecar not in ("0", "1"):
            raise CohortError(N_("meta %(meta)r is not 0 or 1.", meta=sidecar[:20]))
        cohort = parse_filters(values, self.info)
        query = CohortQuery(self.release, cohort)
        try:
            meta = export_meta(query, query.count(), self.row_cap)
        except BaseException:
            query.close()
            raise
        self.store.save(cohort)
        if sidecar == "1":
            query.close()
            headers = {k: v for k, v in export_headers(meta, fmt).items() if k != "Content-Disposition"}
            return JSONResponse({"_export": meta}, headers=headers)
        writers = {
            "csv": csv_chunks,
            "jsonl": jsonl_chunks,
            "parquet": parquet_chunks,
            "ris": ris_chunks,
            "bib": bibtex_chunks,
        }
        chunks = writers[fmt](query, meta)
        return StreamingResponse(chunks, media_type=FORMATS[fmt], headers=export_headers(meta, fmt))

    def export_csv(self, request: Request) -> Response:
        return self.export(request, "csv")

    def export_jsonl(self, request: Request) -> Response:
        return self.export(request, "jsonl")

    def export_parquet(self, request: Request) -> Response:
        return self.export(request, "parquet")

    def export_ris(self, request: Request) -> Response:
        return self.export(request, "ris")

    def export_bibtex(self, request: Request) -> Response:
        return self.export(request, "bib")

    def index_redirect(self, request: Request) -> Response:
        return RedirectResponse(f"{languages.PREFIXES[_lang(request)]}/", status_code=307)

    # ---- API ---------------------------------------------------------------------------------------------

    def server_error(self, request: Request, exc: Exception) -> Response:
        """An unexpected error outside the API (the API answers JSON, :class:`.middleware.ApiErrors`): the site's
        error page with status 500 in the page's language (the traceback goes to the server's log, never the page),
        or plain text when even that page cannot be drawn."""
        try:
            return self.error_page(request, 500, translations(_lang(request)).gettext(SERVER_ERROR))
        except Exception:
            return PlainTextResponse("Internal Server Error", status_code=500)

    async def http_error(self, request: Request, exc: HTTPException) -> Response:
        """The error as JSON under ``/api/``, else as a page; the exception's headers kept (a 405's ``Allow``,
        which RFC 9110 requires)."""
        if request.url.path.startswith("/api/"):
            response = api_error(exc.status_code, str(exc.detail))
        else:
            response = self.error_page(request, exc.status_code, exc.detail)
        response.headers.update(exc.headers or {})
        return response


def forgive_form(items: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """The cohort form's request made answerable where the form itself offers a combination the query language
    refuses (the API stays strict): relevance sorting without search words sorts by year; a classifier mode or
    version without a category is left out; a category without a mode shows candidate decisions. Returns the
    items and the msgid of one sentence per change, which the page shows."""
    given = {k for k, v in items if v}
    notices: list[str] = []
    out = list(items)
    if ("sort", "relevance") in out and "q" not in given:
        out.remove(("sort", "relevance"))
        notices.append(N_("Relevance sorting needs search words: the works are sorted by year (newest first)."))
    if "classifier_category" not in given and given & {"classifier_mode", "classifier_version"}:
        out = [(k, v) for k, v in out if k not in ("classifier_mode", "classifier_version")]
        notices.append(N_("A classifier mode or version qualifies a category: choose a category to use it."))
    elif "classifier_category" in given and "classifier_mode" not in given:
        out = [(k, v) for k, v in out if k != "classifier_mode"] + [("classifier_mode", "candidate")]
        notices.append(
            N_("Shown: candidate decisions (either side called it). Choose consensus for the works both called.")
        )
    return out, notices


def page_routes(site: Site, lang: str) -> list[Route]:
    """The HTML routes (and the record files their pages link to) of one language, under its prefix."""
    p, html = languages.PREFIXES[lang], partial(site.html, lang=lang)
    return [
        Route(p + "/", html(site.home), name=f"home_{lang}"),
        Route(p + "/index.html", html(site.index_redirect)),
        Route(p + "/q/{query_hash}", html(site.saved), name=f"saved_{lang}"),
        Route(p + "/works/{wid}", html(site.work_redirect)),
        Route(p + "/works/{version}/{file}", html(site.work_page)),
        Route(p + "/records/{file}", site.record),
        Route(p + "/statistics", html(site.statistics_page), name=f"statistics_{lang}"),
        Route(p + "/dossier", html(site.dossier_page), name=f"dossier_{lang}"),
        Route(p + "/model", html(site.model_redirect)),
        Route(p + "/models/{version}", html(site.model_card_page), name=f"model_card_{lang}"),
        Route(p + "/about", html(site.about_page), name=f"about_{lang}"),
        Route(p + "/methods", html(site.methods_page), name=f"methods_{lang}"),
        Route(p + "/glossary", html(site.glossary_page), name=f"glossary_{lang}"),
        Route(p + "/authors/{author_id}", html(site.author_page), name=f"author_{lang}"),
        Route(p + "/institutions/{institution_id}", html(site.institution_page), name=f"institution_{lang}"),
        Route(p + "/network", html(site.network_page), name=f"network_{lang}"),
        Route(p + "/recent", html(site.recent_page), name=f"recent_{lang}"),
    ]


def create_app(
    data_dir: str | Path,
    row_cap: int = DEFAULT_ROW_CAP,
    rate_limit: str | None = None,
    abstracts: AbstractCascade | AbstractFetcher | None = None,
    work_pages: str = "live",
) -> Starlette:
    """The ASGI app over the current release under ``data_dir``. Raises :class:`..build.release.ReleaseUnavailable`.

    ``rate_limit``: the per-client token bucket of the API in throttled-py's syntax (``120/m burst 60``; ``off``:
    none); None reads :func:`metacan_pipeline.settings.site_rate_limit`. A value that is not a rate is a
    ValueError naming it. ``abstracts``: the live abstracts of the work pages (None: the abstract cascade with short
    timeouts, :func:`.coding_pages.default_abstracts`); the app's shutdown closes it.

    The audit study's coding pages are not served here (``/coding/`` is a 404): they run on their own server,
    :func:`.coding_app.create_coding_app`, so a coder is never one address away from the machine's outputs.

    ``work_pages``: ``live`` renders every work page from the release database on request; ``static`` answers an
    English work page with the file ``work_pages`` wrote under ``<data_dir>/site`` (plain, or precompressed and sent
    with ``Content-Encoding: gzip`` to a client that accepts it: :mod:`.static_pages`), rendering live a page with no
    file and every French page. Another value is a ValueError naming it."""
    if work_pages not in WORK_PAGE_SOURCES:
        raise ValueError(f"work_pages={work_pages!r} must be one of {', '.join(WORK_PAGE_SOURCES)}")
    site_url = settings.site_url()  # the address its links carry (ValueError naming the variable when malformed)
    source = settings.SITE_RATE_LIMIT_ENV if rate_limit is None else "rate_limit"
    limiter = client_limiter(settings.site_rate_limit() if rate_limit is None else rate_limit, source)
    fetcher = abstracts or default_abstracts()
    site = Site(data_dir, row_cap, fetcher, work_pages)
    site.limiter = limiter  # the API's bucket; the exports outside /api/ take from it too
    routes = [r for lang in LOCALES for r in page_routes(site, lang)]
    routes += [
        Route("/language/{lang}", site.html(languages.choose, DEFAULT_LOCALE)),
        Route("/export.csv", site.html(site.export_csv, DEFAULT_LOCALE)),
        Route("/export.jsonl", site.html(site.export_jsonl, DEFAULT_LOCALE)),
        Route("/export.parquet", site.html(site.export_parquet, DEFAULT_LOCALE)),
        Route("/export.ris", site.html(site.export_ris, DEFAULT_LOCALE)),
        Route("/export.bib", site.html(site.export_bibtex, DEFAULT_LOCALE)),
        Route("/network.graphml", site.html(site.network_graphml, DEFAULT_LOCALE)),
        Route("/network.csv", site.html(site.network_csv, DEFAULT_LOCALE)),
        Route("/static/typeahead.js", site.typeahead_script),
        Route("/robots.txt", site.robots),
        Route("/sitemap.xml", site.sitemap_index),
        Route("/sitemaps/{n:int}.xml", site.html(site.sitemap, DEFAULT_LOCALE)),
        Route("/favicon.svg", favicon),
        Route("/favicon.ico", favicon),  # what a browser asks for when a page names no icon (a JSON file, say)
        Route("/models/{version}/{name}", site.html(site.model_card_file, DEFAULT_LOCALE)),
    ]
    routes += [
        Route(r.path, site.api_post(r), methods=["POST"], name=r.endpoint)
        if r.method == "POST"
        else Route(r.path, site.api(r), name=r.endpoint)
        for r in API_ROUTES
    ]
    middleware = [
        Middleware(RelativeRedirects),
        Middleware(NoSniff),
        Middleware(ApiCors),
        Middleware(ApiErrors),
        Middleware(RateLimit, limiter=limiter),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        try:
            yield
        finally:  # the abstract fetcher (its event loop's thread)
            fetcher.close()

    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: site.http_error, Exception: site.server_error},
        middleware=middleware,
        lifespan=lifespan,
    )
    app.state.site = site
    app.state.site_url = site_url
    return app
