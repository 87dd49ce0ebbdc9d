"""The work page's Canadian authors (ORCID) and institutions (ROR) from a real record through the frame and the
record builder, its "report a problem" link (METACAN_REPORT_URL) and its explore links: on served pages, and on static
pages when the served site's address is configured (METACAN_SITE_URL)."""

from __future__ import annotations

import datetime as dt
import json
import re
from urllib.parse import urlencode

import fastjsonschema
import pytest

from metacan_pipeline import settings
from metacan_pipeline.publish.manifest import renderer_fingerprint
from metacan_pipeline.publish.pages import environment, render_work, report_link, run_context
from metacan_pipeline.publish.records import SCHEMA_PATH, build_record
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.site import CTX

LME4_AUTHORS = [  # the lme4 record's authorships whose institution is Canadian (the other two are in the US and CH)
    {
        "name": "Benjamin M. Bolker",
        "orcid": "https://orcid.org/0000-0002-2127-0443",
        "institutions": [{"name": "McMaster University", "ror": "https://ror.org/02fa3aq29"}],
    },
    {
        "name": "Steve Walker",
        "orcid": "https://orcid.org/0000-0002-6838-8334",
        "institutions": [{"name": "McMaster University", "ror": "https://ror.org/02fa3aq29"}],
    },
]


def _record(openalex_dir, **overrides):
    row = real_frame_row(openalex_dir, **overrides)
    return build_record(row, [], None, None, {})


def test_the_frame_and_the_record_carry_the_canadian_authorships_in_order(openalex_dir):
    row = real_frame_row(openalex_dir)
    assert row["ca_authors"] == LME4_AUTHORS
    record = _record(openalex_dir)
    assert record["ca_authors"] == LME4_AUTHORS
    schema = json.loads(SCHEMA_PATH.read_text())["properties"]["ca_authors"]  # the JSON Schema knows the field
    fastjsonschema.compile(schema)(record["ca_authors"])
    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        fastjsonschema.compile(schema)([{"name": "x", "orcid": None}])


def test_an_authorship_with_only_a_canadian_country_counts_and_a_bad_orcid_is_not_a_link(openalex_dir):
    authorships = [
        {
            "author": {"display_name": "A. Unresolved", "orcid": "javascript:alert(1)"},
            "countries": ["ca"],
            "institutions": [],
        },
        {"author": {"display_name": "B. Abroad", "orcid": None}, "countries": ["FR"], "institutions": []},
        {
            "author": {"display_name": "C. Pinned"},
            "countries": [],
            "institutions": [
                {
                    "id": "https://openalex.org/I1",
                    "display_name": "Somewhere",
                    "country_code": "CA",
                    "ror": "https://evil.example/x",
                }
            ],
        },
    ]
    record = _record(openalex_dir, authorships=authorships)
    assert record["ca_authors"] == [
        {"name": "A. Unresolved", "orcid": "javascript:alert(1)", "institutions": []},
        {"name": "C. Pinned", "orcid": None, "institutions": [{"name": "Somewhere", "ror": "https://evil.example/x"}]},
    ]
    html = render_work(environment(), record, None, CTX)
    assert "javascript:" not in re.findall(r'href="([^"]*)"', html).__str__() and "evil.example" not in str(
        re.findall(r'href="([^"]*)"', html)
    )
    assert "A. Unresolved (ORCID javascript:alert(1))" in html and "Somewhere" in html  # shown as text, inert


def test_the_static_page_lists_the_authors_with_links_and_no_explore_or_report_link(openalex_dir):
    html = render_work(environment(), _record(openalex_dir), None, CTX)
    assert (
        '<li>Benjamin M. Bolker (<a href="https://orcid.org/0000-0002-2127-0443">ORCID 0000-0002-2127-0443</a>): '
        '<a href="https://ror.org/02fa3aq29">McMaster University</a> (ROR)</li>' in html
    )
    assert "Canadian authors" in html and "Douglas M. Bates" not in html
    assert 'id="explore"' not in html and 'id="report-problem"' not in html


