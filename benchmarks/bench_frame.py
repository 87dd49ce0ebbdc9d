"""Frame-build scale benchmark: works/s and peak RSS of the frame build against a bare DuckDB scan.

Usage::

    .venv/bin/python benchmarks/bench_frame.py [--sizes 250000 1000000] [--scratch /tmp/metacan-bench]
                                              [--variants count,arrow] [--repeat-baseline]

For each size N: make (or reuse) the scale input ``<scratch>/works_<N>`` with make_scale_input.py
(real OpenAlex work records under fresh ids, snapshot layout), then run, one after the other in this
benchmark process's lifetime (the machines are noisy, so the ratio is always against a baseline
measured minutes apart on the same parts):

- ``baseline``: ``SELECT count(*) FROM read_json('<parts glob>', format='newline_delimited',
  compression='gzip')`` -- the issue's "bare DuckDB read_json scan". This is the ratio's denominator.
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

Targets (issue): frame works/s >= 0.7 x baseline works/s; frame peak RSS < 2048 MiB at 1,000,000 works
and not above its 250,000 figure. Output: a table per size on stdout and ``benchmarks/out/frame_<N>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
TARGET_RATIO = 0.7
TARGET_RSS_MIB = 2048


# ------------------------------------------------------------------------------------------------
# stages (run inside a child process)
# ------------------------------------------------------------------------------------------------
def _parts_glob(input_dir: Path) -> str:
    return str(input_dir / "data" / "works" / "updated_date=*" / "part_*.gz").replace("'", "''")


def _proc_kib(path: str, field: str) -> int | None:
    """A ``<field>: <n> kB`` value of a /proc file (``status``, ``smaps_rollup``), or None if unreadable."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


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
    sys.path.insert(0, str(REPO))
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
    steps: dict[str, dict] = {}
    for entry in (e for rid in result_ids for e in instance.all_logs(rid)):
        ev = entry.dagster_event
        if ev is None or not ev.step_key:
            continue
        if ev.event_type_value == "STEP_START":
            steps.setdefault(ev.step_key, {})["start"] = entry.timestamp
        elif ev.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
            steps.setdefault(ev.step_key, {})["end"] = entry.timestamp
            steps[ev.step_key]["status"] = ev.event_type_value
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
    res["vm_hwm_kib"] = _proc_kib("/proc/self/status", "VmHWM") or -1
    Path(args.result).write_text(json.dumps(res, default=str))


