"""Authors, institutions and the collaboration network of a cohort over a release database (``site_work_authors``,
``site_work_institution_ids``, ``site_authors``, ``site_institutions``: the frame's authorships, names as OpenAlex
gives them, never inferred).

The network of a cohort is co-authorship among Canadian authors (an authorship that is Canadian: a Canadian
institution or CA among its countries) or among Canadian institutions (country code CA or on the pinned list): the
:data:`DEFAULT_NODES` (at most :data:`MAX_NODES`) with the most works in the cohort are its nodes (ties by id), and two
nodes are joined when they share a work of the cohort, the edge's weight being the number of such works. Authorships
without a valid author id are in no network (they name no one the release can tell apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .clauses import where_sql
from .cohort_query import CohortQuery
from .facets import TOP_N, FacetCounter

NETWORK_KINDS = ("authors", "institutions")
DEFAULT_NODES, MAX_NODES = 50, 200
TOP_COLLABORATORS = 10
#: Canadian institutions an author page lists per publication year (the others are counted).
INSTITUTIONS_PER_YEAR = 5
#: The largest filtered cohort whose author facet is counted (the authorships of a larger one are too many to count
#: within a page's time at 4.3M works; the page says to narrow the filters). The whole release's is stored.
AUTHOR_FACET_MAX = FacetCounter.MATERIALIZE_MAX

#: Per kind: the link table, its id column, the Canadian test, and the table of names.
_KIND = {
    "authors": (
        "site_work_authors",
        "author_id",
        "{t}is_canadian AND {t}author_id IS NOT NULL",
        "site_authors",
        "author_id",
    ),
    "institutions": (
        "site_work_institution_ids",
        "institution_id",
        "{t}is_canadian",
        "site_institutions",
        "institution_id",
    ),
}


@dataclass(frozen=True)
class Network:
    """A cohort's bounded co-authorship network: nodes (id, name, works in the cohort), most works first, and edges
    (source, target ids with source < target, weight: works shared), heaviest first; ``candidates``: how many
    Canadian authors or institutions the cohort holds (the nodes are the first ``len(nodes)`` of them)."""

    kind: str
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    candidates: int
    limit: int


class PeopleQuery(CohortQuery):
    """The author, institution and network statements over one cohort on one request's connection."""

    def _cohort(self) -> tuple[str, list]:
        """SQL (``work_key`` of every work of the cohort) and its parameters."""
        if not self.coded:
            return "SELECT work_key FROM works", []
        self._need_hits()
        where, params = where_sql(self.coded)
        return f"SELECT w.work_key FROM work_facets w WHERE {where}", params

    def network(self, kind: str, limit: int = DEFAULT_NODES) -> Network:
        """The cohort's co-authorship network of ``kind`` (:data:`NETWORK_KINDS`) with at most ``limit`` nodes."""
        table, col, canadian, names, name_key = _KIND[kind]
        cohort, params = self._cohort()
        self.con.execute(
            f"CREATE OR REPLACE TEMP TABLE net_links AS SELECT DISTINCT work_key, {col} AS node FROM {table} "
            f"WHERE {canadian.format(t='')} AND work_key IN ({cohort})",
            params,
        )
        candidates = self.con.execute("SELECT count(DISTINCT node) FROM net_links").fetchone()[0]
        nodes = (
            self.con.execute(
                f"SELECT l.node AS id, n.display_name AS name, n.orcid_or_ror AS ref, count(*) AS works "
                f"FROM net_links l LEFT JOIN (SELECT {name_key} AS id, display_name, "
                f"{'orcid' if kind == 'authors' else 'ror'} AS orcid_or_ror FROM {names}) n ON n.id = l.node "
                "GROUP BY ALL ORDER BY works DESC, id LIMIT ?",
                [limit],
            )
            .to_arrow_table()
            .to_pylist()
        )
        ids = [n["id"] for n in nodes]
        edges = (
            self.con.execute(
                "WITH k AS (SELECT * FROM net_links WHERE node IN (SELECT unnest(?::VARCHAR[]))) "
                "SELECT a.node AS source, b.node AS target, count(*) AS weight FROM k a JOIN k b "
                "ON a.work_key = b.work_key AND a.node < b.node GROUP BY ALL ORDER BY weight DESC, source, target",
                [ids],
            )
            .to_arrow_table()
            .to_pylist()
        )
        self.con.execute("DROP TABLE net_links")
        return Network(kind, nodes, edges, candidates, limit)

    def top_authors(self, limit: int = TOP_COLLABORATORS, at: str | None = None) -> list[dict[str, Any]]:
        """The Canadian authors with the most works in the cohort (id, name, works), most first, ties by id; with
        ``at`` (an institution id), only their works on which the authorship names that institution."""
        cohort, params = self._cohort()
        return (
            self.con.execute(
                "WITH c AS (SELECT a.author_id AS id, count(DISTINCT a.work_key) AS works FROM site_work_authors a "
                f"WHERE a.is_canadian AND a.author_id IS NOT NULL AND a.work_key IN ({cohort}) "
                "AND (?::VARCHAR IS NULL OR list_contains(a.institution_ids, ?::VARCHAR)) "
                "GROUP BY 1 ORDER BY works DESC, id LIMIT ?) "
                "SELECT c.id, n.display_name AS name, c.works FROM c LEFT JOIN site_authors n ON n.author_id = c.id "
                "ORDER BY c.works DESC, c.id",
                [*params, at, at, limit],
            )
            .to_arrow_table()
            .to_pylist()
        )

    def collaborators(self, kind: str, node_id: str, limit: int = TOP_COLLABORATORS) -> list[dict[str, Any]]:
        """The Canadian authors or institutions of ``kind`` sharing most works of the cohort with ``node_id``
        (id, name, works shared), most first, ties by id."""
        table, col, canadian, names, name_key = _KIND[kind]
        cohort, params = self._cohort()
        return (
            self.con.execute(
                f"WITH mine AS (SELECT DISTINCT work_key FROM {table} WHERE {col} = ? AND work_key IN ({cohort})), "
                f"c AS (SELECT l.{col} AS id, count(DISTINCT l.work_key) AS works "
                f"FROM {table} l SEMI JOIN mine USING (work_key) WHERE {canadian.format(t='l.')} "
                f"AND l.{col} <> ? GROUP BY 1 ORDER BY works DESC, id LIMIT ?) "
                f"SELECT c.id, n.display_name AS name, c.works FROM c LEFT JOIN {names} n ON n.{name_key} = c.id "
                "ORDER BY c.works DESC, c.id",
                [node_id, *params, node_id, limit],
            )
            .to_arrow_table()
            .to_pylist()
        )


