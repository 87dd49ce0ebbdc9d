"""The statistics page's charts drawn by matplotlib (site/web/charts.py): every row drawn, every label whole (wrapped,
never cut), a range without a point drawn without one, the accessible name and description, and ids that two charts
on one page never share."""

from __future__ import annotations

import re
import textwrap
from xml.etree import ElementTree

from metacan_pipeline.site.web import charts

SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    root = ElementTree.fromstring(svg)
    return [t.text for t in root.iter(f"{SVG}text") if t.text]


def _prevalence_like(n: int = 48) -> dict:
    """``n`` rows whose labels share their first 46 characters (the old template cut them there, to one label)."""
    rows = []
    for i in range(n):
        label = f"Metaepidemiology and research-on-research methods, narrow sense ({'codex' if i % 2 else 'gemma'}, population {i})"
        swap = i % 6 == 5
        low, high = i / 100, i / 100 + 0.2
        rows.append({"label": label, "rate": None if swap else low + 0.1, "low": low, "high": high, "text": f"row {i}"})
    return {"id": "prevalence", "title": "Prevalence & <intervals>", "summary": 'Every "row" drawn.', "intervals": rows}


def test_every_interval_row_is_drawn_with_its_whole_label_and_a_range_has_no_point():
    fig = _prevalence_like()
    svg = str(charts.interval_chart(fig))
    texts = _texts(svg)
    for r in fig["intervals"]:
        lines = textwrap.wrap(r["label"], charts.WRAP)
        assert len(lines) > 1 and all(line in texts for line in lines), r["label"]  # wrapped, whole
        assert texts.count(r["text"]) == 1
    # the point marker (the bar colour) is used once per row with a rate; a screener-swap range has none
    (marker,) = re.findall(r'<path id="(prevalence-m[0-9a-f]+)"[^>]*style="[^"]*#4a6fa5', svg)
    assert svg.count(f'xlink:href="#{marker}"') == len([r for r in fig["intervals"] if r["rate"] is not None]) == 40
    assert svg.startswith("<svg ") and 'role="img" aria-labelledby="prevalence-title prevalence-desc"' in svg
    assert '<title id="prevalence-title">Prevalence &amp; &lt;intervals&gt;</title>' in svg
    assert '<desc id="prevalence-desc">Every &#34;row&#34; drawn.</desc>' in svg
    assert 'width="100%"' in svg and "viewBox=" in svg


def test_two_charts_share_no_id_and_text_stays_text():
    a = str(charts.bar_chart({"id": "a", "title": "A", "summary": "", "bars": [
        {"label": "English", "value": 1.0, "part": 0.25, "text": "30"},
        {"label": "French", "value": 0.5, "part": None, "text": "15"},
    ]}))  # fmt: skip
    b = str(charts.bar_chart({"id": "b", "title": "B", "summary": "", "bars": [
        {"label": "English", "value": 1.0, "part": None, "text": "30"},
    ]}))  # fmt: skip
    ids_a, ids_b = set(re.findall(r'\bid="([^"]+)"', a)), set(re.findall(r'\bid="([^"]+)"', b))
    assert ids_a and ids_b and not ids_a & ids_b
    assert all(i.startswith("a-") for i in ids_a) and all(i.startswith("b-") for i in ids_b)
    for ref in re.findall(r'url\(#([^)]+)\)|href="#([^"]+)"', a):
        assert (ref[0] or ref[1]) in ids_a  # every reference resolves inside its own chart
    assert {"English", "French", "30", "15"} <= set(_texts(a))


def test_the_trend_chart_draws_one_line_per_series_over_every_year():
    years = [2018, 2019, 2020, 2021]
    svg = str(
        charts.trend_chart(
            "trend", "T", "D", years, [("All works", [3, 0, 2, 5]), ("Bibliometrics", [1, 0, 0, 2])], "Works"
        )
    )
    texts = _texts(svg)
    assert {"All works", "Bibliometrics", "Works"} <= set(texts) and {"2018", "2021"} <= set(texts)
    assert len(re.findall(r'<g id="trend-line2d_\d+">\s*<path d="M [^"]*L[^"]*L[^"]*L', svg)) >= 2  # 4 points each
