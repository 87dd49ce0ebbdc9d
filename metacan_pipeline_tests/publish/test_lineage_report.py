"""A work's lineage from the Dagster UI: the job ``work_lineage_report`` run for real on a temporary instance over a
frame built through Dagster, run links on pages and in ``metacan lineage``, and the sentence that says when two
runs produced the same frame build."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import dagster as dg
import pyarrow.compute as pc
import pytest
from dagster._core.remote_representation.external_data import active_presets_from_job_def
from typer.testing import CliRunner

from metacan_pipeline.cli import app
from metacan_pipeline.definitions import defs
from metacan_pipeline.i18n import translations
from metacan_pipeline.publish.lineage import lineage_record, run_url
from metacan_pipeline.publish.lineage_report import (
    EXAMPLE_WORK,
    JOB_NAME,
    OP_NAME,
    LineageReportConfig,
    work_lineage_report,
)
from metacan_pipeline.publish.pages import environment, render_work, run_context
from metacan_pipeline.publish.records import build_record
from metacan_pipeline.settings import DAGSTER_UI_URL_ENV
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline_tests.builders.common import OPENALEX, failure_messages, sql
from metacan_pipeline_tests.builders.frame import build_frame
from metacan_pipeline_tests.builders.lineage import FOREIGN_RUN, lineage_world

#: The run id of the ``work_pages`` run the page tests render as.
PAGE_RUN = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
UI = "https://dagster.example.org/prefix"


def _report(world, works: list[str], raise_on_error: bool = True) -> dg.ExecuteInProcessResult:
    """The job as the Launchpad launches it: the job the code location declares, bound to the world's data folder as
    the code location binds it to the configured one, with the Launchpad's config, on the world's instance."""
    bound = dg.Definitions(jobs=[work_lineage_report], resources={"storage": world["storage"]}).resolve_job_def(
        JOB_NAME
    )
    return bound.execute_in_process(
        run_config={"ops": {OP_NAME: {"config": {"works": works}}}},
        instance=world["instance"],
        raise_on_error=raise_on_error,
    )


def _markdown(result: dg.ExecuteInProcessResult) -> dict[str, str]:
    [output] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return {
        k: v.value for k, v in output.event_specific_data.metadata.items() if isinstance(v, dg.MarkdownMetadataValue)
    }


def _frame_run_ids(instance: dg.DagsterInstance) -> list[str]:
    records = instance.fetch_materializations(dg.AssetKey("frame"), limit=10, ascending=True).records
    return [r.run_id for r in records]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A frame built once through Dagster on a temporary instance, its ``work_lineage``, and one planted direct label
    (run :data:`FOREIGN_RUN`, not in the instance) on the first work (:func:`lineage_world`); no second run of the
    same build yet."""
    return lineage_world(tmp_path_factory.mktemp("lineage-world"))


@pytest.fixture(scope="module")
def rebuilt(world) -> list[str]:
    """The sensor's run after ``make run``: ``frame_build`` again over the same inputs, so a second run produces the
    same frame build; the frame's runs, oldest first. Tests that use it come after those that see one run."""
    _, again = build_frame(world["data"], world["inp"], world["instance"])
    assert again.success and again.run_id != world["frame_run"]
    return _frame_run_ids(world["instance"])


def _page(world, monkeypatch, ui: str | None, lang: str | None = None) -> str:
    """The first work's page as ``work_pages`` renders it: its record from the frame row and its ``work_lineage``
    row, and the run's context (:func:`run_context`, which reads the settings and the runs of each build)."""
    storage, first = world["storage"], world["first"]
    if ui is None:
        monkeypatch.delenv(DAGSTER_UI_URL_ENV, raising=False)
    else:
        monkeypatch.setenv(DAGSTER_UI_URL_ENV, ui)
    [row] = storage.read_table("frame").filter(pc.field("id") == first).to_pylist()
    [lineage] = storage.read_table("work_lineage").filter(pc.field("id") == first).to_pylist()
    record = build_record(row, [], None, None, lineage_record(lineage))
    ctx = run_context(storage, "codex", PAGE_RUN, dt.datetime(2026, 1, 2, 3, 4))
    assert ctx["dagster_ui"] == (ui.rstrip("/") if ui else None)
    return render_work(environment(translations(lang) if lang else None), record, None, ctx)


