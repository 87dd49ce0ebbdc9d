"""The statistics page (``/statistics``, ``/fr/statistics``) and ``/api/v1/statistics``: the frame by year
with the affiliation-blind share, route overlaps, the frame by field and by language, the abstract gap, the
coverage figures (:mod:`.coverage_figures`: top venues, funders and institutions, the abstract gap by work type,
labelled works by year and by language), the labelled works by category and study design with their coverage, the classifier's decisions by category, and
prevalence per category with the design-based 95% CI and the screener-swap range, the protocol's estimands
(:mod:`metacan_pipeline.student.estimands`) with a one-sentence definition of each, the works per release layer
(:mod:`metacan_pipeline.release.release_layers`), and the original protocol's instruments ii and iii, each marked for
what it is: the recall of each filter against the works with a qualified teacher's direct label or an adjudicated
human code, and known-item recall on the venue reference set, a non-probability bound kept apart from the
design-based estimates (:mod:`metacan_pipeline.audit.instruments`). A reference that does not exist yet is shown as
"no reference yet", and an instrument that never ran says so.

Every figure was computed when the release was built (:mod:`..build.figures`: ``release_statistics`` and
``release_prevalence``), so a request reads a few small rows at any release size; they are read once per process
(a release never changes). Each figure on the page has a text summary, a chart drawn on the server as SVG (with
``<title>`` and ``<desc>``; no script) and a data table with every number. Every category shown states its source and
status (SPEC section 8): a direct label's teacher, ``label_status`` and qualification; a decision's mode, classifier
version and ``prediction_status``; a prevalence row's method and what it counts.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from babel.numbers import format_percent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...audit.instruments.recall import HUMAN, KNOWN_ITEM_CATEGORY, NO_SOURCE
from ...i18n import DEFAULT_LOCALE, N_, NUMBER_LOCALES, format_number, language_name, translations
from ...publish.pages import qualification_notes_in, qualification_words
from ...release.release_layers import RELEASE_LAYERS
from ...student.census import zero_width_census
from ...student.estimands import CA_PERSON_NOT_MEASURED, CATEGORY_RATE, ESTIMANDS, estimand_display
from ...vocab import display_name
from ..query.params import single_values
from . import charts, strings
from .api import url_with
from .coverage_figures import coverage_figures

#: The figures of ``release_statistics`` the page shows, in order.
FIGURES = (
    "frame_by_year",
    "route_overlaps",
    "by_field",
    "by_language",
    "retraction_states",
    "labels_by_teacher",
    "labels_by_category",
    "labels_by_study_design",
    "decisions_by_category",
    "teacher_pairs",
)
#: Bars drawn per chart (the data table lists every row).
CHART_ROWS = 15
#: Rates drawn in the prevalence chart (every teacher rate and swap range of a release, in practice).
INTERVAL_ROWS = 60

SUMMARY_YEAR = N_(
    "%(works)s works from %(first)s to %(last)s; %(blind)s of them (%(share)s) are invisible to an "
    "affiliation-only search, and %(gap)s (%(gap_share)s) have no abstract in OpenAlex."
)
SUMMARY_GAP = N_(
    "%(gap)s of %(works)s works (%(share)s) have no abstract in OpenAlex: the title-only view is all a teacher or the "
    "student sees of them."
)
SUMMARY_ROUTES = N_(
    "The largest route combination is %(top)s with %(n)s works (%(share)s); %(single)s works (%(single_share)s) "
    "were admitted by one route only."
)
SUMMARY_FACET = N_("%(n)s values; the largest is %(top)s with %(works)s works (%(share)s).")
SUMMARY_RETRACTION = N_(
    "Retraction Watch (file %(version)s) lists %(retracted)s works of the release as retracted, %(concern)s with an "
    "expression of concern, %(corrected)s as corrected and %(reinstated)s as reinstated; OpenAlex does not mark "
    "%(missed)s of the retracted works as retracted."
)
SUMMARY_NOT_CHECKED = N_(
    "No Retraction Watch file was read for this release: its %(works)s works are not checked, which does not mean "
    "that they are not retracted (OpenAlex marks %(openalex)s as retracted)."
)
SUMMARY_LABELS = N_(
    "%(teacher)s labelled %(labelled)s of %(works)s works (%(share)s coverage; %(failed)s failed); the most frequent "
    "category among its direct labels is %(top)s (%(top_n)s works). Absence of a label is not a negative."
)
SUMMARY_NO_LABELS = N_("No teacher's direct label is in this release.")
SUMMARY_DECISIONS = N_(
    "The classifier's decisions (machine predictions, unvalidated) cover %(n)s category rows; the largest is "
    "%(top)s with %(works)s works."
)
SUMMARY_NO_DECISIONS = N_("The classifier decided no category in this release.")
SUMMARY_PREVALENCE = N_(
    "%(n)s prevalence rows; %(category)s: %(teacher)s estimates %(rate)s (95%% CI %(low)s to %(high)s)."
)
SUMMARY_CENSUS = N_(
    "A census has no sampling error: the interval of a census rate is the rate itself. The machine's error (how "
    "often the teacher is wrong) is not in it: that is the audit's to measure."
)
SUMMARY_NO_RATE = N_("%(n)s prevalence rows; no teacher rate could be computed.")
SUMMARY_NO_PREVALENCE = N_(
    "The prevalence table was not materialized when this release was built: materialize the asset prevalence, "
    "then site_database."
)
SUMMARY_ESTIMANDS = N_(
    "%(estimand)s: %(teacher)s estimates %(rate)s of the frame (95%% CI %(low)s to %(high)s); every estimand's rate is "
    "a share of the whole frame, so the rules compare directly."
)
SUMMARY_NO_ESTIMANDS = N_("No estimand's rate could be computed in this release.")
SUMMARY_UNQUALIFIED = N_(
    "%(teacher)s is not qualified (%(note)s): its labels decide nothing, and its rates are machine outputs to read, "
    "not estimates to cite."
)
CA_PERSON_NOTE = N_(
    "CA-PERSON is not measured: the frame's OpenAlex work records carry no author's last-known institutions, so "
    "ALT-2's rate is of the primary estimand or CA-VENUE, a lower bound on ALT-2."
)
NOT_RECORDED = N_("not recorded")
SUMMARY_LAYERS = N_(
    "Every work of the release is in exactly one of the original protocol's release layers, so that no layer borrows "
    "another's authority: %(human_verified)s human-verified, %(high_precision)s high-precision, %(provisional)s "
    "provisional and %(contested)s contested, of %(works)s works."
)
#: What puts a work in each release layer (:mod:`metacan_pipeline.release.release_layers`).
LAYER_MEANINGS = {
    "human_verified": N_("an adjudicated human code from the audit study"),
    "high_precision": N_("every positive classifier decision is on a head that passed human validation"),
    "provisional": N_("machine output no human audit validated, or nothing yet"),
    "contested": N_(
        "the qualified or imported teachers, or the classifier's two sides, split on a category or an about-Canada "
        "head (an unqualified teacher's labels split nothing)"
    ),
}
NOT_RUN = N_(
    "The asset %(asset)s was not materialized when this release was built: materialize it, then site_database."
)
NO_REFERENCE_YET = N_("no reference yet")
SUMMARY_FILTER_RECALL = N_(
    "Instrument ii of the original protocol, on metaresearch: each filter (a route, a lexicon tier, a topic filter) is "
    "run over the works that already carry a qualified teacher's direct label or an adjudicated human code, and what "
    "it drops is counted, with an exact 95%% interval; %(filters)s filters against %(references)s references. It "
    "measures a filter against labelled works, not the frame: it is not a design-based estimate."
)
SUMMARY_FILTER_NO_REFERENCE = N_(
    "Instrument ii of the original protocol: no reference yet. No teacher is qualified and no human code is final, so "
    "no filter's recall can be measured; the rows say so rather than show a number."
)
SUMMARY_KNOWN_ITEM = N_(
    "Instrument iii of the original protocol: frame works published in the pinned meta-research venues (list "
    "%(version)s): %(works)s. Each system's recall on them is known-item recall, a non-probability bound on recall "
    "for the hard cases, kept apart from the design-based estimates on this page and never a replacement for them."
)
SUMMARY_KNOWN_ITEM_NONE = N_(
    "Instrument iii of the original protocol: no reference yet. No frame work was published in a pinned "
    "meta-research venue (list %(version)s), so there is nothing to measure recall on."
)
#: The original protocol's words on each instrument (section 6.1), as the pipeline's
#: ``audit.instruments.recall.FILTER_RECALL_MEANS`` and ``KNOWN_ITEM_MEANS`` hold them.
FILTER_RECALL_MEANS = N_(
    "Any filter's recall is measured directly against the works that already carry full-rubric labels: run the "
    "filter over them and count what it drops. No filter enters the pipeline without its recall measured this way "
    "first."
)
KNOWN_ITEM_MEANS = N_(
    "Known-item recall on a venue reference set is a non-probability estimate. It bounds and diagnoses recall on the "
    "hard cases; it does not replace the design-weighted population estimate. Both are reported, separately, and "
    "neither is presented as the other."
)
#: The instrument tables' notes the page says in its language (other notes are data, shown as they are).
INSTRUMENT_NOTES = (
    N_("no reference yet: no qualified teacher's direct labels and no final human code"),
    N_("no reference positives in this category"),
    N_("no frame work in a pinned venue"),
    N_("known-item recall: a non-probability bound on recall for the hard cases, not a design-based estimate"),
)
GROUPINGS = {"all": N_("all"), "language": N_("language"), "has_abstract": N_("abstract"), "venue": N_("venue")}
#: The phrases of the prevalence rows' ``design`` (student/prevalence.py, student/census.py, student/estimands.py), as
#: interface strings: :func:`design_words` says them in the page's language.
DESIGN_PHRASES = (
    N_("census of the frame"),
    N_("every frame work scored once"),
    N_("teacher rates above"),
    N_(
        "CA-PERSON not measured: the frame's OpenAlex work records carry no author's last-known institutions, so this "
        "is primary ∪ CA-VENUE, a lower bound on ALT-2"
    ),
)
METHODS = {
    "design_weighted_teacher_rate": N_("design-weighted rate of a teacher's direct labels"),
    "classify_and_count": N_("classify and count (candidate predictions)"),
    "classify_and_count_consensus": N_("classify and count (consensus predictions)"),
    "screener_swap_range": N_("screener-swap range (lowest to highest teacher rate)"),
}


def method_name(method: str, locale: str) -> str:
    """What a prevalence row's ``method`` computes, in ``locale`` (an unknown method as it is)."""
    return translations(locale).gettext(METHODS[method]) if method in METHODS else method


