"""End to end: the audit study's validation report, its gate, and the human layers of the records.

The store holds 200 frame works built from one real OpenAlex record (the choxos Canadian-funders file in
../shared/data) with the predictions, thresholds, heads, training set and direct labels a student run would leave
(written by hand like :mod:`.test_assets`: a real student run costs about 40 s). Dagster's in-process executor
materializes audit_protocol, audit_sample, validation_report and work_records with their blocking checks, once with
no codes and once after simulated coders (a hidden truth, one coder who errs on every tenth work, an adjudicator
who settles the disagreements) answered in the coding store through its public methods. The report's numbers are
checked against the Hajek ratios computed here from the same weights and codes.
"""

from __future__ import annotations

import json
import math

import dagster as dg
import pandas as pd
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from metacan_pipeline.audit.assets import audit_protocol, audit_sample, validation_report
from metacan_pipeline.audit.checks import audit_sample_partitions_frame
from metacan_pipeline.audit.coding.store import CodingStore
from metacan_pipeline.audit.estimates import study as study_inputs
from metacan_pipeline.audit.estimates import summary, validation
from metacan_pipeline.audit.estimates.agreement import cohen_kappa
from metacan_pipeline.audit.estimates.report import validation_report as report_of
from metacan_pipeline.audit.protocol.locked import current_protocol
from metacan_pipeline.cli import app
from metacan_pipeline.i18n import translations
from metacan_pipeline.publish.assets import work_records
from metacan_pipeline.publish.checks import records_human_layers_backed, records_in_one_release_layer, records_may_ship
from metacan_pipeline.publish.human_layer import human_layer_violations
from metacan_pipeline.publish.pages import environment, render_work
from metacan_pipeline.settings import coding_store_path
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.roles import CENSUS, SAMPLE
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline.tables.publish import RECORDS_SCHEMA
from metacan_pipeline.tables.sampling import DESIGN_SCHEMA
from metacan_pipeline.tables.student import (
    HEADS_SCHEMA,
    MACHINE_SCHEMA,
    PRED_SCHEMA,
    THRESHOLDS_SCHEMA,
    TRAINING_SET_SCHEMA,
)
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.vocab import BINARY_TARGETS, CATEGORIES
from metacan_pipeline_tests.builders.common import PILOT, check_evaluation, sql
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.site import CTX
from metacan_pipeline_tests.builders.student import machine_row, prediction_row
from metacan_pipeline_tests.builders.teachers import label_row

MV = "metacan-v0-hybrid-0a1b2c3d4e5f"
N = 200
#: Every stratum a census but negative_far (half drawn, design weight 2): the consensus precision is exact.
CONFIG = {
    "stratum_fractions": {s: 1.0 for s in ("consensus", "candidate_only", "negative_near", "french", "no_abstract")}
    | {"about_ca_only": 1.0, "negative_far": 0.5, "trained_on": 1.0},
    "stratum_min_sizes": {"negative_far": 5},
}
ASSETS = [
    audit_protocol,
    audit_sample,
    audit_sample_partitions_frame,
    validation_report,
    work_records,
    records_may_ship,
    records_human_layers_backed,
    records_in_one_release_layer,
]


def wid(i: int) -> str:
    return f"W{9000 + i}"


def truth(i: int) -> bool:
    """The hidden truth on metaresearch: 78 of the 80 consensus works, 5 of the 10 candidate-only, 2 far negatives."""
    return i < 78 or 80 <= i < 85 or i in (120, 150)


def write_world(storage: MetacanStorage, openalex_dir) -> None:
    base = real_frame_row(openalex_dir)
    frame, preds, gemma, machine = [], [], [], []
    for i in range(N):
        frame.append(
            {
                **base,
                "id": wid(i),
                "title_text": f"Work {i} on research practice",
                "language": "fr" if i % 9 == 4 else "en",
                "has_abstract": i % 13 != 5,
                "route_key": "about_ca" if i % 17 == 7 else "ca_aff",
                "frame_build_id": "frame-0123456789ab",
            }
        )
        p = {**prediction_row(wid(i)), "model_version": MV}
        scores = [0.1] * len(CATEGORIES)
        if i < 80:
            scores[0], p["consensus_categories"], p["candidate_categories"] = 0.9, ["metaresearch"], ["metaresearch"]
        elif i < 90:
            scores[0], p["candidate_categories"] = 0.2, ["metaresearch"]
        p["category_scores_codex"] = scores
        preds.append(p)
        gemma.append(label_row(wid(i), CENSUS, ["metaresearch"] if truth(i) != (i % 11 == 3) else []))
        machine.append(machine_row(wid(i)))
    thresholds = [
        {"model_version": MV, "target": t, "gate_passed": t == "metaresearch", "rate": 0.4, "n": N,
         "gate_reason": "passed" if t == "metaresearch" else "codex positives 2 < 20",
         "k": 80 if t == "metaresearch" else None, "threshold": 0.5 if t == "metaresearch" else None,
         "boundary_id": wid(79) if t == "metaresearch" else None}
        for t in BINARY_TARGETS
    ]  # fmt: skip
    tables = {
        "frame": (frame, FRAME_SCHEMA),
        "predictions": (preds, PRED_SCHEMA),
        "prediction_thresholds": (thresholds, THRESHOLDS_SCHEMA),
        "student_heads": (
            [{"model_version": MV, "teacher": t, "target": h} for t in (SAMPLE, CENSUS) for h in BINARY_TARGETS],
            HEADS_SCHEMA,
        ),
        "student_training_set": (
            [{"model_version": MV, "teacher": SAMPLE, "work_id": wid(i), "venue_key": "v"} for i in (197, 198, 199)],
            TRAINING_SET_SCHEMA,
        ),
        "sample_design": ([{"id": wid(i), "in_sample": False} for i in range(N)], DESIGN_SCHEMA),
        f"direct_labels_{CENSUS}": (gemma, LABELS_SCHEMA),
        f"direct_labels_{SAMPLE}": ([], LABELS_SCHEMA),
        "machine_scores": (machine, MACHINE_SCHEMA),
    }
    for name, (rows, schema) in tables.items():
        storage.write_table(name, pa.Table.from_pylist(rows, schema=schema))


