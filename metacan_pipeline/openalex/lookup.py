"""Re-read input records by their pointer (``source_file``, ``source_locator``) to get abstracts.

Abstracts are never stored (SPEC section 2); record views and pages that need the text re-read the
input record it came from, each file once per call.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from .abstract import deinvert
from .reader import Record, iter_file
from .remote import is_url, readable
from .remote import stat as remote_stat


def load_abstracts(
    path_of: Callable[[str], Path | str], pointers: Iterable[tuple[str, str, str]]
) -> dict[str, str | None]:
    """``{work_id: abstract text or None}`` for ``(work_id, source_file, source_locator)`` pointers;
    ``path_of`` maps a ``source_file`` to its file (:meth:`metacan_pipeline.resources.OpenAlexFiles.path_of`).

    A file that has gone missing since ingestion yields None for its works (the caller says "the
    abstract could not be read"), never an exception. A file in object storage is copied to a temporary
    folder and read there (the whole file, once per call).
    """
    wanted: dict[str, dict[str, str]] = defaultdict(dict)
    for work_id, source_file, locator in pointers:
        wanted[source_file][locator] = work_id
    out: dict[str, str | None] = {}
    for source_file, by_locator in wanted.items():
        path = path_of(source_file)
        if not (remote_stat(str(path)) is not None if is_url(str(path)) else Path(path).exists()):
            for wid in by_locator.values():
                out[wid] = None
            continue
        try:
            with readable(path) as local:
                for item in iter_file(local, source=source_file):
                    if isinstance(item, Record) and item.locator in by_locator:
                        out[by_locator[item.locator]] = deinvert(item.data.get("abstract_inverted_index"))
        except OSError:  # gone, or unreadable from object storage: the caller says the abstract could not be read
            pass
        for wid in by_locator.values():
            out.setdefault(wid, None)
    return out
