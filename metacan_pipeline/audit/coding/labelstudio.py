"""Label Studio for groups that code there: a protocol's coding tasks exported with a labeling config
(:mod:`.labelstudio_import` reads the finished codes back).

Formats followed (HumanSignal/label-studio documentation, ``docs/source/``):

- Tasks (``guide/tasks.md``, "Basic Label Studio JSON format"): a JSON list of ``{"data": {...}}``; the labeling
  config's object tags read ``data`` keys (``<Text value="$key">`` shows plain text). :func:`export_tasks` puts the
  task's evidence (only what :func:`metacan_pipeline.audit.coding.evidence.task_evidence` keeps) and ``work_id``,
  ``protocol_id`` and ``evidence_sha256`` in ``data``, plus one-line display strings of it (``line_*``). No prediction,
  score or label is exported (Label Studio's ``predictions`` key is never written), so coders stay masked.
- Labeling config (``tags/choices.md``, ``tags/choice.md``, ``tags/textarea.md``, ``tags/header.md``):
  :func:`labeling_config` writes one ``<Choices>`` per SPEC section 3 field with the exact vocabulary values of
  :mod:`metacan_pipeline.vocab` (``choice="multiple"`` for ``categories``; ``domain`` shown only when ``metaresearch``
  is chosen: ``visibleWhen="choice-selected"``, ``whenTagName``, ``whenChoiceValue``), ``true``/``false`` for the
  booleans, a ``<Choices name="unresolved">`` with the one choice ``true``, and a ``<TextArea name="note">``
  (``maxSubmissions="1"``). ``categories`` has one more choice, ``none`` (not meta-research), because Label Studio
  writes no result for a field left empty and an empty answer must not be read as a negative.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from ... import vocab
from .errors import CodingError
from .store import CodingStore

#: The extra ``categories`` choice that says "none of them: not meta-research" (mapped to ``[]`` on import).
NO_CATEGORY = "none"
#: The object tag every control labels (a ``<Text>`` showing the title).
OBJECT_TAG = "title"
#: The values of a boolean control.
BOOLEANS = ("true", "false")
BOOLEAN_CONTROLS = frozenset({"about_ca_system", "about_ca_topic", "unresolved"})
SINGLE_CHOICE: dict[str, tuple[str, ...]] = {
    "domain": vocab.DOMAINS,
    "study_design": vocab.STUDY_DESIGNS,
    "genre": vocab.GENRES,
    "about_ca_system": BOOLEANS,
    "about_ca_topic": BOOLEANS,
    "confidence": vocab.CONFIDENCES,
    "unresolved": ("true",),
}
#: Control name -> result type, for every control of :func:`labeling_config`.
CONTROLS: dict[str, str] = {"categories": "choices", **dict.fromkeys(SINGLE_CHOICE, "choices"), "note": "textarea"}
_HEADERS = {
    "categories": "Categories (several allowed; 'none' means not meta-research)",
    "domain": "Domain (with metaresearch)",
    "study_design": "Study design",
    "genre": "Genre",
    "about_ca_system": "Studies the Canadian research system itself",
    "about_ca_topic": "Canada is a substantive subject",
    "confidence": "Your confidence (optional)",
    "unresolved": "Unresolved: I cannot decide (fields may stay empty; say why in the note)",
}
#: The display lines of a task, in order: data key -> (label, evidence keys).
_LINES: dict[str, tuple[str, tuple[str, ...]]] = {
    "line_record": ("", ("year", "language", "type", "venue")),
    "line_institutions": ("Canadian institutions", ("ca_institutions",)),
    "line_funders": ("Funders", ("funders",)),
    "line_keywords": ("Keywords", ("keywords",)),
    "line_links": ("Full text", ("full_text_url",)),
    "line_openalex": ("OpenAlex record (abstract)", ("id",)),
}


def _line(label: str, evidence: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    parts: list[str] = []
    for k in keys:
        v = evidence.get(k)
        if k == "id" and v:
            v = f"https://openalex.org/{v}"
        if isinstance(v, list):
            parts.extend(v)
        elif v not in (None, ""):
            parts.append(str(v))
    text = ("; " if len(keys) == 1 else " · ").join(parts) or "(none in the record)"
    return f"{label}: {text}" if label else text


def export_tasks(store: CodingStore, protocol_id: str) -> list[dict[str, Any]]:
    """The tasks of a protocol as Label Studio import JSON, in queue order (evidence only; see the module docstring)."""
    out = []
    for t in store.tasks(protocol_id):
        ev = t["evidence"]
        data = {**ev, "work_id": t["id"], "protocol_id": protocol_id, "evidence_sha256": t["evidence_sha256"]}
        data["title"] = ev["title"] or "(no title)"
        data.update({key: _line(label, ev, keys) for key, (label, keys) in _LINES.items()})
        out.append({"data": data})
    return out


def labeling_config() -> str:
    """The Label Studio labeling config (XML) of a coding project, generated from :mod:`metacan_pipeline.vocab`."""
    lines = ["<View>", f'  <Text name="{OBJECT_TAG}" value="$title"/>']
    lines += [f'  <Text name="{key}" value="${key}"/>' for key in _LINES]
    lines.append(f"  <Header value={quoteattr(_HEADERS['categories'])}/>")
    lines.append(f'  <Choices name="categories" toName="{OBJECT_TAG}" choice="multiple">')
    lines += [
        f"    <Choice value={quoteattr(c)} hint={quoteattr(vocab.CATEGORY_DISPLAY[c])}/>" for c in vocab.CATEGORIES
    ]
    lines.append(f'    <Choice value="{NO_CATEGORY}" hint="None of these: not meta-research"/>')
    lines.append("  </Choices>")
    for name, values in SINGLE_CHOICE.items():
        visible = (
            ' visibleWhen="choice-selected" whenTagName="categories" whenChoiceValue="metaresearch"'
            if name == "domain"
            else ""
        )
        lines.append(f"  <Header value={quoteattr(_HEADERS[name])}/>")
        lines.append(f'  <Choices name="{name}" toName="{OBJECT_TAG}" choice="single"{visible}>')
        lines += [f"    <Choice value={quoteattr(v)}/>" for v in values]
        lines.append("  </Choices>")
    lines.append('  <Header value="Note (at most 1,000 characters)"/>')
    lines.append(f'  <TextArea name="note" toName="{OBJECT_TAG}" maxSubmissions="1" rows="3"/>')
    lines.append("</View>")
    return "\n".join(lines) + "\n"


def _file_stem(protocol_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", protocol_id)


def write_export(store: CodingStore, protocol_id: str, out_dir: Path) -> tuple[Path, Path, int]:
    """Write ``<protocol>-tasks.json`` and ``<protocol>-labeling-config.xml`` into ``out_dir``; returns both paths
    and the number of tasks. A protocol without tasks is refused (CodingError)."""
    tasks = export_tasks(store, protocol_id)
    if not tasks:
        raise CodingError("protocol_id", f"protocol {protocol_id!r} has no coding tasks in {store.path}")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = _file_stem(protocol_id)
    tasks_path, config_path = out_dir / f"{stem}-tasks.json", out_dir / f"{stem}-labeling-config.xml"
    tasks_path.write_text(json.dumps(tasks, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    config_path.write_text(labeling_config(), encoding="utf-8")
    return tasks_path, config_path, len(tasks)
