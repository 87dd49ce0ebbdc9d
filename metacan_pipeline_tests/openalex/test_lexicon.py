"""Tests of metacan_pipeline.openalex.lexicon: the about-Canada lexicon tiers."""

from metacan_pipeline.openalex.lexicon import about_ca_fires, find_hits


def test_lexicon_tiers():
    hits = find_hits({"title": "Water quality in London, Ontario", "abstract": None, "keywords": ""})
    assert {(h.term, h.tier) for h in hits} == {("London", "C"), ("Ontario", "A")}
    assert about_ca_fires({h.tier for h in hits})
    only_c = find_hits({"title": "Air pollution in London and Victoria", "abstract": None, "keywords": ""})
    assert {h.tier for h in only_c} == {"C"} and not about_ca_fires({"C"})
    assert find_hits({"title": "Canadaville and Ontarian", "abstract": None, "keywords": ""}) == []
    assert {
        h.term for h in find_hits({"title": "Les Premières Nations du Québec", "abstract": None, "keywords": ""})
    } == {"Premières Nations", "Québec"}
