"""Converter for the MetaCan pilot screening labels (``../shared/data/metacan_pilot``, read its SOURCES.md).

The pilot (github.com/choxos/MetaCan, ``pilot/screening``, commit 43686d3322e2) double-screened a
stratified sample of Canadian works with two LLM screeners under rubric v1.0 (SOURCES.md "The earlier
pilot"): screener A = ``claude-sonnet-4-6``, screener B = ``gpt-5.6-sol`` run through the Codex CLI. Nothing
in it is truth data. It becomes two imported teachers (:mod:`.importing`), prompt version
``pilot-rubric-v1.0``, record view ``pilot_title_abstract`` (the six fields the harness sent: id, title,
abstract cut at 1,500 characters, year, language, OpenAlex type):

- ``pilot_a`` (model ``claude-sonnet-4-6``): ``labels_joined.json`` ``tier_a`` / ``conf_a``, 1290 works.
  A's own label files are not in the repository, so A gives tier and confidence only.
- ``pilot_b`` (model ``gpt-5.6-sol``): the full labels in ``codex/chunk_*.json`` (``id, tier, genre,
  about_ca, confidence, why``) where present; for the works of ``labels_joined.json`` without a codex
  label, ``tier_b`` / ``conf_b`` there. A work in two codex files (3 works, labelled in the random and
  again in the stratified run; same tier, other wording) keeps the label of the file that pairs with
  ``chunks_b/`` (the stratified run whose tiers went into ``labels_joined.json``); the other is reported
  as a duplicate.

Field mapping (pilot -> ours, SPEC sections 3-4):

============== =====================================================================================
tier           ``T1`` (core metaresearch) and ``T2`` (adjacent: STS, LIS, research infrastructure,
               history/philosophy of science, research-policy analysis) -> ``["metaresearch"]``;
               ``T3`` (contextual: editorials, policy documents, announcements, never pooled) and
               ``OUT`` -> ``[]``. This is the pilot's own "in scope = T1/T2" reading (SOURCES.md), so
               the IN/OUT figures published there are our ``metaresearch`` head. T2 does *not* also get
               ``sts``: the rubric's T2 bundles STS with LIS, infrastructure, history and policy
               analysis, so ``sts`` would be asserted for works the screener never called STS. The
               pilot decides no category but "in scope": the other eight categories (including
               ``insufficient_payload``, a v2 flag) are ``undecided_categories`` (unknown, not negative).
               Under our rubric some T3 items (editorials about research practice) would be
               metaresearch with genre commentary/editorial: the pilot teachers under-call it there.
genre          v1 -> ours by the genre the same three models gave the same works when re-coding them
               under rubric v2, whose genre vocabulary is ours (``frame1k/*_r1`` vs ``frame1k/v2``, 72
               work x model pairs): ``empirical`` -> ``empirical`` (14/31), ``conceptual`` -> ``other``
               (16/29), ``editorial/commentary`` -> ``commentary`` (4/4), ``policy`` -> ``commentary``
               (3/4), ``other`` -> ``other`` (2/4), ``infrastructure/announcement`` -> ``other`` (not
               observed; our vocabulary has no announcement genre). Coarse: the original value is kept
               in ``source_ref``.
about_ca       -> ``about_ca_system`` (v1: "true only when the Canadian research system is a
               substantive object of study").
confidence     as is (high / medium / low).
why            -> ``reason``.
absent         ``domain``, ``study_design``, ``about_ca_topic`` always; ``genre``, ``about_ca_system``
               and ``reason`` too for labels taken from ``labels_joined.json``.
design         ``labels_joined.json`` ``stratum``, ``sel_prob``, ``weight`` -> ``imported_design``
               (``design_weight`` = ``weight`` as published, e.g. 8.005 for ``sel_prob`` 0.1249).
============== =====================================================================================

A value outside these maps (a tier or genre the pilot never used) makes the record a failed row naming
the value; nothing is guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...vocab import CATEGORIES
from ..core.reference import TIER_CATEGORIES
from .importing import ImportSpec
from .label_files import SourceRecord, file_sha256

PILOT_SOURCE = "MetaCan pilot screening (github.com/choxos/MetaCan pilot/screening @ 43686d3322e2, see SOURCES.md)"
PROMPT_VERSION = "pilot-rubric-v1.0"
RECORD_VIEW = "pilot_title_abstract"
MODEL_A = "claude-sonnet-4-6"
MODEL_B = "gpt-5.6-sol"

GENRES_V1: dict[str, str] = {
    "empirical": "empirical",
    "conceptual": "other",
    "editorial/commentary": "commentary",
    "policy": "commentary",
    "infrastructure/announcement": "other",
    "other": "other",
}
UNDECIDED = frozenset(c for c in CATEGORIES if c != "metaresearch")
ABSENT_JOINED = frozenset({"domain", "study_design", "genre", "about_ca_system", "about_ca_topic", "reason"})
ABSENT_CODEX = frozenset({"domain", "study_design", "about_ca_topic"})


def _spec(teacher: str, model: str, absent: frozenset[str]) -> ImportSpec:
    return ImportSpec(
        teacher=teacher,
        model=model,
        prompt_version=PROMPT_VERSION,
        record_view=RECORD_VIEW,
        source=PILOT_SOURCE,
        absent=absent,
        undecided_categories=UNDECIDED,
    )


FRAME1K_SOURCE = (
    "MetaCan pilot frame1k (github.com/choxos/MetaCan pilot/screening/frame1k @ 43686d3322e2, see SOURCES.md)"
)
#: frame1k arm folder -> (imported teacher, model): three frontier models, each labelling the same 750 works.
FRAME1K_TEACHERS = {
    "opus_r1": ("frame1k_opus", "claude-opus-4-8"),
    "codex_r1": ("frame1k_gpt", "gpt-5.6"),
    "grok_r1": ("frame1k_grok", "grok-4.5"),
}

SPEC_A = _spec("pilot_a", MODEL_A, ABSENT_JOINED)
SPEC_B_CODEX = _spec("pilot_b", MODEL_B, ABSENT_CODEX)
SPEC_B_JOINED = _spec("pilot_b", MODEL_B, ABSENT_JOINED)


@dataclass
class PilotImport:
    """One import of :func:`pilot_imports`: the spec, the converted records, notes for the log."""

    spec: ImportSpec
    records: list[SourceRecord]
    notes: list[str] = field(default_factory=list)


def _frame1k_spec(arm: str) -> ImportSpec:
    teacher, model = FRAME1K_TEACHERS[arm]
    return ImportSpec(
        teacher=teacher,
        model=model,
        prompt_version=PROMPT_VERSION,
        record_view="pilot_frame1k_record",
        source=FRAME1K_SOURCE,
        absent=ABSENT_CODEX,
        undecided_categories=UNDECIDED,
    )


def _convert(rec: dict, tier_key: str, conf_key: str) -> tuple[dict[str, Any], str | None]:
    tier = rec.get(tier_key)
    label: dict[str, Any] = {"id": rec.get("id"), "confidence": rec.get(conf_key)}
    if tier not in TIER_CATEGORIES:
        return label, f"{tier_key}={tier!r} has no mapping (pilot tiers: {list(TIER_CATEGORIES)})"
    label["categories"] = list(TIER_CATEGORIES[tier])
    return label, None


def _convert_full(rec: dict, reason_key: str) -> tuple[dict[str, Any], str | None]:
    """A full rubric-v1 label (tier, genre, about_ca, confidence, reason) in our schema, or the cause of failure."""
    label, error = _convert(rec, "tier", "confidence")
    genre = rec.get("genre")
    if error is None and genre not in GENRES_V1:
        error = f"genre={genre!r} has no mapping (pilot v1 genres: {list(GENRES_V1)})"
    label.update(genre=GENRES_V1.get(genre), about_ca_system=rec.get("about_ca"), reason=rec.get(reason_key))
    return label, error


def _design(joined: dict | None) -> dict[str, Any]:
    if joined is None:
        return {}
    return {"stratum": joined.get("stratum"), "sel_prob": joined.get("sel_prob"), "design_weight": joined.get("weight")}


def _read(path: Path) -> tuple[str, list]:
    try:
        return file_sha256(path), json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: not JSON ({exc}); the pilot folder should hold the files listed in its SOURCES.md"
        ) from exc


def pilot_imports(folder: Path) -> list[PilotImport]:
    """The pilot's labels as imports: ``pilot_a`` (labels_joined.json), ``pilot_b`` (codex files, in
    the order: files pairing with ``chunks_b/``, then the rest, each by name), ``pilot_b`` (the
    labels_joined.json works without a codex label), then the frame1k arms (:func:`frame1k_imports`). Records carry the original pilot values and the
    converted label (module docstring). Raises FileNotFoundError without ``labels_joined.json`` and
    ValueError naming a file that is not JSON.
    """
    joined_path = folder / "labels_joined.json"
    if not joined_path.exists():
        raise FileNotFoundError(
            f"{joined_path} not found: the MetaCan pilot folder needs labels_joined.json (see its SOURCES.md)"
        )
    joined_sha, joined = _read(joined_path)
    by_id = {r.get("id"): r for r in joined if isinstance(r, dict)}

    a = PilotImport(SPEC_A, [])
    for i, rec in enumerate(joined):
        label, error = _convert(rec, "tier_a", "conf_a") if isinstance(rec, dict) else ({}, "not a JSON object")
        a.records.append(
            SourceRecord(
                str(joined_path),
                joined_sha,
                i,
                rec,
                {**label, **_design(rec if isinstance(rec, dict) else None)},
                error,
            )
        )

    def paired(path: Path) -> bool:
        twin = folder / "chunks_b" / path.name
        if not twin.exists():
            return False
        ids = [r.get("id") for r in json.loads(path.read_text(encoding="utf-8"))]
        return ids == [w.get("id") for w in json.loads(twin.read_text(encoding="utf-8"))]

    codex_files = sorted((folder / "codex").glob("chunk_*.json"), key=lambda p: (not paired(p), p.name))
    b = PilotImport(SPEC_B_CODEX, [])
    coded: set[str] = set()
    mismatched = 0
    for path in codex_files:
        sha, items = _read(path)
        for i, rec in enumerate(items):
            if not isinstance(rec, dict):
                b.records.append(SourceRecord(str(path), sha, i, rec, None, "not a JSON object"))
                continue
            label, error = _convert_full(rec, "why")
            twin = by_id.get(rec.get("id"))
            if twin is not None and (twin.get("tier_b"), twin.get("conf_b")) != (
                rec.get("tier"),
                rec.get("confidence"),
            ):
                mismatched += 1
            b.records.append(SourceRecord(str(path), sha, i, rec, {**label, **_design(twin)}, error))
            coded.add(rec.get("id"))
    b.notes.append(
        f"{len(codex_files)} codex files, {len(b.records)} labels of {len(coded)} works; "
        f"{mismatched} differ from labels_joined tier_b/conf_b"
    )

    rest = PilotImport(SPEC_B_JOINED, [])
    for i, rec in enumerate(joined):
        if isinstance(rec, dict) and rec.get("id") not in coded:
            label, error = _convert(rec, "tier_b", "conf_b")
            rest.records.append(SourceRecord(str(joined_path), joined_sha, i, rec, {**label, **_design(rec)}, error))
    rest.notes.append(f"{len(rest.records)} labels_joined works without a codex label take tier_b/conf_b")
    return [a, b, rest, *frame1k_imports(folder)]


def frame1k_imports(folder: Path) -> list[PilotImport]:
    """The frame1k arms' labels (``frame1k/<arm>/labels_*.json``: ``id, tier, genre, about_ca, confidence, reason``,
    rubric v1.0, converted as the codex files are) as one import per arm (:data:`FRAME1K_TEACHERS`); none when the
    folder has no ``frame1k``. The sample's selection probabilities are not in the files, so no design is imported."""
    imports = []
    for arm in FRAME1K_TEACHERS:
        files = sorted((folder / "frame1k" / arm).glob("labels_*.json"))
        if not files:
            continue
        imp = PilotImport(_frame1k_spec(arm), [])
        for path in files:
            sha, items = _read(path)
            for i, rec in enumerate(items):
                if not isinstance(rec, dict):
                    imp.records.append(SourceRecord(str(path), sha, i, rec, None, "not a JSON object"))
                    continue
                label, error = _convert_full(rec, "reason")
                imp.records.append(SourceRecord(str(path), sha, i, rec, label, error))
        imp.notes.append(f"{len(files)} frame1k/{arm} files, {len(imp.records)} labels")
        imports.append(imp)
    return imports
