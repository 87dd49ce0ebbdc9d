"""Tests of metacan_pipeline.audit.protocol.design: the machine state of a work, the first-match stratum rule, the draw
(pi and design weights), trained works, heads without decisions and the power note."""

from __future__ import annotations

import dataclasses
import math

import duckdb
import pyarrow as pa
import pytest

from metacan_pipeline.audit.protocol.classifier import heads_under_test
from metacan_pipeline.audit.protocol.design import (
    DEFAULT_PLANS,
    EXCLUDED_TRAINED,
    draw_audit_sample,
    machine_state_view,
    stratum_plans,
)
from metacan_pipeline.audit.protocol.locked import AuditProtocol, GateThresholds, HeadUnderTest
from metacan_pipeline.audit.protocol.power import power_note
from metacan_pipeline.sampling.design import salted_hash
from metacan_pipeline.tables.student import PRED_SCHEMA, THRESHOLDS_SCHEMA
from metacan_pipeline.vocab import BINARY_TARGETS, CATEGORIES
from metacan_pipeline_tests.builders.audit import audit_draw, audit_sizes
from metacan_pipeline_tests.builders.student import prediction_row

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
    assert [r["stratum"] for r in audit_draw([state("W1", **flags)], make_protocol())] == [stratum]


def test_strata_partition_the_rows_and_pi_is_n_h_over_n_h_exactly():
    rows = (
        [state(f"W{i}", any_consensus=True) for i in range(5)]  # N 5, fixed size 2: pi 0.4
        + [state(f"W{10 + i}", any_candidate=True) for i in range(7)]  # N 7, max(1, round(0.5 x 7) = 4): pi 4/7
        + [state(f"W{20 + i}") for i in range(10)]  # negative_far, N 10, fixed 3: pi 0.3
        + [state("W30", language="fr")]  # french, N 1, 40 asked: capped at N, pi 1
    )
    protocol = make_protocol()
    sample = audit_draw(list(reversed(rows)), protocol)
    assert sorted(r["id"] for r in sample) == sorted(r["id"] for r in rows)  # every work once
    assert audit_sizes(sample) == {
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
    other = audit_draw(rows, dataclasses.replace(protocol, salt="salt-2"))
    assert {r["id"] for r in other if r["in_sample"]} != {r["id"] for r in sample if r["in_sample"]}
    with pytest.raises(ValueError, match="occur twice"):
        audit_draw(rows + rows[:1], protocol)


def test_trained_works_have_their_own_stratum_or_are_excluded_with_pi_zero():
    rows = [state("W1", trained_on=True, any_consensus=True), state("W2", trained_on=True), state("W3")]
    own = {r["id"]: r for r in audit_draw(rows, make_protocol())}
    assert own["W1"]["stratum"] == own["W2"]["stratum"] == "trained_on" and own["W1"]["trained_on"]
    assert own["W1"]["stratum_sample_size"] == 1 and own["W1"]["selection_probability"] == 0.5
    assert own["W3"]["stratum"] == "negative_far" and not own["W3"]["trained_on"]
    excluded = {r["id"]: r for r in audit_draw(rows, make_protocol(trained_works="exclude"))}
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
    machine_state_view(con, protocol, trained={"W8"})
    rows = {r["id"]: r for r in con.execute("SELECT * FROM machine_state").to_arrow_table().to_pylist()}
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
    strata = {r["id"]: r["stratum"] for batch in draw_audit_sample(con, protocol) for r in batch.to_pylist()}
    assert strata == {
        "W1": "consensus",
        "W2": "candidate_only",
        **{w: "negative_near" for w in ("W3", "W4", "W5", "W6")},
        "W7": "negative_far",
        "W8": "trained_on",
        "W99": "negative_far",
    }
    machine_state_view(con, make_protocol(heads=heads, near_band=0.1), set())
    narrow = con.execute("SELECT * FROM machine_state").to_arrow_table().to_pylist()
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
    sizes = audit_sizes(audit_draw(rows, protocol))
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


# ---- the draw in DuckDB against the draw over Python rows ------------------------------------------------------------


def _reference_draw(con, protocol, trained: set[str]) -> list[dict]:
    """The audit sample drawn over Python rows, the reference the DuckDB draw must equal: one Python dict per frame work
    (:func:`machine_state_sql` over the frame), the first-match stratum in Python, and
    :func:`~metacan_pipeline.sampling.design.stratum_design` over each stratum's ids."""
    from collections import defaultdict

    from metacan_pipeline.audit.protocol.design import ABOUT_CA_ONLY_ROUTE, FRENCH, machine_state_sql
    from metacan_pipeline.audit.protocol.locked import STRATA
    from metacan_pipeline.sampling.design import stratum_design, stratum_sample_size

    def stratum_of(row, trained_works):
        if row["trained_on"]:
            return "trained_on" if trained_works == "own_stratum" else EXCLUDED_TRAINED
        if row["any_consensus"]:
            return "consensus"
        if row["any_candidate"]:
            return "candidate_only"
        if row["any_near"]:
            return "negative_near"
        if row.get("language") == FRENCH:
            return "french"
        if not row.get("has_abstract"):
            return "no_abstract"
        if row.get("route_key") == ABOUT_CA_ONLY_ROUTE:
            return "about_ca_only"
        return "negative_far"

    rows = con.execute(machine_state_sql(protocol)).to_arrow_table().to_pylist()
    for r in rows:
        r["trained_on"] = r["id"] in trained
    strata = defaultdict(list)
    for r in rows:
        strata[stratum_of(r, protocol.trained_works)].append(r)
    by_id = {r["id"]: r for r in rows}
    if len(by_id) != len(rows):
        raise ValueError(f"{len(rows) - len(by_id)} frame id(s) occur twice: the strata would not partition the frame")
    out = []
    for stratum in [s for s in (EXCLUDED_TRAINED, *STRATA) if s in strata]:
        ids = [r["id"] for r in strata[stratum]]
        if stratum == EXCLUDED_TRAINED:
            ranked = sorted(ids, key=lambda i: (salted_hash(i, protocol.salt), i))
            design = [
                {"id": wid, "stratum": stratum, "stratum_size": len(ids), "stratum_sample_size": 0, "hash_rank": rank,
                 "selection_probability": 0.0, "design_weight": None, "in_sample": False}
                for rank, wid in enumerate(ranked)
            ]  # fmt: skip
        else:
            plan = protocol.plan(stratum)
            design = stratum_design(
                ids, stratum, stratum_sample_size(len(ids), plan.fraction, plan.min_n), protocol.salt
            )
        for d in design:
            r = by_id[d["id"]]
            d.update(
                protocol_id=protocol.protocol_id,
                trained_on=r["trained_on"],
                language=r.get("language"),
                has_abstract=r.get("has_abstract"),
                route_key=r.get("route_key"),
            )
            out.append(d)
    return out


def _audit_world(storage, n: int = 6000) -> set[str]:
    """A frame of ``n`` works (French one in 9, no abstract one in 5, the about_ca route alone one in 13, a language
    missing one in 50, the last 20 without a prediction) and predictions drawn from a fixed seed: metaresearch scores
    against its quota threshold 0.6 (consensus above it), open_science scores without decisions (a candidate from
    the census teacher one in 40), about_ca_topic scores; the thresholds of a gated metaresearch head, an ungated
    open_science head with a positive rate and an about_ca_topic head without one. Returns the trained works (80 of
    the frame, 5 outside it)."""
    import random

    rng = random.Random(23)
    ids = [f"W{3_000_000 + i}" for i in range(n)]
    storage.write_table(
        "frame",
        pa.table(
            {
                "id": ids,
                "language": [None if i % 50 == 7 else "fr" if i % 9 == 0 else "en" for i in range(n)],
                "has_abstract": [i % 5 != 0 for i in range(n)],
                "route_key": ["about_ca" if i % 13 == 0 else "ca_aff" for i in range(n)],
                "frame_build_id": ["frame-b"] * n,
            }
        ),
    )
    preds = []
    for wid in ids[:-20]:
        meta, open_sci = rng.betavariate(1, 6), rng.betavariate(1, 4)
        p = _pred(
            wid,
            meta=meta,
            open_sci=open_sci,
            topic=rng.random(),
            consensus=["metaresearch"] if meta >= 0.6 else [],
            candidate=(["metaresearch"] if meta >= 0.6 else []) + (["open_science"] if rng.random() < 0.025 else []),
        )
        preds.append(p)
    storage.write_table("predictions", pa.Table.from_pylist(preds, schema=PRED_SCHEMA))
    thresholds = [
        {"model_version": MV, "target": t, "gate_passed": False, "gate_reason": "codex positives 3 < 20",
         "rate": 0.0, "n": len(preds)}
        for t in BINARY_TARGETS if t not in ("metaresearch", "open_science")
    ] + [
        {"model_version": MV, "target": "metaresearch", "gate_passed": True, "gate_reason": "passed", "rate": 0.02,
         "n": len(preds), "k": 120, "threshold": 0.6, "boundary_id": ids[0]},
        {"model_version": MV, "target": "open_science", "gate_passed": False, "gate_reason": "codex positives 3 < 20",
         "rate": 0.05, "n": len(preds)},
    ]  # fmt: skip
    storage.write_table("prediction_thresholds", pa.Table.from_pylist(thresholds, schema=THRESHOLDS_SCHEMA))
    return set(rng.sample(ids, 80)) | {f"W{9_000_000 + i}" for i in range(5)}


@pytest.mark.parametrize("trained_works", ["own_stratum", "exclude"])
def test_the_draw_in_duckdb_is_the_draw_over_python_rows(tmp_path, trained_works):
    """``machine_state_view`` + ``draw_audit_sample`` (strata, ranks and the draw in DuckDB) against the reference draw
    over Python rows (:func:`_reference_draw`) on a 6,000-work frame read from Parquet as the asset reads it: the same
    rows in the same order (stratum, then hash rank), every value equal, the floats to the last bit (pi and the design
    weight are computed in Python per stratum in both); and both refuse a frame that holds an id twice."""
    from metacan_pipeline.audit.protocol.design import scratch
    from metacan_pipeline.storage import MetacanStorage

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    trained = _audit_world(storage)
    with scratch(storage, ["frame", "predictions", "prediction_thresholds"]) as con:
        heads, _ = heads_under_test(con, MV, ["metaresearch", "open_science", "about_ca_topic"])
        plans = stratum_plans({"negative_far": 0.01, "no_abstract": 0.2}, {"french": 30}, {})
        protocol = make_protocol(heads=heads, strata=plans, trained_works=trained_works, salt="metacan-audit-v1")
        expected = _reference_draw(con, protocol, trained)
        machine_state_view(con, protocol, trained)
        got = [r for batch in draw_audit_sample(con, protocol, batch_rows=1000) for r in batch.to_pylist()]
    assert len(got) == len(expected) == 6000
    assert got == expected
    sizes = audit_sizes(got)
    assert len(sizes) == 8 and all(0 < n < big_n for s, (big_n, n) in sizes.items() if s in ("negative_far", "french"))
    assert sum(r["in_sample"] for r in got) == sum(n for n in (v[1] for v in sizes.values()))
    with duckdb.connect() as con:
        twice = pa.Table.from_pylist([state("W1"), state("W2"), state("W1", any_near=True)])
        con.register("machine_state", twice)
        with pytest.raises(ValueError, match="1 frame id\\(s\\) occur twice"):
            next(draw_audit_sample(con, protocol))
