"""Author, institution and network pages and their API twins, a mixin of :class:`.app.Site`.

``/authors/<A id>`` and ``/institutions/<I id>`` (and under ``/fr/``): the author's or institution's name, ORCID or
ROR as OpenAlex gives them (never inferred), their works in the release as the cohort builder lists them (each
category's source and status), counts by year and by category (the cohort's facets), their Canadian institutions by
year (authors), and their top collaborators. ``/network`` draws the co-authorship network of any cohort (every
filter of the cohort builder, plus ``kind`` and ``nodes``: :mod:`..query.people`) as an SVG with its data tables
beside it, and downloads it as GraphML (``/network.graphml``) or CSV (``/network.csv``), rate-limited like every
export. ``/api/v1/authors/<id>``, ``/api/v1/institutions/<id>`` and ``/api/v1/network`` answer the same as JSON.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...i18n import DEFAULT_LOCALE, N_, translations
from ..query.cohort import parse_filters, parse_request
from ..query.params import FILTERS, MAX_LIMIT, MAX_TEXT, CohortError, Param, single_values
from ..query.people import (
    DEFAULT_NODES,
    MAX_NODES,
    NETWORK_KINDS,
    Network,
    PeopleQuery,
    author_institution_years,
    author_row,
    institution_row,
    suggest_people,
)
from . import languages, strings
from .dossier import url_with
from .middleware import NO_STORE, export_refusal
from .network_drawing import csv_text, graphml, svg

NETWORK_PARAMS = (
    Param(
        "kind",
        "choice",
        "authors: co-authorship among Canadian authors; institutions: among Canadian institutions.",
        choices=NETWORK_KINDS,
        default="authors",
    ),
    Param(
        "nodes",
        "integer",
        "At most this many nodes: the Canadian authors or institutions with the most works in the cohort.",
        bounds=(1, MAX_NODES),
        default=str(DEFAULT_NODES),
    ),
)
_NET = {p.name: p for p in NETWORK_PARAMS}
NETWORK_QUERY = (*FILTERS, *_NET)
PEOPLE_SUGGEST_PARAMS = (
    Param("kind", "choice", "authors or institutions.", choices=NETWORK_KINDS, required=True),
    Param(
        "prefix",
        "text",
        "The beginning of the name or of one of its words (case and accents ignored); empty: the largest.",
        max_length=MAX_TEXT,
    ),
    Param("limit", "integer", "Names returned, most works first.", bounds=(1, 50), default="10"),
)
_SUGGEST = {p.name: p for p in PEOPLE_SUGGEST_PARAMS}
#: Works an author or institution page lists (newest first); the rest are a link to the cohort builder away.
PAGE_WORKS = MAX_LIMIT


def _id(value: str, letter: str, what: str) -> str:
    v = value.upper()
    if not (len(v) >= 2 and v[0] == letter and v[1:].isascii() and v[1:].isdigit() and len(v) <= 20):
        raise HTTPException(404, N_("%(id)r is not an OpenAlex %(what)s id", id=value[:40], what=what))
    return v


class PeopleEndpoints:
    """The author, institution and network pages and API routes (reads ``release``, ``info``, ``render``,
    ``limiter``, ``error_page``)."""

    # ---- the data ------------------------------------------------------------------------------------------
    def person(self, kind: str, raw_id: str) -> dict[str, Any]:
        """An author's (``kind="authors"``) or institution's page data; 404 when the release does not hold it."""
        letter, name = ("A", "author") if kind == "authors" else ("I", "institution_id")
        node_id = _id(raw_id, letter, "author" if kind == "authors" else "institution")
        con = self.release.cursor()
        try:
            row = author_row(con, node_id) if kind == "authors" else institution_row(con, node_id)
            years = author_institution_years(con, node_id) if kind == "authors" else []
        finally:
            con.close()
        if row is None:
            raise HTTPException(
                404, N_("%(id)s is not in release %(release)s", id=node_id, release=self.info.release_id)
            )
        cohort, listing = parse_request([(name, node_id), ("sort", "year"), ("limit", str(PAGE_WORKS))], self.info)
        with PeopleQuery(self.release, cohort) as q:
            count = q.count()
            facets = q.facets(only=("year", "direct_label", "classifier"))
            works, _ = q.page(listing)
            collaborators = q.collaborators(kind, node_id)
            authors = q.top_authors(at=node_id) if kind == "institutions" else []
        return {
            "kind": kind,
            "id": node_id,
            "row": row,
            "count": count,
            "by_year": sorted(facets["year"], key=lambda f: (f["value"] is None, f["value"] or 0)),
            "direct_label": facets["direct_label"],
            "classifier": facets["classifier"],
            "works": works,
            "institution_years": years,
            "collaborators": collaborators,
            "authors": authors,
            "params": cohort.params(),
        }

    def network_of(self, request: Request) -> tuple[Any, Network]:
        values = single_values(request.query_params.multi_items(), NETWORK_QUERY)
        kind = _NET["kind"].check(values.pop("kind"), self.info) if "kind" in values else "authors"
        nodes = _NET["nodes"].check(values.pop("nodes"), self.info) if "nodes" in values else DEFAULT_NODES
        cohort = parse_filters(values, self.info)
        with PeopleQuery(self.release, cohort) as q:
            return cohort, q.network(kind, nodes)

    # ---- pages ---------------------------------------------------------------------------------------------
    def _person_page(self, request: Request, kind: str, path_id: str) -> Response:
        lang = getattr(request.state, "lang", DEFAULT_LOCALE)
        raw = request.path_params[path_id]
        letter, what = ("A", "author") if kind == "authors" else ("I", "institution")
        if (to := languages.canonical_redirect(request, raw, _id(raw, letter, what))) is not None:
            return to
        d = self.person(kind, raw)
        prefix = languages.PREFIXES[lang]
        return self.render(
            request,
            "person.html.j2",
            d=d,
            url=url_with,
            search_url=url_with(prefix + "/", d["params"]),
            network_url=url_with(prefix + "/network", {**d["params"], "kind": kind}),
            page_of=lambda k, i: f"{prefix}/{k}/{i}",
        )

    def author_page(self, request: Request) -> Response:
        return self._person_page(request, "authors", "author_id")

    def institution_page(self, request: Request) -> Response:
        return self._person_page(request, "institutions", "institution_id")

    def network_page(self, request: Request) -> Response:
        lang = getattr(request.state, "lang", DEFAULT_LOCALE)
        prefix = languages.PREFIXES[lang]
        cohort, net = self.network_of(request)
        tr = translations(lang)
        title = tr.gettext(
            N_("Co-authorship among Canadian authors")
            if net.kind == "authors"
            else N_("Co-authorship among Canadian institutions")
        )
        href = {n["id"]: f"{prefix}/{net.kind}/{n['id']}" for n in net.nodes}
        params = {**cohort.params(), "kind": net.kind, "nodes": str(net.limit)}
        return self.render(
            request,
            "network.html.j2",
            net=net,
            cohort=cohort,
            title=title,
            drawing=svg(net, title, href, tr.gettext(strings.COLON)),
            href=href,
            names={n["id"]: n["name"] or n["id"] for n in net.nodes},
            params=params,
            url=url_with,
            kinds=NETWORK_KINDS,
            form=dict(request.query_params),
            hidden={k: v for k, v in cohort.params().items()},
        )

    def _network_download(self, request: Request, fmt: str) -> Response:
        if (refused := export_refusal(self.limiter, request)) is not None:
            response = self.error_page(request, 429, refused[0])
            response.headers.update({**NO_STORE, "Retry-After": refused[1]})
            return response
        cohort, net = self.network_of(request)
        name = f"metacan-network-{net.kind}-{cohort.query_hash()}"
        if fmt == "graphml":
            body, media = graphml(net), "application/graphml+xml"
        else:
            body, media = csv_text(net).encode("utf-8"), "text/csv; charset=utf-8"
        return Response(
            body,
            media_type=media,
            headers={
                "Content-Disposition": f'attachment; filename="{name}.{fmt}"',
                "X-Metacan-Release": self.info.release_id,
            },
        )

    def network_graphml(self, request: Request) -> Response:
        return self._network_download(request, "graphml")

    def network_csv(self, request: Request) -> Response:
        return self._network_download(request, "csv")

    # ---- API -----------------------------------------------------------------------------------------------
    def _api_person(self, kind: str, raw_id: str) -> Response:
        d = self.person(kind, raw_id)
        for w in d["works"]:
            w.pop("work_key", None)
        return JSONResponse(
            {
                "release_id": self.info.release_id,
                "kind": kind.removesuffix("s"),
                **{k: v for k, v in d["row"].items()},
                "works_in_release": d["count"],
                "by_year": d["by_year"],
                "direct_labels_by_category": d["direct_label"],
                "classifier_decisions_by_category": d["classifier"],
                "canadian_institutions_by_year": d["institution_years"],
                "top_collaborators": d["collaborators"],
                **({"top_canadian_authors": d["authors"]} if kind == "institutions" else {}),
                "works": d["works"],
                "works_url": url_with("/api/v1/works", d["params"]),
            }
        )

    def api_author(self, request: Request) -> Response:
        return self._api_person("authors", request.path_params["id"])

    def api_institution(self, request: Request) -> Response:
        return self._api_person("institutions", request.path_params["id"])

    def api_people_suggest(self, request: Request) -> Response:
        """``/api/v1/people?kind=authors|institutions&prefix=<beginning>``: the names the id boxes of the cohort
        builder suggest, with their OpenAlex ids and works in the release (:func:`..query.people.suggest_people`)."""
        values = single_values(request.query_params.multi_items(), tuple(_SUGGEST))
        if "kind" not in values:
            raise CohortError(N_("kind is required: authors or institutions."))
        kind = _SUGGEST["kind"].check(values["kind"], self.info)
        prefix = _SUGGEST["prefix"].check(values.get("prefix", ""), self.info)
        limit = _SUGGEST["limit"].check(values["limit"], self.info) if "limit" in values else 10
        con = self.release.cursor()
        try:
            found = suggest_people(con, kind, prefix, limit)
        finally:
            con.close()
        return JSONResponse(
            {"kind": kind, "prefix": prefix, "limit": limit, "release_id": self.info.release_id, "values": found}
        )

    def api_network(self, request: Request) -> Response:
        cohort, net = self.network_of(request)
        return JSONResponse(
            {
                "release_id": self.info.release_id,
                "query_hash": cohort.query_hash(),
                "filters": cohort.filters,
                "kind": net.kind,
                "nodes_limit": net.limit,
                "candidates": net.candidates,
                "nodes": net.nodes,
                "edges": net.edges,
            }
        )
