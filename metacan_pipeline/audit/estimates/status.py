"""Where the coding of a protocol's audit sample stands, in counts that add up (SPEC section 10).

Every drawn work is in exactly one of: not coded yet, coded by one coder (waiting for the second), coded by both
coders. Of the works coded by both, each is agreed (a final code), adjudicated (a final code) or awaiting
adjudication. ``unresolved`` counts, across these, the drawn works with no final code of which a coder's (or the
adjudicator's) latest answer is unresolved. The final human codes (agreed or adjudicated: a single coder's answer is
never one) are split by population: the audited sample (what the estimates and the gate count), the ``trained_on``
stratum (works that trained or calibrated the classifier, reported apart) and any coded work outside the drawn
sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class CodingStatus:
    """The counts of :func:`coding_status` (module docstring)."""

    audited: int
    trained: int
    not_coded: int
    one_coder: int
    two_coders: int
    agreed: int
    adjudicated: int
    awaiting_adjudication: int
    unresolved: int
    final_audited: int
    final_trained: int
    final_outside: int

    @property
    def drawn(self) -> int:
        return self.audited + self.trained

    @property
    def final(self) -> int:
        return self.final_audited + self.final_trained + self.final_outside


def coding_status(
    answers: Iterable[Mapping], final: Iterable[Mapping], audited: Iterable[str], trained: Iterable[str]
) -> CodingStatus:
    """The :class:`CodingStatus` of the drawn works ``audited`` (the audited population) and ``trained`` (the
    ``trained_on`` stratum): ``answers`` the latest answer per work, coder and role (``id``, ``coder``, ``role``,
    ``unresolved``), ``final`` the final human codes (``id``, ``basis`` agreed or adjudicated)."""
    audited, trained = set(audited), set(trained)
    drawn = audited | trained
    coders: dict[str, set[str]] = {}
    unsure: set[str] = set()
    for a in answers:
        if a["role"] == "code":
            coders.setdefault(a["id"], set()).add(a["coder"])
        if a["unresolved"]:
            unsure.add(a["id"])
    basis = {c["id"]: c["basis"] for c in final if c["basis"] in ("agreed", "adjudicated")}
    count = {k: 0 for k in ("not_coded", "one_coder", "two_coders", "agreed", "adjudicated", "awaiting")}
    for wid in drawn:
        n = len(coders.get(wid, ()))
        count[("not_coded", "one_coder", "two_coders")[min(n, 2)]] += 1
        if n >= 2:
            count[basis[wid] if wid in basis else "awaiting"] += 1
    return CodingStatus(
        audited=len(audited),
        trained=len(trained),
        not_coded=count["not_coded"],
        one_coder=count["one_coder"],
        two_coders=count["two_coders"],
        agreed=count["agreed"],
        adjudicated=count["adjudicated"],
        awaiting_adjudication=count["awaiting"],
        unresolved=len((unsure & drawn) - set(basis)),
        final_audited=len(set(basis) & audited),
        final_trained=len(set(basis) & trained),
        final_outside=len(set(basis) - drawn),
    )


def status_sentence(s: CodingStatus) -> str:
    """The counts as one sentence, each figure named and the final codes split by where they count."""
    outside = f", {s.final_outside} outside the drawn sample (estimating nothing)" if s.final_outside else ""
    return (
        f"{s.drawn} drawn works ({s.audited} of the audited population, {s.trained} of the trained_on stratum): "
        f"{s.not_coded} not coded yet, {s.one_coder} coded by one coder (waiting for the second), {s.two_coders} "
        f"coded by both ({s.agreed} agreed, {s.adjudicated} adjudicated, {s.awaiting_adjudication} awaiting "
        f"adjudication); {s.unresolved} with an unresolved answer and no final code. Final human codes (two coders "
        f"agreed, or adjudicated): {s.final}: {s.final_audited} in the audited sample (what the estimates and the "
        f"gate count), {s.final_trained} of the trained_on stratum (reported apart: those works trained or "
        f"calibrated the classifier){outside}"
    )
