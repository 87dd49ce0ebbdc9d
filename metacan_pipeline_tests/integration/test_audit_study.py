"""A whole audit study through the coding server's pages, released and recomputed from its release alone.

The 200-work world of :mod:`metacan_pipeline_tests.audit.test_validation`: its protocol locked and its sample drawn by
Dagster, two coders and an adjudicator added, the tasks loaded (so the load draws the coder pairs from the protocol's
hash), then every step a study takes over HTTP on the coding server (sign-in, the queue, the answer forms with their
CSRF tokens, the adjudication list and its pre-filled form): both coders code 40 works, disagreeing on the evaluated
head of some, and the adjudicator settles those. ``validation_report`` runs on the codes, a release is cut, and
``metacan verify-release`` recomputes every validation table from the bundle alone: it passes as cut and fails after
one answer in the bundle is altered (its checksums rewritten to match, as a forger would).
"""

from __future__ import annotations

import re
import shutil

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from metacan_pipeline.audit.coding.loading import load_coding_tasks
from metacan_pipeline.audit.coding.pseudonyms import coder_pseudonym
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.cli import app
from metacan_pipeline.cli.run_summary import summary_text
from metacan_pipeline.publish.abstracts import AbstractFetcher
from metacan_pipeline.release.bundle import cut_release
from metacan_pipeline.settings import coding_store_path
from metacan_pipeline.site.web.coding_app import create_coding_app
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.roles import CENSUS, SAMPLE
from metacan_pipeline_tests.audit.test_validation import run, truth, wid, write_world
from metacan_pipeline_tests.builders.coding import abstracts_answer
from metacan_pipeline_tests.builders.openalex import LoopbackOpenAlex
from metacan_pipeline_tests.release.test_verify import rewrite_checksums
from metacan_pipeline_tests.site.test_coding_pages import ABSTRACT, csrf, next_work, sign_in, submit

CODERS = ("alice.tremblay", "bob.nguyen")
ADJUDICATOR = "carol.okafor"
WORKS = 40


def form(positive: bool, note: str) -> dict:
    """The answer form's fields for a work the coder judges meta-research (or not)."""
    return {
        "categories": ["metaresearch"] if positive else [],
        "domain": "methods" if positive else "",
        "study_design": "observational",
        "genre": "empirical" if positive else "commentary",
        "about_ca_system": "no",
        "about_ca_topic": "yes",
        "confidence": "medium",
        "note": note,
    }


def second_opinion(i: int) -> bool:
    """The second coder's verdict: the truth, except on every tenth work from the fourth."""
    return truth(i) != (i % 10 == 3)