def percent(x: float | None, locale: str) -> str:
    """A share in [0, 1] as a percentage in ``locale`` (one decimal), or an empty cell for None."""
    return "" if x is None else format_percent(x, "#,##0.0%", locale=NUMBER_LOCALES[locale])


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def every_year(rows: list[dict]) -> list[dict]:
    """The frame-by-year rows with a row of zeros for each year between the first and the last that has no work, so
    a chart's bars are consecutive years; the row of works without a year stays last."""
    by_year = {r["year"]: r for r in rows if r["year"] is not None}
    if not by_year:
        return rows
    zero = {k: 0 for k in rows[0] if k != "year"}
    span = range(min(by_year), max(by_year) + 1)
    return [by_year.get(y, {"year": y, **zero}) for y in span] + [r for r in rows if r["year"] is None]


def load_statistics(con) -> dict[str, Any]:
    """``{figure: rows}`` of ``release_statistics`` and ``prevalence``: the rows of ``release_prevalence``."""
    out = {f: json.loads(items) for f, items in con.execute("SELECT figure, items FROM release_statistics").fetchall()}
    out["prevalence"] = con.execute("SELECT * FROM release_prevalence ORDER BY position").to_arrow_table().to_pylist()
    for row in out["prevalence"]:
        row.pop("position")
    return out


