"""Building a release database from what ``work_records`` publishes (SPEC sections 2, 8 and 9).

:func:`build_release` reads the ``work_records`` Parquet files (the records ``records_may_ship`` passed), the
frame's name lists (institutions, funders, keywords: the lists the records' ``"; "``-joined strings were made
from, checked to agree with them) and ``student_heads`` (which heads passed the support gate), and writes one
DuckDB file per release with the tables of :mod:`metacan_pipeline.tables.site` (``sql/release.sql``), plus the
SQLite FTS5 index of titles and keywords (:mod:`.fts`). Files are assembled under temporary names and renamed;
the pointer ``current.json`` is replaced last (:mod:`.release`), so a reader sees a whole release or the old one.

Memory does not grow with the release: the per-work tables are written range of work keys by range
(:data:`CHUNK_WORKS` works each, :func:`work_key_ranges`), each range's rows inserted in work_key order after the
previous range's, so every table ends in work_key order as the export relies on, whatever the ranges; only the
keys are sorted whole. Each range reads the records and frame rows of its keys (``work_records`` is written in id
order, so a range's records sit in few row groups). The tables that look at the whole release (``sql/facets.sql``,
the figures) come after, over the narrow tables.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa

from ...publish.pages import page_path
from ...storage import MetacanStorage, sql_literal
from ...tables.site import release_tables
from ...vocab import CATEGORIES
from . import fts
from .cube import write_year_language_counts
from .figures import INSTRUMENT_ORDER, write_figures
from .release import (
    ReleaseUnavailable,
    database_path,
    index_path,
    record_manifest,
    releases_dir,
    verify_release,
    write_pointer,
)
from .versions import write_work_versions

#: Bump when the release tables or what goes into them change: a new layout is a new release id.
#: 4: cohort_facet_counts (query.stored_counts); 5: year_language_counts (.cube); 6: the FTS5 index in impact order (.fts)
#: 7: works.release_layer and its facet (the original protocol's release layers), facet_codes.norm (the folded
#: values that case- and accent-insensitive text filters match), and the Retraction Watch state and OpenAlex-missed
#: flag of works and work_facets
#: 8: recent_works (the rolling layer and the input each of its works arrived through, sql/recent.sql)
#: 9: the cascade's decision of works and work_facets
#: 10: the authorships of works (site_work_authors, site_work_institution_ids) and the release's authors and
#: institutions (site_authors, site_institutions)
#: 11: the coverage figures of release_statistics (.coverage_figures), work_facets.classified and .cited_by
#: 12: works.scored (at least one category score: a prediction whose heads give none is not counted as scored),
#: work_versions (the other OpenAlex ids of the same work)
#: 13: the file in DuckDB's storage format RELEASE_STORAGE_VERSION, works.record_json ZSTD-compressed
LAYOUT_VERSION = 13  # 2: facet_codes, work_facets (sql/facets.sql) and facet_counts; 3: the tables of .figures
RELEASE_SQL = resources.files("metacan_pipeline.site").joinpath("sql/release.sql").read_text("utf-8")
FACETS_SQL = resources.files("metacan_pipeline.site").joinpath("sql/facets.sql").read_text("utf-8")
RECENT_SQL = resources.files("metacan_pipeline.site").joinpath("sql/recent.sql").read_text("utf-8")
AUTHORS_SQL = resources.files("metacan_pipeline.site").joinpath("sql/authors.sql").read_text("utf-8")
AUTHOR_TOTALS_SQL = resources.files("metacan_pipeline.site").joinpath("sql/author_totals.sql").read_text("utf-8")
#: Works per range of work keys that ``sql/release.sql`` turns into rows at a time: what DuckDB holds
#: at once is one range's records, parsed, and its sort, so memory does not grow with the release. At 5 KB of record
#: JSON a work, 20,000 works are about 100 MB of records (``benchmarks/bench_release_db.py``).
CHUNK_WORKS = 20_000
#: The release database is checkpointed after about this many works (whole ranges): the most a build without any
#: checkpoint held without running out of its 1 GB (bench_release_db.py at 400,000 works).
CHECKPOINT_WORKS = 400_000
#: DuckDB's storage format of a release database (``storage_compatibility_version``). From v1.2.0 on, DuckDB compresses
#: long strings: the record JSON (``works.record_json``, stored ZSTD-compressed), 4-8 KB a work, is most of the file
#: and was stored uncompressed in the default format. A file in this format opens with DuckDB 1.5 or later.
RELEASE_STORAGE_VERSION = "v1.5.0"
#: The step that writes the counts the queries read back into the database being built (``build_release``).
StoredCounts = Callable[[duckdb.DuckDBPyConnection], object]
COUNTED_TABLES = ("works", "work_institutions", "work_funders", "work_keywords", "work_labels", "work_decisions")


class ReleaseInputError(ValueError):
    """The inputs of a release disagree (the frame changed after work_records was built) or are unsafe."""


@dataclass
class BuiltRelease:
    release_id: str
    database: Path
    fts_index: Path
    reused: bool
    row_counts: dict[str, int] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return self.database.stat().st_size + self.fts_index.stat().st_size


def release_id_of(storage: MetacanStorage, page_context: dict, prevalence_sha: str = "") -> tuple[str, str]:
    """``(release id, SHA-256 hex)`` of the published records (module :mod:`.release` says what goes in) and of
    the ``prevalence`` rows the statistics page shows (``prevalence_sha``: :func:`_prevalence_sha`; empty without
    them, so a release without prevalence keeps the id it had)."""
    digest = hashlib.sha256(f"metacan-release-layout-{LAYOUT_VERSION}\n".encode())
    if prevalence_sha:
        digest.update(f"prevalence:{prevalence_sha}\n".encode())
    digest.update(json.dumps(page_context, sort_keys=True, default=sorted).encode() + b"\n")
    con = duckdb.connect()
    try:
        reader = con.execute(
            f"SELECT id, record_hash FROM {_parquet(storage, 'work_records')} ORDER BY id"
        ).to_arrow_reader(100_000)
        for batch in reader:
            for wid, h in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                digest.update(f"{wid}:{h}\n".encode())
    finally:
        con.close()
    hexdigest = digest.hexdigest()
    return f"release-{hexdigest[:12]}", hexdigest


def _prevalence_sha(storage: MetacanStorage) -> str:
    """SHA-256 of the ``prevalence`` table's rows (empty when the asset was never materialized), and of each instrument
    table the statistics page shows (:data:`.figures.INSTRUMENT_ORDER`) that was materialized, so a release whose
    figures would differ has another id (a release without them keeps the id it had)."""
    digest = hashlib.sha256()
    if storage.has_table("prevalence"):
        rows = storage.read_table("prevalence").to_pylist()
        digest.update(json.dumps(rows, sort_keys=True, default=str).encode())
    instruments = [n for n in INSTRUMENT_ORDER if storage.has_table(n)]
    for name in instruments:
        rows = storage.read_table(name).drop_columns(["run_id", "computed_at"]).to_pylist()
        digest.update(f"\n{name}:".encode() + json.dumps(rows, sort_keys=True, default=str).encode())
    return digest.hexdigest() if storage.has_table("prevalence") or instruments else ""


def _instrument_files(storage: MetacanStorage) -> dict[str, Path]:
    """The Parquet glob of each instrument table the statistics page shows, when materialized."""
    return {n: storage.table_dir(n) / "*.parquet" for n in INSTRUMENT_ORDER if storage.has_table(n)}


def build_release(
    storage: MetacanStorage,
    page_context: dict,
    stored_counts: StoredCounts,
    chunk_works: int = CHUNK_WORKS,
    checkpoint_works: int = CHECKPOINT_WORKS,
) -> BuiltRelease:
    """Build (or reuse) the release of the current ``work_records`` and make it current.

    ``page_context``: what the work page needs beside the record (:func:`metacan_pipeline.publish.pages.page_context`).
    ``stored_counts``: writes the counts the queries read back (``facet_counts``, ``cohort_facet_counts``) into the
    database being built, after ``sql/facets.sql`` and ``year_language_counts``
    (:func:`metacan_pipeline.site.query.stored_counts.write_stored_counts`: the stored answers are computed by the
    query layer's own counter, so a stored count is the computed one, byte for byte).
    ``chunk_works``: works per range of work keys (:data:`CHUNK_WORKS`; the tables are the same whatever it is);
    ``checkpoint_works``: works between checkpoints of the database (:data:`CHECKPOINT_WORKS`, the same).
    Reuses the files when a release of the same id is already complete. Raises :class:`ReleaseInputError` naming
    a work id when the frame's name lists disagree with the records (re-materialize ``work_records``) or a
    classifier version cannot become a page path.
    """
    storage.require("work_records")
    storage.require("frame")
    release_id, sha = release_id_of(storage, page_context, _prevalence_sha(storage))
    db, index = database_path(storage.root, release_id), index_path(storage.root, release_id)
    if db.is_file() and index.is_file() and _intact(storage.root, release_id):
        write_pointer(storage.root, release_id)
        return BuiltRelease(release_id, db, index, reused=True, row_counts=_row_counts(db))
    folder = releases_dir(storage.root)
    folder.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    tmp_db, tmp_index = folder / f".{release_id}.{tag}.duckdb", folder / f".{release_id}.{tag}.fts.sqlite"
    try:
        _write_database(storage, tmp_db, release_id, sha, page_context, stored_counts, chunk_works, checkpoint_works)
        write_index(tmp_db, tmp_index)
        os.replace(tmp_index, index)
        os.replace(tmp_db, db)
    finally:
        for tmp in (tmp_db, tmp_index, tmp_db.with_name(tmp_db.name + ".wal")):
            tmp.unlink(missing_ok=True)
    record_manifest(storage.root, release_id)
    write_pointer(storage.root, release_id)
    return BuiltRelease(release_id, db, index, reused=False, row_counts=_row_counts(db))


def _intact(data_dir: Path, release_id: str) -> bool:
    """True when the files of a release already built still match its manifest (else it is built again)."""
    try:
        verify_release(data_dir, release_id)
    except ReleaseUnavailable:
        return False
    return True


def write_index(db: Path, index: Path) -> int:
    """Write the FTS5 index of a release database's titles and keywords to ``index`` (a new file); returns the
    rows indexed."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        sql = (
            "SELECT work_key, title, (SELECT string_agg(name, ' ') FROM work_keywords k "
            "WHERE k.work_key = w.work_key) AS keywords FROM works w"
        )
        return fts.build_index(index, con.execute(sql).to_arrow_reader(50_000))
    finally:
        con.close()


