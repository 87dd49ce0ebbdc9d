"""The model card pages: ``/models/<model_version>`` (and ``/fr/models/<model_version>``), ``/model`` (a redirect to
the card of the release's classifier version), and the card's files at stable addresses,
``/models/<model_version>/model_card.json``, ``model_card.md`` and the reliability plots.

A card is the one ``student_heads`` wrote under ``<data dir>/reports/<model_version>/``
(:mod:`metacan_pipeline.student.card`); only a classifier version of the served release has a page (any other is
404, so no other file is ever served). The page says the card's sentences (claims, limits) in the page's language
from the msgid and values the card stores; figures are written as the language writes decimals, each with its 95%
interval; head names in the language; statuses, teacher names and training-set notes (data) are shown as they are.
"""

from __future__ import annotations

import re
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response

from ...i18n import DEFAULT_LOCALE, N_, NUMBER_LOCALES, translations
from ...publish.pages import qualification_notes_in
from ...student.card import CARD_JSON, CARD_MD, read_card, report_dir
from ...vocab import ABOUT_CA_DISPLAY, CATEGORIES
from . import strings
from .languages import PREFIXES

#: The words shown for a training set's kind.
SET_KINDS = {
    "sample_teacher": N_("sample teacher"),
    "census_teacher": N_("census teacher"),
    "teacher": N_("teacher"),
    "reference_set": N_("reference set"),
}
#: Files of a card folder that are served, and their media types.
MEDIA = {CARD_JSON: "application/json", CARD_MD: "text/markdown; charset=utf-8", ".png": "image/png"}


#: Why a head gives no score (:func:`metacan_pipeline.student.heads.no_score_reason`), as the page says it.
NO_SCORE_REASONS = (
    (re.compile(r"no direct label to learn from"), N_("no direct label to learn from")),
    (
        re.compile(r"no positive direct label to learn from \(0 positives of (?P<labels>\d+) labels\)"),
        N_("no positive direct label to learn from (0 positives of %(labels)s labels)"),
    ),
    (
        re.compile(
            r"no negative direct label to learn from \((?P<positives>\d+) positives of (?P<labels>\d+) labels\)"
        ),
        N_("no negative direct label to learn from (%(positives)s positives of %(labels)s labels)"),
    ),
)


#: The parts of a support gate's reason (:func:`metacan_pipeline.student.calibration.support_gate`), as the page
#: says them.
GATE_REASONS = (
    (
        re.compile(r"(?P<teacher>\w+) positives (?P<n>\d+) < (?P<min>\d+)"),
        N_("%(teacher)s positives %(n)s < %(min)s"),
    ),
    (
        re.compile(r"Kish ESS of positive weights (?P<ess>[\d.]+) < (?P<min>\d+)"),
        N_("Kish ESS of positive weights %(ess)s < %(min)s"),
    ),
)


def value_in(value, locale: str):
    """A card sentence's value in ``locale``: a no-score reason and qualification notes said in the language
    (:data:`NO_SCORE_REASONS`, :func:`~metacan_pipeline.publish.pages.qualification_notes_in`); any other value
    as it is."""
    if not isinstance(value, str) or locale == DEFAULT_LOCALE:
        return value
    tr = translations(locale)
    for pattern, msgid in NO_SCORE_REASONS:
        m = pattern.fullmatch(value)
        if m:
            return tr.gettext(msgid) % m.groupdict() if m.groupdict() else tr.gettext(msgid)
    for pattern, msgid in GATE_REASONS:
        value = pattern.sub(lambda m, msgid=msgid: tr.gettext(msgid) % m.groupdict(), value)
    for role in ("sample teacher", "census teacher"):
        value = value.replace(
            f"{role} not qualified", f"{tr.gettext(role)}{tr.gettext(strings.COLON)}teacher not qualified"
        )
    return qualification_notes_in(value, tr)


def said(entry: dict, locale: str) -> str:
    """A card sentence (``{"text", "msgid", "values"}``) in ``locale``: the translated msgid with its values (each
    said in the language where it can be: :func:`value_in`)."""
    msgid = entry.get("msgid")
    if locale == DEFAULT_LOCALE or not msgid:
        return entry["text"]
    msg = translations(locale).gettext(msgid)
    values = {k: value_in(v, locale) for k, v in (entry.get("values") or {}).items()}
    return msg % values if entry.get("values") else msg