def label_source(teacher: str, by_teacher: dict[str, dict], locale: str) -> str:
    """ "direct label (teacher, label_status; qualification)": the source and status of a teacher's categories."""
    t = by_teacher.get(teacher, {})
    tr = translations(locale)
    qualification = qualification_words(t.get("qualification"), tr) or tr.gettext(N_("imported"))
    return tr.gettext(N_("direct label (%(teacher)s, %(status)s; %(qualification)s)")) % {
        "teacher": teacher,
        "status": t.get("label_status") or "direct_label_unvalidated",
        "qualification": qualification,
    }


def _route_name(row: dict, locale: str) -> str:
    on = [strings.label(r, locale) for r in ("ca_aff", "ca_fund", "ca_venue", "about_ca") if row[r]]
    return " + ".join(on) or translations(locale).gettext(N_("no route"))


def _figure(fid: str, title: str, summary: str, bars: list[dict], columns: list[str], rows: list[list]) -> dict:
    return {"id": fid, "title": title, "summary": summary, "bars": bars[:CHART_ROWS], "columns": columns, "rows": rows}


def _bars(items: list[tuple[str, float, float | None]], fmt) -> list[dict]:
    """Bars of a horizontal chart: ``(label, value, part)`` -> width fractions of the largest value."""
    top = max((v for _, v, _ in items), default=0) or 1
    return [
        {"label": label, "value": v / top, "part": (p / top if p is not None else None), "text": fmt(v)}
        for label, v, p in items
    ]


def view(stats: dict[str, Any], locale: str) -> list[dict]:
    """The page's figures in ``locale``: id, title, summary, bars or intervals, the chart drawn from them (``svg``,
    :mod:`.charts`), data table columns and rows."""
    tr = translations(locale)
    _ = tr.gettext
    num = lambda n: format_number(n, locale)  # noqa: E731
    pct = lambda x: percent(x, locale)  # noqa: E731
    out = []
    years = every_year(stats["frame_by_year"])
    total = sum(r["works"] for r in years)
    blind = sum(r["invisible"] for r in years)
    gap = sum(r["no_abstract"] for r in years)
    known = [r["year"] for r in years if r["year"] is not None]
    summary = _(SUMMARY_YEAR) % {
        "works": num(total),
        "first": known[0] if known else "-",
        "last": known[-1] if known else "-",
        "blind": num(blind),
        "share": pct(_share(blind, total)),
        "gap": num(gap),
        "gap_share": pct(_share(gap, total)),
    }
    year_label = lambda y: str(y) if y is not None else _(NOT_RECORDED)  # noqa: E731
    cols = [
        _("Year"),
        _("Works"),
        _("Invisible to affiliation-only search"),
        _("Share"),
        _("Without abstract"),
        _("Share"),
    ]
    table = [
        [
            year_label(r["year"]),
            num(r["works"]),
            num(r["invisible"]),
            pct(_share(r["invisible"], r["works"])),
            num(r["no_abstract"]),
            pct(_share(r["no_abstract"], r["works"])),
        ]
        for r in years
    ]
    bars = _bars([(year_label(r["year"]), r["works"], r["invisible"]) for r in years], num)
    fig = _figure("frame-by-year", _("The frame by year, and the affiliation-blind share"), summary, [], cols, table)
    fig["bars"], fig["legend"] = bars, [_("Works"), _("Invisible to affiliation-only search")]
    out.append(fig)
    gap_bars = [
        {"label": year_label(r["year"]), "value": _share(r["no_abstract"], r["works"]), "part": None, "text": t[5]}
        for r, t in zip(years, table, strict=True)
    ]  # a share: the bar's width is the share of the chart's width
    gap_fig = _figure(
        "abstract-gap",
        _("The abstract gap: works without an abstract, by year"),
        _(SUMMARY_GAP) % {"gap": num(gap), "works": num(total), "share": pct(_share(gap, total))},
        gap_bars,
        [cols[0], cols[1], cols[4], cols[5]],
        [[t[0], t[1], t[4], t[5]] for t in table],
    )
    gap_fig["bars"] = gap_bars
    out.append(gap_fig)
    routes = stats["route_overlaps"]
    single = sum(r["works"] for r in routes if sum(r[k] for k in ("ca_aff", "ca_fund", "ca_venue", "about_ca")) == 1)
    summary = (
        _(SUMMARY_ROUTES)
        % {
            "top": _route_name(routes[0], locale),
            "n": num(routes[0]["works"]),
            "share": pct(_share(routes[0]["works"], total)),
            "single": num(single),
            "single_share": pct(_share(single, total)),
        }
        if routes
        else ""
    )
    out.append(
        _figure(
            "route-overlaps",
            _("Route overlaps: works per combination of routes"),
            summary,
            _bars([(_route_name(r, locale), r["works"], None) for r in routes], num),
            [_("Routes"), _("Works"), _("Share")],
            [[_route_name(r, locale), num(r["works"]), pct(_share(r["works"], total))] for r in routes],
        )
    )
    for fid, name, title in (
        ("by-field", "by_field", _("The frame by field")),
        ("by-language", "by_language", _("The frame by language")),
    ):
        rows = stats[name]
        by_language = name == "by_language"
        label = partial(_facet_value_name, by_language=by_language, locale=locale)
        summary = (
            _(SUMMARY_FACET)
            % {
                "n": num(len(rows)),
                "top": label(rows[0]["value"]),
                "works": num(rows[0]["works"]),
                "share": pct(_share(rows[0]["works"], total)),
            }
            if rows
            else ""
        )
        out.append(
            _figure(
                fid,
                title,
                summary,
                _bars([(label(r["value"]), r["works"], r["invisible"]) for r in rows], num),
                [strings.label(name.removeprefix("by_"), locale), *cols[1:]],
                [
                    [
                        label(r["value"]),
                        num(r["works"]),
                        num(r["invisible"]),
                        pct(_share(r["invisible"], r["works"])),
                        num(r["no_abstract"]),
                        pct(_share(r["no_abstract"], r["works"])),
                    ]
                    for r in rows
                ],
            )
        )
        out[-1]["legend"] = [_("Works"), _("Invisible to affiliation-only search")]
    out += coverage_figures(stats, locale)  # top venues, funders, institutions; abstract gap by type; labelled works
    if "retraction_states" in stats:  # a release of an earlier layout has no such figure
        out.append(_retraction_figure(stats["retraction_states"], locale))
    out += _label_figures(stats, locale, total)
    out.append(_prevalence_figure(stats, locale))
    out.append(_estimand_figure(stats, locale))
    if "release_layers" in stats:  # a release of an earlier layout has no layer
        out.append(_layer_figure(stats["release_layers"], locale))
    out.append(_filter_recall_figure(stats.get("filter_recall"), locale))
    out.append(_known_item_figure(stats.get("venue_known_item_recall"), locale))
    for fig in out:  # drawn once per language: the page caches its view
        if fig.get("intervals"):
            fig["svg"] = charts.interval_chart(fig)
        elif "intervals" not in fig and fig["bars"]:
            fig["svg"] = charts.bar_chart(fig)
    return out


