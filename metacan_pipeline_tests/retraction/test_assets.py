"""The Retraction Watch assets through Dagster: the file read and archived, its join to the frame, "not checked"
without a file, a download from a loopback server."""

from __future__ import annotations

import functools
import http.server
import threading

import dagster as dg
import pyarrow as pa
import pytest

from metacan_pipeline.cli.retraction_summary import NOT_CHECKED_LINE, retraction_lines
from metacan_pipeline.retraction.assets import NOT_CONFIGURED_MESSAGE, retraction_watch, work_retractions
from metacan_pipeline.retraction.checks import work_retractions_within_frame, works_outside_frame
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline_tests.builders.common import metadata, root_error, sql
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.retraction.rw_files import rw_row, write_rw

#: The planted frame: work id -> (DOI as OpenAlex writes it, PubMed id, OpenAlex's is_retracted).
PLANTED = {
    "W101": ("https://doi.org/10.1016/j.cell.2019.01.001", None, False),  # RW: Retraction, DOI upper case -> missed
    "W102": ("https://doi.org/10.1000/concern.2", "31234567", False),  # RW: EoC by PubMed id only
    "W103": ("https://doi.org/10.1000/both.3", "29000003", True),  # RW: Retraction by DOI and PMID, OpenAlex knows
    "W104": ("https://doi.org/10.1000/reinstated.4", None, False),  # RW: Retraction then Reinstatement
    "W105": ("https://doi.org/10.1000/clean.5", "29000005", False),  # no notice
    "W106": (None, None, True),  # OpenAlex says retracted, RW has nothing to join on
}


def write_frame(storage, openalex_dir):
    base = real_frame_row(openalex_dir)
    rows = [
        {**base, "id": wid, "doi": doi, "pmid": pmid, "is_retracted": retracted}
        for wid, (doi, pmid, retracted) in PLANTED.items()
    ]
    storage.write_table("frame", pa.Table.from_pylist(rows, schema=FRAME_SCHEMA))


def write_notices(path):
    return write_rw(
        path,
        [
            rw_row(1, "Retraction", "HTTPS://DOI.ORG/10.1016/J.CELL.2019.01.001"),
            rw_row(
                2, "Expression of concern", "unavailable", "31234567", Reason="+Investigation by Journal/Publisher;"
            ),
            rw_row(3, "Retraction", "10.1000/BOTH.3", "29000003"),
            rw_row(4, "Retraction", "10.1000/reinstated.4", date="3/1/2019 0:00"),
            rw_row(5, "Reinstatement", "http://dx.doi.org/10.1000/reinstated.4", date="6/30/2020 0:00", Reason=""),
            rw_row(6, "Retraction", "10.9999/not-in-the-frame", "40000000"),  # never admitted
            rw_row(7, "Correction", "10.1000/clean.5", "0", date="2/30/2021 0:00"),  # malformed date: quarantined
        ],
    )


