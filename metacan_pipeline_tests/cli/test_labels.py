"""Tests of ``metacan import-labels``."""

from typer.testing import CliRunner

from metacan_pipeline.cli import app
from metacan_pipeline.storage import MetacanStorage


def test_import_labels_refuses_a_registry_teachers_name(tmp_path):
    labels = tmp_path / "l.jsonl"
    labels.write_text(
        '{"id": "W1", "categories": [], "domain": null, "study_design": "observational", "genre": "empirical", '
        '"about_ca_system": false, "about_ca_topic": false, "confidence": "high", "reason": "x"}\n'
    )
    result = CliRunner().invoke(
        app,
        [
            "import-labels",
            str(labels),
            "--teacher",
            "gemma",
            "--model",
            "m",
            "--prompt-version",
            "p",
            "--source",
            "s",
            "--data-dir",
            str(tmp_path / "data"),
        ],
    )
    assert result.exit_code == 2 and "registry teacher's name" in result.output
    assert not (tmp_path / "data" / "metacan.duckdb").exists()


def test_import_labels_names_an_unreadable_file_and_what_to_give_instead(tmp_path):
    labels = tmp_path / "truncated.json"
    labels.write_text('[{"id": "W1", "categ')
    result = CliRunner().invoke(
        app,
        ["import-labels", str(labels), "--teacher", "ext_x", "--model", "m", "--prompt-version", "p", "--source", "s",
         "--data-dir", str(tmp_path / "data")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert f"metacan import-labels: {labels}: not a JSON array" in result.output
    assert "give a JSON array of label objects" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_import_labels_stores_the_titles_a_reference_set_trains_on(tmp_path):
    labels = tmp_path / "study.jsonl"
    labels.write_text(
        '{"id": "W77", "title": "Peer review of <i>grant</i> proposals", "venue": "Research Policy", "sel_prob": 0.5, '
        '"categories": ["metaresearch"], "domain": "evaluation", "study_design": "observational", '
        '"genre": "empirical", "about_ca_system": true, "about_ca_topic": false, "confidence": "high", "reason": "x"}\n'
        '{"id": "W78", "categories": [], "domain": null, "study_design": "observational", "genre": "empirical", '
        '"about_ca_system": false, "about_ca_topic": false, "confidence": "high", "reason": "no title here"}\n'
    )
    data = tmp_path / "data"
    args = ["import-labels", str(labels), "--teacher", "our_study", "--model", "people", "--prompt-version", "p",
            "--source", "our earlier study", "--data-dir", str(data)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 work titles stored for the student (reference set our_study)" in result.output
    with MetacanStorage(data_dir=str(data)).connect() as con:
        rows = con.execute("SELECT work_id, title_text, venue_name FROM reference_texts").fetchall()
    assert rows == [("W77", "Peer review of grant proposals", "Research Policy")]
