"""Design-based estimates of the audit study (SPEC sections 5 and 10).

The audit sample is a stratified probability sample of the frame: stratum ``h`` holds ``N_h`` frame works of which
``n_h`` were drawn, each with design weight ``w = 1 / pi`` (SPEC section 5). Every rate here is a Hajek ratio of two
design-weighted totals, ``R = sum w y / sum w x``, computed over the *whole* sample: a unit outside the rate's domain
has ``x = 0`` (and ``y = 0``) but still counts in its stratum, which is what makes a domain estimate's variance right.

- precision ``= ratio(y d, d)``, recall ``= ratio(y d, y)``, prevalence ``= ratio(y, 1)`` (``y`` the adjudicated human
  code, ``d`` the machine decision), and ``F1 = 2 TP / (2 TP + FP + FN) = ratio(2 y d, y + d)``: F1 is itself a
  ratio of two totals, so it needs no delta method of its own.
- A unit whose human code is unresolved or missing (``nan`` in ``y``), or that has no machine decision (``nan`` in
  ``d``), leaves every domain (``x = 0``): the estimand is the rate among works with a resolved code and a decision,
  counted and reported by the caller, never imputed.
- Variance: Taylor linearisation of the ratio, ``z_i = w_i (y_i - R x_i) / sum w x``, and the stratified
  with-replacement variance of the total of ``z`` with the finite population correction,
  ``var(R) = sum_h (1 - n_h / N_h) n_h / (n_h - 1) sum_i (z_hi - mean_h z)^2`` (Sarndal, Swensson and Wretman 1992,
  section 5.6; R survey's ``svyratio`` on ``svydesign(strata=, fpc=)``). A census stratum (``n_h = N_h``) adds
  nothing. A stratum with one sampled work cannot estimate its own variance: it is centred on the mean over the
  sample instead (R survey's ``options(survey.lonely.psu = "adjust")``, conservative), and the note says so.
- ``n`` is the number of cases in the domain, ``n_effective`` Kish's ``(sum w)^2 / sum w^2`` over them.
- Minimum n: a rate on fewer than ``min_n`` cases carries ``value`` None and the note
  ``"fewer than 30 coded cases (n=12): not reported"``; it is never computed silently.

Interval: Korn and Graubard (1998), as R survey's ``svyciprop(method = "beta")``: the Clopper-Pearson interval with
the design effective sample size ``n* = R (1 - R) / var(R)`` in place of n, scaled by
``(t_{n-1} / t_{df})^2`` for the design's degrees of freedom (``df`` = domain cases minus the strata they fall in).
At ``R`` = 0 or 1 the variance is 0 and ``n*`` undefined; Kish's ``n_effective`` of the domain stands in, so an
all-positive domain still gets the Clopper-Pearson lower bound a person would expect, never a zero-width interval.
Chosen by the coverage tests (``metacan_pipeline_tests/audit/test_estimates.py``, 400 seeded stratified draws each):
on a synthetic audit of 475 of 16,500 works (strata 24x apart in size, the boundary oversampled, two simulated
coders adjudicated) the beta interval covered the frame value 0.9325-0.9675 of the time for precision, recall, F1
and prevalence of two systems (logit: 0.93-0.96); for a classifier whose ~45 decided positives are 98% right it
covered 0.985, where the Wald interval on the same variance covered 0.61 (an all-positive sample has variance 0)
and the logit interval 0.95 only through its beta fallback at 0 and 1. ``interval="logit"`` and ``"wald"`` remain
for comparison and for quantities that are not proportions (the PPI rectifier).

Known limit (measured, not a test): no design-based interval sees cases a stratum's sample did not draw. With the
far-negative stratum at 90 of 20,000 works and 1% of them positive (about one positive per sample, each standing
for 222 works), the stratifying classifier's recall intervals covered 0.81 and prevalence 0.84; with 150 of 12,000 at 6%, the teacher's recall
covered 0.91-0.935. A protocol should draw enough of every large stratum that each evaluated domain has more than a
handful of cases there.

Why not samplics: samplics 0.6.1 (the pinned candidate) installs beside numpy 2.4.6 / pandas 2.3.3 but pulls in
polars, statsmodels and formulaic, and its PyPI page declares it no longer maintained ("Development Status :: 7 -
Inactive", superseded by ``svy``); the estimator above is about forty lines of numpy, checked against hand-derived
values in the tests, so we keep ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from scipy import special

DEFAULT_MIN_N = 30
"""Fewest coded cases on which a rate is reported (the protocol may set another; SPEC section 10 asks for one)."""

DESIGN_COLUMNS: tuple[str, ...] = ("stratum", "design_weight", "stratum_size", "stratum_sample_size")
"""The columns :meth:`Design.from_frame` reads: per sampled unit, its stratum, ``1 / pi``, ``N_h`` and ``n_h``."""

Interval = Literal["beta", "logit", "wald"]


@dataclass(frozen=True)
class Estimate:
    """A design-based estimate: ``value`` with its ``level`` interval ``[lower, upper]`` and standard error ``se``.

    ``n`` is the number of cases it rests on, ``n_effective`` their Kish effective sample size. ``value``,
    ``lower``, ``upper`` and ``se`` are None when the estimate is not reported (fewer than ``min_n`` cases), and
    ``note`` then says why; otherwise ``note`` is empty or says something a reader should know (a census, a lonely
    stratum).
    """

    value: float | None
    lower: float | None
    upper: float | None
    se: float | None
    n: int
    n_effective: float
    note: str = ""

    @property
    def reported(self) -> bool:
        return self.value is not None


@dataclass(frozen=True, eq=False)
class Design:
    """A stratified sample: per sampled unit its ``stratum``, ``weight`` (``1 / pi``), the stratum's frame size
    ``stratum_size`` (``N_h``) and sample size ``stratum_sample_size`` (``n_h``). Build it with :meth:`of` or
    :meth:`from_frame`, which check it; every rate function takes arrays aligned with its units."""

    stratum: np.ndarray
    weight: np.ndarray
    stratum_size: np.ndarray
    stratum_sample_size: np.ndarray
    index: np.ndarray = field(repr=False)
    """Per unit, the position of its stratum in ``labels``."""
    labels: np.ndarray = field(repr=False)
    rows: np.ndarray = field(repr=False)
    """Per stratum, the number of sampled units (``n_h``)."""
    fpc: np.ndarray = field(repr=False)
    """Per stratum, ``1 - n_h / N_h``."""
    population: np.ndarray = field(repr=False)
    """Per stratum, ``N_h``."""

    @property
    def size(self) -> int:
        return int(self.weight.size)

    @property
    def frame_size(self) -> int:
        """``sum_h N_h``: the frame the sample was drawn from (the strata partition it, SPEC section 5)."""
        return int(self.population.sum())

    @classmethod
    def of(cls, stratum, design_weight, stratum_size, stratum_sample_size) -> Design:
        """Check and build a design from four aligned arrays.

        Raises ValueError, naming the stratum, when lengths differ, a weight is not finite and > 0 (SPEC section 5:
        no selection probability 0), ``N_h`` or ``n_h`` is not constant within a stratum, ``n_h > N_h``, or the
        number of sampled units in a stratum is not ``n_h`` (pass every sampled work: one without a human code is
        unresolved, not absent).
        """
        stratum = np.asarray(stratum).astype(str)
        weight = np.asarray(design_weight, dtype=float)
        big_n = np.asarray(stratum_size, dtype=float)
        small_n = np.asarray(stratum_sample_size, dtype=float)
        if not stratum.size == weight.size == big_n.size == small_n.size:
            raise ValueError(
                f"design: stratum, design_weight, stratum_size and stratum_sample_size differ in length "
                f"({stratum.size}, {weight.size}, {big_n.size}, {small_n.size})"
            )
        if stratum.size == 0:
            raise ValueError("design: the sample is empty")
        if not np.all(np.isfinite(weight) & (weight > 0)):
            bad = str(stratum[~(np.isfinite(weight) & (weight > 0))][0])
            raise ValueError(f"design: stratum {bad!r} has a design weight that is not finite and > 0 (SPEC section 5)")
        labels, index = np.unique(stratum, return_inverse=True)
        rows = np.bincount(index).astype(float)
        per_stratum = {}
        for name, values in (("stratum_size", big_n), ("stratum_sample_size", small_n)):
            first = np.full(labels.size, np.nan)
            first[index[::-1]] = values[::-1]
            varies = np.flatnonzero(first[index] != values)
            if varies.size:
                raise ValueError(f"design: {name} varies within stratum {str(stratum[varies[0]])!r}")
            per_stratum[name] = first
        sizes, samples = per_stratum["stratum_size"], per_stratum["stratum_sample_size"]
        for h, label in enumerate(labels.tolist()):
            if not (1 <= samples[h] <= sizes[h]):
                raise ValueError(
                    f"design: stratum {label!r} has stratum_sample_size {samples[h]:g} and stratum_size "
                    f"{sizes[h]:g}; expected 1 <= n_h <= N_h"
                )
            if rows[h] != samples[h]:
                raise ValueError(
                    f"design: stratum {label!r} has {rows[h]:g} sampled units but stratum_sample_size {samples[h]:g}: "
                    "pass every sampled work (a work without a human code is unresolved, not absent)"
                )
        return cls(stratum, weight, big_n, small_n, index, labels, rows, 1 - samples / sizes, sizes)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> Design:
        """:meth:`of` on the :data:`DESIGN_COLUMNS` of ``frame`` (one row per sampled unit); raises KeyError naming
        a missing column."""
        missing = [c for c in DESIGN_COLUMNS if c not in frame.columns]
        if missing:
            raise KeyError(f"design: the sample has no column {missing} (expected {list(DESIGN_COLUMNS)})")
        return cls.of(*(frame[c].to_numpy() for c in DESIGN_COLUMNS))


def kish_n_effective(weights) -> float:
    """Kish's effective sample size ``(sum w)^2 / sum w^2`` (0 for no weights)."""
    w = np.asarray(weights, dtype=float)
    return float(w.sum() ** 2 / np.square(w).sum()) if w.size else 0.0


