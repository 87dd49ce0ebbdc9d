"""The served work page's additions on a real release: explore links that open the cohorts of the same venue, topic
and category (counts checked against DuckDB), the "report a problem" link, both in English and French."""

from __future__ import annotations

import re

import duckdb
from starlette.testclient import TestClient

from metacan_pipeline.site.app import create_app
from metacan_pipeline.site.release import current_release_id, database_path


def _sql(root, query, params=()):
    con = duckdb.connect(str(database_path(root, current_release_id(root))), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def test_explore_links_open_the_cohorts_of_the_works_venue_topic_and_category(site_release, monkeypatch):
    root = site_release[0].root
    monkeypatch.setenv("METACAN_REPORT_URL", "https://issues.example.org/new?template=record")
    wid, path, venue, topic = _sql(root, "SELECT id, page_path, venue, topic FROM works WHERE id = 'W7006'")[0]
    with TestClient(create_app(root, rate_limit="off")) as c:
        for prefix in ("", "/fr"):
            page = c.get(f"{prefix}/{path}")
            assert page.status_code == 200
            report = re.search(r'<a href="([^"]+)" id="report-problem">([^<]+)</a>', page.text)
            assert report.group(1) == f"https://issues.example.org/new?template=record&amp;work={wid}"
            section = page.text.split('<section aria-labelledby="explore">')[1].split("</section>")[0]
            links = re.findall(r'<a href="([^"]+)">', section)
            assert all(link.startswith(prefix + "/?") for link in links) and len(links) == 3
            venue_page, topic_page, label_page = (c.get(link.replace("&amp;", "&")) for link in links)
            count = lambda r: int(
                re.search(r'id="count">([\d\s\u202f,]+)<', r.text)
                .group(1)
                .replace(",", "")
                .replace("\u202f", "")
                .replace(" ", "")
            )  # noqa: E731
            assert count(venue_page) == _sql(root, "SELECT count(*) FROM works WHERE venue = ?", [venue])[0][0] > 1
            assert count(topic_page) == _sql(root, "SELECT count(*) FROM works WHERE topic = ?", [topic])[0][0] > 1
            want = _sql(
                root,
                "SELECT count(DISTINCT work_key) FROM work_labels WHERE teacher = 'gemma' AND list_contains(categories, 'metaepi_broad')",
            )[0][0]
            assert count(label_page) == want > 0
        assert "Report a problem with this record" in c.get(f"/{path}").text
        assert "Signaler un problème dans cette notice" in c.get(f"/fr/{path}").text
    monkeypatch.delenv("METACAN_REPORT_URL")
    with TestClient(create_app(root, rate_limit="off")) as c:
        assert 'id="report-problem"' not in c.get(f"/{path}").text  # no setting, no link
