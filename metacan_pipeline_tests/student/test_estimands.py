"""Tests of the protocol's estimands in the ``prevalence`` table (metacan_pipeline.student.estimands): a world of ten
frame works whose routes, labels, design and decisions are planted, every rate and interval worked out by hand."""

import math

import dagster as dg
import pyarrow as pa
import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.census import zero_width_census
from metacan_pipeline.student.estimands import (
    ALT1_STRICT,
    ALT2_BROAD,
    CA_PERSON_NOT_MEASURED,
    ESTIMANDS,
    PRIMARY,
    SECONDARY,
)
from metacan_pipeline.student.prevalence import Z95

#: The world: id -> (ca_aff, ca_fund, ca_venue), the census teacher's label, the sample teacher's label (None: not in
#: the sample), the sample stratum and design weight. A label is (categories, about_ca_system) or "failed".
META, NOT, IP = ["metaresearch"], [], ["insufficient_payload"]
WORLD = {
    "W1": ((1, 0, 0), (META, True), (META, False), ("a", 2.0)),
    "W2": ((1, 1, 0), (META, False), (META, False), ("a", 2.0)),
    "W3": ((0, 1, 0), (META, False), (NOT, False), ("a", 2.0)),
    "W4": ((0, 0, 1), (META, True), (META, True), ("a", 2.0)),
    "W5": ((0, 0, 0), (META, True), (META, True), ("b", 3.0)),  # admitted by about_ca alone
    "W6": ((1, 0, 0), (NOT, False), (NOT, False), ("b", 3.0)),
    "W7": ((1, 0, 0), (IP, False), None, ("b", 3.0)),  # declined: unknown on metaresearch
    "W8": ((0, 1, 0), "failed", None, ("b", 3.0)),
    "W9": ((0, 0, 1), (NOT, False), (META, False), ("b", 3.0)),
    "W10": ((0, 0, 0), (NOT, False), None, ("b", 3.0)),
}


def _label(wid, teacher, label):
    from metacan_pipeline_tests.builders.teachers import label_row

    if label == "failed":
        return {**label_row(wid, teacher, [], status="failed"), "label_id": f"{teacher}-{wid}"}
    categories, system = label
    return {**label_row(wid, teacher, categories), "about_ca_system": system, "label_id": f"{teacher}-{wid}"}


def _write_world(storage: MetacanStorage, routes: bool = True) -> None:
    from metacan_pipeline.tables.sampling import DESIGN_SCHEMA
    from metacan_pipeline.tables.student import PRED_SCHEMA
    from metacan_pipeline.tables.teachers import LABELS_SCHEMA
    from metacan_pipeline_tests.builders.student import prediction_row, record_qualification

    frame = [{"id": w} for w in WORLD]
    if routes:
        frame = [
            {"id": w, "ca_aff": bool(r[0]), "ca_fund": bool(r[1]), "ca_venue": bool(r[2])}
            for w, (r, *_) in WORLD.items()
        ]
    storage.write_table("frame", pa.Table.from_pylist(frame))
    design = [
        {"id": w, "stratum": s, "design_weight": wt, "in_sample": codex is not None}
        for w, (_, _, codex, (s, wt)) in WORLD.items()
    ]
    storage.write_table("sample_design", pa.Table.from_pylist(design, schema=DESIGN_SCHEMA))
    gemma = [_label(w, "gemma", g) for w, (_, g, _, _) in WORLD.items()]
    codex = [_label(w, "codex", c) for w, (_, _, c, _) in WORLD.items() if c is not None]
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(gemma, schema=LABELS_SCHEMA))
    storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    # decisions: candidate metaresearch on W1, W3, W4, W5, W9, about_ca_system candidate on W4 and W9; consensus on W1
    preds = []
    for w in WORLD:
        p = prediction_row(w)
        p["candidate_categories"] = META if w in ("W1", "W3", "W4", "W5", "W9") else []
        p["about_ca_system_candidate"] = w in ("W4", "W9")
        p["consensus_categories"] = META if w == "W1" else []
        p["about_ca_system_consensus"] = w == "W1"
        preds.append(p)
    storage.write_table("predictions", pa.Table.from_pylist(preds, schema=PRED_SCHEMA))
    record_qualification(storage, "gemma")
    record_qualification(storage, "codex")


def _materialize(storage: MetacanStorage) -> dict:
    from metacan_pipeline.student.assets import prevalence

    result = dg.materialize([prevalence], resources={"storage": storage})
    assert result.success
    return {
        (r["estimand"], r["method"], r["teacher"]): r
        for r in storage.read_table("prevalence").to_pylist()
        if r["category"] == "metaresearch"
    }


