"""Tests of metacan_pipeline.site.build.build and the site_database asset: what a release database holds, checked
against the warehouse inputs and direct DuckDB queries; content-addressed release ids; what may not ship."""

from __future__ import annotations

import json
import shutil
import sqlite3

import duckdb
import pyarrow as pa
import pytest

from metacan_pipeline.site.build.build import RELEASE_STORAGE_VERSION
from metacan_pipeline.site.build.release import Release, ReleaseUnavailable, current_release_id, releases_dir
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline.tables.site import release_tables
from metacan_pipeline.tables.student import MACHINE_SCHEMA
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline_tests.builders.common import node_metadata
from metacan_pipeline_tests.builders.site import build_site, site_world


def _release_sql(storage, query, params=()):
    rid = current_release_id(storage.root)
    con = duckdb.connect(str(releases_dir(storage.root) / f"{rid}.duckdb"), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def _warehouse_sql(storage, query):
    con = duckdb.connect()
    for name in ("frame", "direct_labels_gemma", "direct_labels_codex", "predictions", "machine_scores"):
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{storage.table_dir(name)}/*.parquet')")
    return con.execute(query).fetchall()


def test_the_release_holds_every_published_work_and_its_evidence(site_release):
    storage, frame, result = site_release
    md = node_metadata(result, "site_database")
    rid = current_release_id(storage.root)
    assert md["release_id"] == rid and md["dagster/row_count"] == len(frame) == 60 and md["reused"] is False
    assert md["database_bytes"] > 0 and md["fts_index_bytes"] > 0
    # the tables are the catalog's, with its columns
    for table in release_tables():
        cols = _release_sql(
            storage,
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table.name],
        )
        assert [c[0] for c in cols] == table.schema.names, table.name
    # works: one per frame work, with the frame's values
    got = _release_sql(
        storage,
        "SELECT id, year, language, ca_aff, invisible_to_affiliation_only, has_abstract, is_retracted, cited_by FROM works ORDER BY id",
    )
    want = sorted(
        (
            r["id"],
            r["publication_year"],
            r["language"],
            r["ca_aff"],
            r["invisible_to_affiliation_only"],
            r["has_abstract"],
            r["is_retracted"],
            r["cited_by_count"],
        )
        for r in frame
    )
    assert got == want
    # one-to-many tables: one row per distinct non-empty name, as in the frame
    for table, column in (
        ("work_institutions", "ca_institutions"),
        ("work_funders", "funder_names"),
        ("work_keywords", "keywords"),
    ):
        got = _release_sql(storage, f"SELECT 'W' || work_key, name FROM {table} ORDER BY 1, 2")
        assert got == sorted({(r["id"], n) for r in frame for n in r[column] if n}), table
    # direct labels: every label row of both teachers, failed ones included, with status and qualification
    assert _release_sql(
        storage, "SELECT teacher, status, count(*) FROM work_labels GROUP BY ALL ORDER BY ALL"
    ) == _warehouse_sql(
        storage,
        "SELECT teacher, status, count(*) FROM (SELECT * FROM direct_labels_gemma UNION ALL SELECT * FROM direct_labels_codex) GROUP BY ALL ORDER BY ALL",
    )
    assert _release_sql(
        storage, "SELECT DISTINCT label_status, qualification, qualified FROM work_labels WHERE status = 'labelled'"
    ) == [("direct_label_unvalidated", "teacher not qualified: not tested yet", False)]
    # classifier decisions: one row per category in each mode, with prediction_status and the category's scores
    want = _warehouse_sql(
        storage,
        "SELECT 'candidate', sum(len(candidate_categories)) FROM predictions UNION ALL SELECT 'consensus', sum(len(consensus_categories)) FROM predictions ORDER BY 1",
    )
    assert _release_sql(storage, "SELECT mode, count(*) FROM work_decisions GROUP BY 1 ORDER BY 1") == want
    assert _release_sql(storage, "SELECT DISTINCT prediction_status FROM work_decisions") == [
        ("machine_predicted_unvalidated",)
    ]
    w8 = _release_sql(
        storage, "SELECT category, score_codex FROM work_decisions WHERE work_key = 7008 AND mode = 'consensus'"
    )
    assert w8 == [("metaepi_broad", 0.82)]  # CATEGORIES[8 % 3], category_scores_codex[2] = 0.8 + 2/100
    # machine scores: both arms per work, validation_status verbatim
    assert _release_sql(
        storage, "SELECT arm, count(*), min(validation_status) FROM work_scores GROUP BY 1 ORDER BY 1"
    ) == [
        ("codex", 60, "score_only:v0-immature-baseline"),
        ("gemma", 60, "score_only:v0-immature-baseline"),
    ]
    # the card kinds follow the record's precedence; works with no prediction live under works/unscored/
    kinds = dict(_release_sql(storage, "SELECT classification_kind, count(*) FROM works GROUP BY 1"))
    labelled = {i for i in range(60) if i % 3 == 0 and i != 9} | {i for i in range(60) if i % 5 == 0}  # W7009's failed
    assert kinds["direct"] == len(labelled) == 27 and sum(kinds.values()) == 60
    assert _release_sql(storage, "SELECT page_path FROM works WHERE id = 'W7010'") == [("works/unscored/W7010.html",)]


def test_no_abstract_text_reaches_the_release(site_release):
    storage, _, _ = site_release
    cols = _release_sql(
        storage,
        "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE column_name ILIKE '%abstract%' "
        "ORDER BY 1",
    )
    assert cols == [("work_facets", "has_abstract", "BOOLEAN"), ("works", "has_abstract", "BOOLEAN")]
    assert _release_sql(
        storage,
        "SELECT count(*) FROM works WHERE record_json ILIKE '%abstract_inverted_index%' OR record_json ILIKE '%restricted maximum likelihood%'",
    ) == [(0,)]


def test_the_release_stores_the_record_json_zstd_compressed(site_release):
    storage, _, _ = site_release
    assert _release_sql(storage, "SELECT tags['storage_version'] FROM duckdb_databases() WHERE NOT internal") == [
        (f"{RELEASE_STORAGE_VERSION}+",)
    ]
    kinds = _release_sql(
        storage,
        "SELECT DISTINCT compression FROM pragma_storage_info('works') WHERE column_name = 'record_json' "
        "AND segment_type = 'VARCHAR'",
    )
    assert kinds == [("ZSTD",)]


def test_every_release_table_holds_each_primary_key_once_and_only_works_keeps_an_index(site_release):
    storage, _, _ = site_release
    keyed = [t for t in release_tables() if t.primary_key]
    assert len(keyed) >= 20
    for table in keyed:
        key = ", ".join(table.primary_key)
        total, distinct = _release_sql(
            storage,
            f"SELECT count(*), (SELECT count(*) FROM (SELECT DISTINCT {key} FROM {table.name})) FROM {table.name}",
        )[0]
        assert total == distinct, table.name
    indexed = "SELECT table_name FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY'"
    assert _release_sql(storage, indexed) == [("works",)]


def test_the_fts_index_answers_titles_and_keywords(site_release):
    storage, frame, _ = site_release
    rid = current_release_id(storage.root)
    con = sqlite3.connect(releases_dir(storage.root) / f"{rid}.fts.sqlite")
    hits = {
        r[0]
        for r in con.execute(
            "SELECT k.work_key FROM work_text JOIN work_keys k ON k.rowid_ = work_text.rowid WHERE work_text MATCH '\"bibliometric\"'"
        )
    }
    assert hits == {int(r["id"][1:]) for r in frame if "Bibliometric" in r["title_text"]} and len(hits) == 12
    kw = {
        r[0]
        for r in con.execute(
            "SELECT k.work_key FROM work_text JOIN work_keys k ON k.rowid_ = work_text.rowid WHERE work_text MATCH '\"kw3\"'"
        )
    }
    assert kw == {int(r["id"][1:]) for r in frame if "kw3" in r["keywords"]}


def test_an_unchanged_rerun_reuses_the_release_and_a_changed_label_makes_a_new_one(tmp_path, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=12)
    assert build_site(storage).success
    first = current_release_id(storage.root)
    db = releases_dir(storage.root) / f"{first}.duckdb"
    before = db.stat().st_mtime_ns
    again = build_site(storage)
    assert node_metadata(again, "site_database")["reused"] is True and current_release_id(storage.root) == first
    assert db.stat().st_mtime_ns == before
    labels = storage.read_table("direct_labels_gemma").to_pylist()
    labels[0]["categories"] = ["open_science"]
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(labels, schema=LABELS_SCHEMA))
    assert build_site(storage).success
    second = current_release_id(storage.root)
    assert second != first and db.exists()  # the old release stays: citations name it
    assert Release(storage.root).info.release_id == second
    assert not [p for p in releases_dir(storage.root).iterdir() if p.name.startswith(".")]  # no temporary left
    body = json.loads((releases_dir(storage.root) / "current.json").read_text())
    assert body == {"release_id": second, "database": f"{second}.duckdb", "fts_index": f"{second}.fts.sqlite"}


def test_records_that_may_not_ship_never_reach_a_release(tmp_path, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    site_world(storage, openalex_dir, n=6)
    machine = storage.read_table("machine_scores").to_pylist()
    machine[0]["categories"] = ["metaresearch"]  # a score_only row carrying a category breaks SPEC section 8
    schema = MACHINE_SCHEMA.append(pa.field("categories", pa.list_(pa.string())))
    storage.write_table("machine_scores", pa.Table.from_pylist(machine, schema=schema))
    result = build_site(storage)
    assert not result.success
    assert "site_database" not in {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    with pytest.raises(ReleaseUnavailable, match="site_database"):
        Release(storage.root)


def test_a_frame_changed_after_the_records_stops_the_release_naming_the_work(tmp_path, openalex_dir):
    import dagster as dg

    from metacan_pipeline.site.assets import site_database

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    frame = site_world(storage, openalex_dir, n=6)
    assert build_site(storage).success
    shutil.rmtree(releases_dir(storage.root))  # no release of these records exists yet
    frame[2]["ca_institutions"] = ["Another University"]  # the frame is rebuilt, work_records is not
    storage.write_table("frame", pa.Table.from_pylist(frame, schema=FRAME_SCHEMA))
    result = dg.materialize([site_database], resources={"storage": storage}, raise_on_error=False)
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    assert "work W7002" in failure and "materialize work_records again" in failure


def test_the_run_summary_names_the_release_to_serve(site_release, tmp_path):
    from metacan_pipeline.cli.run_summary import release_lines

    storage = site_release[0]
    rid = current_release_id(storage.root)
    assert release_lines(storage.root) == [
        f"Release database: {releases_dir(storage.root) / (rid + '.duckdb')} (serve it: metacan serve, or make serve)"
    ]
    assert release_lines(tmp_path) == []


def _renumbered_copy(storage: MetacanStorage, dest, ids: dict[str, str]) -> MetacanStorage:
    """A copy of ``storage``'s warehouse under ``dest`` with the work ids renamed (``ids``: old -> new) in work_records
    (ids and record JSON) and the frame, the Parquet rows kept in their order (so no longer in work-key order)."""
    copy = MetacanStorage(data_dir=str(dest))
    shutil.copytree(storage.warehouse, copy.warehouse)
    records = copy.read_table("work_records").to_pylist()
    for r in records:
        for old, new in ids.items():
            r["record_json"] = r["record_json"].replace(f'"{old}"', f'"{new}"').replace(f"/{old}.", f"/{new}.")
        r["id"] = ids[r["id"]]
    copy.write_table("work_records", pa.Table.from_pylist(records, schema=storage.read_table("work_records").schema))
    frame = copy.read_table("frame").to_pylist()
    for f in frame:
        f["id"] = ids[f["id"]]
    copy.write_table("frame", pa.Table.from_pylist(frame, schema=FRAME_SCHEMA))
    return copy


def _tables(db) -> dict[str, list[tuple]]:
    """Every release table's rows in stored (rowid) order; facet_codes, inserted without an order, by its key;
    release_info without its build time."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for table in release_tables():
            cols = ", ".join(c for c in table.schema.names if c != "built_at")
            order = "facet, code" if table.name == "facet_codes" else "rowid"
            out[table.name] = con.execute(f"SELECT {cols} FROM {table.name} ORDER BY {order}").fetchall()
        return out
    finally:
        con.close()


def test_ranges_of_work_keys_change_no_table_and_every_table_is_in_work_key_order(site_release, tmp_path):
    from metacan_pipeline.site.build.build import build_release
    from metacan_pipeline.site.query.stored_counts import write_stored_counts

    storage, frame, _ = site_release
    # ids of 2 to 11 characters: their text order (the order of work_records) is not their key order
    ids = {f["id"]: f"W{(1, 1_000, 1_000_000, 4_000_000_000)[i % 4] + i}" for i, f in enumerate(frame)}
    ctx = {"frozen_release": None}
    one = build_release(
        _renumbered_copy(storage, tmp_path / "one", ids), ctx, write_stored_counts, chunk_works=1_000_000
    )
    # ranges of 7 works, a checkpoint every 2 ranges (at 4.3M works one every 400,000)
    many = build_release(
        _renumbered_copy(storage, tmp_path / "many", ids), ctx, write_stored_counts, chunk_works=7, checkpoint_works=14
    )
    assert one.release_id == many.release_id and one.row_counts["works"] == len(frame) == 60
    a, b = _tables(one.database), _tables(many.database)
    for name in a:
        assert a[name] == b[name], name
    assert sum(len(rows) for rows in a.values()) > 600 and len(a["work_scores"]) == 120
    keys = [r[0] for r in a["works"]]
    assert keys == sorted(keys) and sorted(keys) == sorted(int(i[1:]) for i in ids.values())
    for name in ("work_institutions", "work_funders", "work_keywords", "work_labels", "work_decisions", "work_scores"):
        assert a[name] == sorted(a[name], key=lambda r: tuple((x is None, x) for x in r[:2])), name


def test_the_first_mismatching_work_is_named_whatever_range_it_is_in(tmp_path, openalex_dir):
    from metacan_pipeline.site.build.build import ReleaseInputError, build_release
    from metacan_pipeline.site.query.stored_counts import write_stored_counts

    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    frame = site_world(storage, openalex_dir, n=9)
    assert build_site(storage).success
    shutil.rmtree(releases_dir(storage.root))
    for i in (7, 2):  # two works in two ranges of 2 works: the one named is the first by id
        frame[i]["keywords"] = ["changed since"]
    storage.write_table("frame", pa.Table.from_pylist(frame, schema=FRAME_SCHEMA))
    for chunk in (2, 100):
        with pytest.raises(ReleaseInputError, match="work W7002 of work_records has other institutions"):
            build_release(storage, {"frozen_release": None}, write_stored_counts, chunk_works=chunk)


def test_work_key_ranges_cover_every_key_once_in_ascending_order():
    from metacan_pipeline.site.build.build import work_key_ranges

    con = duckdb.connect()
    keys = [5, 3, 3, 900, 12, 7, 7, 7, 1, 40]  # a key twice or three times stays in one range
    con.execute("CREATE TABLE records AS SELECT unnest(?::BIGINT[]) AS work_key", [keys])
    assert work_key_ranges(con, 3) == [(1, 5), (5, 7), (7, 900), (900, None)]  # keys 1 3 3 | 5 | 7 7 7 12 40 | 900
    assert work_key_ranges(con, 100) == [(1, None)]
    con.execute("DELETE FROM records")
    assert work_key_ranges(con, 3) == []
    with pytest.raises(ValueError, match="at least 1"):
        work_key_ranges(con, 0)
