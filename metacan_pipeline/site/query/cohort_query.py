"""Queries of a cohort over a release database: exact count, coverage, keyset-paginated lists and streamed export
rows (its facets are :mod:`.facets`). Pure Python + DuckDB; every value reaches SQL as a parameter.

A text query is answered by the release's FTS5 index first (:mod:`..build.fts`): the matching ``work_key`` and BM25
``rank`` are registered on the request's DuckDB connection as the relation ``fts_hits``, which the filters join.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from ..build import cube, fts
from ..build.facet_columns import BOOLEAN_COLUMNS
from ..build.release import Release
from .clauses import ID_WORKS_SQL, Clause, clauses, cohort_key, stored_items, where_sql
from .cohort import Cohort, Listing, encode_cursor
from .facets import FACETS, OUTPUT_NAME, FacetCounter, planned


class CohortQuery:
    """The queries of one cohort on one request's connection (close it, or use it as a context manager)."""

    def __init__(self, release: Release, cohort: Cohort) -> None:
        self.release, self.cohort = release, cohort
        self.con = release.cursor()
        self._id_tables: list[str] = []
        self.clauses = self._id_works(clauses(cohort))
        self.coded = self._id_works(clauses(cohort, coded=True))
        self._hits, self._index, self._count, self._rows = False, None, None, None
        self._coverage: dict[str, int] | None = None
        self._known: dict[str, list[dict[str, Any]]] = {}
        self._plans: dict[str, tuple | None] = {}  # .facets.cells_less_complement by plan_key, made once each
        #: a text query and no other filter: the count and a page by relevance come from FTS5 alone
        self.text_only = bool(cohort.words) and all(c.group == "q" for c in self.clauses)
        #: a one-filter cohort whose count, coverage and facets the build stored (None: not stored)
        key = cohort_key(self.coded)
        self.stored = stored_items(self.con, {key}).get(key) if key else None

    def _id_works(self, items: list[Clause]) -> list[Clause]:
        """``items`` with each id filter (author, institution) reading its works' keys from a temporary table made
        once per request (a lookup by id scans every authorship: at 4.3M works, 15 million rows each time a
        statement evaluated the filter)."""
        out = []
        for c in items:
            if c.group in ID_WORKS_SQL:
                table = f"id_works_{c.group}"
                if table not in self._id_tables:
                    self.con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {ID_WORKS_SQL[c.group]}", list(c.params))
                    self._id_tables.append(table)
                c = Clause(c.group, f"w.work_key IN (SELECT work_key FROM {table})", ())
            out.append(c)
        return out

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

    def coded_where(self) -> tuple[str, list]:
        """The cohort's coded clauses over ``work_facets w`` as SQL and its parameters, the text query's matches
        registered as ``fts_hits`` first (what a query of the cohort's rows outside this class filters by)."""
        self._need_hits()
        return where_sql(self.coded)

    def __enter__(self) -> CohortQuery:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._rows:
            self.con.execute("DROP TABLE IF EXISTS cohort_rows")
        for table in self._id_tables:
            self.con.execute(f"DROP TABLE IF EXISTS {table}")
        for plan in self._plans.values():
            if plan is not None:
                self.con.execute(f"DROP TABLE IF EXISTS {plan[2]}")
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
            elif (got := self._cube_coverage()) is not None or (got := self._coverage_less_complement()) is not None:
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
        (:mod:`..build.cube`); None for any other cohort, or a release without the table."""
        if not self.coded or not {c.group for c in self.coded} <= cube.CUBE_GROUPS:
            return None
        where, params = where_sql(self.coded)
        rows = cube.cube_rows(self.con, [(["_coverage"], where, params)])
        return None if rows is None else cube.coverage_of(rows)

    def _coverage_less_complement(self) -> dict[str, int] | None:
        """The coverage of a large cohort filtered by year and/or language and one filter that leaves out few of their
        works, as cells of ``year_language_counts`` less the complement (:func:`.facets.cells_less_complement`), and
        in the same statement every facet whose filter is not set (kept for :meth:`facets`); None for any other."""
        if (plan := planned(self.con, self._plans, self.coded)) is None:
            return None
        where, params, table = plan
        groups = {c.group for c in self.coded}
        names = [n for n in FACETS if n not in groups]
        rows = cube.cube_rows(self.con, [(["_coverage", *names], where, params)], minus=table) or []
        by = cube.by_facet(rows)
        self._known = {OUTPUT_NAME.get(n, n): cube.facet_items(n, by.get(n, [])) for n in names}
        return cube.coverage_of(rows)

    def _coverage_of(self, table: str, where: str, params: list, booleans: bool = False) -> dict[str, int]:
        """The coverage counts of the cohort's rows in ``table``; with ``booleans``, also the yes and no counts of
        every boolean facet whose filter is not set (kept in ``_known`` for :meth:`facets`: the same scan)."""
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
            self._known = {
                n: [{"value": "yes", "count": row[4 + 2 * i]}, {"value": "no", "count": row[5 + 2 * i]}]
                for i, n in enumerate(names)
            }
        return dict(zip(("works", "direct", "scored", "decided"), row[:4], strict=True))

    def cohort_rows(self) -> str | None:
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
        """``works``, ``direct`` (with a labelled direct label), ``scored`` (with at least one category score), ``decided`` (a
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
        table = self.cohort_rows()
        where, params = ("true", []) if table else where_sql(self.coded)
        self._coverage = self._coverage_of(table or "work_facets", where, params)
        return dict(self._coverage)

    def facets(self, only: Sequence[str] | None = None) -> dict[str, list[dict[str, Any]]]:
        """``{facet: [{"value", "count", ...}]}`` under the current filters but the facet's own (module docstring).
        Column and name facets list at most ``TOP_N`` values (all years), largest first; booleans give yes/no;
        ``direct_label`` gives teacher, category and the teacher's qualification; ``classifier`` gives mode,
        category, classifier version and ``prediction_status`` (:class:`FacetCounter`). ``only``: these facets alone."""
        self._need_hits()
        counter = FacetCounter(
            self.con, self.coded, stored=True, cohort_table=self.cohort_rows, known=self._known, plans=self._plans
        )
        return counter.facets(only)

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
            "SELECT w.work_key, w.id, w.title, w.year, w.venue, w.cited_by, w.language, w.type, w.page_path, w.doi, "
            "w.classification_kind, w.release_layer, w.retraction_state, w.cascade_decision, w.model_version, "
            "w.prediction_status, w.validation_status, "
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
), auth AS (
  SELECT x.work_key,
         array_to_string(list_transform(list_sort(list({'p': x.author_position,
                         'v': coalesce(x.author_name, '') || coalesce(' (' || x.author_id || ')', '')})), a -> a.v), '; ') AS v
  FROM site_work_authors x SEMI JOIN c USING (work_key) WHERE x.is_canadian GROUP BY 1
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
       w.is_retracted, w.retraction_state, w.openalex_missed, w.in_sampling_frame,
       inst.v AS ca_institutions, auth.v AS ca_authors, fund.v AS funders, kw.v AS keywords,
       w.classification_kind, w.release_layer,
       lab.v AS direct_labels,
       w.model_version, w.prediction_status, w.candidate_categories, w.consensus_categories,
       sc.v AS machine_scores,
       w.score_spread, w.validation_status, w.page_path,
       ?::VARCHAR AS query_hash, ?::VARCHAR AS release_id, ?::VARCHAR AS classifier_version
FROM c JOIN works w USING (work_key)
LEFT JOIN inst USING (work_key) LEFT JOIN auth USING (work_key) LEFT JOIN fund USING (work_key)
LEFT JOIN kw USING (work_key)
LEFT JOIN lab USING (work_key) LEFT JOIN sc USING (work_key)
ORDER BY w.work_key
"""

#: Export columns holding JSON text (decoded into nested values in JSON Lines).
EXPORT_JSON_COLUMNS = ("direct_labels", "machine_scores")
