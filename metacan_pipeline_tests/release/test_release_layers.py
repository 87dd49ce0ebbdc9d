"""The release layers of the original protocol (human-verified, high-precision, provisional, contested): a planted
release with one work per rule, each work's layer written down by hand, built through the records' own path
(``record_row`` with the gate rows, the human codes and the rolling-layer rule, as ``work_records`` builds them); the
blocking check that every work is in exactly one layer, failing on planted violations; the layer a frozen release
gives a rolling-layer work back."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from metacan_pipeline.publish.checks import records_in_one_release_layer, release_layer_counts
from metacan_pipeline.publish.record_check import check_file
from metacan_pipeline.publish.records import RecordBatches, schema_violation
from metacan_pipeline.release.layer import LayerRule, NewestRelease, frozen_record
from metacan_pipeline.release.release_layers import RELEASE_LAYERS, layer_basis, layer_violations, release_layer
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.student import prediction_row
from metacan_pipeline_tests.builders.teachers import label_row

VERSION = "metacan-v0-hybrid-000000000000"
PROTOCOL = "protocol-0123456789ab"
QUALIFIED = "teacher qualified (kappa 0.71 on 50 reference works; needed 0.37)"
NOT_QUALIFIED = "teacher not qualified (kappa 0.05 on 50 reference works; needed 0.37)"
QUALIFICATION = {"gemma": QUALIFIED, "codex": QUALIFIED, "weak": NOT_QUALIFIED}


def gate_row(head: str) -> dict:
    """A passing gate row as ``release.gate.PASSING_SQL`` returns it (the newest human_validation row, passed)."""
    return {
        "protocol_id": PROTOCOL,
        "classifier_version": VERSION,
        "head": head,
        "decision_rule": "consensus",
        "passed": True,
        "precision": 0.91,
        "precision_lower": 0.84,
        "recall": 0.83,
        "recall_lower": 0.74,
        "coded_positives": 41,
        "n_coded": 160,
        "reason": "passed: precision lower bound 0.84 >= 0.80, recall lower bound 0.74 >= 0.70, 41 coded positives",
        "run_id": "run-gate",
    }


#: A work_lineage row (what the published record's lineage is made of).
LINEAGE = {
    "id": "W0",
    "frame_build_id": "frame-000000000000",
    "frame_run_id": "r",
    "input_kind": "input_file",
    "source_file": "f.json",
    "source_locator": "payload.results[0]",
    "part_run_id": "r",
    "entity_list_versions": "funder=f",
    "lexicon_version": "l",
    "teacher_calls": [],
    "model_version": VERSION,
    "student_run_id": "r",
    "machine_round": None,
    "machine_scores_run_id": None,
    "machine_validation_status": None,
}
#: Only the metaresearch head of the classifier version passed human validation.
PASSING = {VERSION: [gate_row("metaresearch")]}
PASSED = frozenset({(VERSION, "metaresearch")})
HUMAN = {
    "protocol_id": PROTOCOL,
    "basis": "adjudicated",
    "coders": ["coder-aaaaaaaaaa", "coder-bbbbbbbbbb", "coder-cccccccccc"],
    "categories": ["metaresearch"],
    "domain": None,
    "study_design": None,
    "genre": "empirical",
    "about_ca_system": False,
    "about_ca_topic": False,
}


def pred(wid: str, candidate=(), consensus=(), **extra) -> dict:
    return {
        **prediction_row(wid),
        "candidate_categories": list(candidate),
        "consensus_categories": list(consensus),
        **extra,
    }


#: (work, what the release knows of it, the layer by hand, the heads behind it, in the release's frame?)
PLANTED = {
    # human-verified: an adjudicated human code outranks the machines' split (open_science is candidate only)
    "W1": (dict(pred=("metaresearch", "open_science"), cons=("metaresearch",), human=True), "human_verified", ()),
    # contested: a category one side called and the other did not, even though metaresearch is validated
    "W2": (dict(pred=("metaresearch", "open_science"), cons=("metaresearch",)), "contested", ("open_science",)),
    # contested: an about-Canada head called by one side only
    "W3": (dict(pred=(), cons=(), extra={"about_ca_system_candidate": True}), "contested", ("about_ca_system",)),
    # contested: two qualified teachers' direct labels differ on a category (no prediction at all)
    "W4": (dict(labels=[("gemma", ["metaresearch"]), ("codex", [])]), "contested", ("metaresearch",)),
    # provisional: the only dissent is a teacher that is not qualified (its labels decide nothing)
    "W5": (dict(labels=[("gemma", ["metaresearch"]), ("weak", [])]), "provisional", ()),
    # high-precision: every positive decision is on a head that passed human validation
    "W6": (dict(pred=("metaresearch",), cons=("metaresearch",)), "high_precision", ("metaresearch",)),
    # provisional: a positive on a head no audit validated (open_science) keeps the work provisional
    "W7": (dict(pred=("metaresearch", "open_science"), cons=("metaresearch", "open_science")), "provisional", ()),
    # provisional: the validated head decided negative (a negative makes no precision claim)
    "W8": (dict(pred=(), cons=()), "provisional", ()),
    # provisional: nothing yet (absence is neither a negative nor a claim)
    "W9": (dict(), "provisional", ()),
}
#: W10 entered the frame after the release: its unvalidated open_science head is withheld, so what it shows is
#: metaresearch alone, validated: high-precision; the release that freezes it gives open_science back: provisional.
ROLLING_ID = "W10"


def input_row(openalex_dir: Path, wid: str, spec: dict, in_release: bool = True) -> dict:
    row = real_frame_row(openalex_dir)
    labels = [
        {**label_row(wid, t, cats), "label_id": f"{wid}-{t}", "created_at": None} for t, cats in spec.get("labels", [])
    ]
    p = None
    if "pred" in spec:
        p = pred(wid, spec["pred"], spec["cons"], **spec.get("extra", {}))
    return {
        "work": {**row, "id": wid},
        "labels": labels,
        "pred": p,
        "machine": None,
        "lineage": {**LINEAGE, "id": wid},
        "human": {**HUMAN, "id": wid} if spec.get("human") else None,
        "reference": None,
        "in_release": in_release,
    }


@pytest.fixture()
def planted(openalex_dir, tmp_path):
    """The ``work_records`` rows of the planted release (PLANTED, then the rolling W10), as the asset builds them."""
    rule = LayerRule(NewestRelease("2026.1", tmp_path / "2026.1", VERSION, "frame-000000000000"), PASSED)
    rows = [input_row(openalex_dir, wid, spec) for wid, (spec, _, _) in PLANTED.items()]
    rows.append(input_row(openalex_dir, ROLLING_ID, PLANTED["W7"][0], in_release=False))
    batches = RecordBatches({}, QUALIFICATION, PASSING, rule)
    return batches.table(rows)


def test_each_rule_puts_its_work_in_the_layer_computed_by_hand(planted):
    records = {r["id"]: json.loads(r["record_json"]) for r in planted.to_pylist()}
    for wid, (_, layer, heads) in PLANTED.items():
        record = records[wid]
        assert record["release_layer"] == layer, wid
        assert schema_violation(record) is None and layer_violations(record) == [], wid
        basis = layer_basis(record)
        assert (basis.layer, basis.heads) == (layer, heads), wid
    assert layer_basis(records["W1"]).protocol_id == PROTOCOL
    # the rolling work: open_science withheld, metaresearch validated and shown
    rolling = records[ROLLING_ID]
    assert rolling["layer"] == "rolling" and rolling["prediction"]["consensus_categories"] == ["metaresearch"]
    assert rolling["release_layer"] == "high_precision"
    # every layer is exercised, and a record's layer is its key, once
    assert {r["release_layer"] for r in records.values()} == set(RELEASE_LAYERS)
    assert sum(r.count('"release_layer"') for r in planted.column("record_json").to_pylist()) == len(records)


def test_a_frozen_release_computes_the_layer_again_over_what_it_restores(planted):
    rolling = next(json.loads(r["record_json"]) for r in planted.to_pylist() if r["id"] == ROLLING_ID)
    frozen = frozen_record(rolling, "2026.2", pred(ROLLING_ID, *(("metaresearch", "open_science"),) * 2))
    assert frozen["prediction"]["consensus_categories"] == ["metaresearch", "open_science"]
    assert frozen["layer"] == "2026.2" and frozen["release_layer"] == release_layer(frozen) == "provisional"


def test_the_exactly_one_layer_check_fails_on_planted_violations(planted, storage):
    rows = planted.to_pylist()
    by_id = {r["id"]: r for r in rows}

    def tamper(wid: str, change) -> None:
        record = json.loads(by_id[wid]["record_json"])
        change(record)
        by_id[wid]["record_json"] = json.dumps(record)

    storage.write_table("work_records", pa.Table.from_pylist(rows, schema=planted.schema))
    counts, none, sentences = release_layer_counts(storage)
    assert (counts, none, sentences) == (
        {"human_verified": 1, "high_precision": 2, "provisional": 4, "contested": 3},
        0,
        [],
    )
    evaluation = records_in_one_release_layer(storage=storage)  # the blocking check itself
    assert evaluation.passed and evaluation.metadata["works_contested"].value == 3
    tamper("W9", lambda r: r.pop("release_layer"))  # in no layer
    tamper("W8", lambda r: r.update(release_layer="certified"))  # a layer the protocol does not name
    tamper("W6", lambda r: r.update(release_layer="contested"))  # one layer, but not the rule's
    storage.write_table("work_records", pa.Table.from_pylist(list(by_id.values()), schema=planted.schema))
    counts, none, sentences = release_layer_counts(storage)
    assert none == 2 and counts == {"human_verified": 1, "high_precision": 1, "provisional": 2, "contested": 4}
    assert [s.split(":")[0] for s in sentences] == ["W8", "W9"]
    evaluation = records_in_one_release_layer(storage=storage)
    assert not evaluation.passed and evaluation.metadata["works_in_no_layer"].value == 2
    assert "'certified'" in sentences[0] and "no release_layer" in sentences[1]
    # records_may_ship's scan holds the record to the rule: all three are named, W6 with both layers
    checked, bad, shown = check_file(str(next(storage.table_dir("work_records").glob("*.parquet"))), PASSED)
    layer_lines = [v for v in shown if "release layer" in v]
    assert checked == 10 and bad == 3, shown
    assert any(
        v.startswith("W6: release layer: the record says contested but the rule gives high_precision")
        for v in layer_lines
    )
    assert {v.split(":")[0] for v in layer_lines} == {"W6", "W8", "W9"}
