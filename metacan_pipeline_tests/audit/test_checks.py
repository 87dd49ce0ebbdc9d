"""Tests of metacan_pipeline.audit.checks: the partition check of the audit sample, on a sound sample and on every way
of breaking one."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from metacan_pipeline.audit.checks import sample_problems
from metacan_pipeline.audit.protocol.design import stratum_plans
from metacan_pipeline.audit.protocol.locked import AuditProtocol, GateThresholds, HeadUnderTest
from metacan_pipeline.tables.audit import AUDIT_SAMPLE_SCHEMA
from metacan_pipeline_tests.builders.audit import audit_draw

HEADS = (HeadUnderTest("metaresearch", True, "passed", 0.1, 3, 0.4, "quota"),)


def _protocol(trained_works="own_stratum") -> AuditProtocol:
    plans = stratum_plans({}, {"consensus": 2, "negative_far": 3, "trained_on": 1}, {})
    return AuditProtocol("mv", "consensus", HEADS, GateThresholds(), plans, 0.5, "s", trained_works, "f", "v1", "x")


def _rows() -> list[dict]:
    return [
        {
            "id": f"W{i}",
            "language": "fr" if i == 9 else "en",
            "has_abstract": True,
            "route_key": "ca_aff",
            "trained_on": i in (10, 11),
            "any_consensus": i < 4,
            "any_candidate": i < 4,
            "any_near": False,
        }
        for i in range(12)
    ]


def _con(sample: list[dict], frame_ids: list[str]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("s", pa.Table.from_pylist(sample, schema=AUDIT_SAMPLE_SCHEMA))
    con.register("f", pa.table({"id": frame_ids}))
    con.execute("CREATE TABLE audit_sample AS SELECT * FROM s")
    con.execute("CREATE TABLE frame AS SELECT * FROM f")
    return con


def _problems(sample, protocol, frame_ids=None) -> dict[str, int]:
    frame_ids = frame_ids if frame_ids is not None else [r["id"] for r in _rows()]
    return {k: v for k, v in sample_problems(_con(sample, frame_ids), protocol.protocol_id).items() if v}


@pytest.mark.parametrize("trained_works", ["own_stratum", "exclude"])
def test_a_drawn_sample_passes(trained_works):
    protocol = _protocol(trained_works)
    sample = audit_draw(_rows(), protocol)
    other = audit_draw(_rows()[:3], _protocol("exclude" if trained_works == "own_stratum" else "own_stratum"))
    # another protocol's rows in the table are not this protocol's business
    assert _problems(sample + other, protocol) == {}
    assert len(sample_problems(_con(sample, []), protocol.protocol_id)) == 11  # every count is reported


def test_every_way_of_breaking_the_sample_is_counted():
    protocol = _protocol()
    sample = audit_draw(_rows(), protocol)
    far = [i for i, r in enumerate(sample) if r["stratum"] == "negative_far"]
    drawn_far = next(i for i in far if sample[i]["in_sample"])

    dropped = [r for i, r in enumerate(sample) if i != drawn_far]
    assert _problems(dropped, protocol) == {
        "frame_works_missing": 1,
        "strata_whose_size_is_not_their_rows": 1,
        "strata_whose_draws_are_not_n_h": 1,
    }

    zero_pi = [dict(r) for r in sample]
    zero_pi[far[0]].update(selection_probability=0.0)
    assert _problems(zero_pi, protocol) == {"rows_with_pi_not_positive": 1}

    nan_pi = [dict(r) for r in sample]
    nan_pi[far[0]].update(selection_probability=float("nan"))
    assert _problems(nan_pi, protocol)["rows_with_pi_not_positive"] == 1

    bad_weight = [dict(r) for r in sample]
    bad_weight[far[0]].update(design_weight=bad_weight[far[0]]["design_weight"] + 1e-6)
    assert _problems(bad_weight, protocol) == {"rows_with_weight_not_one_over_pi": 1}

    flipped = [dict(r) for r in sample]
    flipped[drawn_far].update(in_sample=False)
    assert _problems(flipped, protocol) == {"strata_whose_draws_are_not_n_h": 1}

    twice = sample + [dict(sample[0])]  # a drawn trained work (n_h 1 of 2) given a second row
    assert sample[0]["in_sample"] and _problems(twice, protocol) == {
        "ids_more_than_once": 1,
        "strata_whose_size_is_not_their_rows": 1,
        "strata_whose_draws_are_not_n_h": 1,
    }

    outside = sample + [{**sample[0], "id": "W999"}]
    assert _problems(outside, protocol)["rows_not_in_frame"] == 1

    assert _problems(sample, protocol, [r["id"] for r in _rows()] + ["W500"]) == {
        "frame_works_missing": 1,
        "stratum_sizes_minus_frame_size": -1,
    }

    wrong_pi = [dict(r) for r in sample]
    for i in far:  # a consistent but wrong pi: weight 1 / pi, yet pi is not n_h / N_h
        wrong_pi[i].update(selection_probability=0.5, design_weight=2.0)
    assert _problems(wrong_pi, protocol) == {"rows_with_pi_not_n_h_over_N_h": len(far)}

    assert _problems([], protocol) == {"frame_works_missing": 12, "stratum_sizes_minus_frame_size": -12}


def test_an_excluded_trained_work_must_stay_out_of_the_sample():
    protocol = _protocol("exclude")
    sample = audit_draw(_rows(), protocol)
    drawn = [dict(r) for r in sample]
    i = next(k for k, r in enumerate(drawn) if r["stratum"] == "excluded:trained_on")
    drawn[i].update(in_sample=True, selection_probability=0.5, design_weight=2.0)
    assert _problems(drawn, protocol) == {"excluded_rows_not_excluded": 1, "strata_whose_draws_are_not_n_h": 1}
