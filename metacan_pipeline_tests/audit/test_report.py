"""Tests of metacan_pipeline.audit.estimates.report: the five long tables from one simulated audit, their agreement with
the estimators they are built from, the minimum-n rule in small groups, and the inputs it refuses."""

import numpy as np
import pandas as pd
import pytest

from metacan_pipeline.audit.estimates import design_based as E
from metacan_pipeline.audit.estimates.report import (
    AGREEMENT_COLUMNS,
    CONFUSION_COLUMNS,
    ERROR_RATE_COLUMNS,
    GATE_COLUMNS,
    PREVALENCE_COLUMNS,
    validation_report,
)
from metacan_pipeline_tests.audit.simulated import synthetic_audit

HEAD = "metaresearch"
CLASSIFIER = "classifier:metacan-v1-hybrid-0123456789ab:consensus"
TEACHER = "teacher:gemma"


def _rate(rates: pd.DataFrame, system: str, metric: str, group_by: str = "all") -> pd.Series:
    rows = rates.loc[(rates["system"] == system) & (rates["metric"] == metric) & (rates["group_by"] == group_by)]
    assert len(rows) == 1 or group_by != "all"
    return rows.iloc[0]


@pytest.fixture(scope="module")
def audit_inputs() -> dict:
    """One stratified draw of the synthetic audit as the report's input tables."""
    audit = synthetic_audit(seed=16)
    take = audit.draws(1, seed=5)[0]
    rng = np.random.default_rng(6)
    design = audit.design
    n = take.size
    ids = [f"W{i}" for i in take]
    sample = pd.DataFrame(
        {
            "id": ids,
            "stratum": design.stratum,
            "design_weight": design.weight,
            "stratum_size": design.stratum_size.astype(int),
            "stratum_sample_size": design.stratum_sample_size.astype(int),
            "language": rng.choice(["en", "fr"], n, p=[0.8, 0.2]),
            "route_key": rng.choice(["ca_aff", "ca_aff+about_ca", "about_ca"], n),
            "genre": rng.choice(["empirical", "review", "dataset"], n, p=[0.8, 0.17, 0.03]),
            "has_abstract": rng.random(n) < 0.7,
        }
    )
    code = audit.code[take]
    # of the works without a code, every other one was coded unresolved; the rest are not coded yet
    missing = np.flatnonzero(np.isnan(code))
    marked = set(missing[::2])
    human = pd.DataFrame(
        {
            "id": ids,
            "head": HEAD,
            "code": ["unresolved" if i in marked else None if np.isnan(c) else int(c) for i, c in enumerate(code)],
        }
    )
    human = human.drop(index=missing[1::4])  # a work never coded has no row at all
    teacher = audit.teacher[take].astype(int)
    decisions = pd.concat(
        [
            pd.DataFrame(
                {"system": CLASSIFIER, "id": ids, "head": HEAD, "decision": audit.classifier[take].astype(int)}
            ),
            # the teacher failed on the first two sampled works: no decision, not a negative
            pd.DataFrame({"system": TEACHER, "id": ids[2:], "head": HEAD, "decision": teacher[2:]}),
            pd.DataFrame({"system": TEACHER, "id": ["W-not-sampled"], "head": HEAD, "decision": [1]}),
        ]
    )
    means = pd.DataFrame(
        {"system": [CLASSIFIER, TEACHER], "head": HEAD, "frame_mean": [audit.classifier.mean(), audit.teacher.mean()]}
    )
    first = np.where(rng.random(n) < 0.93, np.nan_to_num(code), 1 - np.nan_to_num(code)).astype(int).astype(object)
    second = np.where(rng.random(n) < 0.9, np.nan_to_num(code), 1 - np.nan_to_num(code)).astype(int).astype(object)
    first[np.isnan(code)] = "unresolved"
    coders = pd.DataFrame({"id": ids, "head": HEAD, "first": first, "second": second})
    report = validation_report(sample, human, decisions, means, coders)
    return {
        "sample": sample,
        "code": code,
        "take": take,
        "audit": audit,
        "report": report,
        "human": human,
        "unresolved": len(marked),
        "not_yet_coded": len(missing) - len(marked),
    }


def test_every_table_has_its_declared_columns(audit_inputs):
    report = audit_inputs["report"]
    for table, columns in (
        (report.error_rates, ERROR_RATE_COLUMNS),
        (report.confusion, CONFUSION_COLUMNS),
        (report.prevalence, PREVALENCE_COLUMNS),
        (report.agreement, AGREEMENT_COLUMNS),
        (report.gate, GATE_COLUMNS),
    ):
        assert tuple(table.columns) == columns and len(table) > 0


