"""What every benchmark measures the same way: memory of a process tree, a stage in a fresh child, the machine
and the code measured, and how a figure is set against its baseline.

Importing this module puts this checkout first on ``sys.path`` (and ``benchmarks/`` next), so a benchmark
measures the ``metacan_pipeline`` beside it, not the one an editable install points at.

- Memory, from ``/proc`` (Linux): :func:`proc_kib` reads one ``<field>: <n> kB`` line (``VmRSS``, ``VmHWM``
  of ``status``, ``Pss`` of ``smaps_rollup``); :func:`tree_memory_kib` sums the RSS (and optionally the PSS,
  shared pages counted once) over a process and every live descendant, found from the parent ids in
  ``/proc/*/stat`` (:func:`process_table`, :func:`descendants`).
- CPU: :func:`tree_cpu_seconds` is utime+stime of a process and its live descendants (``/proc/*/stat``,
  clock ticks); :func:`self_cpu_seconds` is this process's own (``getrusage``).
- A stage in a child, :func:`run_stage`: runs ``python <script> --_stage <stage> --result <file> ...`` with
  its output in a log file, polls :func:`tree_memory_kib` of the child every 0.2 s from a thread, and reaps
  the child with ``os.wait4``, whose ``ru_maxrss`` is the largest single process of the tree. The child
  times its own work (interpreter start and imports excluded) and ends with :func:`write_child_result`,
  which adds its own ``VmHWM``. "peak RSS" = max(largest process, sampled tree-sum peak). Load average is
  recorded before and after. A stage is one at a time: nothing else of the benchmark runs meanwhile.
- The machine and the code: :func:`loadavg` (``os.getloadavg``, three figures), :func:`cpu_model` (``lscpu``
  "Model name"), :func:`machine` and :func:`machine_line` for the printed header; :func:`git_state` (the
  commit measured and the pipeline files with local edits) and :func:`git_branch`. :func:`code_tree` unpacks the
  pipeline of another commit (the code before a change) and :func:`use_code` makes a child import it, so one
  benchmark run measures before and after side by side.
- Synthetic titles (:func:`synthetic_title`): 6-18 words drawn from a fixed list of research-title words,
  the same for the page and teacher benchmarks.
- Ratios: a figure is always against a baseline measured in the same benchmark run minutes apart, usually
  before and after (the machine is shared and noisy): :func:`mean` of the baseline runs, :func:`ratio` of a
  figure to its baseline, :func:`verdict` for a target met or missed.
- The result, :func:`record`: every benchmark writes one JSON document, ``benchmarks/out/<benchmark>.json``
  (``<benchmark>_<name>.json`` with ``--name``), holding its figures, their ratios to the same-process baseline,
  and :func:`run_info` (date, commit, CPU model, cores, load average at the start and at the end).
  ``$METACAN_BENCH_OUT`` sends the results to another folder (the smoke tests write to a temporary one).
- The smallest size: every benchmark takes ``--smoke`` (:func:`add_smoke_arg`), its smallest inputs, which the
  smoke tests (``metacan_pipeline_tests/test_benchmarks.py``) run inside ``make test`` so a benchmark cannot rot.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: The real records and the pilot beside the checkout (``../shared/data``, as the tests find them);
#: ``$METACAN_SHARED_DIR`` names another ``shared`` folder.
SHARED_DATA = Path(os.environ.get("METACAN_SHARED_DIR") or REPO.parent / "shared") / "data"
#: Where every benchmark writes its result (:func:`record`); ``$METACAN_BENCH_OUT`` overrides it.
OUT = Path(os.environ.get("METACAN_BENCH_OUT") or HERE / "out")
for _p in (str(HERE), str(REPO)):  # REPO ends first: this checkout's metacan_pipeline
    if _p in sys.path:
        sys.path.remove(_p)
    sys.path.insert(0, _p)

_TICK = os.sysconf("SC_CLK_TCK")
_TITLE_WORDS = (
    "reporting quality of randomized trials in Canadian journals data sharing peer review reproducibility "
    "soil bacteria Alberta cohort study of diabetes outcomes Ontario preprints retractions citation analysis "
    "nursing workforce survey machine learning for crop yield prediction open access mandates"
).split()


def say(*a) -> None:
    """A progress line on stderr (stdout holds the figures)."""
    print(*a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# memory and CPU of a process tree
# ------------------------------------------------------------------------------------------------
def proc_kib(path: str, field: str) -> int | None:
    """A ``<field>: <n> kB`` value of a /proc file (``status``, ``smaps_rollup``), or None if unreadable."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def process_table() -> dict[int, tuple[int, float]]:
    """Every live process: pid -> (parent pid, utime+stime seconds), from /proc/*/stat."""
    out: dict[int, tuple[int, float]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
            out[int(d)] = (int(f[1]), (int(f[11]) + int(f[12])) / _TICK)
        except (OSError, IndexError, ValueError):
            continue
    return out


def descendants(pid: int, table: dict[int, tuple[int, float]] | None = None) -> list[int]:
    """Every live descendant of ``pid``."""
    children: dict[int, list[int]] = {}
    for p, (ppid, _) in (process_table() if table is None else table).items():
        children.setdefault(ppid, []).append(p)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def tree_memory_kib(pid: int, pss: bool = True) -> tuple[int, int, int, int] | None:
    """(RSS of pid, summed RSS of pid and all its descendants, number of descendants, summed PSS or 0) in KiB;
    None once pid is gone. PSS reads every process's smaps_rollup, dearer than RSS: ``pss=False`` skips it."""
    own = proc_kib(f"/proc/{pid}/status", "VmRSS")
    if own is None:
        return None
    kids = descendants(pid)
    tree_pss = sum(proc_kib(f"/proc/{p}/smaps_rollup", "Pss") or 0 for p in [pid, *kids]) if pss else 0
    return own, own + sum(proc_kib(f"/proc/{k}/status", "VmRSS") or 0 for k in kids), len(kids), tree_pss


def tree_cpu_seconds(pid: int) -> float:
    """utime+stime in seconds of ``pid`` and its live descendants."""
    table = process_table()
    return sum(table.get(p, (0, 0.0))[1] for p in [pid, *descendants(pid, table)])


def self_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ------------------------------------------------------------------------------------------------
# a stage in a fresh child process
# ------------------------------------------------------------------------------------------------
def add_child_args(ap: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """The hidden flags the parent passes to a child stage (``--_stage``, ``--result`` and ``names``)."""
    for a in ("_stage", "result", *names):
        ap.add_argument(f"--{a}", help=argparse.SUPPRESS)


def write_child_result(res: dict, result_path: str) -> None:
    """In the child: its result as JSON, with its own peak RSS (``VmHWM``, KiB) for the parent."""
    res["vm_hwm_kib"] = proc_kib("/proc/self/status", "VmHWM") or -1
    Path(result_path).write_text(json.dumps(res, default=str))


def step_times(instance, run_ids: list[str]) -> dict[str, dict]:
    """Per Dagster step of the runs ``run_ids``: its ``start`` and ``end`` timestamps and its ``status``
    (``STEP_SUCCESS`` or ``STEP_FAILURE``), from the instance's event log."""
    steps: dict[str, dict] = {}
    for entry in (e for rid in run_ids for e in instance.all_logs(rid)):
        ev = entry.dagster_event
        if ev is None or not ev.step_key:
            continue
        if ev.event_type_value == "STEP_START":
            steps.setdefault(ev.step_key, {})["start"] = entry.timestamp
        elif ev.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
            steps.setdefault(ev.step_key, {}).update(end=entry.timestamp, status=ev.event_type_value)
    return steps


def thin_samples(samples: list[tuple[float, int]], t0: float, most: int) -> list[tuple[float, int]]:
    """About ``most`` of the (time, KiB) samples as (seconds since t0, MiB)."""
    return [(round(t - t0, 1), round(k / 1024)) for t, k in samples[:: max(1, len(samples) // most)]]


def run_stage(
    script: Path, stage: str, key: str, scratch: Path, extra: list[str], log_path: Path, pss: bool = True
) -> tuple[dict, list[tuple[float, int]], float]:
    """Run ``script --_stage stage`` in a fresh child, sampling its process tree; returns (the child's result
    plus ``peak_rss_mib``, ``ru_maxrss_mib``, sampled peaks, load and CPU; the (time, tree RSS KiB) samples;
    the start time). Raises SystemExit (naming the log) when the child fails."""
    result_file = scratch / f".stage-{key}-{os.getpid()}.json"
    result_file.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(script).resolve()), "--_stage", stage, "--result", str(result_file), *extra]
    load_before = loadavg()
    t0 = time.time()
    samples: list[tuple[float, int]] = []  # (time, RSS summed over the child's process tree)
    peak = {"own": 0, "pss": 0, "procs": 1}
    done = threading.Event()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT)

        def sampler() -> None:
            while not done.is_set():
                got = tree_memory_kib(proc.pid, pss)
                if got is not None:
                    samples.append((time.time(), got[1]))
                    peak["own"], peak["pss"] = max(peak["own"], got[0]), max(peak["pss"], got[3])
                    peak["procs"] = max(peak["procs"], 1 + got[2])
                done.wait(0.2)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        _, status, rusage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        th.join()
    if proc.returncode != 0 or not result_file.exists():
        raise SystemExit(f"stage {key} failed with exit code {proc.returncode} (log: {log_path}): {' '.join(cmd)}")
    res = json.loads(result_file.read_text())
    result_file.unlink()
    res.update(
        {
            "stage": stage,
            "log": str(log_path),
            "wall_seconds_incl_startup": time.time() - t0,
            # ru_maxrss from wait4 = the largest single process among the child and its waited-for descendants
            "ru_maxrss_mib": rusage.ru_maxrss / 1024,  # Linux: KiB
            "vm_hwm_mib": res.pop("vm_hwm_kib") / 1024,  # the child process alone
            "sampled_own_peak_rss_mib": peak["own"] / 1024,
            # peak of the RSS summed over the child and all its live descendants (worker processes), 0.2 s sampling
            "sampled_tree_peak_rss_mib": max((k for _, k in samples), default=0) / 1024,
            "max_processes": peak["procs"],
            "load_before": load_before,
            "load_after": loadavg(),
            "user_cpu_seconds": rusage.ru_utime,
            "sys_cpu_seconds": rusage.ru_stime,
            # blocks (512 bytes) the child and its waited-for descendants caused to be written to storage
            "ru_oublock": rusage.ru_oublock,
        }
    )
    if pss:
        res["sampled_tree_peak_pss_mib"] = peak["pss"] / 1024  # same, counting shared pages once
    res["peak_rss_mib"] = max(res["ru_maxrss_mib"], res["sampled_tree_peak_rss_mib"])
    return res, samples, t0


# ------------------------------------------------------------------------------------------------
# the machine and the code measured
# ------------------------------------------------------------------------------------------------
def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@functools.cache
def cpu_model() -> str:
    """The CPU's "Model name" as lscpu prints it ("unknown" without lscpu)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return next(
        (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Model name")), "unknown"
    )


def machine() -> dict:
    """Cores, CPU model and load now (the ``machine`` entry of a benchmark's JSON)."""
    return {"nproc": os.cpu_count(), "cpu_model": cpu_model(), "load_at_start": loadavg()}


def machine_line() -> str:
    """``<n> CPUs (<model>), load <1 5 15 min>`` for a printed header."""
    return f"{os.cpu_count()} CPUs ({cpu_model()}), load {loadavg()}"


def _git(*a: str) -> str:
    try:
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_state() -> dict:
    """The commit measured (the pipeline is imported from this checkout) and whether it had local edits."""
    return {
        "head": _git("rev-parse", "HEAD"),
        "dirty_pipeline_files": _git("status", "--short", "--", "metacan_pipeline").splitlines(),
    }


def git_branch() -> str:
    return _git("rev-parse", "--abbrev-ref", "HEAD")


def code_tree(rev: str, scratch: Path) -> Path:
    """The ``metacan_pipeline`` package of commit ``rev`` of this repository (``git archive``), unpacked once under
    ``<scratch>/code-<12 hex of the commit>``; returns that folder (pass it to a child, which calls :func:`use_code`).
    Raises SystemExit when ``rev`` is not a commit here."""
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    if not commit:
        raise SystemExit(f"{rev!r} is not a commit of {REPO}")
    folder = scratch / f"code-{commit[:12]}"
    if not (folder / "metacan_pipeline" / "__init__.py").exists():
        folder.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", commit, "metacan_pipeline"], cwd=REPO, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def use_code(folder: str | None) -> None:
    """In a child, before anything imports ``metacan_pipeline``: import it from ``folder`` (a :func:`code_tree`)
    instead of this checkout; None keeps this checkout."""
    if folder:
        sys.path.insert(0, str(folder))


def code_label(code: dict) -> str:
    """``<short commit>`` plus `` +local edits`` when pipeline files had edits (for a printed header)."""
    return f"{code['head'][:7]}{' +local edits' if code['dirty_pipeline_files'] else ''}"


# ------------------------------------------------------------------------------------------------
# figures against their baseline
# ------------------------------------------------------------------------------------------------
def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def ratio(figure: float | None, baseline: float | None) -> float | None:
    """``figure / baseline`` (rounded to 3 decimals), None when either is missing or the baseline is 0."""
    if figure is None or not baseline:
        return None
    return round(figure / baseline, 3)


def verdict(ok: bool, met: str = "MET", missed: str = "MISSED") -> str:
    return met if ok else missed


def synthetic_title(rng) -> str:
    """6-18 words of the title word list, drawn with ``rng`` (a ``random.Random``), capitalised."""
    return " ".join(rng.choices(_TITLE_WORDS, k=rng.randint(6, 18))).capitalize()


def write_json(path: Path, doc: dict, indent: int = 2) -> None:
    """A benchmark's figures as JSON (folder made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=indent, default=str))


# ------------------------------------------------------------------------------------------------
# the result of a benchmark run, in one place
# ------------------------------------------------------------------------------------------------
def add_smoke_arg(ap: argparse.ArgumentParser, smallest: str) -> None:
    """``--smoke``: the benchmark at its smallest size (``smallest`` says what that is, for ``--help``)."""
    ap.add_argument(
        "--smoke", action="store_true", help=f"the smallest size ({smallest}): proves it runs, measures nothing"
    )


def run_info(started: dict | None = None) -> dict:
    """What every figure is recorded with: the date (UTC), the commit and branch measured (and the pipeline files
    with local edits), the CPU model, the cores and the load average (``load_at_start`` from ``started``, an
    earlier :func:`run_info`, and ``load_at_end`` now)."""
    code = git_state()
    now = loadavg()
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": code["head"],
        "branch": git_branch(),
        "dirty_pipeline_files": code["dirty_pipeline_files"],
        "cpu_model": cpu_model(),
        "nproc": os.cpu_count(),
        "load_at_start": (started or {}).get("load_at_start", now),
        "load_at_end": now,
        "python": sys.version.split()[0],
    }


def result_path(benchmark: str, name: str = "") -> Path:
    """``<OUT>/<benchmark>.json``, or ``<OUT>/<benchmark>_<name>.json`` for a named run (before/after a change)."""
    return OUT / f"{benchmark}{'_' + name if name else ''}.json"


def record(
    benchmark: str,
    figures,
    *,
    ratios: dict[str, float | None] | None = None,
    name: str = "",
    started: dict | None = None,
    smoke: bool = False,
) -> Path:
    """Write a benchmark's result to :func:`result_path` and say where: ``{"benchmark", "run": run_info(),
    "smoke", "ratios", "figures"}``. ``ratios`` are the headline figures against their same-process baseline
    (``figure / baseline``, named ``<figure>/<baseline>``; which side of 1 is better depends on the figure:
    seconds and bytes want below 1, rates above);
    ``figures`` is everything the benchmark measured. A ``--smoke`` run is marked so: its figures measure nothing."""
    path = result_path(benchmark, name)
    doc = {
        "benchmark": benchmark,
        "run": run_info(started),
        "smoke": smoke,
        "ratios": ratios or {},
        "figures": figures,
    }
    write_json(path, doc)
    say(f"wrote {path}")
    return path
