"""The stub's labels: a deterministic label from a hash of the work id, or an oracle label from a list of meta-research ids."""

from __future__ import annotations

import hashlib

from metacan_pipeline.vocab import (
    CATEGORIES,
    CONFIDENCES,
    DOMAINS,
    GENRES,
    INSUFFICIENT_PAYLOAD,
    STUDY_DESIGNS,
)

_METARESEARCH = CATEGORIES[0]
_SUBCATEGORIES = tuple(c for c in CATEGORIES[1:] if c != INSUFFICIENT_PAYLOAD)


def stub_label(work_id: str) -> dict:
    """The deterministic label of a work id: 10% metaresearch (7 in 8 of them with a second category and
    always a substantive domain), 3% one non-metaresearch category, 1% ``insufficient_payload`` alone,
    the rest ``[]`` with a null domain."""
    h = int.from_bytes(hashlib.blake2b(work_id.encode(), digest_size=8).digest(), "little")
    bucket, h = h % 1000, h // 1000
    domain = None
    if bucket < 100:
        categories = [_METARESEARCH]
        k, h = h % 8, h // 8
        if k < len(_SUBCATEGORIES):
            categories.append(_SUBCATEGORIES[k])
        domain, h = DOMAINS[1 + h % (len(DOMAINS) - 1)], h // 8
    elif bucket < 130:
        categories, h = [_SUBCATEGORIES[2 + h % 4]], h // 4  # bibliometrics .. open_science
    elif bucket < 140:
        categories = [INSUFFICIENT_PAYLOAD]
    else:
        categories = []
    design, h = STUDY_DESIGNS[h % len(STUDY_DESIGNS)], h // 16
    genre, h = GENRES[h % len(GENRES)], h // 16
    confidence, h = CONFIDENCES[h % len(CONFIDENCES)], h // 4
    return {
        "id": work_id,
        "categories": categories,
        "domain": domain,
        "study_design": design,
        "genre": genre,
        "about_ca_system": h % 20 == 0,
        "about_ca_topic": (h // 20) % 8 == 0,
        "confidence": confidence,
        "reason": f"Stub label for {work_id}: {'meta-research' if domain else 'not meta-research'}.",
    }


def oracle_label(work_id: str, positives: frozenset[str]) -> dict:
    """The stub's label of ``work_id`` when it is told which works are meta-research (``--metaresearch-ids``):
    ``[metaresearch]`` with domain ``methods`` for the listed ids, ``[]`` for the others; the other fields as
    ``stub_label``. A teacher that agrees with a reference set."""
    label = stub_label(work_id)
    hit = work_id in positives
    return {**label, "categories": ["metaresearch"] if hit else [], "domain": "methods" if hit else None}
