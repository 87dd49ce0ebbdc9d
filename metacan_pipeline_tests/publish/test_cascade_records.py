"""The cascade's decisions on the published records and the work page.

A planted cascade: thresholds certified by :func:`metacan_pipeline.student.cascade.certify_head` (Jeffreys) on planted
calibration scores and labels, written as ``cascade_thresholds`` and ``cascade_decisions`` beside a frame of real
OpenAlex rows; Dagster materializes ``work_records`` with its blocking check ``records_may_ship`` over real DuckDB and
Parquet. Each record's ``cascade`` is compared with the planted rows, each certificate's lower bound with the Jeffreys
quantile computed here from the certified set's counts, the page's sentence in English and French, and the check is
shown to fail on a certified decision that would ship as more than a machine decision.
"""

from __future__ import annotations

import datetime as dt
import json

import dagster as dg
import fastjsonschema
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import beta

from metacan_pipeline.definitions import build_resources
from metacan_pipeline.i18n import translations
from metacan_pipeline.publish.assets import work_records
from metacan_pipeline.publish.cascade_record import cascade_violations
from metacan_pipeline.publish.checks import records_may_ship
from metacan_pipeline.publish.pages import environment, render_work
from metacan_pipeline.publish.record_check import check_file
from metacan_pipeline.publish.records import SCHEMA_PATH, record_row, schema_violation
from metacan_pipeline.release.layer import ROLLING, LayerRule, NewestRelease
from metacan_pipeline.student.cascade import certify_head
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline.tables.publish import RECORDS_SCHEMA
from metacan_pipeline.tables.student import (
    CASCADE_DECISIONS_SCHEMA,
    CASCADE_THRESHOLDS_SCHEMA,
    HEADS_SCHEMA,
    MACHINE_SCHEMA,
    PRED_SCHEMA,
)
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.vocab import PREDICTION_STATUS
from metacan_pipeline_tests.builders.common import root_error
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.student import machine_row, prediction_row

VERSION = "metacan-v0-hybrid-000000000000"
CTX = {"n_codex_labels": 10, "gated_heads": 0, "total_heads": 11}
#: id -> (head -> (score, decision)); W5 the cascade did not plan (a holdout work, say)
PLANNED = {
    "W1": {"metaresearch": (0.97, "positive"), "research_integrity": (0.4, "unsettled")},
    "W2": {"metaresearch": (0.02, "negative")},
    "W3": {"metaresearch": (0.5, "teacher")},
    "W4": {"metaresearch": (0.55, "unsettled")},
}


def _calibration() -> tuple[np.ndarray, np.ndarray]:
    """140 held-out works: scores evenly spread, the teacher's positives the top 40 but for one error among them
    and one positive low down (the recall side has something to keep)."""
    scores = np.arange(140) / 140
    labels = (np.arange(140) >= 100).astype(int)
    labels[120], labels[30] = 0, 1
    return scores, labels


def _jeffreys(scores, labels, keep) -> tuple[int, float]:
    """The size and the Jeffreys 95% lower bound of the rate of ``labels == 1`` among the works ``keep(scores)``."""
    chosen = keep(scores)
    n, k = int(chosen.sum()), int(labels[chosen].sum())
    return n, float(beta.ppf(0.05, k + 0.5, n - k + 0.5))


