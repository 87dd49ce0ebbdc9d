"""``CITATION.cff`` of a release (Citation File Format 1.2.0), written with PyYAML and checked field by field.

The CFF project's validator (cffconvert 2.0.0, the last release) pins ``jsonschema<4``, which cannot be installed
beside moto's server (``jsonschema>=4``, the S3 tests), so :func:`validate_citation` checks, after a YAML round trip,
the CFF 1.2.0 rules of every key this writer emits: the required ``cff-version``, ``message``, ``title`` and
``authors`` (entities with a non-empty ``name``), ``type`` (``dataset``), ``version``, ``date-released``
(``YYYY-MM-DD``), ``abstract`` and ``keywords`` (strings), and no other key. A text that fails raises
:class:`CitationError` before any release is written.
"""

from __future__ import annotations

import datetime as dt
import re

import yaml

CFF_VERSION = "1.2.0"


class CitationError(ValueError):
    """A ``CITATION.cff`` that does not validate against CFF 1.2.0 (the message names the field)."""


def citation_text(version: str, released: dt.date, frame_build_id: str, classifier: str, authors: list[str]) -> str:
    """The ``CITATION.cff`` of release ``version``: a dataset whose authors are ``authors`` (entity names: a group,
    a project), released on ``released``. Raises :class:`CitationError` when it does not validate."""
    if not authors or not all(a.strip() for a in authors):
        raise CitationError("CITATION.cff needs at least one author: set the release config citation_authors")
    body = {
        "cff-version": CFF_VERSION,
        "message": "If you use this release of the metacan map of Canadian meta-research, please cite it as below.",
        "type": "dataset",
        "title": f"metacan: Canadian meta-research mapped from OpenAlex, release {version}",
        "version": version,
        "date-released": released.isoformat(),
        "authors": [{"name": a.strip()} for a in authors],
        "abstract": (
            f"A frozen release of the metacan pipeline: the Canadian research frame built from OpenAlex works "
            f"(frame build {frame_build_id}), the teachers' direct labels, the student classifier's predictions "
            f"(classifier version {classifier}), the machine scores and the human-validation results as of the "
            f"release. Machine outputs are unvalidated unless a human_validation row says a head passed."
        ),
        "keywords": ["meta-research", "Canada", "OpenAlex", "research on research"],
    }
    text = yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100)
    validate_citation(text)
    return text


def validate_citation(text: str) -> None:
    """Raise :class:`CitationError` naming the field unless ``text`` holds the CFF 1.2.0 keys this writer emits,
    each of the type CFF 1.2.0 gives it (module docstring)."""

    def fail(why: str) -> None:
        raise CitationError(f"CITATION.cff is not valid CFF {CFF_VERSION}: {why}")

    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        fail(f"not YAML ({str(exc).splitlines()[0]})")
    if not isinstance(body, dict):
        fail("the document is not a mapping")
    if unknown := sorted(set(body) - set(_KEYS)):
        fail(f"unknown key(s) {unknown}")
    if missing := [k for k in ("cff-version", "message", "title", "authors") if k not in body]:
        fail(f"required key(s) {missing} missing")
    if body["cff-version"] != CFF_VERSION:
        fail(f"cff-version is {body['cff-version']!r}")
    for key, kind in _KEYS.items():
        if key in body and not (isinstance(body[key], kind) and body[key]):
            fail(f"{key} must be a non-empty {kind.__name__}")
    if "type" in body and body["type"] not in ("dataset", "software"):
        fail(f"type {body['type']!r} is neither dataset nor software")
    if "date-released" in body and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(body["date-released"])):
        fail("date-released is not YYYY-MM-DD")
    for i, author in enumerate(body["authors"]):
        if not (isinstance(author, dict) and isinstance(author.get("name"), str) and author["name"].strip()):
            fail(f"authors[{i}] is not an entity with a name")
    if not all(isinstance(k, str) and k for k in body.get("keywords", [])):
        fail("keywords must be non-empty strings")


#: The keys this writer emits and their CFF 1.2.0 types (``date-released`` is written as a quoted string).
_KEYS: dict[str, type] = {
    "cff-version": str,
    "message": str,
    "type": str,
    "title": str,
    "version": str,
    "date-released": str,
    "authors": list,
    "abstract": str,
    "keywords": list,
}