def run(storage: MetacanStorage, instance: dg.DagsterInstance):
    return dg.materialize(
        ASSETS,
        resources={"storage": storage},
        run_config={"ops": {"audit_protocol": {"config": CONFIG}}},
        instance=instance,
    )


def answer(positive: bool) -> dict:
    return {
        "categories": ["metaresearch"] if positive else [],
        "domain": "methods" if positive else None,
        "study_design": "observational",
        "genre": "empirical" if positive else "commentary",
        "about_ca_system": False,
        "about_ca_topic": True,
        "confidence": "medium",
    }


def meta(result, key: str) -> dict:
    [m] = [m for m in result.asset_materializations_for_node("validation_report") if m.asset_key.path == [key]]
    return {k: v.value for k, v in m.metadata.items()}


def records(storage: MetacanStorage) -> dict[str, dict]:
    return {r["id"]: json.loads(r["record_json"]) for r in storage.read_table("work_records").to_pylist()}


@pytest.fixture(scope="module")
def study(tmp_path_factory, openalex_dir):
    """Both materializations: ``before`` (no codes) and ``after`` (simulated coders), with what the test compares."""
    root = tmp_path_factory.mktemp("validation")
    storage = MetacanStorage(data_dir=str(root / "data"))
    write_world(storage, openalex_dir)
    instance = dg.DagsterInstance.ephemeral()
    before = run(storage, instance)
    before_records = records(storage)
    pid = meta(before, "validation_report")["protocol_id"]
    sample = [r for r in storage.read_table("audit_sample").to_pylist() if r["protocol_id"] == pid and r["in_sample"]]
    coded = [r for r in sample if not r["trained_on"]]
    index = {wid(i): i for i in range(N)}
    single = next(r["id"] for r in coded if r["stratum"] == "negative_far")
    # a far negative bob could not decide: it waits for an adjudication that has not come yet (unresolved)
    unsure = next(r["id"] for r in coded if r["stratum"] == "negative_far" and r["id"] != single)
    cli = [CliRunner().invoke(app, ["coding", "import-adjudicator", "frame1k", "--pilot-dir", str(PILOT),
                                    "--data-dir", str(storage.root)]) for _ in range(2)]  # fmt: skip
    frame = {r["id"]: r for r in storage.read_table("frame").to_pylist()}
    with CodingStore(coding_store_path(str(storage.root))) as store:
        store.load_tasks(pid, [frame[r["id"]] for r in sample])
        for name in ("alice", "bob", "carol"):
            store.add_coder(name)
        for r in sample:
            i = index[r["id"]]
            store.submit(pid, r["id"], "alice", answer(truth(i)))
            if r["id"] == unsure:
                store.submit(pid, r["id"], "bob", {"unresolved": True, "note": "cannot tell from the title"})
            elif r["id"] != single:
                store.submit(pid, r["id"], "bob", answer(truth(i) != (i % 10 == 3)))
        for d in (d for d in store.disagreements(pid) if d["id"] != unsure):
            store.submit(pid, d["id"], "carol", answer(truth(index[d["id"]])), role="adjudication")
        store.append_machine_codes(
            [{"protocol_id": pid, "id": r["id"], "head": "metaresearch", "code": 1,
              "adjudicator": "machine-adjudicator:everything-positive"} for r in coded]
        )  # fmt: skip
    after = run(storage, instance)
    return {
        "storage": storage, "before": before, "after": after, "before_records": before_records, "pid": pid,
        "coded": coded, "sample": sample, "single": single, "unsure": unsure, "index": index, "cli": cli,
    }  # fmt: skip


def test_with_no_codes_the_report_materializes_and_no_head_passes(study):
    storage = study["storage"]
    m = meta(study["before"], "validation_report")
    assert m["human_coded_works"] == 0 and m["trained_works_left_out"] == 3
    assert "metaresearch*: no coded works" in m["summary"]
    first_run = study["before"].run_id
    rows = sql(storage, f"SELECT head, passed, reason, n_coded FROM human_validation WHERE run_id = '{first_run}'")
    assert rows == [("metaresearch", False, "no coded works", 0)]
    # no human layer on any record: the records are what they were before the audit study existed
    assert not any("human_code" in r or "human_validation" in r for r in study["before_records"].values())
    assert check_evaluation(study["before"], "records_human_layers_backed").passed