@pytest.fixture
def planted(tmp_path, openalex_dir):
    resources = build_resources(str(tmp_path / "data"), str(openalex_dir))
    storage = resources["storage"]
    ids = [*PLANNED, "W5"]
    frame = [real_frame_row(openalex_dir, id=f"https://openalex.org/{w}") for w in ids]
    storage.write_table("frame", pa.Table.from_pylist(frame, schema=FRAME_SCHEMA))
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist([], schema=LABELS_SCHEMA))
    storage.write_table("direct_labels_codex", pa.Table.from_pylist([], schema=LABELS_SCHEMA))
    storage.write_table("predictions", pa.Table.from_pylist([prediction_row(w) for w in ids], schema=PRED_SCHEMA))
    storage.write_table("machine_scores", pa.Table.from_pylist([machine_row(w) for w in ids], schema=MACHINE_SCHEMA))
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    scores, labels = _calibration()
    t = certify_head(scores, labels, 0.9, method="jeffreys", negative_recall=0.9)
    assert t.positive.threshold is not None and t.negative_threshold is not None
    base = {
        "run_id": "r",
        "computed_at": dt.datetime(2026, 12, 7),
        "model_version": VERSION,
        "teacher": "gemma",
        "precision_target": 0.9,
        "npv_target": 0.9,
        "recall_target": 0.9,
        "bound_level": 0.95,
        "bound_method": "jeffreys",
        "calibration_n": 140,
        "calibration_positives": int(labels.sum()),
        "works_planned": 4,
        "decided_positive": 1,
        "decided_negative": 1,
        "sent_to_teacher": 1,
        "added_to_batch": 1,
        "unsettled": 1,
    }
    rows = [
        {
            **base,
            "target": "metaresearch",
            "positive_threshold": t.positive.threshold,
            "positive_bound": t.positive.bound,
            "negative_threshold": t.negative_threshold,
            "negative_bound": t.negative.bound,
            "negative_vacuous": t.negative.vacuous,
        },
        {
            **base,
            "target": "research_integrity",
            "positive_threshold": None,
            "positive_bound": None,
            "negative_threshold": None,
            "negative_bound": None,
            "negative_vacuous": False,
        },
    ]
    storage.write_table("cascade_thresholds", pa.Table.from_pylist(rows, schema=CASCADE_THRESHOLDS_SCHEMA))
    decisions = [
        {"id": w, "model_version": VERSION, "target": h, "score": s, "decision": d}
        for w, heads in PLANNED.items()
        for h, (s, d) in heads.items()
    ]
    storage.write_table("cascade_decisions", pa.Table.from_pylist(decisions, schema=CASCADE_DECISIONS_SCHEMA))
    return resources, t, scores, labels


