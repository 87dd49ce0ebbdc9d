"""Reference sets: imported labels that train student heads of their own, also for works outside the frame.

A *reference set* is one imported teacher (``imported_labels``, e.g. the MetaCan pilot's screeners ``pilot_a`` and
``pilot_b``, or a group's own earlier study imported from a label file): its labelled works that have a text, with
their design weights where the import has them. Each set trains a binary head per target it decides, beside the
role teachers' heads, under the set's name (score columns ``<set>__<target>``, published as ``<set>:<target>``).

- **Text.** A frame work's text is the frame's (what the student scores); any other work's comes from the import
  itself (table ``reference_texts``, :mod:`metacan_pipeline.teachers.imports.texts`). A labelled work with neither
  cannot train and is counted (:attr:`ReferenceSet.without_text`).
- **Targets.** A category is decided by a label unless the import marks it undecided (``undecided_categories``:
  the pilot decides ``metaresearch`` only); an ``about_ca`` flag is decided where the label has a value.
- **Design weights.** When every work of the set with a text has a positive ``imported_design`` weight of the
  set's import source, the set is *weighted*: each weight is multiplied by ``N_h / n_h``, the works of its stratum
  that the set labels over those among them with a text (text assumed missing at random within a stratum), so the
  weighted rate is the design-based rate of the whole labelled sample. Otherwise it is unweighted (weights 1) and
  says so. A head is fitted with these weights, so its scores are calibrated to the set's own weighted rate.
- **Holdout.** A reference work that is a frame work follows the student's holdout rule (never the frozen holdout,
  never a held-out venue); a work outside the frame is not in the frame's holdout.

What a reference head may claim: machine scores only. It never decides a prediction, never passes the support gate
and never gives a validated label; its quality is measured by grouped cross-validation on its own set.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from ..storage import MetacanStorage, sql_literal
from ..vocab import ABOUT_CA_TARGETS, BINARY_TARGETS, CATEGORIES, CONSTANT_HEAD_STATUS, REFERENCE_GATE_REASON
from .features import STUDENT_FIELDS
from .holdout import frozen_among, venue_held_out, venue_key
from .roles import ROLE_TEACHERS
from .scoring import scratch_connection, student_texts


@dataclass(frozen=True)
class ReferenceSet:
    """One reference set: its labelled works with a text (``labels``: ``work_id, label_id, categories,
    about_ca_system, about_ca_topic, undecided`` (categories the import leaves undecided), in work-id order),
    ``texts`` and ``groups`` (CV group: the frame venue key, else ``venue:<name>``, else ``title:<title>``) of those
    works, their training ``weights``, whether the weights are the import's design (``weighted``), which of them are
    frame works (``frame_works``), and what was left out: ``without_text`` labelled works with no text anywhere, ``in_holdout`` frame works of the holdout."""

    name: str
    model: str
    source: str
    labels: list[dict]
    texts: dict[str, str]
    groups: dict[str, str]
    weights: dict[str, float]
    weighted: bool
    frame_works: frozenset[str]
    without_text: int
    in_holdout: int
    notes: list[str] = field(default_factory=list)

    def value(self, row: dict, target: str) -> int | None:
        """The label's 0/1 on a binary ``target``, None where the label does not decide it."""
        if target in CATEGORIES:
            return None if target in row["undecided"] else int(target in (row["categories"] or []))
        v = row.get(target)
        return None if v is None else int(bool(v))

    def decided_targets(self) -> list[str]:
        """The binary targets (vocabulary order) that at least one label of the set decides."""
        return [t for t in BINARY_TARGETS if any(self.value(r, t) is not None for r in self.labels)]

    def summary(self) -> dict:
        """What the model version records about the set (JSON-ready)."""
        return {
            "model": self.model,
            "source": self.source,
            "works": len(self.labels),
            "in_frame": len(self.frame_works),
            "without_text": self.without_text,
            "in_holdout_left_out": self.in_holdout,
            "weighted": self.weighted,
            "targets": self.decided_targets(),
            "notes": list(self.notes),
        }


