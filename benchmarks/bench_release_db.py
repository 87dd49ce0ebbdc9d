"""The release database build alone at a given size, without the rest of the chain. The figure: seconds and peak
RSS per size; the build must stay within DuckDB's 1 GB limit at any size (peak RSS flat as the release grows).

For each ``--works N``: writes the warehouse tables ``build_release`` reads (``pages_records.write_release_inputs``),
``work_records`` (``N`` published records
of ``pages_records.record_chunks``: one real frame row under ids ``W5<9 digits>``, synthetic titles, years, routes,
labels, predictions and machine scores), ``frame`` (the frame row of each record, so the name lists agree) and an
empty ``student_heads``, into ``<scratch>/works_<N>/data`` (kept and reused by the next run: ``--fresh`` writes them
again); then runs ``site.build.build.build_release`` in a fresh child process (``_common.run_stage``: peak RSS of its process
tree, seconds inside the child, blocks written, load before and after). The child also reports a digest per release
table (row count and an order-sensitive hash of every row by ``rowid``, ``release_info.built_at`` left out), so two
builds (before and after a change, another chunk size) can be compared table by table.

Usage (from the checkout to measure; its ``metacan_pipeline`` is imported):
    nice .venv/bin/python benchmarks/bench_release_db.py --works 50000 200000 [--scratch /tmp/metacan-release-db]
         [--chunk-works 25000] [--name after] [--fresh]
``--chunk-works`` is passed to ``build_release`` (works per work_key range; the code before the chunked build has no
such parameter). Figures go to ``benchmarks/out/release_db.json`` (``release_db_<name>.json`` with ``--name``);
``--smoke``: 300 works in ranges of 100. Exits 1 when a build failed (its figures are recorded first).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path

from _common import (
    REPO,
    add_child_args,
    add_smoke_arg,
    code_label,
    git_state,
    machine,
    record,
    run_stage,
    say,
    write_child_result,
)
from pages_records import write_release_inputs

CONTEXT = {"n_codex_labels": 10_348, "gated_heads": 9, "total_heads": 14, "frozen_release": None}


def digests(db: Path) -> dict[str, list]:
    """Per release table: [rows, order-sensitive hash of every row and its rowid] (release_info without built_at;
    facet_codes, whose insert has no ORDER BY and so no fixed row order, without the rowid)."""
    import duckdb

    from metacan_pipeline.tables.site import release_tables

    con = duckdb.connect(str(db), read_only=True, config={"memory_limit": "1GB"})
    try:
        out = {}
        for table in release_tables():
            cols = ", ".join(f'"{c}"' for c in table.schema.names if c != "built_at")
            out[table.name] = list(
                con.execute(
                    f"SELECT count(*), coalesce(bit_xor(hash({'' if table.name == 'facet_codes' else 'rowid, '}{cols})), 0) "
                    f'FROM "{table.name}"'
                ).fetchone()
            )
        return out
    finally:
        con.close()


def stage_child(data: Path, chunk_works: int | None) -> dict:
    from metacan_pipeline.site.build.build import build_release
    from metacan_pipeline.site.query.stored_counts import write_stored_counts
    from metacan_pipeline.storage import MetacanStorage

    storage = MetacanStorage(data_dir=str(data))
    kwargs = {}
    if chunk_works is not None:
        if "chunk_works" not in inspect.signature(build_release).parameters:
            raise SystemExit("--chunk-works: this checkout's build_release has no chunk_works parameter")
        kwargs["chunk_works"] = chunk_works
    t0 = time.perf_counter()
    try:
        built = build_release(storage, dict(CONTEXT), write_stored_counts, **kwargs)
    except Exception as exc:  # the figures of a failed build are the point (peak RSS up to the failure)
        return {"success": False, "seconds": time.perf_counter() - t0, "error": f"{type(exc).__name__}: {exc}"[:600]}
    seconds = time.perf_counter() - t0
    from _common import proc_kib

    build_hwm = (proc_kib("/proc/self/status", "VmHWM") or 0) / 1024  # before the digests read the tables
    return {
        "success": True,
        "seconds": seconds,
        "build_vm_hwm_mib": build_hwm,
        "release_id": built.release_id,
        "row_counts": built.row_counts,
        "database_bytes": built.database.stat().st_size,
        "digests": digests(built.database),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--works", type=int, nargs="+", default=[50_000])
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-release-db"))
    ap.add_argument("--chunk-works", type=int, default=None)
    ap.add_argument("--name", default="")
    ap.add_argument("--fresh", action="store_true", help="write the warehouse tables again")
    add_smoke_arg(ap, "300 works in ranges of 100")
    add_child_args(ap, ("data", "chunk"))
    args = ap.parse_args(argv)
    if args.smoke and not args._stage:
        args.works, args.chunk_works, args.fresh = [300], 100, True
    if args._stage:
        chunk = None if args.chunk in (None, "", "None") else int(args.chunk)
        write_child_result(stage_child(Path(args.data), chunk), args.result)
        return
    out = {"machine": machine(), "code": git_state(), "chunk_works": args.chunk_works, "sizes": {}}
    for n in args.works:
        folder = args.scratch / f"works_{n}"
        data = folder / "data"
        marker = data / ".prepared"
        if args.fresh or not marker.exists():
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
            say(f"writing {n:,} records under {data} ...")
            prep = write_release_inputs(data, n)
            say(
                f"  {prep['works']:,} records, {prep['record_chars'] / prep['works']:.0f} chars a record, {prep['seconds']:.0f} s"
            )
        prep = json.loads(marker.read_text())
        import shutil

        shutil.rmtree(data / "site", ignore_errors=True)  # every build starts from no release
        say(f"build_release at {n:,} works (chunk_works={args.chunk_works}) ...")
        try:
            res, _samples, _t0 = run_stage(
                Path(__file__),
                "build",
                f"release_db_{n}",
                folder,
                ["--data", str(data), "--chunk", str(args.chunk_works)],
                folder / f"build_{args.name or 'run'}.log",
            )
        except SystemExit as exc:
            res = {"success": False, "error": str(exc)}
            log = folder / f"build_{args.name or 'run'}.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            res["log_tail"] = tail
        res["record_chars_mean"] = prep["record_chars"] / prep["works"]
        out["sizes"][str(n)] = res
        m = out["machine"]
        if "peak_rss_mib" in res:
            print(
                f"works {n:>8,}: {res['seconds']:7.1f} s, peak RSS {res['peak_rss_mib']:6.0f} MiB (build alone "
                f"{res.get('build_vm_hwm_mib', 0):.0f}), written "
                f"{res['ru_oublock'] * 512 / 2**20:6.0f} MiB, db {res.get('database_bytes', 0) / 2**20:5.0f} MiB; load "
                f"{res['load_before']} -> {res['load_after']}; {m['cpu_model']}; code {code_label(out['code'])}"
                + ("" if res["success"] else f"\n  FAILED: {res['error']}"),
                flush=True,
            )
        else:
            print(f"works {n:>8,}: FAILED: {res['error']}\n  {' | '.join(res['log_tail'])}", flush=True)
    record("release_db", out, name=args.name, started=out["machine"], smoke=args.smoke)
    failed = [n for n, res in out["sizes"].items() if not res.get("success")]
    if failed:
        raise SystemExit(f"build_release failed at {', '.join(failed)} works (the figures are recorded)")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
