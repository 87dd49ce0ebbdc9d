"""Tests of the model card pages (metacan_pipeline/site/web/model_card.py, templates/model_card.html.j2) on a real
release: the card is the real one of a student trained on the student world (metacan_pipeline.student.card), written
for the release's classifier version; the page in English and French, its JSON at its stable address, the links to it."""

from __future__ import annotations

import dataclasses
import json
import re
from html import escape

import pytest
from starlette.testclient import TestClient

from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.site.web.model_card import figure
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.card import CARD_JSON, build_card, card_markdown, qualification_standing, write_card
from metacan_pipeline.student.evaluation import holdout_metric_rows, write_reliability_plots
from metacan_pipeline.student.models import load_published
from metacan_pipeline.student.training import load_training_inputs
from metacan_pipeline_tests.builders.student import run_student, write_inputs
from metacan_pipeline_tests.site.french import english_left

VERSION = "metacan-v0-hybrid-000000000000"  # the site world's classifier version


@pytest.fixture(scope="module")
def card(site_release, tmp_path_factory):
    """The real card of a student trained on the student world, written for the site world's classifier version."""
    from metacan_pipeline.student.assets import student_heads

    student = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("student") / "data"))
    write_inputs(student)
    md = run_student(student, student_heads).asset_materializations_for_node("student_heads")[0].metadata
    bundle = dataclasses.replace(load_published(student, md["model_version"].value), model_version=VERSION)
    inputs, _ = load_training_inputs(student, "test")
    report = holdout_metric_rows(bundle, inputs)
    body = build_card(
        bundle,
        report,
        qualification_standing(student),
        created_at="2026-12-07T00:00:00",
        code_version="student-v3",
        holdout_works=inputs.holdout_works,
    )
    storage = site_release[0]
    write_card(storage.root, body)
    write_reliability_plots(storage, VERSION, report.curves)
    return body


@pytest.fixture(scope="module")
def client(site_release, card):
    with TestClient(create_app(site_release[0].root, rate_limit="off")) as c:
        yield c


def _head(card: dict, source: str, target: str) -> dict:
    return next(h for h in card["heads"] if (h["source"], h["target"]) == (source, target))


def test_the_card_page_in_english_shows_every_head_with_its_figures_and_claim(client, card):
    page = client.get(f"/models/{VERSION}")
    assert page.status_code == 200 and '<html lang="en">' in page.text
    html = page.text
    assert f"Model card <code>{VERSION}</code>" in html
    head = _head(card, "codex", "about_ca_topic")  # a head whose figures are neither 0 nor 1
    ap = head["metrics"]["ap"]
    shown = f"{ap['value']:.3f} [{ap['ci_low']:.3f}; {ap['ci_high']:.3f}]"
    assert figure(ap, "en") == shown and shown in html
    row = re.search(r"<tr><th scope=\"row\">codex</th><td>Canada as a subject</td>.*?</tr>", html).group(0)
    assert f"<td>{head['labels']} ({head['positives']})</td><td>{head['holdout_n']}</td>" in row
    assert shown in row and "Decides: its quota-calibrated decisions" in row and "machine_predicted_unvalidated" in row
    narrow = _head(card, "codex", "metaepi_narrow")  # no positive to learn from: no score, whatever the gate
    assert narrow["no_score"] and escape(narrow["claim"]["text"]) in html
    assert narrow["claim"]["text"] == (
        f"No score: {narrow['no_score']}; a head that saw one class ranks nothing, so it writes no score."
    )
    for limit in card["limits"]:
        assert escape(limit["text"]) in html
    # keyboard: every section is reachable from the page's own links, the plots have their alternative text
    for anchor in ("training", "heads", "reliability", "limits"):
        assert f'href="#{anchor}"' in html and f'id="{anchor}"' in html
    assert f'src="/models/{VERSION}/reliability_codex.png" alt="Reliability plot of the codex heads' in html


def test_the_card_page_in_french_says_the_sentences_and_figures_in_french(client, card):
    page = client.get(f"/fr/models/{VERSION}")
    assert page.status_code == 200 and '<html lang="fr">' in page.text
    html = page.text
    assert f"Fiche du modèle <code>{VERSION}</code>" in html and "Limites connues" in html
    ap = _head(card, "codex", "about_ca_topic")["metrics"]["ap"]
    shown = f"{ap['value']:.3f} [{ap['ci_low']:.3f}; {ap['ci_high']:.3f}]".replace(".", ",")
    assert figure(ap, "fr") == shown and shown in html
    assert "Décide : ses décisions calibrées par quota" in html and "Decides:" not in html
    assert "Scores seulement : ce sont les étiquettes directes" in html
    assert "jamais son résumé ni son texte intégral" in html and "never its abstract" not in html
    assert "Métarecherche" in html  # a category head by its display name, in French
    assert english_left(client, [f"/models/{VERSION}"]) == []  # no English sentence left on the French card