def test_each_estimand_of_the_census_and_the_sample_teacher_by_hand(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path))
    _write_world(storage)
    rows = _materialize(storage)
    rate = lambda e, t: rows[(e, "design_weighted_teacher_rate", t)]  # noqa: E731

    # gemma, a census: W7 (insufficient_payload) and W8 (failed) have no metaresearch value, 8 works are counted.
    # metaresearch: W1-W5; primary (aff or fund): W1, W2, W3; CA-AFF: W1, W2; CA-FUND: W2, W3; secondary (about the
    # system): W1, W4, W5; ALT-2 adds W4 (venue); W5 (about_ca alone) is in no route estimand.
    expected = {"category": 5, "primary": 3, "primary_ca_aff": 2, "primary_ca_fund": 2, "secondary": 3}
    expected |= {"alt1_strict": 2, "alt2_broad": 4}
    for estimand, positives in expected.items():
        r = rate(estimand, "gemma")
        assert (r["n"], r["n_weighted"], r["rate"]) == (8, 8.0, positives / 8), estimand
        assert r["se"] == 0 and r["ci_low"] == r["ci_high"] == positives / 8  # a census: no sampling error
        assert zero_width_census(r)  # explained wherever it is shown, ALT-2's note after the design too
        assert r["population"] == "frame" and r["category"] == "metaresearch"

    # codex, stratum a (W1-W4, weight 2, N_a = 8, f = 1/2) and b (W5, W6, W9, weight 3, N_b = 9, f = 1/3): N = 17.
    # primary: y = 1, 1, 0, 0 | 0, 0, 0 -> p = 4/17. u = w (y - p) / N: a -> 26/289, 26/289, -8/289, -8/289 (mean
    # 9/289, squared deviations 4 x (17/289)^2 = 4/289); b -> all -12/289 (no deviation).
    # var = (1 - 1/2) * 4/3 * 4/289 = 8/867.
    primary = rate("primary", "codex")
    se = math.sqrt(8 / 867)
    assert (primary["n"], primary["n_weighted"], primary["strata_single"]) == (7, 17.0, 0)
    assert primary["rate"] == pytest.approx(4 / 17) and primary["se"] == pytest.approx(se)
    assert primary["ci_low"] == pytest.approx(4 / 17 - Z95 * se) and primary["ci_high"] == pytest.approx(
        4 / 17 + Z95 * se
    )
    assert primary["design"] == "sample_design"
    # ALT-2: W1, W2, W4 (venue) | W9 (venue) -> p = (6 + 3) / 17; a: y = 1, 1, 0, 1, b: y = 0, 0, 1.
    alt2 = rate("alt2_broad", "codex")
    assert alt2["rate"] == pytest.approx(9 / 17) and alt2["design"] == f"sample_design; {CA_PERSON_NOT_MEASURED}"
    p = 9 / 17
    ua = [2 * (y - p) / 17 for y in (1, 1, 0, 1)]
    ub = [3 * (y - p) / 17 for y in (0, 0, 1)]
    var = sum(
        (1 - n / big) * n / (n - 1) * sum((x - sum(u) / n) ** 2 for x in u) for u, n, big in ((ua, 4, 8), (ub, 3, 9))
    )
    assert alt2["se"] == pytest.approx(math.sqrt(var))
    # secondary: W4 | W5 (about the system, metaresearch): (2 + 3) / 17; CA-FUND: W2 only: 2 / 17
    assert rate("secondary", "codex")["rate"] == pytest.approx(5 / 17)
    assert rate("primary_ca_fund", "codex")["rate"] == pytest.approx(2 / 17)
    # ALT-1 is by definition the CA-AFF component: the same rows but for the estimand
    for t in ("gemma", "codex"):
        a, b = rate("alt1_strict", t), rate("primary_ca_aff", t)
        assert {k: v for k, v in a.items() if k != "estimand"} == {k: v for k, v in b.items() if k != "estimand"}

    # the screener-swap range of each estimand spans the two teachers' rates
    swap = rows[("primary", "screener_swap_range", None)]
    assert (swap["ci_low"], swap["ci_high"]) == pytest.approx((4 / 17, 3 / 8)) and swap["n"] == 2
    assert rows[("secondary", "screener_swap_range", None)]["ci_low"] == pytest.approx(5 / 17)

    # classify and count over the 10 frame works: candidate metaresearch on W1, W3, W4, W5, W9 -> primary W1, W3;
    # CA-AFF W1; CA-FUND W3; secondary (about_ca_system candidate too) W4, W9; ALT-2 W1, W3, W4, W9.
    cc = {"primary": 2, "primary_ca_aff": 1, "primary_ca_fund": 1, "secondary": 2, "alt1_strict": 1, "alt2_broad": 4}
    for estimand, positives in cc.items():
        r = rows[(estimand, "classify_and_count", None)]
        assert (r["n"], r["rate"]) == (10, positives / 10), estimand
    consensus = {e.name: rows[(e.name, "classify_and_count_consensus", None)]["rate"] for e in ESTIMANDS}
    assert consensus == {"primary": 0.1, "primary_ca_aff": 0.1, "primary_ca_fund": 0.0, "secondary": 0.1} | {
        "alt1_strict": 0.1,
        "alt2_broad": 0.1,
    }
    assert rows[("alt2_broad", "classify_and_count", None)]["design"].endswith(CA_PERSON_NOT_MEASURED)


def test_a_frame_without_routes_gives_rows_that_say_why_they_are_not_computed(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path))
    _write_world(storage, routes=False)
    rows = _materialize(storage)
    assert rows[("category", "design_weighted_teacher_rate", "gemma")]["rate"] == 5 / 8  # the category rates stay
    for e in ESTIMANDS:
        for key in ((e.name, "design_weighted_teacher_rate", "gemma"), (e.name, "classify_and_count", None)):
            r = rows[key]
            assert r["rate"] is None and r["design"].startswith("not computed: the frame has no route column ca_aff")
        assert (e.name, "screener_swap_range", None) not in rows


def test_membership_reads_every_head_and_any_route():
    heads = {"metaresearch": True, "about_ca_system": None}
    assert PRIMARY.member(heads, {"ca_fund": True}) is True
    assert PRIMARY.member(heads, {"ca_venue": True}) is False
    assert ALT2_BROAD.member(heads, {"ca_venue": True}) is True
    assert SECONDARY.member(heads, {}) is None  # about_ca_system unknown: left out, never a negative
    assert SECONDARY.member({"metaresearch": False, "about_ca_system": None}, {}) is None
    assert ALT1_STRICT.member({"metaresearch": None}, {"ca_aff": True}) is None
    assert [e.name for e in ESTIMANDS] == [
        "primary",
        "primary_ca_aff",
        "primary_ca_fund",
        "secondary",
        "alt1_strict",
        "alt2_broad",
    ]
