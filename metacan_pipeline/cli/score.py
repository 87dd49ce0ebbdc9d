"""``metacan score``: score any list of works with a published student model version (:mod:`..student.score_list`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

from ..storage import MetacanStorage, default_data_dir
from ..student.list_input import BATCH_SIZE, ListInputError, read_list
from ..student.score_list import ScoringUnavailable, open_scorer, output_format, rejects_path, score_file
from .options import DATA_DIR_HELP

#: Rejected rows echoed to stderr one by one; past this, one line counts the rest (all are in the rejects file).
ECHO_REJECTS = 100


def score(
    input_path: Annotated[
        Path,
        typer.Argument(
            metavar="INPUT",
            help="A CSV or JSON Lines of id,title rows (optional venue, topic, field, type, keywords, language), or "
            "OpenAlex work records (.json, .json.gz, .jsonl, .gz, .tar/.tgz, or a snapshot folder).",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output file: .csv, .jsonl or .parquet.")],
    model_version: Annotated[
        str | None,
        typer.Option(
            help="A registered model version (default: the one the current student_scores were written with)."
        ),
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Works read, scored and written at a time.")] = BATCH_SIZE,
    data_dir: Annotated[str | None, typer.Option(help=DATA_DIR_HELP)] = None,
) -> None:
    """Score a list of works (a reading list, a venue's output, a grant portfolio) with the published student.

    Writes one row per usable input work, in input order: id; per source (teacher or reference set) and binary head
    `<source>:<head>` (score in [0, 1]) and `<source>:<head>:percentile` (within the current frame's scores of that
    head; both empty for a head that gives no score, its reason on stderr); per categorical head its most probable class and `:probability`; model_version and validation_status
    (machine_predicted_unvalidated: scores rank, they assert nothing). Rows that cannot be scored (no id, empty
    title, not JSON, wrong types, duplicate id) are named on stderr and written to OUT.rejects.csv; OpenAlex records
    of other entities (authors, institutions, ... in a folder of records) are counted on stderr as skipped.
    Exit status 2 when the input is unusable or holds no usable row, 1 when there is no model to score with.
    """
    try:
        output_format(out)
        if any(
            p.resolve() == input_path.resolve() or (p.exists() and input_path.exists() and p.samefile(input_path))
            for p in (out, rejects_path(out))
        ):  # a link of any kind to the input counts as the input
            raise ValueError(f"--out {out} would overwrite the input {input_path}: give another output file")
        skipped: Counter = Counter()
        items = read_list(input_path, skipped)
    except (ListInputError, ValueError) as exc:
        typer.echo(f"metacan score: {exc}", err=True)
        raise typer.Exit(2) from None
    storage = MetacanStorage(data_dir=data_dir or default_data_dir())
    try:
        scorer = open_scorer(storage, model_version)
    except ScoringUnavailable as exc:
        typer.echo(f"metacan score: {exc}", err=True)
        raise typer.Exit(1) from None
    if scorer.percentile_note:
        typer.echo(f"metacan score: {scorer.percentile_note}", err=True)
    for line in scorer.no_score_lines():
        typer.echo(f"metacan score: {line}", err=True)
    echoed = 0

    def on_reject(r) -> None:
        nonlocal echoed
        echoed += 1
        if echoed <= ECHO_REJECTS:
            typer.echo(f"metacan score: {input_path.name}: {r.line()}", err=True)

    try:
        result = score_file(scorer, items, out, batch_size, on_reject=on_reject)
    except OSError as exc:
        typer.echo(f"metacan score: cannot write {out} ({exc.strerror or exc}): give a writable --out", err=True)
        raise typer.Exit(2) from None
    if skipped:
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(skipped.items()))
        typer.echo(
            f"metacan score: skipped {skipped.total()} OpenAlex records of other entities (not works): {kinds}",
            err=True,
        )
    if result.rejects > ECHO_REJECTS:
        typer.echo(f"metacan score: ... and {result.rejects - ECHO_REJECTS} more rejected rows", err=True)
    if result.rejects:
        typer.echo(f"metacan score: {result.rejects} rejected rows written to {result.rejects_file}", err=True)
    if result.works == 0:
        typer.echo(
            f"metacan score: {input_path} holds no usable row ({result.rejects} rejected, see "
            f"{rejects_path(out) if result.rejects else 'the input'}): {out} not written",
            err=True,
        )
        raise typer.Exit(2)
    typer.echo(f"scored {result.works} works with {result.model_version} into {out}")
