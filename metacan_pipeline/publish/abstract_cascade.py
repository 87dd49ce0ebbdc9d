"""The abstract cascade: the best abstract that can be ascertained for a work, for its page and for the coders of the
audit study (SPEC sections 9 to 11; the original protocol's "best ascertainable evidence", choxos/MetaCan
``docs/protocol/PROTOCOL.md`` section 6.1, with PubMed, Europe PMC and Crossref supplying the abstracts OpenAlex lacks).

The sources are asked in order (default: OpenAlex, Europe PMC, Crossref; :func:`metacan_pipeline.settings.
abstract_sources`), and the cascade stops at the first that gives an abstract:

1. **OpenAlex** (:class:`.abstracts.AbstractFetcher`, batches of 50 ids): the de-inverted abstract; its answer also
   gives the work's PMID and DOI (``ids``), by which the next sources are asked.
2. **Europe PMC** (REST ``GET {base}/search``, ``resultType=core``, ``format=json``; Europe PMC's "Articles RESTful
   API" reference): ``query=EXT_ID:<pmid> AND SRC:MED`` (the MEDLINE record, which also holds PubMed's abstract) when
   the PMID is known, else ``query=DOI:"<doi>"``. The answer is ``{"hitCount": n, "resultList": {"result": [...]}}``;
   a record's ``abstractText`` is HTML with ``<h4>`` section headings (older records: ``BACKGROUND:``-style labels).
   The record matching the PMID (``pmid``) or the DOI (``doi``, case-insensitive) is read; none: no record.
3. **Crossref** (REST ``GET {base}/works/{doi}``, ``mailto`` for the polite pool): ``message.abstract`` is JATS XML
   with ``<jats:sec><jats:title>`` sections; 404 (``Resource not found.``): no record; no ``abstract`` key: none.

Structured sections are kept (:mod:`.abstract_text`). Each answer (:class:`.abstracts.Abstract`) says which source
answered (``source``) or why none did (``why_none``: no ids to ask by, none had one, a fetch failed), with what each
source said (``asked``). Answers are cached in memory only (a bounded TTL cache; failures never), never written to the
frame, the warehouse or any file: the coding study alone archives the abstract it showed a coder
(:mod:`metacan_pipeline.audit.coding.abstracts`).

Bounds, per source: every request is bounded in all (``timeout_s``, headers and body, answers capped at
:data:`.abstracts.MAX_ANSWER_BYTES`); transport errors, timeouts, 429 and 5xx are retried (tenacity, at most
``max_attempts`` requests, Retry-After honoured up to ``retry_after_max_s``); another 4xx or an answer that is not the
expected JSON fails that work's ask at once; after ``breaker_after`` consecutive failed asks a source is asked nothing
more by this cascade (its works say "not attempted"; asks already started finish, so at most ``breaker_after +
concurrency - 1`` asks fail before it opens). Europe PMC and Crossref are asked for at most ``concurrency``
works at once. ``budget_s`` (served pages) bounds one :meth:`AbstractCascade.fetch`: a source whose turn comes after it
is spent is not attempted. With no network (the default ``make run``) OpenAlex's breaker opens after two failed
batches, as the fetcher always did, and each later source's after ``breaker_after`` failed asks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

import httpx
from cachetools import TTLCache
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from .. import __version__, settings
from ..http import retry_after_seconds
from ..openalex.api import TransientHTTPError
from ..openalex.ids import bare_pmid, is_work_id
from .abstract_text import Section, joined, markup_sections
from .abstracts import Abstract, AbstractFetcher, WorkIds, _Loop, bare_doi, capped_get

log = logging.getLogger(__name__)

#: Display names of the sources (pages, coding forms, logs).
SOURCE_NAMES = {"openalex": "OpenAlex", "europepmc": "Europe PMC", "crossref": "Crossref"}
#: Records Europe PMC is asked to return per query (a DOI can match a MEDLINE record and a preprint).
EUROPEPMC_PAGE_SIZE = 5


class _AskFailed(Exception):
    """One work's ask that will not succeed now (retries spent, a 4xx, an unreadable answer)."""