def test_the_report_link_names_the_work_and_keeps_the_configured_query(openalex_dir, monkeypatch):
    monkeypatch.setenv("METACAN_REPORT_URL", "https://github.com/org/repo/issues/new?labels=record&work=old")
    url = settings.report_url()
    assert report_link(url, "W1951724000") == "https://github.com/org/repo/issues/new?labels=record&work=W1951724000"
    html = render_work(environment(), _record(openalex_dir), None, {**CTX, "report_url": url})
    assert re.search(
        r'<a href="https://github.com/org/repo/issues/new\?labels=record&amp;work=W1951724000" id="report-problem">'
        r"Report a problem with this record</a>",
        html,
    )
    for bad in ("javascript:alert(1)", "ftp://example.org/x", "https://" + "x" * 3000):
        monkeypatch.setenv("METACAN_REPORT_URL", bad)
        with pytest.raises(ValueError, match=r"METACAN_REPORT_URL=.* is not an absolute http\(s\) URL") as info:
            settings.report_url()
        assert len(str(info.value)) < 300
    monkeypatch.setenv("METACAN_REPORT_URL", "")
    assert settings.report_url() is None


def test_a_served_page_links_to_cohorts_of_its_venue_topic_and_categories_by_source(openalex_dir):
    record = _record(openalex_dir, title="x" * 20)
    record["direct_labels"] = [
        {
            "teacher": "gemma",
            "status": "labelled",
            "label_status": "direct_label_unvalidated",
            "categories": ["sts"],
            "model": "m",
            "prompt_version": "v1",
            "record_view": "title_only",
            "source": "teacher_call",
            "error": None,
            "qualification": None,
            "confidence": "low",
            "reason": "",
        }
    ]
    html = render_work(environment(), record, None, {**CTX, "explore": "/fr"})
    links = dict((text, href) for href, text in re.findall(r'<li><a href="([^"]+)">([^<]+)</a></li>', html))
    assert links[f"Works in the same venue ({record['venue']})"].startswith("/fr/?venue=")
    assert links[f"Works on the same topic ({record['topic']})"].startswith("/fr/?topic=")
    assert links["Works with the same direct label (Science and technology studies, teacher gemma)"] == (
        "/fr/?label_category=sts&amp;label_teacher=gemma"
    )


def test_a_static_page_links_its_explore_cohorts_to_the_configured_served_site(openalex_dir, storage, monkeypatch):
    record = _record(openalex_dir)
    monkeypatch.delenv("METACAN_SITE_URL", raising=False)
    unset = renderer_fingerprint()
    assert run_context(storage, "codex", "run-1", dt.datetime(2026, 12, 3))["explore"] is None
    monkeypatch.setenv("METACAN_SITE_URL", "https://metacan.example.org/evidence/")
    ctx = run_context(storage, "codex", "run-1", dt.datetime(2026, 12, 3))
    assert ctx["explore"] == settings.site_url() == "https://metacan.example.org/evidence"
    assert renderer_fingerprint() != unset  # setting it renders every static page again, with the links
    html = render_work(environment(), record, None, {**CTX, "explore": ctx["explore"]})
    section = html.split('<section aria-labelledby="explore">')[1].split("</section>")[0]
    links = re.findall(r'<a href="([^"]+)">', section)
    assert links[0] == "https://metacan.example.org/evidence/?" + urlencode({"venue": record["venue"]})
    assert links[1] == "https://metacan.example.org/evidence/?" + urlencode({"topic": record["topic"]})
    for bad in (
        "javascript:alert(1)",
        "metacan.example.org",
        "https://x.org/?lang=fr",
        "https://x.org/#top",
        "https://:80",
        "https://x.org:abc",
        "http://x.org:99999999",
        "https://x.org/a b",
        "https://x.org/\u202egnp.exe",
    ):
        monkeypatch.setenv("METACAN_SITE_URL", bad)
        with pytest.raises(ValueError, match=r"METACAN_SITE_URL="):
            settings.site_url()
    monkeypatch.setenv("METACAN_SITE_URL", "https://admin:hunter2@metacan.example.org")
    with pytest.raises(ValueError, match=r"METACAN_SITE_URL carries a user name or password") as err:
        settings.site_url()  # it would be published in every page's links
    assert "hunter2" not in str(err.value)
    monkeypatch.setenv("METACAN_SITE_URL", " ")
    assert settings.site_url() is None and renderer_fingerprint() == unset
