"""The site in plain words: the About page (``/about``), the Methods page (``/methods``), the glossary
(``/glossary``), each with its French twin under ``/fr``, and the links from the field's terms on every page to the
glossary.

The glossary (:data:`GLOSSARY`) defines each term once, as English msgids the catalogue translates; each term is an
anchor of ``/glossary`` (``#frame``, ``#direct-label``, ...). :func:`link_first_uses` links the first use of each
term in a page's ``<main>`` to its anchor (``<a class="term">``, the definition as the link's title), in the page's
language: it reads the rendered HTML's text between tags, never inside a link, a form control, code or a chart, so
a page's words are written once, in its template or its sentences, and the links follow them. The Methods page
explains every status a page shows (:data:`STATUSES`, each an anchor: :func:`status_anchor`); its figures are read
from the served release, never written by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from markupsafe import escape
from starlette.requests import Request
from starlette.responses import Response

from ...i18n import N_, translations
from ...vocab import (
    DIRECT_LABEL_STATUS,
    HUMAN_CODED_PREFIX,
    HUMAN_VALIDATED_PREFIX,
    PREDICTION_STATUS,
    ROUTES,
    SCORE_ONLY_IMMATURE,
    SCORE_ONLY_MATURE,
    SCORE_ONLY_REFERENCE,
)
from ..query.params import single_values
from . import languages

#: The pages of this module, by path (the same in each language, under its prefix).
GUIDE_PAGES = ("/about", "/methods", "/glossary")

_APOSTROPHE = r"(?:'|&#39;|&#x27;|’)"


@dataclass(frozen=True)
class Term:
    """A glossary entry: ``key`` (its anchor on ``/glossary``), its ``name`` and ``definition`` (msgids), and the
    forms it takes in each language's text (``patterns``: a regular expression, matched case-insensitively on word
    boundaries; a term without patterns is defined but never linked automatically)."""

    key: str
    name: str
    definition: str
    patterns: dict[str, str] | None = None


GLOSSARY: tuple[Term, ...] = (
    Term(
        "frame",
        N_("Frame"),
        N_(
            "All the Canadian research the map covers: every OpenAlex work of the configured years with a title and "
            "at least one route. Meta-research is found inside the frame by classifying every work, not by a search."
        ),
        {"en": r"frames?", "fr": r"cadres?"},
    ),
    Term(
        "route",
        N_("Route"),
        N_(
            "A reason a work is in the frame: a Canadian affiliation, a Canadian funder, a Canadian venue, or a text "
            "about Canada. Each is stored on the work with the evidence that fired it; a work may have several."
        ),
        {"en": r"routes?", "fr": r"voies?"},
    ),
    Term(
        "teacher",
        N_("Teacher"),
        N_(
            "A named language-model labeller: a model, a prompt version and a record view (what of the work it "
            "reads). Its answers are direct labels. The census teacher labels every frame work; the sample teacher "
            "labels the design-weighted sample."
        ),
        {"en": r"teachers?", "fr": r"annotat(?:eur|rice)s?"},
    ),
    Term(
        "direct-label",
        N_("Direct label"),
        N_(
            "One teacher's answer for one work: categories, domain, study design, genre, the two Canada flags, a "
            "confidence and a reason. A machine output, unvalidated; a failed or missing label is unknown, never a "
            "negative."
        ),
        {"en": r"direct labels?", "fr": r"étiquettes? directes?"},
    ),
    Term(
        "student",
        N_("Student"),
        N_(
            "A classifier trained on the teachers' direct labels that scores every frame work from its title-only "
            "view, so a work no teacher read still gets a score and, where the support gate allows, a decision."
        ),
        {"en": r"students?", "fr": r"élèves?"},
    ),
    Term(
        "head",
        N_("Head"),
        N_(
            "One output of the student, per teacher: a yes-or-no head for each category and each Canada flag, and a "
            "head choosing one value for domain, study design and genre."
        ),
        {"en": r"heads?", "fr": r"têtes?"},
    ),
    Term(
        "candidate",
        N_("Candidate"),
        N_(
            "A category either side called: the sample teacher's head decided it, or the census teacher's direct "
            "label gave it. The wider net; a machine prediction."
        ),
        {"en": r"candidates?", "fr": r"candidat(?:e|es|s)?"},
    ),
    Term(
        "consensus",
        N_("Consensus"),
        N_(
            "A category both sides called: the sample teacher's head decided it and the census teacher's direct label "
            "gave it. The smaller, surer set; still a machine prediction."
        ),
        {"en": r"consensus", "fr": r"consensus|consensuel(?:le)?s?"},
    ),
    Term(
        "stratum",
        N_("Stratum"),
        N_(
            "One part of a sample design (plural: strata). The strata split the frame so that every work is in exactly "
            "one, and each stratum's works are drawn in a fixed, salted order."
        ),
        {"en": r"strat(?:um|a)", "fr": r"strates?(?!\s+de\s+diffusion)"},  # a release layer is a strate de diffusion
    ),
    Term(
        "design-weight",
        N_("Design weight"),
        N_(
            "One over a work's selection probability: how many frame works a sampled work stands for. Rates read from "
            "a sample are weighted by it."
        ),
        {"en": r"design[- ]weight(?:s|ed)?", "fr": r"poids de sondage|pondérée?s? selon le plan de sondage"},
    ),
    Term(
        "prevalence",
        N_("Prevalence"),
        N_(
            "The share of the frame's works in a category, estimated from a design-weighted sample with a confidence "
            "interval. A count of labelled works is not a prevalence."
        ),
        {"en": r"prevalences?", "fr": r"prévalences?"},
    ),
    Term(
        "audit-sample",
        N_("Audit sample"),
        N_(
            "The stratified probability sample of the frame that human coders code to validate the classifier, drawn "
            "under a locked audit protocol."
        ),
        {"en": r"audit samples?", "fr": rf"échantillons? d{_APOSTROPHE}audit"},
    ),
    Term(
        "coder",
        N_("Coder"),
        N_(
            "A person who codes works of the audit sample independently of a second coder, masked to every machine "
            "output and to the other coder; their disagreements go to an adjudicator."
        ),
        {"en": r"coders?", "fr": r"codeu(?:r|se)s?"},
    ),
    Term(
        "qualification",
        N_("Qualification"),
        N_(
            "A prespecified agreement test of a teacher against a reference set that frontier models labelled "
            "(design-weighted Cohen's kappa on metaresearch, against a threshold fixed before the test). Both "
            "teachers take it. A teacher not qualified, or not tested yet, is shown as such and decides nothing."
        ),
    ),
    Term(
        "support-gate",
        N_("Support gate"),
        N_(
            "The rule that lets a head decide only with enough sample support: at least 20 positives from both "
            "teachers and an effective sample size of positive weights of at least 10. A head that fails carries "
            "scores and no decision."
        ),
    ),
    Term(
        "machine-score",
        N_("Machine score"),
        N_(
            "A number from the active-learning student that orders works for review. It never asserts a category: "
            "its status starts with score_only."
        ),
    ),
    Term(
        "protocol",
        N_("Audit protocol"),
        N_(
            "The audit study's plan, locked before any coding: the sample design, the classifier version and decision "
            "rule under test, the heads evaluated, the gate's thresholds and the coder instructions, with a content "
            "hash. A change is a new protocol."
        ),
    ),
    Term(
        "release-layer",
        N_("Release layer"),
        N_(
            "Where a work stands in a release, by one rule of the original protocol: human-verified (a human code), "
            "high-precision (a validated head decided it), contested (qualified teachers split) or provisional "
            "(everything else: machine output only). Every work is in exactly one."
        ),
    ),
    Term(
        "estimand",
        N_("Estimand"),
        N_(
            "The quantity a prevalence estimates, fixed in advance: the primary one is the share of frame works in "
            "scope (the metaresearch category) with a Canadian affiliation or funder; the secondary, strict and broad "
            "ones change the route or the scope. A category's own rate (e.g. research integrity) is not an estimand "
            "and does not require metaresearch."
        ),
    ),
    Term(
        "filter-recall",
        N_("Filter recall"),
        N_(
            "Of the works a qualified teacher or a human put in a category, the share a filter (a route, a lexicon "
            "tier, a topic) would keep: what a search instead of a census would lose. Without such a reference it "
            "reads no reference yet."
        ),
    ),
    Term(
        "known-item-recall",
        N_("Known-item recall"),
        N_(
            "The share of the frame's works in a list of meta-research venues that a method (candidate, consensus, "
            "a teacher, the student's top decile) puts in scope: a bound from a convenience set, never a "
            "design-based estimate."
        ),
    ),
    Term(
        "release",
        N_("Release"),
        N_(
            "One build of the site's database. Its id is a content hash of the records, so the same works and labels "
            "give the same release and the same counts; a cohort's link names its release."
        ),
    ),
)
TERMS = {t.key: t for t in GLOSSARY}

#: Every status a page shows, in the order the Methods page explains them: ``(code, explanation msgid)``. A human
#: layer's status is its prefix followed by ``:`` and a protocol id.
STATUSES: tuple[tuple[str, str], ...] = (
    (
        DIRECT_LABEL_STATUS,
        N_("A teacher's direct label, shown as the teacher gave it; no human has checked it."),
    ),
    ("labelled", N_("The teacher answered within the rules: the label's values are shown.")),
    (
        "failed",
        N_("The teacher's reply broke the rules even when asked again: the label is unknown, not a negative."),
    ),
    (
        PREDICTION_STATUS,
        N_(
            "A decision of the student classifier (candidate or consensus); no human has validated it for this "
            "classifier version."
        ),
    ),
    (
        SCORE_ONLY_IMMATURE,
        N_(
            "A machine score from a model that has not passed its maturity gate: it may order works, it asserts no "
            "category."
        ),
    ),
    (
        SCORE_ONLY_MATURE,
        N_(
            "A machine score from a model that passed its maturity gate: its scores stopped moving between training "
            "rounds, which does not make them right. It orders works and asserts no category."
        ),
    ),
    (
        SCORE_ONLY_REFERENCE,
        N_("A score from a head trained on a reference set: it orders works, never decides a category."),
    ),
    (
        HUMAN_CODED_PREFIX,
        N_(
            "Two independent coders, masked to every machine output, coded this work under the named audit protocol, "
            "and their disagreements were adjudicated: a human code, shown as its own layer."
        ),
    ),
    (
        HUMAN_VALIDATED_PREFIX,
        N_(
            "This classifier version's head passed the gate of the named audit protocol (lower bounds of precision "
            "and recall, and a minimum number of coded positives): its decisions on that head are human-validated."
        ),
    ),
)


def status_anchor(status: str) -> str:
    """The anchor of a status's explanation on the Methods page: ``status-`` and the code (a human layer's status
    without its protocol id; characters other than letters, digits, ``_`` and ``-`` become ``-``)."""
    prefix, sep, _ = status.partition(":")
    if sep and prefix in (HUMAN_CODED_PREFIX, HUMAN_VALIDATED_PREFIX):
        status = prefix
    return "status-" + re.sub(r"[^A-Za-z0-9_-]+", "-", status)


# ---- first uses ------------------------------------------------------------------------------------------------

#: Elements whose text is never linked: links themselves, headings, form controls and their labels, code,
#: definitions, charts, and what is not text.
_SKIP = frozenset(
    {"a", "abbr", "button", "code", "dfn", "label", "option", "script", "select", "style", "svg", "textarea", "title"}
    | {f"h{n}" for n in range(1, 7)}
)
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)\b[^>]*?(/?)>|<!--.*?-->", re.S)


@cache
def _any_term(lang: str, keys: tuple[str, ...]) -> re.Pattern:
    """One expression finding any of the terms ``keys`` in ``lang``'s text (case-insensitive, on word boundaries): a
    text node is searched once for every term still to link. Group ``g<i>`` is the term ``keys[i]``."""
    forms = "|".join(f"(?P<g{i}>{TERMS[k].patterns[lang]})" for i, k in enumerate(keys))
    return re.compile(rf"(?<![\w-])(?:{forms})(?![\w-])", re.IGNORECASE)


@cache
def _titles(lang: str) -> dict[str, str]:
    tr = translations(lang)
    return {t.key: tr.gettext(t.definition) for t in GLOSSARY}


def link_first_uses(html: str, lang: str, region: str = "main") -> str:
    """``html`` with the first use of each glossary term in its ``region`` (the first ``<main>``, or the first
    ``<article>`` of a work page) linked to the term's anchor on the glossary of ``lang``. Only text between tags is
    read, never inside the elements of :data:`_SKIP`; a term is linked where it first appears in reading order, once;
    the rest of the page is unchanged byte for byte (a page without the region is returned as it is)."""
    start, end = html.find(f"<{region}"), html.find(f"</{region}>")
    if start < 0 or end < start:
        return html
    pending = [t.key for t in GLOSSARY if t.patterns]
    href = f"{languages.PREFIXES[lang]}/glossary#"
    titles = _titles(lang)
    out: list[str] = [html[:start]]
    pos, skip, left = start, 0, len(pending)
    for m in _TAG.finditer(html, start, end):
        if len(pending) != left or pos == start:  # nothing left to find in the rest: stop reading it
            left = len(pending)
            if not pending or not _any_term(lang, tuple(pending)).search(html, pos, end):
                break
        if m.start() > pos:
            text = html[pos : m.start()]
            out.append(_link_text(text, pending, lang, href, titles) if skip == 0 and pending else text)
        out.append(m.group(0))
        pos = m.end()
        name = (m.group(2) or "").lower()
        if name in _SKIP and not m.group(3):
            skip += -1 if m.group(1) else 1
            skip = max(skip, 0)
    out.append(html[pos:])
    return "".join(out)


def _link_text(text: str, pending: list[str], lang: str, href: str, titles: dict[str, str]) -> str:
    """``text`` with the first match of each term in ``pending`` linked, in reading order; the linked terms are
    removed from ``pending``."""
    out, cursor = [], 0
    while pending and (m := _any_term(lang, tuple(pending)).search(text, cursor)):
        key = pending.pop(int(m.lastgroup[1:]))
        out.append(text[cursor : m.start()])
        out.append(f'<a class="term" href="{href}{key}" title="{escape(titles[key])}">{m.group(0)}</a>')
        cursor = m.end()
    out.append(text[cursor:])
    return "".join(out)


# ---- pages -----------------------------------------------------------------------------------------------------


class GuideEndpoints:
    """``/about``, ``/methods`` and ``/glossary`` for :class:`.app.Site` (which gives ``info``, ``render`` and
    ``statistics_data``)."""

    def release_facts(self) -> dict:
        """What the guide pages say of the served release, read from it: its id, build time, works, years, classifier
        versions, teachers (each with its coverage and qualification note), heads through the support gate, and the
        frozen release."""
        stats = self.statistics_data()
        years = [r["year"] for r in stats.get("frame_by_year", []) if r.get("year") is not None]
        ctx = self.info.page_context
        return {
            "release_id": self.info.release_id,
            "built_at": self.info.built_at,
            "works": self.info.n_works,
            "first_year": min(years) if years else None,
            "last_year": max(years) if years else None,
            "classifier_versions": self.info.classifier_versions,
            "teachers": stats.get("labels_by_teacher", []),
            "gated_heads": ctx.get("gated_heads"),
            "total_heads": ctx.get("total_heads"),
            "frozen_release": ctx.get("frozen_release"),
        }

    def _guide(self, request: Request, template: str, **ctx) -> Response:
        single_values(request.query_params.multi_items(), ())  # a guide page takes no parameter
        return self.render(request, template, facts=self.release_facts(), **ctx)

    def about_page(self, request: Request) -> Response:
        return self._guide(request, "about.html.j2")

    def methods_page(self, request: Request) -> Response:
        tr = translations(getattr(request.state, "lang", None) or languages.split_path(request.url.path)[0])
        statuses = [{"code": c, "anchor": status_anchor(c), "text": tr.gettext(t)} for c, t in STATUSES]
        return self._guide(request, "methods.html.j2", statuses=statuses, routes=ROUTES)

    def glossary_page(self, request: Request) -> Response:
        tr = translations(getattr(request.state, "lang", None) or languages.split_path(request.url.path)[0])
        terms = [{"key": t.key, "name": tr.gettext(t.name), "definition": tr.gettext(t.definition)} for t in GLOSSARY]
        return self._guide(request, "glossary.html.j2", terms=terms)


def guide_links(lang: str) -> dict[str, str]:
    """The addresses of the guide pages in ``lang`` (``{"about": "/fr/about", ...}``)."""
    return {p.strip("/"): languages.PREFIXES[lang] + p for p in GUIDE_PAGES}
