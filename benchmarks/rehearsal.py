"""The rehearsal: the whole chain over a synthetic snapshot of a given size, stage by stage, on this machine.

Usage::

    nice .venv/bin/python benchmarks/rehearsal.py --works 200000 [--scratch /tmp/metacan-rehearsal]
        [--sample 10000] [--works-per-call 25] [--concurrency 8] [--skip pages,audit] [--machines 1 2 4 8 16]

What it does, in order:

1. The snapshot: ``make_scale_input.py`` (real OpenAlex work records of ``../shared/data/openalex`` re-emitted
   under fresh ids, snapshot layout; reused when its manifest is complete) at ``<scratch>/snapshot_<N>``. ``N``
   is the number of *snapshot* works: the frame holds the share of them the admission rule keeps (printed).
2. The teachers: the loopback stub teacher (``metacan_pipeline_tests/stub_teacher/``, latency 0, one worker)
   and a registry ``<scratch>/run_<N>/teachers.toml`` pointing both roles at it: ``gemma`` the census teacher
   (``title_only``, every frame work), ``codex`` the sample teacher (``title_abstract``, the sample), v3 prompt,
   ``--works-per-call`` works a call, ``--concurrency`` calls in flight.
3. The chain, through Dagster, one stage per fresh child process (``dg.materialize`` of the stage's assets and
   their checks on a persistent instance in ``<scratch>/run_<N>/dagster_home``, everything upstream already
   materialized): inventory, frame (parts + merge), sample design, qualification, census labels, sample labels,
   agreement, student, predictions, machine scores, records, pages, release database, audit. ``sample_design``
   gets ``fraction = --sample / sampling frame`` for every stratum (enrichment included), so the sample teacher
   labels about ``--sample`` works (at most a fifth of the frame); ``work_pages`` runs with
   ``fetch_abstracts: false`` (no OpenAlex API here: the pages say the abstract was not fetched).

Per stage it measures (``_common.run_stage``): wall seconds inside the child (interpreter start and imports
excluded), peak RSS of the child's process tree (max of wait4's ``ru_maxrss``, the largest process, and the
tree's RSS sum sampled every 0.2 s), bytes the tree wrote (wait4 ``ru_oublock`` x 512: everything written,
temporary and spilled files included) and the growth of the data folder (apparent sizes of its files before
and after, per top-level folder). The stub teacher is a separate process and is not counted in any stage.

The projection on N machines: a stage is split into the time that parallelises over machines (part builds,
teacher calls, page rendering: each work or file on its own; figures from the Dagster step times) and the time
that does not (the merges, the sample, the student's fit, the quotas, the records, the release database, the
audit draw: one process over whole tables today). T(N) = serial + parallel / N (Amdahl), printed per stage
from the measured seconds, plus a linear extrapolation to ``--project-works`` frame works (seconds per frame
work at this size x that many: an assumption the table states, to be checked against the next size).

Output: the per-stage table on stdout, ``benchmarks/out/rehearsal_<N>.json`` (``rehearsal_<name>.json`` with
``--name``) with every figure, written after every stage, and the stage logs under ``<scratch>/run_<N>/logs/``.
Exits 1 when a stage failed. ``--smoke``: a snapshot of 2,000 works, a sample of 50, 5 works a call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from _common import (
    REPO,
    SHARED_DATA,
    add_child_args,
    add_smoke_arg,
    code_label,
    git_state,
    machine,
    record,
    result_path,
    run_stage,
    say,
    step_times,
    thin_samples,
    write_child_result,
)

#: (stage, assets named by one of their keys; every key of the same definition is selected with it, checks
#: included; how its time splits: "parallel" (over machines), "serial", or "steps" (by Dagster step: the steps
#: named in PARALLEL_STEPS parallelise, the rest do not))
STAGES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("inventory", ("openalex_inventory", "canadian_entities"), "serial"),
    ("frame", ("frame_parts", "frame"), "steps"),
    ("sample_design", ("sample_design",), "serial"),
    ("qualification", ("teacher_qualification",), "parallel"),
    ("labels_census", ("direct_labels_gemma",), "parallel"),
    ("labels_sample", ("direct_labels_codex",), "parallel"),
    ("agreement", ("imported_labels", "teacher_agreement"), "serial"),
    ("student", ("student_heads",), "serial"),
    ("predictions", ("predictions", "prevalence"), "serial"),
    ("machine_scores", ("machine_scores", "label_batches"), "serial"),
    ("records", ("work_records",), "serial"),
    ("pages", ("work_pages",), "parallel"),
    ("release_db", ("release", "site_database"), "serial"),
    ("audit", ("audit_protocol", "audit_sample", "coding_tasks", "validation_report"), "serial"),
)
PARALLEL_STEPS = {"frame_parts"}
WHY = {
    "inventory": "one listing of the snapshot",
    "frame": "part builds (frame_parts) one file per worker on any machine; the merge (frame) reads every part",
    "sample_design": "one pass over the sampling frame",
    "qualification": "teacher calls on the reference set",
    "labels_census": "teacher calls; any work on any endpoint",
    "labels_sample": "teacher calls; any work on any endpoint",
    "agreement": "one pass over both teachers' labels",
    "student": "one fit of every head",
    "predictions": "batched scoring in one process; quotas need every score",
    "machine_scores": "one round's fit and scores",
    "records": "ranges of 50,000 ids, one process per core of this machine (the ranges could go to other machines over a shared warehouse: not done)",
    "pages": "one page per work (rendering is per work; the manifest upsert is not)",
    "release_db": "one DuckDB build of the release",
    "audit": "one draw over the frame",
}


# ------------------------------------------------------------------------------------------------
# the child: one stage through Dagster
# ------------------------------------------------------------------------------------------------
def selected_keys(names: tuple[str, ...]) -> list:
    """Every asset key of the definitions that produce one of ``names``."""
    from metacan_pipeline.definitions import ALL_ASSETS

    keys = []
    for asset in ALL_ASSETS:
        if any(k.to_user_string() in names for k in asset.keys):
            keys += list(asset.keys)
    found = {k.to_user_string() for k in keys}
    missing = set(names) - found
    if missing:
        raise SystemExit(f"no asset named {sorted(missing)} in the definitions")
    return keys


def stage_child(stage: str, data_dir: Path, input_dir: Path, run_config: dict) -> dict:
    import dagster as dg

    from metacan_pipeline.definitions import ALL_ASSETS, ALL_CHECKS, all_partitions_run_tags, build_resources

    names = dict((s, n) for s, n, _ in STAGES)[stage]
    keys = selected_keys(names)
    instance = dg.DagsterInstance.get()  # DAGSTER_HOME: the run's persistent instance
    tags = all_partitions_run_tags(instance) if stage == "frame" else {}
    t0 = time.perf_counter()
    wall0 = time.time()
    result = dg.materialize(
        [*ALL_ASSETS, *ALL_CHECKS],
        selection=dg.AssetSelection.assets(*keys),
        instance=instance,
        resources=build_resources(str(data_dir), str(input_dir)),
        run_config=run_config,
        tags=tags,
        raise_on_error=False,
    )
    secs = time.perf_counter() - t0
    steps = step_times(instance, [result.run_id])
    rows = {}
    for mat in result.get_asset_materialization_events():
        m = mat.materialization
        value = m.metadata.get("dagster/row_count")
        rows[m.asset_key.to_user_string()] = getattr(value, "value", value)
    checks = {
        f"{e.asset_check_evaluation_data.asset_key.to_user_string()}:{e.asset_check_evaluation_data.check_name}": (
            e.asset_check_evaluation_data.passed
        )
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    failed = [e.step_key for e in result.all_events if e.is_step_failure]
    return {
        "success": result.success,
        "failed_steps": failed,
        "seconds": secs,
        "wall_start": wall0,
        "steps": steps,
        "row_counts": rows,
        "checks": checks,
        "run_id": result.run_id,
    }


# ------------------------------------------------------------------------------------------------
# the parent
# ------------------------------------------------------------------------------------------------
def folder_bytes(root: Path) -> dict[str, int]:
    """Apparent size in bytes of every file under each top-level entry of ``root`` (a file: its own size)."""
    out: dict[str, int] = {}
    if not root.exists():
        return out
    for top in root.iterdir():
        total = 0
        if top.is_dir() and not top.is_symlink():
            for dirpath, _dirs, files in os.walk(top):
                for f in files:
                    try:
                        total += os.lstat(os.path.join(dirpath, f)).st_size
                    except OSError:
                        pass
        else:
            try:
                total = top.lstat().st_size
            except OSError:
                pass
        out[top.name] = total
    return out


def registry_text(url: str, model: str, works_per_call: int, concurrency: int) -> str:
    """Both roles on the stub teacher (a small qualification test: the stub's labels are a hash, so it fails
    either way, and its reference set is 50 works as by default)."""
    teachers = (("gemma", "title_only", "all"), ("codex", "title_abstract", "sample"))
    return '[roles]\ncensus = "gemma"\nsample = "codex"\n\n' + "".join(
        f'[teachers.{name}]\nbase_url = "{url}"\nmodel = "{model}"\nrecord_view = "{view}"\ncoverage = "{coverage}"\n'
        f"works_per_call = {works_per_call}\nconcurrency = {concurrency}\n\n"
        for name, view, coverage in teachers
    )


def sampling_frame_size(data_dir: Path) -> int:
    import duckdb

    con = duckdb.connect()
    glob = str(data_dir / "warehouse" / "frame" / "*.parquet")
    return con.execute(f"SELECT count(*) FILTER (in_sampling_frame), count(*) FROM read_parquet('{glob}')").fetchone()


def run_config_for(stage: str, sampling_frame: int, sample: int) -> dict:
    from metacan_pipeline.sampling.design import META_SIGNALS

    if stage == "sample_design":
        fraction = min(1.0, max(sample, 1) / max(sampling_frame, 1))
        enrichment = [{"name": META_SIGNALS.name, "title_pattern": META_SIGNALS.title_pattern, "fraction": fraction}]
        return {"ops": {"sample_design": {"config": {"fraction": fraction, "enrichment": enrichment}}}}
    if stage == "pages":
        return {"ops": {"work_pages": {"config": {"fetch_abstracts": False}}}}
    return {}


def fresh_run_dir(run_dir: Path, resume: bool) -> tuple[Path, Path, Path]:
    """``(data, dagster_home, logs)`` under ``run_dir`` (emptied first unless ``resume``)."""
    from metacan_pipeline.instance import DAGSTER_YAML

    data_dir, home, logs = run_dir / "data", run_dir / "dagster_home", run_dir / "logs"
    if run_dir.exists() and not resume:
        shutil.rmtree(run_dir)
    for d in (data_dir, home, logs):
        d.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(DAGSTER_YAML)
    return data_dir, home, logs


def admitted_templates(scratch: Path) -> list[int]:
    """The source records (indices in ``make_scale_input.work_templates`` order) that the frame admits: a probe
    snapshot holding each record once under id ``W9<index>``, built into a frame by the inventory and frame
    stages; a frame id's digits are its record's index. Cached in ``<scratch>/admitted_templates.json``."""
    from make_scale_input import DEFAULT_SOURCE, ID_PREFIX, make_scale_input, work_templates

    cache = scratch / "admitted_templates.json"
    if cache.exists():
        return json.loads(cache.read_text())
    n = len(work_templates(DEFAULT_SOURCE))
    probe, run_dir = scratch / "probe_snapshot", scratch / "probe_run"
    make_scale_input(n, probe)
    data_dir, home, logs = fresh_run_dir(run_dir, False)
    env = dict(os.environ)
    os.environ.update(DAGSTER_HOME=str(home), METACAN_DATA_DIR=str(data_dir), METACAN_OPENALEX_DIR=str(probe))
    try:
        for stage in ("inventory", "frame"):
            extra = ["--data", str(data_dir), "--input", str(probe), "--config", "{}"]
            res, _, _ = run_stage(Path(__file__), stage, f"probe-{stage}", run_dir, extra, logs / f"{stage}.log", False)
            if not res["success"]:
                raise SystemExit(f"probe frame failed: see {logs}")
    finally:
        os.environ.clear()
        os.environ.update(env)
    import duckdb

    ids = duckdb.sql(f"SELECT id FROM read_parquet('{data_dir}/warehouse/frame/*.parquet')").fetchall()
    prefix = "W" + ID_PREFIX.rsplit("/W", 1)[1]  # short ids: W9<10 digits>
    keep = sorted(int(i[len(prefix) :]) for (i,) in ids if i.startswith(prefix))
    cache.write_text(json.dumps(keep))
    say(f"rehearsal: the frame admits {len(keep)} of {n} source records (probe in {run_dir})")
    return keep


def forget_teacher_labels(data_dir: Path) -> None:
    """Delete the stub teachers' calls, labels and call archives from a run folder kept with ``--resume``, so the
    label stages of a later run (e.g. after a code change) send every work again instead of reusing them."""
    import duckdb

    con = duckdb.connect(str(data_dir / "metacan.duckdb"))
    try:
        for table in ("teacher_labels", "teacher_calls", "teacher_archives"):
            con.execute(f"DELETE FROM {table}")
    finally:
        con.close()
    shutil.rmtree(data_dir / "teacher_archive", ignore_errors=True)


def rehearse(args: argparse.Namespace) -> dict:
    from make_scale_input import make_scale_input

    from metacan_pipeline_tests.stub_teacher.app import DEFAULT_MODEL
    from metacan_pipeline_tests.stub_teacher.process import run_stub

    n = args.works
    scratch = args.scratch.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    keep = admitted_templates(scratch) if args.admitted_only else None
    snapshot_tag = f"{n}_admitted" if keep is not None else f"{n}"
    tag = args.name or snapshot_tag
    input_dir = scratch / f"snapshot_{snapshot_tag}"
    run_dir = scratch / f"run_{tag}"
    data_dir, home, logs = fresh_run_dir(run_dir, args.resume)
    if args.fresh_labels:
        forget_teacher_labels(data_dir)
    skip = {s for s in args.skip.split(",") if s}
    todo = [s for s, _n, _k in STAGES if s not in skip and (not args.only or s in args.only.split(","))]
    json_path = result_path("rehearsal", tag)
    # A resumed run keeps the figures of the stages it does not run again (each stage names the code it ran).
    previous_run = json.loads(json_path.read_text())["figures"] if args.resume and json_path.exists() else {}
    if {"inventory", "frame"} & set(todo) or not previous_run.get("snapshot"):
        t0 = time.perf_counter()
        snapshot = make_scale_input(n, input_dir, procs=args.procs, keep=keep)
        snapshot["seconds_this_run"] = time.perf_counter() - t0
        snapshot["admitted_only"] = keep is not None
        snapshot["source_records_kept"] = len(keep) if keep is not None else None
    else:  # the frame is built: later stages never read the snapshot, which may have been deleted to free disk
        snapshot = previous_run["snapshot"]
        say(f"[{n}] the frame is built and no stage here reads the snapshot: not checking {input_dir}")
    out: dict = {
        "snapshot_works": n,
        "snapshot": snapshot,
        "machine": machine(),
        "code": git_state(),
        "settings": {k: str(v) for k, v in vars(args).items() if not k.startswith("_") and k != "result"},
        "stages": {s: r for s, r in previous_run.get("stages", {}).items() if s not in todo},
    }
    with run_stub(latency_ms=0) as (url, _proc):
        registry = run_dir / "teachers.toml"
        registry.write_text(registry_text(url, DEFAULT_MODEL, args.works_per_call, args.concurrency))
        os.environ.update(
            METACAN_TEACHERS_FILE=str(registry),
            DAGSTER_HOME=str(home),
            METACAN_DATA_DIR=str(data_dir),
            METACAN_OPENALEX_DIR=str(input_dir),
            METACAN_PILOT_DIR=os.environ.get("METACAN_PILOT_DIR") or str(SHARED_DATA / "metacan_pilot"),
        )
        sizes = (0, 0)
        if (data_dir / "warehouse" / "frame").exists():  # a resumed run: the frame is already built
            sizes = sampling_frame_size(data_dir)
            out["frame_works"], out["sampling_frame_works"] = sizes[1], sizes[0]
        for stage in todo:
            config = run_config_for(stage, sizes[0], min(args.sample, max(1, sizes[1] // 5)))
            before = folder_bytes(data_dir)
            say(f"[{n}] stage {stage} ...")
            extra = ["--data", str(data_dir), "--input", str(input_dir), "--config", json.dumps(config)]
            res, samples, st0 = run_stage(
                Path(__file__), stage, stage, run_dir, extra, logs / f"{stage}.log", pss=False
            )
            after = folder_bytes(data_dir)
            res["data_dir_growth_bytes"] = sum(after.values()) - sum(before.values())
            res["data_dir_growth_by_folder"] = {
                k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(after) | set(before))
            }
            res["data_dir_bytes_after"] = sum(after.values())
            res["bytes_written"] = res.pop("ru_oublock", 0) * 512
            for st in res.get("steps", {}).values():
                if "start" in st and "end" in st:
                    st["seconds"] = st["end"] - st["start"]
                    inside = [k for t, k in samples if st["start"] <= t <= st["end"]]
                    st["sampled_tree_peak_rss_mib"] = max(inside, default=0) / 1024
            res["rss_samples_mib"] = thin_samples(samples, st0, 200)
            res["code"] = code_label(git_state())
            res["machine"] = machine()
            out["stages"][stage] = res
            out["stages"] = {s: out["stages"][s] for s, _n, _k in STAGES if s in out["stages"]}
            if stage == "frame":
                sizes = sampling_frame_size(data_dir)
                out["frame_works"], out["sampling_frame_works"] = sizes[1], sizes[0]
            say(
                f"[{n}] stage {stage}: {res['seconds']:.1f} s, peak RSS {res['peak_rss_mib']:.0f} MiB, wrote "
                f"{res['bytes_written'] / 2**20:.0f} MiB, data +{res['data_dir_growth_bytes'] / 2**20:.0f} MiB, "
                f"success {res['success']} (load {res['load_before']} -> {res['load_after']})"
            )
            record("rehearsal", out, name=tag, started=out["machine"], smoke=args.smoke)
            if not res["success"]:
                say(f"[{n}] stage {stage} FAILED at {res['failed_steps']}: see {res['log']}; stopping")
                break
    project(out, args.machines, args.project_works)
    record("rehearsal", out, name=tag, started=out["machine"], smoke=args.smoke)
    return out


def split_seconds(stage: str, kind: str, res: dict) -> tuple[float, float]:
    """(parallel, serial) seconds of a stage's measured time (see the module doc)."""
    secs = res["seconds"]
    if kind == "parallel":
        return secs, 0.0
    if kind == "serial":
        return 0.0, secs
    par = sum(s.get("seconds", 0.0) for k, s in res.get("steps", {}).items() if k in PARALLEL_STEPS)
    return par, secs - par


