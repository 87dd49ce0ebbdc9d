"""The evidence of a coding task: what a coder sees of a work, taken from a row through an explicit allow-list
(:data:`EVIDENCE_FIELDS`), so no label, score, prediction, route or teacher output reaches a coder (SPEC section 10)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ...openalex.ids import is_work_id, short_id
from .errors import CodingError, shown

#: The evidence a coder sees, by evidence key: the row columns it is read from, first present wins. Nothing outside
#: this allow-list reaches a task (``full_text_url`` is derived from ``doi`` and ``landing_url``).
EVIDENCE_FIELDS: dict[str, tuple[str, ...]] = {
    "id": ("id",),
    "title": ("title_text", "title"),
    "year": ("publication_year", "year"),
    "language": ("language",),
    "type": ("type",),
    "venue": ("venue_name", "venue"),
    "ca_institutions": ("ca_institutions",),
    "funders": ("funder_names", "funders"),
    "keywords": ("keywords",),
    "doi": ("doi",),
    "landing_url": ("landing_page_url", "landing_url"),
}
_LIST_EVIDENCE = frozenset({"ca_institutions", "funders", "keywords"})


def _present(value: object) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def _names(value: object) -> list[str]:
    """A list of names from a list of strings or of ``{name: ...}`` structs (the frame's funders), de-duplicated."""
    if value is None or isinstance(value, str | bytes):
        return [value.strip()] if isinstance(value, str) and value.strip() else []
    out: list[str] = []
    for v in value:  # a list, tuple or numpy array
        name = v.get("name") if isinstance(v, Mapping) else v
        if isinstance(name, str) and name.strip() and name.strip() not in out:
            out.append(name.strip())
    return out


def _http(url: object) -> str | None:
    return url if isinstance(url, str) and re.match(r"https?://\S+$", url) else None


def full_text_url(doi: str | None, landing_url: str | None) -> str | None:
    """The link to the full text a coder follows: the DOI's resolver URL, else the landing page; http(s) only."""
    if isinstance(doi, str) and doi.strip():
        d = doi.strip()
        if d.startswith("10."):
            d = "https://doi.org/" + d
        if _http(d):
            return d
    return _http(landing_url)


def task_evidence(row: Mapping[str, Any]) -> dict[str, Any]:
    """The evidence of one task from a row of any shape (a frame row, an audit-sample row): only the
    :data:`EVIDENCE_FIELDS`, lists as lists of names, plus ``full_text_url``. Raises CodingError without a work id."""
    out: dict[str, Any] = {}
    for key, columns in EVIDENCE_FIELDS.items():
        value = next((row[c] for c in columns if c in row and _present(row[c])), None)
        if key in _LIST_EVIDENCE:
            value = _names(value)
        elif key == "year" and value is not None:
            value = int(value)
        elif value is not None:
            value = str(value).strip()
        out[key] = value
    wid = short_id(out["id"])
    if wid is None or not is_work_id(wid):
        raise CodingError("id", f"task id {shown(out['id'])} is not a work id (W followed by digits)")
    out["id"] = wid
    out["landing_url"] = _http(out["landing_url"])
    out["full_text_url"] = full_text_url(out["doi"], out["landing_url"])
    return out
