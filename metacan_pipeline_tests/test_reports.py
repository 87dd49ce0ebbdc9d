"""Tests of metacan_pipeline.reports (cli.py before the split): the run summary."""


def test_summary_before_any_run_says_what_to_do_and_creates_nothing(tmp_path):
    from typer.testing import CliRunner

    from metacan_pipeline.cli import app

    result = CliRunner().invoke(app, ["summary", "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 1 and "no frame has been built there yet. Run `make run`" in result.output
    assert not (tmp_path / "data").exists()