def author_row(con, author_id: str) -> dict[str, Any] | None:
    """The ``site_authors`` row of one author, or None."""
    rows = con.execute("SELECT * FROM site_authors WHERE author_id = ?", [author_id]).to_arrow_table().to_pylist()
    return rows[0] if rows else None


def institution_row(con, institution_id: str) -> dict[str, Any] | None:
    """The ``site_institutions`` row of one institution, or None."""
    rows = (
        con.execute("SELECT * FROM site_institutions WHERE institution_id = ?", [institution_id])
        .to_arrow_table()
        .to_pylist()
    )
    return rows[0] if rows else None


def author_institution_years(con, author_id: str) -> list[dict[str, Any]]:
    """The author's Canadian institutions by publication year (year, institution id, its ``site_institutions`` name,
    works, ``more``), from their Canadian authorships in the release, one row per institution id; newest year first,
    at most :data:`INSTITUTIONS_PER_YEAR` a year (most works first, ties by id), the last of a year saying in
    ``more`` how many others that year has (0 otherwise)."""
    return (
        con.execute(
            "WITH g AS (SELECT w.year, i.institution_id, count(DISTINCT a.work_key) AS works "
            "FROM (SELECT work_key, unnest(institution_ids) AS institution_id FROM site_work_authors "
            "      WHERE author_id = ? AND is_canadian) a "
            "JOIN site_work_institution_ids i ON i.work_key = a.work_key AND i.institution_id = a.institution_id "
            "JOIN works w ON w.work_key = a.work_key WHERE i.is_canadian GROUP BY ALL), "
            "r AS (SELECT *, row_number() OVER (PARTITION BY year ORDER BY works DESC, institution_id) AS rank, "
            "count(*) OVER (PARTITION BY year) AS n FROM g) "
            "SELECT r.year, r.institution_id, s.display_name AS name, r.works, "
            "CASE WHEN r.rank = least(r.n, ?) THEN r.n - r.rank ELSE 0 END AS more "
            "FROM r LEFT JOIN site_institutions s ON s.institution_id = r.institution_id WHERE r.rank <= ? "
            "ORDER BY r.year DESC NULLS LAST, r.works DESC, r.institution_id",
            [author_id, INSTITUTIONS_PER_YEAR, INSTITUTIONS_PER_YEAR],
        )
        .to_arrow_table()
        .to_pylist()
    )


