"""How the coding store's queue answers as a study grows (the coding pages): ``next_task`` (the claim that
hands a coder their next work), ``coder_progress`` (the queue page's counts) and ``adjudication_queue`` on a store of
``--works`` tasks, each coded by two of ``--coders`` coders (one disagreement in five), real SQLite in WAL mode; then
the same calls once the works have coder pairs (``assign_works``: the 50 works nobody answered get a pair, the others
keep the coders who answered them), with the ratio paired / first come, first served measured in this process, and
the time to draw the pairs of every work (``draw_pairs``).

    .venv/bin/python benchmarks/bench_coding.py --works 2000 --coders 6 [--smoke]

The figure: p50 and p95 ms of each call (a page answers within a human's patience: well under 100 ms). Writes
``benchmarks/out/coding.json``; ``--smoke``: 100 works, 3 coders, 3 repetitions.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import add_smoke_arg, machine, record

from metacan_pipeline.audit.coding.assignments import draw_pairs
from metacan_pipeline.audit.coding.store import CodingStore

ANSWER = {"categories": [], "study_design": "observational", "genre": "empirical", "about_ca_system": False,
          "about_ca_topic": False}  # fmt: skip
P = "protocol-0123456789ab"


def timed(fn, n: int = 30) -> tuple[float, float]:
    runs = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    runs.sort()
    return statistics.median(runs), runs[int(0.95 * (n - 1))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--works", type=int, default=2000)
    ap.add_argument("--coders", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=30)
    add_smoke_arg(ap, "100 works, 3 coders, 3 repetitions")
    args = ap.parse_args()
    if args.smoke:
        args.works, args.coders, args.repeats = 100, 3, 3
    started, figures = machine(), {"args": vars(args)}
    with tempfile.TemporaryDirectory() as tmp, CodingStore(Path(tmp) / "coding.sqlite") as store:
        rows = [{"id": f"W{10_000 + i}", "title_text": f"Work {i}", "position": i} for i in range(args.works)]
        t = time.perf_counter()
        store.load_tasks(P, rows)
        figures["load_tasks_s"] = round(time.perf_counter() - t, 3)
        print(f"load_tasks {args.works} works: {figures['load_tasks_s']:.2f} s")
        coders = [f"c{i}" for i in range(args.coders)]
        for c in coders:
            store.add_coder(c)
        store.grant_role(coders[0])
        t = time.perf_counter()
        for i, r in enumerate(rows[: args.works - 50]):
            a, b = coders[1 + i % (args.coders - 1)], coders[1 + (i + 1) % (args.coders - 1)]
            store.submit(P, r["id"], a, ANSWER)
            store.submit(P, r["id"], b, {**ANSWER, "genre": "review"} if i % 5 == 0 else ANSWER)
        print(f"{2 * (args.works - 50)} answers appended in {time.perf_counter() - t:.1f} s")
        for name, fn in (
            ("next_task", lambda: store.next_task(P, coders[1])),
            ("coder_progress", lambda: store.coder_progress(P, coders[1])),
            ("adjudication_queue", lambda: store.adjudication_queue(P, coders[0])),
        ):
            p50, p95 = timed(fn, args.repeats)
            figures[name] = {"p50_ms": round(p50, 2), "p95_ms": round(p95, 2)}
            print(f"{name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
        seed = "0" * 64
        t = time.perf_counter()
        pairs = draw_pairs(seed, [r["id"] for r in rows], coders[1:])
        figures["draw_pairs_all_s"] = round(time.perf_counter() - t, 3)
        print(f"draw_pairs of {len(pairs)} works over {args.coders - 1} coders: {figures['draw_pairs_all_s']:.2f} s")
        store.record_study(P, seed, ["metaresearch"])
        t = time.perf_counter()
        out = store.assign_works(P)
        figures["assign_works_s"] = round(time.perf_counter() - t, 3)
        print(f"assign_works: {out['assigned']} assigned, {out['kept']} kept in {figures['assign_works_s']:.2f} s")
        for name, fn in (
            ("next_task", lambda: store.next_task(P, coders[1])),
            ("coder_progress", lambda: store.coder_progress(P, coders[1])),
        ):
            p50, p95 = timed(fn, args.repeats)
            ratio = p50 / figures[name]["p50_ms"]
            figures[f"{name}_paired"] = {"p50_ms": round(p50, 2), "p95_ms": round(p95, 2), "ratio_p50": round(ratio, 2)}
            print(
                f"{name} with coder pairs: p50 {p50:.1f} ms, p95 {p95:.1f} ms ({ratio:.2f}x first come, first served)"
            )
    record("coding", figures, started=started, smoke=args.smoke)


if __name__ == "__main__":
    main()
