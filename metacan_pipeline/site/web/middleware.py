"""The HTTP behaviour around the site's endpoints: ``nosniff`` everywhere; under ``/api/`` CORS, the
cache validators and the per-client rate limit.

- :class:`NoSniff`: ``X-Content-Type-Options: nosniff`` on every response (exports and JSON carry raw data).
- :class:`ApiCors`: Starlette's ``CORSMiddleware`` for paths under ``/api/`` only: read-only ``GET`` from any
  origin, no credentials, the validators and the export headers readable by scripts (:data:`EXPOSED_HEADERS`).
- :class:`ApiErrors`: an unexpected exception under ``/api/`` answers JSON (status 500) inside the CORS layer.
- :class:`RateLimit` over a :class:`ClientLimiter`: a token bucket per client address in process memory
  (throttled-py's ``TokenBucketRateLimiter`` on its ``MemoryStore``), for paths under ``/api/``; an empty bucket is
  HTTP 429 with ``Retry-After`` (seconds) and one sentence. The client address is the ASGI ``client`` (behind a
  proxy, run uvicorn with ``--proxy-headers`` so it is the forwarded address).
- :func:`etag`, :func:`not_modified`, :func:`cache_headers`: the ETag of a release-bound API answer is a hash of the
  package version, the release id, the export row cap, the path and the canonical query (the parameters sorted,
  exactly as given); a conditional GET whose ``If-None-Match`` names it is answered 304 without running the query.
"""

from __future__ import annotations

import hashlib
import logging
from urllib.parse import urlencode, urlsplit, urlunsplit

from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from throttled import MemoryStore, Throttled
from throttled.exceptions import DataError
from throttled.rate_limiter.quota_parser import parse as parse_quota

from ... import __version__
from ...i18n import N_
from ..build.release import shorten
from .export import FORMATS

API_PREFIX = "/api/"
LOG = logging.getLogger(__name__)
#: Every HTML page: no script at all, nothing from elsewhere, not framed; never sniffed.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
#: The home page: the same, and its typeahead script (``/static/typeahead.js``) asking this site's API.
HOME_CSP = CSP.replace("default-src 'none'", "default-src 'none'; script-src 'self'; connect-src 'self'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
#: Seconds a release-bound API answer may be reused without asking again (then revalidated with its ETag).
API_MAX_AGE = 300
NO_STORE = {"Cache-Control": "no-store"}
EXPOSED_HEADERS = (
    "ETag",
    "Retry-After",
    "Content-Disposition",
    "X-Metacan-Query-Hash",
    "X-Metacan-Release",
    "X-Metacan-Classifier-Version",
    "X-Metacan-Filters",
    "X-Metacan-Cohort-Count",
    "X-Metacan-Row-Cap",
    "X-Metacan-Rows",
    "X-Metacan-Truncated",
)
#: Client addresses whose buckets are kept (least recently used evicted first: an evicted client starts full).
MAX_CLIENTS = 100_000


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


class RelativeRedirects:
    """ASGI middleware: a redirect whose ``Location`` names the request's own ``Host`` (Starlette's trailing-slash
    redirect builds it from that header, which any client sets) says the path alone, so no client can make the
    site send a visitor to another host."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = next((v for k, v in scope.get("headers", []) if k == b"host"), b"").decode("latin-1").lower()

        async def send_relative(message) -> None:
            if message["type"] == "http.response.start" and 300 <= message["status"] < 400:
                headers = []
                for k, v in message.get("headers", []):
                    if k.lower() == b"location":
                        parts = urlsplit(v.decode("latin-1"))
                        if parts.netloc and parts.netloc.lower() == host:
                            v = urlunsplit(("", "", parts.path or "/", parts.query, parts.fragment)).encode("latin-1")
                    headers.append((k, v))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_relative)


def _is_api(scope) -> bool:
    return scope["type"] == "http" and scope["path"].startswith(API_PREFIX)


class ApiCors:
    """ASGI middleware: CORS (Starlette's ``CORSMiddleware``) on paths under ``/api/``; other paths untouched."""

    def __init__(self, app) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=["*"],
            allow_methods=["GET"],
            allow_headers=["If-None-Match"],
            expose_headers=list(EXPOSED_HEADERS),
            max_age=600,
        )

    async def __call__(self, scope, receive, send) -> None:
        await (self.cors if _is_api(scope) else self.app)(scope, receive, send)


QUOTA_SYNTAX = "'<n>/<s|m|h|d>', optionally followed by 'burst <n>' (e.g. '120/m burst 60'), or 'off'"


class ApiErrors:
    """ASGI middleware: an unexpected exception under ``/api/`` is answered as every API error is, JSON
    ``{"error": {"status": 500, "message"}}`` with ``no-store``, inside :class:`ApiCors` so a script on another
    origin can read it (Starlette's own 500 is plain text, outside every middleware). The exception is logged with
    its traceback; the answer names no internals. A failure after the answer started (a streamed export) can only
    end the stream."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if not _is_api(scope):
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception:
            LOG.exception("internal error answering %s", scope["path"])
            if started:
                raise
            message = (
                f"internal error while answering {scope['path'][:80]}: the server logged it; try again, and report it "
                f"if it persists."
            )
            body = {"error": {"status": 500, "message": message}}
            await JSONResponse(body, status_code=500, headers=NO_STORE)(scope, receive, send)


class ClientLimiter:
    """A token bucket per client address: ``quota`` in throttled-py's syntax, ``<n>/<s|m|h|d> [burst <n>]``
    (``120/m burst 60``: 120 requests a minute, at most 60 at once). Raises ValueError naming ``source`` (the
    variable or argument the text came from) and the text, cut to 40 characters, when it is not one rate or its
    burst is below 1 (a bucket that never holds a token refuses every request)."""

    def __init__(self, quota: str, source: str = "rate limit") -> None:
        named = f"{source}={shorten(quota)}"
        try:
            quotas = parse_quota(quota)
        except (DataError, ValueError):  # ValueError: a number of more than 4,300 digits
            raise ValueError(f"{named} is not a rate: write {QUOTA_SYNTAX}") from None
        if len(quotas) != 1:
            raise ValueError(f"{named} names {len(quotas)} rates; give one: {QUOTA_SYNTAX}")
        if quotas[0].burst < 1:
            raise ValueError(
                f"{named} allows bursts of {quotas[0].burst} requests, so it would refuse every request; give a "
                f"burst of at least 1: {QUOTA_SYNTAX}"
            )
        self.quota = quotas[0]
        store = MemoryStore(options={"MAX_SIZE": MAX_CLIENTS})
        self.throttle = Throttled(using="token_bucket", quota=self.quota, store=store, key_prefix="metacan-site")

    def retry_after(self, client: str) -> int | None:
        """Take one token from ``client``'s bucket: None when there was one, else the seconds until there is."""
        result = self.throttle.limit(client)
        return max(1, int(result.state.retry_after)) if result.limited else None

    def describe(self) -> str:
        q = self.quota
        return f"{q.rate.limit} requests per {int(q.period_sec)} s, in bursts of at most {q.burst}"


def client_limiter(quota: str | None, source: str = "rate limit") -> ClientLimiter | None:
    """The limiter of a configured quota; None for ``off`` (or None: no limit). ``source`` names where the text
    came from in a refusal (e.g. ``METACAN_SITE_RATE_LIMIT``)."""
    if quota is None or quota.strip().lower() == "off":
        return None
    return ClientLimiter(quota, source)


class RateLimit:
    """ASGI middleware: the per-client token bucket on paths under ``/api/`` (:class:`ClientLimiter`); 429 with
    ``Retry-After`` and one sentence when the bucket is empty."""

    def __init__(self, app, limiter: ClientLimiter | None) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope, receive, send) -> None:
        if self.limiter is not None and _is_api(scope) and scope.get("method") != "OPTIONS":
            client = (scope.get("client") or ("unknown", 0))[0]
            wait = self.limiter.retry_after(client)
            if wait is not None:
                message = (
                    f"too many requests from {client}: this API answers {self.limiter.describe()} per client; "
                    f"retry in {wait} s."
                )
                body = {"error": {"status": 429, "message": message}}
                response = JSONResponse(body, status_code=429, headers={**NO_STORE, "Retry-After": str(wait)})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


