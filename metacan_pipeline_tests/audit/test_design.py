"""Tests of metacan_pipeline.audit.design: the machine state of a work, the first-match stratum rule, the draw (pi and
design weights), trained works, heads without decisions and the power note."""

from __future__ import annotations

import dataclasses
import math

import duckdb
import pyarrow as pa
import pytest

from metacan_pipeline.audit.design import (
    DEFAULT_PLANS,
    EXCLUDED_TRAINED,
    draw_audit_sample,
    heads_under_test,
    machine_state_rows,
    power_note,
    stratum_of,
    stratum_plans,
    stratum_sizes,
)
from metacan_pipeline.audit.protocol import AuditProtocol, GateThresholds, HeadUnderTest
from metacan_pipeline.sampling.design import salted_hash
from metacan_pipeline.tables.student import PRED_SCHEMA, THRESHOLDS_SCHEMA
from metacan_pipeline.vocab import BINARY_TARGETS, CATEGORIES
from metacan_pipeline_tests.builders import prediction_row

MV = "metacan-v0-hybrid-000000000000"


META = (HeadUnderTest("metaresearch", True, "passed", 0.1, 3, 0.4, "quota"),)


def make_protocol(heads=META, **changes):
    plans = stratum_plans(
        {"consensus": 0.0, "candidate_only": 0.5, "negative_far": 0.0, "trained_on": 0.0},
        {"consensus": 2, "candidate_only": 1, "negative_far": 3, "trained_on": 1, "french": 40},
        {},
    )
    base = AuditProtocol(
        MV, "consensus", tuple(heads), GateThresholds(), plans, 0.5, "salt-1", "own_stratum", "f", "v1", "x"
    )
    return dataclasses.replace(base, **changes)


def state(wid, **kw):
    row = {
        "id": wid,
        "language": "en",
        "has_abstract": True,
        "route_key": "ca_aff",
        "trained_on": False,
        "any_consensus": False,
        "any_candidate": False,
        "any_near": False,
    }
    return {**row, **kw}


@pytest.mark.parametrize(
    ("flags", "stratum"),
    [
        # every flag at once: trained comes first
        (
            dict(trained_on=True, any_consensus=True, any_candidate=True, any_near=True, language="fr"),
            "trained_on",
        ),
        (dict(any_consensus=True, any_candidate=True, language="fr", has_abstract=False), "consensus"),
        (dict(any_candidate=True, any_near=True, language="fr"), "candidate_only"),
        # the boundary before the groups: a French work near the threshold is drawn at the boundary's rate
        (dict(any_near=True, language="fr", has_abstract=False, route_key="about_ca"), "negative_near"),
        (dict(language="fr", has_abstract=False, route_key="about_ca"), "french"),
        (dict(has_abstract=False, route_key="about_ca"), "no_abstract"),
        (dict(route_key="about_ca"), "about_ca_only"),
        (dict(route_key="about_ca+ca_aff"), "negative_far"),
        (dict(language=None, has_abstract=True), "negative_far"),
    ],
)
def test_the_stratum_is_the_first_rule_that_matches(flags, stratum):
    assert stratum_of(state("W1", **flags)) == stratum


