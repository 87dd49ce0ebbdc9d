"""Tests of the coding pages (metacan_pipeline/site/web/coding_pages.py) on the coding server (coding_app.py):
Starlette's TestClient and, for keyboard-only coding, headless Chromium on uvicorn over loopback.

The world is the site tests' release (60 works with direct labels, predictions and machine scores, built through
Dagster), an audit protocol drawing 8 of its works, the asset ``coding_tasks`` materialized, a real SQLite coding
store and a loopback OpenAlex that serves the abstracts."""

from __future__ import annotations

import html
import logging
import re
import shutil
import socket
import sqlite3
import threading
import time

import pytest
import uvicorn
from starlette.testclient import TestClient

from metacan_pipeline import settings
from metacan_pipeline.audit.coding.assignments import draw_pairs
from metacan_pipeline.audit.coding.loading import load_coding_tasks
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.audit.protocol.locked import current_protocol
from metacan_pipeline.publish.abstracts import AbstractFetcher
from metacan_pipeline.site.build.release import releases_dir
from metacan_pipeline.site.web.coding_app import create_coding_app
from metacan_pipeline_tests.browser import PageWatch, launch_chromium, start_playwright
from metacan_pipeline_tests.builders.coding import coding_app, coding_world

ABSTRACT = "We audited the reporting of 120 surgical trials registered in Canada."
#: What would betray a machine output (or the release it lives in) on a coder's page.
MACHINE_WORDS = (
    "gemma",
    "codex",
    "teacher",
    "candidate",
    "consensus",
    "machine_predicted",
    "score",
    "score_only",
    "metacan-v0-hybrid",
    "release-",
    "stratum",
    "negative_far",
    "design_weight",
    "design weight",
    "selection_probability",
    "direct label",
    "prediction",
)
ANSWER = {
    "categories": ["metaresearch", "metaepi_broad"],
    "domain": "reporting",
    "study_design": "observational",
    "genre": "empirical",
    "about_ca_system": "no",
    "about_ca_topic": "yes",
    "confidence": "medium",
    "note": "reporting of trials across a literature",
}


@pytest.fixture(scope="module")
def world(site_release):
    storage, frame, _ = site_release
    coders = ("ann", "bob", "cy", "dan", "eve")
    with coding_world(storage, frame, [f["id"] for f in frame[:8]], coders, ABSTRACT, ["cy"], ["dan"]) as w:
        yield w


@pytest.fixture(scope="module")
def app(world):
    with coding_app(world) as asgi:
        yield asgi


def client(app) -> TestClient:
    return TestClient(app, follow_redirects=False)


