"""Stage OpenAlex files as typed Parquet rows, one file per task, in parallel worker processes.

Used by the ``openalex_works`` asset. Each task parses one input file (a snapshot part, an API page,
...), writes its work rows to ``<stage>/f<index>-<chunk>.parquet`` (at most ``rows_per_chunk`` rows in
memory) and returns its quarantine rows and record counts. Workers import only this module's light
dependencies, never Dagster.

JSON Lines files (snapshot parts) take a fast path: DuckDB's ``read_json`` with an explicit column
list parses only the fields the frame needs (the rest of a record, most of its bytes, is skipped in
C++), and an RE2 pre-scan of the raw abstract index decides whether the abstract needs de-inverting
for the lexicon at all. A file the fast path cannot take whole (a parse error, a truncated gzip, a
record without an id, a value of the wrong type) is re-read on the exact Python path, which
quarantines the bad records with their line numbers. Both paths produce identical rows.
"""

from __future__ import annotations

import multiprocessing as mp
import orjson
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..frame.lexicon import prefilter_pattern
from .abstract import deinvert
from .ids import entity_kind
from .reader import QUARANTINE_COLUMNS, Quarantined, Record, iter_file
from .works import WORKS_SCHEMA, work_row

#: The fields of a work record the frame reads (OpenAlex docs, "Work object"); DuckDB skips the rest.
FAST_COLUMNS = {
    "id": "VARCHAR", "doi": "VARCHAR", "title": "VARCHAR", "display_name": "VARCHAR", "publication_year": "BIGINT",
    "publication_date": "VARCHAR", "updated_date": "VARCHAR", "language": "VARCHAR", "type": "VARCHAR",
    "is_paratext": "BOOLEAN", "is_retracted": "BOOLEAN", "cited_by_count": "BIGINT",
    "primary_location": "STRUCT(source STRUCT(id VARCHAR, display_name VARCHAR))",
    "primary_topic": "STRUCT(display_name VARCHAR, field STRUCT(display_name VARCHAR))",
    "authorships": "STRUCT(countries VARCHAR[], institutions STRUCT(id VARCHAR, display_name VARCHAR, country_code VARCHAR)[])[]",
    "funders": "STRUCT(id VARCHAR, display_name VARCHAR)[]",
    "awards": "STRUCT(funder_id VARCHAR, funder_display_name VARCHAR)[]",
    "grants": "STRUCT(funder VARCHAR, funder_display_name VARCHAR)[]",
    "keywords": "STRUCT(display_name VARCHAR)[]",
    "is_authors_truncated": "BOOLEAN",
    "abstract_inverted_index": "JSON",
}


class _NeedsExactPath(Exception):
    """The fast path cannot take this file whole; the Python reader will."""


def _fast_rows(path: Path, source: str, batch_rows: int, counts: Counter) -> Iterator[list[dict]]:
    import duckdb

    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in FAST_COLUMNS.items()) + "}"
    con = duckdb.connect(config={"threads": 1, "memory_limit": "512MB"})
    try:
        rel = con.execute(
            f"""SELECT * EXCLUDE (abstract_inverted_index),
                       coalesce(abstract_inverted_index::VARCHAR NOT IN ('null', '{{}}'), false) AS _has_abstract,
                       CASE WHEN regexp_matches(lower(abstract_inverted_index::VARCHAR), ?)
                            THEN abstract_inverted_index::VARCHAR END AS _abstract_json
                FROM read_json(?, format='newline_delimited', compression='auto_detect', hive_partitioning=false, columns={columns})""",
            [prefilter_pattern(), str(path)],
        )
        line = 0
        for batch in rel.to_arrow_reader(batch_rows):
            rows = []
            for data in batch.to_pylist():
                line += 1
                kind = entity_kind(data["id"])
                if kind is None:
                    raise _NeedsExactPath(f"record without a valid id at line {line}")
                counts[kind] += 1
                if kind != "W":
                    continue
                has_abstract = data.pop("_has_abstract")
                raw = data.pop("_abstract_json")
                text = deinvert(orjson.loads(raw)) if raw else None
                rows.append(work_row(Record(data, source, f"line {line}", line, "W"), abstract=(has_abstract, text)))
            yield rows
    except duckdb.Error as exc:
        raise _NeedsExactPath(str(exc)) from None
    finally:
        con.close()


@dataclass
class StagedFile:
    """What one file yielded: counts by entity letter, quarantine rows, Parquet chunks written."""

    source_file: str
    counts: Counter = field(default_factory=Counter)
    quarantine: list[dict] = field(default_factory=list)
    chunks: int = 0
    fallback_reason: str | None = None
    bytes: int = 0
    mtime_ns: int = 0


def stage_file(path: str, root: str, stage_dir: str, index: int, rows_per_chunk: int = 10_000, fast: bool = True) -> StagedFile:
    """Parse one file and write its work rows as Parquet chunks; never raises for bad content.

    Note: on the fast path a work's locator is its record ordinal (``line N``), which equals the line
    number in snapshot parts (no blank lines); the exact path counts physical lines.
    """
    p, r = Path(path), Path(root)
    st = p.stat()
    out = StagedFile(str(p.relative_to(r)), bytes=st.st_size, mtime_ns=st.st_mtime_ns)
    buf: list[dict] = []

    def flush() -> None:
        nonlocal buf
        if buf:
            pq.write_table(pa.Table.from_pylist(buf, schema=WORKS_SCHEMA), Path(stage_dir) / f"f{index:06d}-{out.chunks:04d}.parquet")
            out.chunks += 1
            buf = []

    if fast and p.name.endswith((".gz", ".jsonl")) and not p.name.endswith(".json.gz"):
        try:
            for rows in _fast_rows(p, out.source_file, rows_per_chunk, out.counts):
                buf.extend(rows)
                flush()
            out.counts["fast_path_files"] += 1
            return out
        except _NeedsExactPath as exc:
            for chunk in Path(stage_dir).glob(f"f{index:06d}-*.parquet"):
                chunk.unlink()
            out = StagedFile(out.source_file, bytes=st.st_size, mtime_ns=st.st_mtime_ns)
            out.counts["exact_path_files"] += 1
            out.fallback_reason = str(exc)[:300]
            buf = []
    for item in iter_file(p, r):
        if isinstance(item, Quarantined):
            out.quarantine.append({k: getattr(item, k) for k in QUARANTINE_COLUMNS})
            out.counts["quarantined"] += 1
            continue
        out.counts[item.kind] += 1
        if item.kind == "W":
            buf.append(work_row(item))
            if len(buf) >= rows_per_chunk:
                flush()
    flush()
    return out


def stage_files(files: list[Path], root: Path, stage_dir: Path, workers: int, fast: bool = True) -> Iterator[StagedFile]:
    """Stage every file, ``workers`` at a time (1 = in this process); results in submission order."""
    if workers <= 1 or len(files) <= 1:
        for i, f in enumerate(files):
            yield stage_file(str(f), str(root), str(stage_dir), i, fast=fast)
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(stage_file, str(f), str(root), str(stage_dir), i, fast=fast) for i, f in enumerate(files)]
        for fut in futures:
            yield fut.result()