class _Source:
    """One source asked work by work (Europe PMC or Crossref): its client on the cascade's loop, its bounds and its
    breaker. Subclasses give the request (:meth:`request`) and read the answer (:meth:`read`)."""

    name = ""

    def __init__(self, base_url: str, cascade: AbstractCascade, transport: httpx.AsyncBaseTransport | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.cascade = cascade
        self.calls = 0
        self.failed_in_a_row = 0
        headers = {
            "User-Agent": f"metacan_pipeline/{__version__}" + (f" (mailto:{m})" if (m := cascade.mailto) else "")
        }
        self.http = httpx.AsyncClient(timeout=cascade.timeout_s, transport=transport, headers=headers)

    # ---- what a subclass says --------------------------------------------------------------------------------------
    def request(self, work: WorkIds) -> tuple[str, dict[str, Any]] | None:
        """``(url, params)`` asking for ``work``'s abstract, or None when the work has no id this source is asked by."""
        raise NotImplementedError

    def read(self, work: WorkIds, resp: httpx.Response) -> tuple[str, list[Section]]:
        """``(outcome, sections)`` of a final answer (``ok``, ``none`` or ``missing``); :class:`_AskFailed` otherwise."""
        raise NotImplementedError

    # ---- asking ----------------------------------------------------------------------------------------------------
    @property
    def tripped(self) -> bool:
        """True when the breaker is open: this source is asked nothing more."""
        limit = self.cascade.breaker_after
        return bool(limit) and self.failed_in_a_row >= limit

    async def ask(self, work: WorkIds, gate: asyncio.Semaphore) -> tuple[str, list[Section], str | None]:
        """``(outcome, sections, error)`` for one work; never raises for network or server trouble."""
        req = self.request(work)
        if req is None:
            return "no_id", [], None
        async with gate:
            if self.tripped:
                why = f"not attempted: {SOURCE_NAMES[self.name]} unreachable ({self.failed_in_a_row} asks failed in a row)"
                return "not_attempted", [], why
            try:
                outcome, sections = self.read(work, await self._get(*req))
            except _AskFailed as exc:
                self.failed_in_a_row += 1
                self.cascade.log.warning("abstracts: %s failed for %s: %s", SOURCE_NAMES[self.name], work.work_id, exc)
                return "failed", [], f"{SOURCE_NAMES[self.name]}: {exc}"
            self.failed_in_a_row = 0
            return outcome, sections, None

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        c = self.cascade
        base = wait_random_exponential(multiplier=0.5, max=c.retry_wait_max_s)(state) if c.retry_wait_max_s > 0 else 0.0
        if isinstance(exc, TransientHTTPError) and exc.retry_after is not None:
            return max(base, exc.retry_after)
        return base

    async def _get(self, url: str, params: dict[str, Any]) -> httpx.Response:
        """The answer to one GET, retried while transient; :class:`_AskFailed` naming the status or the problem."""
        c, attempts = self.cascade, 0
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(TransientHTTPError),
                stop=stop_after_attempt(c.max_attempts),
                wait=self._wait,
                reraise=True,
            ):
                with attempt:
                    attempts += 1
                    self.calls += 1
                    try:
                        resp = await capped_get(self.http, url, params, c.timeout_s)
                    except httpx.TimeoutException as exc:
                        raise TransientHTTPError(f"timeout ({type(exc).__name__}, limit {c.timeout_s:g} s)") from None
                    except httpx.TransportError as exc:
                        raise TransientHTTPError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
                    except httpx.HTTPError as exc:  # a body that does not decode, or one over the cap
                        raise _AskFailed(f"{type(exc).__name__}: {str(exc)[:200]}") from None
                    if resp.status_code == 429 or resp.status_code >= 500:
                        raise TransientHTTPError(
                            f"HTTP {resp.status_code}",
                            retry_after_seconds(resp.headers.get("Retry-After"), c.retry_after_max_s),
                        )
                    return resp
        except TransientHTTPError as exc:
            raise _AskFailed(f"{exc} (gave up after {attempts} attempt{'s' if attempts != 1 else ''})") from None
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    @staticmethod
    def _json(resp: httpx.Response, what: str) -> Any:
        try:
            return resp.json()
        except (ValueError, RecursionError) as exc:
            raise _AskFailed(f"{what} answered HTTP {resp.status_code} with a body that is not JSON ({exc})") from None


