"""The frame1k reference set: works of the original frame labelled by three frontier models (SPEC section 4).

Files (``<pilot>/frame1k``, the pilot folder's SOURCES.md section 1): works ``chunks/chunk_NN.json`` (15 saved
chunks of 50, 750 works); one label per work in ``opus_r1/``, ``codex_r1/``, ``grok_r1/`` ``labels_NN.json``
(paired with ``chunk_NN.json`` by ``id``); the adjudicator's decisions ``adjudication/verdict_*.json``.
A label is ``metaresearch`` 1/0 from the rubric-v1 ``tier`` (:data:`TIER_CATEGORIES`: ``T1``/``T2`` in
scope). ``adjudicated`` is the verdict's tier where the work has one (the works on which the arms
disagree about scope, plus W2901282154), otherwise the scope all three arms share. It is the frontier
reference both the student's pilot evaluation (:mod:`metacan_pipeline.student.pilot_eval`) and the
teachers' qualification test (:mod:`.qualification`) read.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

FRAME1K_ARMS = {
    "opus_r1": "Claude Opus 4.8 (frame1k/opus_r1, rubric v1.0)",
    "codex_r1": "GPT-5.6, Codex CLI (frame1k/codex_r1, rubric v1.0)",
    "grok_r1": "Grok 4.5 (frame1k/grok_r1, rubric v1.0)",
    "adjudicated": "adjudication verdict where there is one, else the three r1 arms' unanimous scope",
}
R1_ARMS = ("opus_r1", "codex_r1", "grok_r1")
#: The categories of a rubric-v1 tier (the pilot's "in scope = T1/T2" reading): the frame1k arms and the MetaCan
#: pilot screeners (:mod:`..imports.pilot`) both label by tier.
TIER_CATEGORIES: dict[str, list[str]] = {"T1": ["metaresearch"], "T2": ["metaresearch"], "T3": [], "OUT": []}


@dataclass(frozen=True)
class Frame1kSet:
    """The frame1k works as saved (``records``: id -> work record, in file order), every arm's
    ``metaresearch`` label per work id (None: a tier outside OUT/T1/T2/T3) and the counts of
    :func:`frame1k_labels`."""

    records: dict[str, dict]
    labels: dict[str, dict[str, int | None]]
    dropped: dict[str, int]


def read_json(path: Path):
    """A JSON file of the pilot folder; ValueError naming the file when it is not UTF-8 JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{path}: not UTF-8 JSON ({exc}); the pilot folder should hold the files listed in its SOURCES.md"
        ) from exc


def read_items(path: Path) -> list[dict]:
    """A pilot file that must be a JSON list of objects with a string ``id``; ValueError naming the file."""
    items = read_json(path)
    if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("id"), str) for i in items):
        raise ValueError(
            f"{path}: expected a JSON list of objects each with a string 'id' (the layout of SOURCES.md); "
            "restore the file from the pilot repository"
        )
    return items


def tier_label(tier) -> int | None:
    """``metaresearch`` 1/0 for a rubric-v1 tier, None for any other value."""
    return int("metaresearch" in TIER_CATEGORIES[tier]) if tier in TIER_CATEGORIES else None


def frame1k_labels(folder: Path) -> Frame1kSet:
    """Read ``<folder>/frame1k``. Counts: per arm ``failed_<arm>`` (a tier outside OUT/T1/T2/T3; for
    ``adjudicated``, a verdict's tier), ``unlabelled_<arm>`` (no label for the work), ``unpaired_labels``
    (label records whose id is in no chunk), ``contested_without_verdict`` (the r1 arms disagree about
    scope and there is no verdict) and ``unadjudicated_incomplete`` (no verdict and an r1 arm without a
    usable label); the last two get no ``adjudicated`` label.

    Raises FileNotFoundError without chunk files, ValueError naming a file that is not JSON.
    """
    root = Path(folder) / "frame1k"
    chunks = sorted((root / "chunks").glob("chunk_*.json"))
    if not chunks:
        raise FileNotFoundError(f"{root / 'chunks'}: no chunk_*.json work files (see {folder / 'SOURCES.md'}, frame1k)")
    records: dict[str, dict] = {}
    labels: dict[str, dict[str, int | None]] = {arm: {} for arm in FRAME1K_ARMS}
    dropped = Counter({"contested_without_verdict": 0, "unadjudicated_incomplete": 0})
    for path in chunks:
        for rec in read_items(path):
            records.setdefault(rec["id"], rec)
        for arm in R1_ARMS:  # labels_NN.json pairs with chunk_NN.json; paired by id
            label_path = root / arm / path.name.replace("chunk_", "labels_")
            for lab in read_items(label_path) if label_path.exists() else []:
                labels[arm][lab["id"]] = tier_label(lab.get("tier"))
    verdicts = {
        v["id"]: v.get("tier") for p in sorted((root / "adjudication").glob("verdict_*.json")) for v in read_items(p)
    }
    for wid in records:
        votes = [labels[arm].get(wid) for arm in R1_ARMS]
        if wid in verdicts:
            labels["adjudicated"][wid] = tier_label(verdicts[wid])
        elif None in votes:  # an r1 arm without a usable label: unanimity cannot be read
            dropped["unadjudicated_incomplete"] += 1
        elif len(set(votes)) == 1:
            labels["adjudicated"][wid] = votes[0]
        else:
            dropped["contested_without_verdict"] += 1
    dropped["unpaired_labels"] = sum(1 for arm in R1_ARMS for i in labels[arm] if i not in records)
    for arm in R1_ARMS:
        dropped[f"unlabelled_{arm}"] = sum(1 for i in records if i not in labels[arm])
        dropped[f"failed_{arm}"] = sum(1 for i in records if i in labels[arm] and labels[arm][i] is None)
    dropped["failed_adjudicated"] = sum(1 for i in verdicts if i in records and labels["adjudicated"].get(i) is None)
    return Frame1kSet(records, labels, {k: int(v) for k, v in sorted(dropped.items())})
