"""Tests of the site in plain words (metacan_pipeline/site/web/guide.py, the vocabularies' display names in
vocab.py): the About, Methods and Glossary pages in English and French with the release's own figures, the glossary
links on the first use of each term and the anchors they point to, the statuses linked to their explanation, the
header and footer links, and display names (never a raw code) in the forms' choices while the API keeps the codes.
On a real release built through Dagster from the site world; every figure checked against DuckDB."""

from __future__ import annotations

import html
import re

import duckdb
import pytest
from starlette.testclient import TestClient

from metacan_pipeline import vocab
from metacan_pipeline.publish import human_layer, records
from metacan_pipeline.site.build.release import current_release_id, releases_dir
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.site.web.guide import GLOSSARY, STATUSES, link_first_uses, status_anchor

#: The terms the brief names: each must be linked from the jargon of the site's pages.
REQUIRED_TERMS = (
    "frame",
    "route",
    "teacher",
    "direct-label",
    "student",
    "head",
    "candidate",
    "consensus",
    "stratum",
    "design-weight",
    "prevalence",
    "audit-sample",
    "coder",
)
TERM_LINK = re.compile(r'<a class="term" href="([^"#]*)#([^"]+)" title="([^"]*)">([^<]+)</a>')


@pytest.fixture(scope="module")
def client(site_release):
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as c:
        yield c


