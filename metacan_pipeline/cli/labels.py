"""``metacan import-labels``: labels produced elsewhere into the label store, validated like a teacher's replies."""

from __future__ import annotations

from pathlib import Path

import typer

from ..storage import MetacanStorage, default_data_dir
from ..teachers.core.registry import load_registry
from ..teachers.imports.importing import ImportSpec, import_file
from ..teachers.imports.texts import label_file_texts, store_texts


def import_labels(
    path: Path = typer.Argument(
        ..., exists=True, dir_okay=False, help="Labels in our schema (SPEC section 4): a JSON array or JSON Lines."
    ),
    teacher: str = typer.Option(..., help="Teacher name to store them under (not a registry teacher's name)."),
    model: str = typer.Option(..., help="Model that produced them."),
    prompt_version: str = typer.Option(..., help="Prompt or rubric version they were produced under."),
    record_view: str = typer.Option("title_abstract", help="What the labeller saw."),
    source: str = typer.Option(..., help="Where they come from (who, when, which study)."),
    absent: list[str] = typer.Option([], help="A label field the source never provides (repeat the option)."),
    data_dir: str = typer.Option(None, help="Output folder (default $METACAN_DATA_DIR or ./data)."),
) -> None:
    """Import labels produced elsewhere into the label store, validated like a teacher's replies.

    Invalid records become failed rows with their cause; importing the same file again adds nothing.
    Materialize ``teacher_agreement`` afterwards to compare them with the other teachers.
    """
    if teacher in load_registry():
        typer.echo(
            f"--teacher {teacher}: that is a registry teacher's name; imported labels need a name of their own "
            f"(e.g. {teacher}_external), so that they never mix with the labels the registry teacher buys",
            err=True,
        )
        raise typer.Exit(2)
    spec = ImportSpec(
        teacher=teacher,
        model=model,
        prompt_version=prompt_version,
        record_view=record_view,
        source=source,
        absent=frozenset(absent),
    )
    try:
        with MetacanStorage(data_dir=data_dir or default_data_dir()).connect() as con:
            report = import_file(con, path, spec, run_id=None)
            texts = store_texts(con, label_file_texts(path))
    except ValueError as exc:  # an unreadable file or option: the message names it and what to give instead
        typer.echo(f"metacan import-labels: {exc}", err=True)
        raise typer.Exit(2) from None
    if texts:
        typer.echo(f"{path}: {texts} work titles stored for the student (reference set {teacher})")
    if report.already_imported:
        typer.echo(f"{path}: already imported for {teacher}; nothing added")
        return
    typer.echo(
        f"{path}: {report.labelled} labelled, {report.failed} failed (invalid), {report.existing} unchanged (already the current label), "
        f"{len(report.duplicates)} duplicate ids skipped"
    )
    for file, index, work_id, cause in report.invalid[:20]:
        typer.echo(f"  record {index + 1} of {Path(file).name} ({work_id or 'no id'}): {cause}", err=True)
