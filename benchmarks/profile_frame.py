"""Profile one frame part build (cProfile) on the scale input, to see where a worker's time goes.

Usage::

    .venv/bin/python benchmarks/profile_frame.py [N=50000] [--scratch /tmp/metacan-bench] [--smoke]

Makes (or reuses) ``<scratch>/works_<N>`` with make_scale_input.py, builds the Canadian entity lists
from it, then runs :func:`metacan_pipeline.frame.parts.build_part` on its first works part in this
process under cProfile (what one ``frame_parts`` worker process does per file; cProfile cannot see
into the worker pool), writes ``benchmarks/out/profile_part_<N>.pstats`` and prints the top functions
by own time and by cumulative time, plus the CPU seconds of the build (all threads: DuckDB's scan runs
in a prefetch thread). cProfile adds overhead to every Python call, so read shares, not absolute seconds.
``--smoke``: 2,000 works.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import time
from pathlib import Path

from _common import OUT, add_smoke_arg


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=50_000)
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-bench"))
    add_smoke_arg(ap, "2,000 works")
    args = ap.parse_args()
    if args.smoke:
        args.n = 2_000
    import pyarrow as pa
    from make_scale_input import make_scale_input

    from metacan_pipeline.frame.entities import EntityLists, canadian_entity_rows
    from metacan_pipeline.frame.parts import PartJob, build_part
    from metacan_pipeline.openalex.reader import Record, iter_records
    from metacan_pipeline.tables.frame import ENTITY_SCHEMA

    input_dir = args.scratch / f"works_{args.n}"
    make_scale_input(args.n, input_dir)
    out = args.scratch / f"profile_{args.n}"
    shutil.rmtree(out, ignore_errors=True)
    records = (
        r
        for r in iter_records(input_dir, {"funders", "sources", "institutions"})
        if isinstance(r, Record) and r.kind != "W"
    )
    entities = EntityLists.from_table(
        pa.Table.from_pylist(canadian_entity_rows(records, "2026-01-01"), schema=ENTITY_SCHEMA)
    )
    from metacan_pipeline.openalex.inventory import take_inventory

    listed = next(
        r for r in take_inventory(input_dir).present() if r["manifest_status"] == "listed"
    )  # as a snapshot part is read
    part = input_dir / listed["source_file"]
    job = PartJob(
        str(part),
        listed["source_file"],
        listed["partition_key"],
        listed["bytes"],
        listed["mtime_ns"],
        listed["manifest_record_count"],
        "listed",
    )
    prof = cProfile.Profile()
    cpu0, t0 = time.process_time(), time.perf_counter()
    prof.enable()
    row = build_part(job, str(out), entities, "profile", "profile")
    prof.disable()
    print(
        f"build_part({job.source_file}): {time.perf_counter() - t0:.1f} s wall, {time.process_time() - cpu0:.1f} s CPU under "
        f"cProfile; {row['work_records']} works, {row['routed']} routed, read via {row['read_path']}"
    )
    path = OUT / f"profile_part_{args.n}.pstats"
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.dump_stats(path)
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(25)
        print(f"\n----- top 25 by {key} -----")
        print("\n".join(s.getvalue().splitlines()[6:35]))


if __name__ == "__main__":
    main()
