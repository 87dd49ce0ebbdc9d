"""A cohort's works per year, in all and per category of their direct labels: the home page's trend chart.

Every year from the cohort's first to its last is listed (its year filters' range when it has one, unless that spans
more than :data:`MAX_YEARS` years), a year without works counting 0; a cohort without any dated work has no trend. The series are the cohort's works (every work with a publication year), then one per category
that a labelled direct label of any teacher gives to at least one of its works: the works (counted once, whatever
the number of teachers) whose direct labels carry the category, in SPEC section 3 order. A work without a year is
in no year. Counted over ``work_facets`` with the cohort's coded clauses (the count's own rows), only for a cohort of
at most :data:`TREND_MAX_WORKS` works: a larger one is not drawn (the page says so), so the page stays as fast as
its count.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...vocab import CATEGORIES
from .cohort_query import CohortQuery

#: Most works whose trend is counted on a page view.
TREND_MAX_WORKS = 200_000
#: Widest year range drawn from the cohort's year filters (a wider one is cut to the years its works span).
MAX_YEARS = 100
#: The series of every work of the cohort (the categories are their codes).
ALL_WORKS = ""


@dataclass(frozen=True)
class Trend:
    """Years in order, and each series as ``(category code or ALL_WORKS, works per year)`` (tuples: a trend is a
    value, so a drawn chart can be kept for it)."""

    years: tuple[int, ...]
    series: tuple[tuple[str, tuple[int, ...]], ...]


def cohort_trend(q: CohortQuery) -> Trend | None:
    """The cohort's trend (module docstring); None when it holds more than :data:`TREND_MAX_WORKS` works."""
    if q.count() > TREND_MAX_WORKS:
        return None
    where, params = q.coded_where()
    totals = dict(
        q.con.execute(
            f"SELECT w.year, count(*) FROM work_facets w WHERE ({where}) AND w.year IS NOT NULL GROUP BY 1", params
        ).fetchall()
    )
    per = q.con.execute(
        "SELECT w.year, l.category, count(DISTINCT w.work_key) FROM work_facets w JOIN ("
        "SELECT work_key, unnest(categories) AS category FROM work_labels WHERE status = 'labelled') l "
        f"ON l.work_key = w.work_key WHERE ({where}) AND w.year IS NOT NULL GROUP BY 1, 2",
        params,
    ).fetchall()
    known = sorted(totals)
    if not known:
        return Trend((), ())
    first = q.cohort.filters.get("year_min", known[0])
    last = q.cohort.filters.get("year_max", known[-1])
    if last - first > MAX_YEARS:  # a range far wider than the works: their own span
        first, last = known[0], known[-1]
    years = tuple(range(first, last + 1))
    counts: dict[str, dict[int, int]] = {}
    for year, category, n in per:
        counts.setdefault(category, {})[year] = n
    order = [c for c in CATEGORIES if c in counts] + sorted(c for c in counts if c not in CATEGORIES)
    series = [(ALL_WORKS, tuple(totals.get(y, 0) for y in years))]
    series += [(c, tuple(counts[c].get(y, 0) for y in years)) for c in order]
    return Trend(years, tuple(series))
