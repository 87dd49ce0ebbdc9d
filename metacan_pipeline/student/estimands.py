"""The protocol's estimands (SPEC section 11; the original protocol, section 3): the sets of frame works whose
prevalence the ``prevalence`` table reports beside the per-category rates, each under a named constant with its
definition. Only these: the protocol forbids enumerating other combinations of the route flags.

A work belongs to an estimand when every head the estimand reads is true for it (``heads``: the in-scope head
``metaresearch``, the pilot's "in scope = T1/T2", and for the secondary estimand also ``about_ca_system``) and, when
the estimand names routes, at least one of those frame routes is true (``routes``: ``ca_aff`` is CA-AFF, ``ca_fund``
CA-FUND, ``ca_venue`` CA-VENUE; SPEC section 2). A work for which one of those heads is unknown (no value: a failed
label, insufficient_payload, a field the source never gives) is left out of the rate, as for the category rates,
whatever its routes: a work is counted on an estimand exactly when it is counted on each head the estimand reads. The
rate is a share of the whole population (the frame), so the estimands' rates compare directly with one another and
with the category rate of ``metaresearch``, which bounds them all.

CA-PERSON (an author whose OpenAlex last-known institutions include a Canadian one) is not measurable: the frame is
built from OpenAlex *work* records, whose authorships name each author's institutions on that work, never the author's
last-known institutions (those are on OpenAlex *author* records, which are not among the frame's inputs). ALT-2's rows
are therefore of the primary estimand ∪ CA-VENUE, a lower bound on ALT-2, and say so (:data:`CA_PERSON_NOT_MEASURED`).

Imports nothing of the project but :mod:`metacan_pipeline.i18n`, so the summary and the served site read it without
loading the teacher registry.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..i18n import N_

#: The frame route columns an estimand may name (SPEC section 2).
ESTIMAND_ROUTES: tuple[str, ...] = ("ca_aff", "ca_fund", "ca_venue")

#: Why CA-PERSON is absent from ALT-2 (module docstring); the ``design`` of ALT-2's rows ends with it.
CA_PERSON_NOT_MEASURED = (
    "CA-PERSON not measured: the frame's OpenAlex work records carry no author's last-known institutions, so this is "
    "primary ∪ CA-VENUE, a lower bound on ALT-2"
)


@dataclass(frozen=True)
class Estimand:
    """One estimand: its ``name`` (the ``estimand`` column's value), display name and one-sentence definition
    (interface strings, translated through the catalogue), the heads that must all be true, and the frame routes of
    which at least one must be true (empty: any route)."""

    name: str
    display: str
    definition: str
    heads: tuple[str, ...]
    routes: tuple[str, ...] = ()
    note: str | None = None

    def member(self, heads: dict[str, bool | None], routes: dict[str, bool]) -> bool | None:
        """Whether a work with these head values and frame routes belongs to the estimand; None when one of the
        estimand's heads is unknown for it (the work is left out of the rate)."""
        values = [heads.get(h) for h in self.heads]
        if any(v is None for v in values):
            return None
        return all(values) and (not self.routes or any(bool(routes.get(r)) for r in self.routes))


#: The ``estimand`` of the per-category rows: every work of the population, whatever its routes.
CATEGORY_RATE = "category"
CATEGORY_RATE_DISPLAY = N_("Category rate (every work, every route)")
CATEGORY_RATE_DEFINITION = N_("The share of the population's works in the category, whatever their route.")

PRIMARY = Estimand(
    "primary",
    N_("Primary: Canadian-produced metaresearch"),
    N_("Works in scope (metaresearch) with a Canadian affiliation (CA-AFF) or a Canadian funder (CA-FUND)."),
    ("metaresearch",),
    ("ca_aff", "ca_fund"),
)
PRIMARY_CA_AFF = Estimand(
    "primary_ca_aff",
    N_("Primary, CA-AFF component"),
    N_("Works in scope (metaresearch) with a Canadian affiliation (CA-AFF), the primary estimand's first clause."),
    ("metaresearch",),
    ("ca_aff",),
)
PRIMARY_CA_FUND = Estimand(
    "primary_ca_fund",
    N_("Primary, CA-FUND component"),
    N_("Works in scope (metaresearch) with a Canadian funder (CA-FUND), the primary estimand's second clause."),
    ("metaresearch",),
    ("ca_fund",),
)
SECONDARY = Estimand(
    "secondary",
    N_("Secondary: metaresearch about the Canadian research system"),
    N_(
        "Works in scope (metaresearch) that study the Canadian research system (about_ca_system), whatever their route."
    ),
    ("metaresearch", "about_ca_system"),
)
ALT1_STRICT = Estimand(
    "alt1_strict",
    N_("ALT-1 (strict): CA-AFF only"),
    N_(
        "Works in scope (metaresearch) with a Canadian affiliation (CA-AFF) only: the same works as the primary "
        "estimand's CA-AFF component, reported as the prespecified strict rule."
    ),
    ("metaresearch",),
    ("ca_aff",),
)
ALT2_BROAD = Estimand(
    "alt2_broad",
    N_("ALT-2 (broad): primary, CA-VENUE or CA-PERSON"),
    N_(
        "Works of the primary estimand, or in scope (metaresearch) in a Canadian venue (CA-VENUE) or with an author "
        "whose last-known institutions include a Canadian one (CA-PERSON; not measurable in this frame, so the rate "
        "is a lower bound)."
    ),
    ("metaresearch",),
    ("ca_aff", "ca_fund", "ca_venue"),
    CA_PERSON_NOT_MEASURED,
)

#: Every estimand, in table order.
ESTIMANDS: tuple[Estimand, ...] = (PRIMARY, PRIMARY_CA_AFF, PRIMARY_CA_FUND, SECONDARY, ALT1_STRICT, ALT2_BROAD)
ESTIMAND_BY_NAME: dict[str, Estimand] = {e.name: e for e in ESTIMANDS}
#: The heads the estimands read, in head order.
ESTIMAND_HEADS: tuple[str, ...] = ("metaresearch", "about_ca_system")
#: The category column of an estimand's rows: its in-scope head.
IN_SCOPE = "metaresearch"


def estimand_display(name: str) -> tuple[str, str]:
    """The display name and the definition (untranslated catalogue keys) of an ``estimand`` value."""
    if name == CATEGORY_RATE:
        return CATEGORY_RATE_DISPLAY, CATEGORY_RATE_DEFINITION
    e = ESTIMAND_BY_NAME.get(name)
    return (e.display, e.definition) if e else (name, "")