def _facet_value_name(value: str | None, by_language: bool, locale: str) -> str:
    """A value of the by-field or by-language figure as the page shows it: a language by its name in ``locale``, a
    field as it is, no value as "not recorded"."""
    if value is None:
        return translations(locale).gettext(NOT_RECORDED)
    return language_name(value, locale) if by_language else value


def _layer_figure(rows: list[dict], locale: str) -> dict:
    """The works per release layer (every layer, 0 included) and what puts a work in each."""
    _ = translations(locale).gettext
    num = lambda n: format_number(n, locale)  # noqa: E731
    total = sum(r["works"] for r in rows)
    counts = {r["layer"]: r["works"] for r in rows}
    name = lambda layer: strings.value_word(layer, locale)  # noqa: E731
    return _figure(
        "release-layers",
        _("Release layers: every work in exactly one"),
        _(SUMMARY_LAYERS) % {"works": num(total), **{k: num(counts.get(k, 0)) for k in RELEASE_LAYERS}},
        _bars([(name(k), counts.get(k, 0), None) for k in RELEASE_LAYERS], num),
        [_("Release layer"), _("Works"), _("Share of the release"), _("What puts a work there")],
        [
            [name(k), num(counts.get(k, 0)), percent(_share(counts.get(k, 0), total), locale), _(LAYER_MEANINGS[k])]
            for k in RELEASE_LAYERS
        ],
    )


def instrument_note(note: str | None, locale: str) -> str:
    """An instrument row's note in ``locale``: each known part (:data:`INSTRUMENT_NOTES`) translated, qualification
    notes said in the language, anything else as it is."""
    if not note:
        return ""
    tr = translations(locale)
    parts = [tr.gettext(p) if p in INSTRUMENT_NOTES else p for p in note.split("; ")]
    return qualification_notes_in("; ".join(parts), tr)


def _reference_name(source: str, locale: str) -> str:
    _ = translations(locale).gettext
    if source == HUMAN:
        return _("adjudicated human codes")
    if source == NO_SOURCE:
        return _(NO_REFERENCE_YET)
    return _("direct labels of %(teacher)s (qualified)") % {"teacher": source.removeprefix("teacher:")}


def _recall_cells(r: dict, n_key: str, hits_key: str, locale: str) -> list[str]:
    """``hits / n``, the recall and its 95% interval, "no reference yet" where there is nothing to measure."""
    _ = translations(locale).gettext
    pct = lambda x: percent(x, locale)  # noqa: E731
    if not r[n_key]:
        return [f"0 / {format_number(r[n_key] or 0, locale)}", _(NO_REFERENCE_YET), ""]
    return [
        f"{format_number(r[hits_key], locale)} / {format_number(r[n_key], locale)}",
        pct(r["recall"]),
        f"{pct(r['lower'])} – {pct(r['upper'])}",
    ]


def _recall_interval(label: str, r: dict, pct) -> dict:
    return {
        "label": label,
        "rate": r["recall"],
        "low": r["lower"],
        "high": r["upper"],
        "text": f"{pct(r['recall'])} [{pct(r['lower'])}, {pct(r['upper'])}]",
    }


