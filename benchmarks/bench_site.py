"""The served site at scale: a synthetic release of ``--works`` works (default 4,300,000)
in the exact release layout, served on this machine, each figure against the bare DuckDB query of the same
count in the same process.

The release (``site_synth.py``): a seed release of the real frame works built through Dagster from
``../shared/data`` (the project's own ``site_database``), replicated inside DuckDB under fresh keys with the
value distributions of every real record (years, languages, types, venues, institutions, funders, keywords),
plus direct labels, classifier decisions and machine scores at set rates; the FTS5 index by ``site/build.py``'s
own code. ``--keep DIR`` keeps (and on a later run of the same layout reuses) the seed and the release under DIR; without it they
go to a temporary folder under /tmp, removed at the end.

Measured, one after the other in this process (``Release`` opened as ``metacan serve`` opens it), each
repetition of the app's call followed by one of the bare query (interleaved: the machine is shared):

- ``cohort:<name>``: ``CohortQuery.count()`` + ``coverage()`` + ``facets()`` + ``people.author_facet`` (what ``/api/v1/count`` and the
  cohort page compute before listing) for no filter, year range + language, funder + label category,
  classifier category, the forgiving filters (the funder in upper case + label category; two venues in other
  cases, OR, less an institution, NOT), the release's most frequent Retraction Watch state + language, and the
  coverage filters (unlabelled, classified, cited at least 10 times);
  baseline: the bare ``SELECT count(*)`` of the same cohort, written by hand here (folding with
  ``lower(strip_accents())`` on every row where the app reads the folded values stored).
- ``search:<name>``: ``CohortQuery`` with ``q`` (the FTS5 lookup) ``count()`` + the first page by relevance,
  for a common term, two terms, two and three common terms, a rare term, a quoted phrase OR a word; baseline: DuckDB ``count(*)`` of titles/keywords ``ILIKE`` every
  term (no stemming, so its count differs a little; printed beside).
- ``work_page``: ``GET /works/<version>/<id>.html`` through Starlette's ``TestClient`` (in process, no
  socket), random works; baseline: the bare ``SELECT record_json, page_path FROM works WHERE work_key = ? AND id = ?``
  (the app's own lookup). The live abstract of a work with one goes through the app's fetcher to an httpx
  ``MockTransport`` answering at once that OpenAlex has no such record (the synthetic ids are not OpenAlex's), with
  its cache off: the fetch path is measured, OpenAlex's own latency is not.
- ``author_page``: ``GET /authors/<id>`` through ``TestClient`` for the 5 most prolific authors and 40 random ones
  (target p95 < 2 s); baseline: the bare count of the author's authorships. ``network:authors`` /
  ``network:institutions``: ``GET /api/v1/network`` (50 nodes) of the newest years' cohort of about 10,000 works
  (target p95 < 2 s), and ``network_page:authors``, the same network drawn (``GET /network``: the SVG and its
  tables); baseline: the bare count of that cohort's Canadian authorships. The synthetic authorships
  (``site_synth.write_synthetic_authorships``): 1-6 per work from a pool of one author per 3 works, 1/rank density.
- ``export_csv`` / ``export_jsonl``: the app's streamed ``/export.csv`` / ``/export.jsonl`` through
  ``TestClient`` for the whole release capped at ``--export-rows`` (rows/s, whole body read); baseline:
  DuckDB's own ``COPY (<the export query>) TO <file> (FORMAT csv)`` of the same rows.
- ``server``: ``metacan``'s app under uvicorn in a child process on 127.0.0.1 (a bounded loop of the
  requests above: cohort pages, searches, work pages, one export), its peak RSS (``VmHWM``) and the bytes of
  a page of results (``/`` with 20 and 100 works, ``/api/v1/works``); its abstracts come from a loopback stub of
  OpenAlex in this process (``METACAN_OPENALEX_API_URL``).

Prints one table (p50, p95, baseline p50, ratio = p50 / baseline p50, target) and one JSON line per
measurement (``{"measurement": ...}``), and writes them to ``benchmarks/out/site.json``. Targets: cohort p95 < 500 ms,
search p95 < 300 ms, exports >= 50,000 rows/s, the server's peak RSS < 2 GiB and a page of results < 100 kB.

Usage: .venv/bin/python benchmarks/bench_site.py [--works 4300000] [--repeats 15] [--keep DIR]
                                                 [--export-rows 200000] [--smoke]
``--smoke``: 2,000 works, 2 repetitions, exports of 200 rows (proves the synthetic release builds and every part runs).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import duckdb
from _common import add_smoke_arg, git_state, loadavg, machine, proc_kib, record, say

TARGETS = {"cohort": 500.0, "search": 300.0}  # p95 ms
TARGET_EXPORT_ROWS_S = 50_000
TARGET_RSS_MIB = 2048
TARGET_PAGE_BYTES = 100_000


# ------------------------------------------------------------------------------------------------
# the release
# ------------------------------------------------------------------------------------------------
def release_dirs(scratch: Path, n: int, min_venues: int) -> tuple[Path, dict]:
    """The data dir of the synthetic release of ``n`` works under ``scratch`` (built unless a complete one of
    ``n`` works is there), and its build figures."""
    import site_synth

    from metacan_pipeline.site.build.build import LAYOUT_VERSION

    seed_data, data = scratch / "seed" / "data", scratch / "release" / "data"
    build_file = scratch / "release" / "build.json"
    if build_file.is_file():
        built = json.loads(build_file.read_text())
        if (
            built.get("rows", {}).get("works") == n
            and built.get("layout_version") == LAYOUT_VERSION
            and (data / "site" / "releases" / "current.json").is_file()
        ):
            say(f"reusing the release of {n:,} works under {data}")
            built["reused"] = True
            return data, built
    pointer = seed_data / "site" / "releases" / "current.json"
    seed_layout = scratch / "seed" / "layout_version"
    t0 = time.perf_counter()
    if not pointer.is_file() or not seed_layout.is_file() or seed_layout.read_text() != str(LAYOUT_VERSION):
        say("building the seed release from the real records (Dagster: frame, work_records, site_database) ...")
        shutil.rmtree(seed_data, ignore_errors=True)
        site_synth.build_seed(seed_data)
        seed_layout.write_text(str(LAYOUT_VERSION))
    seed_db = seed_data / "site" / "releases" / json.loads(pointer.read_text())["database"]
    seed_s = time.perf_counter() - t0
    say(f"generating the synthetic release of {n:,} works in DuckDB ...")
    shutil.rmtree(data, ignore_errors=True)
    built = site_synth.build_synthetic(seed_db, data, n, min_venues=min_venues)
    built["seed_build_s"] = round(seed_s, 1)
    build_file.write_text(json.dumps(built, indent=1))
    built["reused"] = False
    return data, built


# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, round(q * (len(s) - 1))))]


def interleaved(app, bare, repeats: int, base_repeats: int | None = None) -> dict:
    """``repeats`` runs of ``app`` and ``base_repeats`` (default as many) of ``bare``, alternated, after one
    warm-up each: p50/p95 ms of both."""
    app(), bare()
    a, b = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        app()
        a.append((time.perf_counter() - t0) * 1000)
        if base_repeats is None or i < base_repeats:
            t0 = time.perf_counter()
            bare()
            b.append((time.perf_counter() - t0) * 1000)
    p50, base = statistics.median(a), statistics.median(b)
    return {
        "p50_ms": round(p50, 2),
        "p95_ms": round(pct(a, 0.95), 2),
        "max_ms": round(max(a), 2),
        "baseline_p50_ms": round(base, 2),
        "baseline_p95_ms": round(pct(b, 0.95), 2),
        "ratio": round(p50 / base, 2) if base > 0 else None,
        "runs": repeats,
        "baseline_runs": len(b),
    }


# ------------------------------------------------------------------------------------------------
# what is measured
# ------------------------------------------------------------------------------------------------
def pick_values(con: duckdb.DuckDBPyConnection) -> dict:
    """Representative filter values of the release: the most frequent funder, label category, and
    candidate category; search terms of given hit counts."""
    one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    return {
        "funder": one("SELECT name FROM work_funders GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"),
        "label_category": one(
            "SELECT c FROM (SELECT unnest(categories) AS c FROM work_labels WHERE status = 'labelled') "
            "GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"
        ),
        "classifier_category": one(
            "SELECT category FROM work_decisions WHERE mode = 'candidate' GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"
        ),
        "classifier_version": one("SELECT min(model_version) FROM work_decisions"),
        "venues": [
            r[0] for r in con.execute("SELECT venue FROM works GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 2").fetchall()
        ],
        "institution": one("SELECT name FROM work_institutions GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"),
        "retraction_state": one("SELECT retraction_state FROM works GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"),
        "work_ids": [r[0] for r in con.execute("SELECT id FROM works USING SAMPLE 20 ROWS (reservoir, 15)").fetchall()],
    }


def cohorts(v: dict) -> dict[str, tuple[dict, str, list]]:
    """name -> (request filters, bare count SQL, its parameters)."""
    return {
        "no_filter": ({}, "SELECT count(*) FROM works", []),
        "year_language": (
            {"year_min": "2015", "year_max": "2022", "language": "en"},
            "SELECT count(*) FROM works WHERE year BETWEEN 2015 AND 2022 AND language = 'en'",
            [],
        ),
        "funder_label": (
            {"funder": v["funder"], "label_category": v["label_category"]},
            "SELECT count(*) FROM works WHERE work_key IN (SELECT work_key FROM work_funders WHERE name = ?) "
            "AND work_key IN (SELECT work_key FROM work_labels WHERE status = 'labelled' AND list_contains(categories, ?))",
            [v["funder"], v["label_category"]],
        ),
        "classifier_category": (
            {"classifier_category": v["classifier_category"], "classifier_mode": "candidate"},
            "SELECT count(*) FROM works WHERE work_key IN (SELECT work_key FROM work_decisions "
            "WHERE model_version = ? AND mode = 'candidate' AND category = ?)",
            [v["classifier_version"], v["classifier_category"]],
        ),
        # the forgiving filters: another spelling of the funder; two venues (OR) less an institution (NOT)
        "funder_upper_label": (
            {"funder": v["funder"].upper(), "label_category": v["label_category"]},
            "SELECT count(*) FROM works WHERE work_key IN (SELECT work_key FROM work_funders "
            "WHERE lower(strip_accents(name)) = lower(strip_accents(?))) AND work_key IN (SELECT work_key FROM "
            "work_labels WHERE status = 'labelled' AND list_contains(categories, ?))",
            [v["funder"], v["label_category"]],
        ),
        "venues_or_not_institution": (
            {
                "venue": f"{v['venues'][0].upper()}|{v['venues'][1].lower()}",
                "not_institution": v["institution"].lower(),
            },
            "SELECT count(*) FROM works WHERE lower(strip_accents(venue)) IN (lower(strip_accents(?)), "
            "lower(strip_accents(?))) AND work_key NOT IN (SELECT work_key FROM work_institutions "
            "WHERE lower(strip_accents(name)) = lower(strip_accents(?)))",
            [*v["venues"], v["institution"]],
        ),
        "retraction_language": (
            {"retraction_state": v["retraction_state"], "language": "en"},
            "SELECT count(*) FROM works WHERE retraction_state = ? AND language = 'en'",
            [v["retraction_state"]],
        ),
        # coverage: unlabelled works that ship a category (a classifier decision), cited at least 10 times
        "coverage_cited": (
            {"labelled": "no", "classified": "yes", "cited_by_min": "10"},
            "SELECT count(*) FROM works WHERE work_key NOT IN (SELECT work_key FROM work_labels WHERE status = "
            "'labelled') AND (work_key IN (SELECT work_key FROM work_labels WHERE status = 'labelled' AND "
            "len(categories) > 0) OR work_key IN (SELECT work_key FROM work_decisions)) AND cited_by >= 10",
            [],
        ),
    }


#: ``common_two`` / ``common_three``: words of the most frequent stems of the 4.3M synthetic release's titles and
#: keywords (``term_hits``: scienc 651,072 works, manag 418,339, resourc 411,615, natur 321,426), ranked by FTS5 in full.
SEARCHES = {
    "common": "learning",
    "two_terms": "machine learning",
    "common_two": "science management",
    "common_three": "natural resource management",
    "rare": "bibliometric",
    # a quoted phrase or a word (the ILIKE baseline reads the phrase as its words, each required)
    "phrase_or": '"machine learning" OR bibliometric',
}


def measure_cohorts(release, bare, values: dict, repeats: int) -> list[dict]:
    from metacan_pipeline.site.query.cohort import parse_filters
    from metacan_pipeline.site.query.cohort_query import CohortQuery
    from metacan_pipeline.site.query.people import author_facet

    out = []
    for name, (filters, sql, params) in cohorts(values).items():
        cohort = parse_filters(filters, release.info)
        got: dict = {}

        def app(cohort=cohort, got=got):
            with CohortQuery(release, cohort) as q:
                got["count"], got["coverage"], got["facets"] = q.count(), q.coverage(), q.facets()
                got["facets"]["author"] = author_facet(q) or []

        def base(sql=sql, params=params, got=got):
            got["bare_count"] = bare.execute(sql, params).fetchone()[0]

        r = interleaved(app, base, repeats)
        if got["count"] != got["bare_count"]:
            raise SystemExit(f"cohort {name}: the app counts {got['count']}, the bare query {got['bare_count']}")
        out.append(
            {
                "measurement": f"cohort:{name}",
                "what": "count + coverage + every facet (CohortQuery) + the author facet",
                "filters": filters,
                "count": got["count"],
                "facets": len(got["facets"]),
                "facet_values": sum(len(x) for x in got["facets"].values()),
                **r,
                "target_p95_ms": TARGETS["cohort"],
                "met": r["p95_ms"] < TARGETS["cohort"],
            }
        )
        say(out[-1]["measurement"], r)
    return out


def measure_searches(release, bare, repeats: int) -> list[dict]:
    from metacan_pipeline.site.build.fts import parse_query
    from metacan_pipeline.site.query.cohort import Listing, parse_filters
    from metacan_pipeline.site.query.cohort_query import CohortQuery

    out = []
    for name, text in SEARCHES.items():
        cohort = parse_filters({"q": text}, release.info)
        # every group of the query (a word, or alternatives joined by OR) ILIKE in the title or a keyword
        one = "(title ILIKE ? OR work_key IN (SELECT work_key FROM work_keywords WHERE name ILIKE ?))"
        groups = parse_query(text)
        where = " AND ".join("(" + " OR ".join(one for _ in g) + ")" for g in groups)
        sql = f"SELECT count(*) FROM works WHERE {where}"
        params = [x for g in groups for p in g for x in (f"%{' '.join(p)}%",) * 2]
        got: dict = {}

        def app(cohort=cohort, got=got):
            with CohortQuery(release, cohort) as q:
                got["count"] = q.count()
                got["page"], _ = q.page(Listing("relevance"))

        def base(sql=sql, params=params, got=got):
            got["bare_count"] = bare.execute(sql, params).fetchone()[0]

        r = interleaved(app, base, repeats, base_repeats=max(3, repeats // 5))
        out.append(
            {
                "measurement": f"search:{name}",
                "what": "FTS5 lookup + count + first page by relevance (CohortQuery)",
                "q": text,
                "count": got["count"],
                "baseline_ilike_count": got["bare_count"],
                "page_rows": len(got["page"]),
                **r,
                "target_p95_ms": TARGETS["search"],
                "met": r["p95_ms"] < TARGETS["search"],
            }
        )
        say(out[-1]["measurement"], r, got["count"], got["bare_count"])
    return out


def no_record_fetcher():
    """An abstract fetcher whose OpenAlex answers at once, in memory, that it holds none of the ids asked for."""
    import httpx

    from metacan_pipeline.publish.abstracts import AbstractFetcher

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"meta": {"count": 0}, "results": []})

    return AbstractFetcher("http://openalex.invalid", cache_size=0, transport=httpx.MockTransport(answer))


def measure_work_page(data: Path, bare, n: int, repeats: int) -> dict:
    from starlette.testclient import TestClient

    from metacan_pipeline.site.web.app import create_app

    rng = random.Random(15)
    ids = [r[0] for r in bare.execute(
        "SELECT id FROM works WHERE work_key IN (SELECT unnest(?::BIGINT[]))",
        [[9_000_000_000 + rng.randrange(n) for _ in range(repeats + 1)]],
    ).fetchall()]  # fmt: skip
    paths = dict(
        bare.execute("SELECT id, page_path FROM works WHERE id IN (SELECT unnest(?::VARCHAR[]))", [ids]).fetchall()
    )
    it = {"i": 0}
    sizes = []
    with TestClient(create_app(data, abstracts=no_record_fetcher())) as client:

        def app():
            wid = ids[it["i"] % len(ids)]
            r = client.get("/" + paths[wid])
            if r.status_code != 200:
                raise SystemExit(f"GET /{paths[wid]}: HTTP {r.status_code}")
            sizes.append(len(r.content))

        def base():
            wid = ids[it["i"] % len(ids)]
            bare.execute(
                "SELECT record_json, page_path FROM works WHERE work_key = ? AND id = ?", [int(wid[1:]), wid]
            ).fetchone()
            it["i"] += 1

        r = interleaved(app, base, repeats)
    out = {
        "measurement": "work_page",
        "what": "GET /works/<version>/<id>.html through Starlette's TestClient (in process)",
        "page_bytes_p50": int(statistics.median(sizes)),
        **r,
    }
    say("work_page", r)
    return out


#: The network's cohort: works near this size (the issue's "cohort of 10,000 works").
NETWORK_COHORT_WORKS = 10_000
TARGETS_PEOPLE = {"author_page": 2000.0, "network": 2000.0}  # p95 ms


def network_cohort(bare) -> tuple[dict, int]:
    """The filters of a cohort of about :data:`NETWORK_COHORT_WORKS` works: the newest publication years, from the
    year whose works, with every later year's, first reach that many (the whole release when it is smaller), and
    its count."""
    total = 0
    for year, n in bare.execute(
        "SELECT year, count(*) FROM works WHERE year IS NOT NULL GROUP BY 1 ORDER BY 1 DESC"
    ).fetchall():
        total += n
        if total >= NETWORK_COHORT_WORKS:
            return {"year_min": str(year)}, total
    return {}, bare.execute("SELECT count(*) FROM works").fetchone()[0]


def measure_people(data: Path, bare, repeats: int) -> list[dict]:
    """``author_page``: GET /authors/<id> through TestClient for random authors (prolific and not), baseline the bare
    count of their authorships; ``network:<kind>``: GET /api/v1/network (50 nodes) of a cohort of about 10,000 works,
    baseline the bare count of the cohort's Canadian authorships."""
    from starlette.testclient import TestClient

    from metacan_pipeline.site.web.app import create_app

    ids = [r[0] for r in bare.execute(
        "SELECT author_id FROM site_authors USING SAMPLE 40 ROWS (reservoir, 15) ORDER BY 1"
    ).fetchall()]  # fmt: skip
    top = bare.execute(
        "SELECT author_id, works_in_frame FROM site_authors ORDER BY works_in_frame DESC, 1 LIMIT 5"
    ).fetchall()
    ids = [t[0] for t in top] + ids
    filters, size = network_cohort(bare)
    out: list[dict] = []
    it = {"i": 0}
    with TestClient(create_app(data, abstracts=no_record_fetcher(), rate_limit="off")) as client:

        def app():
            r = client.get(f"/authors/{ids[it['i'] % len(ids)]}")
            if r.status_code != 200:
                raise SystemExit(f"GET /authors/{ids[it['i'] % len(ids)]}: HTTP {r.status_code}")

        def base():
            bare.execute(
                "SELECT count(*) FROM site_work_authors WHERE author_id = ?", [ids[it["i"] % len(ids)]]
            ).fetchone()
            it["i"] += 1

        r = interleaved(app, base, repeats)
        out.append({"measurement": "author_page", "what": "GET /authors/<id> (TestClient, in process)",
                    "figure": f"{len(ids)} authors, the most prolific with {top[0][1]:,} works",
                    "target_p95_ms": TARGETS_PEOPLE["author_page"], "met": r["p95_ms"] < TARGETS_PEOPLE["author_page"],
                    **r})  # fmt: skip
        say("author_page", r)
        for kind, path in (
            ("authors", "/api/v1/network"),
            ("institutions", "/api/v1/network"),
            ("authors", "/network"),
        ):
            got: dict = {}

            def app(kind=kind, got=got, path=path):
                r = client.get(path, params={**filters, "kind": kind})
                if r.status_code != 200:
                    raise SystemExit(f"GET /api/v1/network: HTTP {r.status_code}")
                got["edges"] = len(r.json()["edges"]) if path.startswith("/api/") else r.text.count("<line ")

            where = f"year >= {int(filters['year_min'])}" if filters else "true"
            table = "site_work_authors" if kind == "authors" else "site_work_institution_ids"

            def base(table=table, where=where):
                bare.execute(
                    f"SELECT count(*) FROM {table} WHERE is_canadian AND work_key IN (SELECT work_key FROM works "
                    f"WHERE {where})"
                ).fetchone()

            r = interleaved(app, base, repeats)
            name = f"network:{kind}" if path.startswith("/api/") else f"network_page:{kind}"
            row = {"measurement": name, "what": f"GET {path}?kind={kind} (50 nodes)",
                   "cohort": filters, "cohort_works": size, "edges": got.get("edges"),
                   "figure": f"cohort {size:,} works, {got.get('edges', 0):,} edges",
                   "target_p95_ms": TARGETS_PEOPLE["network"], "met": r["p95_ms"] < TARGETS_PEOPLE["network"], **r}  # fmt: skip
            out.append(row)
            say(f"{name} ({size:,} works)", r)
    return out


