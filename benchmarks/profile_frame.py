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
    args = ap.parse_args()
    from make_scale_input import make_scale_input

    input_dir = args.scratch / f"works_{args.n}"
    make_scale_input(args.n, input_dir)
    data_dir = args.scratch / f"profile_{args.n}" / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)

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
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    prof.dump_stats(out / f"profile_{args.n}.pstats")
    print(f"materialize success={res.success}: {secs:.1f} s under cProfile for {args.n} works")
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(30)
        print(f"\n----- top 30 by {key} -----")
        print("\n".join(s.getvalue().splitlines()[6:40]))


if __name__ == "__main__":
    main()