def _sql(storage, query, params=()):
    con = duckdb.connect(str(releases_dir(storage.root) / f"{current_release_id(storage.root)}.duckdb"), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def _main(page: str) -> str:
    """The page's own content: its ``<main>``, or a work page's ``<article>``."""
    tag = "main" if "<main>" in page else "article"
    return page.split(f"<{tag}>")[1].split(f"</{tag}>")[0]


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", fragment)))


def _pages(client) -> list[str]:
    """Every kind of page of the site, by its English path."""
    h = re.search(r"/q/([0-9a-f]{12})", client.get("/").text).group(1)
    work = client.get("/works/W7000", follow_redirects=False).headers["location"]
    return [
        "/",
        "/?classifier_category=metaresearch&classifier_mode=consensus",
        f"/q/{h}",
        work,
        "/statistics",
        "/dossier",
        "/about",
        "/methods",
        "/glossary",
        "/?score_min=0.4",
        "/nowhere",
    ]


def test_the_about_methods_and_glossary_pages_answer_in_both_languages_with_the_releases_figures(client, site_release):
    storage = site_release[0]
    rid = current_release_id(storage.root)
    (first, last), (n,) = (
        _sql(storage, "SELECT min(year), max(year) FROM works")[0],
        _sql(storage, "SELECT count(*) FROM works")[0],
    )
    teachers = _sql(
        storage,
        "SELECT teacher, count(*) FILTER (WHERE status = 'labelled'), count(*) FILTER (WHERE status <> 'labelled') "
        "FROM work_labels GROUP BY 1 ORDER BY 1",
    )
    assert n == 60 and [t[0] for t in teachers] == ["codex", "gemma"] and teachers[1][2] == 1  # gemma: one failure
    expected = {
        "/about": (
            "About the metacan evidence browser",
            "À propos du navigateur de données probantes metacan",
            [f"Release {rid}, built ", f"holds {n} works. They were published from {first} to {last}. Classifier"],
            [f"L'édition {rid}, produite le", f"compte {n} publications", f"publiées de {first} à {last}."],
        ),
        "/methods": (
            "Methods: how the map is made",
            "Méthodes : comment la carte est produite",
            [
                f"read from release {rid}",
                "The frame is all Canadian research, not a search for meta-research",
                "the consensus prediction is both",
                "A count is not a prevalence",
                "There is no frozen release yet.",
            ],
            [
                f"lus dans l'édition {rid}",
                "Le cadre est toute la recherche canadienne",
                "la prédiction consensuelle exige les deux",
                "Un décompte n'est pas une prévalence",
                "Il n'y a pas encore de version figée.",
            ],
        ),
        "/glossary": (
            "Glossary",
            "Glossaire",
            ["Design weight", "One over a work's selection probability"],
            ["Poids de sondage", "L'inverse de la probabilité de sélection"],
        ),
    }
    for path, (h1_en, h1_fr, en_texts, fr_texts) in expected.items():
        en, fr = client.get(path), client.get("/fr" + path)
        assert en.status_code == fr.status_code == 200, path
        assert '<html lang="en">' in en.text and '<html lang="fr">' in fr.text
        assert _text(re.search(r"<h1>(.*?)</h1>", en.text).group(1)) == h1_en
        assert _text(re.search(r"<h1>(.*?)</h1>", fr.text).group(1)) == h1_fr
        for text in en_texts:
            assert text in _text(_main(en.text)), (path, text)
        for text in fr_texts:
            assert text in _text(_main(fr.text)), (path, text)
        assert client.get(path, params={"colour": "red"}).status_code == 400  # a guide page takes no parameter
    # the methods page's table of teachers: each one's labelled and failed labels, as the release counts them
    methods = _main(client.get("/methods").text)
    for teacher, labelled, failed in teachers:
        row = re.search(rf'<tr><th scope="row">{teacher}</th>(.*?)</tr>', methods).group(1)
        assert re.findall(r"<td>([^<]*)</td>", row)[:2] == [str(labelled), str(failed)], teacher
        assert "teacher not qualified: not tested yet" in row
    assert "annotateur non qualifié\u00a0: pas encore testé" in _main(client.get("/fr/methods").text)


def test_the_glossary_defines_every_term_as_an_anchor_in_both_languages(client):
    for prefix in ("", "/fr"):
        page = client.get(prefix + "/glossary").text
        anchors = re.findall(r'<dt id="([^"]+)"><dfn>([^<]+)</dfn></dt>\s*<dd>([^<]+)</dd>', page)
        assert [a[0] for a in anchors] == [t.key for t in GLOSSARY]
        assert set(REQUIRED_TERMS) <= {a[0] for a in anchors}
        assert all(name.strip() and len(definition) > 60 for _, name, definition in anchors)
        assert "term" not in re.findall(r'class="(\w+)"', _main(page))  # the glossary links no term to itself
    fr = dict(
        (k, html.unescape(n))
        for k, n, _ in re.findall(
            r'<dt id="([^"]+)"><dfn>([^<]+)</dfn></dt>\s*<dd>([^<]+)</dd>', client.get("/fr/glossary").text
        )
    )
    assert (
        fr["teacher"] == "Annotateur"
        and fr["design-weight"] == "Poids de sondage"
        and fr["audit-sample"] == "Échantillon d'audit"
    )


def test_the_first_use_of_each_term_links_to_a_glossary_anchor_that_exists(client):
    linked: set[str] = set()
    for prefix in ("", "/fr"):
        glossary = client.get(prefix + "/glossary").text
        definitions = {
            k: html.unescape(d) for k, d in re.findall(r'<dt id="([^"]+)">.*?</dt>\s*<dd>([^<]+)</dd>', glossary)
        }
        for path in _pages(client):
            if path == "/glossary":
                continue
            page = client.get(prefix + path).text
            found = TERM_LINK.findall(page)
            keys = [key for _, key, _, _ in found]
            assert len(keys) == len(set(keys)), (prefix, path, keys)  # once per page: the first use only
            for href, key, title, _ in found:
                assert href == f"{prefix}/glossary" and key in definitions, (prefix + path, key)
                assert html.unescape(title) == definitions[key]  # the definition, in the page's language
            if prefix == "":
                linked |= set(keys)
            main = _main(page)
            for _, key, _, word in found:  # the link is on the first use: no earlier plain-text use of the word
                before = _text(
                    re.sub(r"<(a|label|select|code|h[1-6]|svg)\b.*?</\1>", "", main.split(f'#{key}"', 1)[0], flags=re.S)
                )
                assert not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", before, re.IGNORECASE), (
                    prefix + path,
                    word,
                )
    assert set(REQUIRED_TERMS) <= linked  # every term of the field is linked from some page
    home = _main(client.get("/").text)  # the home page's sentence links the teachers and the student
    assert '<a class="term" href="/glossary#teacher"' in home.split('id="purpose"')[1].split("</p>")[0]
    fr_home = _main(client.get("/fr/").text)
    assert re.search(r'<a class="term" href="/fr/glossary#teacher" title="[^"]+">annotateurs</a>', fr_home)


