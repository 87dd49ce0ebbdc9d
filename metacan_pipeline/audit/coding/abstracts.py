"""The abstracts the coding study showed its coders, archived (the original protocol, choxos/MetaCan
``docs/protocol/PROTOCOL.md`` section 6.1: sampled works are coded on the best ascertainable evidence, and the study
keeps the evidence it showed). Abstracts are fetched live (the abstract cascade of the coding pages or of a Label
Studio export) and never stored in the frame; what a coder was shown is appended here once, under the SHA-256 of its
text, with the source that gave it and its sections, and the answer records that hash (``coding_answers.
abstract_sha256``), so every code says exactly which abstract it was made on. Rows are never changed or deleted
(triggers)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from hashlib import sha256
from typing import Any

from .base import StoreBase
from .errors import CodingError, shown
from .rules import now_iso

#: The sources an archived abstract may come from (``metacan_pipeline.publish.abstracts.SOURCES``).
ABSTRACT_SOURCES = ("openalex", "europepmc", "crossref")


def text_sha256(text: str) -> str:
    """SHA-256 (hex) of an abstract text in UTF-8: the key it is archived under."""
    return sha256(text.encode("utf-8")).hexdigest()


def check_abstract(con: sqlite3.Connection, work_id: str, abstract_sha256: str | None) -> str | None:
    """The abstract hash an answer records, checked (in the write transaction): None when no abstract was shown,
    else a hash this store archived for this work; CodingError naming it otherwise."""
    if abstract_sha256 in (None, ""):
        return None
    row = con.execute(
        "SELECT 1 FROM coding_abstracts WHERE abstract_sha256 = ? AND id = ?", [abstract_sha256, work_id]
    ).fetchone()
    if row is None:
        raise CodingError(
            "abstract_sha256",
            f"{shown(abstract_sha256, 132)} is not an abstract this coding store showed for {work_id}: the answer was "
            f"made on an abstract from elsewhere (another store, or an edited form or export); open {work_id} again "
            "and answer from the page",
        )
    return abstract_sha256


class AbstractsMixin(StoreBase):
    """Archiving the abstract a coder is shown, and reading it back."""

    def archive_abstract(
        self,
        work_id: str,
        text: str,
        source: str,
        sections: Sequence[tuple[str | None, str]],
        fetched_at: str | None,
    ) -> str:
        """Append the abstract shown for ``work_id`` (once per distinct text and work) and return the SHA-256 of
        ``text``, which the answer form carries. ``source``: one of :data:`ABSTRACT_SOURCES`; ``sections``: the
        ``(heading, text)`` sections as shown; ``fetched_at``: when the source gave it (ISO 8601). Raises CodingError
        for an empty text or an unknown source."""
        if not isinstance(text, str) or not text.strip():
            raise CodingError("abstract", "an empty abstract is not archived: a page without one records no hash")
        if source not in ABSTRACT_SOURCES:
            raise CodingError("abstract", f"source={shown(source)}: expected one of {list(ABSTRACT_SOURCES)}")
        digest = text_sha256(text)
        sections_json = json.dumps([[h, t] for h, t in sections], ensure_ascii=False)
        with self._write() as con:
            con.execute(
                "INSERT INTO coding_abstracts VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [digest, work_id, source, sections_json, text, fetched_at, now_iso()],
            )
        return digest

    def archived_abstract(self, abstract_sha256: str, work_id: str) -> dict[str, Any] | None:
        """The archived abstract under this hash for this work (every column of ``coding_abstracts``,
        ``abstract_sections`` a list of ``(heading, text)``), or None."""
        with self._read() as con:
            row = con.execute(
                "SELECT * FROM coding_abstracts WHERE abstract_sha256 = ? AND id = ?", [abstract_sha256, work_id]
            ).fetchone()
        if row is None:
            return None
        out = dict(row)
        out["abstract_sections"] = [tuple(s) for s in json.loads(out["abstract_sections"])]
        return out
