"""Teacher throughput against the local stub teacher (metacan_pipeline_tests/stub_teacher.py) on loopback.

For each stub latency (simulated model time per call), start the stub as a subprocess, warm it up, then
measure, one after the other against the same stub in this process run:

- ``stub capacity``: the same prebuilt bodies sent ``--capacity-rounds`` times over raw keep-alive
  HTTP/1.1 connections (asyncio streams on uvloop, each reply read by its Content-Length and not
  parsed): the stub's own throughput, with a loader far cheaper than the stub. Not a ratio base.
- ``baseline``: a bare ``httpx.AsyncClient`` (one, shared, ``concurrency`` connections) posting the
  prebuilt request bodies of the batched protocol (rubric as the system message, ``works_per_call``
  records between ``<records>`` lines); nothing is parsed or validated, only the status is checked.
  The ratio's denominator: what the same HTTP library costs with no client logic at all. It is bound
  by httpx, not by the stub (this process near one core, the stub under 0.1 core): httpcore's pool
  scans every connection for every request, and without ``sniffio`` installed it retries a failed
  ``import sniffio`` for every request. Measured here at latency 0: 190-290 calls/s through one client
  with 32 connections, 520 through 32 one-connection clients, 710 through one client at concurrency 1.
- ``client``: :func:`run_client`, the project's batched teacher client labelling the same works against
  the same stub. NOT WRITTEN YET: it raises NotImplementedError and the table says so; once it exists,
  its row and its ratio to the baseline appear with no other change.

Reported per row: calls/s, works/s, the CPU cores the stub process tree used (its utime+stime from
/proc over the wall time; 1.0 = one core saturated) and the cores this benchmark process used, and the
call count seen by the stub's /stats. With latency L and concurrency C no client can exceed C / L
calls/s; that bound is printed too.

Usage: .venv/bin/python benchmarks/bench_teacher.py [--calls 2000] [--works-per-call 10] [--concurrency 32]
                                                    [--latency-ms 0 20] [--workers 1] [--capacity-rounds 5]
                                                    [--json out.json]
Bounded: (2 + capacity rounds) x calls requests per latency, plus a warm-up of 2 x concurrency, all to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import sys
import time
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's metacan_pipeline_tests, not the editable install's

from metacan_pipeline_tests.stub_teacher import run_stub  # noqa: E402

RUBRIC = (REPO / "metacan_pipeline" / "teachers" / "prompts" / "v1.md").read_text()
_WORDS = ("reporting quality of randomized trials in Canadian journals data sharing peer review reproducibility "
          "soil bacteria Alberta cohort study of diabetes outcomes Ontario preprints retractions citation analysis "
          "nursing workforce survey machine learning for crop yield prediction open access mandates").split()


# ------------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------------
def make_works(n: int, seed: int = 11) -> list[dict]:
    """``n`` synthetic title-only record views (the shape of teachers.views.record_view), ids W1..Wn."""
    rng = random.Random(seed)
    return [{"id": f"W{4_000_000_000 + i}", "title": " ".join(rng.choices(_WORDS, k=rng.randint(6, 18))).capitalize(),
             "year": rng.randint(1990, 2025), "language": "en", "type": "article",
             "venue": rng.choice(("Canadian Medical Association Journal", "PLOS ONE", None)),
             "topic": rng.choice(("Meta-analysis and systematic reviews", "Soil microbiology", None)),
             "field": rng.choice(("Medicine", "Agricultural and Biological Sciences", None))} for i in range(n)]


def request_body(batch: list[dict], model: str = "stub-teacher") -> bytes:
    """One chat request of the batched protocol (``<`` and ``>`` escaped inside records)."""
    lines = "\n".join(orjson.dumps(w).decode().replace("<", "\\u003c").replace(">", "\\u003e") for w in batch)
    user = (f"Label each of the {len(batch)} records below. Reply with one JSON object {{\"labels\": [...]}}, "
            f"one label per record, in order.\n<records>\n{lines}\n</records>")
    return orjson.dumps({"model": model, "temperature": 0, "max_tokens": 120 * len(batch),
                         "response_format": {"type": "json_object"},
                         "messages": [{"role": "system", "content": RUBRIC}, {"role": "user", "content": user}]})


# ------------------------------------------------------------------------------------------------
# the two measurements
# ------------------------------------------------------------------------------------------------
async def _post_all(base_url: str, bodies: list[bytes], concurrency: int) -> dict[int, int]:
    statuses: dict[int, int] = {}
    it = iter(bodies)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as client:
        async def worker() -> None:
            for body in it:  # one shared iterator: each body is sent once
                r = await client.post("/chat/completions", content=body, headers={"content-type": "application/json"})
                await r.aread()
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def run_baseline(base_url: str, works: list[dict], concurrency: int, works_per_call: int) -> float:
    """Bare httpx over prebuilt bodies (built before the clock starts); returns wall seconds."""
    bodies = [request_body(works[i:i + works_per_call]) for i in range(0, len(works), works_per_call)]
    t0 = time.perf_counter()
    statuses = asyncio.run(_post_all(base_url, bodies, concurrency))
    seconds = time.perf_counter() - t0
    if statuses != {200: len(bodies)}:
        raise RuntimeError(f"baseline: unexpected statuses {statuses}")
    return seconds


async def _raw_post_all(base_url: str, bodies: list[bytes], concurrency: int) -> dict[int, int]:
    u = urlsplit(base_url)
    path = f"{u.path}/chat/completions".encode()
    statuses: dict[int, int] = {}
    it = iter(bodies)

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(u.hostname, u.port)
        for body in it:
            writer.write(b"POST %b HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                         % (path, u.netloc.encode(), len(body), body))
            head = await reader.readuntil(b"\r\n\r\n")
            at = head.lower().index(b"content-length:") + 15
            await reader.readexactly(int(head[at:head.index(b"\r\n", at)]))
            status = int(head[9:12])
            statuses[status] = statuses.get(status, 0) + 1
        writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def run_capacity(base_url: str, works: list[dict], concurrency: int, works_per_call: int, rounds: int = 1) -> float:
    """The stub's own throughput: prebuilt bodies, ``rounds`` times, over raw sockets; returns wall seconds."""
    import uvloop

    bodies = [request_body(works[i:i + works_per_call]) for i in range(0, len(works), works_per_call)] * rounds
    t0 = time.perf_counter()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        statuses = runner.run(_raw_post_all(base_url, bodies, concurrency))
    seconds = time.perf_counter() - t0
    if statuses != {200: len(bodies)}:
        raise RuntimeError(f"capacity: unexpected statuses {statuses}")
    return seconds


