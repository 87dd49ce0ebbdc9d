"""Integration: the whole chain on real records with the real embedded teacher and Dagster's executor."""

import json
import re
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from typer.testing import CliRunner

from metacan_pipeline.cli import app
from metacan_pipeline.cli.run_summary import page_lines, summary_text
from metacan_pipeline.definitions import build_resources, materialize_in_process
from metacan_pipeline.publish.lineage import lineage_of
from metacan_pipeline.publish.records import schema_violation
from metacan_pipeline.teachers.calling.archive import read_archive
from metacan_pipeline.teachers.core.registry import default_registry_path

pytestmark = pytest.mark.llm


#: The packaged registry with a smaller qualification test (2 + 2 reference works a teacher, not 34 + 16): the
#: same teachers and assets, so the chain is the default one, at a test's cost. Too few cases to judge: the
#: labels decide nothing, which is what the embedded 270M model gets on the full test too.
SMALL_QUALIFICATION = {"in_scope": 2, "negatives": 2, "min_works": 40, "min_positives": 10}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, request):
    small_input = request.getfixturevalue("small_input_module")
    data = tmp_path_factory.mktemp("pipeline") / "data"
    registry = data.parent / "teachers.toml"
    text = default_registry_path().read_text(encoding="utf-8")
    for key, value in SMALL_QUALIFICATION.items():
        text, n = re.subn(rf"(?m)^{key} = \d+$", f"{key} = {value}", text)
        assert n == 1, key
    registry.write_text(text, encoding="utf-8")
    instance = dg.DagsterInstance.ephemeral()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("METACAN_TEACHERS_FILE", str(registry))
        first = materialize_in_process(instance, build_resources(str(data), str(small_input)))
        second = materialize_in_process(instance, build_resources(str(data), str(small_input)))
    assert first.success and second.success
    return data, first, second


def test_both_teachers_are_tested_and_their_standing_is_published(two_runs):
    data, first, _ = two_runs
    con = duckdb.connect(str(data / "metacan.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT teacher, record_view, status, reference_works, labelled + failed, run_id, note FROM teacher_qualification "
        "ORDER BY teacher, computed_at"
    ).fetchall()
    # one result per teacher and run; the second run re-judges the stored labels (no call)
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows[::2]] == [
        ("codex", "title_abstract@v2", "too_few_cases", 4, 4),
        ("gemma", "title_only@v2", "too_few_cases", 4, 4),
    ]
    assert rows[0][5] == first.run_id and rows[0][6].startswith("teacher not qualified: too few cases to judge (kappa")
    calls = dict(con.execute("SELECT teacher, count(*) FROM teacher_calls GROUP BY 1").fetchall())
    assert calls["gemma"] >= 2 and calls["codex"] >= 2  # the 4 reference works, 5 a call, on top of the frame
    # nothing decides: no gated head, no candidate from the census teacher
    assert con.execute("SELECT count(*) FROM prediction_thresholds WHERE gate_passed").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM predictions WHERE len(candidate_categories) > 0").fetchone()[0] == 0
    record = json.loads((data / "site" / "records" / "W1951724000.json").read_text())
    assert {d["teacher"]: d["qualification"] for d in record["direct_labels"]}["gemma"] == rows[2][6]
    summary = summary_text(str(data))
    assert "Qualification (against the frame1k frontier reference" in summary and rows[2][6] in summary


@pytest.fixture(scope="module")
def small_input_module(tmp_path_factory, openalex_dir):
    import shutil

    from metacan_pipeline_tests.builders.openalex import SMALL_INPUT_FILES

    dest = tmp_path_factory.mktemp("input") / "openalex"
    dest.mkdir()
    for name in SMALL_INPUT_FILES:
        shutil.copy(openalex_dir / name, dest / name)
    return dest


