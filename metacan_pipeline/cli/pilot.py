"""``metacan evaluate-pilot``: the student's metaresearch head on the MetaCan pilot labels, under grouped CV."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import settings
from ..student import pilot_eval
from ..student.pilot_eval import PILOT_SETS, PilotEvaluation, format_table, pilot_works
from ..student.pilot_frame1k import Frame1kEvaluation, evaluate_frame1k, format_frame1k_table, frame1k_works
from ..teachers.core.reference import FRAME1K_ARMS


def evaluate_pilot(
    features: Annotated[
        list[str] | None,
        typer.Option(
            help="Feature backend: tfidf, minilm, minilm-onnx, static, meta, or several joined by '+' "
            "(e.g. static+tfidf+meta); repeat for several. Default tfidf."
        ),
    ] = None,
    labels: Annotated[
        list[str] | None,
        typer.Option(
            help="Whose labels (repeat for several). Set screening: a (claude-sonnet-4-6) or b (gpt-5.6-sol), default both. "
            "Set frame1k: opus_r1, codex_r1, grok_r1 or adjudicated, default all four."
        ),
    ] = None,
    pilot_set: Annotated[
        str,
        typer.Option(
            "--set",
            help="screening: the earlier two-screener pilot (no venues: groups are titles); "
            "frame1k: the three-arm sample whose works name their venue (groups are venues).",
        ),
    ] = "screening",
    works: Annotated[
        str | None,
        typer.Option(
            help="Set screening only. joined: the labels_joined.json works (design-weighted, default); "
            "all: every work screener b labelled (unweighted)."
        ),
    ] = None,
    unweighted: Annotated[
        bool, typer.Option(help="Ignore the design weights (fit and metrics). frame1k has none.")
    ] = False,
    folds: Annotated[
        int,
        typer.Option(
            help="Grouped CV folds (fewer if fewer groups; for frame1k also if fewer venue groups hold a positive)."
        ),
    ] = 5,
    pilot_dir: Annotated[
        str | None,
        typer.Option(help="MetaCan pilot folder (default $METACAN_PILOT_DIR or ../shared/data/metacan_pilot)."),
    ] = None,
) -> None:
    """AP and AUROC of the student's metaresearch head trained on the MetaCan pilot labels, under grouped CV.

    One line per labels x feature backend; see metacan_pipeline/student/pilot_eval.py for how the
    pilot's fields map to ours (labels, title-only text, groups, design weights) in either set.
    """
    folder = Path(pilot_dir or settings.pilot_dir())
    if not folder.is_dir():
        typer.echo(f"pilot folder {folder.resolve()} not found: pass --pilot-dir or set $METACAN_PILOT_DIR", err=True)
        raise typer.Exit(2)
    if pilot_set not in PILOT_SETS:
        typer.echo(f"evaluate-pilot: --set {pilot_set!r}: expected one of {', '.join(PILOT_SETS)}", err=True)
        raise typer.Exit(2)
    if pilot_set == "frame1k":
        if works is not None:
            typer.echo(
                "evaluate-pilot: --works applies to --set screening only (frame1k evaluates all its 750 works)",
                err=True,
            )
            raise typer.Exit(2)
        _evaluate_frame1k(folder, features or ["tfidf"], labels, folds)
        return
    works = works or "joined"
    results = []
    try:
        for screener in labels or ["a", "b"]:
            for kind in features or ["tfidf"]:
                results.append(
                    pilot_eval.evaluate_pilot(
                        folder, kind, screener, works, weighted=False if unweighted else None, folds=folds
                    )
                )
    except (ValueError, ImportError) as exc:
        typer.echo(f"evaluate-pilot: {exc}", err=True)
        raise typer.Exit(2) from None
    _, dropped = pilot_works(folder)
    typer.echo(format_table(results))
    typer.echo(pilot_note(results[0], dropped))


def _evaluate_frame1k(folder: Path, features: list[str], labels: list[str] | None, folds: int) -> None:
    results = []
    try:
        for arm in labels or list(FRAME1K_ARMS):
            for kind in features:
                results.append(evaluate_frame1k(folder, kind, arm, folds=folds))
    except (ValueError, ImportError, FileNotFoundError) as exc:
        typer.echo(f"evaluate-pilot: {exc}", err=True)
        raise typer.Exit(2) from None
    works, dropped = frame1k_works(folder)
    typer.echo(format_frame1k_table(results))
    typer.echo(frame1k_note(len(works), results[0], dropped))
    for r in results:
        if r.note:
            typer.echo(f"{r.arm} / {r.features}: {r.note}")


def pilot_note(r: PilotEvaluation, dropped: dict[str, int]) -> str:
    """The note under ``metacan evaluate-pilot --set screening``: what pos.rate means, how works were
    grouped and what was left out. ``r``: the first result; ``dropped``: from ``pilot_works``."""
    return (
        f"\npos.rate: (weighted) share of positives, AP's chance level. Groups: {r.without_venue} of {r.n} works name no venue "
        f"(no pilot work record does) and are grouped by title: {r.in_shared_groups} works share a title group, the rest are "
        f"groups of one. Left out: {dropped['no_text_a']} works labelled by a and {dropped['no_text_b']} by b without saved "
        f"text, {dropped['empty_title']} with an empty title, {dropped['failed_labels']} label records that failed conversion."
    )


def frame1k_note(n_works: int, r: Frame1kEvaluation, dropped: dict[str, int]) -> str:
    """The note under ``metacan evaluate-pilot --set frame1k``: weights, CV groups by venue, the text used and
    what was left out. ``r``: the first result; ``dropped``: from ``frame1k_works``."""
    left = ", ".join(f"{k} {v}" for k, v in dropped.items() if v) or "nothing"
    return (
        f"\nframe1k: {n_works} works, unweighted (the files carry no selection probabilities); pos.rate: share of positives, "
        f"AP's chance level. CV grouped by venue: {r.venues} venues + {r.without_venue} works without a venue (one group each) "
        f"= {r.groups} groups; every venue in one test fold. Text: title | venue | topic | field | type | language, no abstract. "
        f"Feature seconds in parentheses: the matrix was computed once for an earlier line and reused. Left out: {left}."
    )
