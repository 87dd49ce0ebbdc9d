"""Read one OpenAlex input file as the frame needs it: an id index of every work and the typed rows
of the works on which a route can fire.

Used by :mod:`metacan_pipeline.frame.parts` (one task per file, in worker processes). Workers import
only this module's light dependencies, never Dagster.

JSON Lines files (snapshot parts) take a fast path: DuckDB's ``read_json`` with an explicit column
list parses only the fields the frame needs (the rest of a record, most of its bytes, is skipped in
C++), decides in SQL which works can be on a structural route (affiliation, funder, venue against the
pinned entity lists), and an RE2 pre-scan of title, keywords and raw abstract index decides which
works need the lexicon at all. Python sees only those candidates (a few percent of a snapshot); SQL
computes the typed columns of candidates only (NULL for the other works, of which only the id index
is read). A file the fast path cannot take whole (a parse error, a truncated gzip, a record without
an id, a value of the wrong type) is re-read on the exact Python path, which quarantines the bad
records with their line numbers. Both paths produce identical rows (a test proves it on every real work record).
"""

from __future__ import annotations

import queue
import re
import threading
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..tables.openalex import INDEX_SCHEMA
from .abstract import deinvert, markup_to_text
from .lexicon import abstract_may_count_sql, abstract_words_sql, evidence_hits, find_hits, prefilter_pattern
from .reader import QUARANTINE_COLUMNS, Quarantined, is_archive, is_file_error, iter_file
from .works import types_sql, work_row

#: One row per work record read (every work, routed or not): what the frame merge needs to let the
#: newest version of a work win across files (SPEC section 2: a work appears once).