def _not_run(fid: str, title: str, asset: str, locale: str) -> dict:
    """The figure of an instrument whose table was not materialized: the sentence, and a one-row table saying so."""
    _ = translations(locale).gettext
    fig = _figure(fid, title, _(NOT_RUN) % {"asset": asset}, [], [_("Asset"), _("Status")], [[asset, _("not run")]])
    fig["intervals"] = []
    return fig


def _filter_recall_figure(rows: list[dict] | None, locale: str) -> dict:
    """Instrument ii on metaresearch (the table's other categories are in the API and the release bundle)."""
    _ = translations(locale).gettext
    pct = lambda x: percent(x, locale)  # noqa: E731
    title = _("Instrument ii: the recall of each filter against qualified labels and human codes")
    if rows is None:
        return _not_run("filter-recall", title, "filter_recall", locale)
    shown = [r for r in rows if r["category"] == KNOWN_ITEM_CATEGORY]
    measured = [r for r in shown if r["reference_source"] != NO_SOURCE]
    summary = (
        _(SUMMARY_FILTER_RECALL)
        % {
            "filters": format_number(len({r["filter_name"] for r in measured}), locale),
            "references": format_number(len({r["reference_source"] for r in measured}), locale),
        }
        if measured
        else _(SUMMARY_FILTER_NO_REFERENCE)
    )
    fig = _figure(
        "filter-recall",
        title,
        summary,
        [],
        [_("Filter"), _("Reference"), _("Kept / reference positives"), _("Recall"), _("95% CI"), _("Note")],
        [
            [
                r["filter_name"],
                _reference_name(r["reference_source"], locale),
                *_recall_cells(r, "n", "kept", locale),
                instrument_note(r["note"], locale),
            ]
            for r in shown
        ],
    )
    fig["means"] = _(FILTER_RECALL_MEANS)
    fig["intervals"] = [
        _recall_interval(f"{r['filter_name']} ({_reference_name(r['reference_source'], locale)})", r, pct)
        for r in measured
        if r["recall"] is not None
    ][:INTERVAL_ROWS]
    return fig


def _known_item_figure(rows: list[dict] | None, locale: str) -> dict:
    """Instrument iii: each system's known-item recall on the venue reference set, overall, by language and by
    abstract availability (the per-venue rows are in the API and the release bundle)."""
    _ = translations(locale).gettext
    pct = lambda x: percent(x, locale)  # noqa: E731
    title = _("Instrument iii: known-item recall on the venue reference set (a non-probability bound)")
    if rows is None:
        return _not_run("venue-known-item-recall", title, "venue_known_item_recall", locale)
    shown = [r for r in rows if r["group_by"] != "venue"]
    overall = [r for r in shown if r["group_by"] == "all"]
    works = max((r["reference_works"] for r in overall), default=0)
    version = rows[0]["venue_list_version"] if rows else ""
    summary = (_(SUMMARY_KNOWN_ITEM) if works else _(SUMMARY_KNOWN_ITEM_NONE)) % {
        "works": format_number(works, locale),
        "version": version,
    }

    def group(r: dict) -> str:
        word = _(GROUPINGS.get(r["group_by"], r["group_by"]))
        if r["group_by"] == "all":
            return word
        value = r["group"]
        if r["group_by"] == "has_abstract" and value in ("true", "false"):
            value = _("yes") if value == "true" else _("no")
        elif r["group_by"] == "language":
            value = language_name(value, locale) or value
        return f"{word}{_(strings.COLON)}{value}"

    fig = _figure(
        "venue-known-item-recall",
        title,
        summary,
        [],
        [_("System"), _("Group"), _("Reference works"), _("Detected / decided"), _("Recall"), _("95% CI"), _("Note")],
        [
            [
                r["system"],
                group(r),
                format_number(r["reference_works"], locale),
                *_recall_cells(r, "n", "detected", locale),
                instrument_note(r["note"], locale),
            ]
            for r in shown
        ],
    )
    fig["means"] = _(KNOWN_ITEM_MEANS)
    fig["intervals"] = [_recall_interval(r["system"], r, pct) for r in overall if r["recall"] is not None]
    return fig


def _retraction_figure(rows: list[dict], locale: str) -> dict:
    """Works per Retraction Watch state, with OpenAlex's own mark and the retractions OpenAlex misses."""
    version = next((r.get("version") for r in rows if r.get("version")), None)
    _ = translations(locale).gettext
    num = lambda n: format_number(n, locale)  # noqa: E731
    by = {r["state"]: r for r in rows}
    total = sum(r["works"] for r in rows)
    works = lambda s: by.get(s, {}).get("works", 0)  # noqa: E731
    if set(by) <= {"not_checked"}:
        summary = _(SUMMARY_NOT_CHECKED) % {
            "works": num(total),
            "openalex": num(sum(r["openalex_retracted"] for r in rows)),
        }
    else:
        summary = _(SUMMARY_RETRACTION) % {
            "version": version or "-",
            "retracted": num(works("retraction")),
            "concern": num(works("expression_of_concern")),
            "corrected": num(works("correction")),
            "reinstated": num(works("reinstatement")),
            "missed": num(sum(r["openalex_missed"] for r in rows)),
        }
    state = lambda s: strings.value_word(s, locale)  # noqa: E731
    return _figure(
        "retraction-watch",
        _("After publication: Retraction Watch states"),
        summary,
        _bars([(state(r["state"]), r["works"], r["openalex_missed"] or None) for r in rows], num),
        [
            strings.label("retraction_state", locale),
            _("Works"),
            _("Share"),
            _("Marked retracted by OpenAlex"),
            _("Retraction missed by OpenAlex"),
        ],
        [
            [
                state(r["state"]),
                num(r["works"]),
                percent(_share(r["works"], total), locale),
                num(r["openalex_retracted"]),
                num(r["openalex_missed"]),
            ]
            for r in rows
        ],
    )