def test_first_run_covers_every_frame_work(two_runs):
    data, first, _ = two_runs
    assert first.success
    con = duckdb.connect(str(data / "metacan.duckdb"), read_only=True)
    frame_ids = {r[0] for r in con.execute("SELECT id FROM frame").fetchall()}
    assert {"W1951724000", "W2997681568", "W2741809807"} <= frame_ids
    routes = con.execute("SELECT count(*) FILTER (ca_aff), count(*) FILTER (ca_fund) FROM frame").fetchone()
    assert routes[0] >= 3 and routes[1] == 1
    # every frame work has a gemma label or an explicit failure row
    gemma = dict(con.execute("SELECT work_id, status FROM direct_labels_gemma").fetchall())
    assert set(gemma) == frame_ids and set(gemma.values()) <= {"labelled", "failed"}
    # batched calls: every sent work is in some call of this run, and each label points to a stored call
    sent = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT unnest(work_ids) FROM teacher_calls WHERE run_id = ? AND teacher = 'gemma'", [first.run_id]
        ).fetchall()
    }
    in_sampling_frame = {r[0] for r in con.execute("SELECT id FROM frame WHERE in_sampling_frame").fetchall()}
    # the other calls of this run asked about the qualification's reference works
    reference = {
        r[0] for r in con.execute("SELECT work_id FROM teacher_labels WHERE record_view LIKE '%@v2'").fetchall()
    }
    assert sent - in_sampling_frame == reference - frame_ids and len(reference - frame_ids) == 4
    assert in_sampling_frame <= sent
    orphans = con.execute(
        "SELECT count(*) FROM direct_labels_gemma WHERE source = 'teacher_call' "
        "AND call_id NOT IN (SELECT call_id FROM teacher_calls)"
    ).fetchone()[0]
    assert orphans == 0
    # the codex teacher saw the title_abstract view of the sampled works only
    codex_views = {r[0] for r in con.execute("SELECT record_view FROM direct_labels_codex").fetchall()}
    sampled = {r[0] for r in con.execute("SELECT id FROM sample_design WHERE in_sample").fetchall()}
    assert (
        codex_views == {"title_abstract@v2"}
        and {r[0] for r in con.execute("SELECT work_id FROM direct_labels_codex").fetchall()} == sampled
    )
    # the request and raw reply are in the compressed archive, at the line the call row names
    path, line = con.execute(
        "SELECT archive_path, archive_line FROM teacher_calls WHERE teacher = 'codex' LIMIT 1"
    ).fetchone()
    event = list(read_archive(data / path))[line - 1]
    assert event["kind"] == "call" and '"abstract"' in event["request"]["messages"][-1]["content"] and event["response"]
    # every prediction is unvalidated, every machine score score_only
    assert con.execute("SELECT DISTINCT prediction_status FROM predictions").fetchall() == [
        ("machine_predicted_unvalidated",)
    ]
    assert con.execute("SELECT DISTINCT validation_status FROM machine_scores").fetchall() == [
        ("score_only:v0-immature-baseline",)
    ]
    # every check passes but the warnings on what the map may claim: neither role teacher qualifies here
    evaluations = {e.check_name: e for e in first.get_asset_check_evaluations()}
    warned = {n for n, e in evaluations.items() if not e.passed}
    claims = {
        "gemma_qualified",
        "codex_qualified",
        "predictions_may_claim",
        "prevalence_may_claim",
        "records_may_claim",
    }
    assert warned == claims and {evaluations[n].severity for n in warned} == {dg.AssetCheckSeverity.WARN}
    assert evaluations["gemma_qualified"].metadata["status"].value == "too_few_cases"
    # a record and a page per frame work, the title's markup rendered as text
    for wid in frame_ids:
        assert (data / "site" / "records" / f"{wid}.json").exists()
    model_version = con.execute("SELECT DISTINCT model_version FROM predictions").fetchone()[0]
    lme4 = (data / "site" / "works" / model_version / "W1951724000.html").read_text()
    assert "Fitting Linear Mixed-Effects Models Using lme4</h1>" in lme4 and "<b>" not in lme4
    assert f"works/{model_version}/W1951724000.html" in (data / "site" / "index.html").read_text()
    assert f"classifier version <code>{model_version}</code>" in lme4


def test_every_record_matches_the_json_schema(two_runs):
    data, _, _ = two_runs
    records = [json.loads(p.read_text()) for p in sorted((data / "site" / "records").glob("W*.json"))]
    con = duckdb.connect(str(data / "metacan.duckdb"), read_only=True)
    assert len(records) == con.execute("SELECT count(*) FROM frame").fetchone()[0] > 0
    assert [v for v in map(schema_violation, records) if v] == []
    # the schema is not vacuous: a record that breaks a rule fails it
    broken = json.loads(json.dumps(records[0]))
    broken["routes"]["ca_aff"] = "yes"
    assert "ca_aff must be boolean" in schema_violation(broken)


