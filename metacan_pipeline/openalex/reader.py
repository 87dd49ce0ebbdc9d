"""Read OpenAlex records from local files in every shape they come in.

Shapes (all present in ../shared/data/openalex; see its SOURCES.md):

- API list pages ``{"meta": ..., "results": [...]}`` (OpenAlex docs: "Paging");
- single entity JSON (``GET /works/{id}``);
- plain JSON lists (a ``select=`` dump);
- archived responses ``{"request": ..., "payload": <any of the above>}``;
- JSON Lines, plain or gzip, as in the snapshot layout ``data/<entity>/updated_date=*/part_*.gz``
  (OpenAlex docs: "Download the snapshot"); also under a ``.txt`` name when the file holds JSON
  (a ``.txt`` that does not is a note, skipped like ``.md``);
- tar archives (``.tar``, ``.tar.gz``, ``.tgz``) holding any of the above, read member by member in
  memory (nothing is extracted to disk); a record's locator names its member (``<member>:[3]``).

Every record comes out as a :class:`Record` (the parsed dict plus where it came from); anything
unusable comes out as a :class:`Quarantined` row naming file, line and reason, and reading goes on.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path, PurePath

import orjson

from .ids import entity_kind
from .remote import RemoteFile, filesystem, list_files, readable

#: File names that are never records (manifests, merged-id CSVs, notes, the API client's budget ledger;
#: also ``window=*/window.json``, an API refresh window's completion marker).
_SKIP_SUFFIXES = (".md", ".csv.gz", ".csv", ".tmp")
#: Read as one JSON document, else as JSON Lines (``.txt``: only when it holds JSON, see :func:`holds_json`).
_DOCUMENT_SUFFIXES = (".json", ".json.gz", ".txt")
_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
_LINES_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".gz")
_BOM = b"\xef\xbb\xbf"
#: The input file types, as error messages name them.
SUPPORTED_TYPES = (
    ".json, .json.gz, .jsonl, .ndjson or .gz (JSON Lines), .txt holding JSON, or a .tar, .tar.gz or .tgz of these"
)
#: Locators of a whole file (or archive member) that could not be read: not a record.
_FILE_ERROR_LOCATORS = ("document", "file")


@dataclass(frozen=True)
class Record:
    """One parsed OpenAlex entity record.

    ``locator`` says where inside the file it sat (``line 12``, ``results[3]``, ``payload``);
    ``line`` is the 1-based line number for JSON Lines input, else None.
    """

    data: dict
    source_file: str
    locator: str
    line: int | None
    kind: str  # entity letter: W, F, S, I, A, G, ...


@dataclass(frozen=True)
class Quarantined:
    """A record that could not be used, with the reason (SPEC: bad input is never silently lost)."""

    source_file: str
    locator: str
    line: int | None
    reason: str
    excerpt: str


QUARANTINE_COLUMNS = ("source_file", "locator", "line", "reason", "excerpt")


def is_file_error(item: Quarantined) -> bool:
    """Whether a quarantine row is about a whole file (or archive member) rather than one record: an
    unreadable document, a gzip cut after some line, an unreadable tar archive. Such a row is not counted
    as a record read."""
    if item.locator.startswith("after member "):  # a tar archive unreadable past one of its members
        return True
    inner = item.locator.rsplit(":", 1)[-1]  # an archive member's locator is <member>:<locator in the member>
    return inner in _FILE_ERROR_LOCATORS or inner.startswith("after line")


def is_archive(path: Path) -> bool:
    """A tar archive by its name (``.tar``, ``.tar.gz``, ``.tgz``, any case)."""
    return path.name.lower().endswith(_ARCHIVE_SUFFIXES)


def holds_json(path: Path) -> bool:
    """Whether a file's first non-blank byte (after a UTF-8 BOM) opens a JSON object or list: how a
    ``.txt`` of records (e.g. JSON Lines saved as ``works.txt``) is told from a note."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return True  # unreadable: let the reader quarantine it with the reason
    return head_is_json(head)


def head_is_json(head: bytes) -> bool:
    """Whether the first bytes of a file open a JSON object or list (after a UTF-8 BOM and blanks)."""
    head = head[len(_BOM) :] if head.startswith(_BOM) else head
    return head.lstrip()[:1] in (b"{", b"[")