def project(out: dict, machines: list[int], project_works: int) -> None:
    """T(N) = serial + parallel / N per stage, at this size and extrapolated linearly to ``project_works``."""
    kinds = {s: k for s, _n, k in STAGES}
    frame_n = out.get("frame_works") or 0
    scale = project_works / frame_n if frame_n else 0.0
    rows = {}
    for stage, res in out["stages"].items():
        par, ser = split_seconds(stage, kinds[stage], res)
        rows[stage] = {
            "parallel_s": par,
            "serial_s": ser,
            "why": WHY[stage],
            "at_this_size": {str(m): ser + par / m for m in machines},
            "extrapolated": {str(m): (ser + par / m) * scale for m in machines},
        }
    total = {str(m): sum(r["at_this_size"][str(m)] for r in rows.values()) for m in machines}
    total_x = {str(m): sum(r["extrapolated"][str(m)] for r in rows.values()) for m in machines}
    out["projection"] = {
        "machines": machines,
        "project_works": project_works,
        "scale": scale,
        "stages": rows,
        "total": total,
        "total_extrapolated": total_x,
    }


def print_table(out: dict) -> None:
    m = out["machine"]
    fn = out.get("frame_works")
    print(
        f"\n=== rehearsal: {out['snapshot_works']:,} snapshot works -> frame {fn if fn is None else f'{fn:,}'} works "
        f"(sampling frame {out.get('sampling_frame_works')}); code {code_label(out['code'])}; "
        f"{m['nproc']} cores ({m['cpu_model']}), load at start {m['load_at_start']} ==="
    )
    print(
        f"{'stage':<16}{'ok':>4}{'seconds':>9}{'peak RSS MiB':>13}{'written MiB':>12}{'data +MiB':>10}  "
        f"{'rows (main table)':<28} load before -> after"
    )
    for stage, r in out["stages"].items():
        rows = ", ".join(f"{k}={v}" for k, v in list(r.get("row_counts", {}).items())[:2])
        print(
            f"{stage:<16}{'yes' if r['success'] else 'NO':>4}{r['seconds']:>9.1f}{r['peak_rss_mib']:>13.0f}"
            f"{r['bytes_written'] / 2**20:>12.0f}{r['data_dir_growth_bytes'] / 2**20:>10.0f}  {rows[:28]:<28} "
            f"{r['load_before']} -> {r['load_after']}"
        )
        for step, s in r.get("steps", {}).items():
            if "seconds" in s and len(r["steps"]) > 1:
                print(f"{'  ' + step:<20}{s['seconds']:>9.1f}{s['sampled_tree_peak_rss_mib']:>13.0f}  (sampled)")
    p = out.get("projection")
    if not p:
        return
    ms = p["machines"]
    print(
        "\nprojection: T(N machines) = serial + parallel / N from the seconds above; 'x' columns extrapolate linearly "
        f"to {p['project_works']:,} frame works (x{p['scale']:.1f})"
    )
    head = "".join(f"{'N=' + str(k):>9}" for k in ms) + "".join(f"{'x N=' + str(k):>11}" for k in ms)
    print(f"{'stage':<16}{'par s':>8}{'ser s':>8}{head}  what parallelises")
    for stage, r in p["stages"].items():
        cells = "".join(f"{r['at_this_size'][str(k)]:>9.0f}" for k in ms)
        cells += "".join(f"{r['extrapolated'][str(k)]:>11.0f}" for k in ms)
        print(f"{stage:<16}{r['parallel_s']:>8.0f}{r['serial_s']:>8.0f}{cells}  {r['why']}")
    cells = "".join(f"{p['total'][str(k)]:>9.0f}" for k in ms) + "".join(
        f"{p['total_extrapolated'][str(k)]:>11.0f}" for k in ms
    )
    print(f"{'total':<32}{cells}")
    sys.stdout.flush()