def not_reported_note(n: int, min_n: int) -> str:
    """The sentence of the minimum-n rule: ``"fewer than 30 coded cases (n=12): not reported"``."""
    if n == 0:
        return "no coded cases: not reported"
    return f"fewer than {min_n} coded cases (n={n}): not reported"


def _linearised_variance(design: Design, z: np.ndarray) -> tuple[float, int]:
    """Stratified with-replacement variance of ``sum z`` with the FPC (module docstring), and the number of lonely
    strata (one sampled unit, not a census) whose term was centred on the mean over the sample."""
    h = design.index
    means = np.bincount(h, weights=z, minlength=design.labels.size) / design.rows
    squares = np.bincount(h, weights=np.square(z - means[h]), minlength=design.labels.size)
    several = design.rows > 1
    factor = np.where(several, design.rows / np.maximum(design.rows - 1, 1), 0.0) * design.fpc
    variance = float(factor.dot(squares))
    lonely = (~several) & (design.fpc > 0)
    if lonely.any():
        centred = np.bincount(h, weights=np.square(z - z.mean()), minlength=design.labels.size)
        variance += float(design.fpc[lonely].dot(centred[lonely]))
    return variance, int(lonely.sum())


def _t_quantile(df: float, q: float) -> float:
    return float(special.stdtrit(df, q)) if math.isfinite(df) else float(special.ndtri(q))


