"""The coding server: an ASGI app that serves the audit study's coding pages and nothing else (SPEC section 10: coders
are masked to every machine output).

``metacan serve --coding`` runs it, on its own port, apart from the public evidence browser
(:func:`metacan_pipeline.site.web.app.create_app`, which does not serve ``/coding/``). Its routes are the coding pages
of :func:`.coding_pages.coding_routes` (English under ``/coding/``, French under ``/fr/coding/``), ``/`` and ``/fr/``
redirecting to them, and the language switch ``/language/<lang>`` the pages link to. Any other address is the coding
pages' own 404 page: no work page, record, API, statistics, model card or export exists on this server, so a coder is
never one address away from a label, prediction or score of the work they code.

It reads the coding store ``<data_dir>/audit/coding.sqlite`` only (created when missing): no release database, no
warehouse. The abstracts of the work pages are fetched live through the abstract cascade
(:func:`.coding_pages.default_abstracts`), never stored in the frame; the coding store archives the one each coder was
shown (``coding_abstracts``), as the audit protocol requires.
"""

from __future__ import annotations

import contextlib
from functools import partial
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...i18n import DEFAULT_LOCALE, LOCALES
from ...publish.abstract_cascade import AbstractCascade
from ...publish.abstracts import AbstractFetcher
from ..query.params import CohortError
from . import languages
from .app import site_environment
from .coding_pages import HEADERS, CodingPages, coding_routes, default_abstracts, not_found_page
from .icon import favicon
from .middleware import NoSniff, RelativeRedirects

#: The port ``metacan serve --coding`` listens on unless told otherwise (the public site's is 8000).
CODING_PORT = 8001


def _home(request: Request, lang: str) -> Response:
    return RedirectResponse(languages.PREFIXES[lang] + "/coding/", status_code=307, headers=HEADERS)


def _choose(request: Request, pages: CodingPages) -> Response:
    """The language switch; a language this server does not know is the coding pages' 404 page."""
    try:
        response = languages.choose(request)
    except CohortError:
        return not_found_page(request, pages, DEFAULT_LOCALE)
    response.headers.update(HEADERS)
    return response


def create_coding_app(data_dir: str | Path, abstracts: AbstractCascade | AbstractFetcher | None = None) -> Starlette:
    """The coding server over the coding store of ``data_dir`` (module docstring). ``abstracts``: the live abstracts
    of the work pages (None: the abstract cascade with short timeouts); the app's shutdown closes it and the store.
    Raises :class:`metacan_pipeline.audit.coding.errors.CodingStoreError` when the store cannot be opened, ValueError
    naming a setting of the abstract cascade that cannot be used."""
    pages = CodingPages(data_dir, {lo: site_environment(lo) for lo in LOCALES}, abstracts or default_abstracts())
    routes = coding_routes(pages)
    for lang in LOCALES:  # "/", "/fr" and "/fr/" go to the coding pages
        homes = {languages.PREFIXES[lang] + "/", languages.PREFIXES[lang] or "/"}
        routes += [Route(path, partial(_home, lang=lang)) for path in sorted(homes)]
    routes.append(Route("/language/{lang}", partial(_choose, pages=pages)))
    routes += [Route("/favicon.svg", favicon), Route("/favicon.ico", favicon)]

    def not_found(request: Request, exc: HTTPException) -> Response:  # sync: Starlette runs it in the thread pool
        lang = languages.split_path(request.url.path)[0]
        return not_found_page(request, pages, lang)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        try:
            yield
        finally:  # the coding store and the abstract fetcher (its event loop's thread)
            pages.close()

    app = Starlette(
        routes=routes,
        exception_handlers={404: not_found},
        middleware=[Middleware(RelativeRedirects), Middleware(NoSniff)],
        lifespan=lifespan,
    )
    app.state.coding = pages
    return app
