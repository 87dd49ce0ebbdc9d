"""``metacan lineage``: what produced each number a work's page shows, read from the ``work_lineage`` table.

Works are named by OpenAlex id or DOI (:func:`metacan_pipeline.publish.lineage.resolve_works`, as the Dagster job
``work_lineage_report`` takes them); with ``METACAN_DAGSTER_UI_URL`` set each run id is followed by its address in the
Dagster UI, and the runs that produced the same frame build are named."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import duckdb
import typer

from .. import settings
from ..openalex.ids import short_id
from ..publish.lineage import (
    LineageNotBuilt,
    build_runs,
    doi_of,
    lineages_with_pages,
    resolve_works,
    run_url,
    same_build_sentence,
)
from ..storage import default_data_dir


def lineage(
    work_ids: Annotated[
        list[str],
        typer.Argument(
            help="OpenAlex work ids (W2741809807 or https://openalex.org/W2741809807) or DOIs (10.1234/abc, "
            "https://doi.org/10.1234/abc)."
        ),
    ],
    data_dir: str = typer.Option(None, help="Output folder (default $METACAN_DATA_DIR or ./data)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (one object per work) instead of text."),
) -> None:
    """Print what produced each number a work's page shows: frame build, input record, entity lists, every
    teacher call (model, prompt version, request hash, time), the model version and each stage's run, and which runs
    produced the same frame build. Run ids are followed by their page in the Dagster UI when METACAN_DAGSTER_UI_URL is
    set."""
    bad = [w for w in work_ids if not _names_a_work(w)]
    if bad:
        typer.echo(
            f"not a work id or DOI: {', '.join(repr(b) for b in bad)}; give ids like W2741809807 (W followed by digits) "
            "or DOIs like 10.1234/abc",
            err=True,
        )
        raise typer.Exit(2)
    try:
        ui_url = settings.dagster_ui_url()
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    db = Path(data_dir or default_data_dir(), "metacan.duckdb")
    if not db.exists():
        typer.echo(
            f"no database at {db}: run `metacan run` (or materialize work_records in the Dagster UI) first", err=True
        )
        raise typer.Exit(1)
    try:
        missing = _print_lineage(db, work_ids, as_json, ui_url)
    except duckdb.Error as exc:  # held by a writing run, unreadable, or a table's files gone
        typer.echo(
            f"cannot read the lineage from {db}: {str(exc).splitlines()[0]}. If a run is writing the database, try again "
            f"when it ends; otherwise re-materialize work_records (`metacan run`).",
            err=True,
        )
        raise typer.Exit(1) from None
    if missing:
        raise typer.Exit(1)


def _names_a_work(value: str) -> bool:
    sid = short_id(value)
    return (sid is not None and sid.startswith("W")) or doi_of(value) is not None


def _print_lineage(db: Path, work_ids: list[str], as_json: bool, ui_url: str | None = None) -> int:
    """Print the lineage of each work ``work_ids`` name from ``db`` (read-only); returns how many name no frame work."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        resolved = resolve_works(con, work_ids)
        ids = list(dict.fromkeys(wid for _, wid in resolved.works))
        rows = {wid: row for wid, row in lineages_with_pages(con, ids) if row is not None}
        runs = build_runs(con, [r.get("frame_build_id") for r in rows.values()])
        by_value: dict[str, list[str]] = {}
        for value, wid in resolved.works:
            by_value.setdefault(value, []).append(wid)
        for value in dict.fromkeys(work_ids):  # in the order given
            if value in resolved.not_in_frame:
                typer.echo(f"{value}: not in the frame of {db}", err=True)
            for wid in by_value.get(value, []):
                row = rows[wid]
                same = runs.get(row.get("frame_build_id"), [])
                typer.echo(
                    json.dumps(lineage_json(row, same, ui_url), default=str)
                    if as_json
                    else lineage_text(row, same, ui_url)
                )
        return len(resolved.not_in_frame)
    except LineageNotBuilt:
        typer.echo(f"{db} has no work_lineage table yet: materialize work_records (`metacan run`) first", err=True)
        raise typer.Exit(1) from None
    finally:
        con.close()


def lineage_json(row: dict, same_build_runs: Sequence[str] = (), ui_url: str | None = None) -> dict:
    """The object ``metacan lineage --json`` prints for a row: the row, with ``same_build_runs`` (every run that
    produced its frame build, the first first, when there are two or more) and ``run_urls`` (each run id's page in
    the Dagster UI, when ``ui_url`` is configured)."""
    out = dict(row)
    if len(same_build_runs) >= 2:
        out["same_build_runs"] = list(same_build_runs)
    if ui_url:
        runs = [
            row.get(k)
            for k in ("frame_run_id", "part_run_id", "student_run_id", "machine_scores_run_id", "page_run_id")
        ]
        runs += [c.get("run_id") for c in row.get("teacher_calls") or []] + list(same_build_runs)
        urls = {r: run_url(ui_url, r) for r in runs if r}
        out["run_urls"] = {r: u for r, u in urls.items() if u}
    return out


def lineage_text(row: dict, same_build_runs: Sequence[str] = (), ui_url: str | None = None) -> str:
    """A ``work_lineage`` row (see :mod:`metacan_pipeline.publish.lineage`, with its page) as the lines ``metacan
    lineage`` prints; ``same_build_runs``: every run that produced its frame build (:func:`.build_runs`; a line says so
    when there are two or more); ``ui_url``: the Dagster UI's address, after each run id in angle brackets."""

    def run(run_id: str | None, missing: str = "not recorded") -> str:
        url = run_url(ui_url, run_id)
        return f"{run_id or missing}" + (f" <{url}>" if url else "")

    source = "archived API response" if row["input_kind"] == "archived_api_response" else "input part"
    lines = [
        f"{row['id']}",
        f"  frame build        {row['frame_build_id']} (Dagster run {run(row['frame_run_id'])})",
        f"  {source:<18} {row['source_file']} @ {row['source_locator']} (read by run {run(row['part_run_id'])})",
        f"  entity lists       {row['entity_list_versions'] or 'not recorded'}",
        f"  lexicon            {row['lexicon_version'] or 'not recorded'}",
        f"  student model      {row['model_version'] or 'none'}"
        + (f" (trained by run {run(row['student_run_id'])})" if row["student_run_id"] else ""),
        "  machine scores     "
        + (
            f"round {row['machine_round']} (run {run(row['machine_scores_run_id'])}, {row['machine_validation_status']})"
            if row["machine_round"] is not None
            else "none"
        ),
        f"  teacher calls      {len(row['teacher_calls'])}",
    ]
    if (sentence := same_build_sentence(row["frame_build_id"], list(same_build_runs), run)) is not None:
        lines.insert(2, f"  same build         {sentence}")
    for c in row["teacher_calls"]:
        lines.append(
            f"    {c['teacher'] or '?':<8} {c['model']} prompt {c['prompt_version']} {c['label_status']}"
            f"{'' if c['source'] in (None, 'teacher_call') else ' (' + c['source'] + ')'}"
            f" call {c['call_id'] or 'none'} request {c['request_hash'] or 'none'} at {c['called_at'] or '?'}"
            f" run {run(c['run_id'], '?')}" + (f" archive {c['archive']}" if c.get("archive") else "")
        )
    if row.get("page_path"):
        lines.append(
            f"  page               {row['page_path']} (rendered {row['rendered_at']} UTC by run {run(row['page_run_id'])})"
        )
    return "\n".join(lines)
