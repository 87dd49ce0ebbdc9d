"""The model card pages: ``/models/<model_version>`` (and ``/fr/models/<model_version>``), ``/model`` (a redirect to
the card of the release's classifier version), and the card's files at stable addresses,
``/models/<model_version>/model_card.json``, ``model_card.md`` and the reliability plots.

A card is the one ``student_heads`` wrote under ``<data dir>/reports/<model_version>/``
(:mod:`metacan_pipeline.student.card`); only a classifier version of the served release has a page (any other is
404, so no other file is ever served). The page says the card's sentences (claims, limits) in the page's language
from the msgid and values the card stores; figures are written as the language writes decimals, each with its 95%
interval; statuses, teacher names and vocabulary codes are shown as they are.
"""

from __future__ import annotations

from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response

from ...i18n import DEFAULT_LOCALE, N_, NUMBER_LOCALES, translations
from ...student.card import CARD_JSON, CARD_MD, read_card, report_dir
from ...vocab import CATEGORIES
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


def said(entry: dict, locale: str) -> str:
    """A card sentence (``{"text", "msgid", "values"}``) in ``locale``: the translated msgid with its values."""
    msgid = entry.get("msgid")
    if locale == DEFAULT_LOCALE or not msgid:
        return entry["text"]
    msg = translations(locale).gettext(msgid)
    return msg % entry["values"] if entry.get("values") else msg


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


def head_name(target: str, locale: str) -> str:
    """A head's target as the page shows it: a category by its display name, another target by its code."""
    return strings.category_name(target, locale) if target in CATEGORIES else target


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
