"""Pinned lists of Canadian funders, sources and institutions (SPEC section 2).

A work record carries no venue country and a funder reference carries no country either, so the
``ca_fund`` and ``ca_venue`` routes need these lists. They are built from OpenAlex entity records
(funders, sources, institutions) whose ``country_code`` is ``CA``, found in any input shape (API
responses, archived responses, snapshot entity folders), and versioned by build date and content hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from ..openalex.ids import short_id
from ..openalex.reader import Record

KIND_NAMES = {"F": "funder", "S": "source", "I": "institution"}


@dataclass(frozen=True)
class EntityLists:
    """The three pinned id sets plus their versions, as the frame build uses them."""

    funders: dict[str, str]
    sources: dict[str, str]
    institutions: dict[str, str]
    versions: dict[str, str]

    @classmethod
    def from_table(cls, table: pa.Table) -> EntityLists:
        rows = table.to_pylist()
        pick = lambda k: {r["id"]: r["display_name"] for r in rows if r["kind"] == k}  # noqa: E731
        versions = {r["kind"]: r["list_version"] for r in rows}
        for kind in KIND_NAMES.values():
            versions.setdefault(kind, "empty")
        return cls(pick("funder"), pick("source"), pick("institution"), versions)


def list_version(kind: str, ids: Iterable[str], data_date: str) -> str:
    """``<kind>s@<YYYY-MM-DD>#<8 hex of the sorted ids>``: the date is the newest ``updated_date`` of the
    list's records (the data's date, so an unchanged list keeps its version); the hash changes with
    any change of ids."""
    digest = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:8]
    return f"{kind}s@{data_date}#{digest}"


def canadian_entity_rows(records: Iterable[Record], built_on: str) -> list[dict]:
    """Rows of :data:`ENTITY_SCHEMA` for every funder/source/institution record with country CA.

    A record seen several times keeps its newest ``updated_date``. ``built_on`` dates a list whose
    records carry no ``updated_date``.
    """
    best: dict[tuple[str, str], dict] = {}
    for rec in records:
        kind = KIND_NAMES.get(rec.kind)
        if kind is None:
            continue
        if str(rec.data.get("country_code") or "").upper() != "CA":
            continue
        eid = short_id(rec.data.get("id"))
        updated = rec.data.get("updated_date") or rec.data.get("updated")
        name = rec.data.get("display_name")
        row = {
            "kind": kind,
            "id": eid,
            "display_name": name if isinstance(name, str) else None,
            "country_code": "CA",
            "updated_date": str(updated) if updated is not None else None,
            "source_file": rec.source_file,
        }
        key = (kind, eid)
        old = best.get(key)
        if old is None or str(row["updated_date"] or "") > str(old["updated_date"] or ""):
            best[key] = row
    rows = sorted(best.values(), key=lambda r: (r["kind"], r["id"]))
    for kind in KIND_NAMES.values():
        ids = [r["id"] for r in rows if r["kind"] == kind]
        dates = [str(r["updated_date"])[:10] for r in rows if r["kind"] == kind and r["updated_date"]]
        version = list_version(kind, ids, max(dates, default=built_on))
        for r in rows:
            if r["kind"] == kind:
                r["list_version"] = version
    return rows
