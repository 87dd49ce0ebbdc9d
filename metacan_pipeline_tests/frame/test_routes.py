"""Tests of metacan_pipeline.frame.routes: routes, evidence, the admission filter and sampling flags."""

from metacan_pipeline.frame.entities import EntityLists
from metacan_pipeline.frame.routes import AdmissionRule, frame_row


def _work(**kw):
    base = dict(
        id="W1",
        doi=None,
        title="A long enough title",
        title_text="A long enough title",
        publication_year=2020,
        language="en",
        type="article",
        type_crossref=None,
        is_paratext=False,
        is_retracted=False,
        cited_by_count=0,
        venue_id=None,
        venue_name=None,
        topic=None,
        field=None,
        updated_date=None,
        institutions=[],
        author_countries=[],
        funders=[],
        keywords=[],
        is_authors_truncated=False,
        has_abstract=False,
        lexicon_hits=[],
        source_file="f",
        source_locator="l",
    )
    base.update(kw)
    return base


ENTITIES = EntityLists(
    funders={"F1": "NSERC"},
    sources={"S1": "Télescope"},
    institutions={"I9": "Soquem"},
    versions={"funder": "funders@x", "source": "sources@x", "institution": "institutions@x"},
)


def test_routes_and_evidence():
    row, why = frame_row(
        _work(institutions=[{"id": "I5", "name": "McGill University", "country_code": "CA"}]), ENTITIES, AdmissionRule()
    )
    assert why == "admitted" and row["ca_aff"] and not row["invisible_to_affiliation_only"]
    assert row["ca_aff_evidence"] == ["institution I5 McGill University (country_code CA)"]
    row, _ = frame_row(_work(author_countries=["CA"]), ENTITIES, AdmissionRule())
    assert row["ca_aff_evidence"] == ["authorships[].countries contains CA"]
    row, _ = frame_row(_work(funders=[{"id": "F1", "name": None, "via": "grants.funder"}]), ENTITIES, AdmissionRule())
    assert row["ca_fund"] and row["invisible_to_affiliation_only"] and row["route_key"] == "ca_fund"
    assert row["ca_fund_evidence"] == ["funder F1 NSERC (via grants.funder)"]
    row, _ = frame_row(_work(venue_id="S1"), ENTITIES, AdmissionRule())
    assert row["ca_venue"] and row["ca_venue_evidence"][0].startswith("source S1 Télescope")
    row, _ = frame_row(
        _work(institutions=[{"id": "I9", "name": "Soquem", "country_code": None}]), ENTITIES, AdmissionRule()
    )
    assert row["ca_aff"], "an institution on the pinned list counts even when the record lacks its country"


def test_admission_filter_and_sampling_flags():
    ca = dict(author_countries=["CA"])
    assert frame_row(_work(**ca, title_text="  "), ENTITIES, AdmissionRule()) == (None, "no_title")
    assert frame_row(_work(**ca, publication_year=1999), ENTITIES, AdmissionRule()) == (None, "year_out_of_range")
    assert frame_row(_work(), ENTITIES, AdmissionRule()) == (None, "no_route")
    row, _ = frame_row(_work(**ca, title_text="Erratum 1"), ENTITIES, AdmissionRule())
    assert row["in_sampling_frame"] is False and row["sampling_frame_exclusion"] == "short_title"
    row, _ = frame_row(_work(**ca, is_paratext=True), ENTITIES, AdmissionRule())
    assert row["sampling_frame_exclusion"] == "paratext"
    row, _ = frame_row(_work(**ca, title_text="Exactly 11c"), ENTITIES, AdmissionRule())
    assert row["in_sampling_frame"] is True
