"""Tests of a real coding study on real SQLite coding stores: coder pairs (metacan_pipeline.audit.coding.assignments),
adjudication only where the evaluated heads differ (adjudication.py), and the coordinator's progress per stratum and
export (study.py, `metacan coding assign / status / export-study`)."""

from __future__ import annotations

import csv
import hashlib
import itertools
from collections import Counter

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from metacan_pipeline.audit.coding.assignments import draw_pairs
from metacan_pipeline.audit.coding.errors import CodingError
from metacan_pipeline.audit.coding.pseudonyms import coder_pseudonym
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.audit.coding.study import STUDY_COLUMNS, study_progress
from metacan_pipeline.audit.estimates.validation import head_value
from metacan_pipeline.cli import app
from metacan_pipeline.settings import coding_store_path
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.audit import AUDIT_SAMPLE_SCHEMA
from metacan_pipeline_tests.audit.test_coding import META, P, work_row

SEED = hashlib.sha256(b"protocol content one").hexdigest()
OTHER_SEED = hashlib.sha256(b"protocol content two").hexdigest()
WORKS = [f"W{100 + i}" for i in range(40)]


def _loads(pairs: dict) -> tuple[Counter, Counter]:
    return Counter(c for p in pairs.values() for c in p), Counter(pairs.values())


def paired_store(path, works: int = 40, coders=("ann", "bob", "cy"), seed: str = SEED, heads=("metaresearch",)):
    store = CodingStore(path)
    store.load_tasks(P, [work_row(i) for i in range(works)])
    tokens = {c: store.add_coder(c) for c in coders}
    store.record_study(P, seed, list(heads))
    return store, tokens


def test_pairs_are_balanced_and_drawn_again_the_same_from_the_same_protocol_hash():
    pairs = draw_pairs(SEED, WORKS, ["ann", "bob", "cy"])
    by_coder, by_pair = _loads(pairs)
    assert set(pairs) == set(WORKS) and all(len(set(p)) == 2 for p in pairs.values())
    # 80 places over 3 coders: 27, 27, 26; 40 works over 3 pairs: 14, 13, 13
    assert sorted(by_coder.values()) == [26, 27, 27]
    assert sorted(by_pair.values()) == [13, 13, 14]
    assert draw_pairs(SEED, list(reversed(WORKS)), ["cy", "bob", "ann"]) == pairs  # order of the inputs is not a seed
    other = draw_pairs(OTHER_SEED, WORKS, ["ann", "bob", "cy"])
    assert other != pairs and sum(other[w] != pairs[w] for w in WORKS) >= 10
    # four coders: every coder 20 works, each of the 6 pairs 6 or 7
    by_coder, by_pair = _loads(draw_pairs(SEED, WORKS, ["ann", "bob", "cy", "dee"]))
    assert set(by_coder.values()) == {20}
    assert sorted(by_pair.values()) == [6, 6, 7, 7, 7, 7]
    for k, n in itertools.product(range(2, 7), range(1, 50)):  # each coder within one work of every other
        by_coder, _ = _loads(draw_pairs(SEED, WORKS[:n], [f"c{i}" for i in range(k)]))
        counts = [by_coder.get(f"c{i}", 0) for i in range(k)]
        assert max(counts) - min(counts) <= 1, (k, n, counts)
    with pytest.raises(CodingError, match="at least 2 coders"):
        draw_pairs(SEED, WORKS, ["ann"])


def test_the_store_assigns_pairs_from_the_protocol_hash_and_a_second_store_draws_the_same(tmp_path):
    one, _ = paired_store(tmp_path / "one.sqlite")
    two, _ = paired_store(tmp_path / "two.sqlite")
    three, _ = paired_store(tmp_path / "three.sqlite", seed=OTHER_SEED)
    with one, two, three:
        out = one.assign_works(P)
        assert out["assigned"] == 40 and out["kept"] == 0 and sorted(out["by_coder"].values()) == [26, 27, 27]
        two.assign_works(P)
        three.assign_works(P)
        assert (
            one.assignments(P)
            == two.assignments(P)
            == {w: list(p) for w, p in draw_pairs(SEED, WORKS, ["ann", "bob", "cy"]).items()}
        )
        assert one.assignments(P) != three.assignments(P)
        again = one.assign_works(P)  # nothing without a pair: nothing changes
        assert again["assigned"] == 0 and again["kept"] == 40 and one.assignments(P) == two.assignments(P)