def test_strata_partition_the_rows_and_pi_is_n_h_over_n_h_exactly():
    rows = (
        [state(f"W{i}", any_consensus=True) for i in range(5)]  # N 5, fixed size 2: pi 0.4
        + [state(f"W{10 + i}", any_candidate=True) for i in range(7)]  # N 7, max(1, round(0.5 x 7) = 4): pi 4/7
        + [state(f"W{20 + i}") for i in range(10)]  # negative_far, N 10, fixed 3: pi 0.3
        + [state("W30", language="fr")]  # french, N 1, 40 asked: capped at N, pi 1
    )
    protocol = make_protocol()
    sample = draw_audit_sample(list(reversed(rows)), protocol)
    assert sorted(r["id"] for r in sample) == sorted(r["id"] for r in rows)  # every work once
    assert stratum_sizes(sample) == {
        "consensus": (5, 2),
        "candidate_only": (7, 4),
        "negative_far": (10, 3),
        "french": (1, 1),
    }
    by = {r["id"]: r for r in sample}
    assert by["W0"]["selection_probability"] == 0.4 and by["W0"]["design_weight"] == 2.5
    assert by["W10"]["selection_probability"] == 4 / 7 and by["W10"]["design_weight"] == 7 / 4
    assert by["W20"]["selection_probability"] == 0.3 and by["W20"]["design_weight"] == 1 / 0.3
    assert by["W30"]["selection_probability"] == 1.0 and by["W30"]["in_sample"]
    assert {r["protocol_id"] for r in sample} == {protocol.protocol_id}
    # within a stratum the first n_h by salted hash are drawn
    far = sorted(rows[12:22], key=lambda r: salted_hash(r["id"], "salt-1"))
    assert {r["id"] for r in sample if r["stratum"] == "negative_far" and r["in_sample"]} == {r["id"] for r in far[:3]}
    assert [by[r["id"]]["hash_rank"] for r in far] == list(range(10))
    other = draw_audit_sample(rows, dataclasses.replace(protocol, salt="salt-2"))
    assert {r["id"] for r in other if r["in_sample"]} != {r["id"] for r in sample if r["in_sample"]}
    with pytest.raises(ValueError, match="occur twice"):
        draw_audit_sample(rows + rows[:1], protocol)


def test_trained_works_have_their_own_stratum_or_are_excluded_with_pi_zero():
    rows = [state("W1", trained_on=True, any_consensus=True), state("W2", trained_on=True), state("W3")]
    own = {r["id"]: r for r in draw_audit_sample(rows, make_protocol())}
    assert own["W1"]["stratum"] == own["W2"]["stratum"] == "trained_on" and own["W1"]["trained_on"]
    assert own["W1"]["stratum_sample_size"] == 1 and own["W1"]["selection_probability"] == 0.5
    assert own["W3"]["stratum"] == "negative_far" and not own["W3"]["trained_on"]
    excluded = {r["id"]: r for r in draw_audit_sample(rows, make_protocol(trained_works="exclude"))}
    for wid in ("W1", "W2"):
        r = excluded[wid]
        assert r["stratum"] == EXCLUDED_TRAINED and (r["stratum_size"], r["stratum_sample_size"]) == (2, 0)
        assert r["selection_probability"] == 0.0 and r["design_weight"] is None and not r["in_sample"]
    assert excluded["W3"]["selection_probability"] == 1.0


