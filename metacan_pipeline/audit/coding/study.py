"""A coordinator's view of a coding study: progress per stratum and the whole study as one table.

:func:`study_progress` counts, per stratum of the audit sample, the works ``sampled`` (tasks), coded by ``no_coder``,
``one_coder`` or ``two_coders``, ``disagreements`` (awaiting adjudication), ``adjudicated`` and ``final`` (works with a
final human code, single-coder ones included), the rules of
:meth:`.adjudication.AdjudicationMixin.task_progress`. :func:`study_rows` is the study as one row per work
(:data:`STUDY_COLUMNS`): its stratum, its coder pair, both coders' latest answers (``coder1_*`` and ``coder2_*``,
coders in name order), the latest adjudication (``adjudication_*``) and the final human code (``final_*``, with its
``basis``). :func:`write_study_csv` writes it. Coders are named by ``coder_label`` (default: their name in the coding
store), so an export that leaves the coordinator's machine can carry pseudonyms instead.

The strata are the coordinator's: they come from ``audit_sample`` (:func:`sample_strata`), never from a coder's page.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...storage import MetacanStorage
from ..protocol.locked import STRATA
from .rules import CODERS_PER_WORK
from .store import CodingStore
from .validate import OUTCOME_FIELDS

#: The stratum of a task the audit sample does not place (tasks loaded by hand, or a sample no longer stored).
UNPLACED = "(not in the audit sample)"
PROGRESS_COLUMNS: tuple[str, ...] = (
    "stratum",
    "sampled",
    "no_coder",
    "one_coder",
    "two_coders",
    "disagreements",
    "adjudicated",
    "final",
)
#: The answer fields of each answer in a study row (``unresolved`` and ``note`` for the coders' and the adjudicator's).
ANSWER_COLUMNS: tuple[str, ...] = (*OUTCOME_FIELDS, "confidence", "note", "submitted_at")
FINAL_FIELDS: tuple[str, ...] = tuple(f for f in OUTCOME_FIELDS if f != "unresolved")
STUDY_COLUMNS: tuple[str, ...] = (
    "protocol_id",
    "id",
    "title",
    "stratum",
    "pair",
    *(f"{who}_{f}" for who in ("coder1", "coder2") for f in ("coder", *ANSWER_COLUMNS)),
    "needs_adjudication",
    *(f"adjudication_{f}" for f in ("coder", *ANSWER_COLUMNS)),
    "final_basis",
    *(f"final_{f}" for f in FINAL_FIELDS),
    "final_disputed",
)


def sample_strata(storage: MetacanStorage, protocol_id: str) -> dict[str, str]:
    """``{work id: stratum}`` of the works ``audit_sample`` drew for ``protocol_id`` ({} without the table)."""
    if not storage.has_table("audit_sample"):
        return {}
    table = storage.read_table(
        "audit_sample", ["id", "stratum"], [("protocol_id", "=", protocol_id), ("in_sample", "=", True)]
    )
    return dict(zip(table.column("id").to_pylist(), table.column("stratum").to_pylist(), strict=True))


def _order(stratum: str) -> tuple[int, str]:
    return (STRATA.index(stratum) if stratum in STRATA else len(STRATA), stratum)


def study_progress(store: CodingStore, protocol_id: str, strata: Mapping[str, str]) -> list[dict[str, Any]]:
    """One row per stratum with a task (:data:`PROGRESS_COLUMNS`, strata in the protocol's order, then any other),
    then a row ``all`` summing them. A task ``strata`` does not place is counted under :data:`UNPLACED`."""
    tasks, states = store._states(protocol_id)
    heads = store._evaluated(protocol_id)
    final = {c["id"] for c in store.adjudicated_codes(protocol_id)}
    rows: dict[str, dict[str, Any]] = {}
    for t in tasks:
        stratum = strata.get(t["id"], UNPLACED)
        row = rows.setdefault(stratum, {"stratum": stratum, **dict.fromkeys(PROGRESS_COLUMNS[1:], 0)})
        s = states.get(t["id"], {"codes": [], "adjudication": None})
        n = len(s["codes"])
        row["sampled"] += 1
        row[("no_coder", "one_coder")[n] if n < CODERS_PER_WORK else "two_coders"] += 1
        if n >= CODERS_PER_WORK:
            if store._resolved(s):
                row["adjudicated"] += 1
            elif store._differing(sorted(s["codes"], key=lambda a: a["coder"]), heads):
                row["disagreements"] += 1
        row["final"] += t["id"] in final
    out = [rows[k] for k in sorted(rows, key=_order)]
    total = {"stratum": "all", **{k: sum(r[k] for r in out) for k in PROGRESS_COLUMNS[1:]}}
    return [*out, total]


def _cell(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ";".join(str(v) for v in value)
    return value


def study_rows(
    store: CodingStore,
    protocol_id: str,
    strata: Mapping[str, str],
    coder_label: Callable[[str], str] | None = None,
) -> list[dict[str, Any]]:
    """The study as one row per task, in queue order (:data:`STUDY_COLUMNS`; module docstring). Lists are joined
    with ``;`` (``categories``: vocabulary codes; an answer that ticks none has an empty cell, an unresolved one
    none either: read ``unresolved``), booleans are ``yes`` / ``no``, a field not given is None (an empty cell)."""
    label = coder_label or (lambda name: name)
    tasks, states = store._states(protocol_id)
    heads = store._evaluated(protocol_id)
    pairs = store.assignments(protocol_id)
    final = {c["id"]: c for c in store.adjudicated_codes(protocol_id)}
    out = []
    for t in tasks:
        s = states.get(t["id"], {"codes": [], "adjudication": None})
        codes = sorted(s["codes"], key=lambda a: a["coder"])
        row: dict[str, Any] = dict.fromkeys(STUDY_COLUMNS)
        row.update(
            protocol_id=protocol_id,
            id=t["id"],
            title=t["title"],
            stratum=strata.get(t["id"], UNPLACED),
            pair=";".join(label(c) for c in pairs.get(t["id"], [])),
        )
        for who, answer in zip(("coder1", "coder2"), codes, strict=False):
            row[f"{who}_coder"] = label(answer["coder"])
            row.update({f"{who}_{f}": _cell(answer[f]) for f in ANSWER_COLUMNS})
        if len(codes) >= CODERS_PER_WORK:
            row["needs_adjudication"] = _cell(bool(store._differing(codes, heads)))
        adj = s["adjudication"]
        if adj is not None:
            row["adjudication_coder"] = label(adj["coder"])
            row.update({f"adjudication_{f}": _cell(adj[f]) for f in ANSWER_COLUMNS})
        code = final.get(t["id"])
        if code is not None:
            row["final_basis"] = code["basis"]
            row.update({f"final_{f}": _cell(code[f]) for f in FINAL_FIELDS})
            row["final_disputed"] = _cell(code["disputed"])
        out.append(row)
    return out


def write_study_csv(rows: list[dict[str, Any]], path: str | Path) -> int:
    """Write :func:`study_rows` to ``path`` (UTF-8, a header of :data:`STUDY_COLUMNS`, empty cells for None; a new
    file only: an existing one is refused with FileExistsError). Returns the rows written."""
    with open(path, "x", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(STUDY_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)
