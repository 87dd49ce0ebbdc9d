"""The coding pages' words: the names of the SPEC section 3 fields and values a coder answers, the
refusal sentences, and the reading of a submitted form into an answer.

Every string is an English msgid marked with :func:`~metacan_pipeline.i18n.N_` (the French is in the catalogue);
vocabulary codes come from :mod:`metacan_pipeline.vocab` and travel unchanged (a form value is a code, a label its
name). The answer's rules are not restated here: :func:`metacan_pipeline.audit.coding.validate.validate_answer` applies them,
and :data:`FIELD_PROBLEMS` only says, per field it names, what to do in the coder's language.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...audit.coding.errors import CodingError
from ...i18n import N_
from ...vocab import (
    CATEGORIES,
    CATEGORY_DISPLAY,
    CONFIDENCE_DISPLAY,
    CONFIDENCES,
    DOMAIN_DISPLAY,
    DOMAINS,
    GENRE_DISPLAY,
    GENRES,
    STUDY_DESIGN_DISPLAY,
    STUDY_DESIGNS,
)

#: The label of each answer field (the legend of its fieldset).
FIELD_LABELS: dict[str, str] = {
    "categories": N_("Categories"),
    "domain": N_("Domain"),
    "study_design": N_("Study design"),
    "genre": N_("Genre"),
    "about_ca_system": N_("The Canadian research system itself is studied"),
    "about_ca_topic": N_("Canada is a substantive subject"),
    "confidence": N_("Your confidence"),
    "unresolved": N_("Unresolved"),
    "note": N_("Note"),
}

#: The names of the values a coder chooses: the vocabularies' display names (:data:`metacan_pipeline.vocab.DISPLAY_NAMES`).
DOMAIN_NAMES, STUDY_DESIGN_NAMES, GENRE_NAMES = DOMAIN_DISPLAY, STUDY_DESIGN_DISPLAY, GENRE_DISPLAY
CONFIDENCE_NAMES = CONFIDENCE_DISPLAY

#: A category's name where the site's display name speaks of a machine (a coder declines, not a model).
CODER_CATEGORY_NAMES: dict[str, str] = {
    "insufficient_payload": N_("Insufficient payload (the record is too thin to judge)")
}

#: The choices of each field, in vocabulary order: ``(code, English name)``; domain leaves ``not_metaresearch`` to
#: the empty choice (a domain is given only with metaresearch).
CHOICES: dict[str, list[tuple[str, str]]] = {
    "categories": [(c, CODER_CATEGORY_NAMES.get(c, CATEGORY_DISPLAY[c])) for c in CATEGORIES],
    "domain": [(d, DOMAIN_NAMES[d]) for d in DOMAINS if d != "not_metaresearch"],
    "study_design": [(d, STUDY_DESIGN_NAMES[d]) for d in STUDY_DESIGNS],
    "genre": [(g, GENRE_NAMES[g]) for g in GENRES],
    "confidence": [(c, CONFIDENCE_NAMES[c]) for c in CONFIDENCES],
}

#: What a coder reads when the store refuses an answer, by the field :class:`CodingError` names.
FIELD_PROBLEMS: dict[str, str] = {
    "categories": N_(
        "Categories: tick every category that applies, or none for a work that is not meta-research; "
        "insufficient payload goes alone. Or tick unresolved."
    ),
    "domain": N_("Domain: choose one when you tick metaresearch, and none otherwise."),
    "study_design": N_("Study design: choose one, or tick unresolved."),
    "genre": N_("Genre: choose one, or tick unresolved."),
    "about_ca_system": N_("The Canadian research system: answer yes or no, or tick unresolved."),
    "about_ca_topic": N_("Canada as a subject: answer yes or no, or tick unresolved."),
    "confidence": N_("Confidence: choose high, medium or low, or leave it empty."),
    "note": N_("Note: at most 1,000 characters."),
    "evidence_sha256": N_("This page is out of date: the evidence of this work changed. Reload the page."),
    "coder": N_("This answer cannot be recorded for you: %(reason)s"),
    "id": N_("This work is not a coding task of the current protocol."),
    "role": N_("This work cannot be adjudicated: %(reason)s"),
    "answer": N_("This answer cannot be recorded: %(reason)s"),
}

#: The form's fields besides the answer's.
FORM_FIELDS = ("csrf_token", "evidence_sha256", "abstract_sha256")
_SINGLE = ("domain", "study_design", "genre", "confidence", "about_ca_system", "about_ca_topic", "unresolved", "note")
_YES_NO = {"yes": True, "no": False}


def answer_from_form(pairs: Iterable[tuple[str, str]]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(answer, form fields)`` from a submitted coding form's ``(name, value)`` pairs: ``categories`` a list
    (none ticked: ``[]``, not meta-research; in an unresolved answer, not given), the other answer fields one value
    each (empty: not given), ``about_ca_*`` ``yes``/``no`` as booleans, ``unresolved`` ticked or not. Raises
    :class:`CodingError` for a field the form does not have or given twice."""
    answer: dict[str, Any] = {"categories": []}
    extra: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in pairs:
        if name == "categories":
            answer["categories"].append(value)
            continue
        if name not in _SINGLE and name not in FORM_FIELDS:
            raise CodingError("answer", f"the form has no field {name[:40]!r}")
        if name in seen:
            raise CodingError("answer", f"the field {name!r} was given twice")
        seen.add(name)
        value = value.strip() if name != "note" else value
        if name in FORM_FIELDS:
            extra[name] = value
        elif name == "unresolved":
            answer["unresolved"] = value == "yes"
        elif name in ("about_ca_system", "about_ca_topic"):
            answer[name] = _YES_NO.get(value, value or None)
        else:
            answer[name] = value or None
    if answer.get("unresolved") and not answer["categories"]:
        answer["categories"] = None
    return answer, extra


def form_values(answer: dict[str, Any] | None) -> dict[str, Any]:
    """What a coding form shows checked: from a stored answer (:meth:`CodingStore.my_answer`) or a refused one."""
    if not answer:
        return {"categories": []}
    out = {k: answer.get(k) for k in (*_SINGLE, "categories")}
    out["categories"] = list(answer.get("categories") or [])
    for f in ("about_ca_system", "about_ca_topic"):
        v = out[f]
        out[f] = "yes" if v is True else "no" if v is False else None
    return out


def agreed_values(agreed: dict[str, Any]) -> dict[str, Any]:
    """What an adjudicator's form starts from: the values a pair agreed on (``agreed`` of
    :meth:`CodingStore.disagreements`), as :func:`form_values` shows them; never ``unresolved``, which an
    adjudicator ticks only themselves."""
    values = form_values({**agreed, "unresolved": None})
    values["unresolved"] = None
    return values


#: The pseudonymous labels of a work's two coders on the adjudication page (coders in name order).
CODER_LABELS: tuple[str, ...] = (N_("coder A"), N_("coder B"))

#: The English name of each value, by field (the ``both`` table of the adjudication page).
NAMES: dict[str, dict[str, str]] = {field: dict(choices) for field, choices in CHOICES.items()}
#: The rows of the adjudication page's table, in the form's order.
COMPARED: tuple[str, ...] = (
    "categories",
    "domain",
    "study_design",
    "genre",
    "about_ca_system",
    "about_ca_topic",
    "unresolved",
    "confidence",
    "note",
)
