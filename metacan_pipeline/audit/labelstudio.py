"""Label Studio for groups that code there (issue 16): export a protocol's coding tasks with a labeling config, and
import the finished codes from a Label Studio JSON export, validated like answers given on the site.

Formats followed (HumanSignal/label-studio documentation, ``docs/source/``):

- Tasks (``guide/tasks.md``, "Basic Label Studio JSON format"): a JSON list of ``{"data": {...}}``; the labeling
  config's object tags read ``data`` keys (``<Text value="$key">`` shows plain text). :func:`export_tasks` puts the
  task's evidence (only what :func:`metacan_pipeline.audit.coding.task_evidence` keeps) and ``work_id``,
  ``protocol_id`` and ``evidence_sha256`` in ``data``, plus one-line display strings of it (``line_*``). No prediction,
  score or label is exported (Label Studio's ``predictions`` key is never written), so coders stay masked.
- Labeling config (``tags/choices.md``, ``tags/choice.md``, ``tags/textarea.md``, ``tags/header.md``):
  :func:`labeling_config` writes one ``<Choices>`` per SPEC section 3 field with the exact vocabulary values of
  :mod:`metacan_pipeline.vocab` (``choice="multiple"`` for ``categories``; ``domain`` shown only when ``metaresearch``
  is chosen: ``visibleWhen="choice-selected"``, ``whenTagName``, ``whenChoiceValue``), ``true``/``false`` for the
  booleans, a ``<Choices name="unresolved">`` with the one choice ``true``, and a ``<TextArea name="note">``
  (``maxSubmissions="1"``). ``categories`` has one more choice, ``none`` (not meta-research), because Label Studio
  writes no result for a field left empty and an empty answer must not be read as a negative.
- Export (``guide/export.md``, "JSON": "List of items in raw JSON format stored in one JSON file", cancelled
  annotations included; ``includes/task_format.md`` and ``includes/result_format.md``): a list of tasks, each with
  ``id``, ``data`` and ``annotations``; an annotation has ``id``, ``completed_by`` ("User ID of the user that created
  the annotation"; an object with ``id`` and ``email`` in some exports), ``created_at``, ``updated_at``,
  ``was_cancelled`` and ``result``, a list of ``{"id", "from_name", "to_name", "type", "value"}`` where a Choices
  result is ``type: "choices"``, ``value: {"choices": [...]}`` and a TextArea result ``type: "textarea"``,
  ``value: {"text": [...]}``. ``predictions`` and ``drafts`` are not read.

:func:`import_export` maps each annotator to a coder (the coder map, keyed by email or Label Studio user id, else
``labelstudio:<email or id>``), turns the result into an answer, validates it with
:func:`metacan_pipeline.audit.coding.validate_answer` (the SPEC section 3-4 rules of the teacher replies) and appends it
with source ``label_studio:<16 hex of the file's SHA-256>`` and its provenance (file, task id, annotation id,
``completed_by``, times). A cancelled (skipped) or invalid annotation is refused with its reason: nothing is dropped
silently, and the import (counts and every refusal) is recorded in ``coding_imports``. An annotation is appended once:
its answer id is derived from (protocol, work, coder, annotation id, ``updated_at``), so importing the same file again,
or a later export that repeats an unchanged annotation, appends nothing, while an annotation edited in Label Studio
(a new ``updated_at``) is a new answer that then counts as the latest. The latest answer counts by time, so an
annotation dated more than :data:`metacan_pipeline.audit.coding.MAX_CLOCK_SKEW` (5 minutes) in the future is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from .. import vocab
from ..teachers.core.views import canonical_json
from .coding import (
    IMPORTED_CODER_PREFIX,
    CodingError,
    CodingStore,
    check_coder_name,
    now_iso,
    parse_time,
    sha256_hex,
    shown,
)

#: The extra ``categories`` choice that says "none of them: not meta-research" (mapped to ``[]`` on import).
NO_CATEGORY = "none"
#: The longest task or annotation id read (Label Studio's are integers; a longer one is refused, never stored).
MAX_ID_CHARS = 64
#: The longest annotator email read (RFC 5321's path limit) and the longest time string (ISO 8601 with an offset).
MAX_EMAIL_CHARS = 254
MAX_TIME_CHARS = 64
#: The longest refusal reason recorded in ``coding_imports`` (values quoted in it are cut already).
MAX_REASON_CHARS = 500
#: The object tag every control labels (a ``<Text>`` showing the title).
OBJECT_TAG = "title"
_BOOLEANS = ("true", "false")
_BOOLEAN_CONTROLS = frozenset({"about_ca_system", "about_ca_topic", "unresolved"})
_SINGLE_CHOICE: dict[str, tuple[str, ...]] = {
    "domain": vocab.DOMAINS,
    "study_design": vocab.STUDY_DESIGNS,
    "genre": vocab.GENRES,
    "about_ca_system": _BOOLEANS,
    "about_ca_topic": _BOOLEANS,
    "confidence": vocab.CONFIDENCES,
    "unresolved": ("true",),
}
#: Control name -> result type, for every control of :func:`labeling_config`.
CONTROLS: dict[str, str] = {"categories": "choices", **dict.fromkeys(_SINGLE_CHOICE, "choices"), "note": "textarea"}
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


class LabelStudioError(ValueError):
    """An annotation whose result cannot be read as an answer; the message says which control and why."""


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
    for name, values in _SINGLE_CHOICE.items():
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


# --- import -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """One annotation (or task) that was not appended, and why."""

    task_id: Any
    work_id: str | None
    annotation_id: Any
    annotator: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "work_id": self.work_id,
            "annotation_id": self.annotation_id,
            "annotator": self.annotator,
            "reason": self.reason,
        }


@dataclass
class ImportReport:
    """What an import did: ``appended`` answers, ``already_present`` ones (imported before), and every refusal."""

    file: str
    file_sha256: str
    source: str
    tasks: int = 0
    annotations: int = 0
    appended: int = 0
    already_present: int = 0
    refusals: list[Refusal] = field(default_factory=list)

    @property
    def refused(self) -> int:
        return len(self.refusals)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: an object whose keys repeat, in any letter case, is refused (json keeps the last)."""
    seen: dict[str, str] = {}
    for k, _ in pairs:
        norm = k.strip().lower()
        if norm in seen:
            raise _NotJson(f"the keys {shown(seen[norm])} and {shown(k)} name one annotator (letter case is ignored)")
        seen[norm] = k
    return dict(pairs)