def csrf(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def sign_in(app, token: str, prefix: str = "") -> TestClient:
    c = client(app)
    form = c.get(f"{prefix}/coding/sign-in")
    r = c.post(f"{prefix}/coding/sign-in", data={"csrf_token": csrf(form.text), "token": token})
    assert r.status_code == 303 and r.headers["location"] == f"{prefix}/coding/", r.text
    return c


def next_work(c: TestClient, prefix: str = "") -> tuple[str, str]:
    r = c.get(f"{prefix}/coding/next")
    assert r.status_code == 303
    wid = r.headers["location"].rsplit("/", 1)[1]
    page = c.get(r.headers["location"])
    assert page.status_code == 200
    return wid, page.text


def submit(c: TestClient, wid: str, page: str, answer: dict, prefix: str = ""):
    evidence = re.search(r'name="evidence_sha256" value="([0-9a-f]{64})"', page).group(1)
    return c.post(
        f"{prefix}/coding/works/{wid}", data={**answer, "csrf_token": csrf(page), "evidence_sha256": evidence}
    )


def assert_masked(page: str) -> None:
    text = html.unescape(page).lower()
    for word in MACHINE_WORDS:
        assert word not in text, word
    assert not re.search(r"(?<![\d./])0\.\d{2}", text)  # no score-like number (a DOI such as 10.18637 is not one)


def test_sign_in_takes_a_token_by_post_only_and_refuses_a_bad_or_revoked_one(app, world, caplog):
    caplog.set_level(logging.DEBUG)
    c = client(app)
    assert c.get("/coding/").headers["location"] == "/coding/sign-in"
    form = c.get("/coding/sign-in")
    assert form.status_code == 200 and 'type="password"' in form.text and 'method="post"' in form.text
    assert form.headers["cache-control"] == "no-store" and "script-src" not in form.headers["content-security-policy"]
    signin_cookie = form.headers["set-cookie"]
    assert "HttpOnly" in signin_cookie and "SameSite=strict" in signin_cookie
    for token in ("not-a-token-at-all-but-long-enough", world["tokens"]["dan"]):  # unknown, revoked
        r = c.post("/coding/sign-in", data={"csrf_token": csrf(form.text), "token": token})
        assert r.status_code == 403 and "does not sign anyone in" in r.text
        assert "metacan_coding_session" not in r.headers.get("set-cookie", "")
    # without the form's own token (another site posting a token) nothing happens
    other = client(app).post("/coding/sign-in", data={"csrf_token": "x" * 64, "token": world["tokens"]["ann"]})
    assert other.status_code == 403 and "did not come from this site" in other.text
    ok = c.post("/coding/sign-in", data={"csrf_token": csrf(form.text), "token": world["tokens"]["ann"]})
    cookie = ok.headers["set-cookie"]
    assert ok.status_code == 303 and "metacan_coding_session=" in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and world["tokens"]["ann"] not in cookie
    assert world["tokens"]["ann"] not in ok.headers["location"]
    queue = c.get("/coding/")
    assert queue.status_code == 200 and "Signed in as ann" in queue.text
    assert "ann signed in" in caplog.text and "sign-in refused" in caplog.text
    assert all(token not in caplog.text for token in world["tokens"].values())  # never logged
    # a GET never signs in, even with the token in the address (which only this test puts there)
    assert client(app).get("/coding/sign-in", params={"token": world["tokens"]["ann"]}).status_code == 200


def test_sign_out_ends_the_session_on_the_server(app, world):
    c = sign_in(app, world["tokens"]["eve"])
    session = c.cookies["metacan_coding_session"]
    page = c.get("/coding/").text
    refused = c.post("/coding/sign-out", data={"csrf_token": "0" * 64})
    assert refused.status_code == 403 and c.get("/coding/").status_code == 200
    out = c.post("/coding/sign-out", data={"csrf_token": csrf(page)})
    assert out.status_code == 303 and out.headers["location"] == "/coding/sign-in"
    replay = client(app)
    replay.cookies.set("metacan_coding_session", session)
    assert replay.get("/coding/").headers["location"] == "/coding/sign-in"  # the old cookie opens nothing


def test_a_revoked_coder_is_signed_out_and_unknown_addresses_stay_on_the_coding_layout(app, world):
    with CodingStore(world["path"]) as store:
        token = store.add_coder("fay")
    c = sign_in(app, token)
    assert c.get("/coding/").status_code == 200
    with CodingStore(world["path"]) as store:
        store.revoke_coder("fay")
    assert c.get("/coding/").headers["location"] == "/coding/sign-in"
    for path in ("/coding/nowhere", "/fr/coding/works/W7000/extra"):
        missing = client(app).get(path)
        assert missing.status_code == 404 and "coding" in missing.text.lower()
        assert_masked(missing.text)  # the site's own 404 page would name the release and the classifier
    assert "Il n'y a aucune page de codage" in html.unescape(client(app).get("/fr/coding/nowhere").text)


def test_a_coder_codes_their_own_queue_answers_append_and_the_latest_counts(app, world):
    pid = world["pid"]
    ann = sign_in(app, world["tokens"]["ann"])
    wid, page = next_work(ann)
    assert wid in world["drawn"] and ABSTRACT in page and "Fetched live from OpenAlex" in page
    assert_masked(page)
    assert "checked" not in re.search(r'id="field-categories".*?</fieldset>', page, re.S).group(0)
    r = submit(ann, wid, page, ANSWER)
    assert r.status_code == 303 and r.headers["location"] == "/coding/next"
    queue = ann.get("/coding/").text
    assert "Done: 1 · To do: 7" in queue and f"/coding/works/{wid}" in queue
    # open it again: the form shows ann's own answer; submitting again appends a row, the latest counts
    again = ann.get(f"/coding/works/{wid}").text
    assert "You coded this work already" in again and 'value="reporting" checked' in again
    assert ANSWER["note"] in again
    submit(ann, wid, again, {**ANSWER, "confidence": "high"})
    with CodingStore(world["path"]) as store:
        rows = store._con.execute(
            "SELECT confidence, evidence_sha256, source FROM coding_answers WHERE coder = 'ann' AND id = ? "
            "ORDER BY rowid",
            [wid],
        ).fetchall()
        latest = store.my_answer(pid, wid, "ann")
        task = store.task(pid, wid)
    assert [r[0] for r in rows] == ["medium", "high"] and {r[2] for r in rows} == {"site"}
    assert {r[1] for r in rows} == {task["evidence_sha256"]}  # the evidence version the page showed
    assert latest["confidence"] == "high" and latest["categories"] == ["metaresearch", "metaepi_broad"]
    assert latest["about_ca_system"] is False and latest["about_ca_topic"] is True


def test_a_coder_never_sees_another_coders_answer_nor_a_work_outside_their_queue(app, world):
    ann, bob = sign_in(app, world["tokens"]["ann"]), sign_in(app, world["tokens"]["bob"])
    wid, page = next_work(bob)
    with CodingStore(world["path"]) as store:
        ann_done = {a["id"] for a in store.coder_answers(world["pid"], "ann")}
    assert ann_done and wid in ann_done  # bob is handed ann's first work: two coders per work
    assert ANSWER["note"] not in page and "You coded this work already" not in page
    assert not re.search(r'value="reporting" checked', page)
    assert_masked(page)
    # a work bob neither answered nor was handed cannot be opened or answered
    other = next(w for w in world["drawn"] if w != wid and w not in ann_done)
    assert bob.get(f"/coding/works/{other}").status_code == 403
    assert submit(bob, other, page, ANSWER).status_code == 403
    # a work of no task answers as another coder's does: a coder cannot probe which works the audit sample holds
    unknown, others = bob.get("/coding/works/W99999999"), bob.get(f"/coding/works/{other}")
    assert unknown.status_code == others.status_code == 403
    assert unknown.text.replace("W99999999", other) == others.text
    # and the queue page lists only bob's own works
    submit(bob, wid, page, {**ANSWER, "categories": [], "domain": "", "note": "not about research"})
    assert re.findall(r"/coding/works/(W\d+)", bob.get("/coding/").text) == [wid]
    del ann


def test_a_refused_answer_keeps_what_was_entered_and_says_why_in_the_pages_language(app, world):
    c = sign_in(app, world["tokens"]["eve"], prefix="/fr")
    wid, page = next_work(c, prefix="/fr")
    assert '<html lang="fr">' in page and "Votre réponse" in page and "Catégories" in page
    bad = {**ANSWER, "categories": ["metaresearch"], "domain": "", "note": "domaine oublié"}
    r = submit(c, wid, page, bad, prefix="/fr")
    assert r.status_code == 400 and "Votre réponse n'est pas encore enregistrée" in r.text
    assert "Domaine\u00a0: choisissez-en un" in html.unescape(r.text) and 'href="#field-domain"' in r.text
    assert "domaine oublié" in html.unescape(r.text) and 'value="metaresearch" checked' in r.text
    # no CSRF token: refused, nothing appended
    no_token = c.post(f"/fr/coding/works/{wid}", data=ANSWER)
    assert no_token.status_code == 403 and "ne vient pas de ce site" in html.unescape(no_token.text)
    with CodingStore(world["path"]) as store:
        assert store.my_answer(world["pid"], wid, "eve") is None
    ok = submit(c, wid, page, {**bad, "domain": "methods"}, prefix="/fr")
    assert ok.status_code == 303 and ok.headers["location"] == "/fr/coding/next"


def test_stopping_and_coming_back_resumes_at_the_held_work(app, world):
    first = sign_in(app, world["tokens"]["cy"])
    wid, _ = next_work(first)
    later = sign_in(app, world["tokens"]["cy"])  # another sign-in, as after closing the browser
    assert next_work(later)[0] == wid


def test_adjudication_shows_both_answers_and_records_the_adjudicated_code(app, world):
    pid = world["pid"]
    with CodingStore(world["path"]) as store:
        disputed = store.adjudication_queue(pid, "cy")[0]
    assert disputed, "ann and bob disagree on their shared work"
    wid = disputed[0]["id"]
    assert sign_in(app, world["tokens"]["ann"]).get("/coding/adjudication").status_code == 403
    cy = sign_in(app, world["tokens"]["cy"])
    listing = cy.get("/coding/adjudication").text
    assert f"/coding/adjudication/{wid}" in listing and "Adjudication" in cy.get("/coding/").text
    # the adjudicator's landing page says how many disagreements wait, in each language
    n = len(disputed)
    waiting = f"{n} disagreement is waiting" if n == 1 else f"{n} disagreements are waiting"
    assert waiting in cy.get("/coding/").text and "votre arbitrage" in cy.get("/fr/coding/").text
    page = cy.get(f"/coding/adjudication/{wid}").text
    table = re.search(r'<table class="both".*?</table>', page, re.S).group(0)
    # the two coders under pseudonymous labels (in name order: ann is coder A), never their names
    assert '<th scope="col">coder A</th>' in table and '<th scope="col">coder B</th>' in table
    assert ">ann<" not in page and ">bob<" not in page
    assert ANSWER["note"] in table and "not about research" in table and 'class="differs"' in table
    # the form starts from what they agreed on (study design, genre, the two flags) and leaves the rest blank
    form = re.search(r'<form method="post" action="/coding/adjudication/.*?</form>', page, re.S).group(0)
    checked = set(re.findall(r'name="(\w+)" value="(\w*)" checked', form))
    assert checked == {
        ("study_design", "observational"),
        ("genre", "empirical"),
        ("about_ca_system", "no"),
        ("about_ca_topic", "yes"),
        ("confidence", ""),
    }
    assert 'id="differs-categories"' in form and 'id="differs-domain"' in form
    assert re.search(r'id="differs-category-metaresearch".*?ticked by coder A only', form, re.S)
    assert_masked(page)
    evidence = re.search(r'name="evidence_sha256" value="([0-9a-f]{64})"', page).group(1)
    r = cy.post(
        f"/coding/adjudication/{wid}",
        data={**ANSWER, "note": "reporting across trials", "csrf_token": csrf(page), "evidence_sha256": evidence},
    )
    assert r.status_code == 303 and r.headers["location"] == "/coding/adjudication"
    with CodingStore(world["path"]) as store:
        assert wid not in {d["id"] for d in store.disagreements(pid)}
        final = next(c for c in store.adjudicated_codes(pid) if c["id"] == wid)
    assert final["basis"] == "adjudicated" and final["domain"] == "reporting"


@pytest.mark.browser
def test_chromium_signs_in_and_codes_two_works_from_the_keyboard_only(world):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with CodingStore(world["path"]) as store:
        token = store.add_coder("kim")
    # an app of its own: the server's shutdown closes the app's coding store (its lifespan), which the module's other
    # tests still use through the shared app
    served = create_coding_app(world["storage"].root, abstracts=AbstractFetcher(world["openalex"].base_url))
    server = uvicorn.Server(uvicorn.Config(served, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    playwright = start_playwright()
    seen: list[str] = []
    try:
        browser = launch_chromium(playwright)
        page = browser.new_context(java_script_enabled=False).new_page()
        watch = PageWatch().attach(page)

        def tab_to(selector: str, limit: int = 60) -> None:
            for _ in range(limit):
                page.keyboard.press("Tab")
                if page.evaluate(f"document.activeElement.matches({selector!r})"):
                    return
            pytest.fail(f"Tab never reached {selector}")

        page.goto(base + "/coding/")
        assert page.url == base + "/coding/sign-in"
        tab_to("#token")
        page.keyboard.type(token)
        with page.expect_navigation():
            page.keyboard.press("Enter")
        seen.append(page.content())
        tab_to("#next-work")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        coded = []
        for n in range(2):
            seen.append(page.content())
            coded.append(page.url.rsplit("/", 1)[1])
            tab_to("a.skip")
            page.keyboard.press("Enter")  # the skip link: focus to the content
            tab_to('input[name="categories"]')
            outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
            assert outline == "solid"  # the focus is visible
            if n == 0:
                page.keyboard.press("Space")  # metaresearch
                tab_to('input[name="domain"]')
                page.keyboard.press("ArrowDown")  # from "no domain" to methods
            tab_to('input[name="study_design"]')
            page.keyboard.press("Space")  # randomized_trial
            tab_to('input[name="genre"]')
            page.keyboard.press("Space")  # empirical
            for field in ("about_ca_system", "about_ca_topic"):
                tab_to(f'input[name="{field}"]')
                page.keyboard.press("Space")  # yes
                page.keyboard.press("ArrowDown")  # no
            tab_to("#note")
            page.keyboard.type(f"keyboard work {n}")
            if n == 0:
                tab_to("#submit")
            else:
                page.keyboard.press("Shift+Tab")  # back into the unresolved checkbox: Enter submits from there
            with page.expect_navigation():
                page.keyboard.press("Enter")
        seen.append(page.content())
        assert not watch.dialogs and not watch.page_errors
    finally:
        playwright.stop()
        server.should_exit = True
        thread.join(timeout=10)
    with CodingStore(world["path"]) as store:
        answers = {a["id"]: a for a in store.coder_answers(world["pid"], "kim")}
    assert list(answers) == coded or sorted(answers) == sorted(coded)
    first, second = answers[coded[0]], answers[coded[1]]
    assert (first["categories"], first["domain"], first["study_design"]) == (
        ["metaresearch"],
        "methods",
        "randomized_trial",
    )
    assert (first["about_ca_system"], first["about_ca_topic"], first["note"]) == (False, False, "keyboard work 0")
    assert (second["categories"], second["domain"], second["genre"]) == ([], None, "empirical")
    assert second["note"] == "keyboard work 1" and not second["unresolved"]
    for html_text in seen:  # everything the coder's browser was given
        assert_masked(html_text)


def test_a_damaged_coding_store_is_a_503_page_in_the_coders_language(world, tmp_path):
    """A coding store whose file is overwritten under a running server answers every coding page with a 503 page
    saying so in a sentence, in the coder's language, without a traceback. The store damaged is a copy of the
    module's (the release and the coding store copied into a data folder of this test), so no other test sees it."""
    data = tmp_path / "data"
    shutil.copytree(releases_dir(world["storage"].root), releases_dir(data))
    path = settings.coding_store_path(str(data))
    path.parent.mkdir(parents=True)
    with sqlite3.connect(world["path"]) as src, sqlite3.connect(path) as dst:  # every committed row, WAL included
        src.backup(dst)
    own = create_coding_app(data, abstracts=AbstractFetcher(world["openalex"].base_url))
    try:
        c = sign_in(own, world["tokens"]["ann"])
        assert c.get("/coding/").status_code == 200
        with sqlite3.connect(path) as con:  # the answers out of the write-ahead log, into the file
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with open(path, "r+b") as f:
            f.seek(100)
            f.write(b"\xff" * (path.stat().st_size - 100))
        for prefix, words in (
            ("", "The coding store cannot be used right now"),
            ("/fr", "Le dépôt de codage est inutilisable"),
        ):
            fresh = client(own)  # signing in writes a session row: the store reads its damaged pages
            form = fresh.get(f"{prefix}/coding/sign-in")
            r = fresh.post(
                f"{prefix}/coding/sign-in", data={"csrf_token": csrf(form.text), "token": world["tokens"]["bob"]}
            )
            assert r.status_code == 503 and words in r.text and "Traceback" not in r.text, r.text[:300]
            r = c.get(f"{prefix}/coding/")
            assert r.status_code == 503 and words in r.text, r.text[:300]
    finally:
        own.state.coding.close()
    with CodingStore(world["path"]) as store:  # the module's store is untouched
        assert store.coder_for_token(world["tokens"]["ann"]) == "ann"


@pytest.fixture(scope="module")
def study(world, tmp_path_factory):
    """A study with coder pairs: the module's protocol loaded into a coding store of its own, which had three coders
    and an adjudicator when the tasks were loaded (so the load assigned every work to a pair), on a coding server."""
    data = tmp_path_factory.mktemp("study") / "data"
    path = settings.coding_store_path(str(data))
    with CodingStore(path) as store:
        tokens = {name: store.add_coder(name) for name in ("ann", "bob", "cy", "judge")}
        store.grant_role("judge")
        out = load_coding_tasks(world["storage"], store, source="test")
        pairs = store.assignments(world["pid"])
    asgi = create_coding_app(data, abstracts=AbstractFetcher(world["openalex"].base_url))
    yield {"app": asgi, "tokens": tokens, "pairs": pairs, "path": path, "load": out}
    asgi.state.coding.close()


def test_a_coder_codes_only_the_works_of_their_pair_and_the_queues_show_titles(study, world):
    pid, pairs = world["pid"], study["pairs"]
    assert study["load"]["pairs"]["assigned"] == 8 and sorted(study["load"]["pairs"]["by_coder"].values()) == [5, 5, 6]
    assert set(pairs) == set(world["drawn"]) and all(len(p) == 2 and "judge" not in p for p in pairs.values())
    # drawn from the locked protocol's content hash: anyone holding the protocol draws the same pairs again
    seed = current_protocol(world["storage"]).content_sha256
    assert {w: tuple(p) for w, p in pairs.items()} == draw_pairs(seed, world["drawn"], ["ann", "bob", "cy"])
    ann = sign_in(study["app"], study["tokens"]["ann"])
    mine = sorted(w for w, p in pairs.items() if "ann" in p)
    with CodingStore(study["path"]) as store:
        titles = store.titles(pid)
    assert f"To do: {len(mine)}" in ann.get("/coding/").text
    handed = []
    for _ in mine:
        wid, page = next_work(ann)
        handed.append(wid)
        assert submit(ann, wid, page, ANSWER).status_code == 303
    assert sorted(handed) == mine and ann.get("/coding/next").headers["location"] == "/coding/?done=1"
    queue = ann.get("/coding/").text
    listed = {w: html.unescape(t) for w, t in re.findall(r'href="/coding/works/(W\d+)">(.*?)</a>', queue)}
    assert listed == {w: titles[w] for w in mine} and "<script>" not in queue  # each under its title, escaped
    # a work of another pair can be neither opened nor answered, though nobody holds it
    other = next(w for w, p in pairs.items() if "ann" not in p)
    assert ann.get(f"/coding/works/{other}").status_code == 403
    r = submit(ann, other, page, ANSWER)
    assert r.status_code == 403 and "not in your queue" in r.text
    with CodingStore(study["path"]) as store:
        assert store.my_answer(pid, other, "ann") is None
        # the partner disagrees on the evaluated head for one shared work: the adjudication queue names it by title
        shared = mine[0]
        partner = next(c for c in pairs[shared] if c != "ann")
    c = sign_in(study["app"], study["tokens"][partner])
    page = c.get(f"/coding/works/{shared}").text
    assert submit(c, shared, page, {**ANSWER, "categories": [], "domain": ""}).status_code == 303
    listing = sign_in(study["app"], study["tokens"]["judge"]).get("/coding/adjudication").text
    listed = {w: html.unescape(t) for w, t in re.findall(r'href="/coding/adjudication/(W\d+)">(.*?)</a>', listing)}
    assert listed == {shared: titles[shared]}
