"""Abstracts (issue 6, "Abstracts, live"): deinvert on the real abstract quirks (SOURCES.md, "Abstract quirks")."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from metacan_pipeline.openalex.abstract import deinvert, tidy_abstract

from .conftest import OPENALEX

#: Real files holding every quirk the tests name (ids in the comments of the tests below).
REAL_FILES = (
    "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json",  # W1951724000 lme4: "R.", "(REML)", "formula,"
    "Mearman__Academic-Explorer__work_W2241997964.json",  # a position gap
    "Mearman__Academic-Explorer__work_W2612755892.json",  # abstract_inverted_index null
    "Mearman__Academic-Explorer__works_page1_per50.json",
    "Mearman__Academic-Explorer__works_from2023_per50.json",  # JATS paragraphs (W1637437975)
    "Mearman__Academic-Explorer__works_pub2020-2023_per50.json",  # "&amp;gt;1" (W3131055609)
    "rkrug__openalexPro__json_files_page_1.json",  # <h2>Abstract</h2>, <title>Abstract</title>, "p&lt;0.05", ABSTRACT
    "rkrug__openalexPro__pipeline_chunk_1_page_1.json",  # "Abstract:", "AbstractConservation"
    "rkrug__openalexPro__pipeline_chunk_3_page_1.json",  # an empty token (W1926314100)
)

LME4 = ("Maximum likelihood or restricted maximum likelihood (REML) estimates of the parameters in linear mixed-effects "
        "models can be determined using the lmer function in the lme4 package for R. As for most model-fitting functions "
        "in R, the model is described in an lmer call by a formula, in this case including both fixed- and random-effects "
        "terms. The formula and data together determine a numerical representation of the model from which the profiled "
        "deviance or the profiled REML criterion can be evaluated as a function of some of the model parameters. The "
        "appropriate criterion is optimized, using one of the constrained optimization functions in R, to provide the "
        "parameter estimates. We describe the structure of the model, the steps in evaluating the profiled deviance or "
        "REML criterion, and the structure of classes or types that represents such a model. Sufficient detail is "
        "included to allow specialization of these structures by users who wish to write functions to fit specialized "
        "linear mixed models, such as models incorporating pedigrees or smoothing splines, that are not easily "
        "expressible in the formula language used by lmer.")


def _works_of(obj) -> list:
    if isinstance(obj, list):
        return obj
    if isinstance(obj, dict):
        if "payload" in obj:
            return _works_of(obj["payload"])
        if "results" in obj:
            return obj["results"] or []
        if "id" in obj:
            return [obj]
    return []


@lru_cache(maxsize=1)
def real_works() -> dict[str, dict]:
    """``{short id: real record}`` for the real works of REAL_FILES (first copy of a duplicated id)."""
    if not OPENALEX.exists():
        pytest.fail(f"real data not found at {OPENALEX}: the tests need ../shared/data beside the checkout")
    out: dict[str, dict] = {}
    for name in REAL_FILES:
        for rec in _works_of(json.loads((OPENALEX / name).read_text())):
            if isinstance(rec, dict) and "abstract_inverted_index" in rec and str(rec.get("id", "")).startswith("https://openalex.org/W"):
                out.setdefault(rec["id"].rsplit("/", 1)[1], rec)
    return out


def _index(wid: str):
    return real_works()[wid]["abstract_inverted_index"]


# ---- de-inversion on the real quirks -------------------------------------------------------------
def test_deinvert_punctuation_bearing_tokens_real_lme4():
    idx = _index("W1951724000")
    assert {"R.", "(REML)", "formula,"} <= set(idx)
    assert deinvert(idx) == LME4 and len(LME4.split()) == sum(map(len, idx.values()))


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
    assert jats.startswith("The wholly updated Revised Standard Edition") and "previous Standard Edition. Volume VIII" in jats
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
    assert tidy_abstract("AbstractAbstractThis paper") == "This paper" and tidy_abstract("AbstractA survey") == "A survey"
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