def normalised_coder_map(mapping: Mapping[str, str], where: str) -> dict[str, str]:
    """``mapping`` with its keys stripped and in lower case (annotators match case-insensitively); ValueError naming
    ``where`` when two keys become one."""
    out: dict[str, str] = {}
    for k, v in mapping.items():
        norm = k.strip().lower()
        if norm in out:
            raise ValueError(f"{where}: two keys name the annotator {shown(norm)} (letter case is ignored): keep one")
        out[norm] = v
    return out


def load_coder_map(path: Path) -> dict[str, str]:
    """A coder map file: a JSON object from a Label Studio annotator (email, or user id as a string) to a coder name.
    Keys match case-insensitively, so keys equal but for letter case (or repeated) are refused."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_unique_keys)
    except _NotJson as exc:
        raise ValueError(f"coder map {path}: {exc}: keep one") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"coder map {path}: {exc}") from None
    except RecursionError:
        raise ValueError(
            f'coder map {path}: JSON nested too deeply; expected {{"<email or user id>": "<coder name>"}}'
        ) from None
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items()):
        raise ValueError(f'coder map {path}: expected a JSON object {{"<email or user id>": "<coder name>"}}')
    for k, v in obj.items():
        try:
            check_coder_name(v)
        except CodingError as exc:
            raise ValueError(f"coder map {path}: the entry {shown(k)}: {exc}") from None
    return normalised_coder_map(obj, f"coder map {path}")


def _is_id(value: object) -> bool:
    """A Label Studio id as read: an integer, or a string of at most :data:`MAX_ID_CHARS` characters."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and len(value) <= MAX_ID_CHARS
    )


def annotator_key(completed_by: object) -> tuple[str | None, dict[str, Any] | None]:
    """The annotator of ``completed_by`` (a user id, or an object with ``email`` and/or ``id``): the email (lower case)
    when known, else the id, and what is kept of it for the provenance (``id`` and ``email`` only; an id that is not an
    integer or a short string, or an email longer than :data:`MAX_EMAIL_CHARS`, is not read)."""
    if isinstance(completed_by, bool):
        return None, None
    if _is_id(completed_by) and str(completed_by).strip():
        return str(completed_by).strip(), {"id": completed_by}
    if isinstance(completed_by, Mapping):
        kept = {k: completed_by[k] for k in ("id", "email") if completed_by.get(k) not in (None, "")}
        if "id" in kept and not _is_id(kept["id"]):
            del kept["id"]
        if not isinstance(kept.get("email"), str) or len(kept["email"]) > MAX_EMAIL_CHARS:
            kept.pop("email", None)
        email = kept.get("email")
        if isinstance(email, str) and email.strip():
            return email.strip().lower(), kept
        if "id" in kept and not isinstance(kept["id"], bool):
            return str(kept["id"]).strip(), kept
    return None, None