def _parquet(storage: MetacanStorage, name: str) -> str:
    return f"read_parquet({sql_literal(str(storage.table_dir(name) / '*.parquet'))}, hive_partitioning=false)"


def _write_database(
    storage: MetacanStorage,
    path: Path,
    release_id: str,
    sha: str,
    page_context: dict,
    stored_counts: StoredCounts,
    chunk_works: int,
    checkpoint_works: int = CHECKPOINT_WORKS,
) -> None:
    con = duckdb.connect(
        str(path),
        config={
            "memory_limit": "1GB",
            "temp_directory": str(path) + ".spill",
            "storage_compatibility_version": RELEASE_STORAGE_VERSION,
        },
    )
    try:
        for table in release_tables():
            con.execute(table.ddl())
        con.execute(
            "CREATE TEMP VIEW records AS SELECT CAST(substr(id, 2) AS BIGINT) AS work_key, id, record_json "
            f"FROM {_parquet(storage, 'work_records')}"
        )
        _require_authorships(con, storage)
        con.execute(
            "CREATE TEMP VIEW frame AS SELECT CAST(substr(id, 2) AS BIGINT) AS work_key, id, ca_institutions, "
            f"funder_names, keywords, authorships FROM {_parquet(storage, 'frame')}"
        )
        _register_pinned_institutions(con, storage)
        con.execute(
            "CREATE TEMP VIEW arrival AS SELECT CAST(substr(id, 2) AS BIGINT) AS work_key, id, source_file, "
            f"updated_date FROM {_parquet(storage, 'frame')}"
        )
        heads = (
            f"SELECT model_version, teacher, target, gate_passed, gate_reason FROM {_parquet(storage, 'student_heads')}"
            if storage.has_table("student_heads")
            else "SELECT NULL::VARCHAR AS model_version, NULL::VARCHAR AS teacher, NULL::VARCHAR AS target, "
            "NULL::BOOLEAN AS gate_passed, NULL::VARCHAR AS gate_reason WHERE false"
        )
        con.execute(f"CREATE TEMP VIEW heads AS {heads}")
        vocab = pa.table({"category": list(CATEGORIES), "pos": list(range(1, len(CATEGORIES) + 1))})
        con.register("vocab_source", vocab)
        con.execute("CREATE TEMP TABLE vocab_categories AS SELECT * FROM vocab_source")
        frame_builds: set[str] = set()
        mismatch: tuple[str, str] | None = None  # the first work (by id) whose frame lists disagree with its record
        ranges = work_key_ranges(con, chunk_works)
        # A commit per range (one transaction for every range kept each table's unfinished row group, 122,880 rows of
        # record JSON, in memory: out of 1 GB at commit at 400,000 works), and a checkpoint only every
        # CHECKPOINT_WORKS works: a checkpoint writes each unfinished row group again (a 1.15-1.5 times larger file at
        # 400,000 works with DuckDB's own checkpoints; benchmarks/bench_release_db.py), but with none until the end
        # every row waits in the WAL and in DuckDB's temporary files: a build of 4.3M works ran out of the 1 GB after
        # 311 s, 55.9 GB written.
        con.execute("SET checkpoint_threshold = '1TB'")
        since_checkpoint = 0
        for lo, hi in ranges:
            if since_checkpoint >= checkpoint_works:
                con.execute("CHECKPOINT")
                since_checkpoint = 0
            since_checkpoint += chunk_works
            within = f"work_key >= {lo}" + ("" if hi is None else f" AND work_key < {hi}")
            con.execute(f"CREATE OR REPLACE TEMP VIEW chunk AS SELECT * FROM records WHERE {within}")
            con.execute(f"CREATE OR REPLACE TEMP VIEW chunk_frame AS SELECT * FROM frame WHERE {within}")
            con.execute(f"CREATE OR REPLACE TEMP VIEW chunk_arrival AS SELECT * FROM arrival WHERE {within}")
            con.execute(RELEASE_SQL)
            con.execute(AUTHORS_SQL)
            con.execute(RECENT_SQL)
            bad = _frame_mismatch(con)
            if bad is not None and (mismatch is None or bad[0] < mismatch[0]):
                mismatch = bad
            frame_builds.update(_frame_builds(con))
            con.execute("DROP TABLE r")
            con.execute("DROP TABLE fr")
        con.execute("RESET checkpoint_threshold")
        _check_inputs(con, mismatch)
        prevalence = storage.table_dir("prevalence") / "*.parquet" if storage.has_table("prevalence") else None
        con.execute(AUTHOR_TOTALS_SQL)
        write_whole_release_tables(con, prevalence, stored_counts, _instrument_files(storage))
        con.execute(
            "INSERT INTO release_info SELECT ?, ?, ?, ?, (SELECT count(*) FROM works), "
            "(SELECT list(DISTINCT id ORDER BY id) FROM (SELECT unnest(?::VARCHAR[]) AS id)), "
            "coalesce((SELECT list(DISTINCT model_version ORDER BY model_version) FROM works WHERE model_version IS NOT NULL), []), "
            "coalesce((SELECT list(DISTINCT teacher ORDER BY teacher) FROM work_labels), []), "
            "coalesce((SELECT list(DISTINCT arm ORDER BY arm) FROM work_scores), []), 'sqlite_fts5', ?",
            [
                release_id,
                LAYOUT_VERSION,
                dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0),
                sha,
                sorted(frame_builds),
                json.dumps(page_context, sort_keys=True, default=sorted),
            ],
        )
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _require_authorships(con: duckdb.DuckDBPyConnection, storage: MetacanStorage) -> None:
    """Refuse a frame built before it kept every authorship (no ``authorships`` column), naming what to do."""
    cols = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {_parquet(storage, 'frame')}").fetchall()}
    if "authorships" not in cols:
        raise ReleaseInputError(
            "the frame has no authorships column (it was built by an older version): materialize frame_parts and "
            "frame again, then work_records and site_database"
        )


