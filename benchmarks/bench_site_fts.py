"""Full-text search over titles and keywords for the served site: SQLite FTS5 against DuckDB's fts
extension, each against a bare DuckDB ``ILIKE`` scan of the same titles in the same process.

Builds ``--works`` synthetic works (default 200,000): titles of 6-14 words drawn from a Zipf-like vocabulary of
20,000 made-up words plus a few real terms at set rates (``reproducibility`` in about 1% of titles,
``peer`` + ``review`` together in about 0.5%, ``bibliometric`` in about 0.1%), and 0-4 keywords. Then, for each
engine it can load:

- ``sqlite_fts5``: the stdlib's SQLite, ``fts5(title, keywords, tokenize='porter unicode61 remove_diacritics 2')``
  with rowid = the work's integer key; a query is the exact count of matches plus the top 20 by ``bm25``.
- ``duckdb_fts``: ``PRAGMA create_fts_index`` (porter stemmer) and ``match_bm25``, the same count and top 20.
  The extension must come from the PyPI package ``duckdb-extension-fts`` (no download at run time); its
  binary loads only into the DuckDB version it was built for, so under the project's pinned duckdb 1.5.6 the
  1.5.5 package is refused and the row says why. Run this file under a scratch venv with ``duckdb==1.5.5
  duckdb-extension-fts==1.5.5`` to get its figures.
- ``duckdb_ilike``: ``count(*) ... WHERE title ILIKE '%term%'`` plus the newest 20: no index, the baseline.

Each query runs ``--repeats`` times (default 15) after one warm-up; p50/p95 in ms, build seconds and index
bytes are printed as one JSON object per engine.

The figure: each engine's p50 over the ILIKE scan's (to beat: far below 1; the site needs a search p95 < 300 ms).
Writes ``benchmarks/out/site_fts.json``.

Usage: python benchmarks/bench_site_fts.py [--works 200000] [--repeats 15] [--smoke]   (``--smoke``: 2,000 works)
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
from _common import add_smoke_arg, machine, record

QUERIES = {"common": "reproducibility", "two_terms": "peer review", "rare": "bibliometric"}


def synthetic_works(n: int, seed: int = 15) -> list[tuple[int, str, str]]:
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghiklmnoprstuvz") for _ in range(rng.randint(4, 10))) for _ in range(20_000)]
    cum, total = [], 0.0
    for i in range(len(vocab)):
        total += 1 / (i + 1)
        cum.append(total)
    rows = []
    for i in range(n):
        words = rng.choices(vocab, cum_weights=cum, k=rng.randint(6, 14))
        r = rng.random()
        if r < 0.01:
            words.insert(rng.randrange(len(words)), "reproducibility")
        elif r < 0.015:
            words[1:1] = ["peer", "review"]
        elif r < 0.016:
            words.append("bibliometric")
        keywords = "; ".join(rng.choices(vocab[:2000], k=rng.randint(0, 4)))
        rows.append((1_000_000 + i, " ".join(words).capitalize(), keywords))
    return rows


def timed(fn, repeats: int) -> dict:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"p50_ms": round(statistics.median(times), 2), "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2)}


def fts_query(text: str) -> str:
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in text.split())


def bench_sqlite(rows, folder: Path, repeats: int) -> dict:
    path = folder / "fts.sqlite"
    t0 = time.perf_counter()
    con = sqlite3.connect(path)
    con.execute("CREATE VIRTUAL TABLE t USING fts5(title, keywords, tokenize='porter unicode61 remove_diacritics 2')")
    con.executemany("INSERT INTO t(rowid, title, keywords) VALUES (?, ?, ?)", rows)
    con.execute("INSERT INTO t(t) VALUES ('optimize')")
    con.commit()
    con.close()
    out = {"engine": "sqlite_fts5", "sqlite": sqlite3.sqlite_version, "build_s": round(time.perf_counter() - t0, 2)}
    out["index_bytes"] = path.stat().st_size
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    for name, text in QUERIES.items():
        q = fts_query(text)

        def run(q=q):
            n = con.execute("SELECT count(*) FROM t WHERE t MATCH ?", [q]).fetchone()[0]
            top = con.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 20", [q]).fetchall()
            return n, top

        out[name] = {"hits": run()[0], **timed(run, repeats)}
    return out


def bench_duckdb_fts(rows, folder: Path, repeats: int) -> dict:
    out: dict = {"engine": "duckdb_fts", "duckdb": duckdb.__version__}
    try:
        import duckdb_extension_fts  # noqa: F401

        ext = next(Path(duckdb_extension_fts.__file__).parent.rglob("fts.duckdb_extension"))
        con = duckdb.connect(str(folder / "fts.duckdb"), config={"autoinstall_known_extensions": False})
        con.execute(f"LOAD '{ext}'")
    except Exception as exc:  # the package is missing, or built for another DuckDB version
        out["error"] = str(exc).splitlines()[0]
        return out
    t0 = time.perf_counter()
    con.execute("CREATE TABLE w (work_key BIGINT, title VARCHAR, keywords VARCHAR)")
    con.executemany("INSERT INTO w VALUES (?, ?, ?)", rows) if len(rows) < 1000 else _bulk(con, rows)
    con.execute("PRAGMA create_fts_index('w', 'work_key', 'title', 'keywords', stemmer='porter')")
    con.execute("CHECKPOINT")
    out["build_s"] = round(time.perf_counter() - t0, 2)
    out["index_bytes"] = (folder / "fts.duckdb").stat().st_size
    for name, text in QUERIES.items():
        sql = (
            "WITH m AS (SELECT work_key, fts_main_w.match_bm25(work_key, ?, conjunctive := 1) AS s FROM w) "
            "SELECT (SELECT count(*) FROM m WHERE s IS NOT NULL), "
            "(SELECT list(work_key ORDER BY s DESC) FROM (SELECT * FROM m WHERE s IS NOT NULL ORDER BY s DESC LIMIT 20))"
        )

        def run(text=text, sql=sql):
            return con.execute(sql, [text]).fetchone()

        out[name] = {"hits": run()[0], **timed(run, repeats)}
    return out


def _bulk(con, rows) -> None:
    import pyarrow as pa

    cols = list(zip(*rows, strict=True))
    table = pa.table({"work_key": cols[0], "title": cols[1], "keywords": cols[2]})
    con.register("src", table)
    con.execute("INSERT INTO w SELECT * FROM src")
    con.unregister("src")


def bench_ilike(rows, repeats: int) -> dict:
    con = duckdb.connect()
    _bulk_table(con, rows)
    out: dict = {"engine": "duckdb_ilike", "duckdb": duckdb.__version__}
    for name, text in QUERIES.items():
        pattern = "%" + text + "%"

        def run(pattern=pattern):
            n = con.execute("SELECT count(*) FROM w WHERE title ILIKE ? OR keywords ILIKE ?", [pattern] * 2).fetchone()
            top = con.execute(
                "SELECT work_key FROM w WHERE title ILIKE ? OR keywords ILIKE ? ORDER BY work_key LIMIT 20",
                [pattern] * 2,
            ).fetchall()
            return n[0], top

        out[name] = {"hits": run()[0], **timed(run, repeats)}
    return out


def _bulk_table(con, rows) -> None:
    con.execute("CREATE TABLE w (work_key BIGINT, title VARCHAR, keywords VARCHAR)")
    _bulk(con, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--works", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=15)
    add_smoke_arg(ap, "2,000 works, 2 repetitions")
    args = ap.parse_args()
    if args.smoke:
        args.works, args.repeats = 2_000, 2
    rows = synthetic_works(args.works)
    started = machine()
    print(json.dumps({"works": args.works, "cpu": started["cpu_model"], "cores": started["nproc"]}))
    engines = {}
    with tempfile.TemporaryDirectory(prefix="metacan-fts-") as tmp:
        for result in (
            bench_ilike(rows, args.repeats),
            bench_sqlite(rows, Path(tmp), args.repeats),
            bench_duckdb_fts(rows, Path(tmp), args.repeats),
        ):
            print(json.dumps(result))
            engines[result["engine"]] = result
    ratios = fts_ratios(engines)
    record("site_fts", {"works": args.works, "engines": engines}, ratios=ratios, started=started, smoke=args.smoke)


def fts_ratios(engines: dict) -> dict:
    """Per engine and query: its p50 over the ILIKE scan's p50 for the same query (the baseline)."""
    base = engines["duckdb_ilike"]
    return {
        f"{name}:{q}/ilike": round(eng[q]["p50_ms"] / base[q]["p50_ms"], 4)
        for name, eng in engines.items()
        if name != "duckdb_ilike"
        for q in QUERIES
        if q in eng and base[q]["p50_ms"]
    }


if __name__ == "__main__":
    main()
