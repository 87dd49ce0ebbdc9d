"""The student feature backends that run without PyTorch, and stacks of backends (SPEC section 6).

Every backend has the scikit-learn vectorizer interface (``fit(texts) -> self``, ``transform(texts)`` -> one row
per text, ``fit_transform``), is picklable (a loaded model is dropped from the pickle and loaded again by the
first ``transform``), deterministic (the same texts in the same order give the same rows) and names what defines
its features in ``params`` (part of a model version's content hash):

- :class:`OnnxMiniLMEncoder` (``minilm-onnx``): all-MiniLM-L6-v2 int8 through ONNX Runtime, word pieces from the
  ``tokenizers`` package, mean pooling over the attention mask and L2 normalisation as sentence-transformers
  does; 384 dimensions.
- :class:`StaticEncoder` (``static``): the model2vec static embedding distilled from the same model (a
  word-piece lookup table: the mean of the text's word-piece vectors, L2-normalised); 256 dimensions.
- :class:`MetaOneHot` (``meta``): one-hot field, type and language, read from the student text's last three
  parts (:data:`.features.STUDENT_FIELDS` ends with them).
- :class:`StackedFeatures` (a ``+``-joined kind, e.g. ``static+tfidf+meta``): the parts side by side
  (a sparse CSR matrix when any part is sparse), each part's rows of norm at most 1.

The two encoders read their files from the encoder cache (:mod:`.encoders`); a missing artifact is built on
first use when the bundled weights are installed.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import numpy as np

from . import encoders
from .embeddings import LazyModel

#: word pieces per text at most (sentence-transformers' ``max_seq_length`` of all-MiniLM-L6-v2)
MAX_LENGTH = 256
ONNX_DIM = 384
#: Student text parts read by :class:`MetaOneHot`, the last three of :data:`.features.STUDENT_FIELDS`.
META_FIELDS = ("field", "type", "language")
SEPARATOR = " | "


def _require(module: str, requirement: str, backend: str) -> None:
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ImportError(
            f"the {backend} feature backend needs {requirement}: pip install {requirement} "
            "(in pyproject.toml's dependencies: `make setup` installs it and builds the encoders)"
        )


class _Encoder(LazyModel):
    """Shared pickling and vectorizer plumbing of the two encoder backends."""

    name = ""

    @property
    def params(self) -> dict:
        """What defines the features: the artifact's key (source weights' SHA-256, recipe, library versions)."""
        return encoders.artifact_key(self.name)

    def fit(self, texts: Sequence[str] | None = None, y=None):
        """No-op (pretrained); returns ``self`` without loading the model."""
        return self

    def fit_transform(self, texts: Sequence[str], y=None) -> np.ndarray:
        """``fit(texts).transform(texts)``."""
        return self.fit(texts).transform(texts)


class OnnxMiniLMEncoder(_Encoder):
    """all-MiniLM-L6-v2 (int8, ONNX Runtime): ``transform(texts)`` -> ``float32 (n, 384)``, rows of L2 norm 1.

    Texts are encoded in batches of ``batch_size`` after sorting by word-piece count (less padding), and put
    back in input order. The int8 activations are quantised with one scale per batch, so with ``batch_size`` above
    1 a text's row depends on its batch companions (up to 0.04 per coordinate): the default, 1, makes every row
    depend on its own text only (about 20% slower than batches of 64 on pilot titles). Close to the PyTorch
    ``minilm`` rows (cosine 0.99 on average on pilot titles). ONNX Runtime runs on ``threads`` intra-op threads.

    Raises ImportError naming ``make setup`` at construction when onnxruntime or tokenizers is missing.
    """

    name = "minilm-onnx"

    def __init__(self, batch_size: int = 1, threads: int = 2) -> None:
        _require("onnxruntime", "onnxruntime==1.31.1", self.name)
        _require("tokenizers", "tokenizers==0.23.3", self.name)
        self.batch_size = batch_size
        self.threads = threads
        self._model = None

    def __repr__(self) -> str:
        return f"OnnxMiniLMEncoder(batch_size={self.batch_size}, threads={self.threads})"

    def _load(self):
        if self._model is None:
            import onnxruntime as ort
            from tokenizers import Tokenizer

            path = encoders.ensure(self.name)
            tok = Tokenizer.from_file(str(path / "tokenizer.json"))
            tok.enable_truncation(MAX_LENGTH)
            tok.no_padding()
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = self.threads
            opts.inter_op_num_threads = 1
            session = ort.InferenceSession(str(path / "model.int8.onnx"), opts, providers=["CPUExecutionProvider"])
            self._model = (tok, session)
        return self._model

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: ``float32 (len(texts), 384)``, each row L2-normalised."""
        texts = [t if isinstance(t, str) else str(t) for t in texts]
        out = np.empty((len(texts), ONNX_DIM), dtype=np.float32)
        if not texts:
            return out
        tok, session = self._load()
        encoded = tok.encode_batch(texts)
        order = np.argsort([len(e.ids) for e in encoded], kind="stable")
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(encoded[i].ids) for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = len(encoded[i].ids)
                ids[row, :n] = encoded[i].ids
                mask[row, :n] = 1
            hidden = session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
            out[idx] = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return out