def _con(preds: list[dict], thresholds: list[dict]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    frame = pa.table(
        {
            "id": [p["id"] for p in preds] + ["W99"],  # W99: a frame work without a prediction
            "language": ["en"] * (len(preds) + 1),
            "has_abstract": [True] * (len(preds) + 1),
            "route_key": ["ca_aff"] * (len(preds) + 1),
        }
    )
    p_table = pa.Table.from_pylist(preds, schema=PRED_SCHEMA)
    t_table = pa.Table.from_pylist(thresholds, schema=THRESHOLDS_SCHEMA)
    for name, table in (("frame", frame), ("predictions", p_table), ("prediction_thresholds", t_table)):
        con.register(f"{name}_arrow", table)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
    return con


def _pred(wid, meta=0.1, open_sci=0.1, topic=0.1, consensus=(), candidate=()):
    p = prediction_row(wid)
    scores = [0.1] * 9
    scores[CATEGORIES.index("metaresearch")] = meta
    scores[CATEGORIES.index("open_science")] = open_sci
    p.update(category_scores_codex=scores, consensus_categories=list(consensus), candidate_categories=list(candidate))
    p["about_ca_topic_score_codex"] = topic
    return p


def test_machine_state_gated_heads_use_their_quota_ungated_heads_the_score_at_their_would_be_quota():
    preds = [
        _pred("W1", meta=0.9, consensus=["metaresearch"], candidate=["metaresearch"]),
        _pred("W2", meta=0.3, candidate=["open_science"]),  # the census teacher's label on an ungated head
        _pred("W3", meta=0.2),  # 0.2 >= (1 - 0.5) x 0.4: near the metaresearch threshold
        _pred("W4", meta=0.19, open_sci=0.6),  # far on metaresearch; near open_science (0.6 >= 0.5 x 0.7)
        _pred("W5", open_sci=0.7),
        _pred("W6", open_sci=0.34, topic=0.9),  # far on open_science (0.34 < 0.35); about_ca_topic adds nothing
        _pred("W7"),
        _pred("W8"),
    ]
    thresholds = [
        {
            "model_version": MV,
            "target": t,
            "gate_passed": False,
            "gate_reason": "codex positives 3 < 20",
            "rate": 0.0,
            "n": 8,
        }
        for t in BINARY_TARGETS
        if t not in ("metaresearch", "open_science")
    ]
    thresholds += [
        {"model_version": MV, "target": "metaresearch", "gate_passed": True, "gate_reason": "passed", "rate": 0.125,
         "n": 8, "k": 1, "threshold": 0.4, "boundary_id": "W1"},
        {"model_version": MV, "target": "open_science", "gate_passed": False, "gate_reason": "codex positives 3 < 20",
         "rate": 0.25, "n": 8},
    ]  # fmt: skip
    con = _con(preds, thresholds)
    default, _ = heads_under_test(con, MV, [])
    assert [h.head for h in default] == ["metaresearch"]  # no other category head has decisions
    heads, notes = heads_under_test(con, MV, ["about_ca_topic", "open_science", "metaresearch"])
    assert heads == (
        HeadUnderTest("metaresearch", True, "passed", 0.125, 1, 0.4, "quota"),
        # k = round(0.25 x 8) = 2: the second highest open_science score, 0.6 (W5 0.7, W4 0.6)
        HeadUnderTest("open_science", False, "codex positives 3 < 20", 0.25, 2, 0.6, "score_quantile"),
        HeadUnderTest("about_ca_topic", False, "codex positives 3 < 20", 0.0, 0, None, "none"),
    )
    assert len(notes) == 2 and "k = 2, threshold 0.6" in notes[0] and "adds nothing to negative_near" in notes[1]
    protocol = make_protocol(heads=heads)
    rows = {r["id"]: r for r in machine_state_rows(con, protocol, trained={"W8"})}
    flags = {wid: (r["any_consensus"], r["any_candidate"], r["any_near"], r["trained_on"]) for wid, r in rows.items()}
    assert flags == {
        "W1": (True, True, True, False),
        "W2": (False, True, True, False),
        "W3": (False, False, True, False),
        "W4": (False, False, True, False),  # open_science 0.6 >= 0.3
        "W5": (False, False, True, False),
        "W6": (False, False, True, False),  # open_science 0.34 >= (1 - 0.5) x 0.6
        "W7": (False, False, False, False),
        "W8": (False, False, False, True),
        "W99": (False, False, False, False),
    }
    assert not rows["W99"]["predicted"] and all(r["predicted"] for w, r in rows.items() if w != "W99")
    strata = {r["id"]: r["stratum"] for r in draw_audit_sample(list(rows.values()), protocol)}
    assert strata == {
        "W1": "consensus",
        "W2": "candidate_only",
        **{w: "negative_near" for w in ("W3", "W4", "W5", "W6")},
        "W7": "negative_far",
        "W8": "trained_on",
        "W99": "negative_far",
    }
    narrow = machine_state_rows(con, make_protocol(heads=heads, near_band=0.1), set())
    assert {r["id"] for r in narrow if r["any_near"]} == {
        "W1",
        "W4",
        "W5",
    }  # >= 0.36 on metaresearch, 0.54 on open_science


def test_power_note_figures_by_hand():
    protocol = make_protocol(
        strata=stratum_plans({}, {}, {"consensus": 0.8, "candidate_only": 0.4, "negative_far": 0.01, "trained_on": 0.5})
    )
    sizes = {"consensus": (100, 50), "candidate_only": (200, 50), "negative_far": (10_000, 100), "trained_on": (40, 20)}
    note = power_note(sizes, protocol)
    rows = {r["stratum"]: r for r in note.strata}
    assert [r["stratum"] for r in note.strata] == ["trained_on", "consensus", "candidate_only", "negative_far"]
    assert rows["consensus"]["expected_coded_positives"] == pytest.approx(40)
    assert rows["consensus"]["rate_half_width"] == pytest.approx(1.959964 * math.sqrt(0.8 * 0.2 / 50 * 0.5), rel=1e-6)
    # trained works apart: 40 + 20 + 1 expected coded positives
    assert note.expected_coded_positives == pytest.approx(61) and note.enough_positives
    # consensus rule: precision over the consensus stratum, a census-free equal-weight stratum: n_eff = n_h
    assert note.precision == pytest.approx(0.8) and note.precision_n_eff == pytest.approx(50)
    assert note.precision_half_width == pytest.approx(1.959964 * math.sqrt(0.16 / 50), rel=1e-6)
    # recall: 80 found of 80 + 80 + 100 expected positives; Kish n over the expected positives' weights
    assert note.recall == pytest.approx(80 / 260)
    n_eff = 260**2 / (100**2 * 0.8 / 50 + 200**2 * 0.4 / 50 + 10_000**2 * 0.01 / 100)
    assert note.recall_n_eff == pytest.approx(n_eff)
    assert note.recall_half_width == pytest.approx(1.959964 * math.sqrt((80 / 260) * (180 / 260) / n_eff), rel=1e-6)
    candidate = power_note(sizes, dataclasses.replace(protocol, decision_rule="candidate"))
    assert candidate.precision == pytest.approx((80 + 80) / 300) and candidate.recall == pytest.approx(160 / 260)
    assert candidate.precision_n_eff == pytest.approx(300**2 / (100**2 / 50 + 200**2 / 50))


def test_plans_take_configured_values_and_keep_defaults_for_strata_not_named():
    plans = {p.name: p for p in stratum_plans({"negative_near": 0.3}, {"consensus": 7}, {"french": 0.02})}
    defaults = {p.name: p for p in DEFAULT_PLANS}
    assert (plans["negative_near"].fraction, plans["consensus"].min_n, plans["french"].expected_positive_rate) == (
        0.3,
        7,
        0.02,
    )
    assert plans["negative_far"] == defaults["negative_far"]
    with pytest.raises(ValueError, match="strata \\['boundary'\\] unknown"):
        stratum_plans({"boundary": 0.5}, {}, {})


def test_the_default_design_oversamples_the_boundary_and_keeps_a_power_note_against_the_gate():
    """DEFAULT_PLANS on a frame of 500 consensus, 3,000 candidate-only, 4,000 near and 20,000 far negatives: the
    boundary strata are drawn at 5%, ten times the far negatives' 0.5%, and the power note gives the expected coded
    positives and the half-widths they buy."""
    rows = (
        [state(f"C{i}", any_consensus=True) for i in range(500)]
        + [state(f"A{i}", any_candidate=True) for i in range(3000)]
        + [state(f"N{i}", any_near=True) for i in range(4000)]
        + [state(f"F{i}") for i in range(20_000)]
    )
    protocol = make_protocol(strata=DEFAULT_PLANS)
    sizes = stratum_sizes(draw_audit_sample(rows, protocol))
    assert sizes == {
        "consensus": (500, 120),
        "candidate_only": (3000, 150),
        "negative_near": (4000, 200),
        "negative_far": (20_000, 100),
    }
    pi = {s: n / big_n for s, (big_n, n) in sizes.items()}
    assert pi["candidate_only"] == pi["negative_near"] == 0.05 == 10 * pi["negative_far"]
    note = power_note(sizes, protocol)
    # expected coded positives: 120 x 0.8 + 150 x 0.4 + 200 x 0.1 + 100 x 0.005
    assert note.expected_coded_positives == pytest.approx(96 + 60 + 20 + 0.5) and note.enough_positives
    assert note.precision == pytest.approx(0.8) and note.precision_n_eff == pytest.approx(120)
    assert note.precision_half_width == pytest.approx(1.959964 * math.sqrt(0.8 * 0.2 / 120), rel=1e-6)
    true_pos = 500 * 0.8 + 3000 * 0.4 + 4000 * 0.1 + 20_000 * 0.005
    assert note.recall == pytest.approx(400 / true_pos)
    rec_den = 500**2 * 0.8 / 120 + 3000**2 * 0.4 / 150 + 4000**2 * 0.1 / 200 + 20_000**2 * 0.005 / 100
    assert note.recall_n_eff == pytest.approx(true_pos**2 / rec_den)