def discover_files(root: Path, snapshot_entities: set[str] | None = None) -> list[Path]:
    """Every record-bearing file under ``root`` (recursively), sorted for a stable order.

    Takes ``*.json``, ``*.json.gz`` (one document each), ``*.jsonl``, ``*.ndjson`` (optionally ``.gz``),
    snapshot parts ``part_*.gz`` (JSON Lines), ``*.txt`` that hold JSON and tar archives (``*.tar``,
    ``*.tar.gz``, ``*.tgz``), suffixes in any case; skips manifests, merged-id CSVs and notes (``*.md``,
    a ``*.txt`` that does not hold JSON). With ``snapshot_entities`` (e.g. ``{"funders"}``) snapshot
    parts of other entities (``data/<entity>/updated_date=*/``) are skipped, so reading the entity
    lists never parses the works. Raises FileNotFoundError naming ``root`` if it does not exist.
    """
    return discover(root, snapshot_entities)[0]


def discover(root: Path, snapshot_entities: set[str] | None = None) -> tuple[list[Path], list[Path]]:
    """``(record files, unsupported files)`` under ``root``: see :func:`discover_files`. Unsupported
    files (e.g. ``.bz2``, no extension) are returned so the caller can report them, never dropped silently."""
    if not root.exists():
        raise FileNotFoundError(
            f"OpenAlex input folder {root} does not exist: set METACAN_OPENALEX_DIR (one folder, or several "
            f"separated by {os.pathsep!r}; or the input_dirs of the openalex resource) to folders of OpenAlex "
            f"JSON / JSON Lines / snapshot files"
        )
    out, unsupported = [], []
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        kind = file_kind(p, snapshot_entities, lambda p=p: holds_json(p))
        if kind is not None:
            (out if kind == "records" else unsupported).append(p)
    return out, unsupported


def file_kind(path: PurePath, snapshot_entities: set[str] | None, is_json: Callable[[], bool]) -> str | None:
    """``records`` for a record-bearing file, ``unsupported`` for one of a type the reader does not take, None for
    one that holds no records by its name (see :func:`discover_files`); ``is_json`` tells a ``.txt`` of records
    from a note (called only for a ``.txt``). ``path`` may be a local path or a path inside object storage."""
    name = path.name.lower()
    if name == "manifest" or name.endswith(_SKIP_SUFFIXES) or (name.startswith("budget-") and name.endswith(".json")):
        return None
    if name == "window.json" and path.parent.name.startswith("window="):  # an API refresh window's completion marker
        return None
    if (
        snapshot_entities is not None
        and path.parent.name.startswith("updated_date=")
        and path.parent.parent.name not in snapshot_entities
    ):
        return None
    if name.endswith(".txt") and not is_json():  # a note, e.g. README.txt
        return None
    return "records" if name.endswith(_DOCUMENT_SUFFIXES + _LINES_SUFFIXES + _ARCHIVE_SUFFIXES) else "unsupported"


def _excerpt(text: str | bytes, n: int = 200) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return text[:n]


def _classify(obj: object, source: str, locator: str, line: int | None) -> Record | Quarantined:
    if not isinstance(obj, dict):
        return Quarantined(
            source,
            locator,
            line,
            f"record is a JSON {type(obj).__name__}, not an object",
            _excerpt(json.dumps(obj))[:200],
        )
    kind = entity_kind(obj.get("id"))
    if kind is None:
        reason = "missing id" if not obj.get("id") else f"unrecognised id {obj.get('id')!r}"
        return Quarantined(source, locator, line, reason, _excerpt(json.dumps(obj, ensure_ascii=False)))
    return Record(obj, source, locator, line, kind)


def _iter_json_document(doc: object, source: str, prefix: str = "") -> Iterator[Record | Quarantined]:
    if isinstance(doc, list):
        for i, obj in enumerate(doc):
            yield _classify(obj, source, f"{prefix}[{i}]", None)
    elif isinstance(doc, dict):
        if "payload" in doc and "request" in doc:
            yield from _iter_json_document(doc["payload"], source, f"{prefix}payload")
        elif "results" in doc and isinstance(doc["results"], list):
            for i, obj in enumerate(doc["results"]):
                yield _classify(obj, source, f"{prefix}{'.' if prefix else ''}results[{i}]", None)
        elif "meta" in doc and "group_by" in doc:
            return  # a group_by response: counts only, no records
        else:
            yield _classify(doc, source, prefix or "document", None)
    else:
        yield Quarantined(
            source, prefix or "document", None, f"document is a JSON {type(doc).__name__}", _excerpt(str(doc))
        )