def row_count(con, table: str) -> int:
    return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_lineage_names_every_teacher_call_and_stage_run(two_runs, capsys):
    data, first, second = two_runs
    con = duckdb.connect(str(data / "metacan.duckdb"), read_only=True)
    row = lineage_of(con, "W1951724000")
    calls = {c["teacher"]: c for c in row["teacher_calls"]}
    gemma_call = con.execute(
        "SELECT l.call_id, c.request_hash, c.model, c.prompt_version FROM direct_labels_gemma l "
        "JOIN teacher_calls c USING (call_id) WHERE l.work_id = 'W1951724000'"
    ).fetchone()
    assert (
        calls["gemma"]["call_id"],
        calls["gemma"]["request_hash"],
        calls["gemma"]["model"],
        calls["gemma"]["prompt_version"],
    ) == gemma_call
    assert calls["gemma"]["run_id"] == first.run_id and calls["gemma"]["called_at"].endswith("Z")
    assert row["frame_run_id"] == first.run_id and row["part_run_id"] == first.run_id
    assert row["input_kind"] == "input_file" and row["source_file"].endswith(".json") and row["source_locator"]
    assert (
        row["model_version"]
        == con.execute("SELECT model_version FROM predictions WHERE id = 'W1951724000'").fetchone()[0]
    )
    assert row["student_run_id"] == first.run_id and row["machine_round"] >= 1
    record = json.loads((data / "site" / "records" / "W1951724000.json").read_text())
    assert record["lineage"]["teacher_calls"][0]["request_hash"] == row["teacher_calls"][0]["request_hash"]
    # the command prints the same, and refuses what is not a work id before touching anything
    runner = CliRunner()
    out = runner.invoke(app, ["lineage", "W1951724000", "--data-dir", str(data)])
    assert out.exit_code == 0, out.output
    assert (
        f"request {gemma_call[1]}" in out.output
        and row["frame_build_id"] in out.output
        and "page               works/" in out.output
    )
    # the second run made the same frame build: the lineage names the first and says both made it
    assert (
        f"  same build         Runs {first.run_id} and {second.run_id} produced the same frame build "
        f"{row['frame_build_id']} " in out.output
    )
    bad = runner.invoke(app, ["lineage", "W1/../../etc", "--data-dir", str(data)])
    assert bad.exit_code == 2 and "not a work id" in bad.output
    absent = runner.invoke(app, ["lineage", "W1", "--data-dir", str(data)])
    assert absent.exit_code == 1 and "not in the frame" in absent.output
    # the summary names a page that exists
    text = summary_text(str(data))
    assert f"Pages: {row_count(con, 'frame')} in" in text
    assert Path(text.split("Open one: ")[1].splitlines()[0]).is_file()
    release = re.search(r"^Release database: (\S+) \(serve it", text, re.M)
    assert release and Path(release[1]).is_file(), text
    con.close()
    writer = duckdb.connect(
        str(data / "metacan.duckdb")
    )  # a connection that conflicts with the command's read-only one
    try:
        busy = runner.invoke(app, ["lineage", "W1951724000", "--data-dir", str(data)])
    finally:
        writer.close()
    assert busy.exit_code == 1 and "cannot read the lineage from" in busy.output and busy.exception is not None
    assert isinstance(busy.exception, SystemExit)  # a clear message and exit 1, not a traceback


def test_second_run_makes_zero_teacher_calls(two_runs):
    data, first, second = two_runs
    assert second.success
    con = duckdb.connect(str(data / "metacan.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM teacher_calls WHERE run_id = ?", [second.run_id]).fetchone()[0] == 0
    md = second.asset_materializations_for_node("direct_labels_gemma")[0].metadata
    assert md["teacher_calls_this_run"].value == 0 and md["reused_from_store"].value == md["dagster/row_count"].value
    # append-only: one stored outcome per work and teacher, not two
    dup = con.execute(
        "SELECT count(*) FROM (SELECT work_id, teacher FROM teacher_labels GROUP BY ALL HAVING count(*) > 1)"
    ).fetchone()[0]
    assert dup == 0
    pages = second.asset_materializations_for_node("work_pages")[0].metadata
    assert pages["pages_rendered"].value == 0 and pages["pages_unchanged"].value == pages["dagster/row_count"].value > 0
    records = next(
        m
        for m in second.asset_materializations_for_node("work_records")
        if m.asset_key.to_user_string() == "work_records"
    ).metadata  # the node also materializes work_lineage (a multi_asset)
    assert records["records_changed"].value == 0


def test_summary_page_lines_name_the_folders_and_one_page():
    lines = page_lines(Path("/site"), (3, 1), ("works/v1/W1.html",))
    assert lines == [
        "Pages: 3 in /site/works (1 model-version folder)",
        "Index: /site/index.html",
        "Open one: /site/works/v1/W1.html",
    ]
    assert page_lines(Path("/site"), None, None) == ["Index: /site/index.html"]
    assert page_lines(Path("/s"), (3, 2), None)[0].endswith("(2 model-version folders)")