def _register_pinned_institutions(con: duckdb.DuckDBPyConnection, storage: MetacanStorage) -> None:
    """The temporary table ``pinned_institutions`` (``id``): the pinned Canadian institutions of ``canadian_entities``
    (none when it was never materialized: then only a country code CA makes an institution Canadian)."""
    ids: list[str] = []
    if storage.has_table("canadian_entities"):
        ids = storage.read_table("canadian_entities", filters=[("kind", "=", "institution")]).column("id").to_pylist()
    con.register("pinned_source", pa.table({"id": pa.array(ids, pa.string())}))
    con.execute("CREATE TEMP TABLE pinned_institutions AS SELECT * FROM pinned_source")
    con.unregister("pinned_source")


def write_whole_release_tables(
    con: duckdb.DuckDBPyConnection,
    prevalence: Path | None,
    stored_counts: StoredCounts,
    instruments: dict[str, Path] | None = None,
) -> None:
    """The tables that look at the whole release, written once the per-work tables are complete: the classifier heads
    of the versions the works carry and the coded facet copy (``sql/facets.sql``, which reads the temporary relation
    ``heads``: ``model_version, teacher, target, gate_passed, gate_reason`` of ``student_heads``), the year x language
    cube, the other OpenAlex ids of the same work (:func:`.versions.write_work_versions`), the counts the queries read back (``stored_counts``, see :func:`build_release`) and the figures
    (``prevalence``: the ``prevalence`` table's Parquet glob, None when there is none; ``instruments``: each
    instrument table's, :func:`.figures.write_figures`)."""
    con.execute(FACETS_SQL)
    write_work_versions(con)
    write_year_language_counts(con)
    stored_counts(con)
    write_figures(con, prevalence, instruments)


