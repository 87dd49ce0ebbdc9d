"""Machine adjudicators: verdicts made by a model, recorded beside the human codes and never as one (SPEC
sections 1 and 10).

The frame1k pilot (``<pilot>/frame1k/adjudication/verdict_*.json``, the pilot folder's SOURCES.md section 1) holds
an LLM adjudicator's decision on the 179 works the three frontier arms disagreed about: a rubric-v1 ``tier``
(``T1``/``T2`` in scope, :data:`metacan_pipeline.teachers.imports.pilot.TIER_CATEGORIES`), a ``seam`` and a reason. Each
verdict becomes one ``metaresearch`` code of the adjudicator ``machine-adjudicator:frame1k`` in the coding store's
``machine_codes`` table (:meth:`metacan_pipeline.audit.coding.machine_codes.MachineCodesMixin.append_machine_codes`). The validation report
estimates against them under ``code_source = machine-adjudicator:frame1k`` and labels every figure machine-adjudicated;
the gate never writes them into ``human_validation`` and no record shows them as a human code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from ...teachers.core.reference import read_items, tier_label

MACHINE_ADJUDICATOR_PREFIX = "machine-adjudicator:"


def frame1k_codes(pilot_dir: Path, protocol_id: str) -> list[dict]:
    """One ``machine_codes`` row per verdict of ``<pilot_dir>/frame1k/adjudication/verdict_*.json`` (head
    ``metaresearch``; code None for a tier outside OUT/T1/T2/T3). Raises FileNotFoundError naming the folder when
    there is no verdict file, ValueError naming the file for one that is not a list of objects with an id."""
    folder = Path(pilot_dir) / "frame1k" / "adjudication"
    files = sorted(folder.glob("verdict_*.json"))
    if not files:
        raise FileNotFoundError(
            f"{folder}: no verdict_*.json; point --pilot-dir at the MetaCan pilot folder (its SOURCES.md lists them)"
        )
    rows = []
    for path in files:
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        for verdict in read_items(path):
            rows.append(
                {
                    "protocol_id": protocol_id,
                    "id": verdict["id"],
                    "head": "metaresearch",
                    "code": tier_label(verdict.get("tier")),
                    "adjudicator": f"{MACHINE_ADJUDICATOR_PREFIX}frame1k",
                    "verdict": str(verdict.get("tier")),
                    "reason": verdict.get("reason"),
                    "source_file": str(path.relative_to(Path(pilot_dir))),
                    "source_sha256": sha,
                }
            )
    return rows


#: The machine adjudicators ``metacan coding import-adjudicator`` knows: name -> reader(pilot dir, protocol id).
ADJUDICATORS: dict[str, Callable[[Path, str], list[dict]]] = {"frame1k": frame1k_codes}