def test_the_overall_rates_are_the_estimators_and_unresolved_codes_are_counted_apart_from_uncoded_works(audit_inputs):
    report, audit, take = audit_inputs["report"], audit_inputs["audit"], audit_inputs["take"]
    row = _rate(report.error_rates, CLASSIFIER, "precision")
    expected = E.precision(audit_inputs["code"], audit.classifier[take], audit.design)
    assert (row["value"], row["lower"], row["upper"], row["n"]) == (
        pytest.approx(expected.value),
        pytest.approx(expected.lower),
        pytest.approx(expected.upper),
        expected.n,
    )
    # the works coded unresolved, and apart the works not coded yet (no code, or no row)
    assert row["unresolved"] == audit_inputs["unresolved"] > 0
    assert row["not_yet_coded"] == audit_inputs["not_yet_coded"] > 0
    assert row["unresolved"] + row["not_yet_coded"] == int(np.isnan(audit_inputs["code"]).sum())
    human = audit_inputs["report"].prevalence.set_index(["head", "method"]).loc[(HEAD, "human")]
    assert (human["unresolved"], human["not_yet_coded"]) == (audit_inputs["unresolved"], audit_inputs["not_yet_coded"])
    teacher = _rate(report.error_rates, TEACHER, "recall")
    assert "2 sampled works without a decision left out" in teacher["note"]


def test_differential_error_is_reported_per_group_and_small_groups_are_withheld(audit_inputs):
    rates = audit_inputs["report"].error_rates
    groups = rates.loc[(rates["system"] == CLASSIFIER) & (rates["metric"] == "precision")]
    assert set(groups["group_by"]) == {"all", "language", "route_key", "genre", "has_abstract"}
    assert set(groups.loc[groups["group_by"] == "has_abstract", "group"]) == {"true", "false"}
    dataset = groups.loc[(groups["group_by"] == "genre") & (groups["group"] == "dataset")].iloc[0]
    assert dataset["value"] is None or pd.isna(dataset["value"])
    assert dataset["note"] == f"fewer than 30 coded cases (n={dataset['n']}): not reported"


def test_the_confusion_matrix_counts_every_resolved_decided_work_once(audit_inputs):
    cells = audit_inputs["report"].confusion
    overall = cells.loc[(cells["system"] == CLASSIFIER) & (cells["group_by"] == "all")].set_index("cell")
    resolved = int((~np.isnan(audit_inputs["code"])).sum())
    assert overall["count"].sum() == resolved
    weights = audit_inputs["sample"]["design_weight"].to_numpy()
    assert overall["weighted"].sum() == pytest.approx(weights[~np.isnan(audit_inputs["code"])].sum())


def test_prevalence_gives_the_human_estimate_and_one_ppi_estimate_per_system(audit_inputs):
    prev = audit_inputs["report"].prevalence
    prev = prev.loc[prev["head"] == HEAD].set_index("method")
    assert list(prev.index) == ["human", f"ppi:{CLASSIFIER}", f"ppi:{TEACHER}"]
    human = prev.loc["human"]
    assert human["lower"] < human["value"] < human["upper"] and pd.isna(human["width_ratio"])
    assert 0 < prev.loc[f"ppi:{TEACHER}", "width_ratio"] < 1.2
    assert prev.loc[f"ppi:{TEACHER}", "n"] == human["n"] - 2  # the two works without a teacher decision


