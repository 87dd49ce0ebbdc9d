"""The figures behind the audit study's simulation tests, printed rather than only asserted: the coverage of the
design-based 95% intervals, the prediction-powered interval's width against the human-only one, and how often the
gate passes. Same synthetic audit, seeds and draws as the tests
(``metacan_pipeline_tests/audit/test_estimates.py``, ``test_ppi.py``, ``test_gate.py``), so each printed figure is the
one its test checks against its tolerance.

    .venv/bin/python benchmarks/audit_figures.py [--smoke]

Writes ``benchmarks/out/audit_figures.json``; ``--smoke``: a tenth of the tests' draws (the figures then mean little).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import add_smoke_arg, machine, record

from metacan_pipeline.audit.estimates import design_based as E
from metacan_pipeline.audit.estimates.ppi import ppi_mean
from metacan_pipeline_tests.audit.simulated import frame_value, gate_draws, gate_strata, synthetic_audit


def coverage(reps: int = 400, seed: int = 2016) -> dict[str, float]:
    """test_estimates: share of draws whose beta interval covers the frame value (band 0.92-0.98)."""
    audit = synthetic_audit(seed=16)
    systems = {"classifier": audit.classifier, "teacher": audit.teacher}
    truth = {"human prevalence": frame_value("prevalence", audit.code)}
    for name, d in systems.items():
        for metric in ("precision", "recall", "f1"):
            truth[f"{name} {metric}"] = frame_value(metric, audit.code, d)
    hits = dict.fromkeys(truth, 0)
    for take in audit.draws(reps, seed):
        y = audit.code[take]
        for key, value in truth.items():
            name, metric = key.split()
            if metric == "prevalence":
                e = E.prevalence(y, audit.design)
            else:
                e = getattr(E, metric)(y, systems[name][take], audit.design)
            hits[key] += e.lower <= value <= e.upper
    return {k: v / reps for k, v in hits.items()}


def ppi(reps: int = 400) -> dict[str, float]:
    """test_ppi: the teacher (accuracy about 0.95) over ``reps`` draws (400), and a noise system over 50."""
    audit = synthetic_audit(seed=16)
    target = frame_value("prevalence", audit.code)
    good = [
        ppi_mean(audit.code[t], audit.teacher[t], audit.design, audit.teacher.mean()) for t in audit.draws(reps, 2017)
    ]
    noise = (np.random.default_rng(99).random(audit.truth.size) < 0.5).astype(float)
    bad = [ppi_mean(audit.code[t], noise[t], audit.design, noise.mean()) for t in audit.draws(50, 3)]
    return {
        "teacher accuracy": float(np.mean(audit.teacher == audit.truth)),
        "PPI coverage (teacher)": float(np.mean([r.ppi.lower <= target <= r.ppi.upper for r in good])),
        "median width ratio PPI / human-only (teacher)": float(np.median([r.width_ratio for r in good])),
        "median width ratio PPI / human-only (noise)": float(np.median([r.width_ratio for r in bad])),
    }


def gate(scale: float = 1.0) -> dict[str, float]:
    """test_gate: share of draws in which the gate passes, and in which it could judge at all (``scale`` times the
    tests' draws)."""
    out = {}
    for name, args, reps, seed in (
        ("good classifier (about 60 coded positives)", (27, 35, 0.02, 0.0), 200, 21),
        ("mediocre classifier (frame recall about 0.65)", (27, 35, 0.15, 0.02), 200, 22),
        ("about 20 coded positives", (8, 12, 0.01, 0.002), 50, 23),
    ):
        gates = [g for g, _ in gate_draws(gate_strata(*args), max(2, round(reps * scale)), seed)]
        out[f"{name}: passed"] = float(np.mean([g.passed for g in gates]))
        out[f"{name}: judged"] = float(np.mean([g.judged for g in gates]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_smoke_arg(ap, "a tenth of the tests' draws")
    args = ap.parse_args()
    scale = 0.1 if args.smoke else 1.0
    started, figures = machine(), {}
    for title, fn in (
        (f"interval coverage, {round(400 * scale)} draws", lambda: coverage(round(400 * scale))),
        ("PPI", lambda: ppi(round(400 * scale))),
        ("gate", lambda: gate(scale)),
    ):
        t0 = time.perf_counter()
        figures[title] = fn()
        print(f"## {title} ({time.perf_counter() - t0:.1f} s)")
        for key, value in figures[title].items():
            print(f"{key}: {value:.4f}")
    record("audit_figures", figures, started=started, smoke=args.smoke)


if __name__ == "__main__":
    main()
