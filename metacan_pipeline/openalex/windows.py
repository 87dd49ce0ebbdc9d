"""API refresh windows: one archive folder per ``updated_date`` window, and which window comes next.

Layout under the API archive root (``OpenAlexFiles.api_archive_dir``)::

    budget-<YYYY-MM-DD>.json                 the per-day call/cost ledger, shared by every window
    window=<from>_<to>/pages/<query>/<hash>.json.gz   archived pages (OpenAlexClient)
    window=<from>_<to>/window.json           written last, atomically: the window is complete

A window covers works whose ``updated_date`` is in ``[from, to]``, both ends inclusive (OpenAlex docs,
"Filter works": ``from_updated_date`` / ``to_updated_date``). Consecutive windows share their boundary
day on purpose: a work updated on day ``to`` after the harvest ran is picked up by the next window, and
the overlap costs nothing but a few duplicate records (the frame keeps the newest version of a work).
A window folder without ``window.json`` is incomplete (a harvest stopped by the budget or an error):
it is resumed, never skipped.

A *publication-date* window (the optional daily refresh, schedule ``daily_publication_refresh``) covers the works
whose ``publication_date`` is in ``[from, to]`` (OpenAlex filters ``from_publication_date`` /
``to_publication_date``) and lives in ``window=published-<from>_<to>/``: a partition of its own, never taken for an
``updated_date`` window when the next one is chosen (:func:`windows_on_disk` skips it); its dates are always given.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

WINDOW_PREFIX = "window="
MARKER = "window.json"
#: The date a window is taken over: OpenAlex's ``updated_date`` (the weekly refresh) or ``publication_date``.
UPDATED, PUBLISHED = "updated_date", "publication_date"
#: What a publication-date window's folder name carries after ``window=``.
PUBLISHED_TAG = "published-"
#: The first window, when no window is complete yet, reaches this many days back.
FIRST_WINDOW_DAYS = 7


@dataclass(frozen=True)
class Window:
    """An inclusive window of ISO dates ``YYYY-MM-DD`` over ``by`` (:data:`UPDATED` or :data:`PUBLISHED`)."""

    from_date: str
    to_date: str
    by: str = UPDATED

    @property
    def name(self) -> str:
        """The folder name and the frame's partition key: ``window=<from>_<to>``, or ``window=published-<from>_<to>``
        for a publication-date window."""
        tag = PUBLISHED_TAG if self.by == PUBLISHED else ""
        return f"{WINDOW_PREFIX}{tag}{self.from_date}_{self.to_date}"

    def folder(self, api_root: Path) -> Path:
        return Path(api_root) / self.name


def parse_date(value: str, what: str) -> dt.date:
    """An ISO date, or ValueError naming ``what`` (the config field) and the expected form."""
    try:
        return dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}={value!r} is not a date of the form YYYY-MM-DD") from None


def read_marker(folder: Path) -> dict | None:
    """The ``window.json`` of a window folder, or None when the window is incomplete (or unreadable)."""
    try:
        doc = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("from") and doc.get("to") else None


def windows_on_disk(api_root: Path) -> tuple[list[dict], list[Window]]:
    """``(completed markers sorted by to, incomplete windows sorted by from)`` under ``api_root``.
    Folders whose name is not ``window=<date>_<date>`` are ignored."""
    done, open_ = [], []
    root = Path(api_root)
    if not root.exists():
        return [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(WINDOW_PREFIX)):
        try:
            f, t = folder.name[len(WINDOW_PREFIX) :].split("_")
            w = Window(parse_date(f, "from").isoformat(), parse_date(t, "to").isoformat())
        except ValueError:
            continue
        marker = read_marker(folder)
        (done.append(marker) if marker else open_.append(w))
    return sorted(done, key=lambda m: (m["to"], m["from"])), sorted(open_, key=lambda w: (w.from_date, w.to_date))


def sync_windows(api_root: Path) -> list[dict]:
    """Every window folder under ``api_root`` of either kind, newest end first: ``name``, ``by`` (:data:`UPDATED` or
    :data:`PUBLISHED`), ``from``, ``to``, ``complete`` (its ``window.json`` is there) and, for a complete one, the
    marker's ``completed_at``, ``works``, ``pages``, ``calls_made`` and ``cost_usd`` (None otherwise). An incomplete
    window is a harvest stopped by the day's budget or an error (the next run resumes an ``updated_date`` one).
    Folders whose name is not a window's are ignored; a missing ``api_root`` has none."""
    root = Path(api_root)
    if not root.is_dir():
        return []
    out = []
    for folder in (p for p in root.iterdir() if p.is_dir() and p.name.startswith(WINDOW_PREFIX)):
        rest = folder.name[len(WINDOW_PREFIX) :]
        by = PUBLISHED if rest.startswith(PUBLISHED_TAG) else UPDATED
        try:
            f, t = rest.removeprefix(PUBLISHED_TAG).split("_")
            frm, to = parse_date(f, "from").isoformat(), parse_date(t, "to").isoformat()
        except ValueError:
            continue
        marker = read_marker(folder) or {}
        row = {"name": folder.name, "by": by, "from": frm, "to": to, "complete": bool(marker)}
        row |= {k: marker.get(k) for k in ("completed_at", "works", "pages", "calls_made", "cost_usd")}
        out.append(row)
    return sorted(out, key=lambda w: (w["to"], w["from"], w["name"]), reverse=True)


