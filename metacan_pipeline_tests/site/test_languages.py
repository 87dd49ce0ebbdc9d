"""Tests of the site in English and French (metacan_pipeline.i18n, site/web/languages.py, the French catalogue): every
extracted interface string translated, French pages with data values verbatim, the Accept-Language redirect of
``/``, the language cookie, hreflang links on every page; and headless Chromium switching to French from the
keyboard."""

from __future__ import annotations

import html
import re
import socket
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import uvicorn
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po
from starlette.testclient import TestClient

from metacan_pipeline.i18n import accept_language_tags, catalog_path, negotiate
from metacan_pipeline.site.build.release import current_release_id
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline_tests.browser import REPO, PageWatch, launch_chromium, start_playwright
from metacan_pipeline_tests.site.french import ENGLISH_WORDS, english_left

BASE = "http://testserver"


@pytest.fixture(scope="module")
def client(site_release):
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as c:
        yield c


def _count(html: str) -> int:
    return int(re.sub(r"\D", "", re.search(r'id="count">([^<]+)<', html).group(1)))


def test_the_french_catalogue_translates_every_interface_string_and_nothing_else():
    with (REPO / "babel.cfg").open() as fh:
        method_map, options_map = parse_mapping_cfg(fh)
    extracted = {
        (context, msgid if isinstance(msgid, str) else msgid[0])
        for _, _, msgid, _, context in extract_from_dir(str(REPO), method_map, options_map)
    }
    with catalog_path("fr").open("rb") as fh:
        catalog = read_po(fh, locale="fr")
    entries = {(m.context, m.id if isinstance(m.id, str) else m.id[0]): m for m in catalog if m.id}
    assert len(extracted) > 200
    assert sorted(extracted - entries.keys(), key=str) == []  # `make messages` adds them, a translator fills them
    assert sorted(entries.keys() - extracted, key=str) == [] and not catalog.obsolete  # no stale entry
    untranslated = [k for k, m in entries.items() if not all(m.string if isinstance(m.string, tuple) else [m.string])]
    assert untranslated == [] and [k for k, m in entries.items() if m.fuzzy] == []
    assert [(m.id, errors) for m, errors in catalog.check()] == []  # placeholders and plural forms agree
    same = [k for k, m in entries.items() if m.string == m.id]
    assert len(same) < 15, same  # the few that read the same in French (Classification, Type, Genre, Mode...)


def test_accept_language_is_read_by_weight_and_babel_picks_the_language():
    assert accept_language_tags("en;q=0.5, fr-CA, *;q=0.1, de;q=0, it;q=bad") == ["fr-CA", "en"]
    assert negotiate("fr-CA,fr;q=0.9,en;q=0.8") == "fr"
    assert negotiate("en-US,en;q=0.9,fr;q=0.8") == "en"
    assert negotiate("de-DE, fr;q=0.3") == "fr" and negotiate("de, es") is None and negotiate(None) is None
    # tags are case-insensitive: the answer is always one of the site's own language codes
    assert [negotiate(h) for h in ("FR", "Fr-CA", "En-US, fr;q=0.5")] == ["fr", "fr", "en"]


def test_the_french_home_page_speaks_french_and_keeps_data_values(client):
    params = {"language": "en", "ca_aff": "yes", "limit": "5"}
    fr, en = client.get("/fr/", params=params), client.get("/", params=params)
    assert fr.status_code == 200 and '<html lang="fr">' in fr.text and '<html lang="en">' in en.text
    for text in (
        "Constituer une cohorte de recherches canadiennes",
        "Nombre exact",
        "Télécharger\u00a0:",
        "Filtres",
        "Décomptes selon les autres filtres",
        "Les étiquettes directes couvrent",
        "Affiliation canadienne",
        "Page suivante",
    ):
        assert text in fr.text, text
    for text in ("Exact count", "Download", "Build a cohort", "Direct labels cover", "Next page", "Filters"):
        assert text not in fr.text, text
    assert _count(fr.text) == _count(en.text) > 0
    # data values stay as they are: statuses, vocabulary codes, parameter values (a qualification note is said in
    # French: test_a_teachers_qualification_note_is_said_in_the_pages_language_with_its_figures)
    for text in ("machine_predicted_unvalidated", 'value="not_metaresearch"'):
        assert text in fr.text, text
    assert 'option value="yes" selected>oui</option>' in fr.text
    # every link stays in French, exports and the API stay where they are
    assert 'action="/fr/"' in fr.text and re.search(r'href="/fr/q/[0-9a-f]{12}"', fr.text)
    assert 'href="/fr/works/' in fr.text and 'rel="next"' in fr.text and 'href="/fr/?' in fr.text
    assert 'href="/export.csv?' in fr.text and 'href="/api/v1/docs"' in fr.text


