"""The rolling layer in view: ``/recent`` (``/fr/recent``) and ``/api/v1/recent``, a mixin of :class:`.app.Site`.

They list the works of the served release that arrived after the newest frozen release (the release database's
``recent_works``: the records whose ``layer`` is ``rolling``, :mod:`metacan_pipeline.release.layer`), newest
``updated_date`` first, :data:`PAGE_WORKS` a page, each with the input it arrived through, its direct labels and what
its classifier shows; and the sync status of the OpenAlex API refresh, read live from the data folder's API archive
(``<data dir>/openalex_api``, :func:`metacan_pipeline.openalex.windows.sync_windows`): every window, its dates and
kind (``updated_date``, weekly; ``publication_date``, daily), whether it completed, the works it harvested, the works
it added to this release's rolling layer, and the windows that did not complete (the failures: a harvest stopped by
the day's budget or an error).

Categories are withheld exactly as SPEC section 8 says: "Works outside a frozen release (the rolling recent layer)
show no classifier category until that classifier version passes human validation." The records already carry the
rule (``work_records`` applies :class:`metacan_pipeline.release.layer.LayerRule`): a category a rolling work shows is
of a (classifier version, head) that passed human validation, and is shown with its source and status; every other
category is withheld and the page says so. Direct labels are the teachers' own and stay, with their status.

The API's ETag adds the archive's state to the release's (:meth:`RecentEndpoints.api_recent_etag`), so a window
completed or stopped since is never answered 304.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...openalex.windows import sync_windows
from ..query.params import Param, single_values

#: Rolling-layer works a page (and an API answer) lists.
PAGE_WORKS = 100
PAGE_PARAM = Param(
    "page", "integer", "The page of the rolling layer's works, from 1.", bounds=(1, 1_000_000), default="1"
)
#: The newest windows the sync status lists (a year of daily refreshes is 365; every incomplete one is listed).
SHOWN_WINDOWS = 50
#: Where ``openalex_api_refresh`` archives its windows, under the data folder (``definitions.build_resources``).
API_ARCHIVE = "openalex_api"


class RecentEndpoints:
    """``/recent`` and ``/api/v1/recent`` for :class:`.app.Site` (which gives ``release``, ``info``, ``data_dir``,
    ``page_context`` and ``render``)."""

    def sync_status(self) -> dict:
        """The API refresh's :data:`SHOWN_WINDOWS` newest windows (newest end first) with the rolling works each
        added, how many there are, the last complete window, every incomplete one (module docstring), and the rolling
        works that arrived through no window (a snapshot folder, other files)."""
        windows = sync_windows(Path(self.data_dir) / API_ARCHIVE)
        added = dict(self._query("SELECT arrived_in, count(*) FROM recent_works GROUP BY arrived_in"))
        for w in windows:
            w["added"] = added.get(w["name"], 0)
        complete = [w for w in windows if w["complete"]]
        return {
            "windows": windows[:SHOWN_WINDOWS],
            "windows_total": len(windows),
            "last_window": complete[0] if complete else None,
            "failures": [w for w in windows if not w["complete"]],
            "added_outside_windows": sum(n for k, n in added.items() if not k.startswith("window=")),
        }

    def recent_works(self, page: int) -> tuple[int, list[dict]]:
        """``(works in the rolling layer, the page's works)``: each work's id, title, year, venue, page path,
        updated_date, the input it arrived through, its direct labels and its classifier's shown categories."""
        total = self._query("SELECT count(*) FROM recent_works")[0][0]
        rows = self._query(
            "SELECT w.id, w.title, w.year, w.venue, w.page_path, r.updated_date, r.arrived_in, w.model_version, "
            "w.prediction_status, w.candidate_categories, w.consensus_categories, "
            "coalesce((SELECT list({'teacher': l.teacher, 'status': l.status, 'label_status': l.label_status, "
            "'categories': l.categories} ORDER BY l.teacher) FROM work_labels l WHERE l.work_key = w.work_key), []) "
            "FROM recent_works r JOIN works w USING (work_key) "
            "ORDER BY r.updated_date DESC NULLS LAST, r.work_key DESC LIMIT ? OFFSET ?",
            [PAGE_WORKS, (page - 1) * PAGE_WORKS],
        )
        keys = ("id", "title", "year", "venue", "page_path", "updated_date", "arrived_in", "model_version")
        works = []
        for row in rows:
            work = dict(zip(keys, row[:8], strict=True))
            work["classifier"] = {
                "model_version": row[7],
                "prediction_status": row[8],
                "candidate_categories": list(row[9]),
                "consensus_categories": list(row[10]),
                # SPEC section 8: a rolling work shows a category only of a head that passed human validation
                "withheld": row[7] is not None,
            }
            work["direct_labels"] = [dict(label) for label in row[11]]
            works.append(work)
        return total, works

    def _query(self, sql: str, params: list | None = None) -> list[tuple]:
        con = self.release.cursor()
        try:
            return con.execute(sql, params or []).fetchall()
        finally:
            con.close()

    def _page(self, request: Request) -> int:
        values = single_values(request.query_params.multi_items(), ("page",))
        return PAGE_PARAM.check(values.get("page", "1"), self.info)

    def recent_page(self, request: Request) -> Response:
        page = self._page(request)
        total, works = self.recent_works(page)
        pages = max(1, -(-total // PAGE_WORKS))
        return self.render(
            request,
            "recent.html.j2",
            total=total,
            works=works,
            page=page,
            pages=pages,
            sync=self.sync_status(),
            frozen_release=self.page_context.get("frozen_release"),
        )

    def api_recent(self, request: Request) -> Response:
        page = self._page(request)
        total, works = self.recent_works(page)
        pages = max(1, -(-total // PAGE_WORKS))
        return JSONResponse(
            {
                "release_id": self.info.release_id,
                "frozen_release": self.page_context.get("frozen_release"),
                "rule": "Works outside a frozen release (the rolling recent layer) show no classifier category until "
                "that classifier version passes human validation (SPEC section 8): a category listed here is of a "
                "head that passed; every other one is withheld.",
                "count": total,
                "page": page,
                "pages": pages,
                "next_url": f"/api/v1/recent?page={page + 1}" if page < pages else None,
                "works": works,
                "sync": self.sync_status(),
            }
        )

    def api_recent_etag(self) -> str:
        """What the API answer depends on besides the release: the archive's windows as they are now."""
        state = sync_windows(Path(self.data_dir) / API_ARCHIVE)
        return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]
