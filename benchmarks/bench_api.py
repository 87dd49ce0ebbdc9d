"""OpenAlex API client against a local test server on loopback. The figure: the client's pages/s over a bare httpx
loop's (ratio to beat: about 1, the client's retry and archive cost little), and every page archived exactly once
under a 429 storm.

Serves cursor pages built from real records of ../shared/data/openalex on 127.0.0.1 and measures, in
one process:

- baseline: a bare httpx loop fetching every page of every query (no retry, no archive);
- client: ``OpenAlexClient.iter_pages`` over the same queries at the configured concurrency
  (queries run in parallel threads; cursor paging inside a query is sequential by nature);
- storm: the same harvest while the server answers 30% of requests with 429 + Retry-After: 0;
  afterwards every page must be archived exactly once.

Usage: .venv/bin/python benchmarks/bench_api.py [--queries 8] [--pages 25] [--concurrency 4] [--smoke]
Writes ``benchmarks/out/api.json``; ``--smoke``: 2 queries of 3 pages.
Bounded: at most queries*pages*(1+retries) requests, all to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
from _common import SHARED_DATA, add_smoke_arg, machine, machine_line, ratio, record

from metacan_pipeline.openalex.api import Budget, OpenAlexClient

SHARED = SHARED_DATA / "openalex"


def make_server(results: list[dict], pages: int, storm: float, seed: int = 7):
    rng = random.Random(seed)
    lock = threading.Lock()
    stats = {"ok": 0, "429": 0}
    bodies = {}
    for i in range(pages):
        nxt = f"p{i + 1}" if i + 1 < pages else None
        bodies["*" if i == 0 else f"p{i}"] = json.dumps(
            {"meta": {"count": pages * len(results), "next_cursor": nxt, "cost_usd": 0.0}, "results": results}
        ).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # quiet
            pass

        def do_GET(self):
            q = parse_qs(urlparse(self.path).query)
            with lock:
                throttle = rng.random() < storm
                stats["429" if throttle else "ok"] += 1
            if throttle:
                self.send_response(429)
                self.send_header("Retry-After", "0")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = bodies[q.get("cursor", ["*"])[0]]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, stats


def bare(base: str, queries: int, concurrency: int) -> int:
    def one(qi: int) -> int:
        n, cursor = 0, "*"
        with httpx.Client(base_url=base) as c:
            while cursor:
                page = c.get("/works", params={"filter": f"q{qi}", "cursor": cursor}).json()
                n += 1
                cursor = page["meta"]["next_cursor"]
        return n

    with ThreadPoolExecutor(concurrency) as ex:
        return sum(ex.map(one, range(queries)))


def harvest(base: str, archive: Path, queries: int, concurrency: int) -> tuple[int, OpenAlexClient]:
    client = OpenAlexClient(
        archive, base_url=base, api_key_env="", budget=Budget(max_calls=10**6, max_cost_usd=1e9), max_attempts=20
    )

    def one(qi: int) -> int:
        return sum(1 for _ in client.iter_pages(f"q{qi}"))

    with ThreadPoolExecutor(concurrency) as ex:
        n = sum(ex.map(one, range(queries)))
    client.close()
    return n, client


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--pages", type=int, default=25)
    ap.add_argument("--concurrency", type=int, default=4)
    add_smoke_arg(ap, "2 queries of 3 pages")
    args = ap.parse_args()
    if args.smoke:
        args.queries, args.pages = 2, 3
    started = machine()
    results = json.loads((SHARED / "rkrug__openalexPro__pipeline_chunk_1_page_1.json").read_text())["results"]
    expected = args.queries * args.pages
    scratch = Path(tempfile.mkdtemp(prefix="metacan-bench-api-"))
    try:
        server, _ = make_server(results, args.pages, storm=0.0)
        base = f"http://127.0.0.1:{server.server_address[1]}"
        t0 = time.perf_counter()
        n_bare = bare(base, args.queries, args.concurrency)
        t_bare = time.perf_counter() - t0
        t0 = time.perf_counter()
        n_cli, cli = harvest(base, scratch / "a", args.queries, args.concurrency)
        t_cli = time.perf_counter() - t0
        server.shutdown()
        storm_server, stats = make_server(results, args.pages, storm=0.3)
        base = f"http://127.0.0.1:{storm_server.server_address[1]}"
        t0 = time.perf_counter()
        n_storm, scli = harvest(base, scratch / "b", args.queries, args.concurrency)
        t_storm = time.perf_counter() - t0
        storm_server.shutdown()
        files = list((scratch / "b" / "pages").rglob("*.json.gz"))
        print(
            f"pages per run: {expected} ({args.queries} queries x {args.pages} pages x {len(results)} works), concurrency {args.concurrency}; "
            f"{machine_line()}"
        )
        print(f"baseline bare httpx   : {n_bare / t_bare:8.1f} pages/s")
        print(
            f"OpenAlexClient        : {n_cli / t_cli:8.1f} pages/s   ratio to baseline {n_cli / t_cli / (n_bare / t_bare):.2f}"
        )
        print(
            f"under a 429 storm     : {n_storm / t_storm:8.1f} pages/s   ({stats['429']} x 429, {stats['ok']} x 200; "
            f"{scli.calls_made} calls)"
        )
        print(
            f"storm archive         : {len(files)} files for {expected} pages, unique: {len({str(f.relative_to(scratch)) for f in files}) == len(files)}; "
            f"every page exactly once: {len(files) == expected == n_storm}"
        )
        assert len(files) == expected == n_storm and n_cli == expected == n_bare
        figures = {
            "args": vars(args),
            "pages": expected,
            "baseline_pages_s": round(n_bare / t_bare, 1),
            "client_pages_s": round(n_cli / t_cli, 1),
            "storm_pages_s": round(n_storm / t_storm, 1),
            "storm_429": stats["429"],
            "storm_calls": scli.calls_made,
            "storm_archived_once": len(files) == expected == n_storm,
        }
        ratios = {"client_pages_s/baseline": ratio(n_cli / t_cli, n_bare / t_bare)}
        record("api", figures, ratios=ratios, started=started, smoke=args.smoke)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