class _EuropePmc(_Source):
    name = "europepmc"

    def request(self, work: WorkIds) -> tuple[str, dict[str, Any]] | None:
        if work.pmid:
            query = f"EXT_ID:{work.pmid} AND SRC:MED"
        elif work.doi and '"' not in work.doi and "\\" not in work.doi:
            query = f'DOI:"{work.doi}"'
        else:
            return None
        params = {"query": query, "resultType": "core", "format": "json", "pageSize": EUROPEPMC_PAGE_SIZE}
        return f"{self.base_url}/search", params

    def read(self, work: WorkIds, resp: httpx.Response) -> tuple[str, list[Section]]:
        if resp.status_code != 200:
            raise _AskFailed(f"HTTP {resp.status_code} from Europe PMC /search (not retried): {resp.text[:200]}")
        payload = self._json(resp, "Europe PMC /search")
        results = (payload.get("resultList") or {}).get("result") if isinstance(payload, dict) else None
        if not isinstance(results, list):
            raise _AskFailed("Europe PMC /search answered JSON without a resultList.result list")
        if work.pmid:
            matches = [r for r in results if isinstance(r, dict) and str(r.get("pmid") or "") == work.pmid]
        else:
            matches = [r for r in results if isinstance(r, dict) and bare_doi(r.get("doi")) == work.doi]
        if not matches:
            return "missing", []
        for rec in matches:
            text = rec.get("abstractText")
            sections = markup_sections(text) if isinstance(text, str) else []
            if sections:
                return "ok", sections
        return "none", []


class _Crossref(_Source):
    name = "crossref"

    def request(self, work: WorkIds) -> tuple[str, dict[str, Any]] | None:
        if not work.doi:
            return None
        params = {"mailto": self.cascade.mailto} if self.cascade.mailto else {}
        return f"{self.base_url}/works/{quote(work.doi, safe='/')}", params

    def read(self, work: WorkIds, resp: httpx.Response) -> tuple[str, list[Section]]:
        if resp.status_code == 404:
            return "missing", []
        if resp.status_code != 200:
            raise _AskFailed(f"HTTP {resp.status_code} from Crossref /works (not retried): {resp.text[:200]}")
        payload = self._json(resp, "Crossref /works")
        message = payload.get("message") if isinstance(payload, dict) else None
        if not isinstance(message, dict):
            raise _AskFailed("Crossref /works answered JSON without a 'message' object")
        text = message.get("abstract")
        sections = markup_sections(text) if isinstance(text, str) else []
        return ("ok", sections) if sections else ("none", [])


_SOURCE_CLASSES: dict[str, type[_Source]] = {"europepmc": _EuropePmc, "crossref": _Crossref}