def _label_figures(stats: dict[str, Any], locale: str, total: int) -> list[dict]:
    _ = translations(locale).gettext
    num = lambda n: format_number(n, locale)  # noqa: E731
    pct = lambda x: percent(x, locale)  # noqa: E731
    by_teacher = {r["teacher"]: r for r in stats["labels_by_teacher"]}
    cats = stats["labels_by_category"]
    sentences = []
    for t, r in by_teacher.items():
        top = next((c for c in cats if c["teacher"] == t), None)
        sentences.append(
            _(SUMMARY_LABELS)
            % {
                "teacher": t,
                "labelled": num(r["labelled"]),
                "works": num(r["release_works"]),
                "share": pct(_share(r["labelled"], r["release_works"])),
                "failed": num(r["failed"]),
                "top": strings.category_name(top["category"], locale) if top else _("none"),
                "top_n": num(top["works"]) if top else "0",
            }
        )
    summary = " ".join(sentences) or _(SUMMARY_NO_LABELS)
    coverage = _figure(
        "label-coverage",
        _("Direct labels: coverage by teacher"),
        summary,
        _bars([(t, r["labelled"], None) for t, r in by_teacher.items()], num),
        [_("Teacher"), _("Labelled works"), _("Coverage"), _("Failed"), _("Not meta-research"), _("Source and status")],
        [
            [
                t,
                num(r["labelled"]),
                pct(_share(r["labelled"], r["release_works"])),
                num(r["failed"]),
                num(r["not_metaresearch"]),
                label_source(t, by_teacher, locale),
            ]
            for t, r in by_teacher.items()
        ],
    )
    category = _figure(
        "labels-by-category",
        _("Labelled works by category (direct labels)"),
        summary,
        _bars(
            [(f"{strings.category_name(c['category'], locale)} ({c['teacher']})", c["works"], None) for c in cats], num
        ),
        [_("Category"), _("Teacher"), _("Works"), _("Share of the teacher's labelled works"), _("Source and status")],
        [
            [
                strings.category_name(c["category"], locale),
                c["teacher"],
                num(c["works"]),
                pct(_share(c["works"], by_teacher[c["teacher"]]["labelled"])),
                label_source(c["teacher"], by_teacher, locale),
            ]
            for c in cats
        ],
    )
    designs = stats["labels_by_study_design"]
    design_name = lambda d: display_name("study_design", d["study_design"], locale) or _(NOT_RECORDED)  # noqa: E731
    design = _figure(
        "labels-by-study-design",
        _("Labelled works by study design (direct labels)"),
        summary,
        _bars([(f"{design_name(d)} ({d['teacher']})", d["works"], None) for d in designs], num),
        [
            _("Study design"),
            _("Teacher"),
            _("Works"),
            _("Share of the teacher's labelled works"),
            _("Source and status"),
        ],
        [
            [
                design_name(d),
                d["teacher"],
                num(d["works"]),
                pct(_share(d["works"], by_teacher[d["teacher"]]["labelled"])),
                label_source(d["teacher"], by_teacher, locale),
            ]
            for d in designs
        ],
    )
    decisions = stats["decisions_by_category"]
    mode_word = {"candidate": _("candidate prediction"), "consensus": _("consensus prediction")}
    decided = _figure(
        "decisions-by-category",
        _("Classifier decisions by category (machine predictions)"),
        _(SUMMARY_DECISIONS)
        % {
            "n": num(len(decisions)),
            "top": strings.category_name(decisions[0]["category"], locale),
            "works": num(decisions[0]["works"]),
        }
        if decisions
        else _(SUMMARY_NO_DECISIONS),
        _bars(
            [
                (f"{strings.category_name(d['category'], locale)} ({mode_word[d['mode']]})", d["works"], None)
                for d in decisions
            ],
            num,
        ),
        [_("Category"), _("Works"), _("Share of the release"), _("Source and status")],
        [
            [
                strings.category_name(d["category"], locale),
                num(d["works"]),
                pct(_share(d["works"], total)),
                f"{mode_word[d['mode']]} ({d['model_version']}, {d['prediction_status']})",
            ]
            for d in decisions
        ],
    )
    return [coverage, category, design, decided]


def _row_source(by_teacher: dict[str, dict], locale: str):
    """What a prevalence row counts, its source and status, in ``locale``."""
    _ = translations(locale).gettext

    def source(r: dict) -> str:
        if r["method"] == "design_weighted_teacher_rate":
            return label_source(r["teacher"], by_teacher, locale)
        if r["method"].startswith("classify_and_count"):
            mode = "consensus" if r["method"].endswith("consensus") else "candidate"
            word = _("consensus prediction") if mode == "consensus" else _("candidate prediction")
            return f"{word} (machine_predicted_unvalidated)"
        return _("the teacher rates above")

    return source


def _intervals(rated: list[dict], rows: list[dict], rate_label, swap_label, pct) -> list[dict]:
    """The interval chart's rows: each teacher rate with its 95% CI (the rate itself when it has none), then each
    screener-swap range, labelled by ``rate_label`` / ``swap_label``."""
    return [
        {
            "label": rate_label(r),
            "rate": r["rate"],
            "low": r["ci_low"] if r["ci_low"] is not None else r["rate"],
            "high": r["ci_high"] if r["ci_high"] is not None else r["rate"],
            "text": f"{pct(r['rate'])} [{pct(r['ci_low'])}, {pct(r['ci_high'])}]",
        }
        for r in rated
    ] + [
        {
            "label": swap_label(r),
            "rate": None,  # a range, no point: its stored midpoint is no estimate
            "low": r["ci_low"],
            "high": r["ci_high"],
            "text": f"{pct(r['ci_low'])} – {pct(r['ci_high'])}",
        }
        for r in rows
        if r["method"] == "screener_swap_range" and r["ci_low"] is not None
    ]