def reference_score_columns(storage: MetacanStorage) -> list[str]:
    """The ``student_scores`` columns (``<set>__<target>``) of the reference-set heads of the current model version
    (its ``student_heads`` rows with :data:`REFERENCE_GATE_REASON`) that the scores table holds; empty before both."""
    if not (storage.has_table("student_heads") and storage.has_table("student_scores")):
        return []
    heads = storage.read_table("student_heads", ["teacher", "target", "gate_reason"]).to_pylist()
    first = min(storage.table_dir("student_scores").glob("*.parquet"), default=None)
    present = set(pq.read_schema(first).names) if first is not None else set()
    wanted = [f"{h['teacher']}__{h['target']}" for h in heads if h["gate_reason"] == REFERENCE_GATE_REASON]
    return [c for c in wanted if c in present]


def reference_no_score(storage: MetacanStorage) -> dict[str, str]:
    """``{<set>__<target>: reason}`` of the current model version's reference-set heads that give no score (their
    ``student_heads`` status is ``constant: <reason>``, e.g. "no positive direct label to learn from (0 positives
    of 12 labels)"); empty before ``student_heads``."""
    if not storage.has_table("student_heads"):
        return {}
    heads = storage.read_table("student_heads", ["teacher", "target", "gate_reason", "status"]).to_pylist()
    return {
        f"{h['teacher']}__{h['target']}": h["status"].removeprefix(CONSTANT_HEAD_STATUS)
        for h in heads
        if h["gate_reason"] == REFERENCE_GATE_REASON and (h["status"] or "").startswith(CONSTANT_HEAD_STATUS)
    }


def imported_teachers(storage: MetacanStorage) -> list[str]:
    """The teachers of ``imported_labels`` with at least one labelled row, sorted (empty without the table)."""
    if not storage.has_table("imported_labels"):
        return []
    table = storage.read_table("imported_labels", ["teacher", "status"])
    teachers, statuses = table.column("teacher").to_pylist(), table.column("status").to_pylist()
    return sorted({t for t, s in zip(teachers, statuses, strict=True) if s == "labelled"})


def _labels(storage: MetacanStorage, name: str) -> list[dict]:
    files = str(storage.table_dir("imported_labels") / "*.parquet")
    with storage.connect() as con:
        rows = (
            con.execute(
                f"""SELECT work_id, label_id, model, categories, about_ca_system, about_ca_topic, source_ref
                FROM read_parquet({sql_literal(files)})
                WHERE teacher = ? AND status = 'labelled' AND work_id IS NOT NULL
                QUALIFY row_number() OVER (PARTITION BY work_id ORDER BY created_at DESC, label_id DESC) = 1
                ORDER BY work_id""",
                [name],
            )
            .to_arrow_table()
            .to_pylist()
        )
    for r in rows:
        ref = json.loads(r.pop("source_ref") or "{}")
        r["undecided"] = frozenset(ref.get("undecided_categories") or ())
        for t in ABOUT_CA_TARGETS:
            if t in (ref.get("absent") or ()):
                r[t] = None
    return rows


def _texts_and_groups(storage: MetacanStorage, ids: list[str]) -> tuple[dict[str, dict], dict[str, dict]]:
    """``({id: frame row}, {id: reference_texts row})`` of ``ids``, each with its student text."""
    wanted = pa.table({"id": ids})  # noqa: F841 (DuckDB replacement scan)
    cols = ", ".join(STUDENT_FIELDS)
    with scratch_connection(storage) as con:
        frame = (
            con.execute(f"SELECT id, venue_id, {cols} FROM frame SEMI JOIN wanted USING (id)").to_arrow_table()
            if storage.has_table("frame")
            else None
        )
    with storage.connect() as con:
        ref = con.execute(
            f"SELECT t.work_id AS id, {cols} FROM reference_texts t JOIN wanted w ON w.id = t.work_id"
        ).to_arrow_table()
    in_frame = {}
    if frame is not None and frame.num_rows:
        for row, text in zip(frame.to_pylist(), student_texts(frame), strict=True):
            in_frame[row["id"]] = {"text": text, "group": venue_key(row["id"], row["venue_id"])}
    outside = {}
    if ref.num_rows:
        for row, text in zip(ref.to_pylist(), student_texts(ref), strict=True):
            venue = (row.get("venue_name") or "").strip()
            title = " ".join((row.get("title_text") or "").casefold().split())
            outside[row["id"]] = {"text": text, "group": f"venue:{venue}" if venue else f"title:{title}"}
    return in_frame, outside


