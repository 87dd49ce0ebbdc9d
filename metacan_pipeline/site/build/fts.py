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

A user's text never reaches FTS5's query syntax: :func:`parse_query` keeps its word tokens, its double-quoted
phrases and its ``OR`` (or ``|``) between two of them, and :func:`match_expression` writes each phrase quoted
(``"peer review"``), the alternatives of a group joined by ``OR`` in parentheses, the groups by ``AND``; the
expression is bound as a parameter.

Frequent terms: FTS5 computes BM25 for every match before it can give the first page, about
1 us a match on an idle Intel Xeon, so "science management" (230,639 matches at 4.3M works) took 246 ms to rank
and 299 ms p95 with its count and page. The index therefore keeps the works in *impact order* (document-at-a-time
top-k with an upper bound, as in WAND, Broder et al. 2003, over an impact-sorted index): BM25 is a sum over the query's
phrases of ``idf * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl))`` (FTS5's ``bm25()``, k1 = 1.2, b = 0.75), which
grows with the phrase frequency ``f`` and shrinks with the work's token count ``D``; a phrase's frequency in a work is
at most the largest frequency of any term in it, ``max_tf``. So every work has a bound ``g`` (the fraction above at
``f = max_tf``) with BM25 <= (sum of the query's idfs) * g for *any* query. :func:`build_index` numbers the works by
``g``, highest first (the FTS5 rowid; ``work_keys`` maps it to the work key), stores ``g`` by runs of rowids
(``work_bound``), the idf inputs (``term_docs``: works per term for terms in at least :data:`TERM_DOCS_MIN` works;
``index_stats``), and :func:`top` walks the matches in rowid order, computing BM25 for those it reads, until the
page's last work scores better than the bound of every work not yet read. The page is then exactly the one FTS5's
full ranking gives (``site/test_fts.py`` checks page after page against it). A query with a rare term (its
matches are few) or a word the tokenizer splits is ranked by FTS5 in full, as is a page that needs more than
:data:`SCAN_MAX` matches read. Counting ``D`` and ``max_tf`` needs the index's own tokenizer: each batch is indexed
once in memory with the same tokenizer and read back through ``fts5vocab``.
"""

from __future__ import annotations

import heapq
import math
import re
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa

from ...i18n import fold
from ...tables.site import FTS_STAGE_DDL, FTS_TABLES_DDL

#: Word tokens of a text query (letters, digits, underscore in any script), at most this many.
TOKEN_RE = re.compile(r"\w+", re.UNICODE)
MAX_TOKENS = 12
TOKENIZE = "porter unicode61 remove_diacritics 2"
#: FTS5's ``bm25()`` constants (SQLite ``fts5_aux.c``).
K1, B = 1.2, 0.75
#: A work's bound of BM25 per unit of idf (module docstring), in SQL over ``stage.docs``; ``?`` is the average
#: token count. The operations are FTS5's, in its order.
BOUND_SQL = "max_tf * (1.2 + 1.0) / (max_tf + 1.2 * (1 - 0.75 + 0.75 * tokens / ?))"
#: Relative slack on the bound: BM25 is summed in C, the bound here, and the two may differ in the last bits.
BOUND_SLACK = 1e-9
#: A term in at least this many works has its count stored (``term_docs``); a query with a rarer term has fewer
#: matches than this, and FTS5 ranks them all (a few milliseconds).
TERM_DOCS_MIN = 10_000
#: Matches read in impact order before a page is left to FTS5's full ranking instead (a deep page): a read costs
#: about twice a match of the full ranking (1.9 against 1 us at 4.3M works; "science management" needs 45,044 reads).
SCAN_MAX = 100_000
#: Rows indexed in memory at a time to count each work's tokens and term frequencies.
COUNT_BATCH = 20_000


def tokens(text: str) -> list[str]:
    """The word tokens of ``text``, lower-cased. Not ``casefold()``: it turns "ß" into "ss", which FTS5's unicode61
    tokenizer does not, so "Straße" found nothing."""
    return [t.lower() for t in TOKEN_RE.findall(text or "")]


#: A parsed text query: groups that must all match, each a tuple of alternatives (phrases: word tokens in order).
TextQuery = tuple[tuple[tuple[str, ...], ...], ...]
#: What a text query is read as: a double-quoted phrase (an unclosed quote runs to the end), ``|``, or a word (word
#: characters joined by hyphens or apostrophes: "meta-analysis" is the phrase "meta analysis", as titles index it).
_QUERY_RE = re.compile(r'"([^"]*)"?|(\|)|(\w+(?:[-\u2010\u2011\'\u2019]\w+)*)', re.UNICODE)
OR_WORD = "OR"


def parse_query(text: str) -> TextQuery:
    """The groups of a text query (:data:`TextQuery`): every word (lower-cased :func:`tokens`) is a group of its own,
    a double-quoted phrase or a hyphenated word one group of its words in order, and ``OR`` (upper case) or ``|``
    between two of them
    puts them in one group of alternatives (``"peer review" OR replication open`` is two groups: the phrase or the
    word, and the word open). An ``OR`` with nothing on one side is ignored, and so is any other character."""
    groups: list[list[tuple[str, ...]]] = []
    joined = False
    for m in _QUERY_RE.finditer(text or ""):
        phrase, bar, word = m.groups()
        if bar or word == OR_WORD:
            joined = bool(groups)
            continue
        found = tuple(tokens(phrase if phrase is not None else word))
        if not found:
            continue
        if joined:
            groups[-1].append(found)
        else:
            groups.append([found])
        joined = False
    return tuple(tuple(sorted(set(g))) for g in groups)


def query_text(query: TextQuery) -> str:
    """The canonical text of a parsed query (what :func:`parse_query` reads back as the same query): alternatives in
    sorted order joined by ``OR``, a phrase of several words in double quotes."""
    return " ".join(
        f" {OR_WORD} ".join(phrase[0] if len(phrase) == 1 else '"' + " ".join(phrase) + '"' for phrase in group)
        for group in query
    )


def _groups(words: Sequence[str] | TextQuery) -> TextQuery:
    """``words`` as a :data:`TextQuery`: a plain word (a ``str``) is a group of one one-word phrase."""
    return tuple(((w,),) if isinstance(w, str) else w for w in words)


#: The shortest word :func:`greek_plural` gives another number: basis and thesis would add bases and theses, whose
#: Porter stems are base and these.
GREEK_PLURAL_MIN = 8


def greek_plural(word: str) -> str:
    """The other number of a word of the Greek ``-sis``/``-ses`` declension of at least :data:`GREEK_PLURAL_MIN`
    letters (analysis and analyses, synthesis and syntheses, hypothesis and hypotheses), whose Porter stems differ
    (``analysi``, ``analys``); ``word`` itself otherwise. Accents are dropped first, as the index drops them. A word
    merely ending in ``-ses`` (diseases) gets a form no title holds, which matches nothing more."""
    folded = fold(word)
    if len(folded) >= GREEK_PLURAL_MIN and folded.endswith("sis"):
        return folded[:-3] + "ses"
    if len(folded) >= GREEK_PLURAL_MIN and folded.endswith("ses"):
        return folded[:-3] + "sis"
    return word


def match_expression(words: Sequence[str] | TextQuery) -> str:
    """The FTS5 MATCH expression for ``words`` (word tokens, or a :data:`TextQuery`): every phrase quoted (a quote
    inside doubled), a group's alternatives joined by ``OR`` in parentheses, every group required. A phrase with a
    word of the ``-sis``/``-ses`` declension matches its other number too (:func:`greek_plural`: meta-analysis finds
    meta-analyses)."""

    def phrase(p: tuple[str, ...]) -> str:
        return '"' + " ".join(p).replace('"', '""') + '"'

    def group(g: tuple[tuple[str, ...], ...]) -> str:
        forms = list(dict.fromkeys(f for p in g for f in (p, tuple(greek_plural(w) for w in p))))
        return phrase(forms[0]) if len(forms) == 1 else "(" + " OR ".join(phrase(p) for p in forms) + ")"

    return " AND ".join(group(g) for g in _groups(words))


def build_index(path: Path, rows: Iterable[pa.RecordBatch]) -> int:
    """Write the index of ``rows`` (batches with ``work_key``, ``title``, ``keywords``) to a new SQLite file at
    ``path`` (which must not exist); returns the rows indexed. The works are staged with their token counts in a
    scratch file beside it (``<path>.stage``, removed at the end), then indexed in impact order (module docstring);
    the index is optimised (merged) at the end."""
    stage = path.with_name(path.name + ".stage")
    stage.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    try:
        con.execute("ATTACH DATABASE ? AS stage", [str(stage)])
        for ddl in FTS_STAGE_DDL:
            con.execute(ddl)
        n = 0
        for batch in rows:
            cols = [batch.column(c).to_pylist() for c in ("work_key", "title", "keywords")]
            for lo in range(0, batch.num_rows, COUNT_BATCH):
                part = list(zip(*(c[lo : lo + COUNT_BATCH] for c in cols), strict=True))
                counts = token_counts(part)
                con.executemany(
                    "INSERT INTO stage.docs VALUES (?, ?, ?, ?, ?)",
                    ((key, *counts.get(key, (0, 0)), title, kw) for key, title, kw in part),
                )
            n += batch.num_rows
        works, total = con.execute("SELECT count(*), coalesce(sum(tokens), 0) FROM stage.docs").fetchone()
        avgdl = total / works if total else 1.0  # no token at all: no work can match, any average will do
        con.execute(
            "INSERT INTO stage.ordered(work_key, bound) SELECT work_key, g FROM "
            f"(SELECT work_key, {BOUND_SQL} AS g FROM stage.docs) ORDER BY g DESC, work_key",
            [avgdl],
        )
        con.execute(f"CREATE VIRTUAL TABLE work_text USING fts5(title, keywords, tokenize='{TOKENIZE}')")
        con.execute(
            "INSERT INTO work_text(rowid, title, keywords) SELECT o.position, d.title, d.keywords "
            "FROM stage.ordered o JOIN stage.docs d USING (work_key) ORDER BY o.position"
        )
        con.execute("INSERT INTO work_text(work_text) VALUES ('optimize')")
        for ddl in FTS_TABLES_DDL:
            con.execute(ddl)
        con.execute("INSERT INTO work_keys SELECT position, work_key FROM stage.ordered")
        con.execute("INSERT INTO work_bound SELECT min(position), bound FROM stage.ordered GROUP BY bound")
        con.execute("INSERT INTO index_stats VALUES (?, ?)", [works, total])
        con.execute("CREATE VIRTUAL TABLE temp.work_terms USING fts5vocab(main, work_text, 'row')")
        con.execute("INSERT INTO term_docs SELECT term, doc FROM temp.work_terms WHERE doc >= ?", [TERM_DOCS_MIN])
        con.execute("DROP TABLE temp.work_terms")
        con.commit()
        con.execute("DETACH DATABASE stage")
    finally:
        con.close()
        stage.unlink(missing_ok=True)
    return n


def token_counts(rows: list[tuple[int, str | None, str | None]]) -> dict[int, tuple[int, int]]:
    """``{work_key: (tokens, max_tf)}`` of ``(work_key, title, keywords)`` rows as the index's tokenizer sees them:
    the work's token count over both columns (FTS5's ``D``) and the largest number of times one term occurs in it.
    A work without a token is left out. Indexed in an in-memory FTS5 table and read back through ``fts5vocab``."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.execute(f"CREATE VIRTUAL TABLE t USING fts5(title, keywords, tokenize='{TOKENIZE}')")
        mem.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        mem.executemany("INSERT INTO t(rowid, title, keywords) VALUES (?, ?, ?)", rows)
        got = mem.execute(
            "SELECT doc, sum(n), max(n) FROM (SELECT doc, term, count(*) AS n FROM v GROUP BY doc, term) GROUP BY doc"
        ).fetchall()
    finally:
        mem.close()
    return {doc: (d, tf) for doc, d, tf in got}


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


def _impact_ordered(con: sqlite3.Connection) -> bool:
    """True for an index in impact order (``work_keys`` maps rowids to work keys); False for one built before, whose
    rowid is the work key."""
    return bool(con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'work_keys'").fetchone()[0])


def _matches_sql(impact_ordered: bool) -> str:
    """SQL of every match of the bound MATCH expression as ``(k, r)``: work key and BM25. In an index in impact
    order the keys come from the narrow ``work_keys`` table (0.2 us a match at 4.3M works; FTS5's content table would
    cost 1 us); in an earlier one the rowid is the key."""
    if not impact_ordered:
        return "SELECT rowid AS k, bm25(work_text) AS r FROM work_text WHERE work_text MATCH ?"
    return (
        "SELECT w.work_key AS k, m.r AS r FROM (SELECT rowid AS i, bm25(work_text) AS r FROM work_text "
        "WHERE work_text MATCH ?) m CROSS JOIN work_keys w ON w.rowid_ = m.i"
    )


def _table(rows: list[tuple[int, float]]) -> pa.Table:
    keys, ranks = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [])
    return pa.table({"work_key": pa.array(keys, pa.int64()), "rank": pa.array(ranks, pa.float64())})


def search(con: sqlite3.Connection, words: Sequence[str] | TextQuery) -> pa.Table:
    """Every work matching ``words`` (every word, or every group of a :data:`TextQuery`): ``work_key`` (int64) and
    ``rank`` (FTS5 BM25, lower = better)."""
    return _table(con.execute(_matches_sql(_impact_ordered(con)), [match_expression(words)]).fetchall())


def count(con: sqlite3.Connection, words: Sequence[str] | TextQuery) -> int:
    """The number of works matching ``words`` as :func:`search` does (no ranking: FTS5 walks the posting lists only)."""
    return con.execute("SELECT count(*) FROM work_text WHERE work_text MATCH ?", [match_expression(words)]).fetchone()[
        0
    ]


def top(
    con: sqlite3.Connection, words: Sequence[str] | TextQuery, after: tuple[float, int] | None, limit: int
) -> pa.Table:
    """The first ``limit`` matches of ``words`` by ``(rank, work_key)`` after the keyset ``after``, as
    :func:`search` gives them. Read in impact order while that proves the page (:func:`impact_top`), else ranked
    inside SQLite in full; only the page's rows reach Python."""
    impact = _impact_ordered(con)
    if impact and (page := impact_top(con, words, after, limit)) is not None:
        return page
    sql, params = f"SELECT k, r FROM ({_matches_sql(impact)})", [match_expression(words)]
    if after is not None:
        sql += " WHERE r > ? OR (r = ? AND k > ?)"
        params += [after[0], after[0], after[1]]
    return _table(con.execute(sql + " ORDER BY r, k LIMIT ?", [*params, limit]).fetchall())


def idf(works: int, docs: int) -> float:
    """FTS5's idf of a phrase in ``docs`` of ``works`` works (never below 1e-6)."""
    value = math.log((works - docs + 0.5) / (docs + 0.5))
    return value if value > 0.0 else 1e-6


def impact_top(
    con: sqlite3.Connection, words: Sequence[str] | TextQuery, after: tuple[float, int] | None, limit: int
) -> pa.Table | None:
    """:func:`top` read in impact order (module docstring): the matches by rowid, each with its BM25, until the
    ``limit``-th best after ``after`` beats the bound of every match not read. None when a word is not one stored
    term (a rare term, a split word or a phrase of several words: FTS5 ranks it in full) or the page needs more
    than :data:`SCAN_MAX` reads."""
    # BM25 sums over every phrase of the expression (an alternative that does not match adds 0), so the sum of all
    # phrases' idfs bounds it under OR as under AND; a phrase of several words is left to FTS5's full ranking.
    terms = [term_of(p[0]) if len(p) == 1 else None for g in _groups(words) for p in g]
    if limit < 1 or None in terms:
        return None
    marks = ", ".join("?" * len(set(terms)))
    docs = dict(con.execute(f"SELECT term, docs FROM term_docs WHERE term IN ({marks})", sorted(set(terms))))
    if len(docs) < len(set(terms)):
        return None
    works = con.execute("SELECT works FROM index_stats").fetchone()[0]
    idf_sum = sum(idf(works, docs[t]) for t in terms)
    # The scan reads rowids and ranks only, and the keys of the few rows kept at the end (``work_keys``). ``surely``: the ranks of
    # the best ``limit`` rows certainly after ``after`` (a row of ``after``'s rank needs its key to tell);
    # ``worst``: the largest of them once there are ``limit``; ``kept``: every row that may still be on the page.
    surely: list[float] = []
    kept: list[tuple[float, int]] = []
    worst = math.inf
    cursor = con.execute(
        "SELECT rowid, bm25(work_text) FROM work_text WHERE work_text MATCH ? ORDER BY rowid", [match_expression(words)]
    )
    read, size = 0, 256
    try:
        while rows := cursor.fetchmany(size):
            for rowid, rank in rows:
                if rank > worst or (after is not None and rank < after[0]):
                    continue
                kept.append((rank, rowid))
                if after is None or rank > after[0]:
                    if len(surely) < limit:
                        heapq.heappush(surely, -rank)
                    else:
                        heapq.heappushpop(surely, -rank)
                    if len(surely) == limit:
                        worst = -surely[0]
            read += len(rows)
            if len(surely) == limit:
                kept = [r for r in kept if r[0] <= worst]
                bound = con.execute(
                    "SELECT bound FROM work_bound WHERE first_rowid <= ? ORDER BY first_rowid DESC LIMIT 1",
                    [rows[-1][0]],
                ).fetchone()[0]
                if worst < -idf_sum * bound * (1 + BOUND_SLACK):
                    break
            if read >= SCAN_MAX:
                return None
            size = min(size * 4, 8192)
    finally:
        cursor.close()
    keys: dict[int, int] = {}
    rowids = [rowid for _, rowid in kept]
    for lo in range(0, len(rowids), 500):
        part = rowids[lo : lo + 500]
        sql = f"SELECT rowid_, work_key FROM work_keys WHERE rowid_ IN ({', '.join('?' * len(part))})"
        keys.update(con.execute(sql, part).fetchall())
    page = sorted((rank, keys[rowid]) for rank, rowid in kept)
    if after is not None:
        page = [r for r in page if r > after]
    return _table([(key, rank) for rank, key in page[:limit]])