def test_the_report_matches_the_hajek_ratios_of_the_codes(study):
    storage, coded, index, single = study["storage"], study["coded"], study["index"], study["single"]
    system = f"classifier:{MV}:consensus"
    # the single-coded work waits for its second coder, the unresolved one for an adjudication
    both = [r for r in coded if r["id"] not in (single, study["unsure"])]
    w = {r["id"]: r["design_weight"] for r in both}
    y = {r["id"]: truth(index[r["id"]]) for r in both}
    d = {r["id"]: index[r["id"]] < 80 for r in both}
    assert set(w.values()) == {1.0, 2.0}  # the far negatives are half drawn: the ratios are weighted
    precision = sum(w[i] * y[i] for i in w if d[i]) / sum(w[i] for i in w if d[i])
    recall = sum(w[i] * d[i] for i in w if y[i]) / sum(w[i] for i in w if y[i])
    rates = {
        (r["metric"]): r
        for r in storage.read_table("validation_error_rates").to_pylist()
        if r["code_source"] == "human" and r["system"] == system and r["group_by"] == "all"
    }
    assert math.isclose(rates["precision"]["value"], precision, rel_tol=1e-12)
    assert math.isclose(rates["recall"]["value"], recall, rel_tol=1e-12)
    assert rates["recall"]["n"] == sum(y.values()) and rates["precision"]["n"] == sum(d.values())
    cells = {
        r["cell"]: r["weighted"]
        for r in storage.read_table("validation_confusion").to_pylist()
        if r["code_source"] == "human" and r["system"] == system and r["group_by"] == "all"
    }
    assert math.isclose(cells["tp"], sum(w[i] for i in w if y[i] and d[i]), rel_tol=1e-12)
    assert math.isclose(cells["fn"], sum(w[i] for i in w if y[i] and not d[i]), rel_tol=1e-12)
    # differential error: one row per language group, and the census teacher's direct labels as a system of its own
    groups = {
        (r["system"], r["group"])
        for r in storage.read_table("validation_error_rates").to_pylist()
        if r["group_by"] == "language" and r["code_source"] == "human"
    }
    assert {(system, "en"), (system, "fr"), (f"teacher:{CENSUS}", "fr")} <= groups
    # the prevalence from the codes alone, and the prediction-powered one beside it
    prev = {
        r["method"]: r
        for r in storage.read_table("validation_prevalence").to_pylist()
        if r["code_source"] == "human" and r["head"] == "metaresearch"
    }
    assert math.isclose(prev["human"]["value"], sum(w[i] * y[i] for i in w) / sum(w.values()), rel_tol=1e-12)
    assert {f"ppi:{system}", f"ppi:teacher:{CENSUS}"} <= set(prev)
    # its width over the codes-only interval is reported (here, an audit sample of mostly census strata, the
    # codes-only interval is already narrow: PPI's coverage and narrowing are tested on simulated coders, test_ppi.py)
    assert prev[f"ppi:{system}"]["width_ratio"] > 0
    # agreement before adjudication: bob errs on every tenth work, so kappa is below 1
    kappa = [
        r
        for r in storage.read_table("validation_agreement").to_pylist()
        if (r["statistic"], r["stratum"]) == ("cohen_kappa", "all")
    ]
    assert kappa and all(0 < r["value"] < 1 for r in kappa)


def test_unresolved_counts_the_works_coded_unresolved_and_not_yet_coded_the_works_without_a_code(study):
    """Of the audited sample, one work waits for its second coder (not yet coded) and one was coded unresolved by
    bob and waits for an adjudication (unresolved): each counted in its own column, never the one for the other."""
    storage = study["storage"]
    rates = [
        r
        for r in storage.read_table("validation_error_rates").to_pylist()
        if r["code_source"] == "human" and r["group_by"] == "all"
    ]
    assert {(r["unresolved"], r["not_yet_coded"]) for r in rates} == {(1, 1)}
    prev = [r for r in storage.read_table("validation_prevalence").to_pylist() if r["code_source"] == "human"]
    assert {(r["unresolved"], r["not_yet_coded"]) for r in prev} == {(1, 1)}
    # the three trained works were all coded by both coders: nothing unresolved or uncoded there
    apart = [
        r for r in storage.read_table("validation_error_rates").to_pylist() if r["code_source"] == "human:trained_on"
    ]
    assert apart and {(r["unresolved"], r["not_yet_coded"]) for r in apart} == {(0, 0)}


def test_the_gate_row_is_the_human_run_and_never_a_machine_adjudicator(study):
    storage, pid = study["storage"], study["pid"]
    run_id = study["after"].run_id
    [(passed, precision_lower, recall_lower, positives, n_coded, reason)] = sql(
        storage,
        "SELECT passed, precision_lower, recall_lower, coded_positives, n_coded, reason FROM human_validation "
        f"WHERE run_id = '{run_id}'",
    )
    assert n_coded == len(study["coded"]) - 2 and positives >= 30
    assert passed == (precision_lower >= 0.80 and recall_lower >= 0.70) and passed, reason
    gates = storage.read_table("validation_gate").to_pylist()
    machine = [g for g in gates if g["code_source"] == "machine-adjudicator:everything-positive"]
    assert machine and not any(g["human_validation"] for g in machine)
    assert [g["system"] for g in gates if g["human_validation"]] == [f"classifier:{MV}:consensus"]
    m = meta(study["after"], "validation_report")
    assert "MACHINE-ADJUDICATED" in m["summary"]
    # the frame1k verdicts name works outside this frame: recorded, counted, estimating nothing
    assert m["machine_adjudicators"]["machine-adjudicator:frame1k"] == {
        "codes_in_sample": 0,
        "works_outside_sample": 179,
    }
    assert [c.exit_code for c in study["cli"]] == [0, 0]
    assert "179 machine codes, 179 added" in study["cli"][0].output
    assert "0 added, 179 already present" in study["cli"][1].output
    assert sql(storage, f"SELECT count(*) FROM audit_protocols WHERE protocol_id = '{pid}'") == [(1,)]


def test_records_carry_the_human_code_and_the_validated_status_behind_a_passing_gate(study):
    storage, pid, index, single = study["storage"], study["pid"], study["index"], study["single"]
    assert check_evaluation(study["after"], "records_human_layers_backed").passed
    assert check_evaluation(study["after"], "records_may_ship").passed
    recs = records(storage)
    coded = {r["id"] for r in study["sample"]} - {single, study["unsure"]}
    # every work two coders coded, trained ones too (they are left out of the estimates, not of the layer); the
    # single-coded work has no human code yet
    assert {w for w, r in recs.items() if "human_code" in r} == coded
    [m] = [
        m
        for m in study["after"].asset_materializations_for_node("work_records")
        if m.asset_key.path == ["work_records"]
    ]
    assert m.metadata["human_coded_records"].value == len(coded) and m.metadata["human_validated_records"].value == N
    w0 = recs[wid(0)]
    assert w0["human_code"]["status"] == f"human_coded:{pid}" and w0["human_code"]["categories"] == ["metaresearch"]
    assert w0["human_code"]["coders"] == 2 and w0["direct_labels"][0]["categories"] == ["metaresearch"]
    [v] = w0["human_validation"]
    assert (v["status"], v["head"], v["decision"]) == (f"human_validated:{pid}", "metaresearch", True)
    html = render_work(environment(), w0, None, {**CTX, "rendered_at": "x", "page_run_id": "y"})
    assert '<h3 id="human-code">Human code</h3>' in html and f"human_validated:{pid}" in html
    assert "The figures behind it" in html
    # the prediction's own section no longer says "pending" once a head passed
    assert "Human validation pending" not in html and "passed human validation; every other head is unvalidated" in html
    # the served site renders the same template in French through the catalogue
    fr = render_work(environment(translations("fr")), w0, None, {**CTX, "rendered_at": "x", "page_run_id": "y"})
    assert "Code humain" in fr and "Validation humaine du classifieur" in fr and "Les chiffres qui la justifient" in fr
    assert "Human code" not in fr and "ont franchi la validation humaine" in fr
    # a work not human-coded (one coder so far), far from the threshold, is shown as the classifier's negative call under a passed gate
    far = recs[single]
    assert index[single] >= 90 and "human_code" not in far and far["human_validation"][0]["decision"] is False