def coder_name(key: str, completed_by: Mapping[str, Any] | None, coder_map: Mapping[str, str]) -> str:
    """The coder an annotator is: the coder map's entry for their email or user id, else ``labelstudio:<key>``."""
    for k in (key, str((completed_by or {}).get("id", ""))):
        if k and k.lower() in coder_map:
            return coder_map[k.lower()]
    return IMPORTED_CODER_PREFIX + key


def answer_from_result(result: object) -> dict[str, Any]:  # noqa: C901 (one check per result shape)
    """The answer an annotation's ``result`` gives (to be validated by ``validate_answer``); LabelStudioError when a
    result item is not one of :data:`CONTROLS` in its shape."""
    if not isinstance(result, list):
        raise LabelStudioError(f"result is a JSON {type(result).__name__}, not a list")
    values: dict[str, list[str]] = {}
    for item in result:
        if not isinstance(item, Mapping):
            raise LabelStudioError("a result item is not an object")
        name, kind, value = item.get("from_name"), item.get("type"), item.get("value")
        if name not in CONTROLS:
            raise LabelStudioError(f"result from {shown(name)}: not a control of the metacan labeling config")
        if kind != CONTROLS[name]:
            raise LabelStudioError(f"{name}: result type {shown(kind)}, expected {CONTROLS[name]!r}")
        if name in values:
            raise LabelStudioError(f"{name}: two results for one control")
        got = value.get("text" if kind == "textarea" else "choices") if isinstance(value, Mapping) else None
        if isinstance(got, str) and kind == "textarea":
            got = [got]
        if not isinstance(got, list) or not all(isinstance(v, str) for v in got):
            raise LabelStudioError(f"{name}: value {shown(value)} is not a list of strings")
        values[name] = got
    answer: dict[str, Any] = {}
    cats = values.get("categories")
    if cats:
        if NO_CATEGORY in cats and len(cats) > 1:
            raise LabelStudioError(f"categories: {NO_CATEGORY!r} (not meta-research) chosen with {shown(cats)}")
        answer["categories"] = [] if cats == [NO_CATEGORY] else cats
    for name in _SINGLE_CHOICE:
        got = values.get(name)
        if not got:
            continue
        if len(got) > 1:
            raise LabelStudioError(f"{name}: {len(got)} choices {shown(got)} for a single-choice field")
        answer[name] = {"true": True, "false": False}.get(got[0], got[0]) if name in _BOOLEAN_CONTROLS else got[0]
    if "note" in values:
        answer["note"] = "\n".join(values["note"])
    return answer


def _task_fields(task: Mapping[str, Any]) -> tuple[str, str, str]:
    data = task.get("data")
    if not isinstance(data, Mapping):
        raise LabelStudioError("task has no data object")
    got = [data.get(k) for k in ("protocol_id", "work_id", "evidence_sha256")]
    if not all(isinstance(v, str) and 0 < len(v) <= 128 for v in got):
        raise LabelStudioError(
            "task data lacks protocol_id, work_id or evidence_sha256: it was not exported by metacan coding export-labelstudio"
        )
    return got[0], got[1], got[2]


