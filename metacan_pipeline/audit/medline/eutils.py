"""NCBI E-utilities efetch for MEDLINE records, every answer archived and replayed (the ``METACAN_MEDLINE`` modes).

One request per batch of at most ``batch_size`` PMIDs (NCBI's E-utilities guide, "EFetch": ``db=pubmed``,
``retmode=xml``, ``id`` a comma-separated list; POST "is recommended" for long id lists, so every batch is a POST
with the parameters in the body)::

    POST {base}/efetch.fcgi   db=pubmed&retmode=xml&id=1,2,3&tool=...&email=...[&api_key=...]

NCBI's usage rules ("A General Introduction to the E-utilities", "Usage Guidelines and Requirements"): at most three
requests a second without an API key and ten with one (a request starts no sooner than 1/3 s, or 1/10 s with a key,
after the last one started); ``tool`` and ``email`` name the client. A 429 or 5xx answer and a transport error are
retried (tenacity, at most ``max_attempts`` requests per batch, Retry-After honoured up to ``retry_after_max_s``);
another 4xx, or a body that is not a ``PubmedArticleSet``, fails the batch at once. After ``breaker_after``
consecutive failed batches nothing more is sent this run. The API key travels in the POST body only (never in a URL
that httpx logs), is masked in httpx's log lines all the same (:func:`metacan_pipeline.http.mask_secret`), and is
never archived nor put in an error message.

**Archive.** Every answered batch is written, before it is used, to ``<archive>/efetch/<16 hex>.json.gz`` as
``{"request": {"endpoint", "params", "ids"}, "retrieved_at_utc", "payload": <the XML as received>}`` (the key is
not part of the request written). :meth:`MedlineArchive.answers` reads every archived answer back: a PMID asked is
answered (with its record, or with None when NCBI returned none for it), and is never asked again.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from ...http import mask_secret, public_url, retry_after_seconds
from .nlm import EfetchAnswerError, MedlineRecord, parse_efetch

log = logging.getLogger(__name__)

#: Most PMIDs per efetch request (NCBI: "If more than about 200 UIDs are to be provided, the request should be made
#: using the HTTP POST method"; every batch here is a POST, 200 keeps each answer a few MB at most).
MAX_BATCH = 200
#: Requests a second NCBI allows without and with an API key.
RATE_WITHOUT_KEY, RATE_WITH_KEY = 3.0, 10.0
EFETCH = "efetch.fcgi"
#: The efetch parameters of every request (the key, tool and email are added when sent, never archived).
EFETCH_PARAMS = {"db": "pubmed", "retmode": "xml"}
ARCHIVE_SUBDIR = "efetch"


class _Transient(Exception):
    """A batch answer worth asking again: a transport error, a 429 or a 5xx (``retry_after``: the server's wait)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _BatchFailed(Exception):
    """A batch that will not succeed now (retries spent, another 4xx, a body that is not the answer)."""


class MedlineArchive:
    """The archived efetch answers under ``root`` (``<root>/efetch/*.json.gz``)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.folder = self.root / ARCHIVE_SUBDIR

    def write(self, ids: list[str], payload: str, retrieved_at: dt.datetime) -> Path:
        """Archives one answer atomically; returns its file."""
        key = hashlib.sha256(",".join(sorted(ids)).encode()).hexdigest()[:16]
        path = self.folder / f"{key}.json.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        envelope = {
            "request": {"endpoint": EFETCH, "params": EFETCH_PARAMS, "ids": ids},
            "retrieved_at_utc": retrieved_at.isoformat(),
            "payload": payload,
        }
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as fh:
            json.dump(envelope, fh, ensure_ascii=False)
        os.replace(tmp, path)
        return path

    def files(self) -> list[Path]:
        return sorted(self.folder.glob("*.json.gz")) if self.folder.is_dir() else []

    def answers(self, damaged: list[str] | None = None) -> dict[str, MedlineRecord | None]:
        """``{pmid: its record, or None when NCBI answered without one}`` over every archived answer, the newest
        answer of a PMID winning. A file that cannot be read is described in ``damaged`` (when given) and skipped."""
        envelopes = []
        for path in self.files():
            try:
                with gzip.open(path, "rt", encoding="utf-8") as fh:
                    env = json.load(fh)
                records = parse_efetch(env["payload"])
                envelopes.append((str(env.get("retrieved_at_utc", "")), env["request"]["ids"], records))
            except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
                if damaged is not None:
                    damaged.append(f"{path.name}: {type(exc).__name__}: {str(exc)[:120]}")
        out: dict[str, MedlineRecord | None] = {}
        for _, ids, records in sorted(envelopes, key=lambda e: e[0]):
            by_pmid = {r.pmid: r for r in records}
            for pmid in ids:
                out[pmid] = by_pmid.get(pmid)
        return out


@dataclass
class FetchOutcome:
    """What one :meth:`EutilsClient.fetch` did: PMIDs asked and answered, requests sent (retries included),
    batches failed and why (never with the key)."""

    asked: int = 0
    answered: int = 0
    requests: int = 0
    failed_batches: int = 0
    errors: list[str] = field(default_factory=list)


class EutilsClient:
    """Asks efetch for MEDLINE records in batches, politely, archiving each answer (module docstring).

    ``base_url``: the E-utilities root; ``archive``: where answers go; ``api_key``: NCBI's key ("" for none);
    ``email``/``tool``: sent as NCBI asks. ``transport``: an httpx transport (tests); ``sleep`` and ``clock``:
    injectable for tests."""

    def __init__(
        self,
        base_url: str,
        archive: MedlineArchive,
        *,
        api_key: str = "",
        email: str = "",
        tool: str = "metacan_pipeline",
        batch_size: int = MAX_BATCH,
        max_attempts: int = 4,
        breaker_after: int = 2,
        timeout_s: float = 60.0,
        retry_wait_max_s: float = 8.0,
        retry_after_max_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | logging.LoggerAdapter | None = None,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be 1..{MAX_BATCH} PMIDs per efetch request, got {batch_size}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.base_url = base_url.rstrip("/")
        self.archive = archive
        self._api_key = api_key
        mask_secret(api_key)
        self.email, self.tool = email, tool
        self.batch_size, self.max_attempts, self.breaker_after = batch_size, max_attempts, breaker_after
        self.retry_wait_max_s, self.retry_after_max_s = retry_wait_max_s, retry_after_max_s
        self.interval_s = 1.0 / (RATE_WITH_KEY if api_key else RATE_WITHOUT_KEY)
        self.sleep, self.clock = sleep, clock
        self.log = logger or log
        self._last_start: float | None = None
        self.http = httpx.Client(timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> EutilsClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fetch(self, pmids: Iterable[str]) -> FetchOutcome:
        """Asks for ``pmids`` (the caller leaves out those already answered and bounds their number), batch by
        batch; each answer is archived before the next request. Never raises for network or server trouble: a
        failed batch is counted and described in the outcome."""
        ids = list(dict.fromkeys(pmids))
        outcome = FetchOutcome(asked=len(ids))
        failed_in_a_row = 0
        for start in range(0, len(ids), self.batch_size):
            batch = ids[start : start + self.batch_size]
            if self.breaker_after and failed_in_a_row >= self.breaker_after:
                outcome.failed_batches += 1
                outcome.errors.append(
                    f"{len(batch)} PMIDs not asked: E-utilities unreachable ({failed_in_a_row} batches in a row failed)"
                )
                continue
            try:
                payload, records = self._batch(batch, outcome)
            except _BatchFailed as exc:
                failed_in_a_row += 1
                outcome.failed_batches += 1
                outcome.errors.append(f"{len(batch)} PMIDs from {batch[0]}: {exc}")
                self.log.warning(f"efetch: batch of {len(batch)} PMIDs failed: {exc}")
                continue
            failed_in_a_row = 0
            self.archive.write(batch, payload, dt.datetime.now(dt.UTC))
            outcome.answered += len(batch)
            self.log.info(f"efetch: {len(batch)} PMIDs asked, {len(records)} MEDLINE records answered")
        return outcome

    # ---- one batch ----------------------------------------------------------------------------------------------
    def _pace(self) -> None:
        now = self.clock()
        if self._last_start is not None and now - self._last_start < self.interval_s:
            self.sleep(self.interval_s - (now - self._last_start))
        self._last_start = self.clock()

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        after = getattr(exc, "retry_after", None)
        if after is not None:
            return min(after, self.retry_after_max_s)
        return min(self.retry_wait_max_s, 0.5 * 2 ** (state.attempt_number - 1))

    def _post(self, batch: list[str], outcome: FetchOutcome) -> httpx.Response:
        self._pace()
        outcome.requests += 1
        data = {**EFETCH_PARAMS, "id": ",".join(batch), "tool": self.tool}
        if self.email:
            data["email"] = self.email
        if self._api_key:
            data["api_key"] = self._api_key
        url = f"{self.base_url}/{EFETCH}"
        try:
            resp = self.http.post(url, data=data)
        except httpx.TransportError as exc:  # the message names the host at most, never the body (the key)
            raise _Transient(f"{type(exc).__name__} from {public_url(url)}") from None
        if resp.status_code == 429 or resp.status_code >= 500:
            raise _Transient(
                f"HTTP {resp.status_code} from {public_url(url)}", retry_after_seconds(resp.headers.get("Retry-After"))
            )
        if resp.status_code != 200:
            raise _BatchFailed(f"HTTP {resp.status_code} from {public_url(url)}")
        return resp

    def _batch(self, batch: list[str], outcome: FetchOutcome) -> tuple[str, list[MedlineRecord]]:
        retrying = Retrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=self._wait,
            retry=retry_if_exception_type(_Transient),
            sleep=self.sleep,
            reraise=True,
        )
        try:
            resp = retrying(self._post, batch, outcome)
        except _Transient as exc:
            raise _BatchFailed(f"{exc} after {self.max_attempts} attempts") from None
        text = resp.text
        try:
            records = parse_efetch(text)
        except EfetchAnswerError as exc:
            raise _BatchFailed(str(exc)) from None
        return text, records