def test_the_card_json_and_markdown_are_at_stable_addresses(client, card, site_release):
    got = client.get(f"/models/{VERSION}/model_card.json")
    assert got.status_code == 200 and got.headers["content-type"] == "application/json"
    assert got.json() == card
    assert got.content == (site_release[0].root / "reports" / VERSION / CARD_JSON).read_bytes()
    md = client.get(f"/models/{VERSION}/model_card.md")
    assert md.status_code == 200 and md.text == card_markdown(card)
    png = client.get(f"/models/{VERSION}/reliability_gemma.png")
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    # nothing else is served: another version, another file name, a path out of the folder
    assert client.get("/models/metacan-v0-hybrid-ffffffffffff").status_code == 404
    assert client.get("/models/metacan-v0-hybrid-ffffffffffff/model_card.json").status_code == 404
    assert client.get(f"/models/{VERSION}/secrets.txt").status_code == 404
    assert client.get(f"/models/{VERSION}/..%2F..%2Fcatalog.duckdb").status_code == 404
    assert "not a classifier version of release" in client.get("/models/nope").text


def test_the_card_is_linked_where_the_model_is_named(client):
    moved = client.get("/model", follow_redirects=False)
    assert moved.status_code == 307 and moved.headers["location"] == f"/models/{VERSION}"
    assert client.get("/fr/model", follow_redirects=False).headers["location"] == f"/fr/models/{VERSION}"
    for path, prefix in (("/statistics", ""), ("/fr/statistics", "/fr")):
        assert f'<a href="{prefix}/models/{VERSION}" title=' in client.get(path).text
    work = client.get("/works/W7001", follow_redirects=True)
    assert (
        work.status_code == 200
        and f'<a href="/models/{VERSION}" id="model-card">Model card of this version</a>. Permalink' in work.text
    )
    json.loads(client.get(f"/models/{VERSION}/model_card.json").text)


def _tab_to(page, href: str, most: int = 200) -> None:
    """Press Tab until the link to ``href`` has the keyboard focus (fails when it never does)."""
    for _ in range(most):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.getAttribute('href')") == href:
            return
    pytest.fail(f"the link {href} never took the keyboard focus")


@pytest.mark.browser
def test_the_card_is_reached_and_read_from_the_keyboard_in_headless_chromium(site_release, card, browser):
    """From the cohort builder to the card and its Heads section with Tab and Enter only, in French; the reliability
    plots load."""
    from metacan_pipeline_tests.site.test_site_browser import served

    with served(site_release[0].root) as base:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="fr-CA")
        page = context.new_page()
        failed = []
        page.on("response", lambda r: failed.append(r.url) if r.status >= 400 and "/favicon.ico" not in r.url else None)
        page.goto(base + "/fr/")
        _tab_to(page, f"/fr/models/{VERSION}")
        page.keyboard.press("Enter")
        page.wait_for_url(base + f"/fr/models/{VERSION}")
        assert page.locator("html").get_attribute("lang") == "fr"
        assert page.locator("h1").inner_text() == f"Fiche du modèle {VERSION}"
        _tab_to(page, "#heads")
        page.keyboard.press("Enter")
        page.wait_for_url(base + f"/fr/models/{VERSION}#heads")
        assert page.get_by_role("heading", name="Têtes", exact=True).is_visible()
        widths = page.eval_on_selector_all("#reliability img", "imgs => imgs.map(i => i.complete && i.naturalWidth)")
        assert len(widths) == 2 and all(w > 0 for w in widths)
        context.close()
    assert failed == [], failed


def test_the_french_card_says_why_a_head_gives_no_score_and_names_every_head():
    from metacan_pipeline.site.web.model_card import head_name, said, value_in

    claim = {
        "text": "No score: no positive direct label to learn from (0 positives of 24 labels); ...",
        "msgid": "No score: %(reason)s; a head that saw one class ranks nothing, so it writes no score.",
        "values": {"reason": "no positive direct label to learn from (0 positives of 24 labels)"},
    }
    assert (
        said(claim, "fr")
        .replace("\xa0", " ")
        .startswith("Aucun score : aucune étiquette directe positive dont apprendre (0 positif sur 24")
    )
    gate = "codex positives 0 < 20; sample teacher not qualified (kappa 0.00 on 50 reference works (16 positive); needs 0.37)"
    fr = value_in(gate, "fr").replace("\xa0", " ")
    assert fr.startswith("positifs de codex : 0 < 20; annotateur d'échantillon : annotateur non qualifié (kappa")
    assert "sample" not in fr and "not qualified" not in fr
    assert value_in(gate, "en") == gate  # English stays the card's own text
    assert value_in("no negative direct label to learn from (3 positives of 3 labels)", "fr") == (
        "aucune étiquette directe négative dont apprendre (3 positifs sur 3 étiquettes)"
    )
    assert [head_name(t, "fr") for t in ("study_design", "domain", "genre", "about_ca_system")] == [
        "Devis d'étude",
        "Domaine",
        "Genre",
        "Porte sur le système de recherche canadien",
    ]
    assert head_name("a_future_head", "fr") == "a_future_head"
