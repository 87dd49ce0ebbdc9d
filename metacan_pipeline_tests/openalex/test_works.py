"""Tests of metacan_pipeline.openalex.works: the typed row of each record shape in ../shared/data/openalex_more
(2022 schema, Crossref types, grants and funders in one part, HTML entities, 5,103 authorships)."""

from __future__ import annotations

from collections import Counter

import pytest

from metacan_pipeline.openalex.reader import Record, iter_records
from metacan_pipeline.openalex.works import CROSSREF_ONLY_TYPES, venue_id_of_host_venue, work_row, work_types

TAR = "herreio__openalex-client-review__tu9_type_selection_py_diophila.tar.gz"
PART = "eliarizzetto__omid-openalex__test_works_part_test.gz"
NSERC = "F4320334593"


@pytest.fixture(scope="module")
def rows(openalex_more_dir) -> dict[str, list[dict]]:
    """The typed rows of every work record of the second folder, by file."""
    out: dict[str, list[dict]] = {}
    for rec in iter_records(openalex_more_dir):
        if isinstance(rec, Record) and rec.kind == "W":
            out.setdefault(rec.source_file, []).append(work_row(rec))
    return out


def test_the_2022_schema_takes_its_venue_from_host_venue(rows):
    tar = rows[TAR]
    assert len(tar) == 410
    with_venue = [r for r in tar if r["venue_id"]]
    # 73 of 410 host_venue objects carry an id; the V id of a venue is the S id of the source it became
    assert len(with_venue) == 73 and all(r["venue_id"].startswith("S") for r in with_venue)
    first = with_venue[0]
    assert (first["id"], first["venue_id"], first["venue_name"]) == (
        "W4200035428",
        "S4210220629",
        "Series in computer vision",
    )
    assert venue_id_of_host_venue("https://openalex.org/V1983995261") == "S1983995261"
    # a host_venue with a name but no id still names the venue
    assert sum(1 for r in tar if r["venue_name"]) == 96
    # no primary_topic in 2022 (concepts only): topic and field stay empty rather than guessed
    assert {(r["topic"], r["field"]) for r in tar} == {(None, None)}
    # affiliations resolve as in every schema: 15 works with a Canadian institution
    ca = [r for r in tar if any(i["country_code"] == "CA" for i in r["institutions"])]
    assert len(ca) == 15 and ca[0]["id"] == "W4289260064"
    ottawa = {
        "id": "I153718931",
        "name": "University of Ottawa",
        "country_code": "CA",
        "ror": "https://ror.org/03c4mmv16",
    }
    assert ottawa in ca[0]["institutions"]


def test_crossref_types_become_openalex_types_and_are_kept_in_type_crossref(rows):
    assert Counter((r["type"], r["type_crossref"]) for r in rows[TAR]) == {
        ("book", None): 207,
        ("other", "proceedings"): 143,
        ("book", "monograph"): 44,
        ("dissertation", None): 14,
        ("book", "reference-book"): 2,
    }
    part = Counter((r["type"], r["type_crossref"]) for r in rows[PART])
    assert part[("article", "journal-article")] == 13 and part[("preprint", "posted-content")] == 1
    assert part[("book-chapter", "book-part")] == 1 and part[("other", "book-set")] == 1
    assert part[("standard", None)] == 2  # a type both vocabularies share is kept as it is
    every = [r for file_rows in rows.values() for r in file_rows]
    assert not {r["type"] for r in every} & set(CROSSREF_ONLY_TYPES)
    # current records keep their own type_crossref; a type of neither vocabulary is not touched
    assert work_types({"type": "article", "type_crossref": "proceedings-article"}) == ("article", "proceedings-article")
    assert work_types({"type": "conference-paper"}) == ("conference-paper", None)


def test_one_part_mixing_grants_and_funders_reads_the_funders_of_both(rows, openalex_more_dir):
    import gzip
    import json

    raw = [json.loads(line) for line in gzip.open(openalex_more_dir / PART)]
    assert Counter(("grants" in r, "funders" in r) for r in raw) == {(True, False): 19, (False, True): 10}
    part = rows[PART]
    assert len(part) == 29 and [r["source_locator"] for r in part[:2]] == ["record 1", "record 2"]
    funded = [(r["id"], r["funders"]) for r in part if r["funders"]]
    assert funded == [
        (
            "W4253101493",
            [
                {
                    "id": "F4320320924",
                    "name": "Schweizerischer Nationalfonds zur Förderung der Wissenschaftlichen Forschung",
                    "via": "grants.funder",
                }
            ],
        )
    ]


def test_html_entities_in_titles_are_text(rows):
    page = {r["id"]: r for r in rows["UtrechtUniversity__BackToPure__src_source_files_works.json"]}
    work = page["W1995017064"]
    assert work["title"].startswith("Crystallography &amp; NMR System")
    assert work["title_text"].startswith("Crystallography & NMR System: A New Software Suite")


def test_the_5103_author_work_has_only_funders_to_link_it_to_canada(rows):
    [work] = rows["Nabeelhassan__OpenAlex-Dashboard__app_lib_works3.json"]
    assert work["id"] == "W1694905212" and work["n_authorships"] == 5103 and not work["is_authors_truncated"]
    assert work["institutions"] == [] and work["author_countries"] == [] and work["lexicon_hits"] == []
    funders = {f["id"]: f for f in work["funders"]}
    assert len(funders) == 85 and funders[NSERC]["via"] == "grants.funder"
    # MathML in the title is reduced to text
    assert work["title_text"] == (
        "Combined Measurement of the Higgs Boson Mass in pp Collisions at s =7 and 8 TeV with the ATLAS and CMS "
        "Experiments"
    )
    assert (work["publication_year"], work["type"], work["type_crossref"]) == (2015, "article", "journal-article")


def test_pubmed_id_from_openalex_and_retraction_watch_forms():
    from metacan_pipeline.openalex.ids import bare_pmid

    assert bare_pmid("https://pubmed.ncbi.nlm.nih.gov/29456894") == "29456894"
    assert bare_pmid("https://www.ncbi.nlm.nih.gov/pubmed/7863852/") == "7863852"
    assert bare_pmid(" 007863852 ") == "7863852" and bare_pmid(31234567) == "31234567"
    for none in (0, "0", "", None, "pmid", "https://example.org/123", True, "1234567890"):
        assert bare_pmid(none) is None, none