# ------------------------------------------------------------------------------------------------
# parent: spawn, sample, collect
# ------------------------------------------------------------------------------------------------
def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc/*/stat parent ids)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _tree_rss_kib(pid: int) -> tuple[int, int, int, int] | None:
    """(RSS of pid, summed RSS of pid and all its descendants, number of descendants, summed PSS) in KiB."""
    own = _proc_kib(f"/proc/{pid}/status", "VmRSS")
    if own is None:
        return None
    kids = _descendants(pid)
    pss = sum(_proc_kib(f"/proc/{p}/smaps_rollup", "Pss") or 0 for p in [pid, *kids])
    return own, own + sum(_proc_kib(f"/proc/{k}/status", "VmRSS") or 0 for k in kids), len(kids), pss


def spawn_stage(stage: str, input_dir: Path, data_dir: Path, scratch: Path) -> dict:
    """Run one stage in a fresh child; returns its result plus ru_maxrss, sampled RSS and load."""
    result_file = scratch / f".stage-{stage}-{os.getpid()}.json"
    result_file.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--_stage",
        stage,
        "--input",
        str(input_dir),
        "--data",
        str(data_dir),
        "--result",
        str(result_file),
    ]
    load_before = _loadavg()
    t0 = time.time()
    log_path = scratch / f"{input_dir.name}.{stage}.log"  # the child's Dagster/DuckDB output
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT)
    samples: list[tuple[float, int]] = []  # (time, RSS summed over the child's process tree)
    own_peak = [0]
    pss_peak = [0]
    max_procs = [1]
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            got = _tree_rss_kib(proc.pid)
            if got is not None:
                samples.append((time.time(), got[1]))
                own_peak[0] = max(own_peak[0], got[0])
                pss_peak[0] = max(pss_peak[0], got[3])
                max_procs[0] = max(max_procs[0], 1 + got[2])
            done.wait(0.2)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    _, status, rusage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    th.join()
    log.close()
    wall = time.time() - t0
    if proc.returncode != 0 or not result_file.exists():
        raise SystemExit(f"stage {stage} failed with exit code {proc.returncode} (log: {log_path}): {' '.join(cmd)}")
    res = json.loads(result_file.read_text())
    result_file.unlink()
    res.update(
        {
            "stage": stage,
            "log": str(log_path),
            "wall_seconds_incl_startup": wall,
            # ru_maxrss from wait4 = the largest single process among the child and its waited-for descendants
            "ru_maxrss_mib": rusage.ru_maxrss / 1024,  # Linux: KiB
            "vm_hwm_mib": res.pop("vm_hwm_kib") / 1024,  # the child process alone
            "sampled_own_peak_rss_mib": own_peak[0] / 1024,
            # peak of the RSS summed over the child and all its live descendants (worker processes), 0.2 s sampling
            "sampled_tree_peak_rss_mib": max((k for _, k in samples), default=0) / 1024,
            "sampled_tree_peak_pss_mib": pss_peak[0] / 1024,  # same, counting shared pages once
            "max_processes": max_procs[0],
            "load_before": load_before,
            "load_after": _loadavg(),
            "user_cpu_seconds": rusage.ru_utime,
            "sys_cpu_seconds": rusage.ru_stime,
        }
    )
    if stage == "frame":
        for _step, st in res.get("steps", {}).items():
            if "start" in st and "end" in st:
                st["seconds"] = st["end"] - st["start"]
                inside = [k for t, k in samples if st["start"] <= t <= st["end"]]
                st["sampled_tree_peak_rss_mib"] = max(inside, default=0) / 1024
        res["rss_samples_mib"] = [
            (round(t - t0, 1), round(k / 1024)) for t, k in samples[:: max(1, len(samples) // 400)]
        ]
    return res


def _git_state() -> dict:
    """The commit measured (the frame build is imported from this checkout) and whether it had local edits."""

    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return ""

    return {
        "head": git("rev-parse", "HEAD"),
        "dirty_pipeline_files": git("status", "--short", "--", "metacan_pipeline").splitlines(),
    }


def bench_size(n: int, scratch: Path, variants: list[str], repeat_baseline: bool) -> dict:
    sys.path.insert(0, str(HERE))
    from make_scale_input import make_scale_input

    input_dir = scratch / f"works_{n}"
    data_dir = scratch / f"run_{n}" / "data"
    gen = make_scale_input(n, input_dir)
    out: dict = {
        "works": n,
        "input": gen,
        "machine": {"nproc": os.cpu_count(), "load_at_start": _loadavg()},
        "code": _git_state(),
        "stages": {},
    }
    order = [v for v in variants if v != "count"]
    stages = ["count"] + order + ["frame"] + (["count"] if repeat_baseline else [])
    for _i, stage in enumerate(stages):
        key = stage if stage not in out["stages"] else f"{stage}_after"
        print(f"[{n}] stage {key} (load {_loadavg()}) ...", file=sys.stderr, flush=True)
        res = spawn_stage(stage, input_dir, data_dir, scratch)
        if stage != "frame" and res["rows"] != n:
            raise SystemExit(f"baseline counted {res['rows']} rows, expected {n}")
        res["works_per_s"] = n / res["seconds"]
        res["peak_rss_mib"] = max(res["ru_maxrss_mib"], res["sampled_tree_peak_rss_mib"])
        out["stages"][key] = res
        print(
            f"[{n}] stage {key}: {res['seconds']:.1f} s, {res['works_per_s']:.0f} works/s, peak RSS "
            f"{res['peak_rss_mib']:.0f} MiB (largest process {res['ru_maxrss_mib']:.0f}, {res['max_processes']} processes) (load {res['load_before']} -> {res['load_after']})",
            file=sys.stderr,
            flush=True,
        )
    st = out["stages"]
    base_runs = [st["count"]["works_per_s"]] + ([st["count_after"]["works_per_s"]] if "count_after" in st else [])
    baseline = sum(base_runs) / len(base_runs)
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
        f"code {r['code']['head'][:7]}{' +local edits' if r['code']['dirty_pipeline_files'] else ''} ==="
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
        f"ratio frame/baseline = {r['ratio_frame_over_baseline']:.3f} (target >= {TARGET_RATIO}: {'MET' if t['ratio_met'] else 'MISSED'}); "
        f"frame peak RSS = {r['frame_peak_rss_mib']:.0f} MiB (target < {TARGET_RSS_MIB}: {'MET' if t['rss_under_2GiB'] else 'MISSED'})"
    )
    if "rss_vs_smaller" in r:
        print(
            f"frame peak RSS vs {r['rss_vs_smaller']['size']:,} works: {r['rss_vs_smaller']['mib']:.0f} MiB -> "
            f"{r['frame_peak_rss_mib']:.0f} MiB ({'MET' if r['rss_vs_smaller']['not_higher'] else 'MISSED'}: not higher)"
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
    ap.add_argument("--_stage", help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._stage:
        run_stage_in_child(args)
        return
    args.scratch.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for n in args.sizes:
        r = bench_size(n, args.scratch, variants, args.repeat_baseline)
        smaller = sorted(p for p in OUT.glob("frame_*.json") if int(p.stem.split("_")[1]) < n)
        if smaller:
            prev = json.loads(max(smaller, key=lambda p: int(p.stem.split("_")[1])).read_text())
            r["rss_vs_smaller"] = {
                "size": prev["works"],
                "mib": prev["frame_peak_rss_mib"],
                "not_higher": r["frame_peak_rss_mib"] <= prev["frame_peak_rss_mib"],
            }
        (OUT / f"frame_{n}.json").write_text(json.dumps(r, indent=2, default=str))
        print_table(r)
        print(f"wrote {OUT / f'frame_{n}.json'}")


if __name__ == "__main__":
    main()
