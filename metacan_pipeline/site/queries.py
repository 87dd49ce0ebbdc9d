"""Queries of a cohort over a release database (issue 15): exact count, facet counts, keyset-paginated lists,
the coverage sentence, streamed export rows. Pure Python + DuckDB; every value reaches SQL as a parameter
(the only text spliced into a statement is this module's own fixed fragments).

A text query is answered by the release's FTS5 index first (:mod:`.fts`): the matching ``work_key`` and BM25
``rank`` are registered on the request's DuckDB connection as the relation ``fts_hits``, which the filters
join. Facet counts are counts of works under every current filter *except the facet's own* (so a facet
lists the alternatives to its current value, the usual faceted-search reading); the count of a facet's
selected value equals the cohort's count.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from . import cube, fts
from .cohort import Cohort, Listing, encode_cursor
from .params import BOOLEAN_FILTERS, TEXT_FILTERS
from .release import Release

#: ``works`` column of each boolean filter.
BOOLEAN_COLUMNS = {name: ("is_retracted" if name == "retracted" else name) for name in BOOLEAN_FILTERS}
#: The one-to-many table of a name filter.
NAME_TABLES = {"institution": "work_institutions", "funder": "work_funders", "keyword": "work_keywords"}
COLUMN_FACETS = ("year", "language", "type", "field", "topic", "venue", "classification_kind")
#: The facets counted from ``work_facets``' code lists, and the span that keeps each list's codes apart when they are
#: counted in one pass (:meth:`FacetCounter._lists`; a facet's codes are row numbers of its values, far below it).
LIST_FACETS = ("institution", "funder", "keyword", "classifier")
LIST_CODE_SPAN = 1 << 24
TOP_N = 20
_LABEL_COLUMNS = {"label_domain": "domain", "label_study_design": "study_design", "label_genre": "genre"}


@dataclass(frozen=True)
class Clause:
    group: str  # the facet whose own filter this is (excluded when that facet is counted)
    sql: str
    params: tuple


def clauses(cohort: Cohort, coded: bool = False) -> list[Clause]:
    """The WHERE clauses of a cohort over ``works w`` (and ``fts_hits`` when it has a text query); with
    ``coded``, over ``work_facets w`` instead: a text value or a name is looked up in ``facet_codes`` once (a
    value the release does not hold has no code and matches nothing, as over ``works``)."""
    f, out = cohort.filters, []
    if "year_min" in f:
        out.append(Clause("year", "w.year >= ?", (f["year_min"],)))
    if "year_max" in f:
        out.append(Clause("year", "w.year <= ?", (f["year_max"],)))
    for name in TEXT_FILTERS:
        if name not in f:
            continue
        code = f"(SELECT code FROM facet_codes WHERE facet = '{name}' AND value = ?)"
        if coded:
            sql = f"list_contains(w.{name}, {code})" if name in NAME_TABLES else f"w.{name} = {code}"
        elif name in NAME_TABLES:
            sql = f"w.work_key IN (SELECT x.work_key FROM {NAME_TABLES[name]} x WHERE x.name = ?)"
        else:
            sql = f"w.{name} = ?"
        out.append(Clause(name, sql, (f[name],)))
    for name, column in BOOLEAN_COLUMNS.items():
        if name in f:
            out.append(Clause(name, f"w.{column} = ?", (f[name] == "yes",)))
    if label := _label_clause(cohort):
        out.append(label)
    if "classifier_category" in f:
        sql = (
            "list_contains(w.classifier, (SELECT code FROM facet_codes WHERE facet = 'classifier' "
            "AND model_version = ? AND mode = ? AND value = ?))"
            if coded
            else "w.work_key IN (SELECT d.work_key FROM work_decisions d WHERE d.model_version = ? "
            "AND d.mode = ? AND d.category = ?)"
        )
        params = (f["classifier_version"], f["classifier_mode"], f["classifier_category"])
        out.append(Clause("classifier", sql, params))
    if "score_arm" in f:
        sql = "w.work_key IN (SELECT s.work_key FROM work_scores s WHERE s.arm = ? AND s.score >= ? AND s.score <= ?)"
        out.append(Clause("score", sql, (f["score_arm"], f.get("score_min", 0.0), f.get("score_max", 1.0))))
    if "q" in f:
        out.append(Clause("q", "w.work_key IN (SELECT work_key FROM fts_hits)", ()))
    return out


def _label_clause(cohort: Cohort) -> Clause | None:
    f = cohort.filters
    conds, params = ["l.status = 'labelled'"], []
    if "label_category" in f:
        conds.append("list_contains(l.categories, ?)")
        params.append(f["label_category"])
    for name, column in _LABEL_COLUMNS.items():
        if name in f:
            conds.append(f"l.{column} = ?")
            params.append(f[name])
    if len(conds) == 1:
        return None
    if "label_teacher" in f:
        conds.append("l.teacher = ?")
        params.append(f["label_teacher"])
    where = " AND ".join(conds)
    if f.get("label_agreement") == "all":
        teachers = list(cohort.release.teachers)
        if not teachers:  # every teacher (none) agrees: any work
            return Clause("label", "true", ())
        sql = (
            f"w.work_key IN (SELECT l.work_key FROM work_labels l WHERE {where} "
            f"AND l.teacher IN (SELECT unnest(?::VARCHAR[])) GROUP BY l.work_key HAVING count(DISTINCT l.teacher) = ?)"
        )
        return Clause("label", sql, (*params, teachers, len(teachers)))
    # uncorrelated IN: a correlated EXISTS under an unnest took 5.6 s at 4.3M works (benchmarks/bench_site.py)
    return Clause("label", f"w.work_key IN (SELECT l.work_key FROM work_labels l WHERE {where})", tuple(params))


def cohort_key(items: list[Clause]) -> str | None:
    """The key of a one-filter cohort in ``cohort_facet_counts`` (32 hex of SHA-256 over its clauses' group, SQL and
    parameters, so a key names exactly the rows those clauses select); None for no filter, several filter groups
    or a text query."""
    groups = {c.group for c in items}
    if len(groups) != 1 or "q" in groups:
        return None
    body = json.dumps([[c.group, c.sql, list(c.params)] for c in items], default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def stored_items(con, keys: set[str]) -> dict[str, dict[str, Any]]:
    """``{cohort key: {facet, "_count", "_coverage": items}}`` stored at build time for the given keys (see
    :mod:`.cohort_store`); empty for keys not stored, and for a release of a layout without the table."""
    if not keys:
        return {}
    try:
        rows = con.execute(
            "SELECT cohort_key, facet, items FROM cohort_facet_counts WHERE cohort_key IN (SELECT unnest(?::VARCHAR[]))",
            [sorted(keys)],
        ).fetchall()
    except duckdb.CatalogException:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for key, facet, items in rows:
        out.setdefault(key, {})[facet] = json.loads(items)
    return out


def where_sql(items: list[Clause], exclude: str | None = None) -> tuple[str, list]:
    kept = [c for c in items if c.group != exclude]
    if not kept:
        return "true", []
    return " AND ".join(f"({c.sql})" for c in kept), [p for c in kept for p in c.params]


#: Every facet, by its filter group (what :func:`where_sql` excludes when the facet is counted).
FACETS = (*COLUMN_FACETS, *NAME_TABLES, *BOOLEAN_COLUMNS, "label", "classifier")
#: The facets' names in the output (the label group's facet is ``direct_label``), in order.
FACET_OUTPUT = (*COLUMN_FACETS, *NAME_TABLES, *BOOLEAN_COLUMNS, "direct_label", "classifier")
_OUT_NAME = {"label": "direct_label"}


class CohortQuery:
    """The queries of one cohort on one request's connection (close it, or use it as a context manager)."""

    def __init__(self, release: Release, cohort: Cohort) -> None:
        self.release, self.cohort = release, cohort
        self.con = release.cursor()
        self.clauses = clauses(cohort)
        self.coded = clauses(cohort, coded=True)
        self._hits, self._index, self._count, self._rows = False, None, None, None
        self._coverage: dict[str, int] | None = None
        self._booleans: dict[str, list[dict[str, Any]]] = {}
        #: a text query and no other filter: the count and a page by relevance come from FTS5 alone
        self.text_only = bool(cohort.words) and all(c.group == "q" for c in self.clauses)
        #: a one-filter cohort whose count, coverage and facets the build stored (None: not stored)
        key = cohort_key(self.coded)
        self.stored = stored_items(self.con, {key}).get(key) if key else None

    def _fts(self, fn, *args):
        """``fn(index, words, *args)`` on this request's connection to the full-text index."""
        if self._index is None:
            self._index = self.release.search_index()
        return fn(self._index, self.cohort.words, *args)

    def _need_hits(self) -> None:
        """Register every match of the text query as ``fts_hits`` (once, when a statement needs it)."""
        if self.cohort.words and not self._hits:
            self.con.register("fts_hits", self._fts(fts.search))
            self._hits = True

    def __enter__(self) -> CohortQuery:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._rows:
            self.con.execute("DROP TABLE IF EXISTS cohort_rows")
        self.con.close()
        if self._index is not None:
            self._index.close()

    def _one(self, sql: str, params: list) -> tuple:
        return self.con.execute(sql, params).fetchone()

    def count(self) -> int:
        """The exact number of works in the cohort (counted with its coverage in the same scan of ``work_facets``,
        which :meth:`coverage` then gives without another)."""
        if self._count is None:
            if self.stored is not None:
                self._count = self.stored["_count"]
            elif self.text_only:
                self._count = self._fts(fts.count)
            elif not self.coded:  # the whole release: its stored coverage (a scan would cost 0.6 s at 4.3M works)
                self._count = self.coverage()["works"]
            elif (got := self._cube_coverage()) is not None:
                self._coverage = got
                self._count = got["works"]
            else:
                self._need_hits()
                where, params = where_sql(self.coded)
                self._coverage = self._coverage_of("work_facets", where, params, booleans=True)
                self._count = self._coverage["works"]
        return self._count

    def _cube_coverage(self) -> dict[str, int] | None:
        """The coverage of a cohort filtered by year and/or language only, summed over ``year_language_counts``
        (:mod:`.cube`); None for any other cohort, or a release without the table."""
        if not self.coded or not {c.group for c in self.coded} <= cube.CUBE_GROUPS:
            return None
        where, params = where_sql(self.coded)
        rows = cube.cube_rows(self.con, [(["_coverage"], where, params)])
        return None if rows is None else cube.coverage_of(rows)

    def _coverage_of(self, table: str, where: str, params: list, booleans: bool = False) -> dict[str, int]:
        """The coverage counts of the cohort's rows in ``table``; with ``booleans``, also the yes and no counts of
        every boolean facet whose filter is not set (kept in ``_booleans`` for :meth:`facets`: the same scan)."""
        names = [n for n in BOOLEAN_COLUMNS if booleans and n not in {c.group for c in self.coded}]
        extra = "".join(
            f", count(*) FILTER (WHERE w.{BOOLEAN_COLUMNS[n]}), count(*) FILTER (WHERE NOT w.{BOOLEAN_COLUMNS[n]})"
            for n in names
        )
        row = self._one(
            "SELECT count(*), count(*) FILTER (WHERE w.labelled), count(*) FILTER (WHERE w.scored), "
            f"count(*) FILTER (WHERE w.decided){extra} FROM {table} w WHERE {where}",
            params,
        )
        if names:
            self._booleans = {
                n: [{"value": "yes", "count": row[4 + 2 * i]}, {"value": "no", "count": row[5 + 2 * i]}]
                for i, n in enumerate(names)
            }
        return dict(zip(("works", "direct", "scored", "decided"), row[:4], strict=True))

    def _cohort_rows(self) -> str | None:
        """The temporary table holding the cohort's ``work_facets`` rows when it is filtered and holds at most
        ``FacetCounter.MATERIALIZE_MAX`` works (made once: coverage and facets then read it instead of evaluating
        the filters again in every statement); None otherwise."""
        if self._rows is None:
            self._rows = ""
            if self.coded and self.count() <= FacetCounter.MATERIALIZE_MAX:
                self._need_hits()
                where, params = where_sql(self.coded)
                self.con.execute(f"CREATE TEMP TABLE cohort_rows AS SELECT * FROM work_facets w WHERE {where}", params)
                self._rows = "cohort_rows"
        return self._rows or None

    def coverage(self) -> dict[str, int]:
        """``works``, ``direct`` (with a labelled direct label), ``scored`` (with a prediction), ``decided`` (a
        classifier decision in any mode) in the cohort (the flags of ``work_facets``; stored for the release)."""
        if not self.coded:
            return json.loads(self._one("SELECT items FROM facet_counts WHERE facet = '_coverage'", [])[0])
        if self.stored is not None:
            return dict(self.stored["_coverage"])
        if self._coverage is None and (got := self._cube_coverage()) is not None:
            self._coverage = got
        if self._coverage is not None:
            return dict(self._coverage)
        self._need_hits()
        table = self._cohort_rows()
        where, params = ("true", []) if table else where_sql(self.coded)
        self._coverage = self._coverage_of(table or "work_facets", where, params)
        return dict(self._coverage)

    def facets(self) -> dict[str, list[dict[str, Any]]]:
        """``{facet: [{"value", "count", ...}]}`` under the current filters but the facet's own (module docstring).
        Column and name facets list at most ``TOP_N`` values (all years), largest first; booleans give yes/no;
        ``direct_label`` gives teacher, category and the teacher's qualification; ``classifier`` gives mode,
        category, classifier version and ``prediction_status`` (:class:`FacetCounter`)."""
        self._need_hits()
        counter = FacetCounter(self.con, self.coded, stored=True, cohort_table=self._cohort_rows, known=self._booleans)
        return counter.facets()

    # ---- lists ---------------------------------------------------------------------------------------------
    def page(self, listing: Listing) -> tuple[list[dict[str, Any]], str | None]:
        """One page of works in ``listing.sort`` order after ``listing.after``, and the next page's cursor
        (None on the last page). Each row carries its direct labels and classifier decisions with their status."""
        where, params = where_sql(self.clauses)
        join, key, direction = "", "coalesce(w.year, -1)", "DESC"
        hits = "fts_hits"
        if self.text_only and listing.sort == "relevance":  # the page's matches, ranked by FTS5
            self.con.register("fts_page", self._fts(fts.top, listing.after, listing.limit + 1))
            hits, where, params = "fts_page", "true", []
        else:
            self._need_hits()
        if listing.sort == "cited_by":
            key = "w.cited_by"
        elif listing.sort == "relevance":
            join, key, direction = f"JOIN {hits} h ON h.work_key = w.work_key", "h.rank", "ASC"
        if listing.after is not None:
            cmp = ">" if direction == "ASC" else "<"
            where += f" AND ({key} {cmp} ? OR ({key} = ? AND w.work_key > ?))"
            params += [listing.after[0], listing.after[0], listing.after[1]]
        rows = self.con.execute(
            "SELECT w.work_key, w.id, w.title, w.year, w.venue, w.cited_by, w.language, w.type, w.page_path, "
            "w.classification_kind, w.model_version, w.prediction_status, w.validation_status, "
            f"{key} AS sort_value FROM works w {join} WHERE {where} ORDER BY {key} {direction}, w.work_key LIMIT ?",
            [*params, listing.limit + 1],
        ).to_arrow_table()
        items = rows.slice(0, listing.limit).to_pylist()
        more = rows.num_rows > listing.limit
        self._attach_status(items)
        cursor = encode_cursor(listing.sort, items[-1]["sort_value"], items[-1]["work_key"]) if more else None
        return items, cursor

    def _attach_status(self, items: list[dict[str, Any]]) -> None:
        keys = [r["work_key"] for r in items]
        labels: dict[int, list[dict]] = {k: [] for k in keys}
        decisions: dict[int, list[dict]] = {k: [] for k in keys}
        for row in (
            self.con.execute(
                "SELECT work_key, teacher, status, label_status, qualification, categories FROM work_labels "
                "WHERE work_key IN (SELECT unnest(?::BIGINT[])) ORDER BY work_key, teacher",
                [keys],
            )
            .to_arrow_table()
            .to_pylist()
        ):
            labels[row.pop("work_key")].append(row)
        for row in (
            self.con.execute(
                "SELECT work_key, mode, category, model_version, prediction_status FROM work_decisions "
                "WHERE work_key IN (SELECT unnest(?::BIGINT[])) ORDER BY work_key, mode, category",
                [keys],
            )
            .to_arrow_table()
            .to_pylist()
        ):
            decisions[row.pop("work_key")].append(row)
        for r in items:
            r["labels"], r["decisions"] = labels[r["work_key"]], decisions[r["work_key"]]

    # ---- export --------------------------------------------------------------------------------------------
    def export_batches(self, cap: int, batch_rows: int = 5000) -> Iterator[pa.RecordBatch]:
        """At most ``cap`` works of the cohort in id order, every export column (``EXPORT_SQL``), in batches."""
        yield from self.export_reader(cap, batch_rows)

    def export_reader(self, cap: int, batch_rows: int = 5000) -> pa.RecordBatchReader:
        """The rows of :meth:`export_batches` as an Arrow reader (its schema is known before the first row)."""
        self._need_hits()
        where, params = where_sql(self.clauses)
        consts = [self.cohort.query_hash(), self.cohort.release.release_id, self.cohort.classifier_version]
        return self.con.execute(EXPORT_SQL.replace("{where}", where), [*params, cap, *consts]).to_arrow_reader(
            batch_rows
        )

    def export_json_lines(self, cap: int, batch_rows: int = 5000) -> Iterator[pa.RecordBatch]:
        """The same rows as :meth:`export_batches`, each as one JSON object text (column ``line``), written by
        DuckDB: ``direct_labels`` and ``machine_scores`` nested (``[]`` when none)."""
        self._need_hits()
        where, params = where_sql(self.clauses)
        consts = [self.cohort.query_hash(), self.cohort.release.release_id, self.cohort.classifier_version]
        sql = (
            "SELECT CAST(to_json(e) AS VARCHAR) AS line FROM (SELECT * REPLACE ("
            + ", ".join(f"coalesce(CAST({c} AS JSON), '[]'::JSON) AS {c}" for c in EXPORT_JSON_COLUMNS)
            + ") FROM ("
            + EXPORT_SQL.replace("{where}", where)
            + ") x) e"
        )
        yield from self.con.execute(sql, [*params, cap, *consts]).to_arrow_reader(batch_rows)