def _rate_cell(r: dict, locale: str) -> str:
    """A prevalence row's rate cell: the rate; for a screener-swap range nothing (the range has no point estimate:
    the ``rate`` the pipeline stores is its midpoint, which would read as an estimate; the range column says it)."""
    if r["method"] == "screener_swap_range":
        return ""
    return percent(r["rate"], locale) if r["rate"] is not None else translations(locale).gettext("not computed")


def _prevalence_figure(stats: dict[str, Any], locale: str) -> dict:
    _ = translations(locale).gettext
    pct = lambda x: percent(x, locale)  # noqa: E731
    by_teacher = {r["teacher"]: r for r in stats["labels_by_teacher"]}
    rows = [r for r in stats["prevalence"] if r.get("estimand", CATEGORY_RATE) == CATEGORY_RATE]
    source = _row_source(by_teacher, locale)

    rated = [r for r in rows if r["method"] == "design_weighted_teacher_rate" and r["rate"] is not None]
    first = next((r for r in rated if r["category"] == "metaresearch"), rated[0] if rated else None)
    if not rows:
        summary = _(SUMMARY_NO_PREVALENCE)
    elif first is None:
        summary = _(SUMMARY_NO_RATE) % {"n": format_number(len(rows), locale)}
    else:
        summary = _(SUMMARY_PREVALENCE) % {
            "n": format_number(len(rows), locale),
            "category": strings.category_name(first["category"], locale),
            "teacher": first["teacher"],
            "rate": pct(first["rate"]),
            "low": pct(first["ci_low"]),
            "high": pct(first["ci_high"]),
        } + _unqualified(first["teacher"], by_teacher, locale)
    if any(zero_width_census(r) for r in rated):  # an interval of zero width must not read as certainty
        summary += " " + _(SUMMARY_CENSUS)
    category = lambda r: strings.category_name(r["category"], locale)  # noqa: E731
    swap_word = _("screener swap")
    intervals = _intervals(
        rated,
        rows,
        lambda r: f"{category(r)} ({r['teacher']}, {r['population']})",
        lambda r: f"{category(r)} ({swap_word}, {r['population']})",
        pct,
    )
    intervals.sort(key=lambda r: r["label"])
    fig = _figure(
        "prevalence",
        _("Prevalence per category: design-based 95% CI and the screener-swap range"),
        summary,
        [],
        [
            _("Category"),
            _("Population"),
            _("Method"),
            _("Source and status"),
            "n",
            _("Rate"),
            _("95% CI or range"),
            _("Design"),
        ],
        [
            [
                strings.category_name(r["category"], locale),
                r["population"],
                method_name(r["method"], locale),
                source(r),
                format_number(r["n"], locale) if r["n"] is not None else "",
                _rate_cell(r, locale),
                f"{pct(r['ci_low'])} – {pct(r['ci_high'])}" if r["ci_low"] is not None else "",
                design_words(r["design"], locale),
            ]
            for r in rows
        ],
    )
    fig["intervals"] = intervals[:INTERVAL_ROWS]
    return fig


def design_words(design: str | None, locale: str) -> str:
    """A prevalence row's ``design`` in ``locale``: its known phrases (:data:`DESIGN_PHRASES`), "not computed" and
    every teacher's qualification note translated; codes (``sample_design``) and figures as they are."""
    if not design:
        return ""
    tr = translations(locale)
    for phrase in DESIGN_PHRASES:
        design = design.replace(phrase, tr.gettext(phrase))
    if design.startswith("not computed: "):
        design = tr.gettext(N_("not computed")) + tr.gettext(strings.COLON) + design.removeprefix("not computed: ")
    return qualification_notes_in(design, tr)


def _unqualified(teacher: str, by_teacher: dict[str, dict], locale: str) -> str:
    """The sentence that follows a headline rate whose teacher is not qualified (empty when it is, or is imported)."""
    note = by_teacher.get(teacher, {}).get("qualification")
    if not note or note.startswith("teacher qualified"):
        return ""
    tr = translations(locale)
    return " " + tr.gettext(SUMMARY_UNQUALIFIED) % {"teacher": teacher, "note": qualification_words(note, tr)}


