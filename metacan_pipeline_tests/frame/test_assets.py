"""Tests of metacan_pipeline.frame.assets: the frame built through the real Dagster assets, from real records and
from damaged ones.

Damaged inputs are built at test time in ``tmp_path`` from real OpenAlex work records (../shared/data/openalex)
in the snapshot layout (``data/works/updated_date=YYYY-MM-DD/part_NNN.gz`` plus a ``data/works/manifest``
in the OpenAlex format), next to the four real Canadian funder files so the ``ca_fund`` route can fire.
Each is damaged on purpose (a cut gzip, a non-JSON line, a record without id, ...), and the tests assert
what the build must do with it: a quarantine row or a clear warning, and the rest built."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow.parquet as pq
import pytest

from metacan_pipeline.definitions import build_resources, materialize_in_process
from metacan_pipeline.frame.parts import part_dir
from metacan_pipeline_tests.builders.common import check_evaluation, node_metadata
from metacan_pipeline_tests.builders.frame import build_frame
from metacan_pipeline_tests.builders.openalex import (
    LME4_ID,
    REPRO_ID,
    complete_lines,
    copy_funders,
    is_canadian,
    write_manifest,
    write_part,
)


def _warnings(instance: dg.DagsterInstance) -> list[str]:
    """Every warning logged by every run of ``instance`` (the inventory's run and the build's)."""
    return [
        e.user_message
        for run in instance.get_runs()
        for e in instance.all_logs(run.run_id)
        if e.level == logging.WARNING
    ]


class BadBuild:
    """The input (with what was put where), the finished build, and readers for its tables."""

    def __init__(self, tmp: Path, openalex_dir: Path, works: dict[str, dict]):
        self.inp = tmp / "in"
        self.data = tmp / "data"
        copy_funders(openalex_dir, self.inp)
        ca = sorted(k for k, w in works.items() if is_canadian(w) and k not in (LME4_ID, REPRO_ID))
        filler = iter(sorted(k for k, w in works.items() if not is_canadian(w)))
        assert len(ca) >= 22
        W = lambda k, **kw: {**works[k], **kw}
        counts: dict[str, int] = {}

        # a good part (DuckDB fast path), with one work whose author list OpenAlex cut at 100
        self.truncated_authors = ca[3]
        authors = [a for k in sorted(works) for a in works[k].get("authorships") or []]
        cut100 = W(ca[3], authorships=(works[ca[3]]["authorships"] + authors)[:100], is_authors_truncated=True)
        good = [W(LME4_ID), W(ca[0]), W(next(filler)), W(ca[1]), cut100, W(ca[2]), W(next(filler))]
        self.good = write_part(self.inp, "2025-01-01", 0, good)
        counts[self.good] = len(good)

        # a part cut in the middle of its gzip stream; the manifest lists all its 20 records
        cut_ids = [x for pair in zip(ca[4:12], [next(filler) for _ in range(8)], strict=False) for x in pair] + [
            next(filler) for _ in range(4)
        ]
        self.cut = write_part(self.inp, "2025-01-01", 1, [W(k) for k in cut_ids])
        whole = (self.inp / self.cut).read_bytes()
        (self.inp / self.cut).write_bytes(whole[: len(whole) // 2])
        self.cut_kept = cut_ids[: complete_lines(whole[: len(whole) // 2])]
        self.cut_lost = cut_ids[len(self.cut_kept) :]
        assert 2 <= len(self.cut_kept) <= 16, "the cut must fall inside the part"
        counts[self.cut] = len(cut_ids)

        # a part with a blank line, a non-JSON line, a record without id, a work without any title
        self.no_id_source = next(filler)
        no_id = {k: v for k, v in works[self.no_id_source].items() if k != "id"}
        self.no_title = ca[14]
        no_title = W(ca[14], title=None, display_name=None)
        self.truncated_authors_exact = ca[15]
        cut100b = W(ca[15], authorships=(works[ca[15]]["authorships"] + authors)[:100], is_authors_truncated=True)
        self.mixed_records = [
            W(ca[12]),
            "",
            W(ca[13]),
            '{"id": "https://openalex.org/W1", "title": "cut here',
            no_id,
            no_title,
            cut100b,
            W(next(filler)),
        ]
        self.mixed = write_part(self.inp, "2025-02-01", 0, self.mixed_records)
        self.mixed_ok = [ca[12], ca[13], ca[15]]
        counts[self.mixed] = sum(
            1 for r in self.mixed_records if r != ""
        )  # the manifest counts records, not blank lines

        # a whole part whose manifest entry claims 2 records more than it holds
        self.count_off_ids = [ca[16], next(filler), ca[17], ca[18], next(filler)]
        self.count_off = write_part(self.inp, "2025-03-01", 0, [W(k) for k in self.count_off_ids])
        counts[self.count_off] = len(self.count_off_ids) + 2

        # a snapshot partition folder the manifest does not list (e.g. written after it)
        self.unlisted_ids = [ca[19], ca[20], ca[21]]
        self.unlisted = write_part(self.inp, "2025-04-01", 0, [W(k) for k in self.unlisted_ids])
        self.cut_bytes = (len(whole) // 2, len(whole))
        write_manifest(self.inp, counts, {self.cut: len(whole)})

        # an API page holding one work twice with different updated_date; the newer one first
        newer = W(REPRO_ID)
        older = W(
            REPRO_ID, updated_date="2024-03-01T00:00:00", cited_by_count=1, title="An older title of the same work"
        )
        assert newer["updated_date"] > older["updated_date"] and newer["cited_by_count"] != 1
        self.newer = newer
        (self.inp / "api_page_dup.json").write_text(
            json.dumps({"meta": {"count": 2, "next_cursor": None}, "results": [newer, older]})
        )

        self.expected_in_frame = {
            LME4_ID,
            REPRO_ID,
            ca[0],
            ca[1],
            ca[2],
            ca[3],
            *(k for k in self.cut_kept if k in ca),
            *self.mixed_ok,
            ca[16],
            ca[17],
            ca[18],
            *self.unlisted_ids,
        }
        self.instance, self.result = build_frame(self.data, self.inp)
        self.con = duckdb.connect(str(self.data / "metacan.duckdb"), read_only=True)

    def q(self, sql: str, *params):
        return self.con.execute(sql, list(params)).fetchall()

    def part(self, rel: str, name: str) -> list[dict]:
        key = Path(rel).parent.name if rel.startswith("data/works/") else "files"
        return pq.read_table(part_dir(self.data / "warehouse" / "frame_parts", key, rel) / name).to_pylist()

    def manifest(self, rel: str) -> dict:
        rows = (
            self.con.execute("SELECT * FROM frame_build_manifest WHERE source_file = ?", [rel])
            .to_arrow_table()
            .to_pylist()
        )
        assert len(rows) == 1
        return rows[0]


@pytest.fixture(scope="module")
def bad(tmp_path_factory, openalex_dir, real_works):
    b = BadBuild(tmp_path_factory.mktemp("bad"), openalex_dir, real_works)
    yield b
    b.con.close()


def test_the_build_succeeds_and_admits_every_canadian_work_it_could_read(bad):
    assert bad.result.success
    frame_ids = {r[0] for r in bad.q("SELECT id FROM frame")}
    assert bad.expected_in_frame <= frame_ids
    assert bad.no_title not in frame_ids and not (set(bad.cut_lost) & frame_ids)
    checks = {e.check_name: (e.passed, e.severity) for e in bad.result.get_asset_check_evaluations()}
    assert checks == {
        "frame_ids_unique": (True, dg.AssetCheckSeverity.ERROR),
        "frame_routes_have_evidence": (True, dg.AssetCheckSeverity.ERROR),
        "frame_stores_no_abstract_text": (True, dg.AssetCheckSeverity.ERROR),
        "frame_build_manifest_covers_snapshot": (False, dg.AssetCheckSeverity.WARN),
        "schema_matches_catalog": (True, dg.AssetCheckSeverity.ERROR),
    }
    assert bad.q("SELECT ca_fund, ca_fund_evidence FROM frame WHERE id = ?", LME4_ID) == [
        (True, ["funder F4320334593 Natural Sciences and Engineering Research Council of Canada (via funders.id)"])
    ]


def test_a_truncated_gzip_part_keeps_the_records_before_the_cut(bad):
    index = [r["id"] for r in bad.part(bad.cut, "index.parquet")]
    assert index == bad.cut_kept  # every whole line before the cut, in order; nothing after it
    frame_here = {r[0] for r in bad.q("SELECT id FROM frame WHERE source_file = ?", bad.cut)}
    assert frame_here == {k for k in bad.cut_kept if k in bad.expected_in_frame} and frame_here
    q = bad.q("SELECT locator, line, reason FROM openalex_quarantine WHERE source_file = ?", bad.cut)
    assert len(q) == 1
    n = len(bad.cut_kept)
    assert q[0][:2] == (f"after line {n}", n + 1)
    assert q[0][2].startswith(f"file unreadable after line {n} (EOFError") and "truncated or corrupt gzip" in q[0][2]
    m = bad.manifest(bad.cut)
    assert (m["manifest_record_count"], m["work_records"], m["quarantined"], m["count_check"]) == (20, n, 1, "mismatch")
    assert m["read_path"] == "python" and m["fallback_reason"]  # DuckDB could not take the cut file whole
    check = check_evaluation(bad.result, "frame_build_manifest_covers_snapshot")
    assert any(x.startswith(f"{bad.cut}: manifest 20, read ") for x in check.metadata["count_mismatches"].value)
    # the inventory sees the cut before any part is read: the part is smaller than the manifest's content_length
    here, listed = bad.cut_bytes
    assert bad.q("SELECT bytes, manifest_bytes FROM openalex_inventory WHERE source_file = ?", bad.cut) == [
        (here, listed)
    ]
    assert check.metadata["size_mismatches"].value == [f"{bad.cut}: {here} bytes, manifest {listed}"]
    assert (
        f"{bad.cut}: {here} bytes here, the snapshot manifest lists {listed} (truncated or replaced download? re-download it); "
        "read anyway" in _warnings(bad.instance)
    )


def test_a_non_json_line_is_quarantined_with_its_physical_line_number(bad):
    q = bad.q(
        "SELECT locator, line, reason, excerpt FROM openalex_quarantine WHERE source_file = ? ORDER BY line", bad.mixed
    )
    # line 2 is blank: the bad line is the 4th physical line (the 3rd record)
    assert [(r[0], r[1], r[2].split(":")[0]) for r in q] == [
        ("line 4", 4, "unparseable JSON"),
        ("record 4", 5, "missing id"),
    ]
    assert q[0][3].startswith('{"id": "https://openalex.org/W1", "title": "cut here')
    index = [r["id"] for r in bad.part(bad.mixed, "index.parquet")]
    assert index == [*bad.mixed_ok[:2], bad.no_title, bad.truncated_authors_exact, index[-1]] and len(index) == 5
    assert set(bad.mixed_ok) <= {r[0] for r in bad.q("SELECT id FROM frame WHERE source_file = ?", bad.mixed)}
    m = bad.manifest(bad.mixed)
    # 5 works + 2 unreadable records = the 7 records the manifest lists
    assert (m["records_read"], m["work_records"], m["quarantined"], m["count_check"]) == (7, 5, 2, "ok")


def test_a_record_without_id_is_quarantined_and_a_work_without_title_is_not_admitted(bad):
    q = bad.q("SELECT line, reason, excerpt FROM openalex_quarantine WHERE reason = 'missing id'")
    assert (
        len(q) == 1 and q[0][0] == 5 and q[0][2].startswith(json.dumps({"title": bad.mixed_records[4]["title"]})[:-1])
    )
    routed = {r["id"]: r for r in bad.part(bad.mixed, "routed.parquet")}
    assert (
        routed[bad.no_title]["title"] is None and not routed[bad.no_title]["title_text"]
    )  # routed (Canadian), no title
    assert bad.q("SELECT count(*) FROM frame WHERE id = ?", bad.no_title) == [(0,)]
    outcomes = node_metadata(bad.result, "frame")["outcomes"]
    assert "| no_title | 1 |" in outcomes


def test_one_id_twice_in_one_api_page_keeps_the_newer_version(bad):
    rows = bad.q("SELECT updated_date, cited_by_count, title, source_locator FROM frame WHERE id = ?", REPRO_ID)
    assert rows == [(bad.newer["updated_date"], bad.newer["cited_by_count"], bad.newer["title"], "results[0]")]
    index = bad.part("api_page_dup.json", "index.parquet")
    assert sorted(r["updated_date"] for r in index) == ["2024-03-01T00:00:00", bad.newer["updated_date"]]


def test_authorships_cut_at_100_are_flagged_in_the_frame(bad):
    rows = dict(
        bad.q(
            "SELECT id, is_authors_truncated FROM frame WHERE id IN (?, ?, ?)",
            bad.truncated_authors,
            bad.truncated_authors_exact,
            LME4_ID,
        )
    )
    assert rows == {bad.truncated_authors: True, bad.truncated_authors_exact: True, LME4_ID: False}
    assert (
        bad.manifest(bad.good)["read_path"] == "duckdb" and bad.manifest(bad.mixed)["read_path"] == "python"
    )  # both readers


def test_a_manifest_count_that_disagrees_is_a_warning_and_the_frame_still_builds(bad):
    m = bad.manifest(bad.count_off)
    assert (m["manifest_record_count"], m["records_read"], m["quarantined"], m["count_check"], m["read_path"]) == (
        7,
        5,
        0,
        "mismatch",
        "duckdb",
    )
    assert {r[0] for r in bad.q("SELECT id FROM frame WHERE source_file = ?", bad.count_off)} == set(
        bad.count_off_ids
    ) & bad.expected_in_frame
    warnings = _warnings(bad.instance)
    assert any(
        w.startswith(f"{bad.count_off}: the snapshot manifest lists 7 records, 5 were read") for w in warnings
    ), warnings
    check = check_evaluation(bad.result, "frame_build_manifest_covers_snapshot")
    assert check.passed is False and check.severity == dg.AssetCheckSeverity.WARN
    listed = check.metadata["count_mismatches"].value
    assert (
        len(listed) == 2
        and f"{bad.count_off}: manifest 7, read 5" in listed
        and any(x.startswith(f"{bad.cut}: ") for x in listed)
    )
    assert bad.manifest(bad.good)["count_check"] == "ok"


def test_a_partition_folder_the_manifest_does_not_list_is_still_read(bad):
    inv = bad.q(
        "SELECT partition_key, manifest_status, manifest_record_count FROM openalex_inventory WHERE source_file = ?",
        bad.unlisted,
    )
    assert inv == [("updated_date=2025-04-01", "not_in_manifest", None)]
    m = bad.manifest(bad.unlisted)
    assert (m["count_check"], m["records_read"], m["work_records"]) == ("not_in_manifest", 3, 3)
    assert {r[0] for r in bad.q("SELECT id FROM frame WHERE source_file = ?", bad.unlisted)} == set(bad.unlisted_ids)
    check = check_evaluation(bad.result, "frame_build_manifest_covers_snapshot")
    assert check.metadata["parts_not_in_a_manifest"].value == [f"{bad.unlisted} (not_in_manifest)"]
    assert check.metadata["listed_parts_not_here"].value == 0


def _build(data, inp, **kw):
    """Materialize through the frame from the input folder ``inp`` (or the list of folders)."""
    folders = [str(p) for p in inp] if isinstance(inp, list) else str(inp)
    return materialize_in_process(
        dg.DagsterInstance.ephemeral(), build_resources(str(data), folders), through="frame", **kw
    )


@pytest.fixture()
def ingested(tmp_path, openalex_dir):
    result = _build(tmp_path / "data", openalex_dir)
    assert result.success
    return tmp_path / "data", result


@pytest.mark.slow
def test_ingestion_on_the_real_records(ingested):
    data, result = ingested
    con = duckdb.connect(str(data / "metacan.duckdb"), read_only=True)
    md = result.asset_materializations_for_node("frame")[0].metadata
    assert md["works_read"].value == 866 and md["work_records_read"].value == 889
    # W2741809807 is in 5 files; the newest version wins
    assert con.execute("SELECT updated_date FROM frame WHERE id='W2741809807'").fetchone()[0].startswith("2025-10")
    ents = dict(con.execute("SELECT kind, count(*) FROM canadian_entities GROUP BY kind").fetchall())
    assert ents == {"funder": 4, "source": 3, "institution": 35}
    lme4 = con.execute(
        "SELECT ca_aff, ca_fund, ca_fund_evidence, has_abstract, title_text FROM frame WHERE id='W1951724000'"
    ).fetchone()
    assert lme4[0] and lme4[1] and "F4320334593" in lme4[2][0] and lme4[3]
    assert lme4[4] == "Fitting Linear Mixed-Effects Models Using lme4"
    n, n_aff, n_fund, n_about, blind = con.execute(
        "SELECT count(*), count(*) FILTER (ca_aff), count(*) FILTER (ca_fund), count(*) FILTER (about_ca),"
        " count(*) FILTER (invisible_to_affiliation_only) FROM frame"
    ).fetchone()
    assert (n, n_aff, n_fund, n_about, blind) == (44, 29, 1, 17, 15)
    cols = [r[0] for r in con.execute("DESCRIBE frame").fetchall()]
    assert "has_abstract" in cols and not any("abstract" in c and c != "has_abstract" for c in cols)
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    # the snapshot sample's manifest lists 465 parts of which 1 is here: a warning, not a failure
    assert checks == {
        "frame_ids_unique": True,
        "frame_routes_have_evidence": True,
        "frame_stores_no_abstract_text": True,
        "frame_build_manifest_covers_snapshot": False,
        "schema_matches_catalog": True,
    }
    assert md["dagster/row_count"].value == n and md["parts_done"].value == 39
    assert md["works_by_year_and_route"].value.startswith(
        "![frame works per year by route](data:image/png;base64,iVBOR"
    )
    parts_md = result.asset_materializations_for_node("frame_parts")[0].metadata
    routed = con.execute(
        "SELECT count(*) FROM read_parquet(?)", [str(data / "warehouse" / "frame_parts" / "**" / "routed.parquet")]
    ).fetchone()[0]
    assert parts_md["dagster/row_count"].value == routed >= n
    assert "invisible_to_affiliation_only" in [c.name for c in parts_md["dagster/column_schema"].value.columns]
    manifest = con.execute(
        "SELECT source_file, manifest_record_count, records_read, count_check, read_path FROM frame_build_manifest "
        "WHERE partition_key = 'updated_date=2023-05-16'"
    ).fetchall()
    assert manifest == [
        (
            "max-planck-innovation-competition__go-openalex__snapshot_sample/data/works/updated_date=2023-05-16/part_000.gz",
            27,
            27,
            "ok",
            "duckdb",
        )
    ]
    assert (
        con.execute("SELECT count(*) FROM openalex_inventory WHERE manifest_status = 'missing_locally'").fetchone()[0]
        == 464
    )


def test_an_input_without_canadian_works_fails_with_a_clear_message(tmp_path, openalex_dir):
    import shutil

    inp = tmp_path / "in"
    inp.mkdir()
    shutil.copy(
        openalex_dir / "Mearman__Academic-Explorer__work_W3209445140.json", inp
    )  # a software release, not Canadian
    (inp / "broken.jsonl").write_text('{"id": "https://openalex.org/W5", "title": "x"}\n{oops\n')
    result = _build(tmp_path / "data", inp)
    assert not result.success
    failure = [e for e in result.all_events if e.is_step_failure][0]
    assert (
        "the frame is empty" in failure.step_failure_data.error.message
        and "METACAN_OPENALEX_DIR" in failure.step_failure_data.error.message
    )
    md = result.asset_materializations_for_node("frame_parts")[0].metadata
    assert md["work_records_read"].value == 2 and "unparseable JSON" in md["quarantined_by_reason"].value


def test_frame_build_id_is_stable_until_an_input_changes(tmp_path, small_input):
    def build():
        return _build(tmp_path / "data", small_input)

    first = build()
    second = build()
    fid = lambda r: r.asset_materializations_for_node("frame")[0].metadata["frame_build_id"].value  # noqa: E731
    assert fid(first) == fid(second) and fid(first).startswith("frame-")
    parts = lambda r: r.asset_materializations_for_node("frame_parts")[0].metadata  # noqa: E731
    assert parts(first)["parts_built"].value == len(list(small_input.iterdir()))
    assert parts(second)["parts_built"].value == 0  # a finished part is never read twice
    target = small_input / "Mearman__Academic-Explorer__work_W2741809807.json"
    target.write_text(target.read_text() + "\n")
    third = build()
    assert fid(third) != fid(first) and parts(third)["parts_built"].value == 1


def test_file_names_are_read_case_insensitively_and_unsupported_files_are_reported(tmp_path, openalex_dir):
    import shutil

    inp = tmp_path / "in"
    inp.mkdir()
    shutil.copy(openalex_dir / "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json", inp / "UP.JSON")
    shutil.copy(openalex_dir / "Mearman__Academic-Explorer__work_W2741809807.json", inp / "a[1].json")
    (inp / "x.json.bz2").write_bytes(b"BZh9")
    result = _build(tmp_path / "data", inp)
    assert result.success
    con = duckdb.connect(str(tmp_path / "data" / "metacan.duckdb"), read_only=True)
    assert con.execute("SELECT sum(work_records) FROM frame_build_manifest").fetchone()[0] == 2
    assert con.execute("SELECT source_file, reason FROM openalex_quarantine").fetchall() == [
        (
            "x.json.bz2",
            "not read: unsupported file type; OpenAlex input must be .json, .json.gz, .jsonl, .ndjson or .gz (JSON Lines), "
            ".txt holding JSON, or a .tar, .tar.gz or .tgz of these",
        )
    ]


#: What became of each of the 1,054 work records of ../shared/data/openalex_more when the frame is built from
#: both folders (see test_the_frame_reads_both_folders_and_accounts_for_every_record_of_the_second).
MORE_ACCOUNT = {
    "admitted": 40,  # the newest version of its work, a route fires, title and year in 2000-2025
    "year_out_of_range": 9,  # routed, newest, published 1988-1999
    "no_route": 1004,  # newest version, no Canadian route
    "superseded": 1,  # ../openalex holds a newer version of the work
}
MORE_SQL = """
SELECT CASE WHEN f.id IS NOT NULL THEN 'admitted'
            WHEN k.rn > 1 THEN 'superseded'
            WHEN r.id IS NULL THEN 'no_route'
            WHEN coalesce(r.title_text, '') = '' THEN 'no_title'
            WHEN r.publication_year IS NULL OR r.publication_year NOT BETWEEN 2000 AND 2025 THEN 'year_out_of_range'
       END AS outcome, count(*)
