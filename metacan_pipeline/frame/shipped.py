"""The entity lists that ship with the package: pinned Canadian funders, sources and institutions.

A frame built from work records alone still needs the Canadian funder and source ids for its ``ca_fund`` and
``ca_venue`` routes (a work record names a funder or a venue but not its country). The package ships them as one
versioned file, ``frame/data/ca_entities-<YYYY-MM-DD>.csv.gz`` (columns :data:`FILE_COLUMNS`), beside a sidecar
``ca_entities-<YYYY-MM-DD>.json`` that gives its date, its provenance and how complete it is. ``canadian_entities``
uses a kind's shipped list when the input folders hold no entity record of that kind.

Refreshing: ``metacan entity-list --from <folder>`` writes a new file from the entity records of any input folder (a
snapshot's ``data/funders|sources|institutions/`` parts, archived API answers), and ``metacan fetch
--entity-list-out <folder>`` from the OpenAlex API (``country_code:ca`` on ``/funders``, ``/sources`` and
``/institutions``). ``METACAN_ENTITY_LIST_FILE`` points the pipeline at such a file; the newest packaged file is the
default. OpenAlex entity records are CC0.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..openalex.ids import short_id
from ..openalex.reader import Record
from .entities import KIND_NAMES, canadian_entity_rows

#: The packaged folder of entity list files.
PACKAGED_DIR = Path(__file__).with_name("data")
#: A list file's name: the date it was pinned.
FILE_RE = re.compile(r"ca_entities-(\d{4}-\d{2}-\d{2})\.csv\.gz")
#: The columns of a list file, one row per Canadian entity.
FILE_COLUMNS = ("kind", "id", "display_name", "updated_date", "origin")
#: The kinds of a list, as ``canadian_entities`` names them.
KINDS = tuple(KIND_NAMES.values())
_LETTER = {name: letter for letter, name in KIND_NAMES.items()}


class EntityListError(ValueError):
    """An entity list file that cannot be read, or that a setting names wrongly."""


def packaged_file(folder: Path = PACKAGED_DIR) -> Path:
    """The newest ``ca_entities-<date>.csv.gz`` in ``folder`` (the packaged lists by default)."""
    found = sorted((p for p in folder.glob("ca_entities-*.csv.gz") if FILE_RE.fullmatch(p.name)), key=lambda p: p.name)
    if not found:
        raise EntityListError(f"no ca_entities-<date>.csv.gz in {folder}: reinstall the package or refresh the list")
    return found[-1]


def sidecar_of(path: Path) -> Path:
    """The JSON sidecar beside a list file (its date, provenance and coverage)."""
    return path.with_name(path.name.removesuffix(".csv.gz") + ".json")


def read_list_file(path: Path) -> list[dict]:
    """Every row of a list file, checked: a known kind, an OpenAlex id of that kind's letter.

    Raises :class:`EntityListError` naming the file and the first bad row."""
    try:
        with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            if tuple(reader.fieldnames or ()) != FILE_COLUMNS:
                raise EntityListError(
                    f"{path}: columns {reader.fieldnames}, expected {list(FILE_COLUMNS)}: write it with metacan "
                    "entity-list or metacan fetch --entity-list-out"
                )
            rows = list(reader)
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as exc:
        raise EntityListError(f"{path}: not a readable gzip CSV entity list ({exc})") from None
    for n, row in enumerate(rows, start=2):
        kind, eid = row["kind"], row["id"]
        if kind not in _LETTER or short_id(eid) != eid or not eid.startswith(_LETTER[kind]):
            raise EntityListError(
                f"{path} line {n}: kind {kind!r} with id {eid!r}; a row is funder F..., source S... or institution I..."
            )
    return rows


def shipped_records(path: Path) -> Iterator[Record]:
    """The rows of a list file as OpenAlex entity records with ``country_code`` CA (what ``canadian_entity_rows``
    reads); each record's ``source_file`` is the list file's name."""
    for n, row in enumerate(read_list_file(path), start=2):
        data = {
            "id": f"https://openalex.org/{row['id']}",
            "display_name": row["display_name"] or None,
            "country_code": "CA",
            "updated_date": row["updated_date"] or None,
        }
        yield Record(data, path.name, f"line {n}", n, _LETTER[row["kind"]])


def combine(input_rows: list[dict], shipped_rows: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """Per kind, the input's rows when it has any, else the shipped list's; and where each kind came from
    (``input`` or ``shipped``; ``none`` for a kind neither has)."""
    out, origin = [], {}
    for kind in KINDS:
        mine = [r for r in input_rows if r["kind"] == kind]
        theirs = [r for r in shipped_rows if r["kind"] == kind]
        out += mine or theirs
        origin[kind] = "input" if mine else "shipped" if theirs else "none"
    return out, origin


def write_list_file(
    records: Iterable[Record], folder: Path, pinned_on: str, provenance: str, coverage: str
) -> tuple[Path, dict]:
    """Write ``folder/ca_entities-<pinned_on>.csv.gz`` and its sidecar from the Canadian entity records among
    ``records`` (a record seen several times keeps its newest version). The file is byte-stable for the same rows
    (gzip without a name or time), so a refresh that finds nothing new changes nothing.

    Raises :class:`EntityListError` when no record has ``country_code`` CA (an empty list would silence the
    routes)."""
    try:
        dt.date.fromisoformat(pinned_on)
    except ValueError:
        raise EntityListError(f"pinned date {pinned_on!r} is not YYYY-MM-DD") from None
    rows = canadian_entity_rows(records, pinned_on)
    if not rows:
        raise EntityListError("no funder, source or institution record with country_code CA: nothing to write")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(FILE_COLUMNS)
    for r in rows:
        w.writerow([r["kind"], r["id"], r["display_name"] or "", r["updated_date"] or "", r["source_file"]])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ca_entities-{pinned_on}.csv.gz"
    path.write_bytes(gzip.compress(buf.getvalue().encode("utf-8"), mtime=0))
    counts = {kind: sum(1 for r in rows if r["kind"] == kind) for kind in KINDS}
    sidecar = {
        "file": path.name,
        "pinned_on": pinned_on,
        "criterion": "OpenAlex funders, sources and institutions whose country_code is CA",
        "counts": counts,
        "list_versions": {r["kind"]: r["list_version"] for r in rows},
        "provenance": provenance,
        "coverage": coverage,
        "licence": "OpenAlex data: CC0 1.0",
        "columns": {
            "kind": "funder | source | institution",
            "id": "OpenAlex short id (F..., S..., I...)",
            "display_name": "as OpenAlex has it",
            "updated_date": "the entity record's updated_date",
            "origin": "the input file the record was read from",
        },
    }
    sidecar_of(path).write_text(json.dumps(sidecar, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path, sidecar


def configured_file(setting: str | None) -> Path | None:
    """The list file ``METACAN_ENTITY_LIST_FILE`` names (``setting``): None for ``none``, the newest packaged file
    when unset. Raises :class:`EntityListError` for a path that is not a file."""
    if setting is None:
        return packaged_file()
    if setting.lower() == "none":
        return None
    path = Path(setting).expanduser()
    if not path.is_file():
        raise EntityListError(
            f"METACAN_ENTITY_LIST_FILE={setting}: no such file; write one with metacan entity-list --from <folder> "
            "--out <folder> (or metacan fetch --entity-list-out <folder>), or unset it for the packaged list"
        )
    return path


#: What to do about an empty list, by kind: the route it silences and the entity folder that feeds it.
_EMPTY_HELP = {
    "funder": ("ca_fund", "funders"),
    "source": ("ca_venue", "sources"),
    "institution": ("the institution list", "institutions"),
}


def empty_kind_message(kind: str, list_file: Path | None) -> str:
    """Why an empty ``kind`` list stops the build, and the three ways on."""
    route, folder = _EMPTY_HELP[kind]
    shipped = (
        f"the entity list file {list_file} has no {kind}"
        if list_file is not None
        else "METACAN_ENTITY_LIST_FILE=none turns the shipped list off"
    )
    return (
        f"no Canadian {kind} records: the input folders hold none with country_code CA and {shipped}, so {route} "
        f"cannot fire. Add {kind} records to an input folder (metacan fetch --out <folder> harvests them from the "
        f"OpenAlex API, or copy a snapshot's data/{folder}/ parts), or unset METACAN_ENTITY_LIST_FILE for the packaged "
        f"list, or set METACAN_EMPTY_ENTITY_KINDS={kind} to build without it"
    )


def pinned_lists(
    input_records: Iterable[Record], built_on: str, list_file: Path | None, may_be_empty: frozenset[str]
) -> tuple[list[dict], dict[str, str]]:
    """The rows of ``canadian_entities``: per kind the input's Canadian records, else ``list_file``'s; and where
    each kind came from (``input``, ``shipped``, ``none``).

    Raises :class:`EntityListError` (:func:`empty_kind_message`) for a kind that comes out empty and is not in
    ``may_be_empty``."""
    mine = canadian_entity_rows(input_records, built_on)
    theirs = canadian_entity_rows(shipped_records(list_file), built_on) if list_file is not None else []
    rows, origin = combine(mine, theirs)
    for kind in KINDS:
        if origin[kind] == "none" and kind not in may_be_empty:
            raise EntityListError(empty_kind_message(kind, list_file))
    return rows, origin


def api_entity_records(client, entity: str) -> Iterator[Record]:
    """Every ``entity`` record (``funders``, ``sources`` or ``institutions``) with ``country_code:ca`` from the
    OpenAlex API, page by page through ``client`` (an :class:`~metacan_pipeline.openalex.api.OpenAlexClient`:
    archived, budgeted); each record's ``source_file`` names the query."""
    letter = entity[0].upper()
    for page in client.iter_pages("country_code:ca", endpoint=f"/{entity}"):
        for i, data in enumerate(page.get("results") or []):
            if short_id(data.get("id")):
                yield Record(data, f"api:/{entity}?filter=country_code:ca", f"results[{i}]", None, letter)
