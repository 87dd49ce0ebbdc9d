"""The coverage figures of the statistics page (computed at build by :mod:`..build.coverage_figures`): the top venues,
funders and Canadian institutions with how many of their works a teacher labelled, the abstract gap by work type, and
the labelled works by year and by language. Each figure is the page's usual dict (id, title, summary, bars, data
table); names are shown as OpenAlex has them, and every share is of the row's own works."""

from __future__ import annotations

from typing import Any

from babel.numbers import format_percent

from ...i18n import N_, NUMBER_LOCALES, format_number, translations
from . import strings

#: The figures of this module, in the order the page shows them (a release of an earlier layout has none).
COVERAGE_FIGURES = (
    "top_venues",
    "top_funders",
    "top_institutions",
    "abstract_gap_by_type",
    "labelled_by_year",
    "labelled_by_language",
)
#: Bars drawn per chart (the data table lists every row).
CHART_ROWS = 15

SUMMARY_TOP = N_(
    "%(n)s listed; the first, %(top)s, has %(works)s works, of which %(labelled)s (%(share)s) carry a teacher's direct "
    "label."
)
SUMMARY_GAP_BY_TYPE = N_(
    "%(types)s work types; %(top)s, the most common, has %(gap)s of its %(works)s works (%(share)s) without an abstract "
    "in OpenAlex."
)
SUMMARY_LABELLED = N_(
    "%(labelled)s of %(works)s works (%(share)s) carry a teacher's direct label and %(classified)s (%(cshare)s) ship a "
    "category; a work without a label is not classified yet, which is not a negative."
)
NOTHING = N_("Nothing to list in this release.")
NOT_RECORDED = N_("not recorded")


def _pct(x: float, locale: str) -> str:
    return format_percent(x, "#,##0.0%", locale=NUMBER_LOCALES[locale])


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _bars(items: list[tuple[str, float, float | None]], fmt, limit: int | None = CHART_ROWS) -> list[dict]:
    """Bars of a horizontal chart: ``(label, value, part)`` as widths relative to the largest value; the first
    ``limit`` (None: every one, as a year chart draws every year)."""
    top = max((v for _, v, _ in items), default=0) or 1
    return [
        {"label": label, "value": v / top, "part": (p / top if p is not None else None), "text": fmt(v)}
        for label, v, p in items[:limit]
    ]


def _every_year(rows: list[dict]) -> list[dict]:
    """The by-year rows with a row of zeros for each missing year between the first and the last (consecutive bars);
    the row without a year stays last."""
    by_year = {r["value"]: r for r in rows if r["value"] is not None}
    if not by_year:
        return rows
    zero = {k: 0 for k in rows[0] if k != "value"}
    return [by_year.get(y, {"value": y, **zero}) for y in range(min(by_year), max(by_year) + 1)] + [
        r for r in rows if r["value"] is None
    ]


def coverage_figures(stats: dict[str, Any], locale: str) -> list[dict]:
    """The page's coverage figures in ``locale``; none for a release built before they existed."""
    if not all(name in stats for name in COVERAGE_FIGURES):
        return []
    _ = translations(locale).gettext
    num = lambda n: format_number(n, locale)  # noqa: E731
    pct = lambda x: _pct(x, locale)  # noqa: E731
    shown = lambda v: str(v) if v is not None else _(NOT_RECORDED)  # noqa: E731
    out = []
    for fid, name, title, column in (
        ("top-venues", "top_venues", _("Top venues"), "venue"),
        ("top-funders", "top_funders", _("Top funders"), "funder"),
        ("top-institutions", "top_institutions", _("Top Canadian institutions"), "institution"),
    ):
        rows = stats[name]
        summary = (
            _(SUMMARY_TOP)
            % {
                "n": num(len(rows)),
                "top": rows[0]["value"],
                "works": num(rows[0]["works"]),
                "labelled": num(rows[0]["labelled"]),
                "share": pct(_share(rows[0]["labelled"], rows[0]["works"])),
            }
            if rows
            else _(NOTHING)
        )
        fig = {
            "id": fid,
            "title": title,
            "summary": summary,
            "bars": _bars([(r["value"], r["works"], r["labelled"]) for r in rows], num),
            "legend": [_("Works"), strings.label("labelled", locale)],
            "columns": [
                strings.label(column, locale),
                _("Works"),
                strings.label("labelled", locale),
                _("Share"),
                _("Without abstract"),
                _("Share"),
            ],
            "rows": [
                [
                    r["value"],
                    num(r["works"]),
                    num(r["labelled"]),
                    pct(_share(r["labelled"], r["works"])),
                    num(r["no_abstract"]),
                    pct(_share(r["no_abstract"], r["works"])),
                ]
                for r in rows
            ],
        }
        out.append(fig)
    rows = stats["abstract_gap_by_type"]
    summary = (
        _(SUMMARY_GAP_BY_TYPE)
        % {
            "types": num(sum(1 for r in rows if r["value"] is not None)),
            "top": shown(rows[0]["value"]),
            "gap": num(rows[0]["no_abstract"]),
            "works": num(rows[0]["works"]),
            "share": pct(_share(rows[0]["no_abstract"], rows[0]["works"])),
        }
        if rows
        else _(NOTHING)
    )
    table = [
        [shown(r["value"]), num(r["works"]), num(r["no_abstract"]), pct(_share(r["no_abstract"], r["works"]))]
        for r in rows
    ]
    out.append(
        {
            "id": "abstract-gap-by-type",
            "title": _("The abstract gap by work type"),
            "summary": summary,
            # a share: the bar's width is the share of the chart's width
            "bars": [
                {"label": t[0], "value": _share(r["no_abstract"], r["works"]), "part": None, "text": t[3]}
                for r, t in zip(rows[:CHART_ROWS], table, strict=False)
            ],
            "columns": [strings.label("type", locale), _("Works"), _("Without abstract"), _("Share")],
            "rows": table,
        }
    )
    for fid, name, title, column in (
        ("labelled-by-year", "labelled_by_year", _("Labelled works by year"), "year"),
        ("labelled-by-language", "labelled_by_language", _("Labelled works by language"), "language"),
    ):
        rows = _every_year(stats[name]) if name == "labelled_by_year" else stats[name]
        works, labelled, classified = (sum(r[k] for r in rows) for k in ("works", "labelled", "classified"))
        summary = _(SUMMARY_LABELLED) % {
            "labelled": num(labelled),
            "works": num(works),
            "share": pct(_share(labelled, works)),
            "classified": num(classified),
            "cshare": pct(_share(classified, works)),
        }
        bars = [(shown(r["value"]), r["works"], r["labelled"]) for r in rows]
        out.append(
            {
                "id": fid,
                "title": title,
                "summary": summary,
                "bars": _bars(bars, num, None if name == "labelled_by_year" else CHART_ROWS),
                "legend": [_("Works"), strings.label("labelled", locale)],
                "columns": [
                    strings.label(column, locale),
                    _("Works"),
                    strings.label("labelled", locale),
                    _("Share"),
                    strings.label("classified", locale),
                    _("Share"),
                ],
                "rows": [
                    [
                        shown(r["value"]),
                        num(r["works"]),
                        num(r["labelled"]),
                        pct(_share(r["labelled"], r["works"])),
                        num(r["classified"]),
                        pct(_share(r["classified"], r["works"])),
                    ]
                    for r in rows
                ],
            }
        )
    return out