def test_an_adjudicator_is_never_paired_and_a_named_coder_must_be_able_to_code(tmp_path):
    store, _ = paired_store(tmp_path / "s.sqlite", coders=("ann", "bob", "cy", "judge"))
    with store:
        store.grant_role("judge")
        store.revoke_coder("cy")
        assert store.pair_coders() == ["ann", "bob"]
        with pytest.raises(CodingError, match=r"\['judge'\] cannot be paired"):
            store.assign_works(P, coders=["ann", "judge"])
        store.assign_works(P)
        assert set(map(tuple, store.assignments(P).values())) == {("ann", "bob")}


def test_a_coder_is_handed_and_may_answer_only_the_works_assigned_to_them(tmp_path):
    store, _ = paired_store(tmp_path / "s.sqlite", works=9)
    with store:
        store.assign_works(P)
        pairs = store.assignments(P)
        mine = sorted(w for w, p in pairs.items() if "ann" in p)
        assert len(mine) == 6  # 18 places over 3 coders
        assert store.coder_progress(P, "ann") == {"tasks": 6, "done": 0, "to_do": 6}
        handed = []
        while (task := store.next_task(P, "ann")) is not None:
            handed.append(task["id"])
            store.submit(P, task["id"], "ann", META)
        assert sorted(handed) == mine
        assert store.coder_progress(P, "ann") == {"tasks": 6, "done": 6, "to_do": 0}
        not_mine = next(w for w, p in pairs.items() if "ann" not in p)
        assert not store.holds_task(P, not_mine, "ann") and store.holds_task(P, mine[0], "ann")
        with pytest.raises(CodingError, match=f"{not_mine} is not assigned to ann"):
            store.submit(P, not_mine, "ann", META)
        assert store.my_answer(P, not_mine, "ann") is None


def test_rebalancing_after_a_coder_joins_redraws_only_the_works_nobody_answered(tmp_path):
    store, _ = paired_store(tmp_path / "s.sqlite", works=12)
    with store:
        store.assign_works(P)
        before = store.assignments(P)
        started = [w for w, p in before.items() if "ann" in p][:3]
        for w in started:
            store.submit(P, w, "ann", META)
        store.add_coder("dee")
        added = store.assign_works(P)  # a plain assign leaves every pair as it is
        assert added["assigned"] == 0 and store.assignments(P) == before
        out = store.assign_works(P, rebalance=True)
        after = store.assignments(P)
        assert out["assigned"] == 9 and out["kept"] == 3
        assert {w: after[w] for w in started} == {w: before[w] for w in started}  # a started work keeps its pair
        by_coder, _ = _loads({w: tuple(p) for w, p in after.items()})
        assert sorted(by_coder.values()) == [6, 6, 6, 6] and by_coder["dee"] == 6
        # a revoked coder's place on a started work goes to another coder; the coder who answered stays
        partner = next(c for c in after[started[0]] if c != "ann")
        store.revoke_coder(partner)
        store.assign_works(P, rebalance=True)
        now = store.assignments(P)
        assert "ann" in now[started[0]] and partner not in now[started[0]] and len(now[started[0]]) == 2
        assert all(partner not in p for p in now.values() if p)


def _both(store, wid, first, second):
    pairs = store.assignments(P)
    a, b = pairs[wid] if pairs else ("ann", "bob")
    store.submit(P, wid, a, first)
    store.submit(P, wid, b, second)
    return a, b


def test_a_genre_only_difference_needs_no_adjudicator_when_the_evaluated_head_agrees(tmp_path):
    store, _ = paired_store(tmp_path / "s.sqlite", works=4)
    with store:
        store.assign_works(P)
        _both(store, "W100", META, {**META, "genre": "review"})  # genre only
        _both(store, "W101", META, {**META, "categories": ["metaresearch"]})  # open_science: not evaluated
        _both(store, "W102", META, {**META, "categories": [], "domain": None})  # metaresearch: evaluated
        _both(store, "W103", META, {**META, "unresolved": True, "note": "cannot tell"})
        queue = store.disagreements(P)
        assert [(d["id"], d["fields"]) for d in queue] == [("W102", ["categories"]), ("W103", ["unresolved"])]
        assert queue[0]["differs"] == ["categories", "domain"]
        assert queue[0]["agreed"] == {
            "categories": [],
            "study_design": "observational",
            "genre": "empirical",
            "about_ca_system": True,
            "about_ca_topic": False,
            "unresolved": False,
        }
        assert queue[0]["title"] == "Work 2"
        codes = {c["id"]: c for c in store.adjudicated_codes(P)}
        assert codes["W100"]["basis"] == "agreed" and codes["W100"]["genre"] is None
        assert codes["W100"]["disputed"] == ["genre"] and codes["W100"]["study_design"] == "observational"
        assert codes["W101"]["categories"] == ["metaresearch"] and codes["W101"]["disputed"] == ["open_science"]
        assert head_value(codes["W101"], "metaresearch") == 1 and head_value(codes["W101"], "open_science") is None
        assert "W102" not in codes and "W103" not in codes
        progress = store.task_progress(P)
        assert (progress["agreed"], progress["disagreements"]) == (2, 2)
        store.add_coder("judge")
        store.grant_role("judge")
        with pytest.raises(CodingError, match="no disagreement to settle"):
            store.adjudicate(P, "W100", "judge", META, evidence_sha256=store.task(P, "W100")["evidence_sha256"])


