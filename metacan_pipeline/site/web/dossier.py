"""The disagreement dossier (``/dossier``, ``/fr/dossier``, ``/api/v1/dossier``): the works on which two
teachers' labelled direct labels differ, every teacher's verdict and reason side by side, and the counts per teacher
pair, under any cohort.

The disagreements were found when the release was built (:mod:`..build.figures`, table ``work_disagreements``: one row per
work and pair ``<a> vs <b>``, the heads they differ on, by the rule of
:func:`metacan_pipeline.teachers.core.agreement.head_values`: a head a label leaves unknown is never a disagreement). A
request takes every cohort filter of :data:`..query.params.FILTERS` (parsed by :mod:`..query.cohort`, so the same values are
refused the same way), and ``pair`` (one of the release's pairs), ``head`` (one of :data:`HEADS`), ``after`` (the
``work_key`` the previous page ended on) and ``limit``. Per pair it counts, in the cohort, the works both teachers
labelled and those they disagree on (by head); it lists the disagreeing works in ``work_key`` order with each
teacher's verdict from the work's published record: categories, domain, study design, genre, the two about-Canada
fields, confidence, reason, and the source and status every category carries (teacher, model, prompt version, record
view, ``label_status``, qualification sentence; SPEC section 8).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...i18n import DEFAULT_LOCALE, N_
from ...vocab import BINARY_TARGETS, CATEGORICAL_TARGETS, LABEL_FIELDS
from ..query.clauses import where_sql
from ..query.cohort import Cohort, parse_filters
from ..query.cohort_query import CohortQuery
from ..query.params import DEFAULT_LIMIT, FILTERS, MAX_LIMIT, CohortError, Param, single_values

#: The heads two labels are compared on (:data:`metacan_pipeline.teachers.core.agreement.HEADS`, spelled from the
#: vocabulary so that the served site does not import the labelling stage).
HEADS: tuple[str, ...] = BINARY_TARGETS + tuple(CATEGORICAL_TARGETS) + ("category_set",)
#: The fields of each teacher's verdict shown side by side: a direct label's fields.
VERDICT_FIELDS = LABEL_FIELDS
DOSSIER_PARAMS = (
    Param(
        "pair",
        "choice",
        "One pair of the release's teachers, as the counts name it (e.g. 'codex vs gemma').",
        release_choices="teacher_pairs",
    ),
    Param("head", "choice", "Only works on which the pair differs on this head.", choices=HEADS),
    Param("after", "cursor", "The work_key the previous page ended on (its next field)."),
    Param("limit", "integer", "Works per page.", bounds=(1, MAX_LIMIT), default=str(DEFAULT_LIMIT)),
)
_OWN = {p.name: p for p in DOSSIER_PARAMS}
DOSSIER_QUERY = (*FILTERS, *_OWN)


class DossierQuery(CohortQuery):
    """The dossier's statements over one cohort on one request's connection (module docstring)."""

    def _cohort(self) -> tuple[str, list]:
        """SQL (``work_key`` of every work of the cohort) and its parameters; the keys of the disagreements when no
        filter is set (the cohort is the release: no scan of ``work_facets``)."""
        if not self.coded:
            return "SELECT work_key FROM work_disagreements UNION SELECT work_key FROM work_labels", []
        self._need_hits()
        where, params = where_sql(self.coded)
        return f"SELECT w.work_key FROM work_facets w WHERE {where}", params

    def pair_counts(self, pairs: list[str]) -> list[dict[str, Any]]:
        """Per pair in ``pairs``: ``compared`` (works both teachers labelled), ``disagree`` and ``heads`` (works per
        head they differ on), in the cohort."""
        cohort, params = self._cohort()
        compared = dict(
            self.con.execute(
                "SELECT a.teacher || ' vs ' || b.teacher, count(*) FROM work_labels a JOIN work_labels b "
                "ON a.work_key = b.work_key AND a.teacher < b.teacher WHERE a.status = 'labelled' AND "
                f"b.status = 'labelled' AND a.work_key IN ({cohort}) GROUP BY 1",
                params,
            ).fetchall()
        )
        heads: dict[str, dict[str, int]] = {p: {} for p in pairs}
        disagree: dict[str, int] = {}
        for pair, head, n in self.con.execute(
            f"SELECT pair, head, count(*) FROM (SELECT d.pair, unnest(d.heads) AS head FROM work_disagreements d "
            f"WHERE d.work_key IN ({cohort})) GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2",
            params,
        ).fetchall():
            heads.setdefault(pair, {})[head] = n
        for pair, n in self.con.execute(
            f"SELECT pair, count(*) FROM work_disagreements d WHERE d.work_key IN ({cohort}) GROUP BY 1", params
        ).fetchall():
            disagree[pair] = n
        return [
            {"pair": p, "compared": compared.get(p, 0), "disagree": disagree.get(p, 0), "heads": heads.get(p, {})}
            for p in pairs
        ]

    def works(
        self, pair: str | None, head: str | None, after: int | None, limit: int
    ) -> tuple[int, list[dict], int | None]:
        """``(works matching, one page of works, the next page's cursor or None)``: the cohort's works on which
        ``pair`` (any pair) differs on ``head`` (any head), in ``work_key`` order after ``after``."""
        cohort, params = self._cohort()
        conds, extra = [f"d.work_key IN ({cohort})"], list(params)
        if pair is not None:
            conds.append("d.pair = ?")
            extra.append(pair)
        if head is not None:
            conds.append("list_contains(d.heads, ?)")
            extra.append(head)
        where = " AND ".join(conds)
        total = self.con.execute(f"SELECT count(DISTINCT d.work_key) FROM work_disagreements d WHERE {where}", extra)
        total = total.fetchone()[0]
        page_where, page_params = where, list(extra)
        if after is not None:
            page_where += " AND d.work_key > ?"
            page_params.append(after)
        rows = (
            self.con.execute(
                f"WITH k AS (SELECT DISTINCT d.work_key FROM work_disagreements d WHERE {page_where} ORDER BY 1 LIMIT ?), "
                "p AS (SELECT d.work_key, list({'pair': d.pair, 'heads': d.heads} ORDER BY d.pair) AS pairs "
                "FROM work_disagreements d SEMI JOIN k USING (work_key) GROUP BY 1) "
                "SELECT w.work_key, w.id, w.title, w.year, w.venue, w.page_path, "
                "CAST(w.direct_labels AS VARCHAR) AS labels, p.pairs "
                "FROM k JOIN dossier_works w USING (work_key) JOIN p USING (work_key) ORDER BY w.work_key",
                [*page_params, limit + 1],
            )
            .to_arrow_table()
            .to_pylist()
        )
        more = len(rows) > limit
        rows = rows[:limit]
        for r in rows:
            r["verdicts"] = [_verdict(x) for x in json.loads(r.pop("labels") or "[]")]
        return total, rows, (rows[-1]["work_key"] if more else None)


def url_with(path: str, params: dict) -> str:
    """``path`` with ``params`` as its query string (:func:`.api.url_with`, which imports this module's routes)."""
    return path + ("?" + urlencode(params) if params else "")


def _verdict(label: dict) -> dict:
    """One teacher's verdict on a work, with the source and status its categories carry."""
    keep = ("teacher", "model", "prompt_version", "record_view", "status", "label_status", "qualification")
    return {**{k: label.get(k) for k in keep}, **{k: label.get(k) for k in VERDICT_FIELDS}}


def _after(value: str) -> int:
    if not (value.isascii() and value.isdigit()) or len(value) > 19:
        raise CohortError(
            N_("the after cursor is not one this site gave for this sort; start again from the first page.")
        )
    return int(value)


class DossierEndpoints:
    """The dossier's page and API route, a mixin of :class:`.app.Site` (reads ``release``, ``info``, ``render``,
    ``statistics_data``)."""

    def dossier(self, request: Request) -> tuple[Cohort, dict[str, Any]]:
        values = single_values(request.query_params.multi_items(), DOSSIER_QUERY)
        own = {k: values.pop(k) for k in list(values) if k in _OWN and k not in FILTERS}
        pair = _OWN["pair"].check(own["pair"], self.info) if "pair" in own else None
        head = _OWN["head"].check(own["head"], self.info) if "head" in own else None
        after = _after(own["after"]) if "after" in own else None
        limit = _OWN["limit"].check(own["limit"], self.info) if "limit" in own else DEFAULT_LIMIT
        cohort = parse_filters(values, self.info)
        with DossierQuery(self.release, cohort) as q:
            counts = q.pair_counts(list(self.info.teacher_pairs))
            total, works, cursor = q.works(pair, head, after, limit)
        chosen = {k: v for k, v in (("pair", pair), ("head", head)) if v is not None}
        params = {**cohort.params(), **chosen, **({"limit": str(limit)} if "limit" in own else {})}
        return cohort, {
            "pairs": counts,
            "pair": pair,
            "head": head,
            "count": total,
            "works": works,
            "next": cursor,
            "params": params,
            "query_hash": cohort.query_hash(),
        }

    def dossier_page(self, request: Request) -> Response:
        lang = getattr(request.state, "lang", DEFAULT_LOCALE)
        cohort, d = self.dossier(request)
        prefix = "/fr" if lang == "fr" else ""
        next_url = url_with(prefix + "/dossier", {**d["params"], "after": d["next"]}) if d["next"] else None
        return self.render(
            request,
            "dossier.html.j2",
            d=d,
            cohort=cohort,
            heads=HEADS,
            fields=VERDICT_FIELDS,
            url=url_with,
            next_url=next_url,
            form=dict(request.query_params),
            hidden={k: v for k, v in cohort.params().items() if k not in DOSSIER_FORM_FIELDS},
            form_fields=DOSSIER_FORM_FIELDS,
        )

    def api_dossier(self, request: Request) -> Response:
        cohort, d = self.dossier(request)
        next_url = url_with("/api/v1/dossier", {**d["params"], "after": d["next"]}) if d["next"] else None
        works = [{k: v for k, v in w.items() if k != "work_key"} | {"source": "direct_label"} for w in d["works"]]
        return JSONResponse(
            {
                "release_id": self.info.release_id,
                "query_hash": d["query_hash"],
                "filters": cohort.filters,
                "pair": d["pair"],
                "head": d["head"],
                "pairs": d["pairs"],
                "count": d["count"],
                "works": works,
                "next": d["next"],
                "next_url": next_url,
            }
        )


#: The cohort fields the dossier's own form shows (the others travel as hidden fields).
DOSSIER_FORM_FIELDS = ("q", "year_min", "year_max", "language", "field", "venue", "institution", "funder")
