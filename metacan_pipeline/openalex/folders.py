"""The OpenAlex input folders and the ``source_file`` names of their files.

The frame reads one folder or several (``METACAN_OPENALEX_DIR`` as an ``os.pathsep``-separated list, or
the ``input_dirs`` list of the ``openalex`` resource), plus the API archive. A ``source_file`` names one
input file across all of them, so a part, a quarantine row, a frame row and its pointer back to the record
say which file they came from:

- the first folder's files: the path relative to it (as with a single folder, so adding a folder keeps
  every part already built, its build key and the frame rows that point into it);
- each further folder's files: ``<folder name>/<path relative to it>``, e.g. ``openalex_more/x.json``;
- the API archive's files: ``api/<path relative to it>``.

Names stay unambiguous by construction: two folders may not share a name, none may be named ``api``
(while an API archive is read), none may lie inside another (its files would be read twice), and the
first folder may not hold a top-level entry named like another folder (``<name>/...`` would name two
files). Each is a ``ValueError`` naming the folders involved.

A folder may be a URL (``s3://openalex``, ``s3://bucket/prefix``, any fsspec URL; :mod:`.remote`): its files are
named exactly as a local copy of it would name them (so a frame built from the bucket and one built from a
downloaded copy share their ``source_file`` names, parts and build id), and its name is the URL's last component.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .remote import filesystem, is_url, normalize

#: ``source_file`` prefix of the files in the API archive.
API_PREFIX = "api/"


@dataclass(frozen=True)
class InputFolder:
    """One input folder (a local path, or a URL string: :mod:`.remote`) and the prefix of its files'
    ``source_file`` (``""`` for the first folder)."""

    root: Path | str
    prefix: str

    @property
    def is_remote(self) -> bool:
        return isinstance(self.root, str)

    @property
    def name(self) -> str:
        """The folder's name: its last path component (a URL's, e.g. ``openalex`` of ``s3://openalex``)."""
        return PurePosixPath(self.root).name if self.is_remote else self.root.name

    def source_file(self, path: Path | str) -> str:
        """The ``source_file`` of ``path``, a file under this folder (a URL under a URL folder)."""
        if self.is_remote:
            return self.prefix + str(path)[len(self.root) + 1 :]
        return self.prefix + str(path.relative_to(self.root))

    def join(self, rel: str) -> Path | str:
        """The file at ``rel`` (a ``/``-separated path) under this folder."""
        return f"{self.root}/{rel}" if self.is_remote else self.root / rel


def _inside(inner: Path | str, outer: Path | str) -> bool:
    if isinstance(inner, str) or isinstance(outer, str):
        return isinstance(inner, str) and isinstance(outer, str) and inner.startswith(outer + "/")
    return outer in inner.parents


def _root(d: str | Path) -> Path | str:
    return normalize(d) if is_url(str(d)) else Path(d).expanduser().resolve()


def input_folders(dirs: Sequence[str | Path]) -> list[InputFolder]:
    """The folders ``dirs`` (in order; blank entries dropped) with their ``source_file`` prefixes.

    Raises ValueError naming the folders when none is given, one is listed twice, one lies inside
    another, two share a name, or a further folder is named ``api`` (the API archive's prefix)."""
    roots = [_root(d) for d in dirs if str(d).strip()]
    if not roots:
        raise ValueError(
            "no OpenAlex input folder given: set METACAN_OPENALEX_DIR (one folder, or several separated by "
            f"{os.pathsep!r}) or the input_dirs of the openalex resource"
        )
    for root in roots:
        if isinstance(root, Path) and root.exists() and not root.is_dir():
            raise NotADirectoryError(
                f"OpenAlex input {root} is a file, not a folder: list the folder that holds it (METACAN_OPENALEX_DIR)"
            )
    for i, a in enumerate(roots):
        for b in roots[i + 1 :]:
            if a == b:
                raise ValueError(f"OpenAlex input folder {a} is listed twice: list each folder once")
            if _inside(b, a) or _inside(a, b):
                inner, outer = (b, a) if _inside(b, a) else (a, b)
                raise ValueError(
                    f"OpenAlex input folder {inner} lies inside {outer}, so its files would be read twice: "
                    f"list only one of them"
                )
    folders = [InputFolder(roots[0], "")] + [InputFolder(r, f"{PurePosixPath(r).name}/") for r in roots[1:]]
    named: dict[str, Path] = {}
    for f in folders[1:]:
        if f.prefix == API_PREFIX:
            raise ValueError(
                f"OpenAlex input folder {f.root} is named 'api', the prefix of the API archive's files: "
                f"rename it (a copy or a bind mount with another name; a symlink resolves to the same name) or list it first"
            )
        if f.prefix in named:
            raise ValueError(
                f"OpenAlex input folders {named[f.prefix]} and {f.root} share the name {f.name!r}, so their "
                f"files' names would collide: give one another name (a copy or a bind mount; a symlink resolves to the same name) or list it first"
            )
        named[f.prefix] = f.root
    return folders


def _exists(path: Path | str) -> bool:
    if isinstance(path, Path):
        return path.exists()
    fs, inner = filesystem(path)
    return fs.exists(inner)


def check_names(folders: Sequence[InputFolder], api_root: Path | None) -> None:
    """Raise ValueError when the first folder holds a top-level entry named like a further folder (or
    ``api`` while the API archive ``api_root`` is read): ``<name>/...`` would then name two files."""
    first = folders[0].root
    reserved = {f.prefix: f.root for f in folders[1:]}
    if api_root is not None:
        reserved[API_PREFIX] = api_root
    for prefix, other in reserved.items():
        if _exists(folders[0].join(prefix.rstrip("/"))):
            raise ValueError(
                f"the first OpenAlex input folder {first} holds {prefix.rstrip('/')!r}, the name under which the "
                f"files of {other} are recorded, so source_file {prefix}... would name two files: rename one of them "
                f"or list {other} first"
            )


def locate(folders: Sequence[InputFolder], api_root: Path | None, source_file: str) -> Path | str:
    """The file a ``source_file`` names (see the module doc): a Path, or a URL under a URL folder."""
    if api_root is not None and source_file.startswith(API_PREFIX):
        return api_root / source_file[len(API_PREFIX) :]
    for f in folders[1:]:
        if source_file.startswith(f.prefix):
            return f.join(source_file[len(f.prefix) :])
    return folders[0].join(source_file)
