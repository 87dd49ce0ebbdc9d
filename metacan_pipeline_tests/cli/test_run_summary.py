"""Tests of the run summary (``metacan summary``, and the text ``metacan run`` prints at its end)."""

import duckdb
import pyarrow as pa
from typer.testing import CliRunner

from metacan_pipeline.cli import app
from metacan_pipeline.cli.run_summary import holdout_lines, prediction_lines, qualification_lines, teacher_call_lines
from metacan_pipeline.tables import create_tables
from metacan_pipeline.tables.student import HEADS_SCHEMA
from metacan_pipeline.teachers.core.store import append_rows


def test_summary_before_any_run_says_what_to_do_and_creates_nothing(tmp_path):
    result = CliRunner().invoke(app, ["summary", "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 1 and "no frame has been built there yet. Run `make run`" in result.output
    assert not (tmp_path / "data").exists()


def test_the_run_summary_counts_the_calls_of_each_endpoint_of_a_teacher_on_several():
    con = duckdb.connect()
    create_tables(con)
    calls = [
        {"call_id": f"c{i}", "run_id": "r1", "teacher": t, "n_works": 2, "endpoint": e, "error": err}
        for i, (t, e, err) in enumerate(
            [("vllm", "gpu1", None), ("vllm", "gpu1", None), ("vllm", "gpu2", "HTTP 503"), ("gemma", "embedded", None)]
        )
    ]
    append_rows(con, calls, [])
    lines = teacher_call_lines(con, "r1")
    assert lines[0].startswith("Teacher calls in this run: 4 (gemma 1 calls sending 2 works (")
    assert ", vllm 3 calls (1 failed) sending 6 works (" in lines[0]
    assert lines[1:] == ["  vllm by endpoint: gpu1 2 calls, gpu2 1 calls (1 failed)"]  # gemma: one endpoint, no line


def test_the_holdout_line_says_when_a_head_has_no_labelled_holdout_work():
    con = duckdb.connect()
    con.execute("CREATE TABLE student_holdout (work_id VARCHAR)")
    gemma = {"teacher": "gemma", "target": "metaresearch", "holdout_n": 12, "holdout_positives": 2}
    codex = {"teacher": "codex", "target": "metaresearch"}  # no labelled work of the holdout: no metrics
    heads = pa.Table.from_pylist([gemma | {"ap": 0.5, "auroc": 0.75}, codex], schema=HEADS_SCHEMA)  # noqa: F841
    con.execute("CREATE TABLE student_heads AS SELECT * FROM heads")
    [line] = holdout_lines(con, {"student_holdout"})
    assert line.endswith(
        "codex: none of its labelled works is in the holdout (no AP or AUROC); "
        "gemma n=12 positives=2 AP 0.500 AUROC 0.750"
    ), line
    assert "None" not in line


def test_the_predictions_line_says_which_heads_pass_the_support_gate_and_how_many_decide():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE predictions AS SELECT * FROM (VALUES ('W1', ['metaresearch'], ['metaresearch'], 'v1'), "
        "('W2', ['metaresearch'], []::VARCHAR[], 'v1'), ('W3', []::VARCHAR[], []::VARCHAR[], 'v1')) "
        "t(id, candidate_categories, consensus_categories, model_version)"
    )
    gated = [True, False, False]
    heads = pa.Table.from_pylist(  # noqa: F841
        [{"teacher": "codex", "target": t, "gate_passed": g} for t, g in zip(("a", "b", "c"), gated, strict=True)]
        + [{"teacher": "gemma", "target": "a", "gate_passed": True}],
        schema=HEADS_SCHEMA,
    )
    con.execute("CREATE TABLE student_heads AS SELECT * FROM heads")
    why = "sample teacher not qualified (kappa 0.00 on 50 reference works (16 positive); needs 0.37)"
    con.execute(
        "CREATE TABLE prediction_thresholds AS SELECT * FROM (VALUES ('v1', 'a', false, ?), ('v1', 'b', false, ?), "
        "('v0', 'a', true, NULL)) t(model_version, target, gate_passed, gate_reason)",
        [why, why],
    )
    [line] = prediction_lines(con, "codex")
    assert line == (
        "Predictions: 3 works scored by v1; 2 with a candidate category, 1 with a consensus category; 1 of 3 codex "
        "heads pass the support gate (at least 20 positive direct labels from each teacher, an effective sample size "
        f"of 10); 0 decide in this run ({why})"
    )
    con.execute("UPDATE prediction_thresholds SET gate_passed = true, gate_reason = NULL WHERE target = 'a'")
    assert prediction_lines(con, "codex")[0].endswith("; 1 decide in this run")


def test_the_qualification_lines_name_the_model_behind_each_teacher():
    con = duckdb.connect()
    create_tables(con)
    note = "teacher not qualified (kappa 0.00 on 50 reference works (16 positive); needs 0.37)"
    rows = [
        ("codex", "gemma-3-270m-it-q4_k_m", "title_abstract@v2", "2026-12-01"),
        ("codex", "gpt-4.1", "title_abstract@v2", "2026-12-02"),
    ]
    for teacher, model, view, day in rows:
        con.execute(
            "INSERT INTO teacher_qualification BY NAME SELECT ? AS teacher, ? AS model, 'v4' AS prompt_version, "
            "'sha' AS prompt_sha, ? AS record_view, 'c' AS config_hash, 'not_qualified' AS status, ? AS note, "
            "?::TIMESTAMP AS computed_at",
            [teacher, model, view, note, day],
        )
    lines = qualification_lines(con, {"teacher_qualification"})
    assert lines[1:] == [
        f"  codex (model gemma-3-270m-it-q4_k_m, prompt v4, title_abstract@v2): not_qualified: {note}",
        f"  codex (model gpt-4.1, prompt v4, title_abstract@v2): not_qualified: {note}",
    ]


def test_the_summary_of_a_run_stopped_after_the_frame_says_what_is_not_there_yet(storage):
    """A data folder with a frame and nothing after it (a run stopped by Ctrl-C while the teachers labelled): the
    summary gives the frame and one line per missing stage, never a traceback."""
    from metacan_pipeline.cli.run_summary import summary_text
    from metacan_pipeline.tables.frame import FRAME_SCHEMA
    from metacan_pipeline_tests.builders.student import student_frame_rows

    routes = {"ca_aff": True, "ca_fund": False, "ca_venue": False, "about_ca": False}
    rows = [{k: v for k, v in {**r, **routes}.items() if k in FRAME_SCHEMA.names} for r in student_frame_rows()]
    storage.write_table("frame", pa.Table.from_pylist(rows, schema=FRAME_SCHEMA))
    text = summary_text(str(storage.root))
    assert text.startswith("Frame:") or "Frame" in text.splitlines()[0]
    assert "Predictions: not yet (no table predictions: the run stopped before that stage; run again)" in text
    assert "Traceback" not in text