def argument_problem(args: argparse.Namespace) -> str | None:
    """One sentence on the first argument that cannot work, checked before anything is written; None when all can."""
    for name in ("works", "sample", "works_per_call", "concurrency", "procs", "project_works"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}"
    if any(m < 1 for m in args.machines):
        return f"--machines must all be at least 1, got {args.machines}"
    known = {name for name, _, _ in STAGES}
    for option in ("skip", "only"):
        unknown = [s for s in getattr(args, option).split(",") if s.strip() and s.strip() not in known]
        if unknown:
            return f"--{option}: unknown stage(s) {unknown}; the stages are {', '.join(name for name, _, _ in STAGES)}"
    if args.name and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", args.name) or args.name in (".", ".."):
        return f"--name {args.name[:80]!r}: letters, digits, '_', '-' and '.' only (it names a folder that is deleted)"
    if args.scratch.exists() and not args.scratch.is_dir():
        return f"--scratch {args.scratch} is a file, not a folder"
    return None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--works", type=int, default=50_000, help="snapshot works (the frame keeps a share of them)")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-rehearsal"))
    ap.add_argument("--sample", type=int, default=10_000, help="works the sample teacher labels (about)")
    ap.add_argument("--works-per-call", type=int, default=25)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--procs", type=int, default=2, help="processes writing the snapshot")
    ap.add_argument(
        "--admitted-only",
        action="store_true",
        help="re-emit only the source records the frame admits (found by a probe), so the frame holds about --works",
    )
    ap.add_argument("--skip", default="", help="comma list of stages to leave out (e.g. pages)")
    ap.add_argument("--only", default="", help="comma list: run only these stages (with --resume)")
    ap.add_argument("--resume", action="store_true", help="keep the run folder (stages already run stay)")
    ap.add_argument("--name", default="", help="run folder run_<name> and output rehearsal_<name>.json")
    ap.add_argument(
        "--fresh-labels", action="store_true", help="with --resume: forget the teachers' labels first (sent again)"
    )
    ap.add_argument("--machines", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--project-works", type=int, default=4_300_000)
    add_smoke_arg(ap, "a snapshot of 2,000 works, a sample of 50, 5 works a call")
    add_child_args(ap, ("data", "input", "config"))
    args = ap.parse_args(argv)
    if args.smoke and not args._stage:
        args.works, args.sample, args.works_per_call, args.concurrency, args.procs = 2_000, 50, 5, 2, 1
        args.machines = [1, 2]
    if args._stage:
        res = stage_child(args._stage, Path(args.data), Path(args.input), json.loads(args.config))
        write_child_result(res, args.result)
        return
    if problem := argument_problem(args):
        ap.error(problem)
    out = rehearse(args)
    print_table(out)
    failed = [s for s, r in out["stages"].items() if not r.get("success")]
    if failed:
        raise SystemExit(f"stages {', '.join(failed)} failed (the figures are recorded)")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
