"""What the served pages say instead of raw values: a work's language by its name in the page's language (CLDR names
through Babel, written out here by hand), on the home page's choices and facets, the statistics page's by-language
figure and the work page; and the coverage sentence counting as scored only the works with a category score."""

from __future__ import annotations

import html
import re

import duckdb
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.i18n import language_name
from metacan_pipeline.site.build.release import current_release_id, database_path
from metacan_pipeline.site.web.app import create_app

#: The site world's languages (builders.site.SITE_LANGUAGES) as CLDR names them in each interface language.
NAMES = {
    "en": {"en": "English", "fr": "French", "de": "German"},
    "fr": {"en": "anglais", "fr": "français", "de": "allemand"},
}


@pytest.fixture(scope="module")
def client(site_release):
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as c:
        yield c


def test_language_names_come_from_cldr_and_an_unknown_value_stays_as_it_is():
    assert language_name("es", "en") == "Spanish" and language_name("es", "fr") == "espagnol"
    assert language_name("zh-cn", "fr") == "chinois (simplifié, Chine)"
    assert (
        language_name("und", "en") == "Unknown language"
    )  # CLDR's name, never Babel's guess "English (United States)"
    assert language_name("xx", "fr") == "xx" and language_name("not a code", "en") == "not a code"
    assert language_name(None, "en") is None and language_name("", "fr") == ""


def _release_sql(root, query: str):
    con = duckdb.connect(str(database_path(root, current_release_id(root))), read_only=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("lang", ["en", "fr"])
def test_the_home_page_names_languages_in_its_own_language(client, lang):
    page = html.unescape(client.get("/" if lang == "en" else "/fr/").text)
    select = page.split('<select name="language">')[1].split("</select>")[0]
    assert dict(re.findall(r'<option value="(\w+)"[^>]*>([^(<]+) \(', select)) == NAMES[lang]
    assert dict(re.findall(r'title="(\w+)">([^<]+)</a>', page)) == NAMES[lang]  # the language facet's links


@pytest.mark.parametrize("lang", ["en", "fr"])
def test_the_statistics_page_and_the_work_page_name_languages(client, lang, site_release):
    prefix = "" if lang == "en" else "/fr"
    page = html.unescape(client.get(f"{prefix}/statistics").text)
    figure = page.split('<section id="by-language"')[1].split("</section>")[0]
    assert sorted(re.findall(r'<tr><th scope="row">([^<]+)</th>', figure)) == sorted(NAMES[lang].values())
    assert all(f">{name}</text>" in figure for name in NAMES[lang].values())  # the chart's labels too
    ((path,),) = _release_sql(site_release[0].root, "SELECT page_path FROM works WHERE language = 'de' LIMIT 1")
    text = client.get(f"{prefix}/{path}").text
    assert f"{NAMES[lang]['de']} (<code>de</code>)" in text


def test_the_coverage_sentence_counts_only_works_with_a_category_score(client, site_release):
    """60 works: 5 without a prediction (every eleventh), 6 predicted by heads that give no score (builders.site)."""
    n = len(site_release[1])
    scored = len([i for i in range(n) if i % 11 != 10 and not (i % 7 == 3 and i % 4 != 0)])
    assert scored == 49
    english = html.unescape(re.sub(r"<[^>]+>", "", client.get("/").text.split('id="coverage"')[1].split("</p>")[0]))
    assert (
        f"gave a category score to {scored} (a work without one was not scored, or only by heads trained on a single"
        in english
    )
    french = html.unescape(re.sub(r"<[^>]+>", "", client.get("/fr/").text.split('id="coverage"')[1].split("</p>")[0]))
    assert f"a donné un score de catégorie à {scored} d'entre elles" in french


@pytest.mark.parametrize("lang", ["en", "fr"])
def test_the_search_form_and_the_methods_page_say_words_match_by_their_english_stem(client, lang):
    prefix = "" if lang == "en" else "/fr"
    hint = {"en": "Words are matched by their English stem (Porter's stemmer), inside a quoted phrase too: integrity "
                  "also finds integrated and integration. There is no exact-word match.",
            "fr": "Les mots sont comparés par leur radical anglais (algorithme de Porter), aussi dans une expression entre "
                  "guillemets : integrity trouve aussi integrated et integration."}[lang]  # fmt: skip
    home = html.unescape(client.get(f"{prefix}/").text)
    assert hint in home and f'<a href="{prefix}/methods#search">' in home
    methods = html.unescape(client.get(f"{prefix}/methods").text)
    section = methods.split('<section id="search"')[1].split("</section>")[0]
    assert ("Porter's stemmer" if lang == "en" else "l'algorithme de Porter") in section
    assert '<section id="versions"' in methods and 'href="#versions"' in methods and 'href="#search"' in methods


def test_what_the_hint_promises_is_what_the_search_does(client):
    """Stemming, measured on the served search: "integrity" finds the site world's titles holding "integrity" (the
    Peer review titles) and any title with another word of the stem "integr"."""
    titles = [w["title"] for w in client.get("/api/v1/works?q=integrity&limit=100").json()["works"]]
    stems = [w["title"] for w in client.get("/api/v1/works?q=integrated&limit=100").json()["works"]]
    assert titles and sorted(titles) == sorted(stems)
    assert all(re.search(r"\bintegr\w*", t, re.IGNORECASE) for t in titles)
