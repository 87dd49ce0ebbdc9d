"""OpenAlex API client: cursor paging, retries, budgets and a byte-for-byte archive of every page.

OpenAlex docs: "Paging" (``cursor=*`` until ``meta.next_cursor`` is null, ``per-page`` up to 200),
"Rate limits and authentication" (``api_key`` parameter; 429 with ``Retry-After``), and the usage-based
pricing that reports ``meta.cost_usd`` per response.

Every response body is archived gzip-compressed as ``{"request": {...}, "retrieved_at_utc": ...,
"payload": <the JSON as received>}`` (the shape of the archived files in ../shared/data/openalex, so
the frame reader reads an archive folder directly). The archive is keyed by query and cursor: a page
already archived is read back instead of being bought again, so a resumed or repeated harvest makes
no call for pages it has. The API key is sent but never logged or archived: it is not part of the
archived request, and a filter on the ``httpx`` logger masks it in the request lines httpx logs.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from tenacity import RetryCallState, retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from .. import settings
from ..http import mask_secret, retry_after_seconds
from .ids import short_id

DEFAULT_BASE_URL = "https://api.openalex.org"


class BudgetExhausted(RuntimeError):
    """The per-day call or cost budget is spent; the message says where to resume."""


class OpenAlexError(RuntimeError):
    """A non-retryable answer (4xx, a page that is not an OpenAlex list, a cursor loop); the message
    names endpoint and cursor and never the API key."""


class TransientHTTPError(Exception):
    """429, 5xx, timeout or dropped connection: retried with backoff (Retry-After honoured)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class Budget:
    """Per-day limits, persisted in ``<archive>/budget-<date>.json`` so separate runs share them."""

    max_calls: int = 10_000
    max_cost_usd: float = 10.0


def _wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    base = wait_random_exponential(multiplier=0.5, max=60)(state)
    if isinstance(exc, TransientHTTPError) and exc.retry_after is not None:
        return max(base, exc.retry_after)
    return base