def run_client(base_url: str, works: list[dict], concurrency: int, works_per_call: int) -> float:
    """PLACEHOLDER: label ``works`` with the project's batched teacher client against the stub; wall seconds.

    To be written with that client: build it for ``base_url`` (model ``stub-teacher``) with
    ``concurrency`` calls in flight and ``works_per_call`` works per call, then time only the labelling
    of every work (client and store set-up excluded), as :func:`run_baseline` times only the sending.
    It should fail if any work ends without a label: the stub answers every clean call correctly.
    """
    raise NotImplementedError("run_client: the batched teacher client is not written yet")


# ------------------------------------------------------------------------------------------------
# measuring the stub's CPU
# ------------------------------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(pid: int) -> float:
    """utime+stime in seconds of ``pid`` and its live descendants (from /proc/*/stat)."""
    stats: dict[int, tuple[int, float]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    f = fh.read().rsplit(")", 1)[1].split()
                stats[int(d)] = (int(f[1]), (int(f[11]) + int(f[12])) / _TICK)
            except (OSError, IndexError, ValueError):
                continue
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += stats.get(p, (0, 0.0))[1]
        todo += [c for c, (pp, _) in stats.items() if pp == p]
    return total


def _self_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def measure(name: str, fn, base_url: str, pid: int, works: list[dict], concurrency: int, works_per_call: int,
            rounds: int = 1) -> dict:
    """Run ``fn`` (which sends ``rounds`` x the works) against the stub; figures from its own seconds."""
    stats_url = base_url.removesuffix("/v1") + "/stats"
    calls0 = httpx.get(stats_url).json()["calls"]
    stub0, self0, t0 = _tree_cpu_s(pid), _self_cpu_s(), time.perf_counter()
    try:
        seconds = fn(base_url, works, concurrency, works_per_call)
    except NotImplementedError as exc:
        return {"name": name, "error": f"not implemented yet ({exc})"}
    wall = time.perf_counter() - t0
    stub_cpu, self_cpu = _tree_cpu_s(pid) - stub0, _self_cpu_s() - self0
    calls = httpx.get(stats_url).json()["calls"] - calls0
    n_calls = rounds * -(-len(works) // works_per_call)
    return {"name": name, "seconds": seconds, "calls": n_calls, "calls_per_s": n_calls / seconds,
            "works_per_s": rounds * len(works) / seconds, "stub_cores": stub_cpu / wall, "bench_cores": self_cpu / wall,
            "stub_calls": calls}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000, help="chat calls per measurement")
    ap.add_argument("--works-per-call", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency-ms", type=float, nargs="+", default=[20.0], help="stub latency per call; one stub each")
    ap.add_argument("--workers", type=int, default=1, help="stub worker processes")
    ap.add_argument("--capacity-rounds", type=int, default=5, help="the capacity row sends the calls this many times (0: skip)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    works = make_works(args.calls * args.works_per_call)
    results = []
    print(f"{args.calls} calls x {args.works_per_call} works, concurrency {args.concurrency}, stub workers {args.workers}, "
          f"{os.cpu_count()} CPUs, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for latency in args.latency_ms:
        plan = [("baseline bare httpx", run_baseline, 1), ("client run_client", run_client, 1)]
        if args.capacity_rounds:
            plan.insert(0, ("stub capacity (raw)", partial(run_capacity, rounds=args.capacity_rounds), args.capacity_rounds))
        with run_stub(latency_ms=latency, workers=args.workers) as (base_url, proc):
            warm = make_works(2 * args.concurrency * args.works_per_call, seed=99)
            run_baseline(base_url, warm, args.concurrency, args.works_per_call)
            rows = [measure(name, fn, base_url, proc.pid, works, args.concurrency, args.works_per_call, rounds)
                    for name, fn, rounds in plan]
        bound = args.concurrency / (latency / 1000) if latency else float("inf")
        print(f"\nstub latency {latency:g} ms (no client can exceed C/L = {bound:.0f} calls/s)")
        print(f"  {'':22s} {'calls/s':>9s} {'works/s':>9s} {'wall s':>7s} {'stub cores':>10s} {'bench cores':>11s} "
              f"{'stub calls':>10s} {'ratio':>6s}")
        base = next(r for r in rows if r["name"].startswith("baseline"))
        for r in rows:
            if "error" in r:
                print(f"  {r['name']:22s} {r['error']}")
                continue
            if r["stub_calls"] != r["calls"] and r is not rows[-1]:  # the client may retry; the bare loaders never do
                raise RuntimeError(f"{r['name']}: the stub saw {r['stub_calls']} calls, expected {r['calls']}")
            ratio = f"{r['works_per_s'] / base['works_per_s']:6.2f}" if r is not base and r["name"].startswith("client") else \
                ("  1.00" if r is base else "     -")
            print(f"  {r['name']:22s} {r['calls_per_s']:9.1f} {r['works_per_s']:9.1f} {r['seconds']:7.2f} "
                  f"{r['stub_cores']:10.2f} {r['bench_cores']:11.2f} {r['stub_calls']:10d} {ratio}")
        results.append({"latency_ms": latency, "rows": rows})
    print(f"\nratio = works/s over the bare-httpx baseline of the same stub. load after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1))


if __name__ == "__main__":
    main()