def work_key_ranges(con: duckdb.DuckDBPyConnection, chunk_works: int) -> list[tuple[int, int | None]]:
    """``[(lo, hi), ...]``: ranges of work keys (``lo <= work_key < hi``, the last one open: ``hi`` None) of about
    ``chunk_works`` works each, in ascending order, over the relation ``records`` (only its keys are read and sorted).
    A key never spans two ranges. Empty when there is no record."""
    if chunk_works < 1:
        raise ValueError(f"chunk_works must be at least 1, got {chunk_works}")
    starts = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT work_key FROM (SELECT work_key, row_number() OVER (ORDER BY work_key) - 1 AS i "
            "FROM records) WHERE i % ? = 0 ORDER BY 1",
            [chunk_works],
        ).fetchall()
    ]
    return list(zip(starts, [*starts[1:], None], strict=False))  # no record: no range


def _frame_builds(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT s.lineage.frame_build_id FROM r WHERE s.lineage.frame_build_id IS NOT NULL"
        ).fetchall()
    ]


def _frame_mismatch(con: duckdb.DuckDBPyConnection) -> tuple[str, str] | None:
    """``(id, what)`` of the first work (by id) of the range in ``r`` whose frame row (``fr``) is missing or whose
    name lists disagree with its record's joined strings; None when all agree."""
    return con.execute(
        """
        SELECT r.id, CASE WHEN f.id IS NULL THEN 'is not in the frame' ELSE 'has other institutions, funders or keywords in the frame' END
        FROM r LEFT JOIN fr f ON f.id = r.id
        WHERE f.id IS NULL
           OR coalesce(array_to_string(list_filter(f.ca_institutions, x -> x <> ''), '; '), '') <> r.s.ca_institutions
           OR coalesce(array_to_string(list_filter(f.funder_names, x -> x <> ''), '; '), '') <> r.s.funders
           OR coalesce(array_to_string(list_filter(f.keywords, x -> x <> ''), '; '), '') <> r.s.keywords
        ORDER BY r.id LIMIT 1
        """
    ).fetchone()


def _check_inputs(con: duckdb.DuckDBPyConnection, mismatch: tuple[str, str] | None) -> None:
    """Refuse a release whose classifier version is unsafe, or whose frame lists disagree with the records
    (``mismatch``: the first such work of every range, :func:`_frame_mismatch`)."""
    for version in (
        r[0] for r in con.execute("SELECT DISTINCT model_version FROM works WHERE model_version IS NOT NULL").fetchall()
    ):
        try:
            page_path({"id": "W1", "prediction": {"model_version": version}})
        except ValueError as exc:
            raise ReleaseInputError(str(exc)) from None
    if mismatch:
        raise ReleaseInputError(
            f"work {mismatch[0]} of work_records {mismatch[1]}: the frame changed after the records were built; "
            f"materialize work_records again, then site_database"
        )


def _row_counts(db: Path) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTED_TABLES}
    finally:
        con.close()
