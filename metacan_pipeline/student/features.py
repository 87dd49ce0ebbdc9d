"""Student input: the title-only view as one text per work (SPEC section 6).

Only fields the whole frame can supply: title, venue, topic, field, type, language. No abstract
reaches the student (the frame stores none).
"""

from __future__ import annotations

STUDENT_FIELDS = ("title_text", "venue_name", "topic", "field", "type", "language")


def student_text(work: dict) -> str:
    """``title | venue | topic | field | type | language`` with missing parts left empty."""
    return " | ".join(str(work.get(f) or "") for f in STUDENT_FIELDS)