class AbstractCascade:
    """The abstract cascade (module docstring): one per page build or per server.

    ``sources``: the sources in order (default :func:`metacan_pipeline.settings.abstract_sources`); ``openalex_url``,
    ``europepmc_url``, ``crossref_url``: API roots (default: the settings'); ``mailto``: sent to OpenAlex and
    Crossref (default ``$METACAN_ABSTRACT_MAILTO``). ``timeout_s``, ``max_attempts``, ``breaker_after``,
    ``retry_wait_max_s``, ``retry_after_max_s``: the bounds of every source (OpenAlex's fetcher gets the same).
    ``concurrency``: works asked of Europe PMC or Crossref at once. ``budget_s``: seconds one :meth:`fetch` may spend
    before a later source is skipped (None: no budget). ``cache_size`` / ``ttl_seconds`` / ``clock``: the in-memory
    cache of answers. ``transports``: per source name, an httpx transport (tests). ``logger``: where failures go.

    Attributes: ``calls`` (requests sent per source, retries included), ``cache``. Thread-safe: a served site calls
    :meth:`fetch` from several threads.
    """

    def __init__(
        self,
        sources: Iterable[str] | None = None,
        *,
        openalex_url: str | None = None,
        europepmc_url: str | None = None,
        crossref_url: str | None = None,
        mailto: str | None = None,
        timeout_s: float = 10.0,
        max_attempts: int = 3,
        breaker_after: int = 2,
        retry_wait_max_s: float = 8.0,
        retry_after_max_s: float = 30.0,
        concurrency: int = 4,
        budget_s: float | None = None,
        cache_size: int = 10_000,
        ttl_seconds: float = 3600,
        clock: Callable[[], float] = time.monotonic,
        transports: dict[str, httpx.AsyncBaseTransport] | None = None,
        logger: logging.Logger | logging.LoggerAdapter | None = None,
    ) -> None:
        names = settings.abstract_sources(",".join(sources)) if sources is not None else settings.abstract_sources()
        if max_attempts < 1 or concurrency < 1:
            raise ValueError(f"max_attempts and concurrency must be at least 1, got {max_attempts} and {concurrency}")
        if cache_size < 0 or ttl_seconds <= 0:
            raise ValueError(f"cache_size must be >= 0 and ttl_seconds > 0, got {cache_size} and {ttl_seconds}")
        self.sources = names
        self.log = logger or log
        self.mailto = mailto if mailto is not None else settings.abstract_mailto()
        self.timeout_s, self.max_attempts, self.breaker_after = timeout_s, max_attempts, breaker_after
        self.retry_wait_max_s, self.retry_after_max_s = retry_wait_max_s, retry_after_max_s
        self.concurrency, self.budget_s, self.clock = concurrency, budget_s, clock
        transports = transports or {}
        self.openalex = (
            AbstractFetcher(
                openalex_url or None,
                cache_size=0,  # the cascade caches whole answers
                timeout_s=timeout_s,
                max_attempts=max_attempts,
                breaker_after=breaker_after,
                retry_wait_max_s=retry_wait_max_s,
                retry_after_max_s=retry_after_max_s,
                mailto=self.mailto,
                transport=transports.get("openalex"),
                logger=self.log,
            )
            if "openalex" in names
            else None
        )
        urls = {
            "europepmc": europepmc_url or settings.europepmc_api_url(),
            "crossref": crossref_url or settings.crossref_api_url(),
        }
        # one event loop thread per cascade: OpenAlex's fetcher's, shared by the later sources' clients
        self._loop = self.openalex._loop if self.openalex is not None else _Loop()
        if self.openalex is None:  # never closed: the loop's thread ends with the cascade
            weakref.finalize(self, self._loop.stop)
        self._later: dict[str, _Source] = {}
        for name in names:
            if name in _SOURCE_CLASSES:
                self._later[name] = self._loop.run(self._make(name, urls[name], transports.get(name)))
        self.cache: TTLCache[str, Abstract] | None = (
            TTLCache(maxsize=cache_size, ttl=ttl_seconds, timer=clock) if cache_size else None
        )
        self._lock = threading.Lock()

    async def _make(self, name: str, url: str, transport: httpx.AsyncBaseTransport | None) -> _Source:
        return _SOURCE_CLASSES[name](url, self, transport)  # the client is made on the loop it will run on

    # ---- lifecycle -------------------------------------------------------------------------------------------------
    @property
    def calls(self) -> dict[str, int]:
        """Requests sent per source since construction, retries included."""
        out = {"openalex": self.openalex.calls} if self.openalex is not None else {}
        return out | {name: src.calls for name, src in self._later.items()}

    def close(self) -> None:
        """Closes every client and the event loops (a later :meth:`fetch` is a RuntimeError)."""
        if not self._loop.loop.is_closed():
            for src in self._later.values():
                self._loop.run(src.http.aclose())
        if self.openalex is not None:
            self.openalex.close()  # stops the shared loop
        else:
            self._loop.stop()

    def __enter__(self) -> AbstractCascade:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- public ----------------------------------------------------------------------------------------------------
    def fetch(self, works: Iterable[str | WorkIds], progress: bool = False) -> dict[str, Abstract]:
        """``{work_id: Abstract}``, one per distinct work, in first-seen order (a work given twice keeps the first ids
        it came with). ``works``: short work ids or :class:`.abstracts.WorkIds` (its DOI and PMID are asked by; a DOI
        or PMID that cannot be one is ignored). A bad work id raises ValueError naming it before any request; a bare
        string raises TypeError. Never raises for network or server trouble. ``progress``: a bar over OpenAlex's
        batches."""
        if isinstance(works, (str, bytes)):
            raise TypeError("works must be an iterable of work ids or WorkIds, not a single string")
        given: dict[str, WorkIds] = {}
        for w in works:
            wid = w.work_id if isinstance(w, WorkIds) else w
            if not is_work_id(wid):
                raise ValueError(f"not a short OpenAlex work id (W followed by digits): {wid!r}")
            if wid not in given:
                ids = w if isinstance(w, WorkIds) else WorkIds(wid)
                given[wid] = WorkIds(wid, bare_doi(ids.doi), bare_pmid(ids.pmid), ids.has_abstract)
        started = self.clock()
        out: dict[str, Abstract] = {}
        with self._lock:
            for wid in given:
                hit = self.cache.get(wid) if self.cache is not None else None
                if hit is not None:
                    out[wid] = hit
        todo = [given[w] for w in given if w not in out]
        asked: dict[str, list[tuple[str, str]]] = {w.work_id: [] for w in todo}
        errors: dict[str, list[str]] = {w.work_id: [] for w in todo}
        first: dict[str, Abstract] = {}
        for name in self.sources:
            if not todo:
                break
            if name == "openalex":
                todo = self._ask_openalex(todo, asked, errors, first, out, progress)
                continue
            if self.budget_s is not None and self.clock() - started > self.budget_s:
                for w in todo:
                    asked[w.work_id].append((name, "not_attempted"))
                    errors[w.work_id].append(
                        f"{SOURCE_NAMES[name]}: not attempted (the {self.budget_s:g} s budget was spent)"
                    )
                continue
            todo = self._ask_later(self._later[name], todo, asked, errors, out)
        for w in todo:
            out[w.work_id] = self._without(w, asked[w.work_id], errors[w.work_id], first.get(w.work_id))
        with self._lock:
            for wid in asked:
                if out[wid].status != "failed" and self.cache is not None:
                    self.cache[wid] = out[wid]
        return {wid: out[wid] for wid in given}

    # ---- the steps -------------------------------------------------------------------------------------------------
    def _needs_openalex(self, w: WorkIds) -> bool:
        """False for a work the frame saw without an OpenAlex abstract, unless OpenAlex's ids are needed: no DOI or
        PMID is known and Europe PMC is to be asked (by the PMID OpenAlex may hold)."""
        return w.has_abstract is not False or (not w.doi and not w.pmid and "europepmc" in self._later)

    def _ask_openalex(
        self,
        todo: list[WorkIds],
        asked: dict[str, list[tuple[str, str]]],
        errors: dict[str, list[str]],
        first: dict[str, Abstract],
        out: dict[str, Abstract],
        progress: bool,
    ) -> list[WorkIds]:
        """OpenAlex's turn: its answers (an abstract ends a work's cascade) and the ids its records give; returns the
        works still without an abstract, with those ids."""
        wanted = [w.work_id for w in todo if self._needs_openalex(w)]
        answers = self.openalex.fetch(wanted, progress=progress) if wanted else {}
        rest = []
        for w in todo:
            # the frame's record had none: OpenAlex's answer is known without a request
            a = answers.get(w.work_id) or Abstract(w.work_id, "none", None, None, None)
            first[w.work_id] = a
            outcome = a.status
            if a.status == "failed":
                outcome = "not_attempted" if (a.error or "").startswith("not attempted") else "failed"
                errors[w.work_id].append(f"OpenAlex: {a.error}")
            asked[w.work_id].append(("openalex", outcome))
            if a.status == "ok":
                out[w.work_id] = dataclasses.replace(
                    a, source="openalex", sections=((None, a.text),), asked=tuple(asked[w.work_id])
                )
            else:
                rest.append(WorkIds(w.work_id, w.doi or a.doi, w.pmid or a.pmid, w.has_abstract))
        return rest

    def _ask_later(
        self,
        src: _Source,
        todo: list[WorkIds],
        asked: dict[str, list[tuple[str, str]]],
        errors: dict[str, list[str]],
        out: dict[str, Abstract],
    ) -> list[WorkIds]:
        """A later source's turn: every work still without an abstract asked at once (``concurrency`` at a time);
        returns those still without one."""

        async def all_of() -> list[tuple[str, list[Section], str | None]]:
            gate = asyncio.Semaphore(self.concurrency)
            return await asyncio.gather(*(src.ask(w, gate) for w in todo))

        results = self._loop.run(all_of())
        now = dt.datetime.now(dt.UTC)
        rest = []
        for w, (outcome, sections, error) in zip(todo, results, strict=True):
            asked[w.work_id].append((src.name, outcome))
            if error:
                errors[w.work_id].append(error)
            if outcome == "ok":
                out[w.work_id] = Abstract(
                    w.work_id,
                    "ok",
                    joined(sections),
                    None,
                    now,
                    src.name,
                    tuple(sections),
                    w.pmid,
                    w.doi,
                    tuple(asked[w.work_id]),
                )
            else:
                rest.append(w)
        return rest

    @staticmethod
    def _without(w: WorkIds, asked: list[tuple[str, str]], errors: list[str], openalex: Abstract | None) -> Abstract:
        """The answer for a work no source gave an abstract of: ``failed`` when a source failed or was not attempted
        (``error`` says which and why), ``missing`` when OpenAlex had no record and no other source could be asked or
        had one, else ``none``."""
        outcomes = [o for _, o in asked]
        # OpenAlex's time when it alone was asked (None: known from the frame, no request), else when the last answered
        when = openalex.fetched_at if openalex is not None and len(asked) == 1 else dt.datetime.now(dt.UTC)
        if any(o in ("failed", "not_attempted") for o in outcomes):
            status = "failed"
        elif outcomes and outcomes[0] == "missing" and all(o in ("missing", "no_id") for o in outcomes[1:]):
            status = "missing" if asked[0][0] == "openalex" else "none"
        else:
            status = "none"
        return Abstract(
            w.work_id,
            status,
            None,
            "; ".join(errors) if status == "failed" else None,
            when,
            pmid=w.pmid,
            doi=w.doi,
            asked=tuple(asked),
        )
