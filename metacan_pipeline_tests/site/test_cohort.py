"""Tests of metacan_pipeline.site.query.cohort: strict parsing with one-sentence refusals, and the canonical query hash."""

from __future__ import annotations

import hashlib
import json

import pytest

from metacan_pipeline.site.build.release import ReleaseInfo
from metacan_pipeline.site.query.cohort import encode_cursor, parse_request
from metacan_pipeline.site.query.params import CohortError

INFO = ReleaseInfo(
    release_id="release-000000000001",
    n_works=10,
    classifier_versions=("metacan-v0-hybrid-aaaaaaaaaaaa",),
    teachers=("codex", "gemma"),
    score_arms=("codex", "gemma"),
    built_at="2026-12-01 00:00:00",
    page_context={},
    ungated={"metacan-v0-hybrid-aaaaaaaaaaaa": ("sts",)},
)


def _hash(params, info=INFO):
    return parse_request(params, info)[0].query_hash()


@pytest.mark.parametrize(
    "params, says",
    [
        ([("colour", "red")], "unknown parameter 'colour'"),
        ([("language", "en"), ("language", "fr")], "'language' is given twice"),
        ([("year_min", "2020"), ("year_max", "2010")], "year_min 2020 is after year_max 2010"),
        ([("year_min", "20x0")], "not a whole number"),
        ([("year_max", "99999")], "outside 1000-2100"),
        ([("ca_aff", "maybe")], "ca_aff 'maybe' is not one of yes, no, any"),
        ([("classifier_mode", "consensus")], "classifier_mode qualifies a classifier decision"),
        ([("classifier_version", "metacan-v0-hybrid-aaaaaaaaaaaa")], "give classifier_category as well"),
        ([("classifier_category", "metaresearch")], "needs classifier_mode (candidate or consensus)"),
        ([("classifier_category", "sts"), ("classifier_mode", "consensus")], "no work can have a consensus on sts"),
        (
            [("classifier_category", "metaresearch"), ("classifier_mode", "candidate"), ("classifier_version", "v9")],
            "classifier_version 'v9' is not one of",
        ),
        ([("label_teacher", "gemma")], "label_teacher and label_agreement qualify a direct-label filter"),
        ([("label_agreement", "all")], "qualify a direct-label filter"),
        ([("label_agreement", "most")], "label_agreement 'most' is not one of any, all"),
        ([("label_category", "sts"), ("label_agreement", "all"), ("label_teacher", "gemma")], "give one or the other"),
        ([("label_category", "astrology")], "label_category 'astrology' is not one of"),
        ([("label_category", "sts"), ("label_teacher", "opus")], "label_teacher 'opus' is not one of codex, gemma"),
        ([("score_min", "0.5")], "score_min needs score_arm"),
        ([("score_arm", "gemma"), ("score_min", "0.8"), ("score_max", "0.2")], "score_min 0.8 is above score_max 0.2"),
        ([("score_arm", "gemma"), ("score_min", "nan")], "not a number in [0.0, 1.0]"),
        ([("q", "*** --")], "holds no word to search for"),
        ([("q", "a\x00b")], "control character"),
        ([("venue", "x" * 301)], "at most 300 are accepted"),
        ([("sort", "relevance")], "sort=relevance ranks matches of a text query"),
        ([("sort", "random")], "sort 'random' is not one of relevance, year, cited_by"),
        ([("limit", "0")], "limit 0 is outside 1-100"),
        ([("after", "not-a-cursor")], "the after cursor is not one this site gave"),
        ([("after", encode_cursor("cited_by", 3, 7001))], "the after cursor is not one this site gave for this sort"),
        ([("q", "research"), ("after", encode_cursor("relevance", -1.0, 2**63))], "the after cursor is not one"),
        ([("q", "research"), ("after", encode_cursor("relevance", -1.0, -(2**63) - 1))], "the after cursor is not one"),
        ([("after", encode_cursor("year", 2**64, 7001))], "the after cursor is not one this site gave"),
        ([("q", "research"), ("after", encode_cursor("relevance", 10**400, 7))], "the after cursor is not one"),
    ],
)
def test_a_refused_request_says_why_in_one_sentence(params, says):
    with pytest.raises(CohortError) as exc:
        parse_request(params, INFO)
    message = str(exc.value)
    assert says in message and message.endswith(".") and "\n" not in message


