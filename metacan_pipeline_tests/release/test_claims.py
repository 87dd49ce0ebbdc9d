"""Tests of what the map may claim at graph level (metacan_pipeline/release/claims.py, the ``<teacher>_qualified``
checks of metacan_pipeline/teachers/checks.py): warning checks that fail while a role teacher is not qualified or a
deciding head has not passed human validation, through Dagster's in-process executor on a real DuckDB catalog; the
direct labels' qualification entry; and the census interval of zero width explained where it is shown."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pyarrow as pa

from metacan_pipeline.cli.run_summary import prevalence_lines
from metacan_pipeline.publish.assets import work_records
from metacan_pipeline.release.claims import CLAIM_CHECKS, claims_result
from metacan_pipeline.resources import OpenAlexFiles
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.assets import predictions, prevalence, student_heads
from metacan_pipeline.student.checks import PREDICTION_CHECKS
from metacan_pipeline.student.prevalence import CENSUS_NO_SAMPLING_ERROR
from metacan_pipeline.teachers.assets import census_direct_labels
from metacan_pipeline.teachers.calling.server import EmbeddedLlamaServer
from metacan_pipeline.teachers.checks import TEACHER_CHECKS
from metacan_pipeline_tests.builders.common import OPENALEX, check_evaluation, metadata
from metacan_pipeline_tests.builders.site import site_world
from metacan_pipeline_tests.builders.student import record_qualification, write_inputs
from metacan_pipeline_tests.stub_teacher.process import run_stub

CHECKS = {next(iter(c.check_keys)).name: c for c in [*TEACHER_CHECKS, *CLAIM_CHECKS]}
PROTOCOL = "protocol-000000000001"


def _label_gemma(storage: MetacanStorage, url: str) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [census_direct_labels, CHECKS["gemma_qualified"]],
        resources={
            "storage": storage,
            "openalex": OpenAlexFiles(input_dirs=[str(OPENALEX)]),
            "llm_server": EmbeddedLlamaServer(log_dir=str(storage.root)),
        },
        run_config={"ops": {"direct_labels_gemma": {"config": {"base_url": url, "concurrency": 1}}}},
        instance=dg.DagsterInstance.ephemeral(),
    )


def _values(evaluation) -> dict:
    return {k: v.value for k, v in evaluation.metadata.items()}


def test_direct_labels_warn_while_their_teacher_is_not_qualified_and_say_its_qualification(tmp_path, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=12)
    record_qualification(storage, "gemma", agree=False)
    with run_stub() as (url, _):
        failing = _label_gemma(storage, url)
        assert failing.success  # a warning never fails the run
        check = check_evaluation(failing, "gemma_qualified")
        assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
        meta = _values(check)
        assert meta["teacher"] == "gemma" and meta["status"] == "not_qualified" and meta["kappa"] == 0.0
        assert meta["note"].startswith("teacher not qualified (kappa 0.00 on ")
        assert meta["what_would_change_it"].startswith("qualify the teacher: materialize teacher_qualification")
        labels = metadata(failing, "direct_labels_gemma")
        assert labels["teacher_qualification"].startswith("not qualified: teacher not qualified (kappa 0.00 on ")
        assert labels["teacher_qualification_status"] == "not_qualified"
        assert labels["teacher_qualification_kappa"] == 0.0
        assert "materialize teacher_qualification" in labels["teacher_qualification_what_changes_it"]

        record_qualification(storage, "gemma", agree=True)  # the newest result counts
        passing = _label_gemma(storage, url)
    check = check_evaluation(passing, "gemma_qualified")
    assert check.passed and _values(check)["status"] == "qualified" and _values(check)["kappa"] == 1.0
    labels = metadata(passing, "direct_labels_gemma")
    assert labels["teacher_qualification"].startswith("qualified: teacher qualified (kappa 1.00 on ")
    assert " tested 20" in labels["teacher_qualification"]
    assert "teacher_qualification_what_changes_it" not in labels


def _validation_row(storage: MetacanStorage, version: str, head: str, passed: bool, day: int) -> None:
    """A human_validation row of a locked protocol, as validation_report appends it."""
    reason = "passed" if passed else "precision lower bound below 0.80"
    with storage.connect() as con:
        con.execute(
            "INSERT INTO human_validation VALUES (?, ?, ?, ?, 0.9, ?, 0.8, 0.75, 40, 300, ?, ?, ?)",
            [
                PROTOCOL,
                version,
                head,
                passed,
                0.85 if passed else 0.6,
                reason,
                f"run-{day}",
                dt.datetime(2026, 12, day),
            ],
        )


def test_predictions_warn_naming_the_heads_not_validated_until_every_deciding_head_passed(storage):
    write_inputs(storage)  # both role teachers qualified
    result = dg.materialize(
        [student_heads, predictions, *PREDICTION_CHECKS, CHECKS["predictions_may_claim"]],
        resources={"storage": storage},
        selection=dg.AssetSelection.assets(student_heads, predictions),
    )
    assert result.success
    check = check_evaluation(result, "predictions_may_claim")
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    meta = _values(check)
    heads = storage.read_table("student_heads").to_pylist()
    version = heads[0]["model_version"]
    gated = [r["target"] for r in heads if r["teacher"] == "codex" and r["gate_passed"] and r["target"] != "genre"]
    assert meta["model_version"] == version and "metaresearch" in meta["heads_deciding"]
    assert sorted(meta["heads_deciding"]) == sorted(h for h in gated if h not in ("study_design", "domain"))
    assert "metaepi_narrow" not in meta["heads_deciding"]  # failed the support gate: decides nothing, claims nothing
    assert meta["teachers_not_qualified"] == {}
    assert meta["heads_not_validated"]["metaresearch"] == (
        f"not validated: no human_validation row for {version} (no audit has judged it)"
    )
    assert "code the audit sample" in meta["what_would_change_it"]

    with storage.connect() as con:
        con.execute(
            "INSERT INTO audit_protocols VALUES (?, 'x', ?, ?, 'consensus', ['metaresearch'], 'v1', 'y', '{}')",
            [PROTOCOL, dt.datetime(2026, 11, 30), version],
        )
    for head in meta["heads_deciding"]:
        _validation_row(storage, version, head, head != "metaresearch", 1)
    out = claims_result(storage)
    assert not out["passed"] and out["metadata"]["heads_not_validated"].value == {
        "metaresearch": f"not validated under {PROTOCOL}: precision lower bound below 0.80 "
        "(precision lower bound 0.600, recall lower bound 0.750; 300 works coded)"
    }
    _validation_row(storage, version, "metaresearch", True, 2)  # a newer passing row
    out = claims_result(storage)
    assert out["passed"] and out["metadata"]["what_would_change_it"].value == "nothing: all is claimed"

    record_qualification(storage, "codex", agree=False)
    out = claims_result(storage)
    assert not out["passed"] and list(out["metadata"]["teachers_not_qualified"].value) == ["codex"]
    assert out["metadata"]["teachers_not_qualified"].value["codex"].startswith("teacher not qualified (kappa 0.00")
    assert "| codex | not_qualified | 0.000 |" in out["metadata"]["teachers"].value
    assert "materialize teacher_qualification" in out["metadata"]["what_would_change_it"].value


def test_records_warn_naming_the_teachers_never_tested(tmp_path, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=12)  # no qualification result, no student heads
    result = dg.materialize(
        [work_records, CHECKS["records_may_claim"]],
        resources={"storage": storage},
        instance=dg.DagsterInstance.ephemeral(),
    )
    check = check_evaluation(result, "records_may_claim")
    assert result.success and not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    meta = _values(check)
    assert meta["teachers_not_qualified"] == {
        "codex": "teacher not qualified: not tested yet",
        "gemma": "teacher not qualified: not tested yet",
    }
    assert meta["heads_deciding"] == [] and meta["heads_not_validated"] == {}
    assert "| gemma | not_tested | n/a | n/a | never |" in meta["teachers"]


def test_a_census_interval_of_zero_width_is_explained_in_the_prevalence_metadata_and_the_summary(storage):
    write_inputs(storage)
    design = storage.read_table("sample_design").to_pylist()  # one stratum: the rates read the design's strata
    storage.write_table("sample_design", pa.Table.from_pylist([{**r, "stratum": "all"} for r in design]))
    result = dg.materialize(
        [student_heads, predictions, prevalence, CHECKS["prevalence_may_claim"]],
        resources={"storage": storage},
    )
    census = next(
        r
        for r in storage.read_table("prevalence").to_pylist()
        if r["teacher"] == "gemma" and r["category"] == "metaresearch" and r["population"] == "frame"
    )
    assert census["design"] == "census of the frame" and census["ci_low"] == census["ci_high"] == census["rate"] == 0.25
    meta = metadata(result, "prevalence")
    assert meta["census_interval"] == CENSUS_NO_SAMPLING_ERROR
    assert meta["metaresearch"].endswith(f"\n{CENSUS_NO_SAMPLING_ERROR}\n")
    assert CENSUS_NO_SAMPLING_ERROR.startswith("A census has no sampling error: the interval of a census rate is")
    # the prevalence shows no head that has passed human validation: classify-and-count is unvalidated
    check = check_evaluation(result, "prevalence_may_claim")
    assert not check.passed and "metaresearch" in _values(check)["heads_not_validated"]
    with storage.connect(read_only=True) as con:  # the summary's prevalence lines (the frame here has no routes)
        lines = prevalence_lines(con, {"prevalence"})
    assert "frame gemma 0.2500 [0.2500, 0.2500] (census)" in lines[0]
    assert lines[1:] == [
        "Estimands (frame): the frame has no route column ca_aff, ca_fund, ca_venue (SPEC section 2); rebuild the frame "
        "(materialize frame)",
        f"  {CENSUS_NO_SAMPLING_ERROR}",
    ]