def test_agreement_and_gate_rows(audit_inputs):
    report = audit_inputs["report"]
    every = report.agreement
    agreement = every.loc[every["stratum"] == "all"]
    assert list(zip(agreement["statistic"], agreement["weighting"], strict=True)) == [
        ("cohen_kappa", "raw"),
        ("cohen_kappa", "design"),
        ("krippendorff_alpha", "raw"),
        ("krippendorff_alpha", "design"),
    ]
    assert (agreement["n"] == len(audit_inputs["sample"])).all() and agreement["value"].between(0, 1).all()
    assert (agreement["lower"] < agreement["value"]).all() and (agreement["value"] < agreement["upper"]).all()
    # then one kappa and one alpha per stratum, over its works coded twice
    sample = audit_inputs["sample"]
    per = every.loc[every["stratum"] != "all"]
    assert sorted(set(per["stratum"])) == sorted(set(sample["stratum"].astype(str)))
    assert per.groupby("stratum")["n"].first().to_dict() == sample["stratum"].astype(str).value_counts().to_dict()
    assert set(per["weighting"]) == {"raw"} and len(per) == 2 * sample["stratum"].nunique()
    gate = report.gate.set_index("system")
    recall = _rate(report.error_rates, CLASSIFIER, "recall")
    assert gate.loc[CLASSIFIER, "coded_positives"] == recall["n"]
    assert gate.loc[CLASSIFIER, "n_effective"] == pytest.approx(recall["n_effective"])
    assert gate.loc[CLASSIFIER, "n_effective"] < recall["n"]  # positives of unequal weights
    design = agreement.loc[agreement["weighting"] == "design", "n_effective"]
    weights = audit_inputs["sample"]["design_weight"]
    assert np.allclose(design, weights.sum() ** 2 / (weights**2).sum(), rtol=1e-12)
    assert (agreement.loc[agreement["weighting"] == "raw", "n_effective"] == len(weights)).all()
    assert gate.loc[CLASSIFIER, "reason"].endswith(": fails")  # frame recall 0.52: the stratifying classifier fails
    assert bool(gate.loc[CLASSIFIER, "judged"])


def test_inputs_the_report_cannot_use_are_refused_naming_the_work(audit_inputs):
    sample, human = audit_inputs["sample"], audit_inputs["human"]
    empty = pd.DataFrame(columns=["system", "id", "head", "decision"])
    means = pd.DataFrame(columns=["system", "head", "frame_mean"])
    outside = pd.concat([human, pd.DataFrame({"id": ["W-x"], "head": [HEAD], "code": [1]})])
    with pytest.raises(ValueError, match="work 'W-x' has a human code but is not in the audit sample"):
        validation_report(sample, outside, empty, means)
    with pytest.raises(ValueError, match="human_codes has two rows for id="):
        validation_report(sample, pd.concat([human, human.iloc[:1]]), empty, means)
    bad = human.copy()
    bad.loc[0, "code"] = 2
    with pytest.raises(ValueError, match=f"human code of work '{human.loc[0, 'id']}' is 2"):
        validation_report(sample, bad, empty, means)
    with pytest.raises(KeyError, match="sample has no column"):
        validation_report(sample.drop(columns="genre"), human, empty, means)


def test_an_empty_audit_sample_gives_an_empty_report_and_a_code_outside_it_is_refused(audit_inputs):
    """Every drawn work trained the classifier (so none is coded): the report has its columns and no row, and no
    gate row; a human code then names a work outside the sample."""
    sample, human = audit_inputs["sample"], audit_inputs["human"]
    decisions = pd.DataFrame(columns=["system", "id", "head", "decision"])
    means = pd.DataFrame({"system": [CLASSIFIER], "head": HEAD, "frame_mean": [0.1]})
    report = validation_report(sample.iloc[:0], human.iloc[:0], decisions, means)
    for table, columns in (
        (report.error_rates, ERROR_RATE_COLUMNS),
        (report.confusion, CONFUSION_COLUMNS),
        (report.prevalence, PREVALENCE_COLUMNS),
        (report.agreement, AGREEMENT_COLUMNS),
        (report.gate, GATE_COLUMNS),
    ):
        assert tuple(table.columns) == columns and table.empty
    with pytest.raises(
        ValueError, match=rf"work {human['id'].iloc[0]!r} has a human code but the audit sample is empty"
    ):
        validation_report(sample.iloc[:0], human.iloc[:1], decisions, means)