def _beta_interval(p: float, se: float, n: int, kish: float, df: float, level: float) -> tuple[float, float]:
    """Korn-Graubard interval (module docstring): Clopper-Pearson on the design effective sample size."""
    alpha = 1 - level
    n_star = p * (1 - p) / se**2 if 0 < p < 1 and se > 0 else kish
    if n > 1 and df < n - 1:
        n_star *= (_t_quantile(n - 1, alpha / 2) / _t_quantile(df, alpha / 2)) ** 2
    x = n_star * p
    lower = 0.0 if x <= 0 else float(special.betaincinv(x, n_star - x + 1, alpha / 2))
    upper = 1.0 if x >= n_star else float(special.betaincinv(x + 1, n_star - x, 1 - alpha / 2))
    return lower, upper


def _interval(
    p: float, se: float, n: int, kish: float, df: float, level: float, interval: Interval
) -> tuple[float, float]:
    if interval == "beta":
        return _beta_interval(p, se, n, kish, df, level)
    t = _t_quantile(df, 1 - (1 - level) / 2)
    if interval == "logit":
        if not 0 < p < 1 or se == 0:
            return _beta_interval(p, se, n, kish, df, level)
        centre, half = math.log(p / (1 - p)), t * se / (p * (1 - p))
        return 1 / (1 + math.exp(-(centre - half))), 1 / (1 + math.exp(-(centre + half)))
    if interval == "wald":
        return p - t * se, p + t * se
    raise ValueError(f"interval {interval!r} unknown; expected 'beta', 'logit' or 'wald'")


def _aligned(values, design: Design, name: str) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.shape != (design.size,):
        raise ValueError(f"{name} has shape {a.shape}; expected ({design.size},), one value per sampled unit")
    return a