def test_link_first_uses_skips_links_controls_code_and_headings_and_keeps_the_rest_byte_for_byte():
    page = (
        "<html><head><title>frame</title></head><body><header>the frame</header><main>"
        '<h2>The frame</h2><a href="/x">frame</a><label>frame <select><option>frame</option></select></label>'
        "<code>frame</code><svg><text>frame</text></svg><p>Each frame work &amp; its routes; a teacher&#39;s "
        "direct labels, then the frame again.</p></main><footer>frame</footer></body></html>"
    )
    out = link_first_uses(page, "en")
    assert out.count('class="term"') == 4
    p = out.split("<p>")[1].split("</p>")[0]
    assert p.startswith('Each <a class="term" href="/glossary#frame" title="')
    assert '">frame</a> work &amp; its <a class="term" href="/glossary#route"' in p and '">routes</a>;' in p
    assert '">teacher</a>&#39;s <a class="term" href="/glossary#direct-label"' in p and "then the frame again." in p
    assert re.sub(r'<a class="term"[^>]*>([^<]*)</a>', r"\1", out) == page  # nothing else changed
    fr = link_first_uses("<main><p>l&#39;échantillon d&#39;audit et ses strates</p></main>", "fr")
    assert '/fr/glossary#audit-sample" title="' in fr and '">échantillon d&#39;audit</a>' in fr and '#stratum"' in fr
    assert link_first_uses("<p>no main here: frame</p>", "en") == "<p>no main here: frame</p>"
    layer = "<main><p>strate de diffusion · contestée; une strate du plan</p></main>"  # a release layer is no stratum
    assert link_first_uses(layer, "fr").startswith('<main><p>strate de diffusion · contestée; une <a class="term"')


def test_every_status_a_page_shows_links_to_its_explanation_on_the_methods_page(client):
    for prefix in ("", "/fr"):
        methods = client.get(prefix + "/methods").text
        explained = set(re.findall(r'<dt id="(status-[^"]+)">', methods))
        assert {status_anchor(code) for code, _ in STATUSES} <= explained
        shown = set()
        for path in ("/", "/dossier"):
            for href, title, code in re.findall(
                r'<a class="status" href="([^"]+)" title="([^"]+)"><code>([^<]+)</code></a>',
                client.get(prefix + path).text,
            ):
                assert href == f"{prefix}/methods#{status_anchor(code)}" and status_anchor(code) in explained
                assert html.unescape(title) == vocab.display_name("status", code, prefix.strip("/") or "en")
                shown.add(code)
        assert {vocab.PREDICTION_STATUS, vocab.DIRECT_LABEL_STATUS, vocab.SCORE_ONLY_IMMATURE} <= shown
    assert status_anchor("human_validated:protocol-0123456789ab") == "status-human_validated"
    assert status_anchor("score_only:v0-immature-baseline") == "status-score_only-v0-immature-baseline"


def test_the_header_and_footer_of_every_page_link_the_guide_in_the_pages_language(client):
    for path in _pages(client):
        for prefix, words in (("", ("About", "Methods", "Glossary")), ("/fr", ("À propos", "Méthodes", "Glossaire"))):
            page = html.unescape(client.get(prefix + path).text)
            for part in ("header", "footer"):
                if path.startswith("/works/") and part == "header":
                    continue  # the work page's own navigation (the static site's template) has no header
                section = page.split(f"<{part}>")[1].split(f"</{part}>")[0]
                for slug, word in zip(("about", "methods", "glossary"), words, strict=True):
                    assert f'<a href="{prefix}/{slug}">{word}</a>' in section, (prefix + path, part, slug)


def test_the_api_docs_page_links_the_guide_in_its_header(client):
    header = client.get("/api/v1/docs").text.split("<header>")[1].split("</header>")[0]
    for slug, word in (("about", "About"), ("methods", "Methods"), ("glossary", "Glossary")):
        assert f'<a href="/{slug}">{word}</a>' in header
        assert client.get(f"/{slug}").status_code == 200


