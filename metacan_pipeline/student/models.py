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
from pathlib import Path

import joblib

from ..storage import MetacanStorage


class ModelVersionError(RuntimeError):
    """A published model version's file is missing or was altered."""


def model_path(storage: MetacanStorage, model_version: str) -> Path:
    """``<data>/models/<model_version>.joblib``."""
    return storage.root / "models" / f"{model_version}.joblib"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_published(storage: MetacanStorage, model_version: str) -> dict | None:
    """The bundle of a registered version (checked against its SHA-256), or None when not registered.

    Raises ModelVersionError when the registered file is missing or its bytes changed.
    """
    with storage.connect() as con:
        row = con.execute(
            "SELECT file, file_sha256 FROM model_versions WHERE model_version = ?", [model_version]
        ).fetchone()
    if row is None:
        return None
    path = Path(row[0])
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
    return joblib.load(path)


def publish(storage: MetacanStorage, bundle: dict, *, kind: str, run_id: str, feature_kind: str, summary: dict) -> Path:
    """Write ``bundle`` (it carries ``model_version``) once and register it; returns the file path."""
    version = bundle["model_version"]
    path = model_path(storage, version)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    joblib.dump(bundle, tmp)
    tmp.replace(path)
    with storage.connect() as con:
        con.execute(
            "INSERT INTO model_versions VALUES (?, ?, now(), ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [version, kind, run_id, str(path), _sha256(path), feature_kind, json.dumps(summary, default=str)],
        )
    return path