def _estimand_figure(stats: dict[str, Any], locale: str) -> dict:
    """The estimands of the protocol over the frame: a definition of each, their teacher rates with the design-based
    95% CI, the screener-swap range and classify-and-count, in ``locale``."""
    _ = translations(locale).gettext
    pct = lambda x: percent(x, locale)  # noqa: E731
    source = _row_source({r["teacher"]: r for r in stats["labels_by_teacher"]}, locale)
    order = {e.name: i for i, e in enumerate(ESTIMANDS)}
    rows = sorted(
        (r for r in stats["prevalence"] if r.get("estimand", CATEGORY_RATE) in order and r["population"] == "frame"),
        key=lambda r: order[r["estimand"]],
    )
    name = lambda r: _(estimand_display(r["estimand"])[0])  # noqa: E731
    rated = [r for r in rows if r["method"] == "design_weighted_teacher_rate" and r["rate"] is not None]
    first = rated[0] if rated else None
    summary = (
        _(SUMMARY_ESTIMANDS)
        % {
            "estimand": name(first),
            "teacher": first["teacher"],
            "rate": pct(first["rate"]),
            "low": pct(first["ci_low"]),
            "high": pct(first["ci_high"]),
        }
        if first
        else _(SUMMARY_NO_ESTIMANDS)
    )
    if first:
        summary += _unqualified(first["teacher"], {r["teacher"]: r for r in stats["labels_by_teacher"]}, locale)
    summary += " " + _(CA_PERSON_NOTE)
    if any(zero_width_census(r) for r in rated):
        summary += " " + _(SUMMARY_CENSUS)
    intervals = _intervals(
        rated, rows, lambda r: f"{name(r)} ({r['teacher']})", lambda r: f"{name(r)} ({_('screener swap')})", pct
    )
    fig = _figure(
        "estimands",
        _("The protocol's estimands: prevalence of metaresearch under each rule"),
        summary,
        [],
        [_("Estimand"), _("Method"), _("Source and status"), "n", _("Rate"), _("95% CI or range"), _("Design")],
        [
            [
                name(r),
                method_name(r["method"], locale),
                source(r),
                format_number(r["n"], locale) if r["n"] is not None else "",
                _rate_cell(r, locale),
                f"{pct(r['ci_low'])} – {pct(r['ci_high'])}" if r["ci_low"] is not None else "",
                design_words(r["design"], locale),
            ]
            for r in rows
        ],
    )
    fig["intervals"] = intervals[:INTERVAL_ROWS]
    fig["definitions"] = [{"name": _(e.display), "definition": _(e.definition)} for e in ESTIMANDS]
    return fig


def estimand_definitions(locale: str) -> list[dict]:
    """Every estimand's ``estimand`` value, display name and definition in ``locale`` (the API's answer)."""
    _ = translations(locale).gettext
    names = [CATEGORY_RATE, *(e.name for e in ESTIMANDS)]
    return [{"estimand": n, "name": _(estimand_display(n)[0]), "definition": _(estimand_display(n)[1])} for n in names]


#: Works of each reference venue the statistics page names (the rest: the venue's cohort, linked).
REFERENCE_WORKS_SHOWN = 10


def reference_venues(stats: dict[str, Any]) -> list[str]:
    """The venues of instrument iii's reference set that hold frame works (its per-venue rows), in name order."""
    rows = stats.get("venue_known_item_recall") or []
    return sorted({r["group"] for r in rows if r["group_by"] == "venue" and r["reference_works"]})


def reference_works(con, venues: list[str]) -> list[dict[str, Any]]:
    """Each reference venue with the release's works in it (the venue compared as the venue filter compares it: case
    and accents ignored): ``{"venue", "count", "works": [{"id", "title", "page_path"}, ...]}``, the first
    :data:`REFERENCE_WORKS_SHOWN` works by id."""
    if not venues:
        return []
    rows = con.execute(
        "SELECT v.venue, w.id, w.title, w.page_path, count(*) OVER (PARTITION BY v.venue) AS n "
        "FROM works w JOIN (SELECT unnest(?::VARCHAR[]) AS venue) v "
        "ON lower(strip_accents(w.venue)) = lower(strip_accents(v.venue)) "
        f"QUALIFY row_number() OVER (PARTITION BY v.venue ORDER BY w.id) <= {REFERENCE_WORKS_SHOWN} "
        "ORDER BY v.venue, w.id",
        [venues],
    ).fetchall()
    out = {v: {"venue": v, "count": 0, "works": []} for v in venues}
    for venue, wid, title, path, n in rows:
        out[venue]["count"] = n
        out[venue]["works"].append({"id": wid, "title": title, "page_path": path})
    return list(out.values())


class StatisticsEndpoints:
    """The statistics page and its API route, a mixin of :class:`.app.Site` (reads ``release``, ``render``)."""

    _statistics: dict[str, Any] | None = None
    _reference: list[dict[str, Any]] | None = None

    def reference_data(self) -> list[dict[str, Any]]:
        """Instrument iii's reference venues and their works in the release (:func:`reference_works`), read once."""
        if self._reference is None:
            con = self.release.cursor()
            try:
                self._reference = reference_works(con, reference_venues(self.statistics_data()))
            finally:
                con.close()
        return self._reference

    def statistics_data(self) -> dict[str, Any]:
        """The release's figures, read once (module docstring)."""
        if self._statistics is None:
            con = self.release.cursor()
            try:
                self._statistics = load_statistics(con)
            finally:
                con.close()
        return self._statistics

    def statistics_page(self, request: Request) -> Response:
        single_values(request.query_params.multi_items(), ())
        lang = getattr(request.state, "lang", DEFAULT_LOCALE)
        views = self.__dict__.setdefault("_statistics_views", {})  # per language: the release never changes
        if lang not in views:
            views[lang] = view(self.statistics_data(), lang)
        return self.render(
            request, "statistics.html.j2", figures=views[lang], reference=self.reference_data(), url=url_with
        )

    def api_statistics(self, request: Request) -> Response:
        data = dict(self.statistics_data())
        by_teacher = {r["teacher"]: r for r in data["labels_by_teacher"]}
        for name in ("labels_by_category", "labels_by_study_design"):  # every category with its source and status
            data[name] = [
                {
                    **r,
                    "source": "direct_label",
                    "label_status": by_teacher[r["teacher"]]["label_status"],
                    "qualification": by_teacher[r["teacher"]]["qualification"],
                }
                for r in data[name]
            ]
        data["decisions_by_category"] = [{**r, "source": "classifier_decision"} for r in data["decisions_by_category"]]
        data["estimands"] = estimand_definitions(DEFAULT_LOCALE)
        data["ca_person"] = CA_PERSON_NOT_MEASURED
        return JSONResponse({"release_id": self.info.release_id, "n_works": self.info.n_works, **data})
