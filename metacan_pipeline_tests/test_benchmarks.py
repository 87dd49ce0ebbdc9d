"""Every benchmark script runs at its smallest size (``--smoke``) and writes its result, so a change that breaks a
benchmark fails ``make test`` (markers ``bench`` and ``slow``; ``make test-fast`` leaves them out).

Each script runs as ``make bench`` runs it: a fresh ``python benchmarks/<script> --smoke`` process, its scratch
folders under the test's temporary folder and its result (``_common.record``) sent there by
``$METACAN_BENCH_OUT``, never into ``benchmarks/out/``. The helpers that are not commands (``site_synth``,
``student_synth``, ``student_inputs``, ``student_stages``, ``pages_records``, ``teacher_loaders``,
``make_scale_input``) run inside the benchmarks that use them; the commands that are not benchmarks
(``audit_demo``, ``audit_figures``, ``profile_frame``, ``rehearsal``) are smoke-tested here too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
#: Not commands: each runs inside the benchmark that imports it.
HELPERS = {
    "_common.py",
    "make_scale_input.py",  # bench_frame, bench_student, profile_frame, rehearsal
    "pages_records.py",  # bench_pages, bench_pages_memory, bench_release_db, bench_records_*
    "site_synth.py",  # bench_site
    "student_inputs.py",  # bench_student
    "student_stages.py",  # bench_student
    "student_synth.py",  # bench_student
    "teacher_loaders.py",  # bench_teacher
}


@dataclass(frozen=True)
class Smoke:
    """How a script runs at its smallest size: its result file under the output folder, the options besides
    ``--smoke`` (``{tmp}`` is the test's temporary folder) and the markers beyond ``bench``."""

    result: str
    args: tuple[str, ...] = ()
    marks: tuple[str, ...] = ()
    ratios: bool = False  # measures against a baseline in the same run: its result holds the ratios
    printed: str = ""  # what the script must print, for a command whose result is what it prints
    smallest: str = "--smoke"  # the option that selects the smallest size ("": the script has one size)


SMOKES = {
    "audit_demo.py": Smoke("", ("--data-dir", "{tmp}/demo"), printed="$ metacan summary", smallest=""),
    "audit_figures.py": Smoke("audit_figures.json"),
    "bench_agreement.py": Smoke("agreement.json", ("--scratch", "{tmp}/scratch")),
    "bench_api.py": Smoke("api.json", ratios=True),
    "bench_card.py": Smoke("card.json", ratios=True),
    "bench_cascade.py": Smoke("cascade.json", ratios=True),
    "bench_coding.py": Smoke("coding.json"),
    "bench_frame.py": Smoke("frame.json", ("--scratch", "{tmp}/scratch"), ratios=True),
    "bench_inter_coder.py": Smoke("inter_coder.json", ratios=True),
    "bench_gemma.py": Smoke("gemma.json", marks=("llm",)),
    "bench_label_store.py": Smoke("label_store.json", ("--scratch", "{tmp}/scratch"), ratios=True),
    "bench_machine_rounds.py": Smoke("machine_rounds.json", ("--scratch", "{tmp}/scratch"), ratios=True),
    "bench_pages.py": Smoke("pages.json", ("--scratch", "{tmp}"), ratios=True),
    "bench_pages_memory.py": Smoke("pages_memory.json", ("--scratch", "{tmp}")),
    "bench_prevalence.py": Smoke("prevalence.json", ("--scratch", "{tmp}/scratch"), ratios=True),
    "bench_records_changed.py": Smoke("records_changed.json", ratios=True),
    "bench_records_check.py": Smoke("records_check.json", ratios=True),
    "bench_release_db.py": Smoke("release_db.json", ("--scratch", "{tmp}/scratch")),
    "bench_score_list.py": Smoke("score_list.json", ("--scratch", "{tmp}/scratch"), ratios=True),
    "bench_site.py": Smoke("site.json", ("--keep", "{tmp}/site"), ratios=True),
    "bench_site_fts.py": Smoke("site_fts.json", ratios=True),
    "bench_student.py": Smoke("student.json", ("--scratch", "{tmp}/scratch"), ratios=True),
    "bench_teacher.py": Smoke("teacher.json", ratios=True),
    "student_backends.py": Smoke("student_backends.json", ratios=True),
    "student_known_items.py": Smoke("student_known_items.json"),
    "student_distill.py": Smoke("student_distill.json", ratios=True),
    "student_rerank.py": Smoke("student_rerank.json", ratios=True),
    "bench_teacher_quality.py": Smoke("teacher_quality.json", marks=("llm",)),
    "profile_frame.py": Smoke("profile_part_2000.pstats", ("--scratch", "{tmp}/scratch")),
    "rehearsal.py": Smoke("rehearsal_2000.json", ("--scratch", "{tmp}/scratch")),
}


def _params():
    """One test per script. Under ``make test`` each is an xdist group of its own (``bench:<script>``), so the two
    workers share them; those that start llama.cpp stay in the ``llm`` group (conftest.pytest_itemcollected)."""
    for script, smoke in sorted(SMOKES.items()):
        # slow too: a subprocess of a few seconds to minutes, so a "not slow" run leaves them out as well
        marks = [pytest.mark.bench, pytest.mark.slow, *(getattr(pytest.mark, m) for m in smoke.marks)]
        if "llm" not in smoke.marks:
            marks.append(pytest.mark.xdist_group(f"bench:{script}"))
        yield pytest.param(script, smoke, id=script.removesuffix(".py"), marks=marks)


def test_every_script_is_smoke_tested_or_a_helper():
    """A new script under benchmarks/ is either smoke-tested here or named a helper."""
    scripts = {p.name for p in BENCHMARKS.glob("*.py")}
    assert scripts - HELPERS - set(SMOKES) == set()
    assert (set(SMOKES) | HELPERS) - scripts == set()


def _env(out: Path) -> dict[str, str]:
    """The test process's environment without the pipeline's settings (a benchmark sets its own), this checkout
    first on the path, and the results sent to ``out``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("METACAN_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(REPO), METACAN_BENCH_OUT=str(out))
    # kept: where the shared data is, and one llama.cpp thread under xdist (conftest.pytest_configure)
    env |= {k: os.environ[k] for k in ("METACAN_SHARED_DIR", "METACAN_LLAMA_THREADS") if k in os.environ}
    return env


@pytest.mark.parametrize(("script", "smoke"), _params())
def test_benchmark_runs_at_its_smallest_size(script: str, smoke: Smoke, tmp_path: Path):
    """``<script> --smoke`` (the only size of a one-size command) exits 0 and writes its result: for a benchmark, ``<benchmark>.json`` with its figures,
    their ratios and the run they were measured in (date, commit, CPU model, load average)."""
    out = tmp_path / "out"
    args = [a.replace("{tmp}", str(tmp_path)) for a in smoke.args]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *filter(None, [smoke.smallest]), *args],
        cwd=REPO,
        env=_env(out),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, (
        f"{script} --smoke exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    if smoke.printed:
        assert smoke.printed in done.stdout
    if not smoke.result:
        return
    path = out / smoke.result
    assert path.is_file(), f"{script} --smoke wrote no {path.name}: {sorted(p.name for p in out.glob('*'))}"
    if path.suffix != ".json":
        return
    doc = json.loads(path.read_text())
    assert doc["smoke"] is True
    assert path.stem.startswith(doc["benchmark"])
    assert doc["figures"]
    assert all(isinstance(v, float) for v in doc["ratios"].values() if v is not None)
    if smoke.ratios:
        assert doc["ratios"], f"{script} measures against a baseline but recorded no ratio"
    run = doc["run"]
    assert len(run["commit"]) == 40
    assert run["cpu_model"] and run["date"] and run["load_at_start"] and run["load_at_end"]