def work_authors(con, work_keys: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The authorships of the given works in the record's order (position, author id, name, Canadian or not)."""
    out: dict[int, list[dict[str, Any]]] = {k: [] for k in work_keys}
    for r in (
        con.execute(
            "SELECT work_key, author_position, author_id, author_name, is_canadian FROM site_work_authors "
            "WHERE work_key IN (SELECT unnest(?::BIGINT[])) ORDER BY work_key, author_position",
            [work_keys],
        )
        .to_arrow_table()
        .to_pylist()
    ):
        out[r.pop("work_key")].append(r)
    return out


def suggest_people(con, kind: str, prefix: str, limit: int) -> list[dict[str, Any]]:
    """``[{"id", "name", "works"}]``: the release's authors or institutions (``kind``) whose name, or a word of it,
    begins with ``prefix`` (case and accents ignored; empty: the largest), most works in the release first, ties by
    id, at most ``limit``."""
    table, key = ("site_authors", "author_id") if kind == "authors" else ("site_institutions", "institution_id")
    return (
        con.execute(
            f"SELECT {key} AS id, display_name AS name, works_in_frame AS works FROM {table} "
            "WHERE starts_with(lower(strip_accents(coalesce(display_name, ''))), lower(strip_accents(?))) "
            "OR contains(lower(strip_accents(coalesce(display_name, ''))), ' ' || lower(strip_accents(?))) "
            "ORDER BY works DESC, id LIMIT ?",
            [prefix, prefix, limit],
        )
        .to_arrow_table()
        .to_pylist()
    )


def author_facet(q: CohortQuery) -> list[dict[str, Any]] | None:
    """The Canadian authors (with an OpenAlex author id and a Canadian authorship on at least one work of the
    release, ``site_authors.is_canadian``) listing the most works of the cohort under every filter but the author
    filter: ``[{"value": author id, "name", "count"}]``, at most :data:`TOP_N`, most works first, ties by id. The
    whole release's from ``site_authors.works_in_frame``; a filtered cohort's counted over its authorships when it
    holds at most :data:`AUTHOR_FACET_MAX` works; None for a larger one."""
    others = [c for c in q.coded if c.group != "author"]
    if not others:
        rows = q.con.execute(
            "SELECT author_id, display_name, works_in_frame FROM site_authors WHERE is_canadian "
            f"ORDER BY works_in_frame DESC, author_id LIMIT {TOP_N}"
        ).fetchall()
    else:
        q.coded_where()  # the text query's matches registered first
        if len(others) == len(q.coded) and q.count() > AUTHOR_FACET_MAX:
            return None
        if len(others) == len(q.coded) and (table := q.cohort_rows()):
            cohort, params = f"SELECT work_key FROM {table}", []
        else:
            where, params = where_sql(others)
            cohort = f"SELECT w.work_key FROM work_facets w WHERE {where}"
            if q.con.execute(f"SELECT count(*) FROM ({cohort})", params).fetchone()[0] > AUTHOR_FACET_MAX:
                return None
        # counted before the authors are joined: joined to every authorship, they cost 8 times the count at 4.3M
        rows = q.con.execute(
            "WITH c AS (SELECT a.author_id, count(DISTINCT a.work_key) AS works FROM site_work_authors a "
            f"WHERE a.author_id IS NOT NULL AND a.work_key IN ({cohort}) GROUP BY a.author_id) "
            "SELECT c.author_id, n.display_name, c.works FROM c JOIN site_authors n "
            f"ON n.author_id = c.author_id AND n.is_canadian ORDER BY c.works DESC, c.author_id LIMIT {TOP_N}",
            params,
        ).fetchall()
    return [{"value": a, "name": name, "count": n} for a, name, n in rows]
