"""The venue reference set of known-item recall (the original protocol's instrument iii): a versioned TOML list of
meta-research venues pinned as OpenAlex source ids (the packaged ``reference_venues.toml``, or the file
``METACAN_REFERENCE_VENUES_FILE`` names). A venue whose id could not be confirmed has ``source_id = ""``: it is listed
as not pinned and adds no work to the reference set."""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ... import settings

DEFAULT_VENUES_FILE = Path(__file__).with_name("reference_venues.toml")
_SOURCE_ID = re.compile(r"S[1-9][0-9]*")
_VENUE_KEYS = {"name", "source_id", "issn_l", "evidence"}


@dataclass(frozen=True)
class ReferenceVenue:
    """One venue of the list: its name, OpenAlex source id (None: not pinned), ISSN and the evidence for the id."""

    name: str
    source_id: str | None
    issn_l: str | None
    evidence: str


@dataclass(frozen=True)
class VenueList:
    """The venue reference set: its ``version``, the SHA-256 of the file it was read from, and its venues in order."""

    version: str
    sha256: str
    path: str
    venues: tuple[ReferenceVenue, ...]

    @property
    def pinned(self) -> dict[str, str]:
        """``{source id: venue name}`` of the venues with a confirmed OpenAlex source id."""
        return {v.source_id: v.name for v in self.venues if v.source_id}

    @property
    def not_pinned(self) -> list[str]:
        """The names of the venues without a confirmed source id (they add no work to the reference set)."""
        return [v.name for v in self.venues if not v.source_id]


def _venue(entry: object, where: str) -> ReferenceVenue:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: each [[venue]] must be a table with name, source_id, issn_l and evidence")
    unknown = sorted(set(entry) - _VENUE_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; expected {sorted(_VENUE_KEYS)}")
    name, sid = entry.get("name"), entry.get("source_id", "")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{where}: name must be a non-empty string")
    if not isinstance(sid, str) or (sid and not _SOURCE_ID.fullmatch(sid)):
        raise ValueError(
            f"{where} ({name}): source_id {sid!r} is not an OpenAlex source id (S followed by digits, e.g. "
            'S148561398); write "" when no id is confirmed'
        )
    issn, evidence = entry.get("issn_l", ""), entry.get("evidence", "")
    if not isinstance(issn, str) or not isinstance(evidence, str):
        raise ValueError(f"{where} ({name}): issn_l and evidence must be strings")
    return ReferenceVenue(name.strip(), sid or None, issn or None, evidence)


def load_venue_list(path: str | Path | None = None) -> VenueList:
    """The venue list of ``path`` (default: ``METACAN_REFERENCE_VENUES_FILE``, else the packaged file). Raises
    ValueError naming the file and what to fix: a missing or empty ``version``, no ``[[venue]]``, a bad key or source
    id, or a source id listed twice."""
    path = Path(path or settings.reference_venues_file() or DEFAULT_VENUES_FILE)
    where = f"venue reference set {path}"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(
            f"{where}: cannot be read ({exc.strerror}); set {settings.REFERENCE_VENUES_FILE_ENV} to a readable "
            "TOML file or unset it"
        ) from exc
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{where}: not valid UTF-8 TOML ({exc})") from exc
    version = doc.get("version")
    if not isinstance(version, str) or not version.strip():
        raise ValueError(f'{where}: give the list a version (version = "reference-venues-v1") and bump it on a change')
    entries = doc.get("venue")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{where}: no [[venue]] table; list at least one venue")
    venues = tuple(_venue(e, f"{where}, venue {i + 1}") for i, e in enumerate(entries))
    ids = [v.source_id for v in venues if v.source_id]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"{where}: source ids listed twice: {twice}")
    return VenueList(version.strip(), hashlib.sha256(raw).hexdigest(), str(path), venues)