#: The exports served outside ``/api/`` (their API twin ``/api/v1/export`` is limited with the rest of the API).
EXPORT_PATHS = (*(f"/export.{fmt}" for fmt in FORMATS), "/network.graphml", "/network.csv")
EXPORT_REFUSAL = N_(
    "Too many requests from %(client)s: exports and the API answer %(limit)s requests per %(period)s s per client, "
    "in bursts of at most %(burst)s; retry in %(wait)s s."
)


def export_refusal(limiter: ClientLimiter | None, request: Request) -> tuple[str, str] | None:
    """For an export outside ``/api/``: take a token from the client's bucket (the API's, so a client cannot go
    around the API's limit through the page exports); ``(sentence, Retry-After seconds)`` when it is empty, else
    None. No limiter (``off``): None."""
    if limiter is None or request.url.path not in EXPORT_PATHS:
        return None
    client = request.client.host if request.client else "unknown"
    wait = limiter.retry_after(client)
    if wait is None:
        return None
    q = limiter.quota
    sentence = N_(EXPORT_REFUSAL, client=client, limit=q.rate.limit, period=int(q.period_sec), burst=q.burst, wait=wait)
    return sentence, str(wait)


def canonical_query(request: Request) -> str:
    """The request's parameters, sorted, as given (an equivalent request in another order has the same text)."""
    return urlencode(sorted(request.query_params.multi_items()))


def etag(request: Request, release_id: str, row_cap: int) -> str:
    """The strong ETag of a release-bound answer to ``request`` (module docstring)."""
    text = "\n".join((__version__, release_id, str(row_cap), request.url.path, canonical_query(request)))
    return '"' + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32] + '"'


def not_modified(request: Request, tag: str) -> bool:
    """True when the request's ``If-None-Match`` names ``tag`` (weak comparison, RFC 9110 section 13.1.2)."""
    header = request.headers.get("if-none-match")
    if not header:
        return False
    return tag in {t.strip().removeprefix("W/") for t in header.split(",")}


def cache_headers(tag: str) -> dict[str, str]:
    return {"ETag": tag, "Cache-Control": f"public, max-age={API_MAX_AGE}"}