def test_the_check_refuses_a_human_layer_without_its_code_or_gate(study):
    storage, pid = study["storage"], study["pid"]
    recs = records(storage)
    plain = next(r for r in recs.values() if "human_code" not in r)
    forged = {**plain, "human_code": {**recs[wid(0)]["human_code"]}}
    passing = {MV: [{"classifier_version": MV, "head": "metaresearch", "protocol_id": pid}]}
    assert human_layer_violations(forged, {}, passing) == [
        f"{plain['id']}: human_code under {pid} but no stored human code of that protocol"
    ]
    other = {**recs[wid(0)]["human_validation"][0], "classifier_version": "metacan-v0-hybrid-ffffffffffff"}
    bad = {**plain, "human_validation": [other]}
    assert "without a passing gate" in human_layer_violations(bad, {}, passing)[0]
    assert human_layer_violations(plain, {}, passing) == []


def test_the_summary_says_when_a_rate_rests_on_fewer_cases_than_the_minimum(study):
    # twelve works of one census stratum, six coded positives: every rate is under the minimum of 30
    rows = [{"id": wid(i), "stratum": "s", "design_weight": 1.0, "stratum_size": 12, "stratum_sample_size": 12,
             "language": "en", "route_key": "ca_aff", "genre": None, "has_abstract": True} for i in range(12)]  # fmt: skip
    system = f"classifier:{MV}:consensus"
    codes = pd.DataFrame([{"id": wid(i), "head": "metaresearch", "code": int(i < 6)} for i in range(12)])
    decisions = pd.DataFrame(
        [{"system": system, "id": wid(i), "head": "metaresearch", "decision": int(i < 7)} for i in range(12)]
    )
    means = pd.DataFrame([{"system": system, "head": "metaresearch", "frame_mean": 0.5}])
    report = report_of(pd.DataFrame(rows), codes, decisions, means)
    text = summary.summary_markdown("human", report, current_protocol(study["storage"]))
    assert "not reported: fewer than the protocol's minimum of 30 (n=7)" in text  # precision: 7 predicted positives
    assert "not reported: fewer than the protocol's minimum of 30 (n=6)" in text  # recall: 6 coded positives
    assert "6 coded positives < 30: cannot be judged" in text
    machine = summary.summary_markdown("machine-adjudicator:frame1k", report, current_protocol(study["storage"]))
    assert machine.startswith("**machine-adjudicator:frame1k (MACHINE-ADJUDICATED: not human validation)**")


