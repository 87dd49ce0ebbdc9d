"""The finished codes of a Label Studio JSON export, imported into the coding store and validated like answers given
on the site (:mod:`.labelstudio` writes the tasks and the labeling config).

Format read (HumanSignal/label-studio documentation, ``docs/source/``, ``guide/export.md``, "JSON": "List of items in
raw JSON format stored in one JSON file", cancelled annotations included; ``includes/task_format.md`` and
``includes/result_format.md``): a list of tasks, each with ``id``, ``data`` and ``annotations``; an annotation has
``id``, ``completed_by`` ("User ID of the user that created the annotation"; an object with ``id`` and ``email`` in
some exports), ``created_at``, ``updated_at``, ``was_cancelled`` and ``result``, a list of ``{"id", "from_name",
"to_name", "type", "value"}`` where a Choices result is ``type: "choices"``, ``value: {"choices": [...]}`` and a
TextArea result ``type: "textarea"``, ``value: {"text": [...]}``. ``predictions`` and ``drafts`` are not read.

:func:`import_export` maps each annotator to a coder (the coder map, keyed by email or Label Studio user id, else
``labelstudio:<email or id>``), turns the result into an answer, validates it with
:func:`metacan_pipeline.audit.coding.validate.validate_answer` (the SPEC section 3-4 rules of the teacher replies) and appends it
with source ``label_studio:<16 hex of the file's SHA-256>`` and its provenance (file, task id, annotation id,
``completed_by``, times). A cancelled (skipped) or invalid annotation is refused with its reason: nothing is dropped
silently, and the import (counts and every refusal) is recorded in ``coding_imports``. An annotation is appended once:
its answer id is derived from (protocol, work, coder, annotation id, ``updated_at``), so importing the same file again,
or a later export that repeats an unchanged annotation, appends nothing, while an annotation edited in Label Studio
(a new ``updated_at``) is a new answer that then counts as the latest. The latest answer counts by time, so an
annotation dated more than :data:`metacan_pipeline.audit.coding.rules.MAX_CLOCK_SKEW` (5 minutes) in the future is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...teachers.core.views import canonical_json
from .errors import CodingError, shown
from .labelstudio import BOOLEAN_CONTROLS, CONTROLS, NO_CATEGORY, SINGLE_CHOICE, codes_of
from .rules import IMPORTED_CODER_PREFIX, check_coder_name, now_iso, parse_time, sha256_hex
from .store import CodingStore

#: The longest task or annotation id read (Label Studio's are integers; a longer one is refused, never stored).
MAX_ID_CHARS = 64
#: The longest annotator email read (RFC 5321's path limit) and the longest time string (ISO 8601 with an offset).
MAX_EMAIL_CHARS = 254
MAX_TIME_CHARS = 64
#: The longest refusal reason recorded in ``coding_imports`` (values quoted in it are cut already).
MAX_REASON_CHARS = 500


class LabelStudioError(ValueError):
    """An annotation whose result cannot be read as an answer; the message says which control and why."""


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


def answer_from_result(  # noqa: C901 (one check per result shape)
    result: object, codes: Mapping[str, Mapping[str, str]] | None = None
) -> dict[str, Any]:
    """The answer an annotation's ``result`` gives (to be validated by ``validate_answer``); LabelStudioError when a
    result item is not one of :data:`CONTROLS` in its shape. A choice is read as its code: the code itself (the
    ``alias`` the labeling config gives each choice) or its display name (``codes``, :func:`.labelstudio.codes_of`;
    None: the default names); anything else is kept as given, for ``validate_answer`` to refuse."""
    codes = codes_of() if codes is None else codes
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
        values[name] = got if kind == "textarea" else [codes.get(name, {}).get(v, v) for v in got]
    answer: dict[str, Any] = {}
    cats = values.get("categories")
    if cats:
        if NO_CATEGORY in cats and len(cats) > 1:
            raise LabelStudioError(f"categories: {NO_CATEGORY!r} (not meta-research) chosen with {shown(cats)}")
        answer["categories"] = [] if cats == [NO_CATEGORY] else cats
    for name in SINGLE_CHOICE:
        got = values.get(name)
        if not got:
            continue
        if len(got) > 1:
            raise LabelStudioError(f"{name}: {len(got)} choices {shown(got)} for a single-choice field")
        answer[name] = {"true": True, "false": False}.get(got[0], got[0]) if name in BOOLEAN_CONTROLS else got[0]
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


def _abstract_sha256(task: Mapping[str, Any]) -> str | None:
    """The SHA-256 of the abstract the export showed with the task (``data.abstract_sha256``), None when it showed
    none; anything but text is refused with the annotation (:func:`.abstracts.check_abstract` then checks it)."""
    value = task["data"].get("abstract_sha256")
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 128:
        raise LabelStudioError("task data's abstract_sha256 is not a SHA-256: the tasks file was edited")
    return value


def _import_annotation(
    store: CodingStore,
    report: ImportReport,
    task: Mapping[str, Any],
    ann: object,
    coder_map: Mapping[str, str],
    imported_at: str,
    codes: Mapping[str, Mapping[str, str]],
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
        answer = answer_from_result(ann.get("result"), codes)
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
            abstract_sha256=_abstract_sha256(task),
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


def import_export(
    store: CodingStore,
    path: Path,
    coder_map: Mapping[str, str] | None = None,
    names: Mapping[str, Mapping[str, str]] | None = None,
) -> ImportReport:
    """Import a Label Studio JSON export (see the module docstring); returns the report, also recorded in
    ``coding_imports``. ``names``: the display names the labeling config showed (:func:`.labelstudio.labeling_config`),
    read back as codes. A file that is not a JSON list of tasks is refused whole (ValueError naming it)."""
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
    codes = codes_of(names)
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
            _import_annotation(store, report, task, ann, cmap, imported_at, codes)
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
