"""The coding form on the best ascertainable evidence: a coder's page shows the abstract the cascade found (here Europe
PMC's, as OpenAlex has none), its sections and a line naming the source; the coding store archives what was shown, and
the answer records the SHA-256 of the text the page showed (recomputed here from the page itself).

The world is the site tests' release, an audit protocol drawing 4 of its works, ``coding_tasks`` materialized into a
real SQLite store, a loopback OpenAlex whose records have no abstract but a PMID, and a loopback Europe PMC answering
structured abstracts in its real shape (builders/abstract_sources.py)."""

from __future__ import annotations

import hashlib
import html
import re

import pytest

from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.publish.abstract_cascade import AbstractCascade
from metacan_pipeline.site.web.coding_app import create_coding_app
from metacan_pipeline_tests.builders.abstract_sources import LoopbackSources, europepmc_record
from metacan_pipeline_tests.builders.coding import coding_world
from metacan_pipeline_tests.builders.openalex import LoopbackOpenAlex
from metacan_pipeline_tests.site.test_coding_pages import ANSWER, assert_masked, csrf, next_work, sign_in


def sections_of(wid: str) -> list[tuple[str, str]]:
    return [("Background", f"Work {wid} audits <trial> reporting & more."), ("Results", f"{wid[1:]} trials read.")]


def epmc_markup(wid: str) -> str:
    return "".join(f"<h4>{h}</h4>{html.escape(t)}" for h, t in sections_of(wid))


def no_abstract_with_pmid(path, query):
    ids = query["filter"].removeprefix("ids.openalex:").split("|")
    return [
        {"id": f"https://openalex.org/{w}", "abstract_inverted_index": None, "ids": {"pmid": f"https://pubmed.ncbi.nlm.nih.gov/{w[1:]}"}}
        for w in ids
    ]  # fmt: skip


@pytest.fixture(scope="module")
def world(site_release):
    storage, frame, _ = site_release
    drawn = [f["id"] for f in frame[:4]]
    with coding_world(storage, frame, drawn, ("ann", "bob"), "unused") as w:
        openalex = LoopbackOpenAlex(no_abstract_with_pmid)
        records = {
            f"EXT_ID:{w_[1:]} AND SRC:MED": [europepmc_record(w_[1:], None, "t", epmc_markup(w_))] for w_ in drawn
        }
        sources = LoopbackSources(europepmc=records)
        cascade = AbstractCascade(
            ("openalex", "europepmc"), openalex_url=openalex.base_url, europepmc_url=sources.europepmc_url
        )
        app = create_coding_app(storage.root, abstracts=cascade)
        try:
            yield {**w, "app": app, "sources": sources}
        finally:
            app.state.coding.close()
            sources.shutdown()
            openalex.shutdown()


def shown_text(page: str) -> str:
    """The abstract text as the page shows it, read from its HTML and joined by the documented rule (each heading on a
    line above its text, sections separated by a blank line)."""
    block = re.search(r'<dd id="abstract">(.*?)</dd>', page, re.S).group(1)
    parts = re.findall(r'<strong class="abstract-section">(.*?)</strong><br>\s*<span class="abstract-text">(.*?)</span>', block, re.S)  # fmt: skip
    return "\n\n".join(f"{html.unescape(h)}\n{html.unescape(t)}" for h, t in parts)


def test_the_coding_form_shows_the_sections_and_source_and_the_answer_records_the_hash_of_what_was_shown(world):
    ann = sign_in(world["app"], world["tokens"]["ann"])
    wid, page = next_work(ann)
    planted = sections_of(wid)
    text = shown_text(page)
    assert text == "\n\n".join(f"{h}\n{t}" for h, t in planted)  # every section shown, markup as text
    assert "Fetched live from Europe PMC; the study keeps a copy of what you were shown." in page
    assert_masked(page)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert re.search(r'name="abstract_sha256" value="([0-9a-f]{64})"', page).group(1) == digest
    evidence = re.search(r'name="evidence_sha256" value="([0-9a-f]{64})"', page).group(1)
    form = {**ANSWER, "csrf_token": csrf(page), "evidence_sha256": evidence}
    forged = ann.post(f"/coding/works/{wid}", data={**form, "abstract_sha256": "f" * 64})
    assert forged.status_code == 400 and "is not an abstract this coding store showed" in html.unescape(forged.text)
    r = ann.post(f"/coding/works/{wid}", data={**form, "abstract_sha256": digest})
    assert r.status_code == 303 and r.headers["location"] == "/coding/next"
    with CodingStore(world["path"]) as store:
        answers = store._con.execute(
            "SELECT abstract_sha256 FROM coding_answers WHERE id = ? AND coder = 'ann'", [wid]
        ).fetchall()
        archived = store.archived_abstract(digest, wid)
    assert [a[0] for a in answers] == [digest]  # the forged one was refused, nothing appended
    assert archived["source"] == "europepmc" and archived["abstract_text"] == text
    assert archived["abstract_sections"] == planted
    assert world["sources"].asked("europepmc").count(f"EXT_ID:{wid[1:]} AND SRC:MED") == 1  # by the PMID OpenAlex gave