def _import_annotation(
    store: CodingStore,
    report: ImportReport,
    task: Mapping[str, Any],
    ann: object,
    coder_map: Mapping[str, str],
    imported_at: str,
) -> None:
    task_id = task.get("id")
    ann_id = ann.get("id") if isinstance(ann, Mapping) else None
    key, kept = annotator_key(ann.get("completed_by")) if isinstance(ann, Mapping) else (None, None)
    work_id = None

    def refuse(reason: str) -> None:
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[:MAX_REASON_CHARS] + "..."
        report.refusals.append(Refusal(task_id, work_id, ann_id, key, reason))

    try:
        protocol_id, work_id, shown = _task_fields(task)
    except LabelStudioError as exc:
        return refuse(str(exc))
    if not isinstance(ann, Mapping) or not _is_id(ann_id):
        ann_id = None
        return refuse("annotation is not an object with an id (an integer)")
    if key is None:
        return refuse("annotation names no annotator (completed_by)")
    if ann.get("was_cancelled"):
        return refuse("annotation was cancelled (skipped) in Label Studio: it gives no answer")
    for k in ("created_at", "updated_at"):
        t = ann.get(k)
        if t is not None and (not isinstance(t, str) or len(t) > MAX_TIME_CHARS):
            what = f"a string of {len(t):,} characters" if isinstance(t, str) else f"a JSON {_json_type(t)}"
            return refuse(f"annotation {k} is {what}, not an ISO 8601 time")
    updated = parse_time(ann.get("updated_at")) or parse_time(ann.get("created_at"))
    if updated is None:
        return refuse("annotation has no readable updated_at or created_at")
    try:
        coder = coder_name(key, kept, coder_map)
        answer = answer_from_result(ann.get("result"))
        answer_id = "ls-" + sha256_hex(canonical_json([protocol_id, work_id, coder, str(ann_id), updated]))[:32]
        provenance = {
            "file": report.file,
            "file_sha256": report.file_sha256,
            "task_id": task_id,
            "annotation_id": ann_id,
            "completed_by": kept,
            "created_at": ann.get("created_at"),
            "updated_at": ann.get("updated_at"),
            "imported_at": imported_at,
        }
        appended = store.append_imported(
            protocol_id,
            work_id,
            coder,
            answer,
            answer_id=answer_id,
            evidence_sha256=shown,
            submitted_at=updated,
            source=report.source,
            provenance=provenance,
        )
    except (LabelStudioError, CodingError) as exc:
        return refuse(str(exc))
    if appended:
        report.appended += 1
    else:
        report.already_present += 1


class _NotJson(ValueError):
    pass


def _no_constant(name: str) -> None:
    """``parse_constant`` of :func:`json.loads`: Python reads ``NaN``, ``Infinity`` and ``-Infinity``, JSON has none."""
    raise _NotJson(name)


def _json_type(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", float: "number", int: "number"}.get(
        type(value), type(value).__name__
    )


def import_export(store: CodingStore, path: Path, coder_map: Mapping[str, str] | None = None) -> ImportReport:
    """Import a Label Studio JSON export (see the module docstring); returns the report, also recorded in
    ``coding_imports``. A file that is not a JSON list of tasks is refused whole (ValueError naming it)."""
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        tasks = json.loads(raw, parse_constant=_no_constant)
    except _NotJson as exc:
        raise ValueError(
            f"{path}: {exc} is not JSON (RFC 8259) and Label Studio never writes it: export the project again in "
            "Label Studio's JSON format"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not JSON ({exc}); export the project in Label Studio's JSON format") from None
    except RecursionError:  # json.loads recurses once per nesting level
        raise ValueError(
            f"{path}: JSON nested too deeply to read (a Label Studio export nests about 6 levels): not a Label Studio "
            "export; export the project again in Label Studio's JSON format"
        ) from None
    if not isinstance(tasks, list):
        raise ValueError(
            f"{path}: a Label Studio JSON export is a list of tasks, this is a JSON {type(tasks).__name__}"
        )
    cmap = normalised_coder_map(coder_map or {}, "coder map")
    report = ImportReport(file=path.name, file_sha256=digest, source=f"label_studio:{digest[:16]}")
    imported_at = now_iso()
    for i, task in enumerate(tasks):
        report.tasks += 1
        if not isinstance(task, Mapping):
            report.refusals.append(Refusal(None, None, None, None, f"task {i + 1} is not an object"))
            continue
        tid = task.get("id")
        if tid is not None and (
            isinstance(tid, bool) or not isinstance(tid, int | str) or len(str(tid)) > MAX_ID_CHARS
        ):
            what = f"a string of {len(tid)} characters" if isinstance(tid, str) else f"a JSON {_json_type(tid)}"
            report.refusals.append(
                Refusal(None, None, None, None, f"task {i + 1}: its id is {what}; a Label Studio task id is an integer")
            )
            continue
        annotations = task.get("annotations") or []
        if not isinstance(annotations, list):
            report.refusals.append(Refusal(task.get("id"), None, None, None, "annotations is not a list"))
            continue
        for ann in annotations:
            report.annotations += 1
            _import_annotation(store, report, task, ann, cmap, imported_at)
    store.record_import(
        {
            "file_sha256": digest,
            "imported_at": imported_at,
            "file_name": path.name,
            "tasks": report.tasks,
            "annotations": report.annotations,
            "appended": report.appended,
            "already_present": report.already_present,
            "refused": report.refused,
            "refusals": [r.as_dict() for r in report.refusals],
        }
    )
    return report