#: The fields of a work record the frame reads (OpenAlex docs, "Work object"); DuckDB skips the rest.
FAST_COLUMNS = {
    "id": "VARCHAR",
    "doi": "VARCHAR",
    "ids": "STRUCT(pmid VARCHAR)",
    "title": "JSON",
    "display_name": "JSON",
    "publication_year": "DOUBLE",
    "publication_date": "VARCHAR",
    "updated_date": "VARCHAR",
    "language": "VARCHAR",
    "type": "VARCHAR",
    "type_crossref": "VARCHAR",
    "is_paratext": "BOOLEAN",
    "is_retracted": "BOOLEAN",
    "cited_by_count": "BIGINT",
    "primary_location": "STRUCT(source STRUCT(id VARCHAR, display_name VARCHAR))",
    "host_venue": "STRUCT(id VARCHAR, display_name VARCHAR)",  # the 2022 schema's venue
    "primary_topic": "STRUCT(display_name VARCHAR, field STRUCT(display_name VARCHAR))",
    "authorships": "STRUCT(author STRUCT(id VARCHAR, display_name VARCHAR, orcid VARCHAR), raw_author_name VARCHAR, countries VARCHAR[], "
    "institutions STRUCT(id VARCHAR, display_name VARCHAR, country_code VARCHAR, ror VARCHAR)[])[]",
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
    CASE WHEN primary_location.source.id IS NOT NULL OR primary_location.source.display_name IS NOT NULL
         THEN nullif(upper(regexp_extract(trim(primary_location.source.id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)), '')
         WHEN host_venue.id IS NOT NULL OR host_venue.display_name IS NOT NULL
         THEN regexp_replace(nullif(upper(regexp_extract(trim(host_venue.id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)), ''), '^V', 'S')
    END AS _venue_id,
    CASE WHEN primary_location.source.id IS NOT NULL OR primary_location.source.display_name IS NOT NULL
         THEN primary_location.source.display_name ELSE host_venue.display_name END AS _venue_name,
    list_transform(flatten(list_transform(coalesce(authorships, []), lambda a: coalesce(a.institutions, []))),
      lambda i: {'id': nullif(upper(regexp_extract(trim(i.id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)), ''),
                 'name': i.display_name, 'country_code': i.country_code, 'ror': i.ror}) AS _insts,
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
    list_filter(_funds, lambda x: x.id IS NOT NULL) AS _funds_ok,
    list_transform(list_filter(flatten(list_transform(coalesce(authorships, []), lambda a: coalesce(a.countries, []))),
                               lambda c: c IS NOT NULL), lambda c: upper(c)) AS author_countries_raw,
    coalesce(title ->> '$', '') || ' ' || coalesce(display_name ->> '$', '') || ' ' || array_to_string(_kw, '; ') AS _context,
    CASE WHEN starts_with(abstract_inverted_index::VARCHAR, '{') THEN ABSTRACT_WORDS END AS _abs_words
  FROM typed
), flagged AS (
  SELECT *,
    (list_contains(author_countries_raw, 'CA')
     OR len(list_filter(_insts, lambda i: upper(i.country_code) = 'CA' OR list_contains($inst, i.id))) > 0
     OR len(list_filter(_funds_ok, lambda f: list_contains($funders, f.id))) > 0
     OR list_contains($sources, _venue_id)) AS _structural,
    regexp_matches(lower(_context), $pattern) OR regexp_matches(_context, '&[#a-zA-Z0-9]+;') AS _text_flag,
    CASE WHEN starts_with(abstract_inverted_index::VARCHAR, '{') AND ABSTRACT_MAY_COUNT THEN abstract_inverted_index::VARCHAR END AS _abstract_json
  FROM keyed
), candidate AS (
  SELECT *,
    coalesce(_structural, true) OR coalesce(_text_flag, true) OR _abstract_json IS NOT NULL AS _candidate,
    CASE WHEN _candidate THEN list_transform(_insts, lambda x: coalesce(x.id, 'unresolved:' || coalesce(x.name, 'None'))) END AS _ikeys
  FROM flagged
)
SELECT
  _sid AS id, _line,
  CASE WHEN _candidate THEN doi END AS doi,
  CASE WHEN _candidate THEN nullif(CAST(TRY_CAST(nullif(regexp_extract(trim(ids.pmid),
    '^(https?://(www[.])?(pubmed[.]ncbi[.]nlm[.]nih[.]gov|ncbi[.]nlm[.]nih[.]gov/pubmed)/)?([0-9]{1,9})/?$', 4), '') AS BIGINT) AS VARCHAR), '0') END AS pmid,
  CASE WHEN NOT _candidate THEN NULL
       WHEN json_type(title) = 'VARCHAR' THEN title ->> '$' WHEN json_type(display_name) = 'VARCHAR' THEN display_name ->> '$' END AS title,
  CASE WHEN _candidate AND publication_year = floor(publication_year) AND abs(publication_year) < 100000 THEN CAST(publication_year AS INTEGER) END AS publication_year,
  CASE WHEN _candidate THEN publication_date END AS publication_date,
  updated_date,
  CASE WHEN _candidate THEN language END AS language,
  CASE WHEN _candidate THEN TYPE_SQL END AS type,
  CASE WHEN _candidate THEN TYPE_CROSSREF_SQL END AS type_crossref,
  CASE WHEN _candidate THEN coalesce(is_paratext, false) END AS is_paratext,
  CASE WHEN _candidate THEN coalesce(is_retracted, false) END AS is_retracted,
  CASE WHEN _candidate THEN cited_by_count END AS cited_by_count,
  CASE WHEN _candidate THEN _venue_id END AS venue_id,
  CASE WHEN _candidate THEN _venue_name END AS venue_name,
  CASE WHEN _candidate THEN primary_topic.display_name END AS topic,
  CASE WHEN _candidate THEN primary_topic.field.display_name END AS field,
  CASE WHEN _candidate THEN list_filter(_insts, lambda x, i: list_position(_ikeys, _ikeys[i]) = i) END AS institutions,
  CASE WHEN _candidate THEN list_sort(list_distinct(author_countries_raw)) END AS author_countries,
  CASE WHEN _candidate THEN list_transform(coalesce(authorships, []), lambda a: {
    'name': coalesce(a.author.display_name, a.raw_author_name), 'orcid': a.author.orcid,
    'countries': list_transform(list_filter(coalesce(a.countries, []), lambda c: c IS NOT NULL), lambda c: upper(c)),
    'institution_keys': list_transform(coalesce(a.institutions, []), lambda i: coalesce(
      nullif(upper(regexp_extract(trim(i.id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)), ''),
      'unresolved:' || coalesce(i.display_name, 'None'))),
    'author_id': CASE WHEN upper(regexp_extract(trim(a.author.id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)) LIKE 'A%'
                      THEN upper(regexp_extract(trim(a.author.id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)) END,
    'bad_author_id': CASE WHEN a.author.id IS NOT NULL AND NOT (upper(regexp_extract(trim(a.author.id), '^(https?://openalex[.]org/)?([A-Za-z][0-9]{1,19})$', 2)) LIKE 'A%')
                          THEN a.author.id END}) END AS authors,
  CASE WHEN _candidate THEN list_filter(_funds_ok, lambda x, i: list_position(list_transform(_funds_ok, lambda y: y.id), x.id) = i) END AS funders,
  CASE WHEN _candidate THEN _kw END AS keywords,
  CASE WHEN _candidate THEN coalesce(is_authors_truncated, false) END AS is_authors_truncated,
  CASE WHEN _candidate THEN CAST(len(coalesce(authorships, [])) AS INTEGER) END AS n_authorships,
  CASE WHEN _candidate THEN coalesce(starts_with(abstract_inverted_index::VARCHAR, '{') AND abstract_inverted_index::VARCHAR <> '{}', false) END AS has_abstract,
  _structural, _text_flag, _abstract_json, _candidate
FROM candidate
"""


@dataclass
class ReadStats:
    """What reading one file found: records by entity letter, quarantine rows, reader path."""

    counts: Counter = field(default_factory=Counter)
    quarantine: list[dict] = field(default_factory=list)
    read_path: str = "python"
    fallback_reason: str | None = None

    @property
    def records_read(self) -> int:
        """Records of any entity plus unreadable records (a snapshot manifest's ``record_count`` counts
        these); a file-level error (a cut gzip, an unreadable document) is not a record."""
        return (
            sum(v for k, v in self.counts.items() if len(k) == 1)
            + self.counts["quarantined"]
            - self.counts["file_errors"]
        )


@dataclass
class WorkBatch:
    """One batch of a file: the id index of all its works and the typed rows (``WORKS_SCHEMA`` dicts)
    of the candidates, the works on which some route may fire."""

    index: pa.Table
    candidates: list[dict]


def _ordinal(locator: str) -> int | None:
    m = re.search(r"([0-9]+)[^0-9]*$", locator)
    return int(m.group(1)) if m else None


_DONE = object()

#: Candidate rows made Python dicts at a time (a slice of one DuckDB batch): where most works of a file are
#: candidates (a file of Canadian works), a whole batch of dicts holds about 1.8 GB a worker.
CANDIDATE_ROWS = 2_000


def _prefetched(batches: Iterable, depth: int = 2) -> Iterator:
    """``batches`` pulled by a background thread, ``depth`` ahead: DuckDB parses the next batch (it
    releases the GIL) while this thread does the Python half of the current one, so a part uses a
    second core when one is free (e.g. the last part of a build). Errors surface in the consumer;
    a consumer that stops early stops the thread before the generator returns."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def pump() -> None:
        try:
            for item in batches:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised there
            q.put(exc)

    thread = threading.Thread(target=pump, name="duckdb-prefetch", daemon=True)
    thread.start()
    try:
        while (item := q.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a pump waiting on a full queue, then let it finish
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(0.05)


def _fast_batches(
    path: Path, source: str, entity_ids: dict[str, list[str]], batch_rows: int, stats: ReadStats
) -> Iterator[WorkBatch]:
    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in FAST_COLUMNS.items()) + "}"
    con = duckdb.connect(config={"threads": 1, "memory_limit": "512MB"})
    params = {
        "path": str(path),
        "pattern": prefilter_pattern(),
        "inst": entity_ids["institution"],
        "funders": entity_ids["funder"],
        "sources": entity_ids["source"],
    }
    batches = None
    try:
        sql = (
            _FAST_SQL.replace("COLUMNS", columns)
            .replace("ABSTRACT_WORDS", abstract_words_sql("abstract_inverted_index::VARCHAR"))
            .replace("ABSTRACT_MAY_COUNT", abstract_may_count_sql("_abs_words", "_context"))
            .replace("TYPE_CROSSREF_SQL", types_sql("type", "type_crossref")[1])
            .replace("TYPE_SQL", types_sql("type", "type_crossref")[0])
        )
        for name in ("inst", "funders", "sources"):
            sql = sql.replace(f"${name}", f"${name}::VARCHAR[]")
        batches = _prefetched(con.execute(sql, params).to_arrow_reader(batch_rows))
        for batch in batches:
            ids = batch.column("id")
            if pc.any(pc.equal(ids, "")).as_py() or ids.null_count:
                bad = pc.index(pc.fill_null(ids, ""), "").as_py()
                raise _NeedsExactPath(f"record {batch.column('_line')[bad].as_py()} has no valid work id")
            kinds = pc.utf8_slice_codeunits(ids, 0, 1)
            for kind, n in zip(*pc.value_counts(kinds).flatten(), strict=False):
                stats.counts[kind.as_py()] += n.as_py()
            table = pa.Table.from_batches([batch]).filter(pc.equal(kinds, "W"))
            if table.num_rows == 0:
                continue
            lines = table.column("_line")
            index = pa.table(
                {
                    "id": table.column("id"),
                    "updated_date": table.column("updated_date"),
                    "source_file": pa.array([source] * table.num_rows, pa.string()),
                    "source_locator": pc.binary_join_element_wise("record ", pc.cast(lines, pa.string()), ""),
                    "ordinal": pc.cast(lines, pa.int64()),
                }
            )
            chosen = table.filter(table.column("_candidate")).drop_columns(["_candidate"])
            for start in range(0, max(chosen.num_rows, 1), CANDIDATE_ROWS):
                cand = chosen.slice(start, CANDIDATE_ROWS).to_pylist()
                yield WorkBatch(index if start == 0 else index.slice(0, 0), _typed_candidates(cand, source))
    except duckdb.Error as exc:
        raise _NeedsExactPath(str(exc)) from None
    finally:
        if batches is not None:
            batches.close()  # stops the prefetch thread before its connection closes
        con.close()


def _typed_candidates(cand: list[dict], source: str) -> list[dict]:
    """The fast path's candidate rows made as :func:`.works.work_row` makes them: title text, lexicon hits, locator."""
    for w in cand:
        title_text = markup_to_text(w["title"])
        hits: list[dict] = []
        raw = w.pop("_abstract_json")
        if w.pop("_text_flag") or raw:
            kw = "; ".join(w["keywords"] or [])
            text = deinvert(orjson.loads(raw)) if raw else None
            found = find_hits({"title": title_text, "abstract": text, "keywords": kw})
            hits = [{"term": h.term, "tier": h.tier, "field": h.field} for h in evidence_hits(found)]
        w["title_text"] = title_text
        w["lexicon_hits"] = hits
        w["source_file"] = source
        w["source_locator"] = f"record {w.pop('_line')}"
        w.pop("_structural", None)
    return cand


def _exact_batches(path: Path, source: str, batch_rows: int, stats: ReadStats) -> Iterator[WorkBatch]:
    rows: list[dict] = []

    def flush() -> WorkBatch:
        index = pa.table(
            {
                "id": [r["id"] for r in rows],
                "updated_date": [r["updated_date"] for r in rows],
                "source_file": [r["source_file"] for r in rows],
                "source_locator": [r["source_locator"] for r in rows],
                "ordinal": [_ordinal(r["source_locator"]) for r in rows],
            },
            schema=INDEX_SCHEMA,
        )
        return WorkBatch(index, list(rows))

    for item in iter_file(path, source=source):
        if isinstance(item, Quarantined):
            stats.quarantine.append({k: getattr(item, k) for k in QUARANTINE_COLUMNS})
            stats.counts["quarantined"] += 1
            if is_file_error(item):
                stats.counts["file_errors"] += 1  # the file, not a record: not counted as a record read
            continue
        stats.counts[item.kind] += 1
        if item.kind == "W":
            rows.append(work_row(item))
            if len(rows) >= batch_rows:
                yield flush()
                rows = []
    if rows:
        yield flush()


def gzip_is_complete(path: Path) -> bool:
    """Whether every gzip member of ``path`` ends with its end-of-stream marker and trailer (zlib,
    output discarded). DuckDB's reader returns the whole lines of a gzip file cut at a line boundary
    without an error; this is how such a cut is noticed when no manifest count can tell."""
    d = zlib.decompressobj(wbits=47)  # 32 + 15: gzip header, maximum window
    fed = False  # the current member has started but not ended
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                while chunk:
                    fed = True
                    d.decompress(chunk, 1 << 22)
                    while d.unconsumed_tail:
                        d.decompress(d.unconsumed_tail, 1 << 22)
                    if not d.eof:
                        break
                    chunk, d, fed = d.unused_data, zlib.decompressobj(wbits=47), False
                    if chunk and not chunk.strip(b"\0"):  # zero padding after the last member
                        return True
    except zlib.error:
        return False
    return not fed


def read_work_batches(
    path: Path,
    source: str,
    entity_ids: dict[str, list[str]],
    stats: ReadStats,
    batch_rows: int = 20_000,
    fast: bool = True,
    expected_records: int | None = None,
) -> Iterator[WorkBatch]:
    """The works of one file in batches, named ``source`` in their rows; never raises for bad content
    (bad records land in ``stats.quarantine``).

    ``entity_ids`` maps ``institution``/``funder``/``source`` to the pinned Canadian ids. On the
    fast path the candidates are the works with a structural route or a possible lexicon hit; on
    the exact path every work is a candidate (the routing decides). Both paths locate a JSON Lines
    work as ``record N`` (N counts non-blank lines); quarantine rows name the physical line. If the
    fast path fails part-way, it yields None: the batches it yielded before are superseded and the
    exact path's follow (see :func:`metacan_pipeline.frame.parts.build_part`).

    ``expected_records`` is the snapshot manifest's count for the file, if any: when the fast path
    read another number of records from a gzip file, the gzip stream is checked to its end
    (:func:`gzip_is_complete`), since DuckDB does not report a cut at a line boundary; a cut file is
    re-read on the exact path, which quarantines the cut.
    """
    name = path.name.lower()
    lines_file = name.endswith((".gz", ".jsonl", ".ndjson")) and not name.endswith(".json.gz") and not is_archive(path)
    if (
        fast and lines_file and not any(c in str(path) for c in "*?[]{}")
    ):  # DuckDB would read a name with these as a glob
        try:
            stats.read_path = "duckdb"
            yield from _fast_batches(path, source, entity_ids, batch_rows, stats)
            if name.endswith(".gz") and stats.records_read != expected_records and not gzip_is_complete(path):
                raise _NeedsExactPath(
                    f"gzip stream ends early after {stats.records_read} records (cut at a line boundary)"
                )
            return
        except _NeedsExactPath as exc:
            stats.counts.clear()
            stats.read_path = "python"
            stats.fallback_reason = str(exc)[:300]
            yield None  # tells the caller to drop what it has from this file
    yield from _exact_batches(path, source, batch_rows, stats)
