"""The site's charts, drawn on the server by matplotlib as SVG (no script on the page).

matplotlib lays out each chart (axes, ticks, bar and label positions) and the figure is cut to what it draws
(``bbox_inches="tight"``), so a long label widens the picture instead of being clipped, and every row given is
drawn, one row per bar or interval; a label longer than :data:`WRAP` characters is wrapped onto several lines. Text
stays text (``svg.fonttype: none``: searchable, read by assistive technology, scaled with the page), and the SVG
scales to its container (``width="100%"``, its natural width as ``max-width``).

Each chart is ``role="img"`` with a ``<title>`` (the figure's title) and a ``<desc>`` (its summary sentence) named by
``aria-labelledby``; the page gives the same numbers in a data table. Ids inside an SVG (matplotlib's groups and clip
paths) are prefixed with the chart's id, so several charts on one page never share one. matplotlib's settings are
process-wide, so one chart is drawn at a time (:data:`_DRAWING`); a chart takes a few tens of milliseconds.

- :func:`bar_chart`: horizontal bars (``fig["bars"]``: label, value as a fraction of the largest, an optional part
  drawn over it, the value's text), the statistics page's counts.
- :func:`interval_chart`: rates with their intervals on 0-1 (``fig["intervals"]``: label, rate or None for a range
  with no point, low, high, text).
- :func:`trend_chart`: works per year, one line per series, every year of the range on the axis (a year without
  works is 0, drawn as 0).
"""

from __future__ import annotations

import functools
import io
import re
import textwrap
import threading
from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

#: Labels longer than this many characters are wrapped onto several lines.
WRAP = 56
BAR = "#4a6fa5"
PART = "#d08c3c"
#: Line colours of the trend chart's series, in order (then repeated).
SERIES = ("#333333", "#4a6fa5", "#d08c3c", "#5b8c5a", "#8c5a8c", "#b5523b", "#3b8cb5", "#8c8c3b", "#666699", "#999966")
RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "metacan",
    "font.size": 10,
    "font.family": "sans-serif",
    "axes.spines.top": False,
    "axes.spines.right": False,
}
#: A text's font family in matplotlib's style attribute (the chart's root sets one for all).
_FONT = re.compile(r"font-family: [^;\"]*(; )?")
#: Geometry attributes, whose numbers are rounded to two decimals (matplotlib writes six: a third of the bytes).
_GEOMETRY = re.compile(r'(\s(?:d|x|y|x1|x2|y1|y2|transform|points)=")([^"]*)"')
_DECIMALS = re.compile(r"(\d+\.\d\d)\d+")
#: Inches per row of a bar or interval chart, and the width of its plotting area.
ROW_INCHES, PLOT_INCHES = 0.28, 4.6


#: Held while a chart is drawn: ``rc_context`` changes matplotlib's process-wide settings.
_DRAWING = threading.Lock()


def _one_at_a_time(fn: Callable[..., Markup]) -> Callable[..., Markup]:
    @functools.wraps(fn)
    def drawn(*args, **kwargs) -> Markup:
        with _DRAWING:
            return fn(*args, **kwargs)

    return drawn


def _wrap(label: str) -> str:
    return "\n".join(textwrap.wrap(label, WRAP)) or label


