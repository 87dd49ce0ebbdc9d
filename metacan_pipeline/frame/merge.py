"""The frame merge (SPEC section 2 in full): every finished part in, one frame out.

Per work id the newest version wins (newest ``updated_date``, then the later file in sort order, then
the later record in the file); ids in ``merged_ids/works`` (merged, or deleted when ``merge_into_id``
is empty) are removed; a work whose newest version has no route leaves the frame; the admission filter
(``year_min <= publication_year <= year_max``, non-empty title) is applied. The merge runs in DuckDB
over the parts' Parquet files (SQL in ``frame/sql/``) and takes seconds. Also here: the frame build id
(SPEC section 9 lineage), the quarantine and build-manifest tables the merge writes beside the frame,
and the figures the ``frame`` asset reports.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa

from ..openalex.folders import InputFolder
from ..openalex.ids import short_id
from ..openalex.lexicon import LEXICON_VERSION
from ..openalex.reader import SUPPORTED_TYPES
from ..openalex.remote import list_files, readable, scrub
from ..storage import MetacanStorage, sql_literal
from ..tables.frame import BUILD_MANIFEST_SCHEMA, FRAME_SCHEMA, QUARANTINE_SCHEMA
from ..vocab import ROUTES
from .routes import AdmissionRule

FRAME_CODE_VERSION = "frame-v3"
#: The header every merged-id file must have (OpenAlex snapshot docs, "Merged entities").
MERGED_IDS_HEADER = "merge_date,id,merge_into_id"
#: The quarantine reason of an input file of a type the reader does not take.
UNSUPPORTED_REASON = f"not read: unsupported file type; OpenAlex input must be {SUPPORTED_TYPES}"
#: DuckDB settings of the merge: bounded memory, spilling beside the warehouse.
MERGE_MEMORY_LIMIT = "1GB"


def merge_sql(name: str) -> str:
    """The text of ``frame/sql/<name>.sql`` (packaged with the code)."""
    return files(__package__).joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")


def frame_build_id(parts: list[dict], versions: dict[str, str], rule: AdmissionRule, merged_files: list[str]) -> str:
    """``frame-<12 hex>`` over the parts used (file and sha256), the entity-list versions, the lexicon
    version, the admission rule and the merged-id files: the same inputs give the same id, so an
    unchanged re-run changes no published record; any change gives a new one (SPEC section 9 lineage:
    "which frame build")."""
    payload = json.dumps(
        {
            "parts": sorted((p["source_file"], p["sha256"]) for p in parts),
            "entities": versions,
            "lexicon": LEXICON_VERSION,
            "rule": [rule.year_min, rule.year_max],
            "merged": sorted(merged_files),
            "code": FRAME_CODE_VERSION,
        },
        sort_keys=True,
    )
    return "frame-" + hashlib.sha256(payload.encode()).hexdigest()[:12]


def _merged_ids_failure(path: Path | str, why: str) -> dg.Failure:
    return dg.Failure(
        description=f"merged-id file {path} {why}; it must be a (gzip) CSV with the header {MERGED_IDS_HEADER} as in "
        f"the OpenAlex snapshot: re-download it or remove it",
        allow_retries=False,
    )


def removed_work_ids(folders: Sequence[InputFolder]) -> tuple[dict[str, str], list[str]]:
    """``({old id: merged into, or '' when deleted}, files read)`` from ``merged_ids/works/*.csv[.gz]`` under
    every input folder (OpenAlex snapshot docs, "Merged entities": columns ``merge_date,id,merge_into_id``;
    files named by ``source_file``). A row with an empty ``merge_into_id`` is a deletion. Raises dg.Failure
    naming an unreadable file."""
    found = [(folder, p) for folder in folders for p in _merged_id_files(folder)]
    out: dict[str, str] = {}
    for _, f in found:
        try:
            with readable(f) as local:
                out.update(_read_merged_ids(f, local))
        except (OSError, EOFError) as exc:  # an object-storage file that could not be fetched
            raise _merged_ids_failure(f, f"is unreadable ({scrub(str(exc))})") from None
    return out, [folder.source_file(f) for folder, f in found]


def _merged_id_files(folder: InputFolder) -> list[Path | str]:
    """The merged-id files of works under ``folder`` (``**/merged_ids/works/*.csv[.gz]``; URLs of a URL folder)."""
    is_csv = lambda name: name.lower().endswith((".csv", ".csv.gz"))  # noqa: E731
    if folder.is_remote:
        return [
            f.url
            for f in list_files(folder.root)
            if is_csv(f.path.name) and f.path.parent.name == "works" and f.path.parent.parent.name == "merged_ids"
        ]
    return [p for p in sorted(folder.root.rglob("merged_ids/works/*")) if is_csv(p.name)]


def _read_merged_ids(f: Path | str, local: Path) -> dict[str, str]:
    """``{old id: merged into, or ''}`` of one merged-id file ``f`` (read from ``local``); dg.Failure naming ``f``."""
    out: dict[str, str] = {}
    try:  # read_csv with explicit columns renames by position: check the header first
        with (gzip.open if local.name.lower().endswith(".gz") else open)(local, "rb") as fh:
            header = fh.readline().decode("utf-8-sig", errors="replace").strip().lower().replace(" ", "")
    except (OSError, EOFError) as exc:
        raise _merged_ids_failure(f, f"is unreadable ({exc})") from None
    if header != MERGED_IDS_HEADER:
        raise _merged_ids_failure(f, f"has the header {header[:100]!r}, so its columns would be misread")
    try:
        rows = duckdb.execute(
            "SELECT id, merge_into_id FROM read_csv(?, header=true, "
            "columns={'merge_date':'VARCHAR','id':'VARCHAR','merge_into_id':'VARCHAR'})",
            [str(local)],
        ).fetchall()
    except duckdb.Error as exc:
        raise _merged_ids_failure(f, f"is unreadable ({str(exc).splitlines()[0]})") from None
    for old, new in rows:
        if old:
            out[short_id(old) or old] = short_id(new) or ""
    return out


@dataclass
class MergeResult:
    """What :func:`merge_parts` wrote and counted."""

    admitted: int  #: rows written to the frame
    records_read: int  #: work records in every part (versions included)
    works_read: int  #: distinct work ids in every part
    outcomes: dict[str, int]  #: routed rows by outcome, plus ``newest_version_has_no_route`` and ``no_route``
    admitted_by_file: dict[str, int]
    quarantine: pa.Table  #: every part's quarantine rows (QUARANTINE_SCHEMA)


def merge_parts(
    storage: MetacanStorage, dirs: list[Path], removed: dict[str, str], rule: AdmissionRule, build_id: str
) -> MergeResult:
    """Merge the parts in ``dirs`` into the warehouse table ``frame`` (FRAME_SCHEMA, stamped with
    ``build_id``) and read their quarantine rows. ``removed`` are the merged and deleted ids
    (:func:`removed_work_ids`). Runs in a private DuckDB (1 GB, spilling under the warehouse)."""
    con = duckdb.connect(
        config={
            "memory_limit": MERGE_MEMORY_LIMIT,
            "temp_directory": str(storage.warehouse / ".spill-frame"),
            "preserve_insertion_order": False,
        }
    )
    try:
        con.execute("CREATE TEMP TABLE removed(id VARCHAR)")
        if removed:
            con.executemany("INSERT INTO removed VALUES (?)", [[i] for i in removed])
        for view, name in (("routed", "routed.parquet"), ("idx", "index.parquet")):  # a view takes no parameters
            paths = ", ".join(sql_literal(str(d / name)) for d in dirs)
            con.execute(f"CREATE TEMP VIEW {view} AS SELECT * FROM read_parquet([{paths}], hive_partitioning=false)")
        con.execute(merge_sql("newest"))
        con.execute(merge_sql("outcome"), {"min": rule.year_min, "max": rule.year_max})
        n_records, n_unique = con.execute("SELECT count(*), count(DISTINCT id) FROM idx").fetchone()
        outcomes = dict(
            con.execute("SELECT outcome, count(*) FROM outcome WHERE outcome <> 'superseded' GROUP BY ALL").fetchall()
        )
        outcomes["newest_version_has_no_route"] = con.execute(merge_sql("newest_without_route")).fetchone()[0]
        outcomes["no_route"] = n_unique - con.execute("SELECT count(DISTINCT id) FROM routed").fetchone()[0]
        admitted_by_file = dict(
            con.execute("SELECT source_file, count(*) FROM outcome WHERE outcome = 'admitted' GROUP BY ALL").fetchall()
        )
        reader = con.execute(merge_sql("admitted"), {"build_id": build_id}).to_arrow_reader(50_000)
        n = storage.write_table("frame", reader, schema=FRAME_SCHEMA)
        quarantine = con.execute(
            "SELECT * FROM read_parquet(?, hive_partitioning=false)", [[str(d / "quarantine.parquet") for d in dirs]]
        ).to_arrow_table()
    finally:
        con.close()
    return MergeResult(n, n_records, n_unique, outcomes, admitted_by_file, quarantine.cast(QUARANTINE_SCHEMA))


def quarantine_table(part_quarantine: pa.Table, inventory_rows: list[dict]) -> pa.Table:
    """The ``openalex_quarantine`` table: the parts' quarantine rows, then one row per unsupported
    input file of the inventory (never skipped silently)."""
    unsupported = [
        {"source_file": r["source_file"], "locator": "file", "line": None, "excerpt": "", "reason": UNSUPPORTED_REASON}
        for r in inventory_rows
        if r["manifest_status"] == "unsupported"
    ]
    return pa.concat_tables([part_quarantine, pa.Table.from_pylist(unsupported, schema=QUARANTINE_SCHEMA)])


def build_manifest_table(manifest: list[dict], admitted_by_file: dict[str, int]) -> pa.Table:
    """The ``frame_build_manifest`` table: one row per part used, with its admitted count, by file."""
    rows = sorted(
        ({**r, "admitted": admitted_by_file.get(r["source_file"], 0)} for r in manifest),
        key=lambda r: r["source_file"],
    )
    return pa.Table.from_pylist(rows, schema=BUILD_MANIFEST_SCHEMA)


@dataclass
class FrameSummary:
    """The figures the ``frame`` asset reports, read back from the frame."""

    by_route: dict[str, int]
    affiliation_blind: int  #: works with no Canadian affiliation (``invisible_to_affiliation_only``)
    in_sampling_frame: int
    with_abstract: int
    preview: list[dict]  #: the first 10 works by id
    by_year: dict[int, dict[str, int]]  #: works per publication year by route


PREVIEW_COLUMNS = ["id", "title_text", "publication_year", "route_key", "in_sampling_frame"]


def record_frame_build(storage: MetacanStorage, build_id: str, run_id: str, works: int, parts: int) -> FrameSummary:
    """Record the run that first produced ``build_id`` in ``frame_builds`` (a re-run over unchanged
    parts yields the same id and keeps the first run), every run that produced it in ``frame_build_runs``
    (the lineage says which runs made the same build), and read the frame's summary figures."""
    by_route_sql = ", ".join(f"count(*) FILTER ({r})" for r in ROUTES)
    with storage.connect() as con:
        con.execute(
            "INSERT INTO frame_builds VALUES (?, ?, now(), ?, ?) ON CONFLICT DO NOTHING",
            [build_id, run_id, works, parts],
        )
        con.execute("INSERT INTO frame_build_runs VALUES (?, ?, now()) ON CONFLICT DO NOTHING", [build_id, run_id])
        *routes, blind, sampling, abstract = con.execute(
            f"SELECT {by_route_sql}, count(*) FILTER (invisible_to_affiliation_only), "
            "count(*) FILTER (in_sampling_frame), count(*) FILTER (has_abstract) FROM frame"
        ).fetchone()
        preview = (
            con.execute(f"SELECT {', '.join(PREVIEW_COLUMNS)} FROM frame ORDER BY id LIMIT 10")
            .to_arrow_table()
            .to_pylist()
        )
        by_year = {
            year: dict(zip(ROUTES, counts, strict=True))
            for year, *counts in con.execute(
                f"SELECT publication_year, {by_route_sql} FROM frame GROUP BY ALL ORDER BY 1"
            ).fetchall()
        }
    return FrameSummary(dict(zip(ROUTES, routes, strict=True)), blind, sampling, abstract, preview, by_year)
