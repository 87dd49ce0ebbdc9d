"""The ``metacan`` command: run the whole graph in-process and print what it produced.

``metacan run`` materializes every asset and check on the configured inputs (the embedded Gemma teacher by default)
and then prints the run summary (:mod:`.run_summary`); ``metacan summary`` prints it again. Runs are recorded in the
Dagster instance under ``$DAGSTER_HOME`` (default ``<data dir>/dagster_home``), so ``dagster dev`` over the same
folder shows them.

One module per command group, each only parsing arguments, calling the stages and printing (:data:`COMMANDS`):
:mod:`.run`, :mod:`.summary` (its text in :mod:`.run_summary`), :mod:`.dev`, :mod:`.lineage`,
:mod:`.serve`, :mod:`.release`, :mod:`.labels` (``import-labels``), :mod:`.fetch` (the OpenAlex API harvest),
:mod:`.entity_list` (the pinned Canadian entity lists),
:mod:`.retraction` (``fetch-retraction-watch``),
:mod:`.pilot` (``evaluate-pilot``), :mod:`.score` (a list of works scored by the published student), and the audit study's groups :mod:`.coders` and :mod:`.coding`.

A command's module is imported when that command runs or shows its own help: most of them load Dagster and the
stages (seconds), and ``metacan --help`` lists every command from its docstring, read from the module's source.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path
from typing import Any

import click
import typer
from typer.core import TyperGroup

#: ``(command, "<module of this package>:<function, or a typer.Typer of a command group>")``, in the order
#: ``metacan --help`` lists them.
COMMANDS = (
    ("dev", "dev:dev"),
    ("run", "run:run"),
    ("lineage", "lineage:lineage"),
    ("serve", "serve:serve"),
    ("summary", "summary:summary"),
    ("release", "release:release"),
    ("verify-release", "release:verify_release"),
    ("import-labels", "labels:import_labels"),
    ("fetch", "fetch:fetch"),
    ("entity-list", "entity_list:entity_list"),
    ("fetch-retraction-watch", "retraction:fetch_retraction_watch"),
    ("evaluate-pilot", "pilot:evaluate_pilot"),
    ("score", "score:score"),
    ("build-encoders", "encoders:build_encoders"),
    ("coders", "coders:app"),
    ("coding", "coding:app"),
)


@functools.cache
def _source(module: str) -> ast.Module:
    """The parsed source of ``metacan_pipeline/cli/<module>.py``."""
    return ast.parse(Path(__file__).with_name(f"{module}.py").read_text(encoding="utf-8"))


def listed_help(target: str) -> str:
    """The help of ``target`` (``module:name``) as typer would take it, read from the module's source without
    importing it: a function's docstring, or the ``help=`` of a ``typer.Typer(...)`` assigned to the name."""
    module, name = target.split(":")
    for node in _source(module).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_docstring(node) or ""
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return next(ast.literal_eval(k.value) for k in node.value.keywords if k.arg == "help")
    raise LookupError(
        f"{target}: no function or typer.Typer(help=...) of that name in metacan_pipeline/cli/{module}.py"
    )


class LazyCommand(click.Command):
    """A command listed by name and help; its module is imported the first time it parses arguments."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, help=listed_help(target))
        self.target = target

    @functools.cached_property
    def loaded(self) -> click.Command:
        """The command itself: the group of a ``typer.Typer``, or a function as a one-command typer."""
        module, name = self.target.split(":")
        # imported here on purpose: the command's module loads Dagster and the stages, which `--help` never needs
        obj = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        if isinstance(obj, typer.Typer):
            return typer.main.get_command(obj)
        one = typer.Typer(add_completion=False)
        one.command(self.name)(obj)
        return typer.main.get_command(one)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any):
        return self.loaded.make_context(info_name, args, parent=parent, **extra)


class Commands(TyperGroup):
    """The ``metacan`` group: every command of :data:`COMMANDS` as a :class:`LazyCommand`."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, target in COMMANDS:
            self.add_command(LazyCommand(name, target), name)


app = typer.Typer(
    cls=Commands, add_completion=False, help="metacan_pipeline: map Canadian meta-research from OpenAlex."
)


@app.callback()
def _group() -> None:
    # no options of its own: a callback makes `app` a group, whose commands come from `Commands`
    pass


#: How a bad setting's error begins (settings.py and the teacher registry name the variable or the file): said in
#: one sentence, never a traceback, wherever the definitions read it.
SETTING_ERRORS = ("METACAN_", "teacher registry ")


def main() -> None:  # pragma: no cover - console entry
    try:
        app()
    except ValueError as exc:
        if not str(exc).startswith(SETTING_ERRORS):
            raise
        hint = " (the file $METACAN_TEACHERS_FILE names)" if str(exc).startswith("teacher registry ") else ""
        typer.echo(f"metacan: {exc}{hint}; fix the setting (docs/configuration.md) and run again", err=True)
        raise SystemExit(2) from None
