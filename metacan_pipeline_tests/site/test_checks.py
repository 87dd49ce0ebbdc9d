"""The blocking check on the release database (site/checks.py): it passes on a release built from the published
records, and fails, naming the work, when the records and the release hold different works or the FTS5 index misses
a work."""

from __future__ import annotations

import shutil
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq

from metacan_pipeline.site.build.release import current_release_id, index_path, releases_dir
from metacan_pipeline.site.checks import release_problems, site_database_matches_records
from metacan_pipeline.site.definitions import defs


def _records(storage):
    return storage.table_dir("work_records") / "*.parquet"


def _ids(storage) -> list[str]:
    return sorted(pq.read_table(storage.table_dir("work_records"), columns=["id"]).column("id").to_pylist())


def _copy(site_release, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(releases_dir(site_release[0].root), releases_dir(data))
    return data


def test_a_release_built_from_the_records_passes(site_release):
    storage = site_release[0]
    works, problems = release_problems(storage.root, _records(storage))
    assert works == len(_ids(storage))
    assert problems == []


def test_a_record_missing_from_the_release_fails_naming_it(site_release, tmp_path):
    storage = site_release[0]
    records = tmp_path / "records.parquet"
    pq.write_table(pa.table({"id": [*_ids(storage), "W9999999999"]}), records)
    _, problems = release_problems(storage.root, records)
    assert len(problems) == 1
    assert "1 published records are not works of" in problems[0]
    assert "W9999999999" in problems[0]


def test_a_work_that_is_no_published_record_fails_naming_it(site_release, tmp_path):
    storage = site_release[0]
    ids = _ids(storage)
    records = tmp_path / "records.parquet"
    pq.write_table(pa.table({"id": ids[1:]}), records)
    _, problems = release_problems(storage.root, records)
    assert len(problems) == 1
    assert f"1 works of {current_release_id(storage.root)} are not published records (the first: {ids[0]})" in problems


def test_an_index_missing_a_work_fails(site_release, tmp_path):
    data = _copy(site_release, tmp_path)
    with sqlite3.connect(index_path(data, current_release_id(data))) as con:
        con.execute("DELETE FROM work_keys WHERE rowid_ = (SELECT max(rowid_) FROM work_keys)")
    _, problems = release_problems(data, _records(site_release[0]))
    assert len(problems) == 1
    assert "the FTS5 index of" in problems[0]
    assert "rows of" in problems[0]


def test_an_unreadable_index_fails(site_release, tmp_path):
    data = _copy(site_release, tmp_path)
    index_path(data, current_release_id(data)).write_bytes(b"not an index")
    _, problems = release_problems(data, _records(site_release[0]))
    assert len(problems) == 1
    assert "cannot be read" in problems[0]


def test_the_check_is_a_blocking_check_of_site_database_in_the_stage_definitions():
    spec = next(iter(site_database_matches_records.check_specs))
    assert spec.asset_key.path == ["site_database"]
    assert spec.blocking
    assert site_database_matches_records in defs.asset_checks
