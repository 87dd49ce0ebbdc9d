"""HTML pages per work and the index, through Jinja2 with autoescaping (SPEC section 9).

Every value from OpenAlex or a model (titles with inline markup, abstracts, names, reasons) is
escaped by Jinja2's autoescape; titles are first reduced to their text, so ``<i>Planck</i>`` shows
as "Planck" and a ``<script>`` in a title can never run. The pages also forbid scripts outright
through a Content-Security-Policy.
"""

from __future__ import annotations

import datetime as dt

from jinja2 import Environment, PackageLoader, select_autoescape

from .. import __version__
from ..vocab import CATEGORIES, CATEGORY_DISPLAY, PREDICTION_STATUS
from .records import classification_card

ROUTE_LABELS = (("ca_aff", "Canadian affiliation"), ("ca_fund", "Canadian funder"), ("ca_venue", "Canadian venue"),
                ("about_ca", "About Canada"))

ABSTRACT_NOTE = ("De-inverted from the abstract_inverted_index of the OpenAlex record this build read ({source}). "
                 "Abstracts are not stored in the frame database: they are most of the bytes of a work record, "
                 "so pages re-read them from the input record.")
NO_ABSTRACT_NOTE = "OpenAlex has no abstract for this work (the record carries no abstract_inverted_index)."
UNREADABLE_NOTE = "The record says an abstract exists, but the input record could not be re-read just now ({source})."


def environment() -> Environment:
    """The Jinja2 environment (package templates, autoescape on for .j2 HTML templates)."""
    env = Environment(loader=PackageLoader("metacan_pipeline.publish", "templates"),
                      autoescape=select_autoescape(enabled_extensions=("html", "j2"), default_for_string=True, default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["display_names"] = lambda cats: [CATEGORY_DISPLAY.get(c, c) for c in (cats or [])]
    return env


def abstract_note(record: dict, abstract: str | None, source: str) -> str:
    if abstract:
        return ABSTRACT_NOTE.format(source=source)
    return UNREADABLE_NOTE.format(source=source) if record["has_abstract"] else NO_ABSTRACT_NOTE


def render_work(env: Environment, record: dict, abstract: str | None, source: str, context: dict) -> str:
    """One work page. ``context`` holds build-level facts: n_codex_labels, gated_heads, total_heads and
    constant_heads (a set of ``(teacher, target)`` whose head could not be fitted)."""
    return env.get_template("work.html.j2").render(
        r=record, abstract=abstract, abstract_note=abstract_note(record, abstract, source),
        card=classification_card(record),
        failed_labels=[l for l in record["direct_labels"] if l["status"] == "failed"],
        routes=ROUTE_LABELS, display=CATEGORY_DISPLAY, categories=CATEGORIES, prediction_status=PREDICTION_STATUS,
        version=__version__, built_at=None, n_codex_labels=context["n_codex_labels"],
        gated_heads=context["gated_heads"], total_heads=context["total_heads"],
        constant_heads=context.get("constant_heads", set()),
    )


def index_row(record: dict) -> dict:
    card = classification_card(record)
    if card["kind"] == "direct":
        cls = "; ".join(f"direct label ({l['teacher']}): " + (", ".join(CATEGORY_DISPLAY[c] for c in l["categories"]) or "not meta-research")
                        for l in card["labels"])
    elif card["kind"] == "none":
        cls = "not classified yet"
    else:
        cls = f"{card['kind']} prediction: " + ", ".join(CATEGORY_DISPLAY[c] for c in card["categories"])
    return {"id": record["id"], "title": record["title"], "year": record["year"],
            "routes": [r for r, _ in ROUTE_LABELS if record["routes"][r]], "classification": cls}


def render_index(env: Environment, rows: list[dict], model_version: str | None) -> str:
    return env.get_template("index.html.j2").render(
        works=rows, model_version=model_version or "(none)", version=__version__,
        built_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