class FacetCounter:
    """The facets of a cohort (its ``coded`` clauses over ``work_facets w``) on a connection.

    A facet counted under no filter at all (no filter is set, or only its own) is read from ``facet_counts``,
    written once by the build (``stored``), and so is one counted under a single frequent filter (the cohort's filters
    but the facet's own are one filter whose works the build counted: ``cohort_facet_counts``, :mod:`.cohort_store`;
    e.g. the year facet of year 2015-2022 + language en is the stored year facet of language en). A facet whose other
    filters are only a year range and/or a language is a sum over the cells of ``year_language_counts`` (:mod:`.cube`;
    all facets of such a cohort in one statement). The others are
    counted over ``work_facets`` (codes, decoded through
    ``facet_codes``): the column and boolean facets whose own filter is not set in one scan (GROUPING SETS; the
    booleans come from :meth:`CohortQuery.count`'s scan when it made one, ``known``),
    each name facet and the classifier facet as an unnest of the cohort's code lists, the direct-label facet
    over the cohort's labelled works; a facet whose filter is set is counted without it. When the cohort holds
    at most ``MATERIALIZE_MAX`` works, its rows are copied once into a temporary table that the statements read
    instead of evaluating the filters again each (``cohort_table``: a function that makes it when a statement first
    needs it, :meth:`CohortQuery._cohort_rows`)."""

    MATERIALIZE_MAX = 300_000

    def __init__(
        self,
        con,
        coded: list[Clause],
        stored: bool,
        cohort_table: Callable[[], str | None] | None = None,
        known: dict[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        self.con, self.coded, self.stored, self.cohort_table = con, coded, stored, cohort_table
        self.groups = {c.group for c in coded}
        #: facets already counted under the whole cohort (the booleans of CohortQuery.count's scan)
        self.known = {n: v for n, v in (known or {}).items() if n not in self.groups}

    def facets(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        free = [n for n in FACETS if self.groups <= {n}] if self.stored else []
        if free:
            names = [_OUT_NAME.get(n, n) for n in free]
            rows = self.con.execute(
                "SELECT facet, items FROM facet_counts WHERE facet IN (SELECT unnest(?::VARCHAR[]))", [names]
            ).fetchall()
            out.update({f: json.loads(items) for f, items in rows})
        out.update({n: v for n, v in self.known.items() if n not in free})
        todo = [n for n in FACETS if n not in free and n not in out]
        if self.stored and todo:  # facets whose filters but their own are one stored frequent filter
            sources = {n: cohort_key([c for c in self.coded if c.group != n]) for n in todo}
            found = stored_items(self.con, {k for k in sources.values() if k})
            for n in todo:
                items = found.get(sources[n], {}).get(_OUT_NAME.get(n, n))
                if items is not None:
                    out[_OUT_NAME.get(n, n)] = items
            todo = [n for n in todo if _OUT_NAME.get(n, n) not in out]
        if self.stored and todo:  # facets whose other filters are only year and language: year_language_counts
            got = self._cube([n for n in todo if self.groups - {n} <= cube.CUBE_GROUPS])
            out.update(got)
            todo = [n for n in todo if _OUT_NAME.get(n, n) not in out]
        shared = [n for n in todo if n not in self.groups]
        grouped = [n for n in shared if n in COLUMN_FACETS or n in BOOLEAN_COLUMNS]
        if grouped:
            out.update(self._grouped(grouped, None))
        listed = [n for n in shared if n in LIST_FACETS]
        if len(listed) > 1:
            out.update(self._lists(listed))
        for name in todo:
            if name in out:
                continue
            if name in self.groups and (name in COLUMN_FACETS or name in BOOLEAN_COLUMNS):
                out.update(self._grouped([name], name))
            elif name in NAME_TABLES:
                out[name] = self._name(name)
            elif name == "label":
                out["direct_label"] = self._label()
            elif name == "classifier":
                out["classifier"] = self._classifier()
        return {name: out[name] for name in FACET_OUTPUT}

    def _cube(self, names: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The facets in ``names`` (each one's other filters only year and language) summed over the cells of
        ``year_language_counts`` (:mod:`.cube`) that those filters select, in one statement; empty for a release
        without the table."""
        selections: dict[str, tuple[list[str], str, list]] = {}
        for n in names:
            where, params = where_sql(self.coded, n)
            key = json.dumps([where, params], default=str)
            selections.setdefault(key, ([], where, params))[0].append(n)
        rows = cube.cube_rows(self.con, list(selections.values()))
        if rows is None:
            return {}
        by = cube.by_facet(rows)
        return {_OUT_NAME.get(n, n): cube.facet_items(n, by.get(n, [])) for n in names}

    def _lists(self, names: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The name and classifier facets in ``names`` under the whole cohort, in one scan: each list's codes are moved
        to a range of their own (``code + i * LIST_CODE_SPAN``), the lists concatenated and unnested once, counted,
        then split again (a scan of the cohort's rows per facet cost one pass over ``work_facets`` each at 4.3M works).
        Each facet's items are those of :meth:`_name` / :meth:`_classifier`."""
        table, where, params = self._src(None)
        lists = ", ".join(f"list_transform(w.{n}, x -> x + {i * LIST_CODE_SPAN})" for i, n in enumerate(names))
        facet = " ".join(f"WHEN {i} THEN '{n}'" for i, n in enumerate(names))
        rows = self.con.execute(
            f"WITH g AS (SELECT code // {LIST_CODE_SPAN} AS i, code % {LIST_CODE_SPAN} AS code, count(*) AS n FROM "
            f"(SELECT unnest(list_concat({lists})) AS code FROM {table} w WHERE {where}) GROUP BY 1, 2) "
            f"SELECT k.facet, k.value, k.model_version, k.mode, k.prediction_status, g.n FROM g "
            f"JOIN facet_codes k ON k.facet = (CASE g.i {facet} END) AND k.code = g.code "
            f"QUALIFY k.facet = 'classifier' OR row_number() OVER (PARTITION BY k.facet ORDER BY g.n DESC, k.value) <= {TOP_N} "
            "ORDER BY k.facet, k.model_version, k.mode, g.n DESC, k.value",
            params,
        ).fetchall()
        out: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        for f, v, version, mode, status, n in rows:
            if f == "classifier":
                out[f].append(
                    {"model_version": version, "mode": mode, "value": v, "prediction_status": status, "count": n}
                )
            else:
                out[f].append({"value": v, "count": n})
        return out

    def _src(self, exclude: str | None) -> tuple[str, str, list]:
        """``(table, where, params)`` of the cohort without ``exclude``'s filter."""
        if exclude not in self.groups:
            exclude = None
        if exclude is None and self.cohort_table and (table := self.cohort_table()):
            return table, "true", []
        where, params = where_sql(self.coded, exclude)
        return "work_facets", where, params

    def _grouped(self, names: list[str], exclude: str | None) -> dict[str, list[dict[str, Any]]]:
        table, where, params = self._src(exclude)
        cols = [BOOLEAN_COLUMNS.get(n, n) for n in names]
        facet = " ".join(f"WHEN grouping(w.{c}) = 0 THEN '{n}'" for n, c in zip(names, cols, strict=True))
        code = " ".join(f"WHEN grouping(w.{c}) = 0 THEN CAST(w.{c} AS INTEGER)" for c in cols)
        rows = self.con.execute(
            f"WITH g AS (SELECT CASE {facet} END AS facet, CASE {code} END AS code, count(*) AS n FROM {table} w "
            f"WHERE {where} GROUP BY GROUPING SETS ({', '.join(f'(w.{c})' for c in cols)})) "
            "SELECT g.facet, g.code, k.value, g.n FROM g LEFT JOIN facet_codes k ON k.facet = g.facet AND k.code = g.code",
            params,
        ).fetchall()
        by: dict[str, list[tuple]] = {n: [] for n in names}
        for f, c, v, n in rows:
            by[f].append((c, v, n))
        out: dict[str, list[dict[str, Any]]] = {}
        for name in names:
            got = by[name]
            if name == "year":
                got.sort(key=lambda t: (t[0] is None, -(t[0] or 0)))
                out[name] = [{"value": c, "count": n} for c, _, n in got]
            elif name in BOOLEAN_COLUMNS:
                counts = {c: n for c, _, n in got}
                out[name] = [{"value": "yes", "count": counts.get(1, 0)}, {"value": "no", "count": counts.get(0, 0)}]
            else:
                got.sort(key=lambda t: (-t[2], t[1] is None, t[1] or ""))
                out[name] = [{"value": v, "count": n} for _, v, n in got[:TOP_N]]
        return out

    def _codes(self, column: str, exclude: str) -> tuple[str, list]:
        """SQL and parameters: ``(code, n)`` of every code in the cohort's ``column`` lists (``exclude`` left out)."""
        table, where, params = self._src(exclude)
        sql = f"SELECT code, count(*) AS n FROM (SELECT unnest(w.{column}) AS code FROM {table} w WHERE {where}) GROUP BY code"
        return sql, params

    def _name(self, name: str) -> list[dict[str, Any]]:
        codes, params = self._codes(name, name)
        rows = self.con.execute(
            f"SELECT k.value, g.n FROM ({codes}) g JOIN facet_codes k ON k.facet = '{name}' AND k.code = g.code "
            f"ORDER BY g.n DESC, k.value LIMIT {TOP_N}",
            params,
        ).fetchall()
        return [{"value": v, "count": n} for v, n in rows]

    def _label(self) -> list[dict[str, Any]]:
        table, where, params = self._src("label")
        rows = self.con.execute(
            "SELECT l.teacher, l.category, any_value(l.qualification), count(DISTINCT l.work_key) AS n FROM "
            "(SELECT work_key, teacher, qualification, unnest(categories) AS category FROM work_labels "
            "WHERE status = 'labelled') l "
            f"WHERE l.work_key IN (SELECT w.work_key FROM {table} w WHERE w.labelled AND ({where})) "
            "GROUP BY 1, 2 ORDER BY 1, n DESC, 2",
            params,
        ).fetchall()
        return [{"teacher": t, "value": c, "qualification": q, "count": n} for t, c, q, n in rows]

    def _classifier(self) -> list[dict[str, Any]]:
        codes, params = self._codes("classifier", "classifier")
        rows = self.con.execute(
            f"SELECT k.model_version, k.mode, k.value, k.prediction_status, g.n FROM ({codes}) g "
            "JOIN facet_codes k ON k.facet = 'classifier' AND k.code = g.code ORDER BY 1, 2, g.n DESC, 3",
            params,
        ).fetchall()
        return [
            {"model_version": v, "mode": m, "value": c, "prediction_status": s, "count": n} for v, m, c, s, n in rows
        ]


def write_facet_counts(con) -> int:
    """Count every facet of the whole release, and its coverage (``_coverage``), into ``facet_counts`` (the build,
    after ``sql/facets.sql``)."""
    facets = FacetCounter(con, [], stored=False).facets()
    row = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE labelled), count(*) FILTER (WHERE scored), "
        "count(*) FILTER (WHERE decided) FROM work_facets"
    ).fetchone()
    facets["_coverage"] = dict(zip(("works", "direct", "scored", "decided"), row, strict=True))
    con.executemany("INSERT INTO facet_counts VALUES (?, ?)", [(k, json.dumps(v)) for k, v in facets.items()])
    return len(facets)


#: Every record column of the export, labels with source and status, decisions, scores and validation_status
#: verbatim, and the query hash, release id and classifier version on every row. The capped cohort ``c`` is
#: chosen first and each one-to-many table is aggregated once over its keys (hash joins): a correlated
#: subquery per row ran at about 3,000 rows/s on a 100,000-work release (benchmarks/bench_site.py). Lists are
#: gathered unordered and sorted by ``list_sort`` (names; labels by teacher, the struct's first field; scores by arm):
#: the ordered aggregates (``string_agg(... ORDER BY ...)``, ``list(... ORDER BY ...)``) they replace sort every group
#: apart and took most of the query's time.
#: Parameters: the cohort's, the cap, then query hash, release id, classifier version.
EXPORT_SQL = """
WITH c AS MATERIALIZED (
  SELECT w.work_key FROM works w WHERE {where} ORDER BY w.work_key LIMIT ?
), inst AS (
  SELECT x.work_key, array_to_string(list_sort(list(x.name)), '; ') AS v FROM work_institutions x SEMI JOIN c USING (work_key) GROUP BY 1
), fund AS (
  SELECT x.work_key, array_to_string(list_sort(list(x.name)), '; ') AS v FROM work_funders x SEMI JOIN c USING (work_key) GROUP BY 1
), kw AS (
  SELECT x.work_key, array_to_string(list_sort(list(x.name)), '; ') AS v FROM work_keywords x SEMI JOIN c USING (work_key) GROUP BY 1
), lab AS (
  SELECT l.work_key,
         CAST(to_json(list_sort(list({'teacher': l.teacher, 'model': l.model, 'prompt_version': l.prompt_version,
                            'record_view': l.record_view, 'status': l.status, 'label_status': l.label_status,
                            'qualification': l.qualification, 'categories': l.categories, 'domain': l.domain,
                            'study_design': l.study_design, 'genre': l.genre, 'confidence': l.confidence}))) AS VARCHAR) AS v
  FROM work_labels l SEMI JOIN c USING (work_key) GROUP BY 1
), sc AS (
  SELECT s.work_key, CAST(to_json(list_sort(list({'arm': s.arm, 'score': s.score}))) AS VARCHAR) AS v
  FROM work_scores s SEMI JOIN c USING (work_key) GROUP BY 1
)
SELECT w.id, w.title, w.year, w.language, w.type, w.venue, w.field, w.topic, w.doi, w.cited_by,
       w.ca_aff, w.ca_fund, w.ca_venue, w.about_ca, w.invisible_to_affiliation_only, w.has_abstract,
       w.is_retracted, w.in_sampling_frame,
       inst.v AS ca_institutions, fund.v AS funders, kw.v AS keywords,
       w.classification_kind,
       lab.v AS direct_labels,
       w.model_version, w.prediction_status, w.candidate_categories, w.consensus_categories,
       sc.v AS machine_scores,
       w.score_spread, w.validation_status, w.page_path,
       ?::VARCHAR AS query_hash, ?::VARCHAR AS release_id, ?::VARCHAR AS classifier_version
FROM c JOIN works w USING (work_key)
LEFT JOIN inst USING (work_key) LEFT JOIN fund USING (work_key) LEFT JOIN kw USING (work_key)
LEFT JOIN lab USING (work_key) LEFT JOIN sc USING (work_key)
ORDER BY w.work_key
"""

#: Export columns holding JSON text (decoded into nested values in JSON Lines).
EXPORT_JSON_COLUMNS = ("direct_labels", "machine_scores")