def test_a_bias_against_french_or_affiliation_blind_works_is_visible_with_intervals(audit_inputs):
    """Two systems that find every positive but one group's: one misses 80% of the French positives, the other every
    positive only the lexicon routed (route about_ca). Recall by language, and by route, separates the groups with
    intervals apart, and each group's figure is the estimator's on that group alone."""
    sample, code = audit_inputs["sample"], audit_inputs["code"]
    positive = np.nan_to_num(code) == 1
    french = (sample["language"] == "fr").to_numpy()
    blind = (sample["route_key"] == "about_ca").to_numpy()
    misses = {"french": french & (np.random.default_rng(7).random(len(sample)) < 0.8), "blind": blind}
    decisions = pd.concat(
        pd.DataFrame({"system": f"classifier:{name}:consensus", "id": sample["id"], "head": HEAD,
                      "decision": (positive & ~missed).astype(int)})
        for name, missed in misses.items()
    )  # fmt: skip
    means = pd.DataFrame(columns=["system", "head", "frame_mean"])
    report = validation_report(sample, audit_inputs["human"], decisions, means, min_n=10)
    rates = report.error_rates
    recall = rates.loc[rates["metric"] == "recall"].set_index(["system", "group_by", "group"])
    fr = recall.loc[("classifier:french:consensus", "language", "fr")]
    en = recall.loc[("classifier:french:consensus", "language", "en")]
    assert fr["n"] >= 10 and en["n"] >= 10 and en["value"] == 1.0
    assert fr["upper"] < en["lower"], (fr.to_dict(), en.to_dict())
    about = recall.loc[("classifier:blind:consensus", "route_key", "about_ca")]
    ca_aff = recall.loc[("classifier:blind:consensus", "route_key", "ca_aff")]
    assert about["value"] == 0.0 and ca_aff["value"] == 1.0 and about["upper"] < ca_aff["lower"]
    design = E.Design.from_frame(sample)
    d = (positive & ~misses["french"]).astype(float)
    expected = E.recall(code, d, design, within=french, min_n=10)
    assert (fr["value"], fr["lower"], fr["upper"], fr["n"]) == (
        pytest.approx(expected.value),
        pytest.approx(expected.lower),
        pytest.approx(expected.upper),
        expected.n,
    )


def test_each_estimand_has_its_human_and_ppi_prevalence_from_the_codes_and_the_sampled_routes(audit_inputs):
    """The estimand rows against the estimators on vectors built here: a work is in the primary estimand (and its
    CA-AFF component, ALT-1 and ALT-2) when its code is 1 and its ``route_key`` holds ``ca_aff``; none holds ca_fund
    or ca_venue, so CA-FUND is empty; the secondary estimand needs about_ca_system codes, which this audit has not."""
    from metacan_pipeline.audit.estimates.ppi import ppi_mean

    sample, human = audit_inputs["sample"], audit_inputs["human"]
    report = audit_inputs["report"]
    design = E.Design.from_frame(sample)
    code = {w: c for w, c in zip(human["id"], human["code"], strict=True)}
    y = np.array([np.nan if code.get(w) in (None, "unresolved") else float(code[w]) for w in sample["id"]])
    aff = np.array(["ca_aff" in k.split("+") for k in sample["route_key"]])
    y_primary = np.where(np.isnan(y), np.nan, (y == 1) & aff)
    prev = report.prevalence.set_index(["head", "method"])
    assert sorted({h for h, _ in prev.index}) == [
        "estimand:alt1_strict",
        "estimand:alt2_broad",
        "estimand:primary",
        "estimand:primary_ca_aff",
        "estimand:primary_ca_fund",
        HEAD,
    ]
    want = E.prevalence(y_primary, design)
    for name in ("primary", "primary_ca_aff", "alt1_strict", "alt2_broad"):
        row = prev.loc[(f"estimand:{name}", "human")]
        assert (row["value"], row["lower"], row["upper"], row["n"]) == pytest.approx(
            (want.value, want.lower, want.upper, want.n)
        )
        assert row["unresolved"] == audit_inputs["unresolved"]
    assert 0 < want.value < prev.loc[(HEAD, "human"), "value"]
    assert prev.loc[("estimand:primary_ca_fund", "human"), "value"] == 0
    # no frame mean of an estimand: no PPI row; with one, the PPI estimate of the decisions on the estimand
    assert ("estimand:primary", f"ppi:{CLASSIFIER}") not in prev.index
    audit, take = audit_inputs["audit"], audit_inputs["take"]
    means = pd.DataFrame(
        {
            "system": [CLASSIFIER, CLASSIFIER],
            "head": [HEAD, "estimand:primary"],
            "frame_mean": [audit.classifier.mean(), 0.6 * audit.classifier.mean()],
        }
    )
    decisions = pd.DataFrame(
        {"system": CLASSIFIER, "id": sample["id"], "head": HEAD, "decision": audit.classifier[take].astype(int)}
    )
    again = validation_report(sample, human, decisions, means).prevalence.set_index(["head", "method"])
    d_primary = (audit.classifier[take] == 1) & aff
    ppi = ppi_mean(y_primary, d_primary.astype(float), design, 0.6 * audit.classifier.mean()).ppi
    row = again.loc[("estimand:primary", f"ppi:{CLASSIFIER}")]
    assert (row["value"], row["lower"], row["upper"]) == pytest.approx((ppi.value, ppi.lower, ppi.upper))
    assert ("estimand:alt2_broad", f"ppi:{CLASSIFIER}") not in again.index  # its frame mean is not given
