"""Tests of metacan_pipeline.teachers.core.validate: the label rules, reply schemas and batch validation."""

from __future__ import annotations

import json

import pytest

from metacan_pipeline.teachers.calling.replies import validate_batch
from metacan_pipeline.teachers.core.validate import InvalidLabel, batch_reply_schema, reply_schema, validate_label
from metacan_pipeline_tests.builders.teachers import GOOD_LABEL, GOOD_REPLY


def test_absent_fields_are_none_and_must_not_be_given():
    lab = validate_label(
        {"id": "W1", "categories": ["metaresearch"], "confidence": "low", "genre": None},
        "W1",
        absent=frozenset({"domain", "study_design", "genre", "about_ca_system", "about_ca_topic", "reason"}),
    )
    assert (lab.categories, lab.confidence) == (("metaresearch",), "low")
    assert [lab.domain, lab.study_design, lab.genre, lab.about_ca_system, lab.about_ca_topic, lab.reason] == [None] * 6
    with pytest.raises(InvalidLabel, match="declared not to provide 'study_design'"):
        validate_label(GOOD_LABEL, "W1", absent=frozenset({"study_design"}))
    # A field present is validated as before, and without 'absent' nothing changed.
    with pytest.raises(InvalidLabel, match="genre='poem'"):
        validate_label({**GOOD_LABEL, "study_design": None, "genre": "poem"}, "W1", absent=frozenset({"study_design"}))
    with pytest.raises(InvalidLabel, match="missing field 'study_design'"):
        validate_label({k: v for k, v in GOOD_LABEL.items() if k != "study_design"}, "W1")
    with pytest.raises(ValueError, match="can be absent"):
        validate_label(GOOD_LABEL, "W1", absent=frozenset({"categories"}))


def test_domain_rule_only_when_domain_is_given():
    # Without 'metaresearch' a substantive domain is an error; with domain absent there is no domain to check.
    with pytest.raises(InvalidLabel, match="without the category 'metaresearch'"):
        validate_label({**GOOD_LABEL, "categories": []}, "W1")
    assert (
        validate_label({**GOOD_LABEL, "categories": [], "domain": None}, "W1", absent=frozenset({"domain"})).domain
        is None
    )


def test_validate_normalises_a_good_label():
    lab = validate_label(GOOD_REPLY, "W1")
    assert lab.categories == ("metaresearch", "open_science")
    assert len(lab.reason) == 400 and lab.domain == "reproducibility"


@pytest.mark.parametrize(
    "change, rule",
    [
        ({"id": "W2"}, "differs from the requested id"),
        ({"categories": ["metascience"]}, "not in the vocabulary"),
        ({"categories": ["insufficient_payload", "sts"]}, "must be the only category"),
        ({"categories": ["sts"], "domain": "methods"}, "without the category 'metaresearch'"),
        ({"categories": ["metaresearch"], "domain": "not_metaresearch"}, "contradicts"),
        ({"genre": "novel"}, "genre='novel'"),
        ({"about_ca_topic": "yes"}, "not a boolean"),
        ({"confidence": None}, "confidence=None"),
    ],
)
def test_validate_rejects_rule_breaks(change, rule):
    with pytest.raises(InvalidLabel, match=rule):
        validate_label({**GOOD_REPLY, **change}, "W1")


def test_not_metaresearch_domain_without_metaresearch_becomes_null():
    assert validate_label({**GOOD_REPLY, "categories": [], "domain": "not_metaresearch"}, "W1").domain is None


def test_schema_bounds_arrays_and_pins_the_id():
    s = reply_schema("W7")
    assert s["properties"]["id"]["enum"] == ["W7"] and s["properties"]["categories"]["maxItems"] == 3
    assert s["additionalProperties"] is False and set(s["required"]) == set(GOOD_REPLY)


def test_llama_cpp_grammar_pins_each_id_in_order():
    s = batch_reply_schema(["W1", "W2"], rules_in_grammar=True)["properties"]["labels"]
    assert [branch["properties"]["id"]["enum"] for item in s["prefixItems"] for branch in item["anyOf"][:1]] == [
        ["W1"],
        ["W2"],
    ]
    assert s["minItems"] == s["maxItems"] == 2


def test_validate_batch_rules():
    two = [{**GOOD_REPLY, "id": "W1"}, {**GOOD_REPLY, "id": "W2"}]
    assert set(validate_batch(json.dumps({"labels": two + [two[0]]}), ["W1", "W2"])) == {
        "W1",
        "W2",
    }  # exact duplicate dropped
    assert set(validate_batch("```json\n" + json.dumps(two) + "\n```", ["W1", "W2"])) == {
        "W1",
        "W2",
    }  # fenced bare list
    with pytest.raises(InvalidLabel, match="two different labels for id 'W1'"):
        validate_batch(json.dumps({"labels": two + [{**two[0], "genre": "review"}]}), ["W1", "W2"])
    with pytest.raises(InvalidLabel, match="not asked \\['W3'\\]"):
        validate_batch(json.dumps({"labels": [two[0], {**GOOD_REPLY, "id": "W3"}]}), ["W1", "W2"])