@pytest.mark.slow
def test_a_study_coded_through_the_pages_is_released_and_recomputed_from_the_release_alone(tmp_path, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    write_world(storage, openalex_dir)
    instance = dg.DagsterInstance.ephemeral()
    assert run(storage, instance).success  # the protocol locked, the sample drawn, nothing coded yet
    path = coding_store_path(str(storage.root))
    with CodingStore(path) as store:
        tokens = {name: store.add_coder(name) for name in (*CODERS, ADJUDICATOR)}
        store.grant_role(ADJUDICATOR)
        load_coding_tasks(storage, store, source="test")
    pid = storage.read_table("audit_sample", ["protocol_id"]).column(0)[0].as_py()
    with CodingStore(path) as store:
        pairs = store.assignments(pid)
    assert len(pairs) > WORKS and {tuple(sorted(p)) for p in pairs.values()} == {CODERS}  # two coders: one pair
    index = {wid(i): i for i in range(200)}

    openalex = LoopbackOpenAlex(abstracts_answer(ABSTRACT))
    server = create_coding_app(storage.root, abstracts=AbstractFetcher(openalex.base_url))
    try:
        alice, bob = (sign_in(server, tokens[c]) for c in CODERS)
        coded = []
        for _ in range(WORKS):
            w, page = next_work(alice)
            assert submit(alice, w, page, form(truth(index[w]), f"{CODERS[0]} read it")).status_code == 303
            same, page = next_work(bob)  # the pair's queue hands both coders the works in the same order
            assert same == w
            assert submit(bob, w, page, form(second_opinion(index[w]), f"{CODERS[1]} read it")).status_code == 303
            coded.append(w)
        differ = sorted(w for w in coded if truth(index[w]) != second_opinion(index[w]))
        assert differ, "some works are disputed on the evaluated head"
        carol = sign_in(server, tokens[ADJUDICATOR])
        listing = carol.get("/coding/adjudication").text
        assert sorted(re.findall(r'href="/coding/adjudication/(W\d+)"', listing)) == differ
        for w in differ:
            page = carol.get(f"/coding/adjudication/{w}").text
            evidence = re.search(r'name="evidence_sha256" value="([0-9a-f]{64})"', page).group(1)
            data = {**form(truth(index[w]), "settled"), "csrf_token": csrf(page), "evidence_sha256": evidence}
            r = carol.post(f"/coding/adjudication/{w}", data=data)
            assert r.status_code == 303, r.text
        assert re.findall(r'href="/coding/adjudication/(W\d+)"', carol.get("/coding/adjudication").text) == []
    finally:
        server.state.coding.close()
        openalex.shutdown()

    after = run(storage, instance)
    assert after.success
    codes = {r["id"]: r for r in storage.read_table("human_codes").to_pylist()}
    assert set(coded) <= set(codes)
    with CodingStore(path) as store:
        key = store.pseudonym_key()
    pseudonym = {c: coder_pseudonym(key, pid, c) for c in (*CODERS, ADJUDICATOR)}
    assert {c for r in codes.values() for c in r["coders"]} == {pseudonym[c] for c in CODERS}
    said = summary_text(str(storage.root))
    assert "Frame: 200 works admitted (no frame build recorded here)" in said
    assert f"{WORKS} coded by both ({WORKS - len(differ)} agreed, {len(differ)} adjudicated, 0 awaiting" in said
    assert "agreement on metaresearch before adjudication (works coded twice): all (design-weighted), n=40" in said
    cut = cut_release(storage, [f"direct_labels_{CENSUS}", f"direct_labels_{SAMPLE}"], "study-1", ["A group"], "r")
    bundle = tmp_path / "bundle"
    shutil.copytree(cut.folder, bundle)  # the bundle alone, outside any data folder
    ok = CliRunner().invoke(app, ["verify-release", str(bundle)])
    assert ok.exit_code == 0 and re.search(r"verified 7 tables, \d+ cells", ok.output), ok.output
    for name in (*CODERS, ADJUDICATOR):
        assert not any(name.encode() in p.read_bytes() for p in bundle.rglob("*") if p.is_file()), name
    released = pq.read_table(bundle / "tables" / "study_answers.parquet").to_pylist()
    assert {(a["coder"], a["role"]) for a in released} == {
        *((pseudonym[c], "code") for c in CODERS),
        (pseudonym[ADJUDICATOR], "adjudication"),
    }
    assert sum(a["role"] == "adjudication" for a in released) == len(differ)

    # one coder answer altered in the bundle, checksums rewritten to match: the recomputation tells
    answers_path = bundle / "tables" / "study_answers.parquet"
    answers = pq.read_table(answers_path)
    rows = answers.to_pylist()
    victim = next(i for i, a in enumerate(rows) if a["role"] == "code" and a["categories"] == ["metaresearch"])
    rows[victim]["categories"], rows[victim]["domain"] = [], None
    pq.write_table(pa.Table.from_pylist(rows, schema=answers.schema), answers_path)
    rewrite_checksums(bundle)
    bad = CliRunner().invoke(app, ["verify-release", str(bundle)])
    assert bad.exit_code == 1 and "differs: " in bad.output, bad.output
