"""Immutable student model versions (SPEC section 6: "a version, once published, is immutable").

A model version names a content hash of the code version, the training data and the parameters, so the
same inputs give the same version. The first time a version is trained its joblib file is written to
``data/models/<model_version>.joblib`` and registered in the DuckDB table ``model_versions`` with the
file's SHA-256. Later, the same version is loaded from that file and never trained or written again; a
registered version whose file is missing or whose bytes changed is refused (:class:`ModelVersionError`),
never silently rebuilt under the same name.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import joblib

from ..storage import MetacanStorage
from .calibration import GateResult

if TYPE_CHECKING:  # heads imports scikit-learn (about 4 s): the Dagster definitions import this module without it
    from .heads import Head


@dataclass(frozen=True)
class Scorer:
    """What scores works (:func:`~.scoring.score_batches`): the fitted feature backend and the fitted heads,
    ``heads[teacher][target]`` (:class:`~.heads.BinaryHead` or :class:`~.heads.CategoricalHead`)."""

    vectorizer: Any
    heads: Mapping[str, Mapping[str, Head]]


@dataclass(frozen=True)
class StudentBundle(Scorer):
    """A trained student model version, built once by :func:`~.training.train_bundle` and then only read:
    the scorer, which works trained which teacher's heads (``training_ids``), the support gate of every
    head (``gates``, SPEC section 6) and the design-weighted decision rate of every binary target
    (``rates``, for quota calibration), and what each reference set that trained heads of its own is
    (``reference_sets``, :func:`~.training.reference_summaries`: machine scores only, never a decision), and how
    its binary heads were distilled (``distillation``: encoder, ridge penalty, transfer works; empty: not distilled,
    :mod:`.distill`).
    :func:`publish` stores it; :func:`load_published` returns it."""

    model_version: str = ""
    feature_kind: str = ""
    holdout_version: str = ""
    training_ids: Mapping[str, list[str]] = field(default_factory=dict)
    gates: Mapping[str, GateResult] = field(default_factory=dict)
    rates: Mapping[str, float] = field(default_factory=dict)
    reference_sets: Mapping[str, dict] = field(default_factory=dict)
    distillation: Mapping[str, object] = field(default_factory=dict)


class ModelVersionError(RuntimeError):
    """A published model version's file is missing or was altered."""


def model_path(storage: MetacanStorage, model_version: str) -> Path:
    """``<data>/models/<model_version>.joblib``."""
    return storage.root / "models" / f"{model_version}.joblib"


def registered_file(storage: MetacanStorage, model_version: str, file: str) -> Path:
    """The file a ``model_versions`` row names: a relative path is under the data folder (``models/<version>.joblib``,
    so a moved or copied data folder keeps its models); an absolute path written by older code is used when it
    exists, else the version's file under this data folder (the SHA-256 check still decides whether it is the one)."""
    path = Path(file)
    if not path.is_absolute():
        return storage.root / path
    return path if path.exists() else model_path(storage, model_version)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_published(storage: MetacanStorage, model_version: str) -> StudentBundle | None:
    """The bundle of a registered version (checked against its SHA-256), or None when not registered.

    Raises ModelVersionError when the registered file is missing, its bytes changed, or it holds a bundle
    of older code (a dict: model versions name the code version, so new code trains its own version).
    """
    with storage.connect() as con:
        row = con.execute(
            "SELECT file, file_sha256 FROM model_versions WHERE model_version = ?", [model_version]
        ).fetchone()
    if row is None:
        return None
    path = registered_file(storage, model_version, row[0])
    if not path.exists():
        raise ModelVersionError(
            f"model version {model_version} is registered in model_versions but its file {path} is missing; "
            f"a published version is immutable and is not rebuilt under the same name: restore the file "
            f"(from a backup of {path.parent}) or delete its row from model_versions on purpose"
        )
    if (sha := _sha256(path)) != row[1]:
        raise ModelVersionError(
            f"model version {model_version}: {path} has SHA-256 {sha}, registered {row[1]}: the file was "
            f"altered after publication; restore the original"
        )
    bundle = joblib.load(path)
    if not isinstance(bundle, StudentBundle):
        raise ModelVersionError(
            f"model version {model_version}: {path} holds a {type(bundle).__name__}, not a StudentBundle: it was "
            f"published by older code (before the estimator heads); materialize student_heads, which trains a new version"
        )
    return bundle


def publish(
    storage: MetacanStorage, bundle: StudentBundle, *, kind: str, run_id: str, feature_kind: str, summary: dict
) -> Path:
    """Write ``bundle`` (it carries ``model_version``) once and register it; returns the file path."""
    version = bundle.model_version
    path = model_path(storage, version)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    joblib.dump(bundle, tmp)
    tmp.replace(path)
    with storage.connect() as con:
        con.execute(
            "INSERT INTO model_versions VALUES (?, ?, now(), ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [
                version,
                kind,
                run_id,
                path.relative_to(storage.root).as_posix(),
                _sha256(path),
                feature_kind,
                json.dumps(summary, default=str),
            ],
        )
    return path
