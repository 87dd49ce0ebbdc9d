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

from ..frame.lexicon import evidence_hits, find_hits, prefilter_pattern, text_may_count
from .abstract import deinvert, markup_to_text
from .reader import QUARANTINE_COLUMNS, Quarantined, iter_file
from .works import WORKS_SCHEMA, work_row

#: The fields of a work record the frame reads (OpenAlex docs, "Work object"); DuckDB skips the rest.
FAST_COLUMNS = {
    "id": "VARCHAR", "doi": "VARCHAR", "title": "JSON", "display_name": "JSON", "publication_year": "DOUBLE",
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


_FAST_SQL = """
WITH raw AS (
  SELECT *, row_number() OVER () AS _line,
         upper(regexp_extract(trim(id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)) AS _sid
  FROM read_json($path, format='newline_delimited', compression='auto_detect', hive_partitioning=false, columns=COLUMNS)
), typed AS (
  SELECT *,
    list_transform(flatten(list_transform(coalesce(authorships, []), lambda a: coalesce(a.institutions, []))),
      lambda i: {'id': nullif(upper(regexp_extract(trim(i.id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)), ''),
                 'name': i.display_name, 'country_code': i.country_code}) AS _insts,
    list_concat(
      list_transform(coalesce(funders, []), lambda f: {'id': nullif(upper(regexp_extract(trim(f.id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)), ''),
                                                        'name': f.display_name, 'via': 'funders.id'}),
      list_transform(coalesce(awards, []), lambda f: {'id': nullif(upper(regexp_extract(trim(f.funder_id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)), ''),
                                                       'name': f.funder_display_name, 'via': 'awards.funder_id'}),
      list_transform(coalesce(grants, []), lambda f: {'id': nullif(upper(regexp_extract(trim(f.funder), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)), ''),
                                                       'name': f.funder_display_name, 'via': 'grants.funder'})) AS _funds,
    list_filter(list_transform(coalesce(keywords, []), lambda k: k.display_name), lambda x: x IS NOT NULL AND x <> '') AS _kw
  FROM raw
), keyed AS (
  SELECT *,
    list_transform(_insts, lambda x: coalesce(x.id, 'unresolved:' || coalesce(x.name, 'None'))) AS _ikeys,
    list_filter(_funds, lambda x: x.id IS NOT NULL) AS _funds_ok
  FROM typed
)
SELECT
  _sid AS id, _line,
  doi,
  CASE WHEN json_type(title) = 'VARCHAR' THEN title ->> '$' WHEN json_type(display_name) = 'VARCHAR' THEN display_name ->> '$' END AS title,
  CASE WHEN publication_year = floor(publication_year) AND abs(publication_year) < 100000 THEN CAST(publication_year AS INTEGER) END AS publication_year,
  publication_date, updated_date, language, type,
  coalesce(is_paratext, false) AS is_paratext,
  coalesce(is_retracted, false) AS is_retracted,
  cited_by_count,
  nullif(upper(regexp_extract(trim(primary_location.source.id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)), '') AS venue_id,
  primary_location.source.display_name AS venue_name,
  primary_topic.display_name AS topic,
  primary_topic.field.display_name AS field,
  list_filter(_insts, lambda x, i: list_position(_ikeys, _ikeys[i]) = i) AS institutions,
  list_sort(list_distinct(list_transform(list_filter(flatten(list_transform(coalesce(authorships, []), lambda a: coalesce(a.countries, []))),
                                                     lambda c: c IS NOT NULL), lambda c: upper(c)))) AS author_countries,
  list_filter(_funds_ok, lambda x, i: list_position(list_transform(_funds_ok, lambda y: y.id), x.id) = i) AS funders,
  _kw AS keywords,
  coalesce(is_authors_truncated, false) AS is_authors_truncated,
  CAST(len(coalesce(authorships, [])) AS INTEGER) AS n_authorships,
  coalesce(starts_with(abstract_inverted_index::VARCHAR, '{') AND abstract_inverted_index::VARCHAR <> '{}', false) AS has_abstract,
  regexp_matches(lower(coalesce(title ->> '$', '') || ' ' || coalesce(display_name ->> '$', '') || ' ' || array_to_string(_kw, '; ')), $pattern) AS _text_flag,
  CASE WHEN starts_with(abstract_inverted_index::VARCHAR, '{') AND regexp_matches(lower(abstract_inverted_index::VARCHAR), $pattern)
       THEN abstract_inverted_index::VARCHAR END AS _abstract_json
FROM keyed
"""


def _fast_tables(path: Path, source: str, batch_rows: int, counts: Counter) -> Iterator[pa.Table]:
    """Typed work rows of one JSON Lines file, computed by DuckDB; Python only adds ``title_text``
    and, for the few works whose text contains a lexicon token, ``lexicon_hits``."""
    import duckdb
    import pyarrow.compute as pc

    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in FAST_COLUMNS.items()) + "}"
    con = duckdb.connect(config={"threads": 1, "memory_limit": "512MB"})
    try:
        reader = con.execute(_FAST_SQL.replace("COLUMNS", columns), {"path": str(path), "pattern": prefilter_pattern()}).to_arrow_reader(batch_rows)
        for batch in reader:
            ids = batch.column("id")
            if pc.any(pc.equal(ids, "")).as_py() or ids.null_count:
                bad = pc.index(pc.fill_null(ids, ""), "").as_py()
                raise _NeedsExactPath(f"record {batch.column('_line')[bad].as_py()} has no valid work id")
            kinds = pc.utf8_slice_codeunits(ids, 0, 1)
            for kind, n in zip(*pc.value_counts(kinds).flatten()):
                counts[kind.as_py()] += n.as_py()
            batch = pa.Table.from_batches([batch]).filter(pc.equal(kinds, "W"))
            if batch.num_rows == 0:
                continue
            titles = batch.column("title").to_pylist()
            title_text = [markup_to_text(t) for t in titles]
            hits: list[list[dict]] = [[] for _ in titles]
            flags = batch.column("_text_flag").to_pylist()
            abstracts = batch.column("_abstract_json").to_pylist()
            keywords = None
            for i, (flag, raw) in enumerate(zip(flags, abstracts)):
                if flag or raw:
                    if keywords is None:
                        keywords = batch.column("keywords").to_pylist()
                    context = f"{title_text[i]} {'; '.join(keywords[i] or [])}"
                    text = deinvert(orjson.loads(raw)) if raw and text_may_count(raw.lower(), context) else None
                    found = find_hits({"title": title_text[i], "abstract": text, "keywords": "; ".join(keywords[i] or [])})
                    hits[i] = [{"term": h.term, "tier": h.tier, "field": h.field} for h in evidence_hits(found)]
            lines = batch.column("_line").to_pylist()
            n = batch.num_rows
            yield pa.table({
                **{f.name: batch.column(f.name) for f in WORKS_SCHEMA if f.name in batch.column_names},
                "title_text": pa.array(title_text, pa.string()),
                "lexicon_hits": pa.array(hits, WORKS_SCHEMA.field("lexicon_hits").type),
                "source_file": pa.array([source] * n, pa.string()),
                "source_locator": pa.array([f"record {x}" for x in lines], pa.string()),
            }).select([f.name for f in WORKS_SCHEMA]).cast(WORKS_SCHEMA)
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

    Both paths locate a JSON Lines work as ``record N`` (N counts non-blank lines); quarantine rows
    name the physical line.
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

    name = p.name.lower()
    lines_file = name.endswith((".gz", ".jsonl", ".ndjson")) and not name.endswith(".json.gz")
    if fast and lines_file and not any(c in str(p) for c in "*?[]{}"):  # DuckDB would read a name with these as a glob
        try:
            for table in _fast_tables(p, out.source_file, rows_per_chunk, out.counts):
                pq.write_table(table, Path(stage_dir) / f"f{index:06d}-{out.chunks:04d}.parquet")
                out.chunks += 1
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