def measure_exports(data: Path, bare, cap: int, repeats: int) -> list[dict]:
    from starlette.testclient import TestClient

    from metacan_pipeline.site.query.cohort_query import EXPORT_SQL
    from metacan_pipeline.site.web.app import create_app

    out = []
    scratch = Path(tempfile.mkdtemp(prefix="metacan-bench-site-copy-", dir="/tmp"))
    sql = EXPORT_SQL.replace("{where}", "true")
    # the cap comes first since the export query picks the capped cohort first (before: the constants first)
    copy_params = [cap, "h", "r", "v"] if sql.lstrip().startswith("WITH") else ["h", "r", "v", cap]
    try:
        with TestClient(create_app(data, row_cap=cap)) as client:
            for fmt in ("csv", "jsonl", "parquet"):
                got: dict = {}

                def app(fmt=fmt, got=got):
                    n_bytes, lines = 0, 0
                    with client.stream("GET", f"/export.{fmt}") as r:
                        for chunk in r.iter_bytes():
                            n_bytes += len(chunk)
                            lines += chunk.count(b"\n")
                        got["rows"] = int(r.headers["x-metacan-rows"])
                    got["bytes"], got["lines"] = n_bytes, lines

                def base():
                    bare.execute(f"COPY ({sql}) TO '{scratch / 'bare.csv'}' (FORMAT csv)", copy_params)

                runs = max(2, repeats // 5)
                r = interleaved(app, base, runs)
                rows = got["rows"] if fmt == "parquet" else got["lines"] - (3 if fmt == "csv" else 1)
                rate = rows / (r["p50_ms"] / 1000)
                out.append(
                    {
                        "measurement": f"export_{fmt}",
                        "what": f"GET /export.{fmt} (streamed) through TestClient, whole body read",
                        "rows": rows,
                        "bytes": got["bytes"],
                        "rows_per_s": round(rate),
                        "baseline_rows_per_s": round(cap / (r["baseline_p50_ms"] / 1000)),
                        **r,
                        "target_rows_per_s": TARGET_EXPORT_ROWS_S,
                        "met": rate >= TARGET_EXPORT_ROWS_S,
                    }
                )
                say(out[-1]["measurement"], r, round(rate))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def measure_figures(data: Path, bare, values: dict, repeats: int) -> list[dict]:
    """The statistics page, the disagreement dossier, the typeahead and suggestions (site/figures.py), and "did you
    mean" on a count of nothing, each against the bare DuckDB query of what it shows (the GROUP BY the stored figure
    replaces; the dossier's count; the typeahead's prefix count over the name table; the nearest keywords)."""
    from starlette.testclient import TestClient

    from metacan_pipeline.site.web.app import create_app

    lang = values.get("language") or "en"
    cases = [
        ("statistics_page", "/statistics", {},
         "SELECT year, count(*), count(*) FILTER (WHERE invisible_to_affiliation_only), count(*) FILTER (WHERE NOT "
         "has_abstract) FROM works GROUP BY 1", []),
        ("dossier_no_filter", "/dossier", {},
         "SELECT count(DISTINCT work_key) FROM work_disagreements", []),
        (f"dossier_language_{lang}", "/dossier", {"language": lang},
         "SELECT count(DISTINCT d.work_key) FROM work_disagreements d JOIN works w USING (work_key) "
         "WHERE w.language = ?", [lang]),
        ("typeahead_institution_uni", "/api/v1/facets/institution", {"q": "uni"},
         "SELECT name, count(*) FROM work_institutions WHERE starts_with(lower(name), 'uni') GROUP BY 1 "
         "ORDER BY 2 DESC LIMIT 10", []),
        (f"typeahead_institution_uni_language_{lang}", "/api/v1/facets/institution", {"q": "uni", "language": lang},
         "SELECT name, count(*) FROM work_institutions x JOIN works w USING (work_key) WHERE w.language = ? AND "
         "starts_with(lower(name), 'uni') GROUP BY 1 ORDER BY 2 DESC LIMIT 10", [lang]),
        ("suggest_keyword_da", "/api/v1/suggest", {"facet": "keyword", "prefix": "DA"},
         "SELECT name, count(*) FROM work_keywords WHERE starts_with(lower(strip_accents(name)), 'da') GROUP BY 1 "
         "ORDER BY 2 DESC LIMIT 10", []),
        # nothing matches: the count, then the nearest keywords and venues to the unknown values ("did you mean")
        ("did_you_mean_keyword_venue", "/api/v1/count", {"keyword": "daat sharing", "venue": "natre"},
         "SELECT name, jaro_winkler_similarity(lower(name), 'daat sharing') AS s FROM (SELECT DISTINCT name FROM "
         "work_keywords) ORDER BY s DESC LIMIT 3", []),
    ]  # fmt: skip
    out = []
    with TestClient(create_app(data, rate_limit="off")) as client:
        for name, path, params, sql, sql_params in cases:
            sizes = []

            def app(path=path, params=params, sizes=sizes):
                r = client.get(path, params=params)
                if r.status_code != 200:
                    raise SystemExit(f"GET {path}: HTTP {r.status_code}: {r.text[:200]}")
                sizes.append(len(r.content))

            r = interleaved(app, lambda sql=sql, p=sql_params: bare.execute(sql, p).fetchall(), repeats)
            out.append({"measurement": name, "what": f"GET {path} {params}", "page_bytes_p50": sizes[-1], **r})
            say(name, r)
    return out


SERVER = """
import sys, uvicorn
sys.path.insert(0, {repo!r})
from metacan_pipeline.site.web.app import create_app
uvicorn.run(create_app({data!r}, row_cap={cap}), host="127.0.0.1", port={port}, log_level="warning", access_log=False)
"""


def measure_server(data: Path, values: dict, cap: int) -> dict:
    """uvicorn in a child on 127.0.0.1: a bounded set of requests, then its peak RSS and the page sizes."""
    from urllib.parse import urlencode

    from _common import REPO

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from metacan_pipeline_tests.openalex_stub import StubOpenAlex

    code = SERVER.format(repo=str(REPO), data=str(data), cap=cap, port=port)
    stub = StubOpenAlex({})  # the work pages' live abstracts: a loopback OpenAlex holding none of the synthetic ids
    env = {**os.environ, "METACAN_OPENALEX_API_URL": stub.base_url}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(base + "/api/v1/", timeout=5).read()
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise SystemExit(f"the server did not start: {proc.stderr.read().decode()[-2000:]}") from None
                time.sleep(0.5)
        started_kib = proc_kib(f"/proc/{proc.pid}/status", "VmRSS")

        def get(path: str) -> bytes:
            with urllib.request.urlopen(base + path, timeout=300) as r:
                return r.read()

        sizes = {}
        t0 = time.perf_counter()
        for filters, _, _ in cohorts(values).values():
            body = get("/?" + urlencode(filters))
            sizes.setdefault("home_20", len(body))
            get("/api/v1/count?" + urlencode(filters))
        sizes["home_100"] = len(get("/?limit=100"))
        sizes["api_works_20"] = len(get("/api/v1/works"))
        sizes["api_works_100"] = len(get("/api/v1/works?limit=100"))
        for text in SEARCHES.values():
            sizes.setdefault("search_20", len(get("/?" + urlencode({"q": text}))))
        for wid in values["work_ids"][:20]:
            get(f"/works/{wid}")
        export_bytes = len(get("/export.csv"))
        elapsed = time.perf_counter() - t0
        hwm = proc_kib(f"/proc/{proc.pid}/status", "VmHWM")
        rss = proc_kib(f"/proc/{proc.pid}/status", "VmRSS")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stub.shutdown()
    out = {
        "measurement": "server",
        "what": f"uvicorn child on 127.0.0.1: 4 cohort pages + counts, {len(SEARCHES)} searches, 20 work pages, 1 CSV export",
        "requests_seconds": round(elapsed, 1),
        "rss_after_start_mib": round((started_kib or 0) / 1024, 1),
        "peak_rss_mib": round((hwm or 0) / 1024, 1),
        "rss_end_mib": round((rss or 0) / 1024, 1),
        "export_bytes": export_bytes,
        "page_bytes": sizes,
        "target_rss_mib": TARGET_RSS_MIB,
        "target_page_bytes": TARGET_PAGE_BYTES,
        "met": (hwm or 0) / 1024 < TARGET_RSS_MIB and max(sizes["home_20"], sizes["search_20"]) < TARGET_PAGE_BYTES,
    }
    say("server", out)
    return out


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------
def table(rows: list[dict]) -> str:
    head = f"{'measurement':28} {'p50 ms':>9} {'p95 ms':>9} {'base p50':>9} {'ratio':>7}  {'target':>14}  figure"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "p50_ms" not in r:
            continue
        m = r["measurement"]
        if m.startswith("export"):
            target = f">={TARGET_EXPORT_ROWS_S:,} r/s"
            figure = f"{r['rows_per_s']:,} rows/s ({r['rows']:,} rows; DuckDB COPY {r['baseline_rows_per_s']:,})"
        elif "target_p95_ms" in r:
            target = f"p95<{r['target_p95_ms']:.0f} ms"
            figure = r["figure"] if "figure" in r else f"count {r['count']:,}"
        else:
            target, figure = "", f"page {r.get('page_bytes_p50', 0):,} B"
        verdict = "" if "met" not in r else (" MET" if r["met"] else " MISSED")
        lines.append(
            f"{m:28} {r['p50_ms']:9.1f} {r['p95_ms']:9.1f} {r['baseline_p50_ms']:9.1f} {r['ratio'] or 0:7.2f}  "
            f"{target:>14}  {figure}{verdict}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--works", type=int, default=4_300_000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--keep", type=Path, help="keep (and reuse) the seed and the release under this folder")
    ap.add_argument("--export-rows", type=int, default=200_000, help="the export's row cap")
    ap.add_argument("--min-venues", type=int, default=20_000)
    ap.add_argument("--skip-server", action="store_true")
    ap.add_argument(
        "--only", default="cohorts,searches,work_page,people,figures,exports,server", help="comma-separated parts"
    )
    add_smoke_arg(ap, "2,000 works, 2 repetitions, exports of 200 rows")
    args = ap.parse_args()
    if args.smoke:
        args.works, args.repeats, args.export_rows, args.min_venues = 2_000, 2, 200, 100
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="metacan-bench-site-", dir="/tmp"))
    scratch.mkdir(parents=True, exist_ok=True)
    head = {
        "measurement": "machine",
        **machine(),
        "code": git_state(),
        "works": args.works,
        "duckdb": duckdb.__version__,
    }
    print(json.dumps(head), flush=True)
    try:
        data, built = release_dirs(scratch, args.works, args.min_venues)
        print(json.dumps({"measurement": "release", **built}), flush=True)
        from metacan_pipeline.site.build.release import Release

        release = Release(data)
        bare = duckdb.connect(str(release.db_path), read_only=True)
        values = pick_values(bare)
        only = set(args.only.split(","))
        rows = measure_cohorts(release, bare, values, args.repeats) if "cohorts" in only else []
        if "searches" in only:
            rows += measure_searches(release, bare, args.repeats)
        if "work_page" in only:
            rows.append(measure_work_page(data, bare, args.works, args.repeats))
        if "figures" in only:
            rows += measure_figures(data, bare, values, args.repeats)
        if "people" in only:
            rows += measure_people(data, bare, args.repeats)
        if "exports" in only:
            rows += measure_exports(data, bare, min(args.export_rows, args.works), args.repeats)
        bare.close()
        release.close()
        if "server" in only and not args.skip_server:
            rows.append(measure_server(data, values, min(args.export_rows, args.works)))
        for r in rows:
            print(json.dumps(r), flush=True)
        print(f"\n{args.works:,} works, {head['nproc']} CPUs ({head['cpu_model']}), duckdb {duckdb.__version__}, "
              f"load at start {head['load_at_start']}")  # fmt: skip
        print(table(rows))
        head["load_at_end"] = loadavg()
        print(f"load at end {head['load_at_end']}")
        ratios = {r["measurement"]: r["ratio"] for r in rows if r.get("ratio") is not None}
        figures = {"machine": head, "release": built, "values": values, "rows": rows}
        record("site", figures, ratios=ratios, started=head, smoke=args.smoke)
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
