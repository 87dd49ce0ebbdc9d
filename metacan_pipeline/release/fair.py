"""The FAIR metadata of a release bundle: ``codemeta.json`` (CodeMeta 3.0: the software that cut it) and
``ro-crate-metadata.json`` (RO-Crate 1.1: the bundle as a research object), written as JSON-LD by hand (the
``rocrate`` library is not a dependency) and checked by :func:`crate_problems` before a release is written.

RO-Crate 1.1 ("Root Data Entity", "Data Entities", "Contextual Entities"), the rules this writer follows and
:func:`crate_problems` checks:

- the file is ``ro-crate-metadata.json`` at the bundle's root, a JSON-LD object with ``@context``
  ``https://w3id.org/ro/crate/1.1/context`` and a flat ``@graph`` (entities reference each other by ``{"@id": ...}``
  only, every ``@id`` once);
- the *metadata descriptor* ``{"@id": "ro-crate-metadata.json", "@type": "CreativeWork"}`` has ``about``
  ``{"@id": "./"}`` and ``conformsTo`` ``{"@id": "https://w3id.org/ro/crate/1.1"}``;
- the *root data entity* ``./`` is a ``Dataset`` with ``name``, ``description``, ``datePublished`` (ISO 8601) and
  ``license``, and lists every file of the bundle in ``hasPart`` (the descriptor itself excepted);
- each *data entity* is a ``File`` whose ``@id`` is its path relative to the bundle (URI-escaped), with
  ``contentSize`` and ``encodingFormat``; ``release.json`` and ``SHA256SUMS``, written after the crate (they hold its
  SHA-256), are listed without a size;
- every entity referenced (license, authors, the software) is described in the graph as a *contextual entity*.
"""

from __future__ import annotations

import datetime as dt
import json
from importlib import metadata
from pathlib import Path
from urllib.parse import quote

CRATE_FILE = "ro-crate-metadata.json"
CODEMETA_FILE = "codemeta.json"
RO_CRATE = "https://w3id.org/ro/crate/1.1"
RO_CRATE_CONTEXT = RO_CRATE + "/context"
CODEMETA_CONTEXT = "https://w3id.org/codemeta/3.0"
#: The release's licence when the config names none: the OpenAlex records it is built from are CC0.
DEFAULT_LICENSE = "https://creativecommons.org/publicdomain/zero/1.0/"
SOFTWARE_ID = "#metacan_pipeline"
#: The media type of each file kind a bundle holds.
MEDIA_TYPES = {
    ".parquet": "application/vnd.apache.parquet",
    ".jsonl": "application/jsonl",
    ".json": "application/json",
    ".md": "text/markdown",
    ".cff": "application/x-yaml",
    ".png": "image/png",
    ".txt": "text/plain",
}


def software() -> dict:
    """Name, version, description, licence and the pinned requirements of the installed ``metacan_pipeline``."""
    meta = metadata.metadata("metacan_pipeline")
    return {
        "name": meta["Name"],
        "version": meta["Version"],
        "description": meta.get("Summary") or "",
        "requires_python": meta.get("Requires-Python") or "",
        "requirements": sorted(r.split(";")[0].strip() for r in metadata.requires("metacan_pipeline") or []),
    }


def codemeta_document(released: dt.date) -> dict:
    """``codemeta.json``: the software that cut the release (CodeMeta 3.0 ``SoftwareSourceCode``)."""
    sw = software()
    return {
        "@context": CODEMETA_CONTEXT,
        "@type": "SoftwareSourceCode",
        "name": sw["name"],
        "version": sw["version"],
        "description": sw["description"],
        "programmingLanguage": {"@type": "ComputerLanguage", "name": "Python", "version": sw["requires_python"]},
        "runtimePlatform": f"Python {sw['requires_python']}",
        "softwareRequirements": sw["requirements"],
        "applicationCategory": "Meta-research; bibliometrics",
        "keywords": ["meta-research", "Canada", "OpenAlex", "Dagster", "DuckDB"],
        "dateModified": released.isoformat(),
    }


def _file_entity(path: str, size: int | None, description: str) -> dict:
    entity = {"@id": quote(path), "@type": "File", "name": path, "description": description}
    suffix = Path(path).suffix
    entity["encodingFormat"] = MEDIA_TYPES.get(suffix, "text/plain" if path == "SHA256SUMS" else "application/json")
    if size is not None:
        entity["contentSize"] = str(size)
    return entity


