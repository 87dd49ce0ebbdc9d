"""Frame-build scale benchmark: works/s and peak RSS of the frame build against a bare DuckDB scan.

Usage::

    .venv/bin/python benchmarks/bench_frame.py [--sizes 250000 1000000] [--scratch /tmp/metacan-bench]
                                              [--variants count,arrow] [--repeat-baseline]

For each size N: make (or reuse) the scale input ``<scratch>/works_<N>`` with make_scale_input.py
(real OpenAlex work records under fresh ids, snapshot layout), then run, one after the other in this
benchmark process's lifetime (the machines are noisy, so the ratio is always against a baseline
measured minutes apart on the same parts):

- ``baseline``: ``SELECT count(*) FROM read_json('<parts glob>', format='newline_delimited',
  compression='gzip')`` -- the bare DuckDB read_json scan. This is the ratio's denominator.
- ``arrow`` (optional, ``--variants count,arrow``): ``SELECT * FROM read_json(...)`` pulled as Arrow
  record batches, i.e. every column materialised; reported, not used for the ratio.
- ``frame``: ``openalex_inventory`` + ``canadian_entities``, then ``frame_parts`` over every partition + ``frame``
  (one run each, as ``metacan run`` does) on an ephemeral instance,
  fresh data folder ``<scratch>/run_<N>/data``.

Each stage runs in its own fresh child process (``python bench_frame.py --_stage ...``) so peak memory is
not contaminated by earlier stages. The frame build stages files in a pool of worker processes, so the
child alone is not enough: the parent polls every 0.2 s the RSS (and PSS, shared pages counted once)
summed over the child and all its descendants, and also reads ``ru_maxrss`` from ``os.wait4`` (the
largest single process of the tree). "peak RSS" = max(tree-sum peak, largest process). Matched with the
Dagster step times, the samples also give the peak per asset. Stage seconds are measured inside the
child around the work itself (interpreter start and imports excluded); works/s = N / seconds. Load
average is recorded before and after each stage; the commit measured is recorded too.

Targets: frame works/s >= 0.7 x baseline works/s; frame peak RSS < 2048 MiB at 1,000,000 works
and not above its 250,000 figure. Output: a table per size on stdout and ``benchmarks/out/frame.json`` (one entry
per size, kept from earlier runs for the sizes not run again); ``--smoke``: 2,000 works.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from _common import (
    add_child_args,
    add_smoke_arg,
    code_label,
    git_state,
    loadavg,
    machine,
    mean,
    ratio,
    record,
    result_path,
    run_stage,
    say,
    step_times,
    thin_samples,
    verdict,
    write_child_result,
)

TARGET_RATIO = 0.7
TARGET_RSS_MIB = 2048


# ------------------------------------------------------------------------------------------------
# stages (run inside a child process)
# ------------------------------------------------------------------------------------------------
def _parts_glob(input_dir: Path) -> str:
    return str(input_dir / "data" / "works" / "updated_date=*" / "part_*.gz").replace("'", "''")


def stage_baseline(input_dir: Path, variant: str) -> dict:
    import duckdb

    src = f"read_json('{_parts_glob(input_dir)}', format='newline_delimited', compression='gzip')"
    con = duckdb.connect()
    t0 = time.perf_counter()
    if variant == "count":
        query = f"SELECT count(*) FROM {src}"
        rows = con.execute(query).fetchone()[0]
    elif variant == "arrow":
        query = f"SELECT * FROM {src}"
        rows = 0
        for batch in con.execute(query).to_arrow_reader(50_000):
            rows += batch.num_rows
    else:
        raise ValueError(variant)
    secs = time.perf_counter() - t0
    return {
        "query": query,
        "rows": rows,
        "seconds": secs,
        "duckdb_version": duckdb.__version__,
        "threads": con.execute("SELECT current_setting('threads')").fetchone()[0],
        "memory_limit": con.execute("SELECT current_setting('memory_limit')").fetchone()[0],
    }


def stage_frame(input_dir: Path, data_dir: Path) -> dict:
    import dagster as dg

    from metacan_pipeline.definitions import all_partitions_run_tags, build_resources
    from metacan_pipeline.frame.assets import canadian_entities, frame, frame_parts, openalex_inventory

    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    instance = dg.DagsterInstance.ephemeral()
    t0 = time.perf_counter()
    wall0 = time.time()
    resources = build_resources(str(data_dir), str(input_dir))
    first = dg.materialize([openalex_inventory, canadian_entities], resources=resources, instance=instance)
    result = dg.materialize(
        [frame_parts, frame], resources=resources, instance=instance, tags=all_partitions_run_tags(instance)
    )
    secs = time.perf_counter() - t0
    result_ids = [first.run_id, result.run_id]
    steps = step_times(instance, result_ids)
    meta = {}
    for mat in first.get_asset_materialization_events() + result.get_asset_materialization_events():
        m = mat.materialization
        keep = (
            "dagster/row_count",
            "rows",
            "work_records_read",
            "records_read",
            "routed_works",
            "parts_built",
            "quarantined",
            "works_read",
            "funders",
            "sources",
            "institutions",
            "files_present",
        )
        meta[m.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in m.metadata.items() if k in keep}
    return {
        "success": first.success and result.success,
        "seconds": secs,
        "wall_start": wall0,
        "steps": steps,
        "asset_metadata": meta,
    }


def run_stage_in_child(args: argparse.Namespace) -> None:
    if args._stage == "frame":
        res = stage_frame(Path(args.input), Path(args.data))
    else:
        res = stage_baseline(Path(args.input), args._stage)
    write_child_result(res, args.result)


# ------------------------------------------------------------------------------------------------
# parent: spawn, sample, collect
# ------------------------------------------------------------------------------------------------
def spawn_stage(stage: str, input_dir: Path, data_dir: Path, scratch: Path) -> dict:
    """Run one stage in a fresh child (_common.run_stage); the frame stage also gets each Dagster step's
    seconds and sampled tree peak RSS, and its RSS samples."""
    extra = ["--input", str(input_dir), "--data", str(data_dir)]
    log_path = scratch / f"{input_dir.name}.{stage}.log"  # the child's Dagster/DuckDB output
    res, samples, t0 = run_stage(Path(__file__), stage, stage, scratch, extra, log_path)
    if stage == "frame":
        for st in res.get("steps", {}).values():
            if "start" in st and "end" in st:
                st["seconds"] = st["end"] - st["start"]
                inside = [k for t, k in samples if st["start"] <= t <= st["end"]]
                st["sampled_tree_peak_rss_mib"] = max(inside, default=0) / 1024
        res["rss_samples_mib"] = thin_samples(samples, t0, 400)
    return res


def bench_size(n: int, scratch: Path, variants: list[str], repeat_baseline: bool) -> dict:
    from make_scale_input import make_scale_input

    input_dir = scratch / f"works_{n}"
    data_dir = scratch / f"run_{n}" / "data"
    gen = make_scale_input(n, input_dir)
    out: dict = {
        "works": n,
        "input": gen,
        "machine": machine(),
        "code": git_state(),
        "stages": {},
    }
    order = [v for v in variants if v != "count"]
    stages = ["count"] + order + ["frame"] + (["count"] if repeat_baseline else [])
    for _i, stage in enumerate(stages):
        key = stage if stage not in out["stages"] else f"{stage}_after"
        say(f"[{n}] stage {key} (load {loadavg()}) ...")
        res = spawn_stage(stage, input_dir, data_dir, scratch)
        if stage != "frame" and res["rows"] != n:
            raise SystemExit(f"baseline counted {res['rows']} rows, expected {n}")
        res["works_per_s"] = n / res["seconds"]
        out["stages"][key] = res
        say(
            f"[{n}] stage {key}: {res['seconds']:.1f} s, {res['works_per_s']:.0f} works/s, peak RSS "
            f"{res['peak_rss_mib']:.0f} MiB (largest process {res['ru_maxrss_mib']:.0f}, {res['max_processes']} processes) (load {res['load_before']} -> {res['load_after']})"
        )
    st = out["stages"]
    baseline = mean(st[k]["works_per_s"] for k in ("count", "count_after") if k in st)
    frame = st["frame"]
    out["baseline_works_per_s"] = baseline
    out["frame_works_per_s"] = frame["works_per_s"]
    out["ratio_frame_over_baseline"] = frame["works_per_s"] / baseline
    out["frame_peak_rss_mib"] = frame["peak_rss_mib"]
    out["targets"] = {
        "ratio_min": TARGET_RATIO,
        "frame_rss_max_mib": TARGET_RSS_MIB,
        "ratio_met": out["ratio_frame_over_baseline"] >= TARGET_RATIO,
        "rss_under_2GiB": frame["peak_rss_mib"] < TARGET_RSS_MIB,
    }
    return out


def print_table(r: dict) -> None:
    n = r["works"]
    st = r["stages"]
    print(
        f"\n=== frame build benchmark: {n:,} works ({r['input']['parts']} parts, {r['input']['bytes'] / 2**30:.2f} GiB gzip); "
        f"code {code_label(r['code'])}; {r['machine']['nproc']} cores ({r['machine']['cpu_model']}) ==="
    )
    print(
        f"{'stage':<34}{'seconds':>9}{'works/s':>10}{'vs base':>9}{'peak RSS MiB':>14}{'PSS MiB':>9}{'procs':>6}  load before -> after"
    )
    base = r["baseline_works_per_s"]
    labels = {
        "count": "baseline: read_json count(*)",
        "count_after": "baseline again (after frame)",
        "arrow": "variant: read_json SELECT * Arrow",
        "frame": "frame build (3 assets)",
    }
    for key, s in st.items():
        print(
            f"{labels.get(key, key):<34}{s['seconds']:>9.1f}{s['works_per_s']:>10.0f}{s['works_per_s'] / base:>9.3f}"
            f"{s['peak_rss_mib']:>14.0f}{s['sampled_tree_peak_pss_mib']:>9.0f}{s['max_processes']:>6}  {s['load_before']} -> {s['load_after']}"
        )
    for step, s in st["frame"].get("steps", {}).items():
        if "seconds" in s:
            print(
                f"{'  step ' + step:<34}{s['seconds']:>9.1f}{n / s['seconds']:>10.0f}{'':>9}{s['sampled_tree_peak_rss_mib']:>14.0f}  (sampled)"
            )
    t = r["targets"]
    print(
        "peak RSS = max(largest single process from wait4 ru_maxrss, RSS summed over the stage's process tree sampled every 0.2 s); "
        "PSS = the tree's summed proportional set size (shared pages counted once)"
    )
    print(
        f"ratio frame/baseline = {r['ratio_frame_over_baseline']:.3f} (target >= {TARGET_RATIO}: {verdict(t['ratio_met'])}); "
        f"frame peak RSS = {r['frame_peak_rss_mib']:.0f} MiB (target < {TARGET_RSS_MIB}: {verdict(t['rss_under_2GiB'])})"
    )
    if "rss_vs_smaller" in r:
        print(
            f"frame peak RSS vs {r['rss_vs_smaller']['size']:,} works: {r['rss_vs_smaller']['mib']:.0f} MiB -> "
            f"{r['frame_peak_rss_mib']:.0f} MiB ({verdict(r['rss_vs_smaller']['not_higher'])}: not higher)"
        )
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[250_000, 1_000_000])
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-bench"))
    ap.add_argument("--variants", default="count", help="comma list of baseline variants: count (always), arrow")
    ap.add_argument(
        "--repeat-baseline",
        action="store_true",
        help="run the count baseline again after the frame build; ratio uses the mean",
    )
    add_smoke_arg(ap, "2,000 works")
    add_child_args(ap, ("input", "data"))
    args = ap.parse_args(argv)
    if args._stage:
        run_stage_in_child(args)
        return
    if args.smoke:
        args.sizes = [2_000]
    args.scratch.mkdir(parents=True, exist_ok=True)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    # the sizes of an earlier run, for "peak RSS not above the smaller size's figure"
    earlier = result_path("frame")
    sizes: dict[str, dict] = {} if args.smoke or not earlier.is_file() else json.loads(earlier.read_text())["figures"]
    started = machine()
    for n in args.sizes:
        r = bench_size(n, args.scratch, variants, args.repeat_baseline)
        smaller = [int(k) for k in sizes if int(k) < n]
        if smaller:
            prev = sizes[str(max(smaller))]
            r["rss_vs_smaller"] = {
                "size": prev["works"],
                "mib": prev["frame_peak_rss_mib"],
                "not_higher": r["frame_peak_rss_mib"] <= prev["frame_peak_rss_mib"],
            }
        sizes[str(n)] = r
        print_table(r)
    ratios = {
        f"frame_works_s/baseline@{k}": ratio(r["frame_works_per_s"], r["baseline_works_per_s"])
        for k, r in sizes.items()
    }
    record(
        "frame",
        dict(sorted(sizes.items(), key=lambda kv: int(kv[0]))),
        ratios=ratios,
        started=started,
        smoke=args.smoke,
    )


if __name__ == "__main__":
    main()