def test_with_one_run_the_report_links_each_part_to_its_run_and_says_nothing_of_a_same_build(world, monkeypatch):
    monkeypatch.delenv(DAGSTER_UI_URL_ENV, raising=False)
    storage, first, build, run1 = world["storage"], world["first"], world["build"], world["frame_run"]
    assert sql(storage, "SELECT run_id FROM frame_builds") == [(run1,)]
    # the frame's parts were built by the same frame_build run that merged them
    [(part_run,)] = sql(storage, f"SELECT part_run_id FROM work_lineage WHERE id = '{first}'")
    assert part_run == run1

    result = _report(world, [first])
    md = _markdown(result)[first]
    # inside the UI, with no address configured, the links are relative to the UI's root
    assert f"| frame build | `{build}` | `frame` · `frame_builds` | [`{run1}`](/runs/{run1}) |" in md
    assert f"| `frame_parts` · `frame_build_manifest` | [`{run1}`](/runs/{run1}) |" in md
    assert (
        f"| direct label (gemma) | m, prompt v1, labelled (frame_rule) | `direct_labels_gemma` | `{FOREIGN_RUN}` "
        "(not a run of this Dagster instance) |"
    ) in md
    assert "same frame build" not in md
    assert result.run_id not in md  # the report's own run is none of the lineage's

    text = _cli(world, first)
    assert f"  frame build        {build} (Dagster run {run1})\n" in text
    assert "same build" not in text and "/runs/" not in text

    html = _page(world, monkeypatch, None)
    assert "/runs/" not in html  # a page never links to a UI nobody configured
    assert f"Dagster run <code>{run1}</code>" in html and 'id="same-build"' not in html
    html = _page(world, monkeypatch, UI)
    assert f'Dagster run <a href="{UI}/runs/{run1}"><code>{run1}</code></a>' in html and 'id="same-build"' not in html


def test_after_a_rerun_of_the_same_build_the_lineage_names_both_runs(world, rebuilt, monkeypatch):
    storage, first, build = world["storage"], world["first"], world["build"]
    run1, run2 = rebuilt
    assert run1 == world["frame_run"]
    assert sql(storage, "SELECT run_id FROM frame_builds") == [(run1,)]  # the lineage still names the first run
    records = world["instance"].fetch_materializations(dg.AssetKey("frame"), limit=10, ascending=True).records
    assert [r.asset_materialization.tags["dagster/data_version"] for r in records] == [build, build]  # as the UI shows

    monkeypatch.setenv(DAGSTER_UI_URL_ENV, UI + "/")
    md = _markdown(_report(world, [first]))[first]
    assert f"| frame build | `{build}` | `frame` · `frame_builds` | [`{run1}`]({UI}/runs/{run1}) |" in md
    assert (
        f"Runs [`{run1}`]({UI}/runs/{run1}) and [`{run2}`]({UI}/runs/{run2}) produced the same frame build {build} "
    ) in md
    assert f"the lineage names the first, [`{run1}`]({UI}/runs/{run1})" in md
    # a data folder older than frame_build_runs: the job reads the runs of the build from the instance's materializations
    with storage.connect() as con:
        kept = con.execute("SELECT * FROM frame_build_runs").fetchall()
        con.execute("DELETE FROM frame_build_runs")
    try:
        md = _markdown(_report(world, [first]))[first]
        assert f"Runs [`{run1}`]({UI}/runs/{run1}) and [`{run2}`]({UI}/runs/{run2}) produced the same" in md
    finally:
        with storage.connect() as con:
            con.executemany("INSERT INTO frame_build_runs VALUES (?, ?, ?)", kept)
    assert len(kept) == 2

    monkeypatch.delenv(DAGSTER_UI_URL_ENV)
    text = _cli(world, first)
    assert f"  frame build        {build} (Dagster run {run1})\n" in text
    assert f"  same build         Runs {run1} and {run2} produced the same frame build {build} " in text
    assert "/runs/" not in text
    monkeypatch.setenv(DAGSTER_UI_URL_ENV, UI)
    text = _cli(world, first)
    assert f"(Dagster run {run1} <{UI}/runs/{run1}>)" in text
    assert f"run {FOREIGN_RUN} <{UI}/runs/{FOREIGN_RUN}>" in text and f"<{UI}/runs/{run2}>" in text
    obj = json.loads(_cli(world, first, "--json"))
    assert obj["same_build_runs"] == [run1, run2] and obj["run_urls"][run2] == f"{UI}/runs/{run2}"

    html = _page(world, monkeypatch, None)
    same = re.search(r'<dd id="same-build">(.*?)</dd>', html, re.S).group(1)
    assert same.startswith(f"Runs <code>{run1}</code>, <code>{run2}</code> produced this same frame build")
    assert f"data version <code>{build}</code>." in same and "/runs/" not in html
    html = _page(world, monkeypatch, UI)
    link1 = f'<a href="{UI}/runs/{run1}"><code>{run1}</code></a>'
    link2 = f'<a href="{UI}/runs/{run2}"><code>{run2}</code></a>'
    assert (
        re.search(r'<dd id="same-build">(.*?)</dd>', html, re.S).group(1).startswith(f"Runs {link1}, {link2} produced")
    )
    assert f'<a href="{UI}/runs/{PAGE_RUN}"><code>{PAGE_RUN}</code></a>' in html
    assert f'<a href="{UI}/runs/{FOREIGN_RUN}"><code>{FOREIGN_RUN}</code></a>' in html
    french = _page(world, monkeypatch, UI, "fr")
    assert f"Les exécutions {link1}, {link2} ont produit cette même production du cadre" in french