def materialize(storage):
    return dg.materialize(
        [retraction_watch, work_retractions, work_retractions_within_frame],
        resources={"storage": storage},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def test_joined_by_doi_and_pubmed_id_with_states_and_missed(storage, openalex_dir, tmp_path, monkeypatch):
    write_frame(storage, openalex_dir)
    monkeypatch.setenv("METACAN_RETRACTION_WATCH_FILE", str(write_notices(tmp_path / "retraction_watch.csv")))
    monkeypatch.delenv("METACAN_RETRACTION_WATCH_URL", raising=False)
    result = materialize(storage)
    assert result.success, root_error(result)
    got = sql(
        storage,
        "SELECT id, rw_record_id, retraction_state, matched_by, is_retracted, openalex_missed FROM work_retractions "
        "ORDER BY id, rw_record_id",
    )
    assert got == [
        ("W101", 1, "retraction", "doi", False, True),
        ("W102", 2, "expression_of_concern", "pmid", False, False),
        ("W103", 3, "retraction", "doi+pmid", True, False),
        ("W104", 4, "retraction", "doi", False, True),
        ("W104", 5, "reinstatement", "doi", False, False),
    ]
    [(line, rid, reason)] = sql(storage, "SELECT line, rw_record_id, reason FROM retraction_watch_quarantine")
    assert (line, rid) == (8, "7") and "2/30/2021" in reason
    [source] = sql(
        storage,
        "SELECT status, rw_version, rows, quarantined, data_through, sha256 FROM retraction_watch_source",
    )
    assert source[0] == "loaded" and source[1] == "rw-" + source[5][:12]
    assert source[2:5] == (6, 1, "2023-08-16")
    assert (storage.root / "retraction_watch" / f"{source[1]}.csv.gz").is_file()
    # W101 only: W104's retraction was lifted by its reinstatement
    assert metadata(result, "work_retractions")["openalex_missed_works"] == 1
    with storage.connect() as con:
        assert works_outside_frame(con) == 0
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        assert retraction_lines(con, views) == [
            f"Retraction Watch {source[1]} (notices through 2023-08-16; 6 notices, 1 rows quarantined): frame works "
            "retraction 2 (OpenAlex missed 1) | expression of concern 1 | correction 0 | reinstatement 1"
        ]
    assert sql(storage, "SELECT count(*) FROM retraction_watch WHERE original_pmid = '40000000'") == [(1,)]


def test_no_file_configured_means_not_checked_and_no_download(storage, openalex_dir, monkeypatch):
    write_frame(storage, openalex_dir)
    monkeypatch.delenv("METACAN_RETRACTION_WATCH_FILE", raising=False)
    monkeypatch.delenv("METACAN_RETRACTION_WATCH_URL", raising=False)
    result = materialize(storage)
    assert result.success, root_error(result)
    assert sql(storage, "SELECT status, rw_version, rows FROM retraction_watch_source") == [("not_configured", None, 0)]
    assert sql(storage, "SELECT count(*) FROM work_retractions") == [(0,)]
    assert metadata(result, "retraction_watch")["note"] == NOT_CONFIGURED_MESSAGE
    assert not (storage.root / "retraction_watch").exists()
    with storage.connect() as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        assert retraction_lines(con, views) == [NOT_CHECKED_LINE]
        assert retraction_lines(con, set()) == [NOT_CHECKED_LINE]


def test_a_file_that_is_not_the_export_fails_the_asset_naming_the_variable(storage, tmp_path, monkeypatch):
    bad = tmp_path / "other.csv"
    bad.write_text("doi,title\n10.1/a,A\n", "utf-8")
    monkeypatch.setenv("METACAN_RETRACTION_WATCH_FILE", str(bad))
    result = dg.materialize(
        [retraction_watch],
        resources={"storage": storage},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    assert "METACAN_RETRACTION_WATCH_FILE" in root_error(result) and "lacks Record ID" in root_error(result)


@pytest.fixture()
def loopback_files(tmp_path):
    """A real HTTP server on loopback serving ``tmp_path / 'served'`` (with Last-Modified, as a file server does)."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_downloaded_from_the_configured_url_and_archived(storage, openalex_dir, loopback_files, monkeypatch):
    folder, base = loopback_files
    write_frame(storage, openalex_dir)
    write_notices(folder / "retraction_watch.csv")
    monkeypatch.delenv("METACAN_RETRACTION_WATCH_FILE", raising=False)
    monkeypatch.setenv("METACAN_RETRACTION_WATCH_URL", f"{base}/retraction_watch.csv?you@example.org")
    result = materialize(storage)
    assert result.success, root_error(result)
    [(status, src, file_date, rows)] = sql(
        storage, "SELECT status, source, file_date, rows FROM retraction_watch_source"
    )
    assert (status, src, rows) == ("loaded", f"{base}/retraction_watch.csv", 6)  # no query string kept
    assert file_date is not None and file_date.endswith("+00:00")  # the server's Last-Modified
    assert sql(storage, "SELECT count(*) FROM work_retractions") == [(5,)]


def test_a_url_that_gives_no_file_fails_naming_it(storage, loopback_files, monkeypatch):
    _, base = loopback_files
    monkeypatch.delenv("METACAN_RETRACTION_WATCH_FILE", raising=False)
    monkeypatch.setenv("METACAN_RETRACTION_WATCH_URL", f"{base}/missing.csv")
    result = dg.materialize(
        [retraction_watch],
        resources={"storage": storage},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    msg = root_error(result)
    assert f"{base}/missing.csv" in msg and "HTTP 404" in msg and "METACAN_RETRACTION_WATCH_FILE" in msg


def test_a_frame_built_before_it_kept_pubmed_ids_is_refused_saying_to_rebuild_it(
    storage, openalex_dir, tmp_path, monkeypatch
):
    base = real_frame_row(openalex_dir)
    old = pa.Table.from_pylist([{**base, "id": "W1"}], schema=FRAME_SCHEMA).drop_columns(["pmid"])
    storage.write_table("frame", old)
    monkeypatch.setenv("METACAN_RETRACTION_WATCH_FILE", str(write_notices(tmp_path / "retraction_watch.csv")))
    result = materialize(storage)
    assert not result.success
    assert "built before it kept PubMed ids" in root_error(result) and "rebuild the frame" in root_error(result)
