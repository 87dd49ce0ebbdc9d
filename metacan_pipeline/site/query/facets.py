"""The facet counts of a cohort: counts of works under every current filter *except the facet's own* (so a facet
lists the alternatives to its current value, the usual faceted-search reading); the count of a facet's selected value
equals the cohort's count."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..build import cube
from ..build.facet_columns import BOOLEAN_COLUMNS, COLUMN_FACETS, LIST_FACETS, NAME_TABLES, TOP_N
from .clauses import Clause, cohort_key, stored_items, where_sql

#: The span that keeps each code list's codes apart when they are counted in one pass (:meth:`FacetCounter._lists`;
#: a facet's codes are row numbers of its values, far below it).
LIST_CODE_SPAN = 1 << 24

#: Every facet, by its filter group (what :func:`where_sql` excludes when the facet is counted).
FACETS = (*COLUMN_FACETS, *NAME_TABLES, *BOOLEAN_COLUMNS, "label", "classifier")
#: The facets' names in the output (the label group's facet is ``direct_label``), in order.
FACET_OUTPUT = (*COLUMN_FACETS, *NAME_TABLES, *BOOLEAN_COLUMNS, "direct_label", "classifier")
OUTPUT_NAME = {"label": "direct_label"}


def plan_key(items: list[Clause]) -> str:
    """A key naming exactly the rows ``items`` select (their groups, SQL and parameters)."""
    return json.dumps([[c.group, c.sql, list(c.params)] for c in items], default=str)


def planned(con, plans: dict[str, tuple | None], others: list[Clause]) -> tuple[str, list, str] | None:
    """:func:`cells_less_complement` of ``others``, made once per request: ``plans`` keeps each by :func:`plan_key`
    (its complement table named by its place in ``plans``)."""
    key = plan_key(others)
    if key not in plans:
        plans[key] = cells_less_complement(con, others, f"complement_{len(plans)}")
    return plans[key]


def cells_less_complement(con, others: list[Clause], table: str) -> tuple[str, list, str] | None:
    """How to count a large cohort (the clauses ``others``: a year range and/or a language, and the clauses of one
    other filter group) as cells of ``year_language_counts`` less a complement: ``(cells' where, params, table)``,
    ``table`` a temporary table made here holding the complement's ``work_facets`` rows, the works of those cells that
    the other filter leaves out. Only when the cohort holds more than ``FacetCounter.MATERIALIZE_MAX`` works and the
    complement fewer works than the cohort (its counts then cost less than the cohort's); None otherwise, for a text
    query, or a release without the table. Costs a count of the complement (a filtered scan of ``work_facets``, no
    aggregation), made only when the other filter is an exclusion or a frequent one-filter cohort of more than that
    many works (stored at build time), and then the copy of its rows."""
    cells = [c for c in others if c.group in cube.CUBE_GROUPS]
    rest = [c for c in others if c.group not in cube.CUBE_GROUPS]
    if not cells or len({c.group for c in rest}) != 1 or rest[0].group == "q":
        return None
    if not any(c.sql.startswith("NOT ") for c in rest):
        # a filter that keeps works (not an exclusion) keeps few unless the build stored it as a frequent
        # one-filter cohort (stored_counts.STORE_MIN_WORKS), and it must keep more than the cohort's bound
        key = cohort_key(rest)
        kept = stored_items(con, {key}).get(key, {}).get("_count") if key else None
        if kept is None or kept <= FacetCounter.MATERIALIZE_MAX:
            return None
    where, params = where_sql(cells)
    rows = cube.cube_rows(con, [(["_coverage"], where, params)])
    if rows is None:
        return None
    base = cube.coverage_of(rows)["works"]
    if base <= FacetCounter.MATERIALIZE_MAX:
        return None
    other, other_params = where_sql(rest)
    comp = f"({where}) AND NOT coalesce(({other}), false)"
    comp_params = [*params, *other_params]
    (left_out,) = con.execute(f"SELECT count(*) FROM work_facets w WHERE {comp}", comp_params).fetchone()
    if base - left_out <= FacetCounter.MATERIALIZE_MAX or left_out >= base - left_out:
        return None
    # its rows copied once: every facet's count reads them (a complement evaluated per facet cost 4 times as much)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM work_facets w WHERE {comp}", comp_params)
    return where, params, table


class FacetCounter:
    """The facets of a cohort (its ``coded`` clauses over ``work_facets w``) on a connection.

    A facet counted under no filter at all (no filter is set, or only its own) is read from ``facet_counts``,
    written once by the build (``stored``), and so is one counted under a single frequent filter (the cohort's filters
    but the facet's own are one filter whose works the build counted: ``cohort_facet_counts``, :mod:`.stored_counts`;
    e.g. the year facet of year 2015-2022 + language en is the stored year facet of language en). A facet whose other
    filters are only a year range and/or a language is a sum over the cells of ``year_language_counts`` (:mod:`..build.cube`;
    all facets of such a cohort in one statement). The others are
    counted over ``work_facets`` (codes, decoded through
    ``facet_codes``): the column and boolean facets whose own filter is not set in one scan (GROUPING SETS; the
    booleans come from :meth:`CohortQuery.count`'s scan when it made one, ``known``),
    each name facet and the classifier facet as an unnest of the cohort's code lists, the direct-label facet
    over the cohort's labelled works; a facet whose filter is set is counted without it. When the cohort holds
    at most ``MATERIALIZE_MAX`` works, its rows are copied once into a temporary table that the statements read
    instead of evaluating the filters again each (``cohort_table``: a function that makes it when a statement first
    needs it, :meth:`CohortQuery.cohort_rows`)."""

    MATERIALIZE_MAX = 300_000

    def __init__(
        self,
        con,
        coded: list[Clause],
        stored: bool,
        cohort_table: Callable[[], str | None] | None = None,
        known: dict[str, list[dict[str, Any]]] | None = None,
        plans: dict[str, tuple | None] | None = None,
    ) -> None:
        self.con, self.coded, self.stored, self.cohort_table = con, coded, stored, cohort_table
        #: :func:`cells_less_complement` by :func:`plan_key` of its clauses (shared with the caller's, made once each)
        self.plans = {} if plans is None else plans
        self.groups = {c.group for c in coded}
        #: facets already counted under the whole cohort (by CohortQuery.count: the booleans of its scan, or every
        #: facet of a cohort counted as cells less a complement)
        self.known = {n: v for n, v in (known or {}).items() if n not in self.groups}

    def facets(self, only: Sequence[str] | None = None) -> dict[str, list[dict[str, Any]]]:
        """Every facet (:data:`FACET_OUTPUT`), or those named in ``only`` (output names)."""
        wanted = [n for n in FACETS if only is None or OUTPUT_NAME.get(n, n) in only]
        out: dict[str, list[dict[str, Any]]] = {}
        free = [n for n in wanted if self.groups <= {n}] if self.stored else []
        if free:
            names = [OUTPUT_NAME.get(n, n) for n in free]
            rows = self.con.execute(
                "SELECT facet, items FROM facet_counts WHERE facet IN (SELECT unnest(?::VARCHAR[]))", [names]
            ).fetchall()
            out.update({f: json.loads(items) for f, items in rows})
        out.update({n: v for n, v in self.known.items() if n not in free})
        todo = [n for n in wanted if n not in free and OUTPUT_NAME.get(n, n) not in out]
        if self.stored and todo:  # facets whose filters but their own are one stored frequent filter
            sources = {n: cohort_key([c for c in self.coded if c.group != n]) for n in todo}
            found = stored_items(self.con, {k for k in sources.values() if k})
            for n in todo:
                items = found.get(sources[n], {}).get(OUTPUT_NAME.get(n, n))
                if items is not None:
                    out[OUTPUT_NAME.get(n, n)] = items
            todo = [n for n in todo if OUTPUT_NAME.get(n, n) not in out]
        if self.stored and todo:  # facets whose other filters are only year and language: year_language_counts
            got = self._cube([n for n in todo if self.groups - {n} <= cube.CUBE_GROUPS])
            out.update(got)
            todo = [n for n in todo if OUTPUT_NAME.get(n, n) not in out]
        if self.stored and todo:  # large cohorts: year and language cells less a complement
            out.update(self._cells_less_complement(todo))
            todo = [n for n in todo if OUTPUT_NAME.get(n, n) not in out]
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
        return {name: out[name] for name in FACET_OUTPUT if only is None or name in only}

    def _cube(self, names: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The facets in ``names`` (each one's other filters only year and language) summed over the cells of
        ``year_language_counts`` (:mod:`..build.cube`) that those filters select, in one statement; empty for a release
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
        return {OUTPUT_NAME.get(n, n): cube.facet_items(n, by.get(n, [])) for n in names}

    def _cells_less_complement(self, names: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The facets in ``names`` whose other filters are a year range and/or a language and one other filter that
        leaves out few of their works (:func:`cells_less_complement`), each as the cells' sums less the complement's
        counts; the others are left out (counted otherwise)."""
        out: dict[str, list[dict[str, Any]]] = {}
        todo: dict[str, tuple[tuple, list[str]]] = {}  # by complement table: the plan and its facets
        for n in names:
            if (plan := planned(self.con, self.plans, [c for c in self.coded if c.group != n])) is not None:
                todo.setdefault(plan[2], (plan, []))[1].append(n)
        for (where, params, table), names_ in todo.values():
            rows = cube.cube_rows(self.con, [(names_, where, params)], minus=table)
            by = cube.by_facet(rows or [])
            out.update({OUTPUT_NAME.get(n, n): cube.facet_items(n, by.get(n, [])) for n in names_})
        return out

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