class OpenAlexClient:
    """Harvests ``/works`` (or another entity list) with cursor paging; thread-safe across queries.

    ``api_key_env`` names the environment variable holding the key (absent = anonymous).
    ``ledger_dir`` is where the per-day budget ledger lives (default ``archive_dir``): harvests that
    archive into different folders but point at one ``ledger_dir`` share one daily budget.
    Raises :class:`BudgetExhausted` before a call that would exceed the day's budget, and
    :class:`OpenAlexError` for a non-retryable answer (e.g. 400 for a bad filter, a cursor loop).
    """

    def __init__(
        self,
        archive_dir: Path,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key_env: str = "OPENALEX_API_KEY",
        per_page: int = 200,
        budget: Budget | None = None,
        max_attempts: int = 6,
        timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        ledger_dir: Path | None = None,
    ) -> None:
        self.archive_dir = Path(archive_dir)
        self.ledger_dir = Path(ledger_dir) if ledger_dir is not None else self.archive_dir
        self.per_page = per_page
        self.budget = budget or Budget()
        self.max_attempts = max_attempts
        self._api_key = settings.secret(api_key_env)
        mask_secret(self._api_key)
        self.http = httpx.Client(base_url=base_url, timeout=timeout_s, transport=transport)
        self._lock = threading.Lock()
        self.calls_made = 0
        self.pages_from_archive = 0
        self.cost_usd = 0.0  # meta.cost_usd of the pages this client bought
        self._led: dict | None = None
        self._led_day: str | None = None

    def close(self) -> None:
        self.http.close()

    # ---- budget ------------------------------------------------------------------------------
    def _ledger_path(self) -> Path:
        return self.ledger_dir / f"budget-{dt.date.today().isoformat()}.json"

    def _ledger(self) -> dict:
        """Today's ledger, read from disk once per day and then kept in memory (written on every change)."""
        day = dt.date.today().isoformat()
        if self._led is None or self._led_day != day:
            p = self._ledger_path()
            self._led = json.loads(p.read_text()) if p.exists() else {"calls": 0, "cost_usd": 0.0}
            self._led_day = day
        return self._led

    def _save_ledger(self) -> None:
        self.ledger_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._ledger_path().with_suffix(f".{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(self._led))
        tmp.replace(self._ledger_path())

    def _charge(self, cost: float, resume_hint: str) -> None:
        with self._lock:
            led = self._ledger()
            if led["calls"] + 1 > self.budget.max_calls or led["cost_usd"] + cost > self.budget.max_cost_usd:
                raise BudgetExhausted(
                    f"OpenAlex budget for {dt.date.today()} spent ({led['calls']} calls, ${led['cost_usd']:.4f}; limits "
                    f"{self.budget.max_calls} calls, ${self.budget.max_cost_usd}); resume later at {resume_hint}"
                )
            led["calls"] += 1
            led["cost_usd"] += cost
            self._save_ledger()
            self.calls_made += 1

    # ---- one page ----------------------------------------------------------------------------
    def _get(self, endpoint: str, params: dict) -> httpx.Response:
        @retry(
            retry=retry_if_exception(lambda e: isinstance(e, TransientHTTPError)),
            stop=stop_after_attempt(self.max_attempts),
            wait=_wait,
            reraise=True,
        )
        def attempt() -> httpx.Response:
            self._charge(0.0, f"endpoint {endpoint} cursor {params.get('cursor')!r}")
            sent = dict(params, api_key=self._api_key) if self._api_key else params
            try:
                resp = self.http.get(endpoint, params=sent)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                raise TransientHTTPError(f"{type(exc).__name__} on {endpoint}") from None
            if resp.status_code == 429 or resp.status_code >= 500:
                raise TransientHTTPError(
                    f"HTTP {resp.status_code} on {endpoint}", retry_after_seconds(resp.headers.get("Retry-After"))
                )
            if resp.status_code >= 400:
                raise OpenAlexError(
                    f"HTTP {resp.status_code} from {endpoint} with {params} (API key not shown): {resp.text[:300]}"
                )
            try:
                payload = resp.json()
            except ValueError:
                raise TransientHTTPError(
                    f"{endpoint} answered {resp.status_code} with a body that is not JSON"
                ) from None
            if (
                not isinstance(payload, dict)
                or not isinstance(payload.get("results", []), list)
                or not isinstance(payload.get("meta") or {}, dict)
            ):
                raise OpenAlexError(
                    f"{endpoint} with {params} answered a JSON {type(payload).__name__} that is not an OpenAlex list page"
                )
            return resp

        return attempt()

    def _archive_path(self, query_key: str, cursor: str) -> Path:
        return self.archive_dir / "pages" / query_key / (hashlib.sha256(cursor.encode()).hexdigest()[:20] + ".json.gz")

    def fetch_page(self, endpoint: str, params: dict, query_key: str) -> dict:
        """One page: from the archive if it is there, else from the API (then archived atomically)."""
        path = self._archive_path(query_key, params.get("cursor", ""))
        if path.exists():
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                self.pages_from_archive += 1
                return json.load(fh)["payload"]
        resp = self._get(endpoint, params)
        payload = resp.json()
        try:
            cost = float((payload.get("meta") or {}).get("cost_usd") or 0.0)
        except (TypeError, ValueError):
            cost = 0.0  # an unreadable cost is not charged; the page is still archived
        if cost:
            with self._lock:
                self._ledger()["cost_usd"] += cost
                self._save_ledger()
                self.cost_usd += cost
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
        envelope = (
            '{"request": '
            + json.dumps({"endpoint": endpoint, "params": params})
            + ', "retrieved_at_utc": '
            + json.dumps(dt.datetime.now(dt.UTC).isoformat())
            + ', "payload": '
            + resp.text
            + "}"
        )
        with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as fh:
            fh.write(envelope)
        tmp.replace(path)
        return payload

    # ---- a whole query -----------------------------------------------------------------------
    def iter_pages(self, filter_: str, *, endpoint: str = "/works", select: str | None = None) -> Iterator[dict]:
        """Every page of ``filter_`` by cursor paging (``cursor=*`` until ``next_cursor`` is null)."""
        params = {"filter": filter_, "per-page": self.per_page, "cursor": "*"}
        if select:
            params["select"] = select
        query_key = hashlib.sha256(json.dumps([endpoint, filter_, select, self.per_page]).encode()).hexdigest()[:16]
        seen = {"*"}
        while True:
            try:
                payload = self.fetch_page(endpoint, params, query_key)
            except OpenAlexError as exc:
                if " 400 " in str(exc) and self.per_page > 100 and params["cursor"] == "*":
                    self.per_page = 100  # a server that refuses 200 per page gets 100
                    yield from self.iter_pages(filter_, endpoint=endpoint, select=select)
                    return
                raise
            yield payload
            nxt = (payload.get("meta") or {}).get("next_cursor")
            if not nxt or not payload.get("results"):
                return
            if nxt in seen:
                raise OpenAlexError(
                    f"cursor loop on {endpoint} filter {filter_!r}: next_cursor {nxt!r} was already fetched; "
                    f"stopping (the archive keeps the {len(seen)} pages read)"
                )
            seen.add(nxt)
            params = dict(params, cursor=nxt)


#: The entity lists a harvest starts from (``metacan fetch``): every Canadian funder, source and institution.
CANADIAN_ENTITIES = ("funders", "sources", "institutions")


def canadian_ids(client: OpenAlexClient, entity: str) -> list[str]:
    """The short ids (``F...``, ``S...``, ``I...``) of every ``entity`` (one of :data:`CANADIAN_ENTITIES`) with
    ``country_code:ca``, read page by page through ``client`` (archived, budgeted)."""
    found = (
        short_id(r.get("id")) for p in client.iter_pages("country_code:ca", endpoint=f"/{entity}") for r in p["results"]
    )
    return [i for i in found if i]


def count_works(client: OpenAlexClient, filter_: str) -> int:
    """Read every page of the works matching ``filter_`` through ``client`` (archived, budgeted); how many works."""
    return sum(len(p["results"]) for p in client.iter_pages(filter_))


def or_groups(ids: list[str], size: int = 100) -> list[str]:
    """``a|b|c`` OR-groups of at most ``size`` ids (OpenAlex allows up to 100 values per filter)."""
    return ["|".join(ids[i : i + size]) for i in range(0, len(ids), size)]


def route_filters(
    funder_ids: list[str],
    source_ids: list[str],
    from_updated_date: str | None = None,
    to_updated_date: str | None = None,
    date_field: str = "updated_date",
) -> list[str]:
    """One filter per route (SPEC section 2): affiliation by institution country and by author country,
    funders (current ``funders.id`` and ``awards.funder_id``) and venues in OR-groups of 100, optionally
    restricted to an incremental window of ``updated_date`` (OpenAlex docs, "Filter works":
    ``from_updated_date`` and ``to_updated_date``, ``YYYY-MM-DD``, both ends inclusive), or of ``publication_date``
    with ``date_field="publication_date"`` (``from_publication_date`` and ``to_publication_date``)."""
    if date_field not in ("updated_date", "publication_date"):
        raise ValueError(f"date_field must be updated_date or publication_date, got {date_field!r}")
    filters = ["authorships.institutions.country_code:ca", "authorships.countries:ca"]
    filters += [f"funders.id:{g}" for g in or_groups(funder_ids)]
    filters += [f"awards.funder_id:{g}" for g in or_groups(funder_ids)]
    filters += [f"primary_location.source.id:{g}" for g in or_groups(source_ids)]
    if from_updated_date:
        filters = [f"{f},from_{date_field}:{from_updated_date}" for f in filters]
    if to_updated_date:
        filters = [f"{f},to_{date_field}:{to_updated_date}" for f in filters]
    return filters