def next_window(
    api_root: Path, today: dt.date, from_date: str | None = None, to_date: str | None = None
) -> tuple[Window, str]:
    """The window to harvest and why (a sentence for the log).

    Given dates win. Otherwise: the oldest incomplete window that ends after the last completed one is
    resumed as it is (same folder, same queries, so its archived pages are reused); else the window runs
    from the last completed window's ``to`` (or ``FIRST_WINDOW_DAYS`` before ``to`` when none is
    complete) to ``to_date`` or ``today``. Raises ValueError for a malformed date, ``from > to`` or ``to`` after ``today``.
    """
    done, open_ = windows_on_disk(api_root)
    last_to = done[-1]["to"] if done else None
    if from_date is None and to_date is None:
        pending = [w for w in open_ if last_to is None or w.to_date > last_to]
        if pending:
            w = pending[0]
            return w, f"resuming the incomplete window {w.name} (no window.json yet)"
    to = parse_date(to_date, "to_updated_date") if to_date else today
    if to > today:  # marked complete, it would make every later default window start after today
        raise ValueError(f"to_updated_date {to} is after today ({today}, UTC): a window cannot end in the future")
    if from_date:
        frm, why = parse_date(from_date, "from_updated_date"), "from_updated_date as configured"
    elif last_to:
        frm, why = (
            dt.date.fromisoformat(last_to),
            f"from the end of the last completed window ({done[-1]['from']}_{last_to})",
        )
    else:
        frm, why = (
            to - dt.timedelta(days=FIRST_WINDOW_DAYS),
            f"no completed window yet: the {FIRST_WINDOW_DAYS} days before {to}",
        )
    if frm > to:
        raise ValueError(f"from_updated_date {frm} is after to_updated_date {to}: a window needs from <= to")
    return Window(frm.isoformat(), to.isoformat()), why


def publication_window(
    today: dt.date, days: int, from_date: str | None = None, to_date: str | None = None
) -> tuple[Window, str]:
    """The publication-date window to harvest and why: given dates win; otherwise it ends on ``to_date`` or ``today``
    and starts ``days`` days before. Raises ValueError for a malformed date, ``from > to``, ``to`` after ``today`` or
    ``days`` below 1."""
    if days < 1:
        raise ValueError(f"a publication-date window needs at least 1 day, got {days}")
    to = parse_date(to_date, "to_publication_date") if to_date else today
    if to > today:
        raise ValueError(f"to_publication_date {to} is after today ({today}, UTC): a window cannot end in the future")
    if from_date:
        frm, why = parse_date(from_date, "from_publication_date"), "from_publication_date as configured"
    else:
        frm, why = to - dt.timedelta(days=days), f"publication dates from {days} days before {to} to {to}"
    if frm > to:
        raise ValueError(f"from_publication_date {frm} is after to_publication_date {to}: a window needs from <= to")
    return Window(frm.isoformat(), to.isoformat(), PUBLISHED), why


def write_marker(folder: Path, doc: dict) -> Path:
    """Write ``window.json`` atomically (temporary file, then rename): present means complete."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{MARKER}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, folder / MARKER)
    return folder / MARKER


@dataclass
class Harvest:
    """What the pages of one window held: pages read, distinct work ids, summed ``meta.cost_usd``
    (pages read back from the archive included, so the figures are the whole window's)."""

    pages: int = 0
    works: set = field(default_factory=set)
    cost_usd: float = 0.0

    def add(self, page: dict) -> int:
        """Count one page; returns its number of results."""
        self.pages += 1
        self.works.update(r.get("id") for r in page["results"] if isinstance(r, dict))
        try:
            self.cost_usd += float((page.get("meta") or {}).get("cost_usd") or 0.0)
        except (TypeError, ValueError):
            pass
        return len(page["results"])


def harvest(pages_of: Callable[[str], Iterable[dict]], filters: list[str], log: Callable[[str], None]) -> Harvest:
    """Read every page of every filter (``pages_of``: :meth:`OpenAlexClient.iter_pages`), logging the
    works of each query. Exceptions of the client (budget spent, a refused request) propagate."""
    out = Harvest()
    for f in filters:
        n = sum(out.add(page) for page in pages_of(f))
        log(f"{f[:100]}{'...' if len(f) > 100 else ''}: {n} works")
    return out


def completion_marker(window: Window, calls_made: int, harvested: Harvest, queries: int) -> dict:
    """The ``window.json`` of a window read to its end. ``calls_made``: by the run that completed the
    window; pages, works and cost_usd: the whole window, including pages bought by earlier, interrupted
    runs (their ``meta.cost_usd`` is archived with them)."""
    return {
        "from": window.from_date,
        "to": window.to_date,
        "completed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "calls_made": calls_made,
        "pages": harvested.pages,
        "works": len(harvested.works),
        "cost_usd": round(harvested.cost_usd, 6),
        "queries": queries,
        "by": window.by,
    }