def _iter_lines(lines: Iterable[bytes], source: str) -> Iterator[Record | Quarantined]:
    """Records of JSON Lines (``lines``: the raw lines). A record's locator is ``record N`` (N counts
    non-blank lines, as DuckDB's reader does); quarantine rows name the physical ``line``. A line holding
    an API page (``{meta, results}``, e.g. a page gzipped and named ``part_000.gz``) gives its results,
    located ``record N.results[i]``. Errors of the underlying stream propagate to the caller."""
    ordinal = 0
    for lineno, raw in enumerate(lines, start=1):
        if lineno == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        if not raw.strip():
            continue
        ordinal += 1
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            yield Quarantined(source, f"line {lineno}", lineno, f"unparseable JSON: {exc}", _excerpt(raw))
            continue
        if (
            isinstance(obj, dict) and "id" not in obj and isinstance(obj.get("results"), list)
        ):  # an API page on one line
            yield from _iter_json_document(obj, source, f"record {ordinal}")
            continue
        yield _classify(obj, source, f"record {ordinal}", lineno)


def _iter_json_lines(path: Path, source: str) -> Iterator[Record | Quarantined]:
    """Records of a JSON Lines file (plain or gzip; see :func:`_iter_lines`); a file that cannot be read to
    its end (a cut or corrupt gzip) gives the records before the damage and one quarantine row
    ``after line N``."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    if opener is gzip.open and path.exists() and path.stat().st_size == 0:  # gzip.open reads 0 bytes as an empty stream
        yield Quarantined(
            source,
            "after line 0",
            1,
            "file unreadable after line 0 (empty file: 0 bytes, no gzip stream); "
            "an interrupted download? re-download this part",
            "",
        )
        return
    lineno = 0

    def counted(fh: Iterable[bytes]) -> Iterator[bytes]:
        nonlocal lineno
        for lineno, raw in enumerate(fh, start=1):  # noqa: B007 (read by the except clause)
            yield raw

    try:
        with opener(path, "rb") as fh:
            yield from _iter_lines(counted(fh), source)
    except (EOFError, OSError, zlib.error) as exc:
        yield Quarantined(
            source,
            f"after line {lineno}",
            lineno + 1,
            f"file unreadable after line {lineno} ({type(exc).__name__}: {exc}); truncated or corrupt "
            f"gzip? re-download this part",
            "",
        )


def _iter_bytes(raw: bytes, source: str) -> Iterator[Record | Quarantined]:
    """Records of one JSON document held in ``raw``, or of JSON Lines when it is not one document but
    its first line is a JSON object (some tools write ``.json`` line by line)."""
    raw = raw[len(_BOM) :] if raw.startswith(_BOM) else raw
    if not raw.strip():
        return
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        first = raw.lstrip().split(b"\n", 1)[0]
        try:
            line_ok = isinstance(orjson.loads(first), dict) and b"\n" in raw.strip()
        except orjson.JSONDecodeError:
            line_ok = False
        if line_ok:  # JSON Lines saved as .json (or .txt)
            yield from _iter_lines(io.BytesIO(raw), source)
        else:
            yield Quarantined(
                source, "document", None, f"not valid JSON: {exc}; fix or re-download the file", _excerpt(raw)
            )
        return
    yield from _iter_json_document(doc, source)


def _member_skipped(name: str, data: bytes) -> bool:
    """An archive member that holds no records by its name, as :func:`discover` skips such files."""
    base = name.rsplit("/", 1)[-1].lower()
    if base == "manifest" or base.endswith(_SKIP_SUFFIXES) or base.startswith("._"):  # ._*: macOS metadata
        return True
    head = data[len(_BOM) :] if data.startswith(_BOM) else data
    return base.endswith(".txt") and head.lstrip()[:1] not in (b"{", b"[")


def _iter_archive(path: Path, source: str) -> Iterator[Record | Quarantined]:
    """Records of every regular member of a tar archive (any compression tarfile knows), read in memory in
    the archive's order; a member is one JSON document or JSON Lines (gzip when its name ends ``.gz``).
    Locators are ``<member>:<locator in the member>``. An archive that cannot be read (to its end) gives
    one quarantine row naming the last member read."""
    last = None
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                fh = tar.extractfile(member)
                data = fh.read() if fh is not None else b""
                if _member_skipped(member.name, data):
                    continue
                last = member.name
                try:
                    data = gzip.decompress(data) if member.name.lower().endswith(".gz") else data
                except (EOFError, OSError, zlib.error) as exc:
                    yield Quarantined(source, f"{member.name}:document", None, f"cannot read archive member: {exc}", "")
                    continue
                for item in _iter_bytes(data, source):
                    yield replace(item, locator=f"{member.name}:{item.locator}")
            # tarfile ends its iteration quietly at a damaged or cut header: what follows the last member
            # read must be the end-of-archive zero blocks, or members were lost
            tar.fileobj.seek(tar.offset)
            rest = tar.fileobj.read()
            if not rest or rest.strip(b"\0"):
                where = f"after member {last}" if last else "before its first member"
                why = (
                    "has no end-of-archive marker" if not rest else f"holds {len(rest)} bytes that are not tar members"
                )
                yield Quarantined(
                    source,
                    "document" if last is None else f"after member {last}",
                    None,
                    f"tar archive {why} {where}: truncated or corrupt, members may be missing; re-download it",
                    "",
                )
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        where = f"after member {last}" if last else "before its first member"
        yield Quarantined(
            source,
            "document" if last is None else f"after member {last}",
            None,
            f"tar archive unreadable {where} ({type(exc).__name__}: {exc}); truncated or corrupt? re-download it",
            "",
        )


def discover_remote(
    url: str, snapshot_entities: set[str] | None = None, listing: list[RemoteFile] | None = None
) -> tuple[list[RemoteFile], list[RemoteFile]]:
    """``(record files, unsupported files)`` under the URL folder ``url`` by the rules of
    :func:`discover_files` (a ``.txt`` is told from a note by its first 4 KiB).
    ``listing``: the folder's :func:`list_files`, when the caller has it."""

    def is_json(f: RemoteFile) -> bool:
        fs, path = filesystem(f.url)
        try:
            return head_is_json(fs.cat_file(path, start=0, end=4096))
        except Exception:
            return True  # unreadable: let the reader quarantine it with the reason

    out: list[RemoteFile] = []
    unsupported: list[RemoteFile] = []
    for f in listing if listing is not None else list_files(url):
        kind = file_kind(f.path, snapshot_entities, lambda f=f: is_json(f))
        if kind is not None:
            (out if kind == "records" else unsupported).append(f)
    return out, unsupported


