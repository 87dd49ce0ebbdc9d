"""The power note of a drawn audit sample (:func:`power_note`), a planning figure.

From the configured expected positive rate ``p_h`` of each stratum (a prior recorded in the protocol; a work counts as
positive when it is positive on any evaluated head, which is optimistic for any single head), expected coded positives
``sum n_h p_h`` and approximate 95% half-widths ``1.96 sqrt(x (1 - x) / n_eff)`` of precision and recall, with ``x``
their expected values and ``n_eff`` Kish's effective sample size of the design weights of the cases in the rate's
denominator: for precision the sampled predicted positives (``(sum N_h)^2 / sum N_h^2 / n_h`` over the
predicted-positive strata), for recall the expected coded positives (``(sum N_h p_h)^2 / sum N_h^2 p_h / n_h``). A Wald
interval on Kish's n ignores the gain from stratification and the finite population correction (conservative for both)
and is poor near 0 or 1 and for small n (the report uses the Korn-Graubard interval); it is a planning figure, not an
estimate. The ``trained_on`` stratum is reported on its own line, outside the totals."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .locked import EXCLUDED_TRAINED, STRATA, AuditProtocol

Z95 = 1.959963984540054


@dataclass(frozen=True)
class PowerNote:
    """Planning figures of a drawn design (module docstring): per stratum and over the audited population."""

    strata: list[dict]
    expected_coded_positives: float
    precision: float | None
    precision_n_eff: float
    precision_half_width: float | None
    recall: float | None
    recall_n_eff: float
    recall_half_width: float | None
    min_coded_positives: int

    @property
    def enough_positives(self) -> bool:
        return self.expected_coded_positives >= self.min_coded_positives


def _half_width(x: float | None, n_eff: float) -> float | None:
    return None if x is None or n_eff <= 0 else Z95 * math.sqrt(x * (1 - x) / n_eff)


def predicted_positive_strata(decision_rule: str) -> tuple[str, ...]:
    """The strata whose works the decision rule under test calls positive on some evaluated head."""
    return ("consensus",) if decision_rule == "consensus" else ("consensus", "candidate_only")


def power_note(sizes: dict[str, tuple[int, int]], protocol: AuditProtocol) -> PowerNote:
    """The power note of strata of sizes ``{stratum: (N_h, n_h)}`` under ``protocol`` (module docstring)."""
    rows = []
    for stratum, (big_n, n) in sorted(sizes.items(), key=lambda kv: (EXCLUDED_TRAINED, *STRATA).index(kv[0])):
        p = protocol.plan("trained_on" if stratum == EXCLUDED_TRAINED else stratum).expected_positive_rate
        fpc = 1 - n / big_n if big_n else 0.0
        rows.append(
            {
                "stratum": stratum,
                "N_h": big_n,
                "n_h": n,
                "pi": n / big_n if big_n else 0.0,
                "expected_positive_rate": p,
                "expected_coded_positives": n * p,
                "rate_half_width": Z95 * math.sqrt(p * (1 - p) / n * fpc) if n else None,
            }
        )
    pop = [r for r in rows if r["stratum"] not in ("trained_on", EXCLUDED_TRAINED) and r["n_h"]]
    pos = [r for r in pop if r["stratum"] in predicted_positive_strata(protocol.decision_rule)]
    n_pos = sum(r["N_h"] for r in pos)
    true_pos = sum(r["N_h"] * r["expected_positive_rate"] for r in pop)
    found = sum(r["N_h"] * r["expected_positive_rate"] for r in pos)
    precision = found / n_pos if n_pos else None
    recall = found / true_pos if true_pos else None
    prec_den = sum(r["N_h"] ** 2 / r["n_h"] for r in pos)
    rec_den = sum(r["N_h"] ** 2 * r["expected_positive_rate"] / r["n_h"] for r in pop)
    prec_n = n_pos**2 / prec_den if prec_den else 0.0
    rec_n = true_pos**2 / rec_den if rec_den else 0.0
    return PowerNote(
        rows,
        sum(r["expected_coded_positives"] for r in pop),
        precision,
        prec_n,
        _half_width(precision, prec_n),
        recall,
        rec_n,
        _half_width(recall, rec_n),
        protocol.gate.min_coded_positives,
    )


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def power_markdown(note: PowerNote, protocol: AuditProtocol) -> str:
    """The power note as markdown: a table per stratum and the overall figures against the gate."""
    head = "| stratum | N_h | n_h | pi | expected rate | expected coded positives | rate half-width |\n|---|---|---|---|---|---|---|\n"
    body = "".join(
        f"| {r['stratum']} | {r['N_h']} | {r['n_h']} | {r['pi']:.4g} | {r['expected_positive_rate']:.3g} | "
        f"{r['expected_coded_positives']:.1f} | {_fmt(r['rate_half_width'])} |\n"
        for r in note.strata
    )
    gate = protocol.gate
    lines = [
        f"Expected coded positives (audited population, trained works apart): {note.expected_coded_positives:.1f} "
        f"({'at least' if note.enough_positives else 'fewer than'} the gate's {gate.min_coded_positives}).",
        f"Precision ({protocol.decision_rule} rule): expected {_fmt(note.precision)} +/- {_fmt(note.precision_half_width)} "
        f"(Kish n_eff {note.precision_n_eff:.1f}; gate lower bound {gate.precision_lower:.2f}).",
        f"Recall: expected {_fmt(note.recall)} +/- {_fmt(note.recall_half_width)} (Kish n_eff {note.recall_n_eff:.1f}; "
        f"gate lower bound {gate.recall_lower:.2f}).",
        "Approximation: 1.96 sqrt(x(1-x)/n_eff) on Kish's effective n, priors from the protocol's expected rates, a "
        "work positive when positive on any evaluated head; a planning figure, not an estimate.",
    ]
    return head + body + "\n" + "\n\n".join(lines)
