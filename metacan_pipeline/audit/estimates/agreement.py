"""Inter-coder agreement of the audit study before adjudication (SPEC section 10).

Two independent coders code each sampled work; on a head each gives a value (``0`` / ``1`` on a binary head, a class
on a categorical one) or answers ``unresolved``. Per head, Cohen's kappa and Krippendorff's alpha (nominal level)
between the first and the second coding of each work, raw and design-weighted.

- ``unresolved`` is a value of its own, like a category: two coders who both find a work unresolvable agree, and one
  who resolves it while the other does not disagree. Dropping unresolved answers would hide exactly the works the
  coders found hard. A *missing* value (None / nan: the work was not coded twice, or not on this head) is not a
  value: the work has no pair on that head and is left out (``n`` counts the works with both values).
- Values are compared as strings (``True`` and ``1`` are ``"1"``), so booleans, integers and class names mix.
- Cohen's kappa (Cohen 1960): ``(p_o - p_e) / (1 - p_e)``, ``p_o = sum w [a = b] / sum w``,
  ``p_e = sum_k p_a(k) p_b(k)`` with ``p_a(k) = sum w [a = k] / sum w``; raw is ``w = 1``. It is what
  ``sklearn.metrics.cohen_kappa_score(a, b, sample_weight=w)`` computes (checked in the tests), written here so that
  this module does not import scikit-learn (about 4 s). Kappa treats the two codings as two fixed raters ("first"
  and "second" coding of each work); when coders rotate over works, alpha is the statistic that does not depend on
  which coding is called first.
- Krippendorff's alpha (Krippendorff 2004, nominal): ``1 - (n - 1) sum_{c != k} o_ck / sum_{c != k} n_c n_k`` over
  the coincidence matrix ``o``. Raw alpha is the ``krippendorff`` package's (0.9.0). Design-weighted, each work adds
  its pairs ``(a, b)`` and ``(b, a)`` with its design weight ``w``, so ``o`` estimates the coincidence matrix of the
  whole frame and ``n = 2 sum w`` its number of pairable values (about ``2 N``): the estimate of the alpha a census of
  the frame would give. With integer weights it equals the package's alpha on the data with each work repeated
  ``w`` times (checked in the tests).
- A statistic is None when undefined: no pair, or a single value throughout (no chance disagreement to compare).
- Per stratum as well as pooled (:func:`head_agreement` with ``strata``): at a prevalence of 1-2 % a pooled table is
  dominated by the works both coders call negative (free agreement), so a pooled kappa near 1 can hide poor
  agreement on the strata where the positives are. Within a stratum every design weight is the same, so a stratum's
  statistic is its raw one.
- Intervals: ``value +- z se`` (clipped to [-1, 1]), ``se`` by the delete-one jackknife: for a raw statistic over
  the works of its rows; for a design-weighted one stratified (JKn: a work is deleted within its stratum, whose other
  works then carry its weight, ``se^2 = sum_h (n_h - 1) / n_h sum_i (theta_(hi) - mean_h)^2``; a stratum of one
  work adds nothing). None when the statistic, or one of its replicates, is undefined.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import krippendorff
import numpy as np

UNRESOLVED = "unresolved"
"""The answer of a coder who could not decide; a value of its own for agreement (module docstring)."""

STATISTICS: tuple[str, ...] = ("cohen_kappa", "krippendorff_alpha")
WEIGHTINGS: tuple[str, ...] = ("raw", "design")
#: The ``stratum`` of the statistics over every work coded twice (raw, and design-weighted for the frame).
ALL_STRATA = "all"


@dataclass(frozen=True)
class Agreement:
    """One agreement statistic on one head: ``statistic`` (:data:`STATISTICS`), ``weighting`` (:data:`WEIGHTINGS`),
    ``value`` (None when undefined) over ``n`` works coded twice on the head; ``n_effective`` is Kish's
    ``(sum w)^2 / sum w^2`` of their design weights for a design-weighted statistic, ``n`` for a raw one;
    ``stratum`` the stratum of the works (:data:`ALL_STRATA`: every one); ``lower`` / ``upper`` the jackknife
    interval (module docstring; None when undefined)."""

    statistic: str
    weighting: str
    value: float | None
    n: int
    n_effective: float
    stratum: str = ALL_STRATA
    lower: float | None = None
    upper: float | None = None


def coder_value(value: object) -> str | None:
    """A coder's answer on a head as the string agreement compares: None for missing (None, nan, ``""``),
    ``"1"`` / ``"0"`` for booleans and integral numbers, any other string (``"unresolved"``, a class) as given."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return None
    if isinstance(value, bool | np.bool_):
        return "1" if value else "0"
    if isinstance(value, int | np.integer) or (isinstance(value, float | np.floating) and float(value).is_integer()):
        return str(int(value))
    return str(value)


