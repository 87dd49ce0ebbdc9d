"""Peak memory of the ``work_pages`` asset alone: nothing may hold a whole table in Python memory, so its peak RSS
must stay flat as the records grow.

Writes ``--works`` records of :func:`pages_records.record_chunks` (10,000 a Parquet file) as the ``work_records``
table of a fresh data folder (one child process), then materializes ``work_pages`` alone with
``fetch_abstracts: false`` twice, each in a fresh child process: the first run renders every page, the second
finds nothing changed. Each child prints its seconds, pages rendered and ``ru_maxrss`` (peak RSS of the process:
the asset, Dagster's in-process executor and DuckDB); this prints them with the CPU model and the load average.
Run it from a checkout to measure that checkout's code (``_common`` puts it first on ``sys.path``).

Usage: .venv/bin/python benchmarks/bench_pages_memory.py --works 100000 [--scratch DIR] [--keep] [--smoke]
Writes ``benchmarks/out/pages_memory.json``; ``--smoke``: 200 works.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import add_smoke_arg, cpu_model, loadavg, machine, record


def _write_records(n: int, data: str) -> None:
    import pyarrow as pa
    from pages_records import record_chunks

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.tables.publish import RECORDS_SCHEMA

    def tables():
        for chunk in record_chunks(n, 10_000):
            rows = []
            for rec, _ in chunk:
                text = json.dumps(rec, ensure_ascii=False, default=str)
                digest = hashlib.sha256(text.encode()).hexdigest()[:16]
                rows.append({"id": rec["id"], "record_json": text, "record_hash": digest})
            yield pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA)

    MetacanStorage(data_dir=data).write_table("work_records", tables(), schema=RECORDS_SCHEMA)


def _run_pages(data: str) -> None:
    import dagster as dg

    from metacan_pipeline.publish.assets import PagesConfig, work_pages
    from metacan_pipeline.storage import MetacanStorage

    t0 = time.perf_counter()
    result = dg.materialize(
        [work_pages],
        resources={"storage": MetacanStorage(data_dir=data)},
        instance=dg.DagsterInstance.ephemeral(),
        run_config=dg.RunConfig({"work_pages": PagesConfig(fetch_abstracts=False)}),
    )
    seconds = time.perf_counter() - t0
    md = result.asset_materializations_for_node("work_pages")[0].metadata
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{seconds:.1f} s, {md['pages_rendered'].value:,} pages rendered, "
        f"{md['pages_unchanged'].value:,} unchanged, peak RSS {peak:.0f} MiB",
        flush=True,
    )
    figures = {"seconds": round(seconds, 2), "peak_rss_mib": round(peak)}
    figures |= {k: md[k].value for k in ("pages_rendered", "pages_unchanged")}
    print(json.dumps(figures), flush=True)  # the last line: the parent's figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--works", type=int, default=100_000)
    ap.add_argument("--scratch", help="parent of the fresh data folder (default: the system temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the data folder")
    ap.add_argument("--_child", choices=("records", "pages"), help=argparse.SUPPRESS)
    ap.add_argument("--_data", help=argparse.SUPPRESS)
    add_smoke_arg(ap, "200 works")
    args = ap.parse_args()
    if args.smoke:
        args.works = 200
    if args._child == "records":
        return _write_records(args.works, args._data)
    if args._child == "pages":
        return _run_pages(args._data)
    data = tempfile.mkdtemp(prefix="bench-pages-memory-", dir=args.scratch)
    me = [sys.executable, str(Path(__file__).resolve())]
    print(f"{cpu_model()}; {args.works:,} works in {data}", flush=True)
    started, runs = machine(), {}
    try:
        subprocess.run([*me, "--works", str(args.works), "--_child", "records", "--_data", data], check=True)
        for name in ("first run", "nothing changed"):
            load = loadavg()
            print(f"{name} (load average {load}): ", end="", flush=True)
            out = subprocess.run(
                [*me, "--_child", "pages", "--_data", data], check=True, capture_output=True, text=True
            )
            lines = out.stdout.strip().splitlines()
            print(lines[-2], flush=True)
            runs[name] = {**json.loads(lines[-1]), "load_before": load}
    finally:
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    record("pages_memory", {"works": args.works, "runs": runs}, started=started, smoke=args.smoke)


if __name__ == "__main__":
    main()
