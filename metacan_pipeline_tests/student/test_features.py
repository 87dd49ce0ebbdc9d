"""Tests of metacan_pipeline.student.features: the student text and the feature backends."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from metacan_pipeline.student.features import FEATURE_KINDS, STUDENT_FIELDS, make_features, student_text
from metacan_pipeline.student.scoring import student_texts
from metacan_pipeline_tests.builders.student import REPRO, SOIL, student_frame_rows


def test_student_text_ignores_every_field_the_frame_cannot_supply():
    row = student_frame_rows()[0]
    with_abstract = {**row, "abstract": "SECRET abstract words", "abstract_inverted_index": {"SECRET": [0]}}
    assert student_text(with_abstract) == student_text(row)
    assert "SECRET" not in student_texts(pa.Table.from_pylist([with_abstract]))[0]
    assert student_texts(pa.Table.from_pylist([row, {**row, "venue_name": None}])) == [
        student_text(row),
        student_text({**row, "venue_name": None}),
    ]


def test_keywords_enter_the_student_text_joined_and_without_null_entries():
    """Arrow's batch texts (scoring) equal the row texts (training) for a list column with nulls, empty lists and
    a null list."""
    base = student_frame_rows()[0]
    rows = [
        {**base, "keywords": ["peer review", None, "open science"]},
        {**base, "keywords": []},
        {**base, "keywords": None},
    ]
    texts = student_texts(pa.Table.from_pylist(rows))
    assert texts == [student_text(r) for r in rows]
    assert texts[0].split(" | ")[3] == "peer review; open science" and texts[1] == texts[2] == student_text(base)


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="tfidf, tfidf-char, title-char, minilm"):
        make_features("bert")


def test_the_character_tfidf_reads_word_forms_the_word_tfidf_splits():
    from metacan_pipeline.student.features import CHAR_TFIDF_PARAMS, TFIDF_PARAMS, feature_params

    texts = ["Replication of trials", "Replications in psychology", "Soil nitrogen"]
    words, chars = make_features("tfidf").fit(texts), make_features("tfidf-char").fit(texts)
    # "replication" and "replications" share no word feature, but most of their character n-grams
    assert (words.transform(texts[:1]) @ words.transform(texts[1:2]).T).toarray()[0, 0] == 0
    assert (chars.transform(texts[:1]) @ chars.transform(texts[1:2]).T).toarray()[0, 0] > 0.3
    assert (chars.transform(texts[:1]) @ chars.transform(texts[2:3]).T).toarray()[0, 0] < 0.1
    assert feature_params(chars) == {"tfidf-char": CHAR_TFIDF_PARAMS} and feature_params(words) == {
        "tfidf": TFIDF_PARAMS
    }
    both = make_features("tfidf+tfidf-char").fit(texts)
    assert both.transform(texts).shape[1] == len(words.vocabulary_) + len(chars.vocabulary_)
    assert both.params["tfidf-char"]["analyzer"] == "char_wb"


@pytest.mark.slow
@pytest.mark.parametrize("kind", FEATURE_KINDS)
def test_no_abstract_derived_feature_reaches_the_student(kind, encoder):
    """SPEC section 6: the student reads the title-only view. A row that carries the abstract (as a
    record view or a raw OpenAlex work would) gives the same text and the same features."""
    abstract = "We re-ran one hundred published experiments and found that only a third replicated."
    with_abstract = {
        **REPRO,
        "abstract": abstract,
        "abstract_text": abstract,
        "has_abstract": True,
        "abstract_inverted_index": {"We": [0], "re-ran": [1], "experiments": [4], "replicated": [13]},
    }
    assert not any("abstract" in f for f in STUDENT_FIELDS)
    text, text_with = student_text(REPRO), student_text(with_abstract)
    assert (
        text
        == text_with
        == "Reproducibility of published psychology experiments | Psychological Science |  |  |  | article | en"
    )
    assert "replicated" not in text_with and "hundred" not in text_with
    backend = encoder if kind == "minilm" else make_features(kind).fit([text, student_text(SOIL)])
    a, b = backend.transform([text]), backend.transform([text_with])
    a, b = (a.toarray(), b.toarray()) if hasattr(a, "toarray") else (a, b)
    assert np.array_equal(a, b)


def test_the_title_character_tfidf_reads_the_title_alone_and_pickles_with_a_stable_hash():
    import io

    import joblib

    from metacan_pipeline.student.backends import StackedFeatures
    from metacan_pipeline.student.features import TITLE_CHAR_TFIDF_PARAMS, feature_params, title_of

    a = "Replication of Trials | Journal of Soil | Soil Science | nitrogen | Agricultural | article | en"
    b = "Replication of Trials | Revue de droit | Law | | Social Sciences | article | fr"
    assert title_of(a) == "replication of trials"
    chars = make_features("title-char").fit([a, b, "Soil nitrogen | x | y | | z | article | en"])
    # the same title under another venue, topic and language: the same features; only 3-5 grams of the title
    assert (chars.transform([a]) != chars.transform([b])).nnz == 0
    assert "journ" not in chars.vocabulary_ and "revue" not in chars.vocabulary_  # venues are not read
    assert {len(g) for g in chars.vocabulary_} <= {3, 4, 5} and " tr" in chars.vocabulary_
    assert feature_params(chars) == {"title-char": TITLE_CHAR_TFIDF_PARAMS}
    stack = make_features("tfidf+title-char").fit([a, b])
    assert isinstance(stack, StackedFeatures)
    # the model version hashes the preprocessor by name, never by a memory address
    assert stack.params["title-char"]["preprocessor"] == "metacan_pipeline.student.features.title_of"
    buf = io.BytesIO()
    joblib.dump(stack, buf)
    buf.seek(0)
    assert (joblib.load(buf).transform([a]) != stack.transform([a])).nnz == 0
