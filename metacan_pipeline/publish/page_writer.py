"""Writing the static site of one ``work_pages`` run: the record files and pages chunk by chunk (each chunk noted
in ``page_manifest``, so an interrupted run resumes), and the index of the works in bounded memory (SPEC section 9).
Rendering is in :mod:`.pages`.
"""

from __future__ import annotations

import datetime as dt
import heapq
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
from jinja2 import Environment
from tqdm import tqdm

from ..storage import MetacanStorage
from ..tables.publish import PAGE_MANIFEST_SCHEMA
from .abstract_cascade import AbstractCascade
from .abstracts import Abstract, WorkIds
from .manifest import PagePlan, note_rendered
from .page_files import write_site_file
from .pages import INDEX_MAX_WORKS, UNSCORED, index_row, page_path, render_index, render_work, write_static

#: Pages are written, and ``page_manifest`` updated, in chunks of about this many works (an interrupted run resumes).
CHUNK = 2000


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a sibling temporary file and a rename (no half-written page)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` only when it differs from what is there; True when written."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    write_atomic(path, text)
    return True


def index_order(row: dict) -> tuple:
    """Sort key of the index: newest publication year first (unknown years last), then id."""
    return (-(row["year"] or 0), row["id"])


class PageWriter:
    """Writes the record files and pages of one ``work_pages`` run, chunk by chunk, and notes each chunk
    in ``page_manifest``.

    ``fetcher``: the abstract cascade (None: fetching is off, pages say so and the status is ``off``);
    ``context``: :func:`.pages.page_context` plus ``rendered_at`` and ``page_run_id``; ``renderer``: the
    fingerprint stored with each page (:func:`.manifest.renderer_fingerprint`); ``rendered_at``: the UTC
    time (naive, seconds) stored in the manifest. After writing, ``statuses`` counts the pages by abstract
    status, ``sources`` the pages with an abstract by the source that gave it, ``bytes_written`` the bytes of the
    pages written (as stored), and ``preview`` holds the first ten manifest rows written. ``encoding``: how pages and
    record files are stored (``plain`` or ``gzip``, :mod:`.page_files`); the manifest names the stored page file.
    """

    def __init__(
        self,
        storage: MetacanStorage,
        env: Environment,
        context: dict,
        fetcher: AbstractCascade | None,
        *,
        renderer: str,
        run_id: str,
        rendered_at: dt.datetime,
        encoding: str = "plain",
    ) -> None:
        self.storage, self.env, self.context, self.fetcher = storage, env, context, fetcher
        self.renderer, self.run_id, self.rendered_at, self.encoding = renderer, run_id, rendered_at, encoding
        self.bytes_written = 0
        self.statuses: Counter[str] = Counter()
        self.sources: Counter[str] = Counter()
        self.preview: list[dict] = []

    def abstract_of(self, wid: str, abstracts: dict[str, Abstract]) -> Abstract | None:
        """The abstract a page shows: the cascade's answer, or None when fetching is off."""
        if self.fetcher is None:
            return None
        return abstracts.get(wid) or Abstract(wid, "none", None, None, None)

    def write(self, chunk: list[tuple[str, dict, str, str]]) -> list[dict]:
        """Fetch the chunk's abstracts through the cascade (OpenAlex in batches of 50, not asked again for a work the
        frame saw without one unless its ids are needed; then Europe PMC and Crossref by PMID or DOI), write its
        records and pages, then note them in ``page_manifest``. ``chunk``: ``(id, record, record JSON text, record
        hash)``; returns the manifest rows."""
        wanted = [WorkIds(wid, rec.get("doi") or None, None, bool(rec.get("has_abstract"))) for wid, rec, _, _ in chunk]
        abstracts = self.fetcher.fetch(wanted) if self.fetcher is not None else {}
        site, rows = self.storage.site_dir, []
        for wid, rec, text, digest in chunk:
            abstract = self.abstract_of(wid, abstracts)
            write_site_file(site, f"records/{wid}.json", text, self.encoding)
            path = write_site_file(
                site, page_path(rec), render_work(self.env, rec, abstract, self.context), self.encoding
            )
            self.bytes_written += (site / path).stat().st_size
            status = abstract.status if abstract is not None else "off"
            self.statuses[status] += 1
            if abstract is not None and abstract.status == "ok":
                self.sources[abstract.source or "openalex"] += 1
            values = (wid, digest, self.renderer, path, status, self.rendered_at, self.run_id)
            rows.append(dict(zip(PAGE_MANIFEST_SCHEMA.names, values, strict=True)))
        self.preview.extend(rows[: max(0, 10 - len(self.preview))])
        note_rendered(self.storage, rows)
        return rows


class SiteIndex:
    """What the index of one ``work_pages`` run shows, in bounded memory: the index rows (:func:`.pages.index_row`) of
    the first ``cap`` works in :func:`index_order` (a heap of at most ``cap`` rows, :data:`.pages.INDEX_MAX_WORKS` by
    default), and counts over every work added: ``n_works``, ``versions`` (by model version, ``UNSCORED`` for
    none) and ``kinds`` (by classification source, ``classifier (consensus)`` or ``classifier (candidate)`` when
    it called a category)."""

    def __init__(self, cap: int | None = None) -> None:
        self.cap = INDEX_MAX_WORKS if cap is None else cap
        self.n_works = 0
        self.versions: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self._heap: list[_Last] = []

    def add(self, record: dict) -> None:
        row = index_row(record)
        self.n_works += 1
        self.versions[row["model_version"] or UNSCORED] += 1
        self.kinds[row["source"] + (f" ({row['mode']})" if row["mode"] else "")] += 1
        entry = _Last(index_order(row), row)
        if len(self._heap) < self.cap:
            heapq.heappush(self._heap, entry)
        elif self._heap and entry.key < self._heap[0].key:  # sorts before the last row kept: replaces it
            heapq.heapreplace(self._heap, entry)

    @property
    def listed(self) -> int:
        """How many rows are kept (``min(n_works, cap)``)."""
        return len(self._heap)

    def rows(self) -> list[dict]:
        """The rows kept, in :func:`index_order`."""
        return [e.row for e in sorted(self._heap, key=lambda e: e.key)]

    def counts(self) -> tuple[Counter[str], Counter[str]]:
        """``(works by classification source, works by model version)``; works with no prediction are left out of
        the second."""
        return Counter(self.kinds), Counter({v: n for v, n in self.versions.items() if v != UNSCORED})


class _Last:
    """A heap entry of :class:`SiteIndex`: the heap's top is the row that sorts last in :func:`index_order`."""

    __slots__ = ("key", "row")

    def __init__(self, key: tuple, row: dict) -> None:
        self.key, self.row = key, row

    def __lt__(self, other: _Last) -> bool:
        return self.key > other.key


def _plan_rows(plan: PagePlan, batch_size: int) -> Iterator[tuple[str, bool]]:
    for b in pq.ParquetFile(plan.path).iter_batches(batch_size=batch_size):
        yield from zip(b.column("id").to_pylist(), b.column("render").to_pylist(), strict=True)


def stream_records(
    storage: MetacanStorage,
    plan: PagePlan,
    write: Callable[[list[tuple[str, dict, str, str]]], object],
    chunk_rows: int = CHUNK,
    index_cap: int | None = None,
) -> SiteIndex:
    """Read ``work_records`` in batches of ``chunk_rows``, hand the records the plan renders
    (:func:`.manifest.pages_to_render`, read alongside, row by row) to ``write`` in chunks of at least
    ``chunk_rows`` (the last one smaller), with a progress bar; returns the :class:`SiteIndex` of every record
    (at most ``index_cap`` rows kept, :data:`.pages.INDEX_MAX_WORKS` by default). Memory holds one batch, one chunk and
    the index, whatever the frame. Raises RuntimeError when the plan's ids are not those of ``work_records``,
    in order (the table changed since the plan was made)."""
    index = SiteIndex(index_cap)
    pending: list[tuple[str, dict, str, str]] = []
    flags = _plan_rows(plan, chunk_rows)
    columns = ["id", "record_json", "record_hash"]
    with tqdm(
        total=plan.to_render, desc="work pages", unit="page", mininterval=5, disable=None if plan.to_render else True
    ) as bar:
        for b in storage.iter_batches("work_records", batch_size=chunk_rows, columns=columns):
            for wid, text, digest in zip(*(b.column(c).to_pylist() for c in columns), strict=True):
                planned, render = next(flags, (None, False))
                if planned != wid:
                    raise RuntimeError(
                        f"work_records changed while work_pages ran (read {wid}, planned {planned}): run it again"
                    )
                rec = json.loads(text)
                index.add(rec)
                if render:
                    pending.append((wid, rec, text, digest))
            if len(pending) >= chunk_rows:
                write(pending)
                bar.update(len(pending))
                pending = []
        if pending:
            write(pending)
            bar.update(len(pending))
    if (extra := next(flags, None)) is not None:
        raise RuntimeError(f"work_records changed while work_pages ran (planned {extra[0]}, not read): run it again")
    return index


def write_index(site_dir: Path, env: Environment, index: SiteIndex, newest: dt.datetime | None) -> bool:
    """Write ``index.html`` (:func:`.pages.render_index` of the index's rows and counts, built at ``newest``: when the
    newest page was rendered, so unchanged pages give an unchanged index) when its content changed, and the
    static files beside it; True when the index was rewritten."""
    built_at = f"{newest:%Y-%m-%d %H:%M} UTC" if newest else None
    html = render_index(env, index.rows(), built_at=built_at, n_works=index.n_works, versions=index.versions)
    written = write_if_changed(site_dir / "index.html", html)
    write_static(site_dir)
    return written