class StaticEncoder(_Encoder):
    """The model2vec static embedding distilled from all-MiniLM-L6-v2: ``transform(texts)`` ->
    ``float32 (n, 256)``, rows of L2 norm 1 (a text without a known word piece: a zero row). A row depends on
    its text only. Raises ImportError naming ``make setup`` at construction when model2vec is missing."""

    name = "static"

    def __init__(self, batch_size: int = 1024) -> None:
        _require("model2vec", "model2vec==0.10.0", self.name)
        self.batch_size = batch_size
        self._model = None

    def __repr__(self) -> str:
        return f"StaticEncoder(batch_size={self.batch_size})"

    def _load(self):
        if self._model is None:
            from model2vec import StaticModel

            self._model = StaticModel.from_pretrained(str(encoders.ensure(self.name)))
        return self._model

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: ``float32 (len(texts), 256)``."""
        texts = [t if isinstance(t, str) else str(t) for t in texts]
        model = self._load()
        if not texts:
            return np.empty((0, model.dim), dtype=np.float32)
        emb = model.encode(
            texts, max_length=MAX_LENGTH, batch_size=self.batch_size, show_progress_bar=False, use_multiprocessing=False
        )
        return np.asarray(emb, dtype=np.float32)


def meta_values(text: str) -> list[str]:
    """``[field, type, language]`` of a student text (its last three parts, case-folded; empty when absent)."""
    tail = text.rsplit(SEPARATOR, len(META_FIELDS))[1:]
    return [p.strip().casefold() for p in [""] * (len(META_FIELDS) - len(tail)) + tail]


class MetaOneHot:
    """One-hot field, type and language of each student text (:func:`meta_values`), scaled so a row's norm is
    1: ``fit(texts)`` learns the values seen (an unseen value at ``transform`` is an all-zero part), and
    ``transform`` returns a sparse CSR ``float32`` matrix."""

    def __init__(self) -> None:
        self.encoder_ = None

    @property
    def params(self) -> dict:
        return {"fields": list(META_FIELDS), "scale": "1/sqrt(3)"}

    def fit(self, texts: Sequence[str], y=None) -> MetaOneHot:
        from sklearn.preprocessing import OneHotEncoder

        rows = [meta_values(t) for t in texts] or [[""] * len(META_FIELDS)]
        self.encoder_ = OneHotEncoder(handle_unknown="ignore", dtype=np.float32).fit(np.array(rows, dtype=object))
        return self

    def transform(self, texts: Sequence[str]):
        if self.encoder_ is None:
            raise ValueError("MetaOneHot.transform before fit: fit it on the training texts first")
        rows = np.array([meta_values(t) for t in texts], dtype=object).reshape(-1, len(META_FIELDS))
        return (self.encoder_.transform(rows) * np.float32(1 / np.sqrt(len(META_FIELDS)))).tocsr().astype(np.float32)

    def fit_transform(self, texts: Sequence[str], y=None):
        return self.fit(texts).transform(texts)


class StackedFeatures:
    """Backends side by side: ``parts`` is ``[(kind, backend), ...]``; ``fit`` fits each on the same texts,
    ``transform`` stacks their matrices horizontally in that order (CSR ``float32`` when a part is sparse,
    else a dense ``float32`` array)."""

    def __init__(self, parts: list[tuple[str, object]]) -> None:
        if len(parts) < 2:
            raise ValueError("a stacked feature backend needs at least two parts (kinds joined by '+')")
        self.parts = parts

    def __repr__(self) -> str:
        return f"StackedFeatures({'+'.join(k for k, _ in self.parts)})"

    @property
    def kind(self) -> str:
        return "+".join(k for k, _ in self.parts)

    @property
    def params(self) -> dict:
        """Each part's ``params``; a part without them (scikit-learn's TF-IDF) by its ``get_params()`` (a function,
        such as ``title-char``'s preprocessor, by its module and name: its ``str`` holds a memory address)."""

        def text(v) -> str:
            return f"{v.__module__}.{v.__qualname__}" if inspect.isfunction(v) else str(v)

        return {
            k: b.params if hasattr(b, "params") else {p: text(v) for p, v in sorted(b.get_params().items())}
            for k, b in self.parts
        }

    def fit(self, texts: Sequence[str], y=None) -> StackedFeatures:
        texts = list(texts)
        for _, backend in self.parts:
            backend.fit(texts)
        return self

    def transform(self, texts: Sequence[str]):
        import scipy.sparse as sp

        texts = list(texts)
        # scikit-learn's vectorizers refuse an empty list: a part then gets a matrix of 0 rows
        blocks = [b.transform(texts) if texts else b.transform([""])[:0] for _, b in self.parts]
        if any(sp.issparse(b) for b in blocks):
            return sp.hstack([sp.csr_matrix(b, dtype=np.float32) for b in blocks], format="csr", dtype=np.float32)
        return np.hstack(blocks).astype(np.float32, copy=False)

    def fit_transform(self, texts: Sequence[str], y=None):
        return self.fit(texts).transform(texts)