def ratio(
    y,
    x,
    design: Design,
    *,
    min_n: int = DEFAULT_MIN_N,
    level: float = 0.95,
    interval: Interval = "beta",
) -> Estimate:
    """Hajek ratio ``sum w y / sum w x`` over the sample, its linearised stratified variance and interval.

    ``y`` and ``x`` are finite arrays with one value per sampled unit (``x >= 0``); the domain is ``x != 0``
    (module docstring). ``interval``: ``"beta"`` (Korn-Graubard, for proportions; the default), ``"logit"``
    (proportions; beta at 0 and 1) or ``"wald"`` (any ratio, ``t_df`` quantile, not clipped). Raises ValueError for
    misaligned or non-finite inputs or a negative ``x``.
    """
    y, x = _aligned(y, design, "y"), _aligned(x, design, "x")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(x))):
        raise ValueError("ratio: y and x must be finite (mask unresolved cases out of the domain: x = 0)")
    if np.any(x < 0):
        raise ValueError("ratio: x must be >= 0 (it is the domain's size measure)")
    domain = x != 0
    n = int(domain.sum())
    w = design.weight
    kish = kish_n_effective(w[domain])
    if n == 0 or n < min_n:
        return Estimate(None, None, None, None, n, kish, not_reported_note(n, min_n))
    total_x = float(w.dot(x))
    value = float(w.dot(y)) / total_x
    variance, lonely = _linearised_variance(design, w * (y - value * x) / total_x)
    se = math.sqrt(max(variance, 0.0))
    in_census = bool(np.all(design.fpc[design.index[domain]] == 0))
    notes = []
    if in_census:
        lower = upper = value
        notes.append("every case is in a census stratum: no sampling error")
    else:
        df = max(1.0, n - np.unique(design.index[domain]).size)
        lower, upper = _interval(value, se, n, kish, df, level, interval)
    if lonely:
        notes.append(f"{lonely} stratum with a single sampled work: its variance is centred on the sample mean")
    return Estimate(value, lower, upper, se, n, kish, "; ".join(notes))


def _resolved(y, d, design: Design, within) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``y`` and ``d`` with nan -> 0, and the mask of units with both a code and a decision (and in ``within``)."""
    y, d = _aligned(y, design, "y"), _aligned(d, design, "d")
    keep = ~(np.isnan(y) | np.isnan(d))
    if within is not None:
        keep &= np.asarray(within, dtype=bool)
    for name, a in (("y", y), ("d", d)):
        if np.any(keep & (a != 0) & (a != 1)):
            raise ValueError(f"{name} must hold 0, 1 or nan (unresolved / no decision)")
    return np.where(keep, y, 0.0), np.where(keep, d, 0.0), keep


def precision(y, d, design: Design, *, within=None, **options) -> Estimate:
    """Design-weighted precision of decisions ``d`` against human codes ``y`` (0/1, nan = unresolved / no decision),
    over the units in ``within`` (a boolean mask; default all): ``ratio(y d, d)``. ``options`` go to :func:`ratio`."""
    y, d, _ = _resolved(y, d, design, within)
    return ratio(y * d, d, design, **options)


def recall(y, d, design: Design, *, within=None, **options) -> Estimate:
    """Design-weighted recall (sensitivity): ``ratio(y d, y)``; arguments as :func:`precision`."""
    y, d, _ = _resolved(y, d, design, within)
    return ratio(y * d, y, design, **options)


def f1(y, d, design: Design, *, within=None, **options) -> Estimate:
    """Design-weighted F1 ``2 TP / (2 TP + FP + FN) = ratio(2 y d, y + d)`` (its ``n`` counts the units that are a
    human or a machine positive); arguments as :func:`precision`."""
    y, d, _ = _resolved(y, d, design, within)
    return ratio(2 * y * d, y + d, design, **options)


def prevalence(y, design: Design, *, within=None, **options) -> Estimate:
    """Design-weighted share of human positives among resolved codes: ``ratio(y, 1)`` over units with a code."""
    y, _, keep = _resolved(y, np.zeros(design.size), design, within)
    return ratio(y, keep.astype(float), design, **options)


@dataclass(frozen=True)
class Confusion:
    """A confusion matrix of decisions against human codes: raw counts of sampled cases and design-weighted counts
    (estimated frame works), over the units with a resolved code and a decision."""

    tp: int
    fp: int
    fn: int
    tn: int
    tp_weighted: float
    fp_weighted: float
    fn_weighted: float
    tn_weighted: float


def confusion(y, d, design: Design, *, within=None) -> Confusion:
    """The :class:`Confusion` of ``d`` against ``y`` (0/1, nan excluded) over ``within`` (default all units)."""
    y, d, keep = _resolved(y, d, design, within)
    cells = {
        "tp": keep & (y == 1) & (d == 1),
        "fp": keep & (y == 0) & (d == 1),
        "fn": keep & (y == 1) & (d == 0),
        "tn": keep & (y == 0) & (d == 0),
    }
    raw = {k: int(m.sum()) for k, m in cells.items()}
    weighted = {f"{k}_weighted": float(design.weight[m].sum()) for k, m in cells.items()}
    return Confusion(**raw, **weighted)
