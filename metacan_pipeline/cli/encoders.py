"""``metacan build-encoders``: the student's encoder files, built once per machine from the bundled MiniLM weights."""

from __future__ import annotations

from typing import Annotated

import typer

from ..student import encoders


def build_encoders(
    backend: Annotated[
        list[str] | None,
        typer.Option(
            help=f"Which encoder to build (repeat for several): {', '.join(encoders.ARTIFACT_BACKENDS)}. Default all."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Build again even when the cache holds the artifact.")] = False,
) -> None:
    """Build the student's encoders (minilm-onnx: int8 ONNX; static: model2vec distilled) from the bundled MiniLM
    weights into $METACAN_ENCODERS_DIR (default ~/.cache/metacan/encoders); an artifact already built for the same
    weights and library versions is kept (`make setup` runs this)."""
    names = tuple(backend or encoders.ARTIFACT_BACKENDS)
    bad = [n for n in names if n not in encoders.ARTIFACT_BACKENDS]
    if bad:
        typer.echo(
            f"build-encoders: unknown backend {', '.join(bad)}: expected {', '.join(encoders.ARTIFACT_BACKENDS)}",
            err=True,
        )
        raise typer.Exit(2)
    for row in encoders.build_all(names, force=force):
        what = "built" if row["built"] else "already built"
        typer.echo(f"{row['backend']}: {what} in {row['build_seconds']} s: {row['path']}")
