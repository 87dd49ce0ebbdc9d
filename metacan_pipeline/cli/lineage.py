"""``metacan lineage``: what produced each number a work's page shows, read from the ``work_lineage`` table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import duckdb
import typer

from ..openalex.ids import is_work_id
from ..publish.lineage import LineageNotBuilt, lineages_with_pages
from ..storage import default_data_dir


def lineage(
    work_ids: Annotated[list[str], typer.Argument(help="OpenAlex work ids (W followed by digits), e.g. W2741809807.")],
    data_dir: str = typer.Option(None, help="Output folder (default $METACAN_DATA_DIR or ./data)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (one object per work) instead of text."),
) -> None:
    """Print what produced each number a work's page shows: frame build, input record, entity lists, every
    teacher call (model, prompt version, request hash, time), the model version and each stage's run."""
    bad = [w for w in work_ids if not is_work_id(w)]
    if bad:
        typer.echo(
            f"not a work id: {', '.join(repr(b) for b in bad)}; give ids like W2741809807 (W followed by digits)",
            err=True,
        )
        raise typer.Exit(2)
    db = Path(data_dir or default_data_dir(), "metacan.duckdb")
    if not db.exists():
        typer.echo(
            f"no database at {db}: run `metacan run` (or materialize work_records in the Dagster UI) first", err=True
        )
        raise typer.Exit(1)
    try:
        missing = _print_lineage(db, work_ids, as_json)
    except duckdb.Error as exc:  # held by a writing run, unreadable, or a table's files gone
        typer.echo(
            f"cannot read the lineage from {db}: {str(exc).splitlines()[0]}. If a run is writing the database, try again "
            f"when it ends; otherwise re-materialize work_records (`metacan run`).",
            err=True,
        )
        raise typer.Exit(1) from None
    if missing:
        raise typer.Exit(1)


def _print_lineage(db: Path, work_ids: list[str], as_json: bool) -> int:
    """Print the lineage of each id from ``db`` (read-only); returns how many ids are not in the frame."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        missing = 0
        for wid, row in lineages_with_pages(con, work_ids):
            if row is None:
                typer.echo(f"{wid}: not in the frame of {db}", err=True)
                missing += 1
                continue
            typer.echo(json.dumps(row, default=str) if as_json else lineage_text(row))
        return missing
    except LineageNotBuilt:
        typer.echo(f"{db} has no work_lineage table yet: materialize work_records (`metacan run`) first", err=True)
        raise typer.Exit(1) from None
    finally:
        con.close()


def lineage_text(row: dict) -> str:
    """A ``work_lineage`` row (see :mod:`metacan_pipeline.publish.lineage`, with its page) as the lines ``metacan lineage`` prints."""
    source = "archived API response" if row["input_kind"] == "archived_api_response" else "input part"
    lines = [
        f"{row['id']}",
        f"  frame build        {row['frame_build_id']} (Dagster run {row['frame_run_id'] or 'not recorded'})",
        f"  {source:<18} {row['source_file']} @ {row['source_locator']} (read by run {row['part_run_id'] or 'not recorded'})",
        f"  entity lists       {row['entity_list_versions'] or 'not recorded'}",
        f"  lexicon            {row['lexicon_version'] or 'not recorded'}",
        f"  student model      {row['model_version'] or 'none'}"
        + (f" (trained by run {row['student_run_id']})" if row["student_run_id"] else ""),
        "  machine scores     "
        + (
            f"round {row['machine_round']} (run {row['machine_scores_run_id'] or 'not recorded'}, {row['machine_validation_status']})"
            if row["machine_round"] is not None
            else "none"
        ),
        f"  teacher calls      {len(row['teacher_calls'])}",
    ]
    for c in row["teacher_calls"]:
        lines.append(
            f"    {c['teacher'] or '?':<8} {c['model']} prompt {c['prompt_version']} {c['label_status']}"
            f"{'' if c['source'] in (None, 'teacher_call') else ' (' + c['source'] + ')'}"
            f" call {c['call_id'] or 'none'} request {c['request_hash'] or 'none'} at {c['called_at'] or '?'}"
            f" run {c['run_id'] or '?'}" + (f" archive {c['archive']}" if c.get("archive") else "")
        )
    if row.get("page_path"):
        lines.append(
            f"  page               {row['page_path']} (rendered {row['rendered_at']} UTC by run {row['page_run_id']})"
        )
    return "\n".join(lines)
