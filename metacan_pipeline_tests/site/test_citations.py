"""RIS and BibTeX exports of a cohort: every work of the cohort becomes one reference, read back by the same
libraries a reference manager's importer follows (rispy, bibtexparser with LaTeX decoding) and compared with the
release's own rows in DuckDB; the type mapping, the escaping of LaTeX's special characters and the note that keeps
a work's validation status are checked on planted rows."""

from __future__ import annotations

import bibtexparser
import duckdb
import pytest
import rispy
from bibtexparser.middlewares import LatexDecodingMiddleware
from starlette.testclient import TestClient

from metacan_pipeline.site.build.release import current_release_id, releases_dir
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.site.web.citations import bibtex_text, ris_text

ROW = {
    "id": "W42",
    "title": "Montréal & 50% of {curly} papers_2 #1",
    "year": 2021,
    "type": "article",
    "venue": "Scientometrics",
    "doi": "10.1007/s11192-021-0",
    "language": "fr",
    "keywords": "peer review; open science",
    "validation_status": "machine_predicted_unvalidated",
    "release_layer": "provisional",
    "candidate_categories": ["metaresearch"],
    "consensus_categories": [],
    "model_version": "student-v6-abc",
    "release_id": "r1",
    "query_hash": "q1",
}


@pytest.fixture(scope="module")
def client(site_release):
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as c:
        yield c


def release_rows(storage, where: str = "true") -> dict[str, dict]:
    path = releases_dir(storage.root) / f"{current_release_id(storage.root)}.duckdb"
    with duckdb.connect(str(path), read_only=True) as con:
        rel = con.sql(f"SELECT id, title, year, doi, venue, type FROM works WHERE {where}")
        return {r[0]: dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()}


def test_ris_export_is_one_reference_per_work_of_the_cohort(client, site_release):
    r = client.get("/export.ris", params={"has_abstract": "no"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-research-info-systems")
    assert r.headers["content-disposition"].endswith('.ris"')
    refs = rispy.loads(r.text)
    want = release_rows(site_release[0], "NOT has_abstract")
    assert len(refs) == len(want) == int(r.headers["x-metacan-rows"]) > 0
    for ref in refs:
        row = want[ref["id"]]
        assert ref["title"] == row["title"] and ref["urls"] == [f"https://openalex.org/{row['id']}"]
        assert ref.get("year") == (str(row["year"]) if row["year"] is not None else None)
        assert ref.get("doi") == row["doi"]
        assert "validation_status" in ref["notes"][0] and "release layer " in ref["notes"][0]


def test_bibtex_export_reads_back_with_every_title_intact(client, site_release):
    r = client.get("/api/v1/export", params={"format": "bib"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-bibtex")
    library = bibtexparser.parse_string(r.text, append_middleware=[LatexDecodingMiddleware()])
    assert library.failed_blocks == []
    want = release_rows(site_release[0])
    assert {e.key for e in library.entries} == set(want)
    for e in library.entries:
        # the first work's title carries SQL and script payloads: they come back as text, character for character
        assert e["title"] == want[e.key]["title"]
        assert e["url"] == f"https://openalex.org/{e.key}"


def test_the_home_page_links_both_reference_formats_with_the_cohort(client):
    html = client.get("/", params={"language": "en"}).text
    assert 'href="/export.ris?language=en"' in html and 'href="/export.bib?language=en"' in html


def test_a_reference_keeps_its_type_venue_and_status_and_escapes_latex():
    (ref,) = rispy.loads(ris_text([ROW]))
    assert ref["type_of_reference"] == "JOUR" and ref["journal_name"] == "Scientometrics"
    assert ref["keywords"] == ["peer review", "open science"] and ref["language"] == "fr"
    assert ref["notes"] == [
        "metacan release r1, query q1: release layer provisional; validation_status machine_predicted_unvalidated; "
        "candidate categories "
        "metaresearch; consensus categories none (classifier student-v6-abc)"
    ]
    text = bibtex_text([ROW])
    assert r"Montr\'eal \& 50\% of \{curly\} papers\_2 \#1" in text
    (entry,) = bibtexparser.parse_string(text, append_middleware=[LatexDecodingMiddleware()]).entries
    assert entry.entry_type == "article" and entry.key == "W42" and entry["journal"] == "Scientometrics"
    assert entry["title"] == ROW["title"] and entry["year"] == "2021" and entry["doi"] == ROW["doi"]

    chapter = {**ROW, "type": "book-chapter", "year": None, "doi": None, "keywords": None, "title": "A chapter"}
    (ref,) = rispy.loads(ris_text([chapter]))
    assert ref["type_of_reference"] == "CHAP" and ref["secondary_title"] == "Scientometrics"
    assert "year" not in ref and "doi" not in ref and "keywords" not in ref
    (entry,) = bibtexparser.parse_string(bibtex_text([chapter])).entries
    assert entry.entry_type == "incollection" and entry["booktitle"] == "Scientometrics" and "year" not in entry
    other = {**ROW, "type": "paratext", "venue": None}
    assert rispy.loads(ris_text([other]))[0]["type_of_reference"] == "GEN"
    assert bibtexparser.parse_string(bibtex_text([other])).entries[0].entry_type == "misc"
