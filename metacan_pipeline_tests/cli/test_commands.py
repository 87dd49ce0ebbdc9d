"""Tests of the ``metacan`` group: every command listed from its docstring, its module imported when it runs."""

import os
import subprocess
import sys

import pytest
import typer

from metacan_pipeline.cli import COMMANDS, LazyCommand, app


def test_the_listed_help_of_every_command_is_the_help_of_the_command_itself():
    group = typer.main.get_command(app)
    assert group.list_commands(None) == [name for name, _ in COMMANDS]
    for name, _ in COMMANDS:
        listed = group.get_command(None, name)
        assert isinstance(listed, LazyCommand) and listed.help, name
        assert listed.help == listed.loaded.help, name


def test_metacan_help_lists_every_command_without_loading_dagster_or_the_stages():
    code = (
        "import sys\n"
        "from metacan_pipeline.cli import app\n"
        "try:\n"
        "    app(['--help'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "loaded = sorted(m for m in sys.modules if m == 'dagster' or m.startswith('metacan_pipeline.'))\n"
        "print('LOADED', loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for name, _ in COMMANDS:
        assert f" {name} " in out, name
    assert "LOADED ['metacan_pipeline.cli']" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["summary"], "Nothing to summarise in"),
        (["coders", "list"], "No coders yet"),
        (["coding", "backup", "{tmp}/backup.sqlite"], "no coding store at"),
    ],
)
def test_summary_and_coding_commands_answer_whatever_the_registry_and_inputs_hold(tmp_path, args, expected):
    """`metacan summary`, `coders` and `coding` read neither the teacher registry nor the OpenAlex inputs: with an
    invalid registry file and an input setting naming no folder they still give their own answer, not a traceback."""
    registry = tmp_path / "teachers.toml"
    registry.write_text("not toml [[\n")
    env = {
        **os.environ,
        "METACAN_TEACHERS_FILE": str(registry),
        "METACAN_OPENALEX_DIR": ":",
        "METACAN_DATA_DIR": str(tmp_path / "data"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "metacan_pipeline.cli", *(a.replace("{tmp}", str(tmp_path)) for a in args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    assert expected in out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"METACAN_PUBLICATION_REFRESH": "maybe"}, "metacan: METACAN_PUBLICATION_REFRESH='maybe' must be on or off"),
        ({"METACAN_TEACHERS_FILE": "/etc/passwd"}, "metacan: teacher registry /etc/passwd: not valid TOML"),
    ],
    ids=["publication-refresh", "teachers-file"],
)
def test_a_bad_setting_read_when_the_definitions_load_is_one_sentence_and_exit_2(env, said):
    out = subprocess.run(
        [sys.executable, "-m", "metacan_pipeline.cli", "run", "--help"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(said) and "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1