def test_the_report_takes_ids_and_dois_as_metacan_lineage_does(world, monkeypatch):
    monkeypatch.delenv(DAGSTER_UI_URL_ENV, raising=False)
    first, doi = world["first"], world["doi"]
    doi_url = "HTTPS://DOI.ORG/" + doi.split("doi.org/", 1)[1].upper()  # DOIs are case-insensitive
    md = _markdown(_report(world, [f"https://openalex.org/{first.lower()}", doi_url]))
    assert list(md) == [first]
    assert md[first].startswith(f"### {first} (asked as `https://openalex.org/{first.lower()}`)")
    assert _cli(world, doi_url).startswith(f"{first}\n  frame build        {world['build']} ")
    bad = CliRunner().invoke(app, ["lineage", "10.9999/none", "--data-dir", str(world["data"])])
    assert bad.exit_code == 1 and f"10.9999/none: not in the frame of {world['storage'].duckdb_path}" in bad.output


def test_unknown_works_fail_naming_them_and_what_to_do(world):
    result = _report(world, [world["first"], "W1", "X-1", "10.9999/none"], raise_on_error=False)
    assert not result.success
    [message] = failure_messages(result)
    db = world["storage"].duckdb_path
    assert message == "dagster._core.definitions.events.Failure: " + (
        f"not a work id or DOI: 'X-1'; not in the frame of {db}: 'W1', '10.9999/none'. Give OpenAlex work ids (W "
        f"followed by digits, e.g. {EXAMPLE_WORK}) or DOIs of works in the frame (the work's page or the index names "
        "both), or materialize work_records if the work entered the frame since; no lineage was written.\n"
    )
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.event_specific_data.user_failure_data.metadata["not_in_the_frame"].value == ["W1", "10.9999/none"]
    assert not [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]


def test_the_launchpad_is_prefilled_with_the_example_work():
    job = defs.resolve_job_def(JOB_NAME)
    assert job.graph is work_lineage_report.graph  # the code location's job is the one the tests run
    assert job.run_config == {"ops": {OP_NAME: {"config": {"works": [EXAMPLE_WORK]}}}}
    assert LineageReportConfig().works == [EXAMPLE_WORK]
    # what the UI receives of the job: its default preset, which the Launchpad opens with
    [preset] = active_presets_from_job_def(job)
    assert preset.name == "default" and preset.run_config == job.run_config
    assert set(job.required_resource_keys) - {"io_manager"} == {"storage"}  # nothing but the warehouse


def _cli(world, *args: str) -> str:
    result = CliRunner().invoke(app, ["lineage", *args, "--data-dir", str(world["data"])])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(
    ("ui", "run_id", "expected"),
    [
        (None, "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee", None),
        ("", "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee", "/runs/aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"),
        (
            "http://127.0.0.1:3000/",
            "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee",
            "http://127.0.0.1:3000/runs/aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee",
        ),
        ("http://127.0.0.1:3000", "none", None),
        ("http://127.0.0.1:3000", "x/../../admin", None),
    ],
)
def test_run_url_links_dagster_run_ids_only_when_a_ui_is_given(ui, run_id, expected):
    assert run_url(ui, run_id) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ftp://ui", "METACAN_DAGSTER_UI_URL='ftp://ui' is not an absolute http(s) URL"),
        ("https://ui.example.org/?x=1", "carries a query string or a fragment"),
        ("https://user:pw@ui.example.org", "carries a user name or password"),
    ],
)
def test_a_bad_ui_url_is_refused_naming_the_variable(monkeypatch, value, message):
    from metacan_pipeline.settings import dagster_ui_url

    monkeypatch.setenv(DAGSTER_UI_URL_ENV, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        dagster_ui_url()


def test_the_example_work_is_the_first_work_of_the_default_runs_frame(tmp_path, openalex_more_dir):
    """:data:`EXAMPLE_WORK` is the first frame work (by id) of the default inputs (both real-data folders)."""
    instance = dg.DagsterInstance.ephemeral()
    data = tmp_path / "data"
    _, result = build_frame(data, Path(f"{OPENALEX}:{openalex_more_dir}"), instance)
    assert result.success
    assert sql(MetacanStorage(data_dir=str(data)), "SELECT min(id) FROM frame") == [(EXAMPLE_WORK,)]
