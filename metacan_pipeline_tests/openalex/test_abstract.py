"""Tests of metacan_pipeline.openalex.abstract: deinverting OpenAlex abstract indexes, markup to text, work ids."""

from __future__ import annotations

import json
from pathlib import Path

from metacan_pipeline.openalex.abstract import deinvert, markup_to_text, tidy_abstract
from metacan_pipeline.openalex.ids import is_work_id, short_id
from metacan_pipeline_tests.builders.openalex import LME4_ABSTRACT
from metacan_pipeline_tests.openalex_stub import real_index as _index


def test_deinvert_punctuation_bearing_tokens_real_lme4():
    idx = _index("W1951724000")
    assert {"R.", "(REML)", "formula,"} <= set(idx)
    assert deinvert(idx) == LME4_ABSTRACT and len(LME4_ABSTRACT.split()) == sum(map(len, idx.values()))


def test_deinvert_position_gap_real():
    idx = _index("W2241997964")  # positions 0..214 with 81 absent
    positions = sorted(p for ps in idx.values() for p in ps)
    assert 81 not in positions and positions[-1] + 1 == len(positions) + 1
    text = deinvert(idx)
    assert "record the world we live in." in text and " monuments. In " in text  # positions 80 and 82, adjacent
    assert len(text.split()) == len(positions)


def test_deinvert_html_fragments_and_entities_real():
    anopheles = tidy_abstract(deinvert(_index("W4390096338")))  # "<h2>Abstract</h2>" "The" ... "<i>Anopheles"
    assert anopheles.startswith("The encroachment and rapid spread of Anopheles stephensi across Africa")
    assert "<" not in anopheles and "Abstract" not in anopheles[:20]
    assert deinvert(_index("W4394648045")).startswith("New antimalarial drug candidates")  # "<title>Abstract</title>"
    jats = deinvert(_index("W1637437975"))  # "<JATS1:p>The" ... "Edition.</JATS1:p>" "<JATS1:p>Volume"
    assert (
        jats.startswith("The wholly updated Revised Standard Edition")
        and "previous Standard Edition. Volume VIII" in jats
    )
    assert "JATS" not in jats
    assert "p<0.05 in each case." in deinvert(_index("W2807229659"))  # "p&lt;0.05"
    twice = _index("W3131055609")  # "&amp;gt;1": escaped twice at the source
    assert "installed &gt;1 million times" in deinvert(twice)
    assert "installed >1 million times via Bioconda." in tidy_abstract(deinvert(twice))
    assert deinvert({"<p>Using": [0], "<i>lme4</i>": [1], "&amp;": [2], "R</p>": [3]}) == "Using lme4 & R"


def test_deinvert_leading_abstract_label_real():
    assert deinvert(_index("W2153248255")).startswith("Antibody responses against proteins")  # "ABSTRACT"
    assert deinvert(_index("W4323311997")).startswith("In the pivotal phase 3 efficacy trial")  # "ABSTRACT."
    assert deinvert(_index("W2142541574")).startswith("I reviewed some of the financial mechanisms")  # "Abstract:"
    glued = deinvert(_index("W4250667698"))  # "AbstractConservation": the label glued to the first word
    assert glued.startswith("AbstractConservation") and tidy_abstract(glued).startswith("Conservation methods often")
    assert (
        tidy_abstract("AbstractAbstractThis paper") == "This paper" and tidy_abstract("AbstractA survey") == "A survey"
    )
    assert tidy_abstract("Abstraction matters") == "Abstraction matters" and tidy_abstract(None) is None
    assert deinvert({"Abstract": [0]}) == "Abstract"  # a lone label is all there is: kept
    assert deinvert({"Abstract": [0, 2], "—": [1], "Abstract-based": [3], "art.": [4]}) == "Abstract-based art."
    assert deinvert({"Abstract": [0, 1], "Results": [2]}) == "Results"


def test_deinvert_empty_tokens_and_empty_mappings():
    text = deinvert(_index("W1926314100"))  # holds the token ""
    assert "  " not in text and text.startswith("The Vth World Parks Congress")
    assert deinvert({"": [0], " ": [1], "\n": [2]}) is None
    for nothing in (None, {}, [], "text", {"a": []}, {"a": None}):
        assert deinvert(nothing) is None


def test_deinvert_hostile_positions():
    assert deinvert({"late": [-1], "first": [0], "second": [1]}) == "first second"  # negative: dropped
    assert deinvert({"far": [10**15], "near": [0]}) == "near far"  # huge: sorted, no huge buffer
    assert deinvert({"far": [2**70]}) == "far"
    assert deinvert({"half": [1.5], "nan": [float("nan")], "str": ["2"], "ok": [0], "none": [None]}) == "ok"
    assert deinvert({"scalar": 3, "list": [0], "dict": {"0": 1}}) == "list"  # non-list positions: ignored
    assert deinvert({"b": [1, 10**9], "a": [0]}) == "a b b"  # sparse: order kept


def test_deinversion_handles_gaps_and_leading_label(openalex_dir: Path):
    work = json.loads((openalex_dir / "Mearman__Academic-Explorer__work_W2241997964.json").read_text())
    index = work["abstract_inverted_index"]
    text = deinvert(index)
    n_tokens = sum(len(v) for v in index.values())
    assert max(p for v in index.values() for p in v) + 1 > n_tokens  # the real record has a gap
    assert len(text.split()) == n_tokens
    assert deinvert({"Abstract": [0], "Results": [1], "<p>matter.</p>": [3]}) == "Results matter."
    assert deinvert({"": [0], " ": [1]}) is None
    assert deinvert(None) is None


def test_markup_to_text_and_ids():
    assert markup_to_text("Using<b>lme4</b>") == "Usinglme4"
    assert markup_to_text("<i>Planck</i> 2018 results") == "Planck 2018 results"
    assert markup_to_text("<script>alert(1)</script>x &lt; y") == "alert(1) x < y"
    assert markup_to_text("Effect<br>Ontario") == "Effect Ontario" and markup_to_text("H<sub>2</sub>O") == "H2O"
    assert short_id("https://openalex.org/w123") == "W123"
    assert short_id("F4320334593") == "F4320334593"
    assert short_id("https://example.org/W1") is None
    assert is_work_id("W1") and not is_work_id("W1/../x") and not is_work_id("../W1")
    assert not is_work_id("W\u0661") and not is_work_id("W1\n") and short_id("W" + "1" * 20) is None