def crate_document(
    version: str,
    released: dt.date,
    authors: list[str],
    license_url: str,
    files: list[dict],
    later: dict[str, str],
    describe,
) -> dict:
    """``ro-crate-metadata.json`` of release ``version``: ``files`` are the bundle's files as written (``{"path",
    "bytes"}``), ``later`` the files written after the crate with their descriptions, ``describe(path)`` a file's
    description. Raises ValueError naming the rule when the document breaks one (:func:`crate_problems`)."""
    parts = [_file_entity(f["path"], f["bytes"], describe(f["path"])) for f in files if f["path"] != CRATE_FILE]
    parts += [_file_entity(path, None, text) for path, text in later.items()]
    author_ids = [f"#author-{i}" for i in range(len(authors))]
    root = {
        "@id": "./",
        "@type": "Dataset",
        "name": f"metacan: Canadian meta-research mapped from OpenAlex, release {version}",
        "description": (
            "A frozen release of the metacan pipeline: the Canadian research frame built from OpenAlex, the teachers' "
            "direct labels, the student classifier's predictions, the machine scores, the audit study and the "
            "human-validation results, with the published work records. Machine outputs are unvalidated unless a "
            "human_validation row says a head passed."
        ),
        "version": version,
        "datePublished": released.isoformat(),
        "license": {"@id": license_url},
        "author": [{"@id": a} for a in author_ids],
        "keywords": "meta-research, Canada, OpenAlex, research on research",
        "isBasedOn": {"@id": "https://openalex.org/"},
        "publisher": {"@id": SOFTWARE_ID},
        "hasPart": [{"@id": p["@id"]} for p in parts],
    }
    sw = software()
    graph = [
        {"@id": CRATE_FILE, "@type": "CreativeWork", "conformsTo": {"@id": RO_CRATE}, "about": {"@id": "./"}},
        root,
        *parts,
        {"@id": license_url, "@type": "CreativeWork", "name": _license_name(license_url)},
        *({"@id": i, "@type": "Organization", "name": a.strip()} for i, a in zip(author_ids, authors, strict=True)),
        {"@id": "https://openalex.org/", "@type": "Organization", "name": "OpenAlex", "url": "https://openalex.org/"},
        {
            "@id": SOFTWARE_ID,
            "@type": "SoftwareApplication",
            "name": sw["name"],
            "version": sw["version"],
            "description": "The software that cut this release; codemeta.json describes it.",
            "subjectOf": {"@id": CODEMETA_FILE},
        },
    ]
    doc = {"@context": RO_CRATE_CONTEXT, "@graph": graph}
    if problems := crate_problems(doc, [f["path"] for f in files] + list(later)):
        raise ValueError(f"{CRATE_FILE} breaks RO-Crate 1.1: {'; '.join(problems)}")
    return doc


def _license_name(url: str) -> str:
    known = {
        DEFAULT_LICENSE: "CC0 1.0 Universal",
        "https://creativecommons.org/licenses/by/4.0/": "Creative Commons Attribution 4.0 International",
    }
    return known.get(url, url)


def crate_problems(doc: dict, paths: list[str]) -> list[str]:
    """Every RO-Crate 1.1 rule of the module docstring that ``doc`` breaks, for a bundle of the files ``paths``
    (empty: none)."""
    out: list[str] = []
    if doc.get("@context") != RO_CRATE_CONTEXT:
        out.append(f"@context is not {RO_CRATE_CONTEXT}")
    graph = doc.get("@graph")
    if not isinstance(graph, list) or not all(isinstance(e, dict) and isinstance(e.get("@id"), str) for e in graph):
        return [*out, "@graph is not a list of entities with an @id"]
    ids = [e["@id"] for e in graph]
    if len(ids) != len(set(ids)):
        out.append("an @id is described twice")
    by_id = {e["@id"]: e for e in graph}
    desc = by_id.get(CRATE_FILE, {})
    if desc.get("@type") != "CreativeWork" or desc.get("about") != {"@id": "./"}:
        out.append("the metadata descriptor is not a CreativeWork about ./")
    if desc.get("conformsTo") != {"@id": RO_CRATE}:
        out.append(f"the metadata descriptor does not conform to {RO_CRATE}")
    root = by_id.get("./", {})
    if root.get("@type") != "Dataset":
        out.append("the root data entity ./ is not a Dataset")
    out += [
        f"the root data entity has no {k}"
        for k in ("name", "description", "datePublished", "license")
        if not root.get(k)
    ]
    license_id = (root.get("license") or {}).get("@id", "") if isinstance(root.get("license"), dict) else ""
    if not license_id.startswith(("https://", "http://")):
        out.append(f"the root data entity's license {license_id!r} is not a URL")
    try:
        dt.date.fromisoformat(str(root.get("datePublished", ""))[:10])
    except ValueError:
        out.append("datePublished is not an ISO 8601 date")
    listed = {p.get("@id") for p in root.get("hasPart", [])}
    want = {quote(p) for p in paths if p != CRATE_FILE}
    if listed != want:
        out.append(f"hasPart lists {sorted(listed ^ want)[:5]} otherwise than the bundle holds")
    for part in listed:
        entity = by_id.get(part)
        if entity is None or entity.get("@type") != "File" or not entity.get("encodingFormat"):
            out.append(f"{part} is not described as a File with its encodingFormat")
    return out + _reference_problems(graph, by_id)


def _reference_problems(graph: list[dict], by_id: dict[str, dict]) -> list[str]:
    """An entity nested in another instead of referenced by ``@id``, or a reference to an entity not described."""
    out = []
    for entity in graph:
        for value in entity.values():
            for ref in value if isinstance(value, list) else [value]:
                if isinstance(ref, dict) and set(ref) != {"@id"}:
                    out.append(f"{entity['@id']} nests an entity instead of referencing it by @id")
                elif isinstance(ref, dict) and ref["@id"] not in by_id and ref["@id"] != RO_CRATE:
                    out.append(f"{entity['@id']} references {ref['@id']}, which the graph does not describe")
    return out


def write_json(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