def _materialize(resources):
    return dg.materialize(
        [work_records, records_may_ship],
        resources=resources,
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def test_each_record_carries_the_planted_cascade_decisions_and_their_certificates(planted):
    resources, t, scores, labels = planted
    storage = resources["storage"]
    result = _materialize(resources)
    assert result.success, root_error(result)
    assert [e.passed for e in result.get_asset_check_evaluations()] == [True]
    records = {r["id"]: json.loads(r["record_json"]) for r in storage.read_table("work_records").to_pylist()}
    assert "cascade" not in records["W5"]  # not planned: no entry, not an empty list
    # the certificates' bounds, computed here from the certified sets' counts (Jeffreys, one-sided 95%)
    n_pos, precision_lower = _jeffreys(scores, labels, lambda s: s >= t.positive.threshold)
    n_neg, npv_lower = _jeffreys(scores, 1 - labels, lambda s: s <= t.negative.threshold)
    assert (n_pos, n_neg) == (t.positive.n, t.negative.n)
    assert precision_lower == pytest.approx(t.positive.bound) and npv_lower == pytest.approx(t.negative.bound)
    for wid, heads in PLANNED.items():
        record = records[wid]
        assert schema_violation(record) is None
        assert [e["head"] for e in record["cascade"]] == sorted(heads)
        for entry in record["cascade"]:
            score, decision = heads[entry["head"]]
            assert (entry["score"], entry["decision"], entry["teacher"]) == (score, decision, "gemma")
            assert (entry["status"], entry["model_version"]) == (PREDICTION_STATUS, VERSION)
            if entry["head"] == "metaresearch":
                assert entry["positive_threshold"] == t.positive.threshold
                assert entry["negative_threshold"] == t.negative_threshold
            else:
                assert entry["positive_threshold"] is None and entry["negative_threshold"] is None
            if decision not in ("positive", "negative"):
                assert entry["certificate"] is None
    common = {
        "target": 0.9,
        "method": "jeffreys",
        "confidence": 0.95,
        "calibration_n": 140,
        "calibration_positives": 40,
    }
    assert records["W1"]["cascade"][0]["certificate"] == {
        **common,
        "measure": "precision",
        "threshold": t.positive.threshold,
        "lower_bound": pytest.approx(precision_lower),
    }
    assert records["W2"]["cascade"][0]["certificate"] == {
        **common,
        "measure": "negative_predictive_value",
        "threshold": t.negative_threshold,
        "lower_bound": pytest.approx(npv_lower),
        "recall_target": 0.9,
        "vacuous": False,
    }
    # a certified decision is never a category: the Classification card is the prediction's, unchanged
    assert records["W1"]["prediction"]["candidate_categories"] == []
    assert records["W1"]["prediction"]["consensus_categories"] == []


def _floor2(x: float) -> str:
    return f"{np.floor(x * 100) / 100:.2f}"


def test_the_work_page_says_each_heads_decision_in_a_plain_sentence_in_english_and_french(planted):
    resources, t, scores, labels = planted
    storage = resources["storage"]
    assert _materialize(resources).success
    records = {r["id"]: json.loads(r["record_json"]) for r in storage.read_table("work_records").to_pylist()}
    precision_lower, npv_lower = _floor2(t.positive.bound), _floor2(t.negative.bound)
    en = {w: render_work(environment(), records[w], None, CTX) for w in PLANNED}
    assert (
        "The student settled this work as Metaresearch: certified at precision ≥ 0.90 "
        f"(lower bound {precision_lower}, Jeffreys, n = 140 held-out teacher labels)." in en["W1"]
    )
    assert (
        "The student settled this work as not Metaresearch: certified at negative predictive value ≥ 0.90 "
        f"(lower bound {npv_lower}, Jeffreys, n = 140 held-out teacher labels)." in en["W2"]
    )
    assert "at least 0.90 of the teacher's positives" in en["W2"]
    assert "says little about the ranking" not in en["W2"]
    vacuous = json.loads(json.dumps(records["W2"]))
    vacuous["cascade"][0]["certificate"]["vacuous"] = True
    assert "The held-out works together already meet this target" in render_work(environment(), vacuous, None, CTX)
    fr_vacuous = render_work(environment(translations("fr")), vacuous, None, CTX)
    assert "la borne dit peu de chose du classement" in fr_vacuous
    assert "(score 0.500, between its certified thresholds): it is sent to teacher gemma." in en["W3"]
    assert "(score 0.550, between its certified thresholds), and the teacher's call budget" in en["W4"]
    assert "did not settle this work as Research integrity or not (score 0.400" in en["W1"]
    assert all(f"Model {VERSION}." in en[w] and PREDICTION_STATUS in en[w] for w in PLANNED)
    fr = render_work(environment(translations("fr")), records["W1"], None, CTX)
    assert (
        "Le modèle élève a tranché : cette publication relève de « Métarecherche », décision certifiée à une "
        f"précision ≥ 0.90 (borne inférieure {precision_lower}, Jeffreys, n = 140 étiquettes d'annotateur sur des "
        "publications réservées)." in fr
    )
    assert "Décisions du modèle élève dans la cascade" in fr and "The student" not in fr
    fr2 = render_work(environment(translations("fr")), records["W2"], None, CTX)
    assert "ne relève pas de « Métarecherche »" in fr2 and "valeur prédictive négative ≥ 0.90" in fr2
    unplanned = render_work(environment(), records["W5"], None, CTX)
    assert "Student decisions of the cascade" not in unplanned


def test_the_check_fails_on_a_certified_decision_shipped_as_more_than_a_machine_decision(planted, tmp_path):
    resources, *_ = planted
    storage = resources["storage"]
    assert _materialize(resources).success
    rows = storage.read_table("work_records").to_pylist()
    by_id = {r["id"]: json.loads(r["record_json"]) for r in rows}
    by_id["W1"]["cascade"][0]["status"] = "human_validated:protocol-x"
    by_id["W2"]["cascade"][0]["categories"] = ["metaresearch"]
    by_id["W3"]["cascade"][0].update(decision="positive")  # a certified decision with no certificate
    path = tmp_path / "tampered.parquet"
    tampered = [{"id": w, "record_json": json.dumps(r), "record_hash": "x"} for w, r in by_id.items()]
    pq.write_table(pa.Table.from_pylist(tampered, schema=RECORDS_SCHEMA), path)
    checked, bad, shown = check_file(str(path), frozenset())
    assert (checked, bad) == (5, 3)
    text = "\n".join(shown)
    assert "W1: cascade: head metaresearch decision 'positive' with status 'human_validated:protocol-x'" in text
    assert "W2: cascade: head metaresearch carries categories: a decision is not a category label" in text
    assert "W3: cascade: head metaresearch decided positive without its certificate" in text
    assert not cascade_violations(by_id["W4"]) and not cascade_violations(by_id["W5"])


def test_a_rolling_layer_work_withholds_the_certified_decision_of_a_head_not_validated(planted, openalex_dir, tmp_path):
    resources, t, *_ = planted
    rule = LayerRule(NewestRelease("r1", tmp_path, VERSION, "b"), frozenset())
    entries = [
        {
            "id": "W1",
            "target": "metaresearch",
            "model_version": VERSION,
            "score": 0.97,
            "decision": "positive",
            "teacher": "gemma",
            "precision_target": 0.9,
            "npv_target": 0.9,
            "recall_target": None,
            "bound_level": 0.95,
            "bound_method": "clopper-pearson",
            "calibration_n": 140,
            "calibration_positives": 40,
            "positive_threshold": t.positive.threshold,
            "positive_bound": 0.93,
            "negative_threshold": None,
            "negative_bound": None,
            "negative_vacuous": False,
        }
    ]
    work = real_frame_row(openalex_dir, id="https://openalex.org/W1")
    row = {
        "work": work,
        "labels": [],
        "pred": prediction_row("W1"),
        "machine": machine_row("W1"),
        "lineage": None,
        "cascade": entries,
        "in_release": False,
    }
    record = json.loads(record_row(row, layer=rule)["record_json"])
    assert record["layer"] == ROLLING
    assert (record["cascade"][0]["decision"], record["cascade"][0]["certificate"]) == ("withheld", None)
    section = fastjsonschema.compile(json.loads(SCHEMA_PATH.read_text())["properties"]["cascade"])
    assert section(record["cascade"]) == record["cascade"] and not cascade_violations(record, rolling=True)
    assert "is withheld on a rolling-layer work" in render_work(environment(), record, None, CTX)
    # once the head passed human validation for that model version, the decision stays
    passed = LayerRule(rule.release, frozenset({(VERSION, "metaresearch")}))
    record = json.loads(record_row(row, layer=passed)["record_json"])
    assert record["cascade"][0]["decision"] == "positive" and record["cascade"][0]["certificate"]["lower_bound"] == 0.93
    # a rolling record that showed it without validation fails the check
    assert cascade_violations(record, rolling=True) == [
        f"W1: rolling layer: cascade decision positive on head metaresearch of {VERSION}, "
        "which has not passed human validation"
    ]
    assert not cascade_violations(record, rolling=True, passed=lambda v, h: (v, h) == (VERSION, "metaresearch"))


def test_thresholds_written_before_the_method_column_read_as_clopper_pearson(planted):
    """A cascade_thresholds table of an earlier run has no bound_method: its bounds were Clopper-Pearson's, the only
    bound the asset computed then, and the records say so."""
    resources, *_ = planted
    storage = resources["storage"]
    old = storage.read_table("cascade_thresholds").drop_columns(["bound_method"])
    storage.write_table("cascade_thresholds", old)
    assert _materialize(resources).success
    records = {r["id"]: json.loads(r["record_json"]) for r in storage.read_table("work_records").to_pylist()}
    assert records["W1"]["cascade"][0]["certificate"]["method"] == "clopper-pearson"
    assert records["W2"]["cascade"][0]["certificate"]["method"] == "clopper-pearson"
