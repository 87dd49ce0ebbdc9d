"""The layer of a published record: in the newest frozen release, or in the rolling layer after it (SPEC section 8).

- ``layer`` is the newest release's version for a work in that release's frozen frame, ``rolling`` for a work that
  entered the frame after it, and ``unreleased`` while no release has been cut (SPEC section 10: a release freezes
  what exists; *later* works form the rolling layer, so before the first release there is no rolling layer).
- A rolling-layer work keeps its direct labels and every score, but no classifier category: candidate and consensus
  (the nine categories, the two about-Canada heads, the categorical heads and the distilled Codex call of each) are
  withheld unless that classifier version and head passed human validation (the newest ``human_validation`` row of a
  locked protocol passed, as for the records' ``human_validated:<protocol>`` status). The categorical
  heads are never evaluated by a protocol (its heads are binary), so they are always withheld on a rolling work.

The newest release is the last row of the DuckDB table ``releases`` (written by the asset ``release``); whether a
head passed is read from ``human_validation`` (written by ``validation_report``; no row means not passed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from ..storage import MetacanStorage
from ..vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS
from .gate import passing_heads
from .release_layers import FIELD as RELEASE_LAYER
from .release_layers import release_layer

UNRELEASED = "unreleased"
ROLLING = "rolling"
#: Where a release keeps its frozen tables, relative to its folder.
TABLES_DIR = "tables"


def releases_root(storage: MetacanStorage) -> Path:
    """``<data dir>/releases``: one folder per release version."""
    return storage.root / "releases"


@dataclass(frozen=True)
class NewestRelease:
    """The newest row of ``releases``."""

    release_version: str
    folder: Path
    classifier_version: str
    frame_build_id: str

    @property
    def frame_file(self) -> Path:
        return self.folder / TABLES_DIR / "frame.parquet"


def newest_release(storage: MetacanStorage) -> NewestRelease | None:
    """The newest release cut (``releases``, by ``created_at``), or None before the first one."""
    with storage.connect() as con:
        row = con.execute(
            "SELECT release_version, folder, classifier_version, frame_build_id FROM releases "
            "ORDER BY created_at DESC, release_version DESC LIMIT 1"
        ).fetchone()
    if row is None:
        return None
    return NewestRelease(row[0], releases_root(storage) / row[1], row[2], row[3])


def passed_heads(con: duckdb.DuckDBPyConnection) -> frozenset[tuple[str, str]]:
    """``(classifier_version, head)`` that passed human validation: the newest ``human_validation`` row of some
    locked protocol passed for it (:func:`.gate.passing_heads`, the rule behind the
    records' ``human_validated:<protocol>`` status, so a head shown as validated is never withheld)."""
    return frozenset((v, row["head"]) for v, rows in passing_heads(con).items() for row in rows)


@dataclass(frozen=True)
class LayerRule:
    """Which layer a record is in and what a rolling-layer record may show (module docstring)."""

    release: NewestRelease | None = None
    passed: frozenset[tuple[str, str]] = frozenset()

    @property
    def release_frame(self) -> Path | None:
        return self.release.frame_file if self.release is not None else None

    def layer(self, in_release: bool) -> str:
        if self.release is None:
            return UNRELEASED
        return self.release.release_version if in_release else ROLLING

    def apply(self, record: dict, in_release: bool) -> dict:
        """Set ``record["layer"]``; on a rolling-layer record, withhold every classifier category of a head that has
        not passed human validation for the prediction's classifier version. Returns the record (changed in place)."""
        record["layer"] = self.layer(in_release)
        pred = record.get("prediction")
        if record["layer"] == ROLLING and pred:
            withhold(pred, lambda head: (pred.get("model_version"), head) in self.passed)
        return record


def withhold(pred: dict, passed) -> None:
    """Remove from a prediction every classifier category whose head ``passed(head)`` is false (scores stay)."""
    for mode in ("candidate", "consensus"):
        key = f"{mode}_categories"
        pred[key] = [c for c in pred.get(key) or [] if passed(c)]
        for t in ABOUT_CA_TARGETS:
            if not passed(t):
                pred[f"{t}_{mode}"] = None
    for t in CATEGORICAL_TARGETS:
        if not passed(t):
            pred[f"{t}_candidate"] = pred[f"{t}_consensus"] = pred[f"{t}_codex"] = None


#: The prediction fields :func:`withhold` may clear on a rolling-layer record.
WITHHELD_FIELDS: tuple[str, ...] = (
    "candidate_categories",
    "consensus_categories",
    *(f"{t}_{mode}" for t in ABOUT_CA_TARGETS for mode in ("candidate", "consensus")),
    *(f"{t}_{mode}" for t in CATEGORICAL_TARGETS for mode in ("candidate", "consensus", "codex")),
)


def frozen_record(record: dict, release_version: str, prediction: dict | None) -> dict:
    """``record`` as the release ``release_version`` freezes it: every work of the frozen frame is in that release,
    so its ``layer`` is ``release_version``, and a record published in the rolling layer gets back the classifier
    categories :func:`withhold` cleared, from ``prediction`` (its row of the frozen predictions), and its
    ``release_layer`` is computed again over what it now shows (:mod:`.release_layers`). The result is the
    record ``work_records`` writes once the release is registered. Returns the record (changed in place).

    Raises ValueError naming the work when a rolling-layer record with a prediction has no ``prediction`` row
    (the predictions changed after ``work_records``: re-materialize it, then cut again)."""
    if record.get("layer") == ROLLING and record.get("prediction"):
        if prediction is None:
            raise ValueError(
                f"{record.get('id')}: its record is in the rolling layer with a prediction, but the frozen "
                f"predictions have no row for it: re-materialize work_records, then cut the release again"
            )
        for key in WITHHELD_FIELDS:
            if key in record["prediction"]:
                value = prediction.get(key)
                record["prediction"][key] = list(value) if isinstance(value, tuple) else value
    record["layer"] = release_version
    record[RELEASE_LAYER] = release_layer(record)
    return record


def rolling_violations(record: dict, passed: frozenset[tuple[str, str]]) -> list[str]:
    """SPEC section 8 on a rolling-layer record: every classifier category from a (version, head) that has not passed
    human validation, as ``"<id>: rolling layer: ..."`` (empty for a record of a release, or before any release)."""
    pred = record.get("prediction") or {}
    if record.get("layer") != ROLLING or not pred:
        return []
    version = pred.get("model_version")
    shown = [c for m in ("candidate", "consensus") for c in pred.get(f"{m}_categories") or []]
    shown += [t for t in ABOUT_CA_TARGETS for m in ("candidate", "consensus") if pred.get(f"{t}_{m}") is not None]
    shown += [t for t in CATEGORICAL_TARGETS for m in ("candidate", "consensus", "codex") if pred.get(f"{t}_{m}")]
    return [
        f"{record.get('id')}: rolling layer: classifier category {head!r} of {version} shown, but that head has not "
        f"passed human validation (human_validation has no passing row); re-materialize work_records"
        for head in dict.fromkeys(shown)
        if (version, head) not in passed
    ]


def layer_rule(storage: MetacanStorage) -> LayerRule:
    """The rule of the current ``releases`` and ``human_validation`` tables. Raises FileNotFoundError naming the file
    when the newest release's frozen frame is gone (a bundle is never rewritten: restore it from a backup)."""
    release = newest_release(storage)
    if release is not None and not release.frame_file.is_file():
        raise FileNotFoundError(
            f"the newest release {release.release_version} has no frozen frame at {release.frame_file}: the records "
            f"cannot tell its works from the rolling layer; restore data/releases/{release.folder.name}/ from a backup"
        )
    with storage.connect() as con:
        passed = passed_heads(con)
    return LayerRule(release, passed)
