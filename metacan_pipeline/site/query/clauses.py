"""A cohort as SQL: the WHERE clauses of its filters (over ``works`` or over ``work_facets``' codes), the key under which
a build stores a one-filter cohort's counts, and the reading of those stored counts. Every value reaches SQL as a
parameter; the only text spliced into a statement is this module's own fixed fragments."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import duckdb

from ..build.facet_columns import BOOLEAN_COLUMNS, NAME_TABLES
from .cohort import Cohort
from .params import EXCLUSION_PREFIX, OR_SEPARATOR, TEXT_FILTERS

_LABEL_COLUMNS = {"label_domain": "domain", "label_study_design": "study_design", "label_genre": "genre"}


@dataclass(frozen=True)
class Clause:
    group: str  # the facet whose own filter this is (excluded when that facet is counted)
    sql: str
    params: tuple


def clauses(cohort: Cohort, coded: bool = False) -> list[Clause]:
    """The WHERE clauses of a cohort over ``works w`` (and ``fts_hits`` when it has a text query); with
    ``coded``, over ``work_facets w`` instead: a text value or a name is looked up in ``facet_codes`` by its folded
    form (:func:`_text_clause`: a value the release does not hold has no code and matches nothing, as over
    ``works``)."""
    f, out = cohort.filters, []
    if "year_min" in f:
        out.append(Clause("year", "w.year >= ?", (f["year_min"],)))
    if "year_max" in f:
        out.append(Clause("year", "w.year <= ?", (f["year_max"],)))
    for name in TEXT_FILTERS:
        for negated in (False, True):
            if (value := f.get(EXCLUSION_PREFIX + name if negated else name)) is not None:
                out.append(_text_clause(name, value.split(OR_SEPARATOR), negated, coded))
    out.extend(_id_clauses(f))
    for name, column in BOOLEAN_COLUMNS.items():
        if name in f:
            out.append(Clause(name, f"w.{column} = ?", (f[name] == "yes",)))
    out += _coverage_clauses(f, coded)
    if "release_layer" in f:
        code = "(SELECT code FROM facet_codes WHERE facet = 'release_layer' AND value = ?)"
        out.append(Clause("release_layer", f"w.release_layer = {code if coded else '?'}", (f["release_layer"],)))
    if "retraction_state" in f:
        code = "(SELECT code FROM facet_codes WHERE facet = 'retraction_state' AND value = ?)"
        sql = f"w.retraction_state = {code}" if coded else "w.retraction_state = ?"
        out.append(Clause("retraction_state", sql, (f["retraction_state"],)))
    if "cascade_decision" in f:
        code = "(SELECT code FROM facet_codes WHERE facet = 'cascade_decision' AND value = ?)"
        sql = f"w.cascade_decision = {code}" if coded else "w.cascade_decision = ?"
        out.append(Clause("cascade_decision", sql, (f["cascade_decision"],)))
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


#: Over ``works``: the works with a labelled direct label, and those whose record ships a category (a labelled direct
#: label's category, or a classifier decision). ``work_facets`` holds both as the columns ``labelled`` and
#: ``classified`` (``sql/facets.sql``), and the citation count as ``cited_by``.
_LABELLED = "w.work_key IN (SELECT l.work_key FROM work_labels l WHERE l.status = 'labelled')"
_CLASSIFIED = (
    "(w.work_key IN (SELECT l.work_key FROM work_labels l WHERE l.status = 'labelled' AND len(l.categories) > 0) "
    "OR w.work_key IN (SELECT d.work_key FROM work_decisions d))"
)


def _coverage_clauses(f: dict, coded: bool) -> list[Clause]:
    """The clauses of ``labelled``, ``classified`` (``yes``/``no``) and ``cited_by_min``, over ``work_facets``
    (``coded``: its columns) or ``works``."""
    out = []
    if "labelled" in f:
        out.append(Clause("labelled", f"({'w.labelled' if coded else _LABELLED}) = ?", (f["labelled"] == "yes",)))
    if "classified" in f:
        out.append(
            Clause("classified", f"({'w.classified' if coded else _CLASSIFIED}) = ?", (f["classified"] == "yes",))
        )
    if "cited_by_min" in f:
        out.append(Clause("cited_by", "w.cited_by >= ?", (f["cited_by_min"],)))
    return out


#: The codes of a text facet's values that fold (``facet_codes.norm``, written by the build as
#: ``lower(strip_accents(value))``) to one of the given values, folded the same way here, so that the match is
#: DuckDB's own folding on both sides; the facet name is this module's own text.
_FOLDED = (
    "SELECT {col} FROM facet_codes WHERE facet = '{facet}' "
    "AND norm IN (SELECT lower(strip_accents(unnest(?::VARCHAR[]))))"
)


#: The work keys of an id filter's works (:data:`.params.ID_FILTERS`), its ids the one parameter.
ID_WORKS_SQL = {
    "author": "SELECT a.work_key FROM site_work_authors a WHERE a.author_id IN (SELECT unnest(?::VARCHAR[]))",
    "institution_id": "SELECT i.work_key FROM site_work_institution_ids i WHERE i.institution_id IN "
    "(SELECT unnest(?::VARCHAR[]))",
}


def _id_clauses(f: dict) -> list[Clause]:
    """The clauses of the id filters set (``author``, ``institution_id``), each in a group of its own: the same SQL
    over ``works`` and over ``work_facets``."""
    return [
        Clause(name, f"w.work_key IN ({sql})", (f[name].split(OR_SEPARATOR),))
        for name, sql in ID_WORKS_SQL.items()
        if name in f
    ]


def _text_clause(name: str, values: list[str], negated: bool, coded: bool) -> Clause:
    """A text filter (``negated``: its exclusion) over ``work_facets`` codes or over ``works``: the works with a
    value (a name, for a name facet) that folds to one of ``values``; negated, every other work, including those
    without any value. Both are in the facet's group, so the facet's counts list the alternatives to both."""
    params: tuple = (values,)
    if coded and name in NAME_TABLES:
        # list_contains of the one code most values fold from: list_has_any of a list took twice as long a row
        # (benchmarks/bench_site.py's venues_or_not_institution at 200,000 works)
        one, codes, n = (
            _FOLDED.format(col=c, facet=name) for c in ("min(code)", "coalesce(list(code), [])", "count(*)")
        )
        sql = f"CASE WHEN ({n}) = 1 THEN list_contains(w.{name}, ({one})) ELSE list_has_any(w.{name}, ({codes})) END"
        params = (values, values, values)
    elif coded:
        sql = f"w.{name} IN ({_FOLDED.format(col='code', facet=name)})"
    elif name in NAME_TABLES:
        sql = (
            f"w.work_key IN (SELECT x.work_key FROM {NAME_TABLES[name]} x WHERE x.name IN "
            f"({_FOLDED.format(col='value', facet=name)}))"
        )
    else:
        sql = f"w.{name} IN ({_FOLDED.format(col='value', facet=name)})"
    if negated:
        sql = f"NOT coalesce({sql}, false)"
    return Clause(name, sql, params)


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
    :mod:`.stored_counts`); empty for keys not stored, and for a release of a layout without the table."""
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