def test_a_relevance_cursor_holding_a_huge_integer_is_a_float_for_sqlite():
    _, listing = parse_request([("q", "research"), ("after", encode_cursor("relevance", 10**26, 7))], INFO)
    assert listing.after == (1e26, 7) and isinstance(listing.after[0], float)


def test_empty_fields_are_unset_and_any_is_the_default():
    cohort, listing = parse_request(
        [("language", ""), ("ca_aff", "any"), ("label_agreement", "any"), ("q", "  ")], INFO
    )
    assert cohort.filters == {} and listing.sort == "year" and listing.limit == 20 and listing.after is None
    cohort, listing = parse_request([("q", "Peer  Review"), ("limit", "5")], INFO)
    assert cohort.filters == {"q": "peer review"} and listing.sort == "relevance" and listing.limit == 5


def test_the_query_hash_is_stable_and_ignores_sort_and_page():
    base = [
        ("language", "fr"),
        ("year_min", "2010"),
        ("classifier_category", "metaresearch"),
        ("classifier_mode", "candidate"),
    ]
    h = _hash(base)
    assert len(h) == 12 and int(h, 16) >= 0
    cursor = encode_cursor("cited_by", 12, 7003)
    assert _hash(list(reversed(base))) == h
    assert (
        _hash(base + [("sort", "cited_by"), ("limit", "50"), ("after", cursor), ("venue", ""), ("ca_aff", "any")]) == h
    )
    # the classifier version named explicitly is the release's single version: the same cohort
    assert _hash(base + [("classifier_version", "metacan-v0-hybrid-aaaaaaaaaaaa")]) == h
    assert _hash([("q", "Peer review")]) == _hash([("q", "  peer   REVIEW ")])
    # filters, release and classifier version are in the hash
    assert _hash(base[:-1] + [("classifier_mode", "consensus")]) != h
    assert _hash([("year_min", "2011")] + base[:1] + base[2:]) != h
    other = ReleaseInfo(**{**INFO.__dict__, "release_id": "release-000000000002"})
    assert _hash(base, other) != h
    retrained = ReleaseInfo(**{**INFO.__dict__, "classifier_versions": ("metacan-v0-hybrid-bbbbbbbbbbbb",)})
    assert _hash([("language", "fr")], retrained) != _hash([("language", "fr")])
    # it is the SHA-256 of the canonical filters, release id and classifier version
    canonical = {
        "filters": {"classifier_category": "metaresearch", "classifier_mode": "candidate",
                    "classifier_version": "metacan-v0-hybrid-aaaaaaaaaaaa", "language": "fr", "year_min": 2010},
        "release_id": "release-000000000001",
        "classifier_version": "metacan-v0-hybrid-aaaaaaaaaaaa",
    }  # fmt: skip
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert h == hashlib.sha256(text.encode()).hexdigest()[:12]


def test_a_release_with_two_classifier_versions_needs_one_named():
    info = ReleaseInfo(**{**INFO.__dict__, "classifier_versions": ("v-a", "v-b"), "ungated": {}})
    with pytest.raises(CohortError, match="holds 2 classifier versions: name one"):
        parse_request([("classifier_category", "sts"), ("classifier_mode", "candidate")], info)
    cohort, _ = parse_request(
        [("classifier_category", "sts"), ("classifier_mode", "candidate"), ("classifier_version", "v-b")], info
    )
    assert cohort.classifier_version == "v-b"


def test_a_score_arm_alone_keeps_the_works_with_a_score_from_it():
    cohort, _ = parse_request([("score_arm", "gemma")], INFO)
    assert cohort.filters["score_arm"] == "gemma" and "score_min" not in cohort.filters
