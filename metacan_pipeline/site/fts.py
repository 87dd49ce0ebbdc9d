"""Full-text search over titles and keywords: an SQLite FTS5 index beside each release database.

Measured (``benchmarks/bench_site_fts.py --works 200000``, 2-core AMD EPYC, 2026-12, each against a bare DuckDB
``ILIKE`` scan in the same process; count of matches plus the top 20 by BM25; p50 / p95 over 15 runs):

=====================  ========  =========  ===============  ===============  ===============
engine                 build     index      "reproducibility"  "peer review"  "bibliometric"
                                            (2,039 hits)     (980 hits)       (188 hits)
=====================  ========  =========  ===============  ===============  ===============
SQLite FTS5 3.40.1     1.4 s     36.8 MB    2.7 / 6.5 ms     1.1 / 1.9 ms     0.2 / 0.2 ms
DuckDB fts (1.5.5)     9.1 s     21.5 MB    37 / 46 ms       45 / 60 ms       41 / 47 ms
DuckDB ILIKE scan      none      none       196 / 252 ms     171 / 204 ms     164 / 201 ms
=====================  ========  =========  ===============  ===============  ===============

DuckDB's fts extension could not be the choice anyway: the PyPI package ``duckdb-extension-fts`` 1.5.5 is
refused by the pinned duckdb 1.5.6 ("The file was built specifically for DuckDB version 'v1.5.5' and can only be
loaded with that version of DuckDB"), and nothing may be downloaded at run time; its row was measured in a
scratch venv with duckdb 1.5.5. SQLite FTS5 ships with Python, builds 6x faster and answers 10-200x faster
(its ``match_bm25`` scans every row; FTS5 walks posting lists). So: FTS5, ``tokenize='porter unicode61
remove_diacritics 2'`` (English stems, French accents folded), the rowid being the work's ``work_key``.

A user's text never reaches FTS5's query syntax: :func:`match_expression` keeps its word tokens only and
quotes each one (``"word"``), joined by ``AND``; the expression is bound as a parameter.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

#: Word tokens of a text query (letters, digits, underscore in any script), at most this many.
TOKEN_RE = re.compile(r"\w+", re.UNICODE)
MAX_TOKENS = 12
TOKENIZE = "porter unicode61 remove_diacritics 2"


def tokens(text: str) -> list[str]:
    """The word tokens of ``text``, case-folded (what FTS5's unicode61 tokenizer compares)."""
    return [t.casefold() for t in TOKEN_RE.findall(text or "")]


def match_expression(words: list[str]) -> str:
    """The FTS5 MATCH expression for ``words``: every token quoted (a quote inside doubled), all required."""
    return " AND ".join('"' + w.replace('"', '""') + '"' for w in words)


def build_index(path: Path, rows: Iterable[pa.RecordBatch]) -> int:
    """Write the index of ``rows`` (batches with ``work_key``, ``title``, ``keywords``) to a new SQLite file at
    ``path`` (which must not exist); returns the rows indexed. The index is optimised (merged) at the end."""
    con = sqlite3.connect(path)
    n = 0
    try:
        con.execute(f"CREATE VIRTUAL TABLE work_text USING fts5(title, keywords, tokenize='{TOKENIZE}')")
        for batch in rows:
            cols = [batch.column(c).to_pylist() for c in ("work_key", "title", "keywords")]
            con.executemany("INSERT INTO work_text(rowid, title, keywords) VALUES (?, ?, ?)", zip(*cols, strict=True))
            n += batch.num_rows
        con.execute("INSERT INTO work_text(work_text) VALUES ('optimize')")
        con.commit()
    finally:
        con.close()
    return n


def open_index(path: Path, check: bool = True) -> sqlite3.Connection:
    """A read-only connection to an index file; with ``check`` (at start-up), one query proves it is one
    (raises ``sqlite3.Error`` when it is not). A request's connection skips it: the check's query walks the
    posting list of "a", about 0.2 s at 4.3M works (benchmarks/bench_site.py)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    if check:
        con.execute("SELECT count(*) FROM work_text WHERE work_text MATCH '\"a\"'").fetchone()
    return con


def search(con: sqlite3.Connection, words: list[str]) -> pa.Table:
    """Every work matching all ``words``: ``work_key`` (int64) and ``rank`` (FTS5 BM25, lower = better)."""
    rows = con.execute(
        "SELECT rowid, bm25(work_text) FROM work_text WHERE work_text MATCH ?", [match_expression(words)]
    ).fetchall()
    keys, ranks = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [])
    return pa.table({"work_key": pa.array(keys, pa.int64()), "rank": pa.array(ranks, pa.float64())})


def count(con: sqlite3.Connection, words: list[str]) -> int:
    """The number of works matching all ``words`` (no ranking: FTS5 walks the posting lists only)."""
    return con.execute("SELECT count(*) FROM work_text WHERE work_text MATCH ?", [match_expression(words)]).fetchone()[
        0
    ]


def top(con: sqlite3.Connection, words: list[str], after: tuple[float, int] | None, limit: int) -> pa.Table:
    """The first ``limit`` matches of ``words`` by ``(rank, work_key)`` after the keyset ``after``, as
    :func:`search` gives them (BM25 is computed inside SQLite; only ``limit`` rows reach Python)."""
    sql = "SELECT rowid, r FROM (SELECT rowid, bm25(work_text) AS r FROM work_text WHERE work_text MATCH ?)"
    params: list = [match_expression(words)]
    if after is not None:
        sql += " WHERE r > ? OR (r = ? AND rowid > ?)"
        params += [after[0], after[0], after[1]]
    rows = con.execute(sql + " ORDER BY r, rowid LIMIT ?", [*params, limit]).fetchall()
    keys, ranks = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [])
    return pa.table({"work_key": pa.array(keys, pa.int64()), "rank": pa.array(ranks, pa.float64())})