def _design(storage: MetacanStorage, name: str, ids: list[str]) -> tuple[list[str], dict]:
    """``(sources, {work id: (stratum, design weight)})``: the set's import sources (``label_imports``) and their
    ``imported_design`` rows of ``ids``."""
    wanted = pa.table({"id": ids})  # noqa: F841 (DuckDB replacement scan)
    with storage.connect() as con:
        sources = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT source FROM label_imports WHERE teacher = ? ORDER BY source", [name]
            ).fetchall()
        ]
        rows = con.execute(
            """SELECT d.work_id, d.stratum, d.design_weight FROM imported_design d
               JOIN (SELECT DISTINCT source FROM label_imports WHERE teacher = ?) s USING (source)
               JOIN wanted w ON w.id = d.work_id""",
            [name],
        ).fetchall()
    return sources, {w: (s, dw) for w, s, dw in rows}


def load_reference_set(storage: MetacanStorage, name: str) -> ReferenceSet:
    """The reference set of the imported teacher ``name`` (see the module docstring; the student's holdout must be
    frozen: :func:`~.holdout.freeze_holdout`). Raises ValueError when ``name`` is a role teacher or has
    no labelled imported work."""
    if name in ROLE_TEACHERS:
        raise ValueError(
            f"reference set {name!r} is a role teacher: its labels already train its heads; name an imported teacher"
        )
    labels = _labels(storage, name) if storage.has_table("imported_labels") else []
    if not labels:
        known = ", ".join(imported_teachers(storage)) or "none"
        raise ValueError(
            f"reference set {name!r}: no labelled imported work of that teacher in imported_labels (imported teachers: "
            f"{known}); import its labels first (materialize imported_labels, or `metacan import-labels`)"
        )
    ids = [r["work_id"] for r in labels]
    in_frame, outside = _texts_and_groups(storage, ids)
    holdout = frozen_among(storage, in_frame)
    info = {**outside, **in_frame}  # a frame work's own text wins
    with_text = [r for r in labels if r["work_id"] in info]
    left_out = {
        r["work_id"]
        for r in with_text
        if r["work_id"] in in_frame and (r["work_id"] in holdout or venue_held_out(in_frame[r["work_id"]]["group"]))
    }
    kept = [r for r in with_text if r["work_id"] not in left_out]
    sources, design = _design(storage, name, ids)
    notes = []
    weighted = bool(kept) and all((design.get(r["work_id"], (None, None))[1] or 0) > 0 for r in kept)
    if weighted:
        n_all = Counter(design[r["work_id"]][0] for r in labels if r["work_id"] in design)
        n_kept = Counter(design[r["work_id"]][0] for r in kept)
        weights = {
            r["work_id"]: design[r["work_id"]][1] * n_all[design[r["work_id"]][0]] / n_kept[design[r["work_id"]][0]]
            for r in kept
        }
    else:
        weights = {r["work_id"]: 1.0 for r in kept}
        n_design = sum(1 for r in kept if (design.get(r["work_id"], (None, None))[1] or 0) > 0)
        notes.append(
            f"unweighted: {len(kept) - n_design} of {len(kept)} works have no design weight in imported_design"
            if n_design
            else "unweighted: the import gives no design weights"
        )
    return ReferenceSet(
        name=name,
        model=labels[0]["model"],
        source="; ".join(sources),
        labels=kept,
        texts={r["work_id"]: info[r["work_id"]]["text"] for r in kept},
        groups={r["work_id"]: info[r["work_id"]]["group"] for r in kept},
        weights=weights,
        weighted=weighted,
        frame_works=frozenset(r["work_id"] for r in kept if r["work_id"] in in_frame),
        without_text=len(labels) - len(with_text),
        in_holdout=len(left_out),
        notes=notes,
    )


def load_reference_sets(storage: MetacanStorage, names: list[str] | None) -> dict[str, ReferenceSet]:
    """The reference sets ``names`` (None: every imported teacher, :func:`imported_teachers`; ``[]``: none), by name."""
    chosen = imported_teachers(storage) if names is None else list(names)
    sets = {name: load_reference_set(storage, name) for name in chosen}
    return {name: s for name, s in sets.items() if s.labels or names is not None}