def _pairs(first: Sequence, second: Sequence, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The works with both values: their two values as category indices (shared) and their weights."""
    if len(first) != len(second) or (weights is not None and len(weights) != len(first)):
        raise ValueError(
            f"agreement: lengths differ (first {len(first)}, second {len(second)}, "
            f"weights {None if weights is None else len(weights)})"
        )
    a = [coder_value(v) for v in first]
    b = [coder_value(v) for v in second]
    w = np.ones(len(a)) if weights is None else np.asarray(weights, dtype=float)
    if not np.all(np.isfinite(w) & (w > 0)):
        raise ValueError("agreement: every weight must be finite and > 0")
    keep = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x is not None and y is not None]
    labels = sorted({a[i] for i in keep} | {b[i] for i in keep})
    code = {v: k for k, v in enumerate(labels)}
    return (
        np.array([code[a[i]] for i in keep], dtype=int),
        np.array([code[b[i]] for i in keep], dtype=int),
        w[keep],
    )


def cohen_kappa(first: Sequence, second: Sequence, weights: Sequence[float] | None = None) -> float | None:
    """Cohen's kappa between the first and second coding of each work (module docstring), each work counted with
    ``weights`` (design weights; default 1). None when undefined. Raises ValueError for unequal lengths."""
    a, b, w = _pairs(first, second, weights)
    if a.size == 0:
        return None
    k = int(max(a.max(), b.max())) + 1
    total = w.sum()
    p_a = np.bincount(a, weights=w, minlength=k) / total
    p_b = np.bincount(b, weights=w, minlength=k) / total
    p_o = float(w[a == b].sum() / total)
    p_e = float(p_a.dot(p_b))
    if p_e >= 1 - 1e-12:
        return None
    return (p_o - p_e) / (1 - p_e)


def _coincidences(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    k = int(max(a.max(), b.max())) + 1
    o = np.zeros((k, k))
    np.add.at(o, (a, b), w)
    np.add.at(o, (b, a), w)
    return o


def krippendorff_alpha(first: Sequence, second: Sequence, weights: Sequence[float] | None = None) -> float | None:
    """Krippendorff's alpha (nominal) between two codings of each work (module docstring). Without ``weights``, the
    ``krippendorff`` package's value; with design weights, the frame estimate. None when undefined."""
    a, b, w = _pairs(first, second, weights)
    if a.size == 0 or max(a.max(), b.max()) == 0:
        return None
    if weights is None:
        k = int(max(a.max(), b.max())) + 1
        counts = np.zeros((a.size, k), dtype=int)
        np.add.at(counts, (np.arange(a.size), a), 1)
        np.add.at(counts, (np.arange(a.size), b), 1)
        return float(krippendorff.alpha(value_counts=counts, level_of_measurement="nominal"))
    o = _coincidences(a, b, w)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    observed = o.sum() - np.trace(o)
    expected = n_c.sum() ** 2 - np.square(n_c).sum()
    return float(1 - (n - 1) * observed / expected)


def _kappa_codes(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> float | None:
    """Cohen's kappa on category indices (:func:`cohen_kappa` after :func:`_pairs`)."""
    if a.size == 0:
        return None
    k = int(max(a.max(), b.max())) + 1
    total = w.sum()
    p_e = float((np.bincount(a, weights=w, minlength=k) / total).dot(np.bincount(b, weights=w, minlength=k) / total))
    if p_e >= 1 - 1e-12:
        return None
    return (float(w[a == b].sum() / total) - p_e) / (1 - p_e)


def _alpha_codes(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> float | None:
    """Krippendorff's alpha on category indices with weights ``w`` (ones: the package's raw alpha)."""
    if a.size == 0 or max(a.max(), b.max()) == 0:
        return None
    o = _coincidences(a, b, w)
    n_c = o.sum(axis=1)
    expected = n_c.sum() ** 2 - np.square(n_c).sum()
    if expected <= 0:
        return None
    return float(1 - (n_c.sum() - 1) * (o.sum() - np.trace(o)) / expected)


def _replicates(statistic: str, a: np.ndarray, b: np.ndarray, w: np.ndarray, groups: np.ndarray, reweight: bool):
    """The delete-one replicates of ``statistic`` (:data:`STATISTICS`) on category indices ``a``, ``b`` with weights
    ``w``: element ``i`` is the statistic without work ``i`` (nan where undefined), the rest of its group (``groups``)
    carrying its weight when ``reweight``. In closed form from the sums the statistic is made of (the weight, the
    agreeing weight and the two coders' weighted margins for kappa; the coincidence margins and the disagreeing
    weight for alpha), each replicate the total less the work's part: the same values as recomputing the statistic
    on every replicate, in O(n k) instead of O(n^2)."""
    n = a.size
    k = int(max(a.max(), b.max())) + 1
    rows = np.arange(n)
    _, g = np.unique(groups, return_inverse=True)
    m = np.bincount(g)
    f = np.where(m > 1, m / np.maximum(m - 1, 1), 1.0)[g] if reweight else np.ones(n)

    def rep(x: np.ndarray) -> np.ndarray:
        group = np.zeros((m.size, *x.shape[1:]))
        np.add.at(group, g, x)
        mine = group[g]
        scale = f.reshape((-1,) + (1,) * (x.ndim - 1))
        return x.sum(axis=0) - mine + scale * (mine - x)

    first, second = np.zeros((n, k)), np.zeros((n, k))
    first[rows, a] = w
    second[rows, b] = w
    with np.errstate(divide="ignore", invalid="ignore"):
        if statistic == "cohen_kappa":
            total = rep(w)
            p_e = (rep(first) * rep(second)).sum(axis=1) / total**2
            out = (rep(w * (a == b)) / total - p_e) / (1 - p_e)
            out[~(p_e < 1 - 1e-12)] = np.nan
        else:
            n_c = rep(first + second)
            size = n_c.sum(axis=1)
            expected = size**2 - np.square(n_c).sum(axis=1)
            out = 1 - (size - 1) * rep(2 * w * (a != b)) / expected
            out[~(expected > 1e-12 * size**2)] = np.nan
    return out


def jackknife_se(
    statistic: str, a: np.ndarray, b: np.ndarray, w: np.ndarray, strata: np.ndarray | None = None
) -> float | None:
    """The delete-one jackknife standard error of ``statistic`` (:data:`STATISTICS`) on category indices ``a``,
    ``b`` with weights ``w`` (module docstring): stratified, with the deleted work's weight carried by the rest of
    its stratum, when ``strata`` is given; plain (weights unchanged) otherwise. None when a replicate is undefined
    or no stratum has two works."""
    groups = np.zeros(a.size, dtype=int) if strata is None else np.asarray(strata)
    if a.size < 2:
        return None
    reps = _replicates(statistic, a, b, w, groups, strata is not None)
    total, used = 0.0, False
    for g in np.unique(groups):
        r = reps[groups == g]
        m = r.size
        if m < 2:
            continue
        if np.isnan(r).any():
            return None
        total += (m - 1) / m * float(np.square(r - r.mean()).sum())
        used = True
    return math.sqrt(total) if used else None


def _interval(value: float | None, se: float | None, z: float) -> tuple[float | None, float | None]:
    if value is None or se is None:
        return None, None
    return max(-1.0, value - z * se), min(1.0, value + z * se)


_STATISTICS = {"cohen_kappa": _kappa_codes, "krippendorff_alpha": _alpha_codes}


def head_agreement(
    first: Sequence,
    second: Sequence,
    weights: Sequence[float],
    strata: Sequence[str] | None = None,
    level: float = 0.95,
) -> tuple[Agreement, ...]:
    """The statistics of one head: ``first`` and ``second`` the two codings of each work, ``weights`` their design
    weights, ``strata`` their strata. Over every work (:data:`ALL_STRATA`), in the order (kappa, alpha) x (raw,
    design); then, with ``strata``, per stratum in name order kappa and alpha (raw: one weight within a stratum).
    Each with its ``level`` jackknife interval (module docstring)."""
    if strata is not None and len(strata) != len(first):
        raise ValueError(f"agreement: lengths differ (first {len(first)}, strata {len(strata)})")
    a, b, w = _pairs(first, second, weights)
    kept = [i for i, (x, y) in enumerate(zip(first, second, strict=True)) if _both(x, y)]
    labels = np.array([str(strata[i]) for i in kept] if strata is not None else [ALL_STRATA] * len(kept), dtype=object)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    n = int(w.size)
    kish = float(w.sum() ** 2 / np.square(w).sum()) if n else 0.0
    _, strata_index = np.unique(labels, return_inverse=True) if n else (None, np.zeros(0, dtype=int))
    out = []
    for name, stat in _STATISTICS.items():
        ones = np.ones(n)
        raw = stat(a, b, ones)
        out.append(
            Agreement(name, "raw", raw, n, float(n), ALL_STRATA, *_interval(raw, jackknife_se(name, a, b, ones), z))
        )
        design = stat(a, b, w)
        se = jackknife_se(name, a, b, w, strata_index) if strata is not None else jackknife_se(name, a, b, w)
        out.append(Agreement(name, "design", design, n, kish, ALL_STRATA, *_interval(design, se, z)))
    if strata is None:
        return tuple(out)
    for stratum in sorted(set(labels)):
        inside = labels == stratum
        sa, sb, m = a[inside], b[inside], int(inside.sum())
        for name, stat in _STATISTICS.items():
            ones = np.ones(m)
            value = stat(sa, sb, ones)
            lower, upper = _interval(value, jackknife_se(name, sa, sb, ones), z)
            out.append(Agreement(name, "raw", value, m, float(m), stratum, lower, upper))
    return tuple(out)


def _both(x: object, y: object) -> bool:
    return coder_value(x) is not None and coder_value(y) is not None