def test_french_errors_work_pages_and_saved_cohorts(client, site_release):
    bad = client.get("/fr/", params={"score_min": "0.4"})
    assert bad.status_code == 400 and "Impossible de répondre à cette requête" in bad.text
    assert "score_min exige score_arm\u00a0: nommez le bras" in bad.text and 'href="/fr/"' in bad.text
    api = client.get("/api/v1/count", params={"score_min": "0.4"})  # the API says it in English
    assert "score_min needs score_arm" in api.json()["error"]["message"]
    missing = client.get("/fr/nowhere")
    assert missing.status_code == 404 and "Introuvable" in missing.text and '<html lang="fr">' in missing.text
    gone = client.get("/fr/works/W99999999")
    assert gone.status_code == 404 and "W99999999 ne figure pas dans l'édition" in html.unescape(gone.text)
    moved = client.get("/fr/works/W7000", follow_redirects=False)
    assert moved.status_code == 307 and moved.headers["location"].startswith("/fr/works/")
    page = client.get(moved.headers["location"])
    assert page.status_code == 200 and '<html lang="fr">' in page.text
    for text in ("Notice bibliographique", "Toutes les publications", "Voies d'entrée dans le cadre canadien"):
        assert text in page.text, text
    assert "&lt;script&gt;" in page.text and "<script>alert" not in page.text  # the title, verbatim and escaped
    assert client.get("/fr/records/W7000.json").json()["id"] == "W7000"  # the page's relative record link
    assert client.get("/fr/index.html", follow_redirects=False).headers["location"] == "/fr/"
    home = client.get("/fr/", params={"language": "fr"})
    h = re.search(r"/fr/q/([0-9a-f]{12})", home.text).group(1)
    saved = client.get(f"/fr/q/{h}")
    rid = current_release_id(site_release[0].root)
    citation = re.search(r'id="citation">([^<]+)<', saved.text).group(1)
    assert f"cohorte metacan {h} ({_count(saved.text)} publications), édition {rid}" in citation
    assert citation.endswith(f"{BASE}/fr/q/{h}") and "Langue" in saved.text  # the filter's label, in French


def test_a_first_visit_follows_accept_language_and_a_chosen_language_wins(site_release):
    french = {"Accept-Language": "fr-CA,fr;q=0.9,en;q=0.8"}
    with TestClient(create_app(site_release[0].root, rate_limit="off"), follow_redirects=False) as c:
        r = c.get("/", params={"language": "fr"}, headers=french)
        assert r.status_code == 302 and r.headers["location"] == "/fr/?language=fr"
        assert r.headers["vary"] == "Accept-Language, Cookie"
        english = c.get("/", headers={"Accept-Language": "en-CA,en;q=0.9,fr;q=0.5"})
        assert english.status_code == 200 and english.headers["vary"] == "Accept-Language, Cookie"
        assert c.get("/", headers={"Accept-Language": "de-DE, fr;q=0.3"}).status_code == 302
        assert c.get("/", headers={"Accept-Language": "de"}).status_code == 200
        assert c.get("/q/0123456789ab", headers=french).status_code == 404  # only / is redirected
        # the switch records the choice in a cookie, which then outweighs Accept-Language
        switched = c.get("/language/en", params={"next": "/?language=fr"})
        assert switched.status_code == 303 and switched.headers["location"] == "/?language=fr"
        cookie = switched.headers["set-cookie"]
        assert cookie.startswith("metacan_lang=en;") and "HttpOnly" in cookie and "SameSite=lax" in cookie
        assert c.get("/", headers=french).status_code == 200
        c.get("/language/fr", params={"next": "/fr/"})
        assert c.get("/", headers={"Accept-Language": "en"}).headers["location"] == "/fr/"
        # the switch only goes to a page of this site, and is strict about what it is given
        for target in ("//evil.example/", "https://evil.example/", "/\\evil.example", "/\x00"):
            assert c.get("/language/fr", params={"next": target}).headers["location"] == "/fr/"
        assert c.get("/language/de").status_code == 400 and c.get("/language/fr?colour=red").status_code == 400


