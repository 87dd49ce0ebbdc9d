"""``CITATION.cff`` of a release (Citation File Format 1.2.0), written with PyYAML and validated by cffconvert.

cffconvert (the CFF project's own validator, pinned in pyproject.toml) checks the text against the CFF 1.2.0 JSON
Schema it ships; a text that fails raises :class:`CitationError` before any release is written.
"""

from __future__ import annotations

import datetime as dt

import yaml
from cffconvert import Citation

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
    """Raise :class:`CitationError` unless ``text`` is valid CFF 1.2.0 (cffconvert's schema check)."""
    try:
        Citation(text).validate()
    except Exception as exc:  # cffconvert raises jsonschema's ValidationError, or its own for an unknown version
        raise CitationError(f"CITATION.cff is not valid CFF {CFF_VERSION}: {str(exc).splitlines()[0]}") from None