def test_a_rerun_whose_gate_says_the_same_appends_nothing(study, tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    [row] = [
        dict(zip(("protocol_id", "classifier_version", "head", "passed", "precision", "precision_lower", "recall",
                  "recall_lower", "coded_positives", "n_coded", "reason", "run_id", "computed_at"), r, strict=True))
        for r in sql(study["storage"], f"SELECT * FROM human_validation WHERE run_id = '{study['after'].run_id}'")
    ]  # fmt: skip
    assert validation.append_human_validation(storage, [row]) is True
    assert validation.append_human_validation(storage, [{**row, "run_id": "later"}]) is False
    assert validation.append_human_validation(storage, [{**row, "run_id": "later", "n_coded": 1}]) is True
    assert sql(storage, "SELECT run_id FROM human_validation ORDER BY run_id") == [(row["run_id"],), ("later",)]


def test_the_blocking_check_fails_on_a_stored_record_with_a_forged_human_code(study, tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    recs = records(study["storage"])
    forged = {**recs[study["single"]], "human_code": recs[wid(0)]["human_code"]}
    other = next(r for w, r in recs.items() if w not in (wid(1), study["single"]))
    plain = {k: v for k, v in other.items() if k not in ("human_code", "human_validation")}  # no human layer
    # a title naming the keys is a string value: parsed (its quotes are escaped in the text), no violation
    named = {**plain, "title": '"human_code": {"protocol_id": "x"}, "human_validation"'}
    chosen = (recs[wid(1)], forged, plain, named)
    rows = [{"id": r["id"], "record_json": json.dumps(r), "record_hash": "0" * 16} for r in chosen]
    storage.write_table("work_records", pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA))
    result = dg.materialize(
        [records_human_layers_backed],
        resources={"storage": storage},
        selection=dg.AssetSelection.checks(records_human_layers_backed),
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    evaluation = check_evaluation(result, "records_human_layers_backed")
    assert not evaluation.passed  # this store holds no human code and no gate row at all
    problems = evaluation.metadata["violations"].value
    assert f"{forged['id']}: human_code under {study['pid']} but no stored human code of that protocol" in problems
    assert any(p.startswith(f"{wid(1)}: human_validated:") for p in problems)
    assert evaluation.metadata["records_checked"].value == 4
    assert not any(p.startswith(f"{plain['id']}:") for p in problems)


def test_an_audit_sample_with_no_work_to_code_gives_empty_decisions(study):
    """Every drawn work trained the classifier (the 3-work frame of `make run`'s small input): the report's inputs
    hold no sampled id, and the decisions are an empty frame, not a SQL error (`VALUES ()` failed the whole run)."""
    from metacan_pipeline.audit.estimates.validation import decision_frames
    from metacan_pipeline.audit.protocol.locked import current_protocol

    storage = study["storage"]
    decisions, means = decision_frames(storage, current_protocol(storage), [])
    assert decisions.empty and list(decisions.columns) == ["system", "id", "head", "decision"]
    full, full_means = decision_frames(storage, current_protocol(storage), sorted(r["id"] for r in study["coded"]))
    assert not full.empty and set(full["id"]) <= {r["id"] for r in study["coded"]}
    assert means.equals(full_means)  # the frame means do not depend on the sample


def test_the_trained_works_are_reported_apart_and_left_out_of_the_frame_means(study):
    """The three works that trained the classifier (W9197-W9199, a census trained_on stratum) were coded: their
    rates are a report of their own (code source human:trained_on) that never gates, the audited population's report
    does not contain them, and the frame-wide decision means the PPI estimate uses leave them out."""
    from metacan_pipeline.audit.estimates.validation import TRAINED_APART, decision_frames

    storage = study["storage"]
    trained = sorted(r["id"] for r in study["sample"] if r["trained_on"])
    assert trained == [wid(i) for i in (197, 198, 199)]
    rates = storage.read_table("validation_error_rates").to_pylist()
    apart = [r for r in rates if r["code_source"] == TRAINED_APART and r["group_by"] == "all"]
    teacher = {r["metric"]: r for r in apart if r["system"] == f"teacher:{CENSUS}"}
    # gemma labels W9197-W9199 [] ([] for 198 and 199 too: truth False, i % 11 != 3), the coders say 0: F1 over no
    # positive has no case; precision over no positive decision has none either
    assert teacher["precision"]["n"] == 0 and teacher["recall"]["n"] == 0
    assert all(r["value"] is None for r in apart)  # 3 cases: under the protocol's minimum of 30, and said so
    prev = [
        r
        for r in storage.read_table("validation_prevalence").to_pylist()
        if r["code_source"] == TRAINED_APART and r["head"] == "metaresearch"
    ]
    assert [(r["method"], r["n"], r["note"]) for r in prev] == [
        ("human", 3, "fewer than 30 coded cases (n=3): not reported")
    ]
    gates = [g for g in storage.read_table("validation_gate").to_pylist() if g["code_source"] == TRAINED_APART]
    assert gates and not any(g["human_validation"] for g in gates)
    human_ns = {r["n"] for r in rates if r["code_source"] == "human" and r["metric"] == "precision"}
    assert max(human_ns) <= len(study["coded"])  # the audited population's report has no trained work
    m = meta(study["after"], "validation_report")
    assert m["trained_works_left_out"] == 3 and m["trained_works_reported_apart"] is True
    assert "human:trained_on: human codes of the works that trained or calibrated the classifier" in m["summary"]
    # frame means over the audited population: 197 works, the 80 consensus works among them
    protocol = current_protocol(storage)
    _, means = decision_frames(storage, protocol, [], trained)
    row = means.loc[means["system"] == f"classifier:{MV}:consensus"].iloc[0]
    assert (row["frame_n"], row["frame_mean"]) == (N - 3, pytest.approx(80 / (N - 3)))
    _, everyone = decision_frames(storage, protocol, [])
    assert everyone.loc[everyone["system"] == f"classifier:{MV}:consensus", "frame_n"].iloc[0] == N


def test_the_minimum_n_is_the_protocols(study):
    """The same codes under a protocol that locks min_n = 150 (another protocol: the report of this one's inputs
    under it): a rate on fewer cases is withheld, and the summary says so with that minimum."""
    import dataclasses

    storage = study["storage"]
    protocol = current_protocol(storage)
    strict = dataclasses.replace(protocol, min_n=150)
    with CodingStore(coding_store_path(str(storage.root))) as store:
        inputs = study_inputs.report_inputs(storage, store, protocol)
    report = validation.run_report(dataclasses.replace(inputs, protocol=strict))[validation.HUMAN]
    rates = report.error_rates
    overall = rates.loc[(rates["group_by"] == "all") & (rates["system"] == f"classifier:{MV}:consensus")]
    precision = overall.loc[overall["metric"] == "precision"].iloc[0]
    assert precision["n"] == 80 and pd.isna(precision["value"])
    assert precision["note"] == "fewer than 150 coded cases (n=80): not reported"
    assert f"not reported: fewer than the protocol's minimum of 150 (n={precision['n']})" in (
        summary.summary_markdown(validation.HUMAN, report, strict)
    )


def test_the_dagster_metadata_shows_agreement_prevalence_and_differential_error(study):
    """What a user reads in the Dagster UI: the same figures as the tables, with n and effective n."""
    storage = study["storage"]
    m = meta(study["after"], "validation_report")
    assert m["min_n"] == 30
    agreement = {
        (r["stratum"], r["weighting"], r["statistic"]): r
        for r in storage.read_table("validation_agreement").to_pylist()
        if r["code_source"] == "human"
    }
    kappa, alpha = agreement["all", "design", "cohen_kappa"], agreement["all", "design", "krippendorff_alpha"]
    assert (
        f"| metaresearch | all (design-weighted) | {kappa['value']:.3f} [{kappa['lower']:.3f}, {kappa['upper']:.3f}] | "
        f"{alpha['value']:.3f} [{alpha['lower']:.3f}, {alpha['upper']:.3f}] | {kappa['n']} | {kappa['n_effective']:.1f} |"
        in m["agreement"]
    )
    # the design weights are 1 and 2 (half the far negatives drawn): Kish's n is below the works coded twice
    assert kappa["n_effective"] < kappa["n"]
    # per stratum: the consensus stratum's kappa and alpha, and a stratum whose coders gave one value throughout
    cons = agreement["consensus", "raw", "cohen_kappa"]
    assert (
        f"| metaresearch | consensus | {cons['value']:.3f} [{cons['lower']:.3f}, {cons['upper']:.3f}] | "
        in (m["agreement"])
    )
    assert "| metaresearch | no_abstract | undefined | undefined | 7 | 7.0 |" in m["agreement"]
    # the same rows as table metadata, one per stratum, statistic and weighting
    table = [dict(r.data) for r in m["agreement_table"].records]
    assert (
        len(table) == len(agreement)
        and {"stratum": "consensus", "statistic": "cohen_kappa"}.items()
        <= next(t for t in table if (t["stratum"], t["statistic"]) == ("consensus", "cohen_kappa")).items()
    )
    assert next(t for t in table if (t["stratum"], t["statistic"]) == ("consensus", "cohen_kappa"))["value"] == (
        pytest.approx(cons["value"])
    )
    rates = [dict(r.data) for r in m["error_rates_table"].records]
    assert {(t["system"], t["metric"]) for t in rates} >= {(f"classifier:{MV}:consensus", "f1")}
    # the gate says which works it left out and why
    assert (
        "Reported apart: 3 drawn works of the trained_on stratum: they trained or calibrated the classifier under "
        "test, so they are outside the audited population and never enter the gate (their report is the code source "
        "human:trained_on)." in m["gate"]
    )
    assert "Machine adjudicators (machine-adjudicator:everything-positive, machine-adjudicator:frame1k)" in m["gate"]
    # the coding status says why the estimates' n is what it is
    assert m["coding"].startswith(f"{len(study['sample'])} drawn works ({len(study['coded'])} of the audited")
    prev = {
        r["method"]: r
        for r in storage.read_table("validation_prevalence").to_pylist()
        if r["code_source"] == "human" and r["head"] == "metaresearch"
    }
    human = prev["human"]
    assert (
        f"| metaresearch | human | {human['value']:.2f} [{human['lower']:.2f}, {human['upper']:.2f}] | {human['n']} | "
        f"{human['n_effective']:.1f} | - |" in m["prevalence"]
    )
    ppi = prev[f"ppi:classifier:{MV}:consensus"]
    ratio = ppi["width_ratio"]
    assert f"{ratio:.2f}x ({abs(1 - ratio):.0%} {'narrower' if ratio < 1 else 'wider'})" in m["prevalence"]
    fr = {
        r["metric"]: r
        for r in storage.read_table("validation_error_rates").to_pylist()
        if r["code_source"] == "human"
        and r["system"] == f"classifier:{MV}:consensus"
        and (r["group_by"], r["group"]) == ("language", "fr")
    }
    line = next(
        x
        for x in m["differential_error"].splitlines()
        if f"classifier:{MV}:consensus | metaresearch | language | fr |" in x
    )
    for metric in ("precision", "recall"):
        r = fr[metric]
        shown = (
            f"{r['value']:.2f} [{r['lower']:.2f}, {r['upper']:.2f}]"
            if r["value"] is not None
            else f"not reported: fewer than the protocol's minimum of 30 (n={r['n']})"
        )
        assert f"| {shown} | {r['n']} ({r['n_effective']:.1f}) |" in line, (metric, line)
    # the two recall instruments are named, in the protocol's words, as reported apart from these estimates
    assert "reported apart from these design-based estimates" in m["recall_instruments"]
    assert "`filter_recall`" in m["recall_instruments"] and "`venue_known_item_recall`" in m["recall_instruments"]


def test_a_release_freezes_the_protocol_and_the_validation_report_behind_its_statuses(study, tmp_path):
    """A release of the coded study (a copy of its data folder) holds the locked protocol and the validation report
    (error rates, confusion, prevalence, agreement, gate, human codes) without run columns; a later report that says
    the same (a new run id) freezes to the same bytes, so cutting again reuses the release."""
    import shutil

    import pyarrow.parquet as pq

    from metacan_pipeline.release.bundle import VALIDATION_TABLES, cut_release

    shutil.copytree(study["storage"].root, tmp_path / "data")
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    labels = [f"direct_labels_{CENSUS}", f"direct_labels_{SAMPLE}"]
    first = cut_release(storage, labels, "", ["MetaCan research group"], "run-1")
    tables = first.folder / "tables"
    protocols = pq.read_table(tables / "audit_protocols.parquet").to_pylist()
    assert [p["protocol_id"] for p in protocols] == [study["pid"]]
    assert current_protocol(storage).canonical_json() == protocols[0]["protocol_json"]
    for name in VALIDATION_TABLES:
        frozen = pq.read_table(tables / f"{name}.parquet")
        assert "run_id" not in frozen.column_names and "computed_at" not in frozen.column_names
        assert first.manifest["counts"][name] == frozen.num_rows == storage.read_table(name).num_rows > 0
    gate = pq.read_table(tables / "validation_gate.parquet").to_pylist()
    assert [g["passed"] for g in gate if g["human_validation"]] == [True]
    # the report again, unchanged codes: new run ids, the same frozen bytes, the same release
    again = dg.materialize([validation_report], resources={"storage": storage}, instance=dg.DagsterInstance.ephemeral())
    assert again.success and storage.read_table("validation_gate").column("run_id")[0].as_py() == again.run_id
    second = cut_release(storage, labels, "", ["MetaCan research group"], "run-2")
    assert second.reused and second.release_version == first.release_version


def test_every_registry_teacher_is_a_system_of_the_report(study, monkeypatch):
    """A third registry teacher (here opus, labelling the first 40 frame works, every one metaresearch) is a system of
    its own: its decisions on the sampled works it labelled, and no frame mean (it is not the census teacher)."""
    import shutil

    from metacan_pipeline.audit.estimates.validation import decision_frames

    root = study["storage"].root
    copy = root.parent / "with-opus"
    shutil.copytree(root, copy)
    storage = MetacanStorage(data_dir=str(copy))
    opus = [label_row(wid(i), "opus", ["metaresearch"]) for i in range(40)]
    storage.write_table("direct_labels_opus", pa.Table.from_pylist(opus, schema=LABELS_SCHEMA))
    monkeypatch.setattr(validation, "REPORT_TEACHERS", (*validation.REPORT_TEACHERS, "opus"))
    ids = sorted(r["id"] for r in study["coded"])
    decisions, means = decision_frames(storage, current_protocol(storage), ids)
    theirs = decisions.loc[decisions["system"] == "teacher:opus"]
    assert sorted(theirs["id"]) == sorted(i for i in ids if int(i[1:]) - 9000 < 40)
    assert set(theirs["decision"]) == {1} and "teacher:opus" not in set(means["system"])


def test_each_estimands_frame_mean_is_the_share_of_frame_works_a_system_puts_in_it(study):
    """The PPI estimate's other input for the estimands, counted here from the frame, the census teacher's labels and
    the predictions: the primary estimand's mean is the share of works decided metaresearch with a Canadian
    affiliation or funder; the secondary estimand has no mean where about_ca_system is not a gated head."""
    from metacan_pipeline.audit.estimates.validation import decision_frames

    storage = study["storage"]
    frame = {r["id"]: r for r in storage.read_table("frame").to_pylist()}
    ids = sorted(r["id"] for r in study["coded"])
    _, means = decision_frames(storage, current_protocol(storage), ids)
    means = {(m["system"], m["head"]): m for m in means.to_dict("records")}
    labels = [r for r in storage.read_table(f"direct_labels_{CENSUS}").to_pylist() if r["status"] == "labelled"]
    primary = [("metaresearch" in r["categories"]) and (frame[r["work_id"]]["ca_aff"] or frame[r["work_id"]]["ca_fund"])
               for r in labels]  # fmt: skip
    gemma = means[(f"teacher:{CENSUS}", "estimand:primary")]
    assert (gemma["frame_mean"], gemma["frame_n"]) == (pytest.approx(sum(primary) / len(primary)), len(primary))
    assert 0 < gemma["frame_mean"] <= means[(f"teacher:{CENSUS}", "metaresearch")]["frame_mean"]
    preds = storage.read_table("predictions").to_pylist()
    venue = [("metaresearch" in p["consensus_categories"]) and any(frame[p["id"]][c] for c in ("ca_aff", "ca_fund",
             "ca_venue")) for p in preds]  # fmt: skip
    consensus = means[(f"classifier:{MV}:consensus", "estimand:alt2_broad")]
    assert (consensus["frame_mean"], consensus["frame_n"]) == (pytest.approx(sum(venue) / len(venue)), len(venue))
    assert (f"classifier:{MV}:consensus", "estimand:secondary") not in means


def test_the_run_summary_names_the_protocol_the_sample_the_adjudicators_and_the_gate(study):
    """What `metacan run` and `metacan summary` print about the audit study, from the stored tables and the coding
    store (read-only)."""
    from metacan_pipeline.cli.run_summary import audit_lines

    storage, pid = study["storage"], study["pid"]
    with storage.connect(read_only=True) as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        lines = audit_lines(con, views, tables, coding_store_path(str(storage.root)))
        none = audit_lines(con, views, set(), None)
    sample = study["sample"]
    strata: dict[str, list[int]] = {}
    for r in storage.read_table("audit_sample").to_pylist():
        if r["protocol_id"] == pid:
            strata.setdefault(r["stratum"], [0, r["stratum_size"]])[0] += r["in_sample"]
    assert lines[0].startswith(f"Audit study: protocol {pid} ({MV}, consensus rule, heads metaresearch;")
    assert lines[0].endswith("30 coded positives; min n 30)")
    assert lines[1] == (
        f"  audit sample: {len(sample)} of {N} frame works drawn; by stratum (drawn / N_h): "
        + " | ".join(f"{s} {n}/{big}" for s, (n, big) in strata.items())
    )
    coded, index, single, unsure = study["coded"], study["index"], study["single"], study["unsure"]
    with CodingStore(coding_store_path(str(storage.root))) as store:
        bases = [c["basis"] for c in store.adjudicated_codes(pid) if c["basis"] != "single_coder"]
    agreed, adjudicated = bases.count("agreed"), bases.count("adjudicated")
    # every count named, and they add up: 1 work waits for its second coder, 1 for the adjudication of an
    # unresolved answer; the final codes are the audited sample's (the gate's n) and the trained works' (apart)
    assert agreed + adjudicated == len(sample) - 2 and adjudicated > 0
    assert lines[2] == (
        f"  coding: {len(sample)} drawn works ({len(coded)} of the audited population, 3 of the trained_on stratum): "
        f"0 not coded yet, 1 coded by one coder (waiting for the second), {len(sample) - 1} coded by both ({agreed} "
        f"agreed, {adjudicated} adjudicated, 1 awaiting adjudication); 1 with an unresolved answer and no final code. "
        f"Final human codes (two coders agreed, or adjudicated): {len(sample) - 2}: {len(coded) - 2} in the audited "
        "sample (what the estimates and the gate count), 3 of the trained_on stratum (reported apart: those works "
        "trained or calibrated the classifier)"
    )
    assert lines[3] == (
        f"  machine-adjudicator:everything-positive (MACHINE-ADJUDICATED, never human codes): {len(study['coded'])} "
        f"works coded, {len(study['coded'])} of them in the audit sample"
    )
    assert lines[4] == (
        "  machine-adjudicator:frame1k (MACHINE-ADJUDICATED, never human codes): 179 works coded, 0 of them in the "
        "audit sample"
    )
    # agreement: kappa of alice (the truth) and bob (wrong on every tenth work) computed here from the answers,
    # design-weighted over every audited work coded twice, and within the consensus stratum alone, where free
    # agreement on negatives cannot lift it
    twice = [r for r in coded if r["id"] != single]

    def bob(r) -> object:
        i = index[r["id"]]
        return "unresolved" if r["id"] == unsure else int(truth(i) != (i % 10 == 3))

    alice = [int(truth(index[r["id"]])) for r in twice]
    pooled = cohen_kappa(alice, [bob(r) for r in twice], [r["design_weight"] for r in twice])
    inside = [k for k, r in enumerate(twice) if r["stratum"] == "consensus"]
    consensus = cohen_kappa([alice[k] for k in inside], [bob(twice[k]) for k in inside])
    assert pooled > consensus + 0.3  # the pooled kappa is mostly the agreement on negatives
    stored = {
        (r["stratum"], r["weighting"], r["statistic"]): r
        for r in storage.read_table("validation_agreement").to_pylist()
        if r["code_source"] == "human"
    }
    design, cons = stored["all", "design", "cohen_kappa"], stored["consensus", "raw", "cohen_kappa"]
    assert (design["value"], design["n"]) == (pytest.approx(pooled), len(twice))
    assert (cons["value"], cons["n"]) == (pytest.approx(consensus), len(inside))
    alpha = stored["all", "design", "krippendorff_alpha"]
    assert lines[5].startswith(
        f"  agreement on metaresearch before adjudication (works coded twice): all (design-weighted), n={len(twice)}: "
        f"kappa {pooled:.3f} [{design['lower']:.3f}, {design['upper']:.3f}], alpha {alpha['value']:.3f} "
        f"[{alpha['lower']:.3f}, {alpha['upper']:.3f}]; all (raw, unweighted), n={len(twice)}: kappa "
    )
    assert f"; consensus, n={len(inside)}: kappa {consensus:.3f} [{cons['lower']:.3f}, {cons['upper']:.3f}]" in lines[5]
    # precision, recall and F1 of each system, design-weighted, with intervals and n; the human-only prevalence
    # beside the prediction-powered ones
    rates = {
        r["metric"]: r
        for r in storage.read_table("validation_error_rates").to_pylist()
        if r["code_source"] == "human" and r["system"] == f"classifier:{MV}:consensus" and r["group_by"] == "all"
    }
    p, r, f = (rates[m] for m in ("precision", "recall", "f1"))
    assert (
        f"  classifier:{MV}:consensus on metaresearch (design-weighted): precision {p['value']:.3f} "
        f"[{p['lower']:.3f}, {p['upper']:.3f}] n={p['n']}, recall {r['value']:.3f} [{r['lower']:.3f}, "
        f"{r['upper']:.3f}] n={r['n']}, f1 {f['value']:.3f} [{f['lower']:.3f}, {f['upper']:.3f}] n={f['n']}"
    ) in lines
    assert (p["n"], r["n"]) == (80, sum(truth(index[x["id"]]) for x in twice if x["id"] != unsure))
    prevalence = next(x for x in lines if x.startswith("  prevalence of metaresearch: human-only "))
    human = next(
        x
        for x in storage.read_table("validation_prevalence").to_pylist()
        if (x["code_source"], x["head"], x["method"]) == ("human", "metaresearch", "human")
    )
    assert prevalence.startswith(
        f"  prevalence of metaresearch: human-only {human['value']:.4f} [{human['lower']:.4f}, {human['upper']:.4f}] "
        f"n={len(coded) - 2}; ppi:classifier:{MV}:candidate "
    )
    # the estimands: one line each, the human-only estimate first
    stored = {
        x["head"]: x
        for x in storage.read_table("validation_prevalence").to_pylist()
        if x["code_source"] == "human" and x["method"] == "human" and x["head"].startswith("estimand:")
    }
    shown = [x for x in lines if x.startswith("  prevalence of estimand ")]
    assert [x.split(":")[0] for x in shown] == [
        f"  prevalence of estimand {e}"
        for e in ("primary", "primary_ca_aff", "primary_ca_fund", "secondary", "alt1_strict", "alt2_broad")
    ]
    primary = stored["estimand:primary"]
    assert shown[0].startswith(
        f"  prevalence of estimand primary: human-only {primary['value']:.4f} [{primary['lower']:.4f}, "
        f"{primary['upper']:.4f}] n={len(coded) - 2}; ppi:classifier:{MV}:candidate "
    )
    assert lines[-1].startswith(f"  gate metaresearch: human_validated:{pid} (precision lower bound ")
    assert lines[-1].endswith(f": passes; {len(coded) - 2} final human codes on the head in the audited sample)")
    assert none == []  # a store from before the audit study: no section


def test_the_human_prevalence_is_reported_for_every_category_not_only_the_evaluated_heads(study):
    """The coders answered every SPEC section 3 field: the prevalence of each category and about-Canada flag comes
    from their codes (here: open_science never, about_ca_topic always, metaresearch as the hidden truth), while the
    PPI estimates and the gate stay on the protocol's head."""
    storage = study["storage"]
    prev = [r for r in storage.read_table("validation_prevalence").to_pylist() if r["code_source"] == "human"]
    human = {r["head"]: r for r in prev if r["method"] == "human"}
    estimands = {f"estimand:{e}" for e in ("primary", "primary_ca_aff", "primary_ca_fund", "alt1_strict", "alt2_broad")}
    assert set(human) == set(BINARY_TARGETS) | estimands | {"estimand:secondary"}
    n = len(study["coded"]) - 2  # the single-coded work waits for its second coder, the unresolved one for adjudication
    assert (human["open_science"]["value"], human["open_science"]["n"]) == (0.0, n)
    assert (human["about_ca_topic"]["value"], human["about_ca_topic"]["n"]) == (1.0, n)
    assert 0 < human["metaresearch"]["value"] < 1
    # PPI on the gated head and on each estimand the systems decide on every head of (about_ca_system is not gated:
    # the secondary estimand has its human estimate only)
    assert {r["head"] for r in prev if r["method"] != "human"} == {"metaresearch"} | estimands
    gates = storage.read_table("validation_gate").to_pylist()
    assert {g["head"] for g in gates if g["code_source"] == "human"} == {"metaresearch"}


def test_the_summary_names_an_agreement_table_written_before_strata_instead_of_failing():
    import duckdb

    from metacan_pipeline.cli.run_summary import report_lines

    con = duckdb.connect()
    con.execute(
        "CREATE VIEW validation_agreement AS SELECT 'p1' AS protocol_id, 'human' AS code_source, 'metaresearch' AS head, "
        "'cohen_kappa' AS statistic, 'raw' AS weighting, 0.5 AS value, 10 AS n, 10.0 AS n_effective"
    )
    assert report_lines(con, {"validation_agreement"}, "p1", ["metaresearch"]) == [
        "  agreement: the stored report predates its strata; re-materialize validation_report"
    ]