def test_every_page_links_its_twins_with_hreflang_and_a_switch_that_keeps_the_query(client):
    h = re.search(r"/q/([0-9a-f]{12})", client.get("/").text).group(1)
    work = client.get("/works/W7000", follow_redirects=False).headers["location"]
    for path in ("/?language=fr&limit=3", f"/q/{h}", work, "/nowhere?x=1", "/?year_min=3000"):
        for lang, prefix, other, other_prefix in (("en", "", "fr", "/fr"), ("fr", "/fr", "en", "")):
            page = client.get(prefix + path)
            found = re.findall(r'<link rel="alternate" hreflang="([^"]+)" href="([^"]+)">', page.text)
            links = {lang_: html.unescape(href) for lang_, href in found}
            assert links == {"en": BASE + path, "fr": BASE + "/fr" + path, "x-default": BASE + path}, (lang, path)
            assert f'<html lang="{lang}">' in page.text
            switch = re.search(r'<a href="([^"]+)" hreflang="(\w+)" lang="\w+" id="language-switch">', page.text)
            href = urlsplit(html.unescape(switch.group(1)))
            assert switch.group(2) == other and href.path == f"/language/{other}"
            assert parse_qs(href.query) == {"next": [other_prefix + path]}
    docs = client.get("/api/v1/docs")  # the API's page is English only, and says so
    assert dict(re.findall(r'hreflang="([^"]+)" href="([^"]+)">', docs.text)) == {
        "en": f"{BASE}/api/v1/docs",
        "x-default": f"{BASE}/api/v1/docs",
    }


@pytest.mark.browser
def test_chromium_switches_the_home_page_to_french_from_the_keyboard(site_release):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(site_release[0].root), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    playwright = start_playwright()
    try:
        browser = launch_chromium(playwright)
        page = browser.new_context(locale="en-CA").new_page()
        watch = PageWatch().attach(page)
        failed = []
        page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
        page.goto(base + "/?language=fr")
        assert page.locator("h1").inner_text() == "Build a cohort of Canadian research"
        for _ in range(12):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.id") == "language-switch":
                break
        else:
            pytest.fail("Tab never reached the language switch link")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert page.url == base + "/fr/?language=fr"
        assert page.locator("html").get_attribute("lang") == "fr"
        assert page.locator("h1").inner_text() == "Constituer une cohorte de recherches canadiennes"
        assert page.locator("h2").all_inner_texts()[:2] == ["Nombre exact", "Publications"]
        page.goto(base + "/")  # the choice is remembered: / now opens in French
        assert page.url == base + "/fr/"
        assert not (watch.dialogs or watch.page_errors) and failed == [], failed
        browser.close()
    finally:
        playwright.stop()
        server.should_exit = True
        thread.join(timeout=10)


def test_a_teachers_qualification_note_is_said_in_the_pages_language_with_its_figures(client):
    from metacan_pipeline.i18n import translations
    from metacan_pipeline.publish.pages import qualification_words
    from metacan_pipeline.teachers.qualification import NOT_QUALIFIED, QUALIFIED, TOO_FEW, QualificationResult

    fr, en = translations("fr"), translations("en")
    said = {}
    for status in (QUALIFIED, NOT_QUALIFIED, TOO_FEW):
        note = QualificationResult(status, 0.05, 0.4, 0.5, 80, 78, 2, 12, 9, {}).note()
        assert qualification_words(note, en) == note  # English: the note as the teachers stage wrote it
        said[status] = qualification_words(note, fr)
        assert "teacher" not in said[status] and "0.05" in said[status] and "78" in said[status], said[status]
    assert said[QUALIFIED].startswith("annotateur qualifié (kappa 0.05 sur 78 publications de référence (12 positives)")
    assert said[NOT_QUALIFIED].startswith("annotateur non qualifié (kappa 0.05")
    assert said[TOO_FEW].startswith("annotateur non qualifié\u00a0: trop peu de cas")
    assert (
        qualification_words("teacher not qualified: not tested yet", fr)
        == "annotateur non qualifié\u00a0: pas encore testé"
    )
    assert qualification_words("imported from a study", fr) == "imported from a study"  # unknown wording: verbatim
    # the site's French pages: the world's teachers are "not tested yet"; no English note is left on them
    for path in ("/fr/", "/fr/statistics"):
        text = client.get(path).text
        assert "teacher not qualified" not in text and "annotateur non qualifié : pas encore testé" in text, path


