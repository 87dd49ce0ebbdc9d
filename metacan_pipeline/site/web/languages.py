"""The site in two languages: English at ``/...``, French at ``/fr/...``, one page per language.

Every HTML route has a French twin under ``/fr`` (:data:`PREFIXES`); data routes (exports, the JSON API) have one
address. Every page links its twins with ``<link rel="alternate" hreflang="en|fr|x-default">`` (:func:`alternates`,
absolute addresses, the query string kept; ``x-default`` is English) and carries a language switch link
(:func:`switch`) to ``/language/<lang>?next=<the twin>``, which records the choice in the cookie :data:`COOKIE` and
answers 303 to the twin (:func:`choose`). A request for ``/`` without that cookie follows the browser's
``Accept-Language`` (Babel's ``negotiate_locale``): French preferred -> 302 to ``/fr/`` with the same query string;
with the cookie, the cookie's language is followed (:func:`home_redirect`). Other addresses are never redirected,
so a shared link shows the language it names.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...i18n import DEFAULT_LOCALE, LANGUAGE_NAMES, LOCALES, N_, negotiate
from ..query.params import CohortError, single_values

PREFIXES = {"en": "", "fr": "/fr"}
COOKIE = "metacan_lang"
COOKIE_MAX_AGE = 365 * 24 * 3600
#: Responses of ``/`` depend on these request headers (the redirect), so caches must key on them.
HOME_VARY = "Accept-Language, Cookie"
#: The longest path and query string an error page links its twins to (longer: the language homes).
MAX_TWIN = 300


def split_path(path: str) -> tuple[str, str]:
    """``(language, path in that language's site)``: ``/fr/q/abc`` -> ``("fr", "/q/abc")``, ``/q/abc`` -> ``("en", ...)``."""
    for lang, prefix in PREFIXES.items():
        if prefix and (path == prefix or path.startswith(prefix + "/")):
            return lang, path[len(prefix) :] or "/"
    return DEFAULT_LOCALE, path


def canonical_redirect(request: Request, raw: str, canonical: str) -> Response | None:
    """A permanent redirect (308) to this address with its last path segment ``raw`` written ``canonical`` (an
    OpenAlex id in upper case), the query string kept; None when it already is."""
    if raw == canonical:
        return None
    path = request.url.path.removesuffix(raw) + canonical
    query = request.url.query
    return RedirectResponse(path + (f"?{query}" if query else ""), status_code=308)


def twin(request: Request, lang: str) -> str:
    """The path and query string of this page in ``lang``; ``lang``'s home for a page marked ``no_twin`` (an error
    page at an address over :data:`MAX_TWIN` characters, which is not echoed into links)."""
    if getattr(request.state, "no_twin", False):
        return PREFIXES[lang] + "/"
    _, rest = split_path(request.url.path)
    query = request.url.query
    return PREFIXES[lang] + rest + (f"?{query}" if query else "")


def site_base(request: Request) -> str:
    """The absolute address the site writes into its pages (citations, ``hreflang`` alternates, the API's docs):
    the app's ``site_url`` (``$METACAN_SITE_URL``, read when the app was created) when set, else the address the
    server listens on. Never the request's ``Host`` header, which any client chooses."""
    configured = getattr(request.app.state, "site_url", None)
    if configured:
        return configured.rstrip("/")
    host, port = request.scope.get("server") or ("127.0.0.1", None)
    host = f"[{host}]" if ":" in host else host
    scheme = request.url.scheme
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" + ("" if port in (None, default) else f":{port}") + request.scope.get("root_path", "")


def alternates(request: Request) -> list[dict[str, str]]:
    """The ``hreflang`` links of a page: one absolute address per language, and ``x-default`` (English)."""
    base = site_base(request)
    links = [{"hreflang": lang, "href": base + twin(request, lang)} for lang in LOCALES]
    return links + [{"hreflang": "x-default", "href": base + twin(request, DEFAULT_LOCALE)}]


def switch(request: Request, lang: str) -> dict[str, str]:
    """The language switch link of a page shown in ``lang``: to the other language's twin, through :func:`choose`."""
    other = next(lo for lo in LOCALES if lo != lang)
    return {
        "href": f"/language/{other}?next={quote(twin(request, other), safe='/')}",
        "lang": other,
        "name": LANGUAGE_NAMES[other],
    }


def home_redirect(request: Request) -> Response | None:
    """The redirect of ``/`` to ``/fr/`` when the cookie says French, or (no cookie) ``Accept-Language`` prefers
    French to English; None when the English page is to be shown."""
    chosen = request.cookies.get(COOKIE)
    lang = chosen if chosen in LOCALES else negotiate(request.headers.get("accept-language"))
    if lang in (None, DEFAULT_LOCALE):
        return None
    return RedirectResponse(twin(request, lang), status_code=302, headers={"Vary": HOME_VARY})


def safe_next(target: str | None, lang: str) -> str:
    """``target`` when it is a path of this site (``/...``, not ``//host`` nor ``/\\host``), else ``lang``'s home."""
    ok = target and target.startswith("/") and not target.startswith(("//", "/\\"))
    if ok and not any(ord(c) < 32 or c == "\x7f" for c in target):
        return target
    return PREFIXES[lang] + "/"


def choose(request: Request) -> Response:
    """``/language/<lang>?next=<path>``: remember ``lang`` in the cookie and go to ``next`` (303)."""
    lang = request.path_params["lang"]
    if lang not in LOCALES:
        raise CohortError(
            N_("%(lang)r is not a language of this site: %(langs)s.", lang=lang[:20], langs=", ".join(LOCALES))
        )
    values = single_values(request.query_params.multi_items(), ("next",))
    response = RedirectResponse(safe_next(values.get("next"), lang), status_code=303)
    response.set_cookie(COOKIE, lang, max_age=COOKIE_MAX_AGE, path="/", samesite="lax", httponly=True)
    return response
