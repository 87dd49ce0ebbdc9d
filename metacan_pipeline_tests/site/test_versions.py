"""Works under several OpenAlex ids (site/build/versions.py, site/query/versions.py): the pairs ``work_versions``
holds for planted DOIs and titles (the real "The DataLad Handbook" versions among them), a page of results listing
each work once with its other ids, and the cohort's count and export still counting every id."""

from __future__ import annotations

import html
import re

import duckdb
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.site.build.release import current_release_id, database_path
from metacan_pipeline.site.build.versions import MAX_VERSIONS, write_work_versions
from metacan_pipeline.site.query.versions import group_versions
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.tables.site import release_tables

#: (work_key, title, year, doi): the four versions of "The DataLad Handbook" as OpenAlex holds them
#: (openalex_more/...tu9_type_selection_py_diophila: W4223926430, W4226148976, W4287333577, W4287752443), and
#: planted cases around them.
WORKS = [
    (4223926430, "The DataLad Handbook", 2022, "https://doi.org/10.5281/zenodo.6463273"),
    (4226148976, "The DataLad Handbook", 2021, "https://doi.org/10.5281/zenodo.5726829"),
    (4287333577, "The DataLad Handbook", 2021, "https://doi.org/10.5281/zenodo.4495560"),
    (4287752443, "The DataLad Handbook", 2020, "https://doi.org/10.5281/zenodo.3905791"),
    (1, "Open science in Canada", 2019, "https://doi.org/10.1/ABC"),
    (2, "Open Science in Canada: a preprint", 2018, "https://doi.org/10.1/abc"),  # the same DOI in other case
    (3, "Études de reproductibilité au Québec", 2020, None),
    (4, "ETUDES DE REPRODUCTIBILITE — AU QUEBEC!", 2020, None),  # same title once normalised, same year
    (5, "Études de reproductibilité au Québec", 2021, None),  # another year: another work
    (6, "Editorial", 2020, None),
    (7, "Editorial", 2020, None),  # too short a title to group
    (8, "Same title and DOI here", 2015, "https://doi.org/10.2/x"),
    (9, "Same title and DOI here", 2015, "https://doi.org/10.2/X"),  # both reasons at once
    *[(100 + i, "Letter to the editor about trials", 2017, None) for i in range(MAX_VERSIONS + 1)],  # generic
]


@pytest.fixture()
def con():
    c = duckdb.connect()
    for table in release_tables():
        if table.name in ("works", "work_versions"):
            c.execute(table.ddl())
    c.executemany(
        "INSERT INTO works (work_key, id, title, year, doi, page_path) VALUES (?, ?, ?, ?, ?, ?)",
        [(k, f"W{k}", t, y, d, f"works/v/W{k}.html") for k, t, y, d in WORKS],
    )
    write_work_versions(c)
    yield c
    c.close()


def test_versions_pair_works_by_doi_or_by_normalised_title_and_year_and_nothing_else(con):
    got = con.execute("SELECT work_key, other_key, basis FROM work_versions ORDER BY 1, 2").fetchall()
    assert got == [
        (1, 2, "doi"),
        (2, 1, "doi"),
        (3, 4, "title_year"),
        (4, 3, "title_year"),
        (8, 9, "doi,title_year"),
        (9, 8, "doi,title_year"),
        (4226148976, 4287333577, "title_year"),
        (4287333577, 4226148976, "title_year"),
    ]


def test_a_page_lists_each_work_once_with_its_other_ids(con):
    rows = [{"work_key": k, "id": f"W{k}"} for k in (4287333577, 5, 1, 4226148976, 8)]
    shown = group_versions(con, rows)
    assert [r["id"] for r in shown] == ["W4287333577", "W5", "W1", "W8"]  # W4226148976 folded into the first
    versions = {r["id"]: [(v["id"], v["basis"], v["listed"]) for v in r["versions"]] for r in shown}
    assert versions == {
        "W4287333577": [("W4226148976", ["title_year"], True)],
        "W5": [],
        "W1": [("W2", ["doi"], False)],
        "W8": [("W9", ["doi", "title_year"], False)],
    }


def _sql(root, query):
    db = duckdb.connect(str(database_path(root, current_release_id(root))), read_only=True)
    try:
        return db.execute(query).fetchall()
    finally:
        db.close()


@pytest.mark.parametrize("lang", ["en", "fr"])
def test_the_results_page_groups_versions_and_every_count_still_counts_each_id(site_release, lang):
    """The site world's W7059 is W7039 under another id (the same title in capitals, the same year)."""
    root = site_release[0].root
    assert _sql(root, "SELECT work_key, other_key, basis FROM work_versions ORDER BY 1") == [
        (7039, 7059, "title_year"),
        (7059, 7039, "title_year"),
    ]
    prefix = "" if lang == "en" else "/fr"
    with TestClient(create_app(root, rate_limit="off")) as c:
        page = c.get(f"{prefix}/?year_min=2018&year_max=2018&limit=100")
        text = html.unescape(page.text)
        ((n,),) = _sql(root, "SELECT count(*) FROM works WHERE year = 2018")
        assert int(re.sub(r"\D", "", re.search(r'id="count">([^<]+)<', text).group(1))) == n
        listed = re.findall(r'<a href="https://openalex.org/(W\d+)">', text)
        assert "W7039" in listed and "W7059" not in listed and len(listed) == n - 1
        entry = text.split('<a href="https://openalex.org/W7039">')[1].split("</li>")[0]
        word = {"en": ("2 versions of this work in OpenAlex; also listed as", "same title and year", "in these results"),
                "fr": ("2 versions de cette publication dans OpenAlex; aussi répertoriée sous", "même titre et même année",
                       "dans ces résultats")}[lang]  # fmt: skip
        assert f'{word[0]} <a href="{prefix}/works/' in entry and "<code>W7059</code></a> (" in entry
        assert f"({word[1]}; {word[2]})" in entry
        assert c.get("/api/v1/count?year_min=2018&year_max=2018").json()["count"] == n
        csv_ids = [
            line.split(",")[0] for line in c.get("/export.csv?year_min=2018&year_max=2018").text.splitlines()[1:]
        ]
        assert "W7059" in csv_ids and "W7039" in csv_ids and len(csv_ids) == n