FROM ranked k LEFT JOIN routed r USING (id, source_file, source_locator)
LEFT JOIN frame f USING (id, source_file, source_locator)
WHERE k.source_file LIKE 'openalex_more/%' GROUP BY ALL
"""


@pytest.mark.slow
def test_the_frame_reads_both_folders_and_accounts_for_every_record_of_the_second(
    tmp_path, openalex_dir, openalex_more_dir
):
    data = tmp_path / "data"
    first = _build(data, [openalex_dir])
    assert first.success
    con = duckdb.connect(str(data / "metacan.duckdb"), read_only=True)
    alone = dict(con.execute("SELECT id, source_file FROM frame").fetchall())
    con.close()
    both = _build(data, [openalex_dir, openalex_more_dir])
    assert both.success
    # the first folder's 39 parts keep their build keys: only the second folder's 12 files are read
    parts = node_metadata(both, "frame_parts")
    assert (parts["parts_built"], parts["parts_already_built"], parts["work_records_read"]) == (12, 39, 1943)
    con = duckdb.connect(str(data / "metacan.duckdb"), read_only=True)
    manifest = con.execute(
        "SELECT sum(records_read), sum(work_records), sum(routed), sum(quarantined), sum(admitted) "
        "FROM frame_build_manifest WHERE source_file LIKE 'openalex_more/%'"
    ).fetchone()
    # read: 1,054 works and knogen's 10 funders (entity records); routed 49; quarantined none
    assert manifest == (1064, 1054, 49, 0, 40)
    assert con.execute("SELECT count(*) FROM openalex_quarantine").fetchone()[0] == 0
    warehouse = data / "warehouse" / "frame_parts"
    con.execute(f"CREATE TEMP VIEW idx AS SELECT * FROM read_parquet('{warehouse}/*/*/index.parquet')")
    con.execute(f"CREATE TEMP VIEW routed AS SELECT * FROM read_parquet('{warehouse}/*/*/routed.parquet')")
    con.execute(
        "CREATE TEMP VIEW ranked AS SELECT *, row_number() OVER (PARTITION BY id ORDER BY updated_date DESC NULLS "
        "LAST, source_file DESC, ordinal DESC NULLS LAST) AS rn FROM idx"
    )
    assert dict(con.execute(MORE_SQL).fetchall()) == MORE_ACCOUNT
    # newer versions replace older ones: of the 93 works in both folders, 92 are newer in the second; the 3 of
    # those in the frame now come from it, and no work left the frame for want of a route on its newer version
    newest = con.execute(
        "SELECT id, source_file FROM ranked WHERE rn = 1 AND id IN (SELECT id FROM idx WHERE source_file LIKE "
        "'openalex_more/%') AND id IN (SELECT id FROM idx WHERE source_file NOT LIKE 'openalex_more/%')"
    ).fetchall()
    assert len(newest) == 93 and sum(f.startswith("openalex_more/") for _, f in newest) == 92
    frame = dict(con.execute("SELECT id, source_file FROM frame").fetchall())
    replaced = {i for i, f in newest if f.startswith("openalex_more/") and i in frame}
    assert (
        len(replaced) == 3 and replaced <= set(alone) and all(frame[i].startswith("openalex_more/") for i in replaced)
    )
    assert set(alone) <= set(frame) and len(frame) == 44 + 40 - 3 == 81
    # the other 41 works of the first folder's frame keep their file names (the locators of a one-folder build)
    assert {i: f for i, f in frame.items() if i in alone and i not in replaced} == {
        i: f for i, f in alone.items() if i not in replaced
    }
    # the 5,103-author work with no affiliation: admitted by the funder route only (NSERC; CFI is pinned too)
    row = con.execute(
        "SELECT route_key, ca_aff, ca_venue, about_ca, ca_fund_evidence, invisible_to_affiliation_only "
        "FROM frame WHERE id = 'W1694905212'"
    ).fetchone()
    assert row[:4] == ("ca_fund", False, False, False) and row[5]
    assert (
        "funder F4320334593 Natural Sciences and Engineering Research Council of Canada (via grants.funder)" in row[4]
    )
    # the 2022-schema archive: its 15 Canadian-affiliated works are in the frame, with OpenAlex types
    tar = con.execute(
        "SELECT count(*), list(DISTINCT type ORDER BY type), list(DISTINCT type_crossref ORDER BY type_crossref) "
        "FROM frame WHERE source_file LIKE 'openalex_more/%.tar.gz'"
    ).fetchone()
    assert tar[0] == 15 and "proceedings" not in tar[1] and set(tar[1]) <= {"book", "dissertation", "other"}
    checks = {e.check_name: e.passed for e in both.get_asset_check_evaluations()}
    assert checks["frame_ids_unique"] and checks["frame_routes_have_evidence"]