def test_a_protocol_the_store_knows_no_heads_of_compares_every_field(tmp_path):
    with CodingStore(tmp_path / "s.sqlite") as store:
        store.load_tasks(P, [work_row(0)])
        for c in ("ann", "bob"):
            store.add_coder(c)
        _both(store, "W100", META, {**META, "genre": "review"})
        assert [d["fields"] for d in store.disagreements(P)] == [["genre"]]


def _sample(storage: MetacanStorage, strata: dict[str, str]) -> None:
    rows = [
        {
            "protocol_id": P,
            "id": wid,
            "stratum": stratum,
            "stratum_size": 100,
            "stratum_sample_size": 4,
            "hash_rank": i,
            "selection_probability": 0.04,
            "design_weight": 25.0,
            "in_sample": True,
            "trained_on": False,
            "language": "en",
            "has_abstract": True,
            "route_key": "ca_aff",
        }
        for i, (wid, stratum) in enumerate(strata.items())
    ]
    storage.write_table("audit_sample", pa.Table.from_pylist(rows, schema=AUDIT_SAMPLE_SCHEMA))


def test_status_counts_each_stratum_and_export_study_writes_one_row_per_work(tmp_path):
    data = tmp_path / "data"
    storage = MetacanStorage(data_dir=str(data))
    strata = {f"W{100 + i}": ("consensus" if i < 4 else "negative_far") for i in range(8)}
    _sample(storage, strata)
    store, _ = paired_store(coding_store_path(str(data)), works=8)
    with store:
        store.record_load(
            P,
            {"added": 8, "evidence_changed": 0, "moved": 0, "unchanged": 0},
            instructions_version="v1",
            source="test",
            sample_works=8,
            missing=0,
        )
        store.assign_works(P)
        _both(store, "W100", META, META)  # consensus: agreed
        _both(store, "W101", META, {**META, "categories": [], "domain": None})  # consensus: disagreement
        _both(store, "W102", META, {**META, "categories": [], "domain": None})  # consensus: adjudicated below
        a, _ = store.assignments(P)["W103"]
        store.submit(P, "W103", a, META)  # consensus: one coder
        _both(store, "W104", META, {**META, "genre": "review"})  # negative_far: agreed on the head
        store.add_coder("judge")
        store.grant_role("judge")
        store.adjudicate(
            P, "W102", "judge", {**META, "note": "settled"}, evidence_sha256=store.task(P, "W102")["evidence_sha256"]
        )
        rows = {r["stratum"]: r for r in study_progress(store, P, strata)}
        assert rows["consensus"] == {
            "stratum": "consensus",
            "sampled": 4,
            "no_coder": 0,
            "one_coder": 1,
            "two_coders": 3,
            "disagreements": 1,
            "adjudicated": 1,
            "final": 3,
        }
        assert rows["negative_far"] == {
            "stratum": "negative_far",
            "sampled": 4,
            "no_coder": 3,
            "one_coder": 0,
            "two_coders": 1,
            "disagreements": 0,
            "adjudicated": 0,
            "final": 1,
        }
        assert rows["all"]["final"] == 4 and list(rows) == ["consensus", "negative_far", "all"]
        pairs = store.assignments(P)

    out = CliRunner().invoke(app, ["coding", "status", "--data-dir", str(data)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == f"{P}: coding progress per stratum"
    assert lines[2].split() == ["consensus", "4", "0", "1", "3", "1", "1", "3"]
    assert lines[3].split() == ["negative_far", "4", "3", "0", "1", "0", "0", "1"]
    assert lines[4].split() == ["all", "8", "3", "1", "4", "1", "1", "4"]
    assert any(line.strip().startswith("ann: ") and "assigned" in line for line in lines)

    target = tmp_path / "study.csv"
    out = CliRunner().invoke(app, ["coding", "export-study", str(target), "--names", "--data-dir", str(data)])
    assert out.exit_code == 0 and f"{P}: 8 works written to {target} (coders named" in out.output, out.output
    with open(target, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == STUDY_COLUMNS
        got = {r["id"]: r for r in reader}
    assert list(got) == list(strata)  # queue order
    w102 = got["W102"]
    first, second = sorted(pairs["W102"])
    assert (w102["stratum"], w102["pair"], w102["title"]) == ("consensus", f"{first};{second}", "Work 2")
    assert (w102["coder1_coder"], w102["coder2_coder"]) == (first, second)
    assert {w102["coder1_categories"], w102["coder2_categories"]} == {"metaresearch;open_science", ""}
    assert w102["needs_adjudication"] == "yes" and w102["adjudication_coder"] == "judge"
    assert w102["adjudication_note"] == "settled" and w102["final_basis"] == "adjudicated"
    assert w102["final_categories"] == "metaresearch;open_science" and w102["final_about_ca_system"] == "yes"
    assert got["W104"]["needs_adjudication"] == "no" and got["W104"]["final_genre"] == ""
    assert got["W104"]["final_disputed"] == "genre" and got["W104"]["final_basis"] == "agreed"
    assert got["W103"]["coder2_coder"] == "" and got["W103"]["final_basis"] == "single_coder"
    assert got["W107"]["coder1_coder"] == "" and got["W107"]["final_basis"] == ""
    again = CliRunner().invoke(app, ["coding", "export-study", str(target), "--data-dir", str(data)])
    assert again.exit_code == 1 and "cannot write" in again.output

    for command in (["status"], ["export-study", str(tmp_path / "none.csv")]):
        bogus = CliRunner().invoke(
            app, ["coding", *command, "--protocol", "protocol-deadbeef", "--data-dir", str(data)]
        )
        assert bogus.exit_code == 1 and f"no tasks of protocol 'protocol-deadbeef'; its protocols: {P}" in bogus.output
    assert not (tmp_path / "none.csv").exists()
    for command in (["assign"], ["export-study", str(tmp_path / "typo.csv")]):  # a mistyped data folder
        typo = CliRunner().invoke(app, ["coding", *command, "--data-dir", str(tmp_path / "dta")])
        assert typo.exit_code == 1 and "no coding store at" in typo.output, typo.output
    assert not (tmp_path / "dta").exists()

    # by default coders are under their pseudonym of the study, as in a release, and notes are left out
    shared = tmp_path / "shared.csv"
    out = CliRunner().invoke(app, ["coding", "export-study", str(shared), "--data-dir", str(data)])
    assert out.exit_code == 0 and "(coders under pseudonyms)" in out.output, out.output
    with CodingStore(coding_store_path(str(data))) as store:
        key = store.pseudonym_key()
    with open(shared, encoding="utf-8", newline="") as f:
        pseudo = {r["id"]: r for r in csv.DictReader(f)}
    p102 = pseudo["W102"]
    assert (p102["coder1_coder"], p102["coder2_coder"]) == tuple(coder_pseudonym(key, P, c) for c in (first, second))
    assert p102["adjudication_coder"] == coder_pseudonym(key, P, "judge") and p102["adjudication_note"] == ""
    text = shared.read_text(encoding="utf-8")
    assert not any(name in text for name in ("ann", "bob", "cy", "judge", "settled"))


def test_assign_from_the_cli_names_the_counts_and_refuses_one_coder(tmp_path):
    data = tmp_path / "data"
    store, _ = paired_store(coding_store_path(str(data)), works=6, coders=("ann",))
    with store:
        store.record_load(
            P,
            {"added": 6, "evidence_changed": 0, "moved": 0, "unchanged": 0},
            instructions_version="v1",
            source="test",
            sample_works=6,
            missing=0,
        )
    out = CliRunner().invoke(app, ["coding", "assign", "--data-dir", str(data)])
    assert out.exit_code == 2 and "at least 2 coders" in out.output and "metacan coders add" in out.output
    out = CliRunner().invoke(app, ["coders", "add", "bob", "--data-dir", str(data)])
    assert f"The works of {P} have no coder pairs yet: `metacan coding assign` pairs them" in out.output
    CliRunner().invoke(app, ["coders", "add", "cy", "--data-dir", str(data)])
    out = CliRunner().invoke(app, ["coding", "assign", "--data-dir", str(data)])
    assert out.exit_code == 0, out.output
    assert "pairs drawn over ann, bob, cy" in out.output
    assert "6 works assigned now, 0 kept; works per coder: ann 4, bob 4, cy 4" in out.output
    # a coder who joins later is told how to get works, and --rebalance gives them their share
    out = CliRunner().invoke(app, ["coders", "add", "dee", "--data-dir", str(data)])
    assert "dee gets works only from `metacan coding assign --rebalance`" in out.output
    out = CliRunner().invoke(app, ["coding", "assign", "--rebalance", "--data-dir", str(data)])
    assert (
        out.exit_code == 0 and "6 works assigned now, 0 kept; works per coder: ann 3, bob 3, cy 3, dee 3" in out.output
    )