def _svg(figure, fid: str, title: str, desc: str) -> Markup:
    """The figure as inline SVG with its accessible name and description (module docstring)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context(RC):
        figure.savefig(
            buf,
            format="svg",
            bbox_inches="tight",
            metadata={"Date": None, "Creator": None, "Format": None, "Type": None},
        )
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = _FONT.sub("", svg)  # one font family for the chart (on its root below), not one copy per text
    svg = _GEOMETRY.sub(lambda m: m.group(1) + _DECIMALS.sub(r"\1", m.group(2)) + '"', svg)
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{fid}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{fid}-\1)", svg)
    svg = re.sub(r'href="#([^"]+)"', rf'href="#{fid}-\1"', svg)
    head = re.match(r'<svg ([^>]*)width="([\d.]+)pt" height="([\d.]+)pt"([^>]*)>', svg)
    width = float(head.group(2))
    opening = (
        f'<svg {head.group(1)}{head.group(4).strip()} width="100%" style="max-width:{width:.0f}pt;font-family:sans-serif" role="img" '
        f'aria-labelledby="{fid}-title {fid}-desc">'
        f'<title id="{fid}-title">{escape(title)}</title><desc id="{fid}-desc">{escape(desc)}</desc>'
    )
    return Markup(opening + svg[head.end() :])


def _figure(rows: int, extra: float = 0.6):
    from matplotlib.figure import Figure

    return Figure(figsize=(PLOT_INCHES, max(rows, 1) * ROW_INCHES + extra))


@_one_at_a_time
def bar_chart(fig: dict) -> Markup:
    """The horizontal bar chart of a statistics figure (``id``, ``title``, ``summary``, ``bars``)."""
    import matplotlib

    bars = fig["bars"]
    with matplotlib.rc_context(RC):
        figure = _figure(len(bars))
        ax = figure.add_subplot()
        y = list(range(len(bars)))
        ax.barh(y, [b["value"] for b in bars], color=BAR, height=0.7)
        parts = [(i, b["part"]) for i, b in enumerate(bars) if b["part"] is not None]
        if parts:
            ax.barh([i for i, _ in parts], [p for _, p in parts], color=PART, height=0.7)
        for i, b in enumerate(bars):
            ax.text(b["value"] + 0.01, i, b["text"], va="center", fontsize=9)
        ax.set_yticks(y, [_wrap(b["label"]) for b in bars])
        ax.set_ylim(len(bars) - 0.5, -0.5)
        ax.set_xlim(0, 1.18)
        ax.set_xticks([])
        ax.spines["bottom"].set_visible(False)
        ax.tick_params(axis="y", length=0)
    return _svg(figure, fig["id"], fig["title"], fig["summary"])


@_one_at_a_time
def interval_chart(fig: dict) -> Markup:
    """The interval chart of a statistics figure (``id``, ``title``, ``summary``, ``intervals``) on the 0-1 scale."""
    import matplotlib

    rows = fig["intervals"]
    with matplotlib.rc_context(RC):
        figure = _figure(len(rows), 0.8)
        ax = figure.add_subplot()
        for i, r in enumerate(rows):
            ax.plot([r["low"], r["high"]], [i, i], color="#333333", linewidth=2, solid_capstyle="butt")
            if r["rate"] is not None:
                ax.plot([r["rate"]], [i], marker="o", markersize=5, color=BAR)
            ax.text(1.03, i, r["text"], va="center", fontsize=9, transform=ax.get_yaxis_transform())
        ax.set_yticks(list(range(len(rows))), [_wrap(r["label"]) for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, 1)
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1], ["0", "0.25", "0.5", "0.75", "1"])
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.tick_params(axis="y", length=0)
    return _svg(figure, fig["id"], fig["title"], fig["summary"])


@_one_at_a_time
def trend_chart(
    fid: str, title: str, desc: str, years: Sequence[int], series: Sequence[tuple[str, Sequence[int]]], y_label: str
) -> Markup:
    """Works per year: one line per ``(name, counts)`` of ``series`` (a count per year of ``years``), with a legend;
    integer ticks on both axes."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    with matplotlib.rc_context(RC):
        figure = Figure(figsize=(6.4, 3.2))
        ax = figure.add_subplot()
        for i, (name, counts) in enumerate(series):
            ax.plot(
                list(years),
                list(counts),
                marker="o" if i == 0 else None,  # the first series' points only: a marker per point is bytes
                markersize=3,
                linewidth=2 if i == 0 else 1.4,
                color=SERIES[i % len(SERIES)],
                label=_wrap(name),
            )
        ax.set_ylabel(y_label)
        ax.set_ylim(bottom=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(axis="y", color="#dddddd", linewidth=0.6)
        if series:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=9)
    return _svg(figure, fid, title, desc)
