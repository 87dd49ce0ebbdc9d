"""Reading the Retraction Watch export: the real header and quirks, the quarantine, the archive."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from metacan_pipeline.retraction.join import work_state
from metacan_pipeline.retraction.notices import RetractionWatchFileError, read_notices
from metacan_pipeline.retraction.source import archive, from_file
from metacan_pipeline_tests.retraction.rw_files import rw_row, write_rw


def quirky_file(tmp_path):
    return write_rw(
        tmp_path / "retraction_watch.csv",
        [
            rw_row(
                51234,
                "Retraction",
                "HTTPS://DOI.ORG/10.1016/J.CELL.2019.01.001",
                "0",
                Notes='See also: "the notice", and\na second line',
            ),
            rw_row(
                51235,
                "Expression of concern",
                "unavailable",
                "31234567",
                date="1/2/2020 0:00",
                Reason="+Investigation by Journal/Publisher;",
            ),
            rw_row(51236, "Correction", "10.1/bad-date", "0", date="13/45/2020 0:00"),
            rw_row(51237, "Reinstatement", "doi:10.5555/Reinstated.7", "0", date="12/31/2022 0:00", Reason=""),
            rw_row(51238, "Retraction ", "10.1/nature-with-space", "0"),
            rw_row("x51239", "Retraction", "10.1/not-a-number", "0"),
        ],
    )


def test_reads_the_real_quirks(tmp_path):
    notices, quarantine = read_notices(quirky_file(tmp_path), "rw-test")
    rows = {r["rw_record_id"]: r for r in notices.to_pylist()}
    assert sorted(rows) == [51234, 51235, 51237]
    first = rows[51234]
    assert first["title"] == "Paper 51234, with a comma"
    assert first["retraction_nature"] == "Retraction" and first["retraction_state"] == "retraction"
    assert first["retraction_reasons"] == ["Concerns/Issues About Data", "Unreliable Results"]
    assert first["retraction_date"] == "2023-08-16" and first["original_date"] == "2021-09-24"
    assert first["original_doi"] == "10.1016/j.cell.2019.01.001"  # upper case with https://doi.org/ prefix
    assert first["original_pmid"] is None and first["notice_pmid"] is None  # PubMed id 0: none
    assert first["notice_doi"] == "10.1155/2023/9851234"
    assert first["rw_version"] == "rw-test"
    concern = rows[51235]
    assert concern["retraction_state"] == "expression_of_concern"
    assert concern["original_doi"] is None  # "unavailable"
    assert concern["original_pmid"] == "31234567"
    assert concern["retraction_reasons"] == ["Investigation by Journal/Publisher"]
    assert concern["retraction_date"] == "2020-01-02"
    reinstated = rows[51237]
    assert reinstated["original_doi"] == "10.5555/reinstated.7" and reinstated["retraction_reasons"] == []
    # nothing silently dropped: every refused row is in the quarantine with its row number (header = 1) and why
    refused = {r["line"]: r for r in quarantine.to_pylist()}
    assert sorted(refused) == [4, 6, 7]
    assert refused[4]["rw_record_id"] == "51236" and "RetractionDate" in refused[4]["reason"]
    assert "13/45/2020" in refused[4]["reason"]
    assert refused[6]["rw_record_id"] == "51238" and "RetractionNature" in refused[6]["reason"]
    assert refused[7]["rw_record_id"] == "x51239" and "Record ID" in refused[7]["reason"]
    assert notices.num_rows + quarantine.num_rows == 6


def test_a_row_with_too_many_cells_is_quarantined(tmp_path):
    path = write_rw(tmp_path / "rw.csv", [rw_row(1, "Retraction", "10.1/a"), rw_row(2, "Correction", "10.1/b")])
    text = path.read_bytes().decode("utf-8").split("\r\n")
    text[2] += ",an extra cell"
    path.write_bytes("\r\n".join(text).encode("utf-8"))
    notices, quarantine = read_notices(path, "rw-x")
    assert notices.column("rw_record_id").to_pylist() == [1]
    [row] = quarantine.to_pylist()
    assert row["line"] == 3 and row["rw_record_id"] == "2" and "TOO MANY COLUMNS" in row["reason"]


def test_a_file_that_is_not_the_export_is_refused_naming_what_is_missing(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("doi,title\n10.1/a,A\n", "utf-8")
    with pytest.raises(RetractionWatchFileError, match="lacks Record ID, .*RetractionNature"):
        read_notices(path, "rw-x")


def test_archive_is_named_by_content_hash_and_kept_once(tmp_path):
    src = quirky_file(tmp_path)
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    first = from_file(src, tmp_path / "archive")
    assert first.rw_version == f"rw-{sha[:12]}" and first.sha256 == sha and first.bytes == src.stat().st_size
    assert gzip.decompress(first.path.read_bytes()) == src.read_bytes()
    meta = json.loads((tmp_path / "archive" / f"{first.rw_version}.json").read_text())
    assert meta["source"] == str(src) and meta["sha256"] == sha
    again = archive(src, tmp_path / "archive", "elsewhere", "2030-01-01T00:00:00+00:00", None)
    assert again.source == str(src) and again.retrieved_at == first.retrieved_at  # the first retrieval stays
    assert sorted(p.name for p in (tmp_path / "archive").iterdir()) == [
        f"{first.rw_version}.csv.gz",
        f"{first.rw_version}.json",
    ]
    # the archived (gzip) copy reads to the same notices
    assert read_notices(first.path, "v")[0].equals(read_notices(src, "v")[0])


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([], "none"),
        (["retraction"], "retraction"),
        (["retraction", "reinstatement"], "reinstatement"),
        (["reinstatement", "retraction"], "retraction"),
        (["expression_of_concern", "retraction"], "retraction"),
        (["correction", "expression_of_concern"], "expression_of_concern"),
        (["expression_of_concern", "reinstatement"], "reinstatement"),
        (["retraction", "reinstatement", "expression_of_concern"], "expression_of_concern"),
        (["correction", "correction"], "correction"),
    ],
)
def test_work_state(states, expected):
    assert work_state([{"retraction_state": s} for s in states]) == expected


def test_an_archived_copy_given_back_is_the_same_version(tmp_path):
    src = quirky_file(tmp_path)
    first = from_file(src, tmp_path / "archive")
    again = from_file(first.path, tmp_path / "elsewhere")
    assert again.rw_version == first.rw_version and again.sha256 == first.sha256 and again.bytes == first.bytes
    assert again.path.read_bytes() == first.path.read_bytes()
    assert read_notices(again.path, "v")[0].equals(read_notices(src, "v")[0])


def test_the_fetch_command_archives_a_local_copy_and_says_how_to_read_it(tmp_path):
    from typer.testing import CliRunner

    from metacan_pipeline.cli import app

    src = quirky_file(tmp_path)
    result = CliRunner().invoke(app, ["fetch-retraction-watch", "--file", str(src), "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    version = "rw-" + hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    assert f"{version}: 3 notices, 3 rows quarantined, from {src}" in result.output
    assert f"METACAN_RETRACTION_WATCH_FILE={tmp_path / 'd' / 'retraction_watch' / version}.csv.gz" in result.output
    missing = CliRunner(env={"METACAN_RETRACTION_WATCH_URL": ""}).invoke(
        app, ["fetch-retraction-watch", "--data-dir", str(tmp_path / "d")]
    )
    assert missing.exit_code == 2 and "give --url, --file or METACAN_RETRACTION_WATCH_URL" in missing.output


def test_a_header_name_with_a_quote_is_read_as_a_name(tmp_path):
    path = write_rw(tmp_path / "rw.csv", [rw_row(1, "Retraction", "10.1/a")])
    text = path.read_bytes().decode("utf-8").split("\r\n")
    text[0] += ",Editor's note"
    text[1] += ",x"
    path.write_bytes("\r\n".join(text).encode("utf-8"))
    notices, quarantine = read_notices(path, "v")
    assert notices.column("rw_record_id").to_pylist() == [1] and quarantine.num_rows == 0
