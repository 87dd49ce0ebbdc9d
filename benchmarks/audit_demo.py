"""The audit study end to end on the real frame: ``metacan run`` over the default
input folders (``../shared/data/openalex`` and ``openalex_more``), the pilot's frame1k verdicts recorded as the MACHINE
adjudicator ``machine-adjudicator:frame1k`` (``metacan coding import-adjudicator frame1k``), ``metacan run`` again so
the validation report reads them, then ``metacan summary`` (its audit study section: protocol, sample per stratum,
human-coded works, the adjudicator's codes in the sample, the gate per head).

Teachers: by default both registry teachers answer from the loopback STUB teacher (labels from a hash of the id:
the teacher and classifier figures mean nothing, the audit study's machinery is what runs), and abstracts come from
the loopback OpenAlex stub, so the demonstration takes minutes on a shared 2-core machine. ``--embedded`` uses the
packaged registry (the embedded llama.cpp Gemma of ``make run``) instead: real labels, much slower.

No human code is made: the frame1k verdicts stand in for coders as a machine adjudicator only, and the human gate
stays "not passed: no coded works" whatever they say.

    .venv/bin/python benchmarks/audit_demo.py --data-dir /tmp/audit-demo
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from _common import REPO, SHARED_DATA

CLI = ("-c", "from metacan_pipeline.cli import app; app()")


def metacan(env: dict[str, str], *args: str) -> tuple[str, float]:
    """Run ``metacan <args>`` in a subprocess (the registry is read when the definitions load); its stdout and the
    wall time. Exits naming the command when it fails."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, *CLI, *args], cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - t0
    if done.returncode != 0:
        sys.exit(f"metacan {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="Output folder (a new or an earlier demo's).")
    parser.add_argument("--embedded", action="store_true", help="Label with the embedded llama.cpp teacher.")
    opts = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("METACAN_", "DAGSTER_"))}
    env.update(
        METACAN_DATA_DIR=str(opts.data_dir / "data"),
        METACAN_OPENALEX_DIR=os.pathsep.join(str(SHARED_DATA / d) for d in ("openalex", "openalex_more")),
        METACAN_PILOT_DIR=str(SHARED_DATA / "metacan_pilot"),
        PYTHONPATH=str(REPO),
    )
    with ExitStack() as stack:
        if not opts.embedded:
            from metacan_pipeline_tests.openalex_stub import StubOpenAlex, real_works
            from metacan_pipeline_tests.stub_teacher.app import DEFAULT_MODEL
            from metacan_pipeline_tests.stub_teacher.process import run_stub

            url, _ = stack.enter_context(run_stub())
            api = StubOpenAlex(real_works())
            stack.callback(api.shutdown)
            registry = opts.data_dir / "teachers.toml"
            registry.parent.mkdir(parents=True, exist_ok=True)
            registry.write_text(
                "".join(
                    f'[teachers.{name}]\nbase_url = "{url}"\nmodel = "{DEFAULT_MODEL}"\nrecord_view = "{view}"\n'
                    f'coverage = "{coverage}"\nworks_per_call = 5\n\n'
                    for name, view, coverage in (("gemma", "title_only", "all"), ("codex", "title_abstract", "sample"))
                )
            )
            env.update(METACAN_TEACHERS_FILE=str(registry), METACAN_OPENALEX_API_URL=api.base_url)
        first, t_first = metacan(env, "run")
        ran = next((line for line in first.splitlines() if line.startswith("Run ")), "")
        print(f"$ metacan run   # {t_first:.0f} s\n{ran}")
        imported, _ = metacan(env, "coding", "import-adjudicator", "frame1k")
        print(f"$ metacan coding import-adjudicator frame1k\n{imported.strip()}")
        _, t_second = metacan(env, "run")
        print(f"$ metacan run   # again, {t_second:.0f} s: validation_report reads the machine codes")
        summary, _ = metacan(env, "summary")
        lines = summary.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("Audit study:")), len(lines))
        end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
        print("$ metacan summary   # its audit study section\n" + ("\n".join(lines[start:end]) or "(none)"))


if __name__ == "__main__":
    main()
