"""Prediction-powered prevalence with design weights (SPEC section 10).

A system (a teacher or a classifier version) decides every frame work; humans code only the audit sample. The
prediction-powered estimate (Angelopoulos, Bates, Fannjiang, Jordan and Zrnic 2023, "Prediction-powered inference",
Science 382; the mean estimator with ``lambda = 1``) combines the two:

    theta_ppi = mean over the frame of f(X)  +  Hajek mean over the audit sample of (Y - f(X))

where the second term, the *rectifier*, is the design-weighted mean error of the system on the human-coded works
(:func:`metacan_pipeline.audit.estimates.design_based.ratio`, so strata, weights and the finite population correction are those
of the design). Its variance is the sum of

- the frame term ``var_frame(f) / N`` over the ``N`` frame works (for 0/1 decisions ``m (1 - m) N / (N - 1)`` from
  the frame mean ``m``). Given the frame this term is a known constant; it is kept, as in the paper, so that the
  estimate also covers the superpopulation the frame stands for, and at frame sizes it is negligible;
- the design-based variance of the rectifier (Taylor-linearised, stratified, with the FPC).

The interval is ``theta +- z se`` (normal, as the paper), clipped to [0, 1]. Beside it: the human-only estimate (the
Hajek prevalence of the codes with its Korn-Graubard interval) and ``width_ratio = se_ppi / se_human``, the ratio of
the two normal-interval widths: below 1 when the system's decisions carry information the sample does not.

When the audit strata are the system's own decision states, ``f`` is constant within each stratum and, with every
sampled work resolved, ``theta_ppi`` equals the stratified human-only estimate exactly (the stratification already
used the decisions); the gain then shows for other systems, whose decisions vary within strata.

Checked in the tests against ``ppi_py.ppi_mean_ci`` (ppi-python 0.2.3, ``lam=1``) with equal weights: the point
estimates agree exactly, and the variances after ppi_py's two conventions are undone (its standard deviations divide
by n, not n - 1, and it has no finite population correction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from .design_based import DEFAULT_MIN_N, Design, Estimate, not_reported_note, prevalence, ratio


@dataclass(frozen=True)
class PPIEstimate:
    """The prediction-powered estimate ``ppi`` (value, interval, se, n, Kish n_effective, note) beside the
    human-only ``human``; ``frame_mean`` and ``rectifier`` are its two terms with their standard errors, and
    ``width_ratio = ppi.se / human.se`` (None when either is not reported or the human se is 0)."""

    ppi: Estimate
    human: Estimate
    frame_mean: float
    frame_se: float
    rectifier: float | None
    rectifier_se: float | None
    width_ratio: float | None


def _frame_variance(f: np.ndarray, frame_mean: float, frame_n: int, frame_variance: float | None) -> float:
    if frame_variance is not None:
        if not (math.isfinite(frame_variance) and frame_variance >= 0):
            raise ValueError(f"ppi: frame_variance {frame_variance} is not finite and >= 0")
        return float(frame_variance)
    observed = f[~np.isnan(f)]
    if not np.all((observed == 0) | (observed == 1)):
        raise ValueError(
            "ppi: decisions are not 0/1, so the frame variance cannot come from the mean: pass frame_variance"
        )
    if not 0 <= frame_mean <= 1:
        raise ValueError(f"ppi: frame_mean {frame_mean} of 0/1 decisions is not in [0, 1]")
    return frame_mean * (1 - frame_mean) * frame_n / (frame_n - 1) if frame_n > 1 else 0.0


def ppi_mean(
    y,
    f,
    design: Design,
    frame_mean: float,
    *,
    frame_n: int | None = None,
    frame_variance: float | None = None,
    min_n: int = DEFAULT_MIN_N,
    level: float = 0.95,
) -> PPIEstimate:
    """Prediction-powered mean of the human codes ``y`` (module docstring).

    ``y``: the human codes of the sampled units (0/1, nan = unresolved); ``f``: the system's decisions on the same
    units (nan = no decision: the unit leaves the rectifier); ``frame_mean``: the mean of the decisions over the
    ``frame_n`` frame works (default the design's frame size, ``sum N_h``); ``frame_variance``: their variance over
    the frame, needed only when decisions are not 0/1. Fewer than ``min_n`` units with a code and a decision: the
    PPI estimate is not reported (its note says so). Raises ValueError for misaligned arrays or an impossible
    frame mean.
    """
    y = np.asarray(y, dtype=float)
    f = np.asarray(f, dtype=float)
    if y.shape != (design.size,) or f.shape != (design.size,):
        raise ValueError(f"ppi: y {y.shape} and f {f.shape} must have one value per sampled unit ({design.size})")
    n_frame = design.frame_size if frame_n is None else int(frame_n)
    if n_frame < 1:
        raise ValueError(f"ppi: frame_n {n_frame} must be >= 1")
    frame_se = math.sqrt(_frame_variance(f, float(frame_mean), n_frame, frame_variance) / n_frame)
    human = prevalence(y, design, min_n=min_n, level=level)
    keep = ~(np.isnan(y) | np.isnan(f))
    residual = np.where(keep, np.nan_to_num(y) - np.nan_to_num(f), 0.0)
    rect = ratio(residual, keep.astype(float), design, min_n=min_n, level=level, interval="wald")
    if not rect.reported:
        note = not_reported_note(rect.n, min_n)
        ppi = Estimate(None, None, None, None, rect.n, rect.n_effective, note)
        return PPIEstimate(ppi, human, float(frame_mean), frame_se, None, None, None)
    value = float(frame_mean) + rect.value
    se = math.sqrt(frame_se**2 + rect.se**2)
    z = float(special.ndtri(1 - (1 - level) / 2))
    lower, upper = value - z * se, value + z * se
    notes = [rect.note] if rect.note else []
    if lower < 0 or upper > 1:
        notes.append("interval clipped to [0, 1]")
    ppi = Estimate(value, max(0.0, lower), min(1.0, upper), se, rect.n, rect.n_effective, "; ".join(notes))
    ratio_of_widths = se / human.se if human.reported and human.se else None
    return PPIEstimate(ppi, human, float(frame_mean), frame_se, rect.value, rect.se, ratio_of_widths)