# ---- no English left on a French page ------------------------------------------------------------------------


def _french_pages(client) -> list[str]:
    """Every kind of page, by its path in the English site (``/fr`` + path is its French twin)."""
    h = re.search(r"/q/([0-9a-f]{12})", client.get("/").text).group(1)
    work = client.get("/works/W7000", follow_redirects=False).headers["location"]
    return [
        "/",
        "/?classifier_category=metaresearch",
        "/?label_category=metaresearch&label_teacher=gemma&sort=cited_by",
        "/?sort=relevance",
        "/?classifier_mode=consensus",
        f"/q/{h}",
        work,
        "/statistics",
        "/dossier",
        "/dossier?head=metaresearch",
        "/about",
        "/methods",
        "/glossary",
        "/?score_min=0.4",
        "/?year_min=3000",
        "/nowhere",
        "/works/W99999999",
    ]


def test_no_french_page_leaves_an_interface_sentence_in_english(client):
    """Every page rendered in French: no sentence of the catalogue is left in its English (a string marked for
    translation but shown untranslated), and no text is the English page's own words (the same text in both
    languages, with English words in it) unless it is a data value of the release (a title, a name, a reason)."""
    left = english_left(client, _french_pages(client))
    assert left == []


def test_the_machine_scores_note_is_said_in_the_pages_language_with_its_figures():
    from metacan_pipeline.i18n import translations
    from metacan_pipeline.publish.notes import machine_note_words
    from metacan_pipeline.student.rounds import NOTE_IMMATURE, NOTE_MATURE, _arm_fails

    fr, en = translations("fr"), translations("en")
    # the gate's own reasons, from planted series: too few rounds; then a gain, churn and rho that all fail
    few = _arm_fails("codex", {"ap": [0.4, 0.5], "churn": [0.3], "rho": [0.5]}, 2)
    moving = _arm_fails("gemma", {"ap": [0.2, 0.3, 0.4, 0.5, 0.6], "churn": [0.3] * 4, "rho": [0.5] * 4}, 5)
    assert len(few) == 1 and len(moving) == 3
    immature = NOTE_IMMATURE.format(rounds=5, s="s", reason="; ".join(few + moving))
    mature = NOTE_MATURE.format(rounds=7)
    for note in (immature, mature, "Scores rank; they never assert a category."):
        assert machine_note_words(note, en) == note  # English (and so every static page): the note as written
    said = machine_note_words(immature, fr)
    assert said.startswith("Scores de départ d'un modèle immature (seuil de maturité non franchi après 5 cycle(s)")
    assert "codex\u00a0: 2 cycle(s) sur les 5 qu'exige la règle de la précision moyenne" in said
    assert "gemma\u00a0: gain de précision moyenne de 200.0% sur les 5 derniers cycles >= 2%" in said
    assert "renouvellement de l'ensemble positif non < 0.05 pendant 3 cycles consécutifs" in said
    assert "rho de Spearman non > 0.98 pendant 3 cycles consécutifs" in said
    assert said.endswith("Les scores ordonnent; ils n'affirment jamais une catégorie.") and not ENGLISH_WORDS.search(
        said
    )
    assert machine_note_words(mature, fr).startswith("Le seuil de maturité a été franchi après 7 cycles")
    # a reason worded otherwise stays as written; the rest of the note is still French
    odd = machine_note_words(NOTE_IMMATURE.format(rounds=1, s="", reason="codex: a new rule"), fr)
    assert "après 1 cycle(s) d'entraînement\u00a0: codex: a new rule)." in odd
    assert machine_note_words(None, fr) is None and machine_note_words("", fr) == ""
