"""The release layer of a published work: human-verified, high-precision, provisional or contested (SPEC section 11).

The original protocol (choxos/MetaCan ``docs/protocol/PROTOCOL.md``, section 6.1 (i)) names the layers and what they
are for, not a rule:

    "(d) the release is layered: **human-verified / high-precision / provisional / contested**, so no layer borrows
    another's authority."

and section 6.2a says what machine output is worth: "Machine tiers are released marked provisional. Every prevalence
this study reports is design-weighted human coding." Section 6.1 (i) calls the place where screeners split "the
contested boundary". The rule below reads those sentences over what a published record already carries, once, and
every surface (the record, the release database, the site, the exports, ``metacan summary``, ``metacan
verify-release``) takes the layer from :func:`release_layer`. Every work is in exactly one layer: the first rule that
holds, in this order.

1. ``human_verified``: the record carries a ``human_code``, the final human code of an audit study (two independent
   coders agreed, or an adjudication; :mod:`metacan_pipeline.publish.human_layer`). Humans settled the work, whatever
   the machines said. A work the coders left ``unresolved`` has no final human code, so it is never human-verified
   (the protocol: unresolved is reported, never imputed); it falls to the rules below.
2. ``contested``: the machine sources split on the work's scope, on any binary head (the nine categories and the two
   about-Canada heads):

   - the classifier's candidate and consensus differ: a category in ``candidate_categories`` but not in
     ``consensus_categories``, or an about-Canada head whose candidate is true and consensus is not (one teacher's
     side called it, the other did not: the audit's candidate-only stratum);
   - two teachers' labelled direct labels differ on the categories or on an about-Canada head. A teacher whose
     qualification sentence says it is not qualified is left out (its labels decide nothing, SPEC section 4);
     imported screeners, which carry no qualification sentence, count.

   The protocol leaves open whether a category called by one side only, where the other side's head has no decision
   (a head that failed its support gate), is contested: it is, conservatively, since no layer above it may rest on a
   single machine voice. The categorical heads (domain, study design, genre) describe a work and never admit it, so a
   split on them does not make it contested; ``teacher_disagreement_score`` (a continuous score) is not thresholded,
   since the protocol fixes no threshold.
3. ``high_precision``: the record's classifier decides at least one head positive whose precision the audit measured
   and the gate passed (a ``human_validation`` entry with ``decision`` true: the newest gate row of a locked protocol
   passed, precision lower bound >= 0.80, recall lower bound >= 0.70, enough coded positives, SPEC section 10), and
   every binary head the record shows decided positive (its consensus and candidate categories and about-Canada
   heads) is such a head. A positive on a head no audit validated would borrow the validated heads' authority, so it
   keeps the work provisional; a negative decision makes no precision claim, so a work whose validated heads all
   decide negative is provisional too.
4. ``provisional``: everything else: direct labels and predictions no audit validated, machine scores only, and a work
   not classified yet (absence is not a negative, and it is not a claim either).

The rule reads the record as published: on a rolling-layer work the classifier categories of heads that did not pass
human validation are withheld before the rule runs (:mod:`.layer`), and :func:`.layer.frozen_record` computes the
layer again when a release restores them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..vocab import ABOUT_CA_TARGETS

HUMAN_VERIFIED = "human_verified"
HIGH_PRECISION = "high_precision"
PROVISIONAL = "provisional"
CONTESTED = "contested"
#: The layers, from the most authoritative; every published work is in exactly one.
RELEASE_LAYERS: tuple[str, ...] = (HUMAN_VERIFIED, HIGH_PRECISION, PROVISIONAL, CONTESTED)
#: The record field holding the layer.
FIELD = "release_layer"
_NOT_QUALIFIED = "teacher not qualified"


@dataclass(frozen=True)
class LayerBasis:
    """A work's layer and what put it there: ``heads`` are the split heads (contested) or the validated positive
    heads (high-precision), ``protocol_id`` the human code's protocol (human-verified)."""

    layer: str
    heads: tuple[str, ...] = ()
    protocol_id: str | None = None


def _positive_heads(pred: Mapping[str, Any], mode: str) -> set[str]:
    heads = set(pred.get(f"{mode}_categories") or [])
    heads.update(t for t in ABOUT_CA_TARGETS if pred.get(f"{t}_{mode}") is True)
    return heads


def _label_heads(label: Mapping[str, Any]) -> set[str]:
    heads = set(label.get("categories") or [])
    heads.update(t for t in ABOUT_CA_TARGETS if label.get(t) is True)
    return heads


def split_heads(record: Mapping[str, Any]) -> tuple[str, ...]:
    """The binary heads the machine sources split on (rule 2 of the module docstring), sorted."""
    pred = record.get("prediction") or {}
    split = _positive_heads(pred, "candidate") ^ _positive_heads(pred, "consensus")
    labels = [
        _label_heads(lab)
        for lab in record.get("direct_labels") or []
        if lab.get("status") == "labelled" and not str(lab.get("qualification") or "").startswith(_NOT_QUALIFIED)
    ]
    if len(labels) > 1:
        split |= set.union(*labels) - set.intersection(*labels)
    return tuple(sorted(split))


def layer_basis(record: Mapping[str, Any]) -> LayerBasis:
    """The layer of ``record`` (a published work record) and what put it there (module docstring)."""
    code = record.get("human_code")
    if code:
        return LayerBasis(HUMAN_VERIFIED, protocol_id=code.get("protocol_id"))
    split = split_heads(record)
    if split:
        return LayerBasis(CONTESTED, heads=split)
    pred = record.get("prediction") or {}
    validated = {v.get("head") for v in record.get("human_validation") or [] if v.get("decision") is True}
    shown = _positive_heads(pred, "candidate") | _positive_heads(pred, "consensus")
    if shown and shown <= validated:
        return LayerBasis(HIGH_PRECISION, heads=tuple(sorted(shown)))
    return LayerBasis(PROVISIONAL)


def release_layer(record: Mapping[str, Any]) -> str:
    """The layer of ``record``: one of :data:`RELEASE_LAYERS` (module docstring)."""
    return layer_basis(record).layer


def layer_violations(record: Mapping[str, Any]) -> list[str]:
    """How ``record`` breaks "every work in exactly one layer": no ``release_layer``, a value that is not one of
    :data:`RELEASE_LAYERS`, or another layer than the rule gives, as ``"<id>: release layer: ..."``."""
    wid = record.get("id")
    got, want = record.get(FIELD), release_layer(record)
    if got not in RELEASE_LAYERS:
        return [
            f"{wid}: release layer: {got!r} is not one of {', '.join(RELEASE_LAYERS)} (the rule gives {want}); "
            f"re-materialize work_records"
        ]
    if got != want:
        return [f"{wid}: release layer: the record says {got} but the rule gives {want}; re-materialize work_records"]
    return []
