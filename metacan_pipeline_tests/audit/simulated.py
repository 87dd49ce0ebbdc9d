"""A synthetic audit for the tests of metacan_pipeline.audit: a frame with a hidden truth, a stratifying classifier
and a teacher with known error rates, two coders and an adjudicator with known error rates, and repeated stratified
draws of the audit sample (seeded, vectorised with numpy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metacan_pipeline.audit.estimates import design_based as E
from metacan_pipeline.audit.estimates.design_based import Design
from metacan_pipeline.audit.estimates.gate import head_gate


@dataclass(frozen=True)
class Stratum:
    """``size`` frame works (``N_h``), ``sample`` of them drawn (``n_h``); every work of the stratum has the
    stratifying classifier's ``decision``, and its hidden truth is 1 with probability ``prevalence``."""

    name: str
    size: int
    sample: int
    decision: int
    prevalence: float


#: The machine-state strata of SPEC section 10 for one head: sizes 24x apart, the boundary oversampled (6% of it
#: drawn against 1.7% of the far negatives), 475 works coded.
STRATA: tuple[Stratum, ...] = (
    Stratum("consensus", 500, 50, 1, 0.95),
    Stratum("candidate", 1500, 75, 1, 0.60),
    Stratum("boundary", 2500, 150, 0, 0.20),
    Stratum("far", 12000, 200, 0, 0.06),
)


@dataclass(frozen=True, eq=False)
class SyntheticAudit:
    """Frame-length arrays (frame works ordered by stratum): ``truth`` (hidden), ``code`` (what two coders and an
    adjudicator would give, nan = unresolved), ``classifier`` (decides by stratum) and ``teacher`` (errs at random,
    whatever the stratum)."""

    strata: tuple[Stratum, ...]
    stratum_of: np.ndarray
    truth: np.ndarray
    code: np.ndarray
    classifier: np.ndarray
    teacher: np.ndarray

    @property
    def design(self) -> Design:
        """The design of every draw: units ordered by stratum, as :meth:`draws` returns them."""
        labels = np.repeat([s.name for s in self.strata], [s.sample for s in self.strata])
        sizes = np.repeat([s.size for s in self.strata], [s.sample for s in self.strata])
        samples = np.repeat([s.sample for s in self.strata], [s.sample for s in self.strata])
        return Design.of(labels, sizes / samples, sizes, samples)

    def draws(self, reps: int, seed: int) -> np.ndarray:
        """``(reps, n)`` frame positions: ``reps`` independent stratified samples without replacement."""
        rng = np.random.default_rng(seed)
        parts, offset = [], 0
        for s in self.strata:
            if s.sample == s.size:
                parts.append(np.broadcast_to(np.arange(s.size), (reps, s.size)) + offset)
            else:
                order = np.argpartition(rng.random((reps, s.size)), s.sample - 1, axis=1)
                parts.append(order[:, : s.sample] + offset)
            offset += s.size
        return np.concatenate(parts, axis=1)


def _rater(rng: np.random.Generator, truth: np.ndarray, sensitivity: float, specificity: float) -> np.ndarray:
    u = rng.random(truth.size)
    return np.where(truth == 1, u < sensitivity, u >= specificity).astype(float)


def synthetic_audit(
    seed: int,
    strata: tuple[Stratum, ...] = STRATA,
    *,
    coders: tuple[tuple[float, float], tuple[float, float]] = ((0.90, 0.95), (0.88, 0.96)),
    adjudicator: tuple[float, float] = (0.97, 0.98),
    unresolved: float = 0.02,
    teacher: tuple[float, float] = (0.85, 0.97),
) -> SyntheticAudit:
    """A frame over ``strata`` with every rate known: coders and adjudicator as (sensitivity, specificity) against
    the hidden truth (the adjudicator decides where the two coders differ), a share ``unresolved`` of works left
    unresolved at random, and a teacher erring independently of the strata."""
    rng = np.random.default_rng(seed)
    stratum_of = np.repeat(np.arange(len(strata)), [s.size for s in strata])
    truth = (rng.random(stratum_of.size) < np.array([s.prevalence for s in strata])[stratum_of]).astype(float)
    first, second = (_rater(rng, truth, *c) for c in coders)
    code = np.where(first == second, first, _rater(rng, truth, *adjudicator))
    code[rng.random(truth.size) < unresolved] = np.nan
    classifier = np.array([s.decision for s in strata], dtype=float)[stratum_of]
    return SyntheticAudit(strata, stratum_of, truth, code, classifier, _rater(rng, truth, *teacher))


def frame_value(metric: str, y: np.ndarray, d: np.ndarray | None = None) -> float:
    """The frame's own value of ``metric`` over works with a resolved code (the estimand of the design-based
    estimates): precision, recall, f1 of ``d`` against ``y``, or the prevalence of ``y``."""
    keep = ~np.isnan(y)
    y = y[keep]
    if metric == "prevalence":
        return float(y.mean())
    d = d[keep]
    tp = float((y * d).sum())
    return {"precision": tp / d.sum(), "recall": tp / y.sum(), "f1": 2 * tp / (y.sum() + d.sum())}[metric]


def gate_draws(strata: tuple[Stratum, ...], reps: int, seed: int) -> list:
    """The gate of the stratifying classifier on ``reps`` stratified draws of a synthetic audit (accurate coders),
    with the number of coded positives of each draw (test_gate, and the figures of benchmarks/audit_figures.py)."""
    audit = synthetic_audit(seed=seed, strata=strata, coders=((0.98, 0.99), (0.98, 0.99)), unresolved=0.0)
    design = audit.design
    out = []
    for take in audit.draws(reps, seed + 1):
        y, d = audit.code[take], audit.classifier[take]
        r = E.recall(y, d, design)
        out.append((head_gate(E.precision(y, d, design), r, coded_positives=r.n), r.n))
    return out


def gate_strata(candidate_n: int, consensus_n: int, boundary: float, far: float) -> tuple[Stratum, ...]:
    """The strata of the gate's simulations: consensus and candidate positives at the given sizes, and negatives near
    and far from the threshold that the classifier calls positive at rates ``boundary`` and ``far``."""
    return (
        Stratum("consensus", 600, consensus_n, 1, 0.98),
        Stratum("candidate", 400, candidate_n, 1, 0.90),
        Stratum("boundary", 2000, 100, 0, boundary),
        Stratum("far", 10000, 100, 0, far),
    )
