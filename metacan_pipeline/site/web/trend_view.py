"""The home page's trend chart of a cohort (:mod:`..query.trend`), in the page's language: the chart (drawn by
:func:`.charts.trend_chart`), its summary sentence and its data table (a row per year, a column per series) for a
reader who does not see the chart."""

from __future__ import annotations

import functools
from typing import Any

from ...i18n import N_, format_number, translations
from ..query import trend as trends
from ..query.trend import ALL_WORKS, Trend
from . import charts, strings

TITLE = N_("Works per year in this cohort, and per category of their direct labels")
SUMMARY = N_(
    "%(works)s works of this cohort have a publication year, from %(first)s to %(last)s; the most in one year: "
    "%(peak)s in %(peak_year)s. A category line counts the works a teacher's direct label puts in it (any teacher, "
    "each work once); a year without works counts 0."
)
TOO_LARGE = N_(
    "The trend is drawn for cohorts of at most %(max)s works; this one holds %(works)s. Add a filter to see it."
)
NO_YEAR = N_("No work of this cohort has a publication year: there is no trend to draw.")
ALL_WORKS_NAME = N_("All works of the cohort")


@functools.lru_cache(maxsize=256)
def trend_figure(trend: Trend | None, count: int, locale: str) -> dict[str, Any]:
    """``{"title", "summary", "svg" (None without a chart), "columns", "rows"}`` of the cohort's trend; ``trend`` None
    (too large a cohort) gives the sentence saying so. Kept for the last 256 trends drawn (a chart takes tens of
    milliseconds; the same cohort asked again, a next page, a language switch of the same counts, costs nothing);
    read-only for its callers."""
    _ = translations(locale).gettext
    num = lambda n: format_number(n, locale)  # noqa: E731
    out: dict[str, Any] = {"title": _(TITLE), "svg": None, "columns": [], "rows": []}
    if trend is None:
        out["summary"] = _(TOO_LARGE) % {"max": num(trends.TREND_MAX_WORKS), "works": num(count)}
        return out
    if not trend.years:
        out["summary"] = _(NO_YEAR)
        return out
    names = [_(ALL_WORKS_NAME) if c == ALL_WORKS else strings.category_name(c, locale) for c, _n in trend.series]
    totals = trend.series[0][1]
    peak = max(range(len(totals)), key=lambda i: (totals[i], -i))
    out["summary"] = _(SUMMARY) % {
        "works": num(sum(totals)),
        "first": trend.years[0],
        "last": trend.years[-1],
        "peak": num(totals[peak]),
        "peak_year": trend.years[peak],
    }
    out["columns"] = [strings.label("year", locale), *names]
    out["rows"] = [[str(y), *(num(s[1][i]) for s in trend.series)] for i, y in enumerate(trend.years)]
    series = [(name, counts) for name, (_c, counts) in zip(names, trend.series, strict=True)]
    out["svg"] = charts.trend_chart("trend", out["title"], out["summary"], trend.years, series, _("Works"))
    return out
