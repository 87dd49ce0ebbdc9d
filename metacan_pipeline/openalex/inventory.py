"""What the OpenAlex input folders hold, by frame partition, checked against the snapshot manifests.

OpenAlex docs, "Download the snapshot" / "Snapshot data format": works come as
``data/works/updated_date=YYYY-MM-DD/part_NNN.gz`` with a ``data/works/manifest`` (Redshift-style
JSON: ``entries[].url``, ``entries[].meta.record_count`` and ``entries[].meta.content_length``, the part's
size in bytes) written after the parts; merged works as
``data/merged_ids/works/*.csv.gz``.

Partition keys (the frame's Dagster partitions, the dynamic partitions ``openalex_partitions``):
a snapshot part belongs to its ``updated_date=YYYY-MM-DD`` folder; a page of the API archive to its
refresh window folder (``window=<from>_<to>``, source files prefixed ``api/``); every other file
(API pages, archives, single works, JSON Lines) belongs to ``files``. Several input folders share these
keys (their files are told apart by ``source_file``: :mod:`metacan_pipeline.openalex.folders`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .folders import API_PREFIX, InputFolder, check_names, input_folders
from .reader import SUPPORTED_TYPES, discover, discover_remote
from .remote import RemoteFile, list_files, read_bytes, stat

LOCAL_FILES_KEY = "files"
_PART_IN_URL = re.compile(r"(updated_date=[^/]+/part_[^/]+)$")


#: One row per file: present ones with size and mtime, and manifest entries with no local file.
def partition_key(path: Path | PurePosixPath) -> str:
    """``updated_date=YYYY-MM-DD`` for a snapshot works part, ``window=...`` for a page archived by an
    API refresh, else ``files``."""
    parent = path.parent
    if parent.name.startswith("updated_date=") and parent.parent.name == "works":
        return parent.name
    for folder in path.parents:
        if folder.name.startswith("window="):
            return folder.name
    return LOCAL_FILES_KEY


@dataclass
class Inventory:
    """Rows of :data:`INVENTORY_SCHEMA`, unsupported files and manifest problems."""

    rows: list[dict] = field(default_factory=list)
    unsupported: list[tuple[str, Path | str]] = field(default_factory=list)  # (source_file, path or URL)
    manifest_errors: list[str] = field(default_factory=list)

    def present(self) -> list[dict]:
        return [r for r in self.rows if r["present"]]

    def partition_keys(self) -> list[str]:
        """Keys with at least one present file, in sorted order (``files`` first)."""
        return sorted({r["partition_key"] for r in self.present()}, key=lambda k: (k != LOCAL_FILES_KEY, k))

    def size_mismatches(self) -> list[dict]:
        """Present parts listed in a manifest whose size is not the manifest's ``content_length``
        (a truncated or replaced download, whatever its records say)."""
        return [
            r
            for r in self.rows
            if r["present"]
            and r["manifest_status"] == "listed"
            and r["manifest_bytes"] is not None
            and r["bytes"] != r["manifest_bytes"]
        ]

    def table_rows(self) -> list[dict]:
        """The rows of ``openalex_inventory``: every file row, then one ``unsupported`` row per file of a
        type the reader does not take (listed, never skipped silently)."""
        return self.rows + [
            {**_present_row(LOCAL_FILES_KEY, name, p), "manifest_status": "unsupported"} for name, p in self.unsupported
        ]

    def warnings(self) -> list[str]:
        """One log line per problem worth a person's attention: unreadable manifests, incomplete snapshot
        partitions (one line, up to 10 named), parts whose size is not the manifest's, unsupported files.
        Every file is read anyway."""
        out = list(self.manifest_errors)
        incomplete = self.incomplete_partitions()
        if incomplete:
            out.append(
                f"{len(incomplete)} snapshot partition(s) incomplete (read anyway): "
                + "; ".join(f"{k}: {why}" for k, why in list(incomplete.items())[:10])
            )
        out += [
            f"{r['source_file']}: {r['bytes']} bytes here, the snapshot manifest lists {r['manifest_bytes']} "
            f"(truncated or replaced download? re-download it); read anyway"
            for r in self.size_mismatches()
        ]
        out += [
            f"not read: {name} (unsupported file type; OpenAlex input must be {SUPPORTED_TYPES})"
            for name, _ in self.unsupported
        ]
        return out

    def incomplete_partitions(self) -> dict[str, str]:
        """Snapshot partitions that are not whole, with why (listed parts missing, or not in the manifest)."""
        out: dict[str, str] = {}
        for r in self.rows:
            if not r["partition_key"].startswith("updated_date="):
                continue
            if r["manifest_status"] == "missing_locally":
                out.setdefault(r["partition_key"], "the manifest lists parts that are not here")
            elif r["manifest_status"] in ("not_in_manifest", "no_manifest"):
                out[r["partition_key"]] = (
                    "no manifest covers it"
                    if r["manifest_status"] == "no_manifest"
                    else "parts not in the manifest (written after it, or a partial download)"
                )
        return out


def _read_manifest(
    path: Path | str, folder: InputFolder, errors: list[str]
) -> dict[str, tuple[int, int | None]] | None:
    """``{part source_file: (record_count, content_length or None)}`` of one manifest (a local path or a URL), or
    None (with an error) if unreadable."""
    works_dir = path.parent if isinstance(path, Path) else path.rsplit("/", 1)[0]
    try:
        raw = path.read_bytes() if isinstance(path, Path) else read_bytes(path)
        doc = json.loads(raw.decode("utf-8"))
        entries = doc["entries"]
        out = {}
        for e in entries:
            m = _PART_IN_URL.search(str(e["url"]))
            if not m:
                raise ValueError(f"entry url {e['url']!r} does not end in updated_date=.../part_...")
            count = e["meta"]["record_count"]
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"entry {e['url']!r} has record_count {count!r}")
            size = e["meta"].get("content_length")
            if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
                raise ValueError(f"entry {e['url']!r} has content_length {size!r}")
            part = works_dir / m.group(1) if isinstance(works_dir, Path) else f"{works_dir}/{m.group(1)}"
            out[folder.source_file(part)] = (count, size)
        return out
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        errors.append(
            f"{folder.source_file(path)}: unreadable snapshot manifest ({type(exc).__name__}: {exc}); its partitions are "
            f"treated as having no manifest. Re-download it from s3://openalex/data/works/manifest."
        )
        return None


def _present_row(key: str, source_file: str, path: Path | str | RemoteFile) -> dict:
    """An inventory row of a file that exists, before any manifest check (``not_snapshot``): size and mtime of a
    local file, size and version (ETag) of one in object storage (a listed :class:`RemoteFile`, or a URL)."""
    if isinstance(path, Path):
        st = path.stat()
        size, mtime_ns, etag = st.st_size, st.st_mtime_ns, None
    elif isinstance(path, RemoteFile):
        size, mtime_ns, etag = path.bytes, None, path.etag
    else:
        (size, etag), mtime_ns = stat(path) or (None, None), None
    return {
        "partition_key": key,
        "source_file": source_file,
        "present": True,
        "bytes": size,
        "mtime_ns": mtime_ns,
        "manifest_record_count": None,
        "manifest_bytes": None,
        "manifest_status": "not_snapshot",
        "manifest_file": None,
        "etag": etag,
    }


def _as_folders(roots: Path | str | Sequence[Path | str] | Sequence[InputFolder]) -> list[InputFolder]:
    if isinstance(roots, (str, Path)):
        return input_folders([roots])
    if roots and all(isinstance(r, InputFolder) for r in roots):
        return list(roots)
    return input_folders(list(roots))


def _listing(folder: InputFolder):
    """``(record files, unsupported files, manifests)`` of one folder: local Paths, or :class:`RemoteFile` s of a
    URL folder (from one listing of the store); ``manifests`` maps each works folder (a Path or a URL) to the
    manifest in it."""
    if folder.is_remote:
        listing = list_files(folder.root)
        files, unsupported = discover_remote(folder.root, {"works"}, listing)
        manifests = {
            f.url.rsplit("/", 1)[0]: f.url
            for f in listing
            if f.path.name == "manifest" and f.path.parent.name == "works"
        }
        return files, unsupported, manifests
    files, unsupported = discover(folder.root, snapshot_entities={"works"})
    manifests = {
        mf.parent: mf for mf in sorted(folder.root.rglob("manifest")) if mf.is_file() and mf.parent.name == "works"
    }
    return files, unsupported, manifests


def _take_folder(inv: Inventory, folder: InputFolder) -> None:
    """Add the rows of one input folder to ``inv``: its work-bearing files, checked against the snapshot
    manifests it holds, and the manifest parts it lacks."""
    files, unsupported, manifest_files = _listing(folder)
    if not files and folder.prefix:
        # a further folder with nothing to read is an unmounted disk or a wrong path: reading on would drop
        # its partitions and frame rows without a word
        raise ValueError(
            f"OpenAlex input folder {folder.root} holds no OpenAlex work files (not mounted? the wrong path?): "
            "fill it, or remove it from METACAN_OPENALEX_DIR (the input_dirs of the openalex resource)"
        )
    url_of = lambda p: p.url if isinstance(p, RemoteFile) else p  # noqa: E731
    inv.unsupported += [(folder.source_file(url_of(p)), url_of(p)) for p in unsupported]
    manifests: dict = {wd: _read_manifest(mf, folder, inv.manifest_errors) for wd, mf in manifest_files.items()}
    seen: set[str] = set()
    for p in files:
        rel = folder.source_file(url_of(p))
        where = p.path if isinstance(p, RemoteFile) else p
        key = partition_key(where)
        row = _present_row(key, rel, p)
        if key.startswith("updated_date="):  # a snapshot part: check it against its manifest
            works_dir = p.url.rsplit("/", 2)[0] if isinstance(p, RemoteFile) else p.parent.parent
            listing = manifests.get(works_dir)
            row["manifest_file"] = folder.source_file(manifest_files[works_dir]) if works_dir in manifests else None
            if listing is None:
                row["manifest_status"] = "no_manifest"
            elif rel in listing:
                row["manifest_status"] = "listed"
                row["manifest_record_count"], row["manifest_bytes"] = listing[rel]
            else:
                row["manifest_status"] = "not_in_manifest"
        seen.add(rel)
        inv.rows.append(row)
    for works_dir, listing in manifests.items():
        for rel, (count, size) in sorted((listing or {}).items()):
            if rel not in seen:
                inv.rows.append(
                    {
                        "partition_key": PurePosixPath(rel).parent.name,
                        "source_file": rel,
                        "present": False,
                        "bytes": None,
                        "mtime_ns": None,
                        "manifest_record_count": count,
                        "manifest_bytes": size,
                        "manifest_status": "missing_locally",
                        "manifest_file": folder.source_file(manifest_files[works_dir]),
                        "etag": None,
                    }
                )


def take_inventory(
    roots: Path | str | Sequence[Path | str] | Sequence[InputFolder], api_root: Path | None = None
) -> Inventory:
    """Every work-bearing file under the input folders ``roots`` (one folder, a list of folders in order,
    or :class:`InputFolder` s) and the API archive ``api_root`` (when it exists), with its partition key
    and manifest status; ``source_file`` names as :mod:`metacan_pipeline.openalex.folders` gives them.

    A folder may be a URL (``s3://openalex``; :mod:`.remote`): its files are listed once with their sizes and
    versions (ETag, column ``etag``, in place of ``mtime_ns``) and its manifests read from the store.

    Snapshot parts of other entities (``data/funders/...``) are left to the entity lists. Raises
    FileNotFoundError naming a folder that does not exist (from :func:`discover`) and ValueError when two
    files would get one name (:func:`metacan_pipeline.openalex.folders.check_names`) or a further folder
    holds no work file.
    """
    folders = _as_folders(roots)
    check_names(folders, api_root)
    inv = Inventory()
    for folder in folders:
        _take_folder(inv, folder)
    if api_root is not None and api_root.exists():
        api = InputFolder(api_root, API_PREFIX)
        api_files, api_unsupported = discover(api_root)
        inv.unsupported += [(api.source_file(p), p) for p in api_unsupported]
        for p in api_files:
            inv.rows.append(_present_row(partition_key(p), api.source_file(p), p))
    return inv
