"""Teacher throughput against the local stub teacher (metacan_pipeline_tests/stub_teacher/) on loopback.

For each stub latency (simulated model time per call), start the stub as a subprocess, warm it up, then
measure, one after the other against the same stub in this process run:

- ``stub capacity``: the same prebuilt bodies sent over raw keep-alive HTTP/1.1 connections (asyncio
  streams on uvloop, each reply read by its Content-Length and not parsed): the stub's own throughput,
  with a loader far cheaper than the stub. The figure to beat: client works/s over this (``/stub``) >= 0.9.
- ``baseline``: a bare ``httpx.AsyncClient`` (one, shared, ``concurrency`` connections) posting the
  prebuilt request bodies of the batched protocol; nothing parsed or validated: what the HTTP library
  costs with no client logic (``/httpx``). At latency 0 it is bound by httpx (one core), not the stub.
- ``client``: :func:`run_client`, the project's labelling path end to end (registry spec, async batched
  client, strict validation, gzip archive written ahead, DuckDB inserts) on the same works; its seconds
  are the sending phase (``LabelRunStats.seconds``), like the other rows.

Then ``--cached-works`` works are labelled through a latency-0 stub and labelled again: the second run
reuses every label (0 calls); its works/s (label-store lookup, views and hashes, export) is the
"fully cached re-run" figure (target >= 20,000 works/s).

Reported per row: calls/s, works/s, the CPU cores the stub process tree used (utime+stime from /proc
over the wall time) and the cores this benchmark process used, and the call count seen by the stub's
/stats. With latency L and concurrency C no client can exceed C / L calls/s; that bound is printed too.

Usage: .venv/bin/python benchmarks/bench_teacher.py [--calls 1000] [--works-per-call 25] [--concurrency 32]
                                                    [--latency-ms 0 250 1000] [--cached-works 100000]
                                                    [--workers 1] [--capacity-rounds 1] [--smoke]
Writes ``benchmarks/out/teacher.json``; ``--smoke``: 20 calls of 5 works at latency 0, 500 cached works.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import httpx
from _common import add_smoke_arg, loadavg, machine, machine_line, ratio, record, self_cpu_seconds, tree_cpu_seconds
from teacher_loaders import frame_rows, make_works, run_baseline, run_capacity

from metacan_pipeline_tests.stub_teacher.process import run_stub


# ------------------------------------------------------------------------------------------------
# the project's client
# ------------------------------------------------------------------------------------------------
def _bench_spec(base_url: str, works_per_call: int, concurrency: int):
    """The registry spec of the stub teacher (strict JSON schema output, a system role)."""
    from metacan_pipeline.teachers.core.registry import TeacherSpec

    return TeacherSpec(
        name="bench",
        base_url=base_url,
        model="stub-teacher",
        works_per_call=works_per_call,
        concurrency=concurrency,
        structured_output="json_schema",
        system_role="yes",
    )


def _label_run(storage, spec, rows: list[dict], run_id: str):
    import logging

    from metacan_pipeline.teachers.export import export_labels
    from metacan_pipeline.teachers.labelling import label_works

    stats = label_works(
        storage, spec, rows, run_id=run_id, log=logging.getLogger("bench"), base_url=lambda: spec.base_url
    )
    export_labels(storage, spec, stats.view_hashes)
    return stats


def run_client(base_url: str, works: list[dict], concurrency: int, works_per_call: int) -> float:
    """The project's labelling path end to end against the stub: :func:`label_works` (registry spec, async
    batched client, strict validation, gzip archive written ahead, DuckDB flushes) then
    :func:`export_labels`, into a fresh data folder; returns the seconds of the sending phase (first call to
    the last outcome stored in DuckDB and the archive closed, as ``LabelRunStats.seconds``), like the other
    rows, which time only the sending; set-up (views, hashes, label-store lookup) is what the cached re-run
    measures. Fails unless every work is labelled with exactly one call per batch (the stub answers every
    clean call correctly)."""
    import tempfile

    from metacan_pipeline.storage import MetacanStorage

    rows = frame_rows(works)
    spec = _bench_spec(base_url, works_per_call, concurrency)
    with tempfile.TemporaryDirectory(prefix="bench-teacher-") as tmp:
        storage = MetacanStorage(data_dir=tmp)
        stats = _label_run(storage, spec, rows, "bench-run-1")
        seconds = stats.seconds
    if stats.outcomes != {"labelled": len(rows)} or stats.calls != -(-len(rows) // works_per_call):
        raise RuntimeError(f"client: {dict(stats.outcomes)} in {stats.calls} calls")
    return seconds


def run_cached(base_url: str, n: int, works_per_call: int = 25, concurrency: int = 32) -> dict:
    """Label ``n`` works through the stub, then time a second run over the same works: every label is
    reused (0 calls); returns its seconds and works/s (lookup of the label store, views and hashes, the
    export of the teacher's table)."""
    import tempfile

    from metacan_pipeline.storage import MetacanStorage

    rows = frame_rows(make_works(n, seed=5))
    spec = _bench_spec(base_url, works_per_call, concurrency)
    with tempfile.TemporaryDirectory(prefix="bench-teacher-") as tmp:
        storage = MetacanStorage(data_dir=tmp)
        t0 = time.perf_counter()
        first = _label_run(storage, spec, rows, "bench-fill")
        fill = time.perf_counter() - t0
        t0 = time.perf_counter()
        second = _label_run(storage, spec, rows, "bench-cached")
        seconds = time.perf_counter() - t0
    if second.calls or second.reused != n or first.outcomes != {"labelled": n}:
        raise RuntimeError(f"cached: second run made {second.calls} calls, reused {second.reused} of {n}")
    return {
        "works": n,
        "fill_seconds": fill,
        "fill_works_per_s": n / fill,
        "seconds": seconds,
        "works_per_s": n / seconds,
    }


def measure(
    name: str, fn, base_url: str, pid: int, works: list[dict], concurrency: int, works_per_call: int, rounds: int = 1
) -> dict:
    """Run ``fn`` (which sends ``rounds`` x the works) against the stub; figures from its own seconds."""
    stats_url = base_url.removesuffix("/v1") + "/stats"
    calls0 = httpx.get(stats_url).json()["calls"]
    stub0, self0, t0 = tree_cpu_seconds(pid), self_cpu_seconds(), time.perf_counter()
    try:
        seconds = fn(base_url, works, concurrency, works_per_call)
    except NotImplementedError as exc:
        return {"name": name, "error": f"not implemented yet ({exc})"}
    wall = time.perf_counter() - t0
    stub_cpu, self_cpu = tree_cpu_seconds(pid) - stub0, self_cpu_seconds() - self0
    calls = httpx.get(stats_url).json()["calls"] - calls0
    n_calls = rounds * -(-len(works) // works_per_call)
    return {
        "name": name,
        "seconds": seconds,
        "calls": n_calls,
        "calls_per_s": n_calls / seconds,
        "works_per_s": rounds * len(works) / seconds,
        "stub_cores": stub_cpu / wall,
        "bench_cores": self_cpu / wall,
        "stub_calls": calls,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000, help="chat calls per measurement")
    ap.add_argument("--works-per-call", type=int, default=25)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument(
        "--latency-ms", type=float, nargs="+", default=[0.0, 250.0, 1000.0], help="stub latency per call; one stub each"
    )
    ap.add_argument("--workers", type=int, default=1, help="stub worker processes")
    ap.add_argument(
        "--capacity-rounds", type=int, default=1, help="the capacity row sends the calls this many times (0: skip)"
    )
    ap.add_argument(
        "--cached-works", type=int, default=100_000, help="works of the fully cached re-run measurement (0: skip)"
    )
    add_smoke_arg(ap, "20 calls of 5 works at latency 0, 500 cached works")
    args = ap.parse_args()
    if args.smoke:
        args.calls, args.works_per_call, args.concurrency, args.latency_ms, args.cached_works = 20, 5, 4, [0.0], 500
    started, ratios = machine(), {}
    works = make_works(args.calls * args.works_per_call)
    results = []
    print(
        f"{args.calls} calls x {args.works_per_call} works, concurrency {args.concurrency}, stub workers {args.workers}, "
        f"{machine_line()}"
    )
    for latency in args.latency_ms:
        plan = [("baseline bare httpx", run_baseline, 1), ("client run_client", run_client, 1)]
        if args.capacity_rounds:
            plan.insert(
                0, ("stub capacity (raw)", partial(run_capacity, rounds=args.capacity_rounds), args.capacity_rounds)
            )
        with run_stub(latency_ms=latency, workers=args.workers) as (base_url, proc):
            warm = make_works(2 * args.concurrency * args.works_per_call, seed=99)
            run_baseline(base_url, warm, args.concurrency, args.works_per_call)
            rows = [
                measure(name, fn, base_url, proc.pid, works, args.concurrency, args.works_per_call, rounds)
                for name, fn, rounds in plan
            ]
        bound = args.concurrency / (latency / 1000) if latency else float("inf")
        print(f"\nstub latency {latency:g} ms (no client can exceed C/L = {bound:.0f} calls/s)")
        print(
            f"  {'':22s} {'calls/s':>9s} {'works/s':>9s} {'wall s':>7s} {'stub cores':>10s} {'bench cores':>11s} "
            f"{'stub calls':>10s} {'/httpx':>7s} {'/stub':>6s}"
        )
        base = next(r for r in rows if r["name"].startswith("baseline"))
        cap = next((r for r in rows if r["name"].startswith("stub capacity")), None)
        for r in rows:
            if "error" in r:
                print(f"  {r['name']:22s} {r['error']}")
                continue
            if r["stub_calls"] != r["calls"] and r is not rows[-1]:  # the client may retry; the bare loaders never do
                raise RuntimeError(f"{r['name']}: the stub saw {r['stub_calls']} calls, expected {r['calls']}")
            of_httpx = (
                f"{r['works_per_s'] / base['works_per_s']:7.2f}"
                if r["name"].startswith(("client", "baseline"))
                else "      -"
            )
            of_stub = f"{r['works_per_s'] / cap['works_per_s']:6.3f}" if cap and r is not cap else "     -"
            if r["name"].startswith("client"):
                ratios[f"client_works_s/httpx@{latency:g}ms"] = ratio(r["works_per_s"], base["works_per_s"])
                if cap:
                    ratios[f"client_works_s/stub@{latency:g}ms"] = ratio(r["works_per_s"], cap["works_per_s"])
            print(
                f"  {r['name']:22s} {r['calls_per_s']:9.1f} {r['works_per_s']:9.1f} {r['seconds']:7.2f} "
                f"{r['stub_cores']:10.2f} {r['bench_cores']:11.2f} {r['stub_calls']:10d} {of_httpx} {of_stub}"
            )
        results.append({"latency_ms": latency, "rows": rows})
    if args.cached_works:
        with run_stub(latency_ms=0) as (base_url, _):
            cached = run_cached(base_url, args.cached_works)
        print(
            f"\nfully cached re-run: {cached['works']} works in {cached['seconds']:.2f} s = {cached['works_per_s']:.0f} works/s, 0 calls "
            f"(target >= 20,000; first run through the stub at latency 0: {cached['fill_works_per_s']:.0f} works/s)"
        )
        results.append({"cached": cached})
    print(
        f"\n/httpx = works/s over the bare-httpx baseline, /stub = over the stub's own throughput (its capacity row), same stub;"
        f" the figure to beat is client /stub >= 0.9 at concurrency 32. load after: "
        f"{loadavg()}"
    )
    figures = {"args": {k: str(v) for k, v in vars(args).items()}, "results": results}
    record("teacher", figures, ratios=ratios, started=started, smoke=args.smoke)


if __name__ == "__main__":
    main()