def iter_file(path: Path, root: Path | None = None, source: str | None = None) -> Iterator[Record | Quarantined]:
    """Records and quarantine rows of one file; never raises for bad content.

    ``source_file`` in the output is ``source`` when given, else relative to ``root`` when given. A ``.json``
    (or ``.txt``) file that does not parse as one document is retried as JSON Lines (some tools write
    ``.json`` line by line); a tar archive is read member by member (:func:`_iter_archive`).
    """
    source = source or (str(path.relative_to(root)) if root else str(path))
    if is_archive(path):
        yield from _iter_archive(path, source)
        return
    if not path.name.lower().endswith(_DOCUMENT_SUFFIXES):
        yield from _iter_json_lines(path, source)
        return
    try:
        raw = path.read_bytes()
        if path.name.lower().endswith(".gz"):
            if not raw:  # gzip.decompress reads 0 bytes as an empty stream
                raise EOFError("empty file: 0 bytes, no gzip stream; an interrupted download?")
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        yield Quarantined(source, "document", None, f"cannot read file: {exc}; re-download it", "")
        return
    if not path.name.lower().endswith(".gz") and not raw.strip():  # a gzip of nothing is an empty part
        yield Quarantined(
            source,
            "document",
            None,
            f"empty file ({len(raw)} bytes, no JSON): an interrupted download? re-download it, or remove it",
            "",
        )
        return
    yield from _iter_bytes(raw, source)


def iter_records(
    root: Path | str, snapshot_entities: set[str] | None = None, prefix: str = ""
) -> Iterator[Record | Quarantined]:
    """Every record and quarantine row under ``root``, file by file (see :func:`discover_files`); each
    ``source_file`` is ``prefix`` + the path relative to ``root`` (a further input folder's prefix is its
    name: :mod:`metacan_pipeline.openalex.folders`). ``root`` may be a URL folder (:mod:`.remote`): each file is
    read from a local copy, one at a time."""
    if isinstance(root, str):
        for f in discover_remote(root, snapshot_entities)[0]:
            with readable(f.url) as local:
                yield from iter_file(local, source=prefix + f.rel)
        return
    for path in discover_files(root, snapshot_entities):
        yield from iter_file(path, source=prefix + str(path.relative_to(root)))
