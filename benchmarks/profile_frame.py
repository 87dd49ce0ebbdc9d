"""Profile the frame build (cProfile) on a small scale input, to see where its time goes.

Usage::

    .venv/bin/python benchmarks/profile_frame.py [N=50000] [--scratch /tmp/metacan-bench]

Makes (or reuses) ``<scratch>/works_<N>`` with make_scale_input.py, materializes
``openalex_works``, ``canadian_entities`` and ``frame`` under cProfile in this process, writes
``benchmarks/out/profile_<N>.pstats`` and prints the top functions by own time and by cumulative time.
cProfile adds overhead to every Python call (roughly 1.5-2x here), so read shares, not absolute seconds.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=50_000)
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-bench"))
    ap.add_argument("--stage-file", action="store_true",
                    help="profile metacan_pipeline.openalex.staging.stage_file on the first works part, in this process "
                         "(the work a staging worker process does; cProfile cannot see into the worker pool)")
    args = ap.parse_args()
    from make_scale_input import make_scale_input

    input_dir = args.scratch / f"works_{args.n}"
    make_scale_input(args.n, input_dir)
    data_dir = args.scratch / f"profile_{args.n}" / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    if args.stage_file:
        from metacan_pipeline.openalex.staging import stage_file

        part = sorted((input_dir / "data" / "works").glob("updated_date=*/part_*.gz"))[0]
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        staged = stage_file(str(part), str(input_dir), str(data_dir), 0)
        prof.disable()
        secs = time.perf_counter() - t0
        print(f"stage_file({part.name}): {secs:.1f} s under cProfile, counts {dict(staged.counts)}, fallback {staged.fallback_reason}")
        _report(prof, HERE / "out" / f"profile_stage_file_{args.n}.pstats")
        return

    import dagster as dg

    from metacan_pipeline.definitions import build_resources
    from metacan_pipeline.frame.assets import canadian_entities, frame, openalex_works

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    res = dg.materialize([openalex_works, canadian_entities, frame], resources=build_resources(str(data_dir), str(input_dir)),
                         instance=dg.DagsterInstance.ephemeral())
    prof.disable()
    secs = time.perf_counter() - t0
    print(f"materialize success={res.success}: {secs:.1f} s under cProfile for {args.n} works "
          f"(worker processes, if any, are not profiled: use --stage-file)")
    _report(prof, HERE / "out" / f"profile_{args.n}.pstats")


def _report(prof: cProfile.Profile, path: Path) -> None:
    path.parent.mkdir(exist_ok=True)
    prof.dump_stats(path)
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(30)
        print(f"\n----- top 30 by {key} -----")
        print("\n".join(s.getvalue().splitlines()[6:40]))


if __name__ == "__main__":
    main()