def test_every_vocabulary_code_has_a_display_name_in_english_and_french():
    for vocabulary, codes in (
        ("category", vocab.CATEGORIES),
        ("domain", vocab.DOMAINS),
        ("study_design", vocab.STUDY_DESIGNS),
        ("genre", vocab.GENRES),
        ("confidence", vocab.CONFIDENCES),
        ("about_ca", vocab.ABOUT_CA_TARGETS),
        ("route", vocab.ROUTES),
        ("teacher_role", vocab.TEACHER_ROLES),
        (
            "status",
            (
                vocab.DIRECT_LABEL_STATUS,
                vocab.PREDICTION_STATUS,
                vocab.SCORE_ONLY_IMMATURE,
                vocab.SCORE_ONLY_MATURE,
                vocab.SCORE_ONLY_REFERENCE,
            ),
        ),
    ):
        assert set(vocab.DISPLAY_NAMES[vocabulary]) >= set(codes), vocabulary
        for code in codes:
            en, fr = vocab.display_name(vocabulary, code, "en"), vocab.display_name(vocabulary, code, "fr")
            assert en and fr and fr != en, (vocabulary, code, en, fr)
            assert en != code or vocabulary == "confidence", (vocabulary, code)  # high, medium, low are words
    assert vocab.display_name("study_design", "randomized_trial", "fr") == "Essai randomisé"
    assert vocab.display_name("domain", "methods") != vocab.display_name("genre", "methods")  # one code, two senses
    assert vocab.display_name("status", "human_validated:protocol-0123456789ab", "fr") == (
        "validé par des humains selon le protocole d'audit protocol-0123456789ab"
    )
    assert (
        vocab.display_name("genre", "a_future_genre") == "a_future_genre" and vocab.display_name("genre", None) is None
    )
    with pytest.raises(KeyError, match="no vocabulary 'genres'"):
        vocab.display_name("genres", "review")
    # the statuses are spelled once: the records and the human layers publish the same strings
    assert records.DIRECT_LABEL_STATUS == vocab.DIRECT_LABEL_STATUS
    assert (human_layer.HUMAN_CODED, human_layer.HUMAN_VALIDATED) == (
        vocab.HUMAN_CODED_PREFIX,
        vocab.HUMAN_VALIDATED_PREFIX,
    )


def test_forms_and_facets_show_display_names_while_links_and_the_api_keep_the_codes(client, site_release):
    codes = set(vocab.CATEGORIES + vocab.DOMAINS + vocab.STUDY_DESIGNS + vocab.GENRES) | {"candidate", "consensus"}
    for prefix, lang in (("", "en"), ("/fr", "fr")):
        for path in ("/", "/dossier"):
            page = client.get(prefix + path).text
            options = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', page)
            assert len(options) > (40 if path == "/" else 15)
            raw = [(v, label) for v, label in options if label in codes or re.fullmatch(r"[a-z]+(_[a-z]+)+", label)]
            assert raw == [], (prefix + path, raw)
        home = client.get(prefix + "/").text
        for name, vocabulary, codes_of in (
            ("label_domain", "domain", vocab.DOMAINS),
            ("label_study_design", "study_design", vocab.STUDY_DESIGNS),
            ("label_genre", "genre", vocab.GENRES),
        ):
            select = home.split(f'<select name="{name}">')[1].split("</select>")[0]
            shown = re.findall(r'<option value="([^"]+)"[^>]*>([^<]+)</option>', select)
            assert shown == [(c, html.escape(vocab.display_name(vocabulary, c, lang), quote=True)) for c in codes_of]
        dossier = client.get(prefix + "/dossier").text.split('<select name="head">')[1].split("</select>")[0]
        heads = dict(re.findall(r'<option value="([^"]+)"[^>]*>([^<]+)</option>', dossier))
        assert html.unescape(heads["category_set"]) == (
            "Set of categories" if lang == "en" else "Ensemble des catégories"
        )
        assert html.unescape(heads["about_ca_system"]) == vocab.display_name("about_ca", "about_ca_system", lang)
    # the statistics page names study designs; its JSON keeps the codes
    designs = {
        r[0] for r in _sql(site_release[0], "SELECT DISTINCT study_design FROM work_labels WHERE status = 'labelled'")
    }
    stats = (
        html.unescape(client.get("/fr/statistics").text).split('id="labels-by-study-design"')[1].split("</section>")[0]
    )
    for code in designs - {None}:
        assert f'<th scope="row">{vocab.display_name("study_design", code, "fr")}</th>' in stats
        assert f">{code}<" not in stats
    api = client.get("/api/v1/statistics").json()
    assert {r["study_design"] for r in api["labels_by_study_design"]} <= set(vocab.STUDY_DESIGNS) | {None}
    facets = client.get("/api/v1/count").json()["facets"]
    assert {f["value"] for f in facets["direct_label"]} <= set(vocab.CATEGORIES)


def test_the_work_page_names_a_labels_confidence_in_the_pages_language(client, site_release):
    (confidence,) = _sql(
        site_release[0],
        "SELECT confidence FROM work_labels l JOIN works w USING (work_key) WHERE w.id = 'W7000' LIMIT 1",
    )[0]
    assert confidence in vocab.CONFIDENCES
    work = client.get("/works/W7000", follow_redirects=False).headers["location"]
    en, fr = _text(client.get(work).text), _text(client.get("/fr" + work).text)
    assert f"; confidence {confidence}." in en  # English: the word is the code
    said = vocab.display_name("confidence", confidence, "fr")
    assert said != confidence and f"; confiance {said}." in fr and f"confiance {confidence}." not in fr
