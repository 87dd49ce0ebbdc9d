"""Live abstracts for the published pages (SPEC section 9: abstracts are fetched live, never stored).

Abstracts are fetched from the OpenAlex API when a page is rendered, held in a bounded in-memory
cache with a time-to-live, and never written to disk or to the database (SPEC section 2: abstracts
are not stored). Each page says honestly what it knows: the abstract, "OpenAlex has no abstract for
this work", "OpenAlex returned no record for this id", or "the fetch failed just now" (see
:class:`Abstract`).

One request per batch of at most 50 work ids::

    GET {base_url}/works?filter=ids.openalex:W1|W2|...&select=id,abstract_inverted_index,ids&per_page=50
        [&api_key=...][&mailto=...]

The answer's ``ids`` (the work's PMID and DOI) are kept on each :class:`Abstract`, so the abstract cascade
(:mod:`.abstract_cascade`) can ask Europe PMC and Crossref for a work OpenAlex has no abstract of.

OpenAlex docs used:

- "Filter works" (docs.openalex.org/api-entities/works/filter-works): ``ids.openalex`` (alias
  ``openalex``) is "the OpenAlex ID for a work"; short ids (``W123``) are accepted.
- "Filter entity lists", section "Addition (OR)"
  (docs.openalex.org/how-to-use-the-api/get-lists-of-entities/filter-entity-lists): values separated
  by ``|`` are OR-ed, "particularly useful when you want to retrieve many records by ID all at once";
  "You can combine up to 50 values for a given filter in this way" (the newer guide at
  developers.openalex.org/guides/filtering allows 100; 50 is within both).
- "Select fields" (docs.openalex.org/how-to-use-the-api/get-lists-of-entities/select-fields):
  ``select`` limits the returned root-level fields, here to ``id``, ``abstract_inverted_index`` and ``ids``.
- "Page through results" (developers.openalex.org/guides/page-through-results): ``per_page``
  defaults to 25 and ranges 1-100, so a 50-id batch without ``per_page`` would come back half empty.
- "Work object", ``abstract_inverted_index``: the abstract as ``{token: [positions]}``, or null when
  OpenAlex has no abstract; rebuilt by :func:`metacan_pipeline.openalex.abstract.deinvert`. ``ids``: the work's
  external ids, ``pmid`` as ``https://pubmed.ncbi.nlm.nih.gov/<digits>`` and ``doi`` as ``https://doi.org/10...``.
- "Rate limits and authentication": ``api_key`` parameter; 429 with ``Retry-After``.

Failures: transport errors, timeouts, 429 and 5xx are retried (tenacity, at most ``max_attempts``
requests per batch, Retry-After honoured up to ``retry_after_max_s``); another 4xx or a body that is
not the expected JSON fails the batch at once. Failed answers are never cached, so the next fetch
tries again. After ``breaker_after`` consecutive failed batches nothing more is sent by this fetcher
(one fetcher serves one page build). ``timeout_s`` bounds each request in all, headers and body, not each read.
The API key is sent but never logged nor put in an error message (the ``httpx`` log filter of
:mod:`metacan_pipeline.openalex.api` masks it in request lines).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from hashlib import sha256

import httpx
from cachetools import TTLCache
from tenacity import RetryCallState, retry, retry_if_exception_type, stop_after_attempt, wait_random_exponential
from tqdm import tqdm

from .. import settings
from ..http import mask_secret, retry_after_seconds
from ..openalex.abstract import deinvert, tidy_abstract
from ..openalex.api import TransientHTTPError
from ..openalex.ids import bare_pmid, is_work_id, short_id
from .abstract_text import Section

log = logging.getLogger(__name__)

#: Most ids OR-ed in one filter (OpenAlex docs, "Filter entity lists": up to 50 values per filter).
MAX_BATCH = 50
#: The most bytes one answer of OpenAlex may hold, decoded (a page of 50 works' abstracts is well under 1 MB): a larger
#: one is a failure ("answer too large"), never read whole into memory. A compressed answer is decompressed a bounded
#: piece at a time (:class:`_CappedBody`), so a small gzip body that expands to gigabytes stops at the cap too.
MAX_ANSWER_BYTES = 8 * 1024 * 1024
#: The only fields asked for (OpenAlex docs, "Select fields").
SELECT = "id,abstract_inverted_index,ids"
#: The filter that matches works by OpenAlex id (OpenAlex docs, "Filter works": ``ids.openalex``).
ID_FILTER = "ids.openalex"

STATUSES = ("ok", "none", "missing", "failed")
#: Where an abstract can come from, in the cascade's default order (:mod:`.abstract_cascade`).
SOURCES = ("openalex", "europepmc", "crossref")
#: What a source said when asked for one work (``Abstract.asked``): an abstract, a record without one, no record, a
#: failed fetch, not attempted (its breaker is open or its time ran out), or not asked (no PMID or DOI to ask it by).
OUTCOMES = ("ok", "none", "missing", "failed", "not_attempted", "no_id")


@dataclass(frozen=True)
class WorkIds:
    """A work and the ids the abstract sources are asked by: the short OpenAlex id, and its DOI (bare ``10.x/y`` or
    as a ``https://doi.org/`` URL) and PMID (digits) when known. OpenAlex's answer adds the ids its record holds.
    ``has_abstract``: what the frame saw (False: its OpenAlex record had no abstract, so the cascade does not ask
    OpenAlex again, unless it needs OpenAlex's ids: no DOI or PMID is known and Europe PMC is to be asked)."""

    work_id: str
    doi: str | None = None
    pmid: str | None = None
    has_abstract: bool | None = None


def work_id_of(work: str | WorkIds) -> str:
    """The short work id of ``work`` (a short id, or :class:`WorkIds`)."""
    return work.work_id if isinstance(work, WorkIds) else work


@dataclass(frozen=True)
class Abstract:
    """What the abstract sources said about one work's abstract (:class:`AbstractFetcher`: OpenAlex alone;
    :class:`.abstract_cascade.AbstractCascade`: OpenAlex, then Europe PMC, then Crossref).

    ``status``:
      - ``"ok"``: ``text`` holds the de-inverted abstract (plain text, markup removed; escape it when
        rendering);
      - ``"none"``: OpenAlex has the work and no abstract (``abstract_inverted_index`` null or empty);
      - ``"missing"``: OpenAlex returned no record for this id (unknown, deleted or merged away);
      - ``"failed"``: the fetch failed just now; ``error`` says why (HTTP status, timeout, parse
        problem, or ``not attempted: OpenAlex unreachable (N consecutive batches failed)``).

    ``text`` is set only for ``"ok"`` and ``error`` only for ``"failed"``. ``fetched_at`` is the UTC
    time the answer arrived (or the failure happened); a cached answer keeps its original time.

    ``source``: with ``"ok"``, the source that answered (one of :data:`SOURCES`; None is OpenAlex, for an answer
    made before sources were named). ``sections``: the abstract as ``(heading, text)`` sections (heading None for an
    unstructured one); ``text`` is their canonical join (:func:`.abstract_text.joined`), what a page and a coder are
    shown. ``pmid`` and ``doi``: the work's ids as OpenAlex's record gives them (None when it gave none or was not
    asked). ``asked``: ``(source, outcome)`` for each source asked, in order (:data:`OUTCOMES`); empty for an
    answer of OpenAlex alone.
    """

    work_id: str
    status: str
    text: str | None
    error: str | None
    fetched_at: dt.datetime
    source: str | None = None
    sections: tuple[Section, ...] = ()
    pmid: str | None = None
    doi: str | None = None
    asked: tuple[tuple[str, str], ...] = ()

    @property
    def shown_sections(self) -> tuple[Section, ...]:
        """The sections a page shows: ``sections``, or the text as one section without a heading."""
        return self.sections or (((None, self.text),) if self.text else ())

    @property
    def sha256(self) -> str | None:
        """SHA-256 (hex) of ``text`` in UTF-8: what the coding study archives as the abstract it showed; None
        without text."""
        return sha256(self.text.encode("utf-8")).hexdigest() if self.text else None

    @property
    def why_none(self) -> str | None:
        """Why no source gave an abstract (None with one): ``fetch_failed`` (a source failed or was not attempted),
        ``no_ids`` (the sources beyond OpenAlex had no PMID or DOI to be asked by), or ``none_had_one`` (every source
        asked answered without one)."""
        if self.status == "ok":
            return None
        outcomes = dict(self.asked)
        if self.status == "failed" or any(o in ("failed", "not_attempted") for o in outcomes.values()):
            return "fetch_failed"
        later = [o for s, o in self.asked if s != "openalex"]
        if later and all(o == "no_id" for o in later):
            return "no_ids"
        return "none_had_one"


class _BatchFailed(Exception):
    """A batch that will not succeed now (retries spent, a 4xx, an unreadable body)."""


class AbstractFetcher:
    """Fetches abstracts of OpenAlex works in batches, with a bounded TTL cache; one per page build.

    ``base_url``: API root; default ``$METACAN_OPENALEX_API_URL`` or ``https://api.openalex.org``
    (:func:`metacan_pipeline.settings.openalex_api_url`).
    ``batch_size``: ids per request, 1 to 50 (ValueError otherwise).
    ``cache_size``: most answers held (0 disables the cache); ``ttl_seconds``: how long an answer is
    served from the cache, in seconds of ``clock`` (``time.monotonic`` by default; injectable for tests).
    ``timeout_s``: seconds one request may take in all (connect, and reading the whole answer).
    ``max_attempts``: requests per batch at most, retries included. ``breaker_after``: consecutive failed
    batches after which this fetcher sends nothing more, in this or a later :meth:`fetch` (0 disables). ``retry_wait_max_s``: cap of the exponential backoff
    between retries; ``retry_after_max_s``: cap on a server's Retry-After, both in seconds.
    ``api_key_env``: environment variable holding the API key (absent or empty: no key).
    ``mailto``: sent as the ``mailto`` parameter when given. ``transport``: an httpx transport that can answer asynchronously, e.g. ``httpx.MockTransport`` (tests).

    Attributes: ``calls`` counts HTTP requests sent since construction (retries included);
    ``cache`` is the :class:`cachetools.TTLCache` (``work_id -> Abstract``), in memory only.
    Thread-safe: the cache and the counter are guarded by a lock.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        batch_size: int = MAX_BATCH,
        cache_size: int = 10_000,
        ttl_seconds: float = 3600,
        timeout_s: float = 10.0,
        max_attempts: int = 3,
        breaker_after: int = 2,
        api_key_env: str = "OPENALEX_API_KEY",
        mailto: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        retry_wait_max_s: float = 8.0,
        retry_after_max_s: float = 30.0,
        logger: logging.Logger | logging.LoggerAdapter | None = None,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(
                f"batch_size must be 1..{MAX_BATCH} (OpenAlex ORs at most {MAX_BATCH} values in one filter), got {batch_size}"
            )
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if cache_size < 0 or ttl_seconds <= 0:
            raise ValueError(f"cache_size must be >= 0 and ttl_seconds > 0, got {cache_size} and {ttl_seconds}")
        if base_url is None:
            base_url = settings.openalex_api_url()
        self.base_url = base_url
        self.log = logger or log  # the asset's context.log: a failed batch is in the run's log, not on bare stderr
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self.breaker_after = breaker_after
        self.timeout_s = timeout_s
        self.mailto = mailto
        self.retry_wait_max_s = retry_wait_max_s
        self.retry_after_max_s = retry_after_max_s
        self._api_key = settings.secret(api_key_env)
        mask_secret(self._api_key)
        self.cache: TTLCache[str, Abstract] | None = (
            TTLCache(maxsize=cache_size, ttl=ttl_seconds, timer=clock) if cache_size else None
        )
        self.calls = 0
        #: consecutive failed batches over this fetcher's life: the breaker holds across fetch() calls (a page
        #: build calls fetch() once per chunk); a batch that gets any answer resets it
        self.failed_in_a_row = 0
        self._lock = threading.Lock()
        self._loop = _Loop()
        weakref.finalize(self, self._loop.stop)  # never closed: the loop's thread ends with the fetcher
        self.http = httpx.AsyncClient(base_url=base_url, timeout=timeout_s, transport=transport)

    # ---- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Closes the HTTP client and its event loop (the cache stays readable; a later :meth:`fetch` is a
        RuntimeError)."""
        self._loop.close(self.http)

    def __enter__(self) -> AbstractFetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- public ------------------------------------------------------------------------------
    def fetch(self, work_ids: Iterable[str | WorkIds], progress: bool = False) -> dict[str, Abstract]:
        """``{work_id: Abstract}`` with one entry per distinct id, in first-seen order.

        ``work_ids``: short work ids (``W123``) or :class:`WorkIds` (only the work id is used: OpenAlex is asked by
        it); every one is checked before any request and a bad one
        (a full URL, an empty string, anything but ``W`` and 1-19 ASCII digits) raises ValueError
        naming it; a bare string raises TypeError. Cached answers cost no request; the others go in
        batches of ``batch_size``, one GET each (retries aside). Never raises for network or server
        trouble: those works come back with status ``"failed"``. ``progress`` shows a tqdm bar over
        the batches.
        """
        if isinstance(work_ids, (str, bytes)):
            raise TypeError("work_ids must be an iterable of work ids, not a single string")
        ids = list(dict.fromkeys(work_id_of(w) for w in work_ids))
        for wid in ids:
            if not is_work_id(wid):
                raise ValueError(f"not a short OpenAlex work id (W followed by digits): {wid!r}")
        out: dict[str, Abstract] = {}
        todo: list[str] = []
        with self._lock:
            for wid in ids:
                hit = self.cache.get(wid) if self.cache is not None else None
                if hit is None:
                    todo.append(wid)
                else:
                    out[wid] = hit
        batches = [todo[i : i + self.batch_size] for i in range(0, len(todo), self.batch_size)]
        with tqdm(total=len(batches), desc="abstracts", unit="batch", disable=None if progress else True) as bar:
            for batch in batches:
                if self.breaker_after and self.failed_in_a_row >= self.breaker_after:
                    now = _utcnow()
                    why = f"not attempted: OpenAlex unreachable ({self.failed_in_a_row} consecutive batches failed)"
                    for wid in batch:
                        out[wid] = Abstract(wid, "failed", None, why, now)
                    bar.update(1)
                    continue
                answers = self._fetch_batch(batch)
                self.failed_in_a_row = (
                    self.failed_in_a_row + 1 if all(a.status == "failed" for a in answers.values()) else 0
                )
                with self._lock:
                    for wid, ans in answers.items():
                        if ans.status != "failed" and self.cache is not None:
                            self.cache[wid] = ans
                out.update(answers)
                bar.update(1)
        return {wid: out[wid] for wid in ids}

    # ---- one batch ---------------------------------------------------------------------------
    def _fetch_batch(self, batch: list[str]) -> dict[str, Abstract]:
        """Answers for one batch: never raises for network or server trouble."""
        try:
            payload = self._get(batch)
        except _BatchFailed as exc:
            now = _utcnow()
            self.log.warning("abstracts: batch of %d works failed: %s", len(batch), exc)
            return {wid: Abstract(wid, "failed", None, str(exc), now) for wid in batch}
        now = _utcnow()
        records: dict[str, dict] = {}
        for rec in payload["results"]:
            wid = short_id(rec.get("id")) if isinstance(rec, dict) else None
            if wid is not None and (wid not in records or not records[wid].get("abstract_inverted_index")):
                records[wid] = rec  # a duplicate result only replaces one without an abstract
        meta = payload.get("meta")
        count = meta.get("count") if isinstance(meta, dict) else None
        truncated = isinstance(count, int) and not isinstance(count, bool) and count > len(payload["results"])
        out: dict[str, Abstract] = {}
        for wid in batch:
            rec = records.get(wid)
            if rec is None:
                if truncated:  # the server holds more than it sent: absence proves nothing
                    out[wid] = Abstract(
                        wid,
                        "failed",
                        None,
                        f"OpenAlex answered {len(payload['results'])} of "
                        f"{count} matching records; this one was not among them",
                        now,
                    )
                else:
                    out[wid] = Abstract(wid, "missing", None, None, now)
                continue
            index = rec.get("abstract_inverted_index")
            if index is not None and index != {} and not _readable(index):
                out[wid] = Abstract(
                    wid,
                    "failed",
                    None,
                    "OpenAlex sent an abstract_inverted_index that cannot be read "
                    f"(a {type(index).__name__} without token -> [positions] entries)",
                    now,
                )
                continue
            text = tidy_abstract(deinvert(index))
            pmid, doi = record_ids(rec)
            out[wid] = (
                Abstract(wid, "ok", text, None, now, "openalex", pmid=pmid, doi=doi)
                if text
                else Abstract(wid, "none", None, None, now, pmid=pmid, doi=doi)
            )
        return out

    def _params(self, batch: list[str]) -> dict[str, str | int]:
        params: dict[str, str | int] = {
            "filter": f"{ID_FILTER}:" + "|".join(batch),
            "select": SELECT,
            "per_page": self.batch_size,
        }
        if self.mailto:
            params["mailto"] = self.mailto
        if self._api_key:
            params["api_key"] = self._api_key
        return params

    def _mask(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _wait(self, state: RetryCallState) -> float:
        """Exponential backoff with jitter (capped at ``retry_wait_max_s``), at least the server's
        Retry-After (capped at ``retry_after_max_s``)."""
        exc = state.outcome.exception() if state.outcome else None
        base = (
            wait_random_exponential(multiplier=0.5, max=self.retry_wait_max_s)(state)
            if self.retry_wait_max_s > 0
            else 0.0
        )
        if isinstance(exc, TransientHTTPError) and exc.retry_after is not None:
            return max(base, exc.retry_after)
        return base

    def _get(self, batch: list[str]) -> dict:
        """The JSON page for one batch, or :class:`_BatchFailed` naming the HTTP status or parse problem."""
        params = self._params(batch)
        attempts = 0

        @retry(
            retry=retry_if_exception_type(TransientHTTPError),
            stop=stop_after_attempt(self.max_attempts),
            wait=self._wait,
            reraise=True,
        )
        def attempt() -> dict:
            nonlocal attempts
            attempts += 1
            with self._lock:
                self.calls += 1
            try:
                resp = self._get_within_deadline(params)
            except httpx.TimeoutException as exc:
                raise TransientHTTPError(f"timeout ({type(exc).__name__}, limit {self.timeout_s:g} s)") from None
            except httpx.TransportError as exc:
                raise TransientHTTPError(f"{type(exc).__name__}: {self._mask(str(exc))[:200]}") from None
            except httpx.HTTPError as exc:  # e.g. a body that does not decode as its Content-Encoding says
                raise _BatchFailed(f"{type(exc).__name__}: {self._mask(str(exc))[:200]}") from None
            code = resp.status_code
            if code == 429 or code >= 500:
                raise TransientHTTPError(
                    f"HTTP {code}", retry_after_seconds(resp.headers.get("Retry-After"), self.retry_after_max_s)
                )
            if not 200 <= code < 300:
                raise _BatchFailed(f"HTTP {code} from OpenAlex /works (not retried): {self._mask(resp.text)[:200]}")
            try:
                payload = resp.json()
            except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested deeper than the parser goes
                raise _BatchFailed(
                    f"OpenAlex /works answered HTTP {code} with a body that is not JSON ({exc})"
                ) from None
            if not isinstance(payload, dict) or not isinstance(payload.get("results"), list):
                raise _BatchFailed(
                    f"OpenAlex /works answered HTTP {code} with JSON that is not a list page "
                    f"(no 'results' list; got a {type(payload).__name__})"
                )
            return payload

        try:
            return attempt()
        except TransientHTTPError as exc:
            raise _BatchFailed(f"{exc} (gave up after {attempts} attempt{'s' if attempts != 1 else ''})") from None

    def _get_within_deadline(self, params: dict) -> httpx.Response:
        """GET /works, given up (``httpx.ReadTimeout``) once ``timeout_s`` has passed in all, headers and body:
        httpx's own timeout bounds each read, so a server trickling a byte at a time, in its headers or its body,
        would otherwise hold the page build (or a served page) without limit. The request runs on this fetcher's
        event loop (:class:`_Loop`), where the deadline cancels it and closes its connection."""
        return self._loop.run(self._aget(params))

    async def _aget(self, params: dict) -> httpx.Response:
        return await capped_get(self.http, "/works", params, self.timeout_s)


async def capped_get(
    client: httpx.AsyncClient, path: str, params: dict, timeout_s: float, headers: dict | None = None
) -> httpx.Response:
    """GET ``path`` on ``client``, the answer read whole within ``timeout_s`` seconds in all, headers and body
    (``httpx.ReadTimeout`` after that), its body decoded and capped at :data:`MAX_ANSWER_BYTES` (:class:`_CappedBody`;
    ``httpx.DecodingError`` for a larger or undecodable successful answer). An error answer keeps its status even when
    its body cannot be read. Run it on the loop that owns ``client`` (:class:`_Loop`)."""
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("GET", path, params=params, headers={**ACCEPT, **(headers or {})}) as resp:
                if resp.is_stream_consumed:  # read by an in-process transport (httpx.MockTransport): decoded
                    body = _CappedBody("", resp.request)
                    body.feed(resp.content)
                else:
                    try:
                        body = _CappedBody(resp.headers.get("content-encoding", ""), resp.request)
                        async with contextlib.aclosing(resp.aiter_raw()) as chunks:
                            async for chunk in chunks:
                                body.feed(chunk)
                        body.finish()
                    except httpx.DecodingError as exc:
                        if resp.is_success:
                            raise
                        # an error answer keeps its status (a 5xx is retried) and says why its body is not shown
                        body = _CappedBody("", resp.request)
                        body.feed(f"(body not read: {exc})".encode())
    except TimeoutError:
        raise httpx.ReadTimeout(f"the answer took longer than {timeout_s:g} s in all") from None
    kept = [(k, v) for k, v in resp.headers.items() if k.lower() not in ("content-encoding", "content-length")]
    return httpx.Response(resp.status_code, headers=kept, content=bytes(body.data), request=resp.request)


#: The encodings the fetcher accepts: gzip (what OpenAlex sends) or none.
ACCEPT = {"Accept-Encoding": "gzip"}


class _CappedBody:
    """An answer's body as it arrives, decoded from its ``Content-Encoding`` (none, ``gzip`` or ``deflate``) and
    capped at :data:`MAX_ANSWER_BYTES` decoded bytes: zlib is asked for at most one byte past the cap per call
    (``max_length``), so no call returns more than that. Every member of a multi-member gzip body is decoded.
    ``httpx.DecodingError`` for an answer too large, a body that does not decode (bytes after its end included), or
    an encoding the fetcher did not ask for."""

    def __init__(self, encoding: str, request: httpx.Request) -> None:
        self.request = request
        self.data = bytearray()
        self._fed = False
        name = encoding.strip().lower()
        self._gzip = name in ("gzip", "x-gzip")
        if name in ("", "identity"):
            self._zlib = None
        elif name in ("gzip", "x-gzip", "deflate"):
            self._zlib = zlib.decompressobj(zlib.MAX_WBITS | 16 if name != "deflate" else zlib.MAX_WBITS)
        else:
            raise httpx.DecodingError(f"answer in an encoding not asked for: {encoding[:40]!r}", request=request)

    def feed(self, chunk: bytes) -> None:
        if self._zlib is None:
            self._add(chunk)
            return
        self._fed = self._fed or bool(chunk)
        try:
            while chunk:
                self._add(self._zlib.decompress(chunk, MAX_ANSWER_BYTES + 1 - len(self.data)))
                chunk = self._zlib.unconsumed_tail
                if self._zlib.eof and self._zlib.unused_data:  # bytes after the end of a compressed stream
                    if not self._gzip:
                        raise httpx.DecodingError("data after the end of the deflate body", request=self.request)
                    chunk = self._zlib.unused_data  # the next member of a multi-member gzip (RFC 1952)
                    self._zlib = zlib.decompressobj(zlib.MAX_WBITS | 16)
        except zlib.error as exc:
            raise httpx.DecodingError(
                f"the body does not decode as its Content-Encoding says ({exc})", request=self.request
            ) from None

    def finish(self) -> None:
        if self._zlib is not None:
            if self._fed and not self._zlib.eof:
                raise httpx.DecodingError("the compressed body ends before its end", request=self.request)
            self._add(self._zlib.flush())

    def _add(self, piece: bytes) -> None:
        self.data.extend(piece)
        if len(self.data) > MAX_ANSWER_BYTES:
            raise httpx.DecodingError(
                f"answer too large (over {MAX_ANSWER_BYTES:,} bytes, not read further)", request=self.request
            )


class _Loop:
    """An asyncio event loop on a daemon thread of its own, where a fetcher's requests run (one at a time per calling
    thread, several callers at once): the only way to put one deadline on a whole httpx request, as a cancelled task
    closes its connection; a blocking client can only bound each read. A daemon thread never holds the interpreter
    open; a fetcher that is never closed stops its loop when it is garbage-collected (``weakref.finalize``)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="abstracts-http", daemon=True)
        self.thread.start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self, client: httpx.AsyncClient) -> None:
        if self.loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(client.aclose(), self.loop).result()
        self.stop()

    def stop(self) -> None:
        """Stop the loop and its thread (idempotent)."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def bare_doi(value: object) -> str | None:
    """A DOI as ``10.x/y`` in lower case (DOIs are case-insensitive), from a bare DOI or a ``doi.org`` URL; None
    for anything else."""
    if not isinstance(value, str):
        return None
    doi = value.strip()
    for prefix in ("https://doi.org/", "http://doi.org/", "https://dx.doi.org/", "http://dx.doi.org/", "doi:"):
        if doi.lower().startswith(prefix):
            doi = doi[len(prefix) :]
            break
    doi = doi.strip().lower()
    return doi if doi.startswith("10.") and "/" in doi and not any(c.isspace() for c in doi) else None


def record_ids(rec: dict) -> tuple[str | None, str | None]:
    """``(pmid, doi)`` of an OpenAlex work record (``ids.pmid``, ``ids.doi``, else ``doi``), bare."""
    ids = rec.get("ids") if isinstance(rec.get("ids"), dict) else {}
    return bare_pmid(ids.get("pmid")), bare_doi(ids.get("doi")) or bare_doi(rec.get("doi"))


def _readable(index: object) -> bool:
    """True when an inverted index has at least one ``token -> [int positions]`` entry (bools are not ints)."""
    return isinstance(index, dict) and any(
        isinstance(ps, list) and any(isinstance(p, int) and not isinstance(p, bool) for p in ps)
        for ps in index.values()
    )


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