def figure(f: dict | None, locale: str) -> str:
    """``0.899 [0.812, 0.951]`` (``0,899 [0,812, 0,951]`` in French); ``n/a`` (``s.o.``) when not computed."""
    from babel.numbers import format_decimal  # lazily, as i18n.format_number

    if not f or f.get("value") is None:
        return translations(locale).gettext(N_("n/a"))

    def num(x: float) -> str:
        return format_decimal(x, format="0.000", locale=NUMBER_LOCALES[locale])

    if f.get("ci_low") is None:
        return num(f["value"])
    return f"{num(f['value'])} [{num(f['ci_low'])}; {num(f['ci_high'])}]"


#: The names of the heads that are not categories.
HEAD_NAMES = {
    "about_ca_system": ABOUT_CA_DISPLAY["about_ca_system"],
    "about_ca_topic": ABOUT_CA_DISPLAY["about_ca_topic"],
    "domain": N_("Domain"),
    "study_design": N_("Study design"),
    "genre": N_("Genre"),
}


def head_name(target: str, locale: str) -> str:
    """A head's target as the page shows it: a category by its display name, another head by its name
    (:data:`HEAD_NAMES`), an unknown one by its code."""
    if target in CATEGORIES:
        return strings.category_name(target, locale)
    return translations(locale).gettext(HEAD_NAMES[target]) if target in HEAD_NAMES else target


def card_view(card: dict, locale: str) -> dict:
    """What ``model_card.html.j2`` shows of ``card`` in ``locale``: the card, with its sentences said and its
    figures written in that language."""
    tr = translations(locale)
    heads = []
    for h in card["heads"]:
        m = h["metrics"]
        first = m.get("ap") if h["kind"] == "binary" else m.get("accuracy")
        heads.append(
            {
                **h,
                "name": head_name(h["target"], locale),
                "first": figure(first, locale),
                "auroc": figure(m.get("auroc"), locale) if h["kind"] == "binary" else "",
                "ece": figure(m.get("ece"), locale),
                "claim_text": said(h["claim"], locale),
                "languages": [
                    {
                        "code": code,
                        "n": lm["n"],
                        "first": figure(lm["metrics"].get("ap" if h["kind"] == "binary" else "accuracy"), locale),
                        "auroc": figure(lm["metrics"].get("auroc"), locale) if h["kind"] == "binary" else "",
                        "ece": figure(lm["metrics"].get("ece"), locale),
                    }
                    for code, lm in h["by_language"].items()
                ],
            }
        )
    sets = [{**t, "kind_word": tr.gettext(SET_KINDS.get(t["kind"], t["kind"]))} for t in card["training_sets"]]
    return {
        "card": card,
        "heads": heads,
        "sets": sets,
        "limits": [said(x, locale) for x in card["limits"]],
        "has_languages": any(h["languages"] for h in heads),
    }


class ModelCardEndpoints:
    """The model card routes of :class:`.app.Site` (which gives ``info``, ``data_dir`` and ``render``)."""

    def _card(self, version: str) -> dict:
        if version not in self.info.classifier_versions:
            raise HTTPException(
                404,
                N_(
                    "%(version)r is not a classifier version of release %(release)s",
                    version=version[:80],
                    release=self.info.release_id,
                ),
            )
        card = read_card(self.data_dir, version)
        if card is None:
            raise HTTPException(
                404, N_("no model card was written for %(version)s (materialize student_heads)", version=version)
            )
        return card

    def model_card_page(self, request: Request) -> Response:
        lang = getattr(request.state, "lang", DEFAULT_LOCALE)
        version = request.path_params["version"]
        card = self._card(version)
        return self.render(request, "model_card.html.j2", files=f"/models/{version}", **card_view(card, lang))

    def model_redirect(self, request: Request) -> Response:
        lang = getattr(request.state, "lang", DEFAULT_LOCALE)
        versions = self.info.classifier_versions
        if len(versions) != 1:
            raise HTTPException(404, N_("this release has no single classifier version; see the statistics page"))
        return RedirectResponse(f"{PREFIXES[lang]}/models/{versions[0]}", status_code=307)

    def model_card_file(self, request: Request) -> Response:
        version, name = request.path_params["version"], request.path_params["name"]
        self._card(version)
        media = MEDIA.get(name) or (
            MEDIA[".png"] if name.startswith("reliability_") and name.endswith(".png") else None
        )
        path: Path = report_dir(self.data_dir, version) / name
        if media is None or "/" in name or not path.is_file():
            raise HTTPException(404, N_("%(name)r is not a file of the model card", name=name[:80]))
        return FileResponse(path, media_type=media, headers={"X-Content-Type-Options": "nosniff"})
