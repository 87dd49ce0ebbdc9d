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

Frequent terms (issue 15, Performance): FTS5 computes BM25 for every match before it can give the first page, about
1.7 us a match on this machine when idle, so a one-word query matching a quarter of a million works took 0.43 s at
4.3M works. :func:`build_index` therefore stores, for every term in at least :data:`CHAMPION_MIN_DOCS` works, its
first :data:`CHAMPION_DEPTH` matches in the order a one-word query ranks them (BM25, then rowid; a "champion list",
Manning, Raghavan and Schuetze, Introduction to Information Retrieval, section 7.1.3), with the term's number of
matches: tables ``term_top`` and ``term_hits`` beside ``work_text``. :func:`top` answers a one-word query from it
(the word is reduced to its term by the index's own tokenizer, :func:`term_of`) as long as the page lies within the
stored matches; any other query, or a page beyond them, is ranked by FTS5 as before. The BM25 of a one-word query
depends only on the frozen index, so the stored order is the computed one.
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
#: A term in at least this many works gets its champion list (module docstring).
CHAMPION_MIN_DOCS = 50_000
#: Matches stored per frequent term: 50 pages of 20.
CHAMPION_DEPTH = 1000


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
        write_champions(con)
        con.commit()
    finally:
        con.close()
    return n


def write_champions(con: sqlite3.Connection, min_docs: int | None = None, depth: int | None = None) -> int:
    """Store the champion list of every term of ``work_text`` in at least ``min_docs`` works (default
    :data:`CHAMPION_MIN_DOCS`): its first ``depth`` (default :data:`CHAMPION_DEPTH`) matches as a one-word query ranks
    them, in ``term_top`` (term, position, rowid, rank), and its number of matches in ``term_hits``; returns the number
    of terms stored. A term the tokenizer would not give back unchanged from its own text is left out (a query could
    never reach it)."""
    min_docs = CHAMPION_MIN_DOCS if min_docs is None else min_docs
    depth = CHAMPION_DEPTH if depth is None else depth
    con.execute("DROP TABLE IF EXISTS term_top")
    con.execute("DROP TABLE IF EXISTS term_hits")
    con.execute(
        "CREATE TABLE term_top(term TEXT, position INTEGER, rowid_ INTEGER, rank REAL, PRIMARY KEY (term, position)) WITHOUT ROWID"
    )
    con.execute("CREATE TABLE term_hits(term TEXT PRIMARY KEY, hits INTEGER, depth INTEGER) WITHOUT ROWID")
    con.execute("CREATE VIRTUAL TABLE temp.work_terms USING fts5vocab(main, work_text, 'row')")
    terms = [t for (t,) in con.execute("SELECT term FROM temp.work_terms WHERE doc >= ? ORDER BY term", [min_docs])]
    con.execute("DROP TABLE temp.work_terms")
    stored = 0
    for term in terms:
        if term_of(term) != term:
            continue
        expr = match_expression([term])
        hits = con.execute("SELECT count(*) FROM work_text WHERE work_text MATCH ?", [expr]).fetchone()[0]
        rows = con.execute(
            "SELECT rowid, r FROM (SELECT rowid, bm25(work_text) AS r FROM work_text WHERE work_text MATCH ?) "
            "ORDER BY r, rowid LIMIT ?",
            [expr, depth],
        ).fetchall()
        con.executemany(
            "INSERT INTO term_top VALUES (?, ?, ?, ?)", [(term, i, key, rank) for i, (key, rank) in enumerate(rows)]
        )
        con.execute("INSERT INTO term_hits VALUES (?, ?, ?)", [term, hits, len(rows)])
        stored += 1
    return stored


def term_of(word: str) -> str | None:
    """The one term the index's tokenizer (:data:`TOKENIZE`) makes of ``word`` (e.g. ``learning`` -> ``learn``), or
    None when it makes none or several; an in-memory FTS5 table with the same tokenizer, so no stemmer of our own."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{TOKENIZE}')")
        mem.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'row')")
        mem.execute("INSERT INTO t(x) VALUES (?)", [word])
        terms = [t for (t,) in mem.execute("SELECT term FROM v")]
    finally:
        mem.close()
    return terms[0] if len(terms) == 1 else None


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
    :func:`search` gives them (BM25 is computed inside SQLite; only ``limit`` rows reach Python). A one-word query of
    a frequent term is read from its champion list while the page lies within it (:func:`champion_top`)."""
    if (stored := champion_top(con, words, after, limit)) is not None:
        return stored
    sql = "SELECT rowid, r FROM (SELECT rowid, bm25(work_text) AS r FROM work_text WHERE work_text MATCH ?)"
    params: list = [match_expression(words)]
    if after is not None:
        sql += " WHERE r > ? OR (r = ? AND rowid > ?)"
        params += [after[0], after[0], after[1]]
    rows = con.execute(sql + " ORDER BY r, rowid LIMIT ?", [*params, limit]).fetchall()
    keys, ranks = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [])
    return pa.table({"work_key": pa.array(keys, pa.int64()), "rank": pa.array(ranks, pa.float64())})


def champion_top(
    con: sqlite3.Connection, words: list[str], after: tuple[float, int] | None, limit: int
) -> pa.Table | None:
    """:func:`top` of a one-word query from the word's champion list (module docstring); None when the query has
    several words, its term has no list (or the index file predates them), or the page goes past the stored
    matches while the term has more."""
    if len(words) != 1 or (term := term_of(words[0])) is None:
        return None
    try:
        found = con.execute("SELECT hits, depth FROM term_hits WHERE term = ?", [term]).fetchone()
    except sqlite3.OperationalError:  # an index built before champion lists
        return None
    if found is None:
        return None
    hits, depth = found
    sql, params = "SELECT rowid_, rank FROM term_top WHERE term = ?", [term]
    if after is not None:
        sql += " AND (rank > ? OR (rank = ? AND rowid_ > ?))"
        params += [after[0], after[0], after[1]]
    rows = con.execute(sql + " ORDER BY position LIMIT ?", [*params, limit]).fetchall()
    if len(rows) < limit and hits > depth:  # the page runs past the stored matches: FTS5 ranks it
        return None
    keys, ranks = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [])
    return pa.table({"work_key": pa.array(keys, pa.int64()), "rank": pa.array(ranks, pa.float64())})
