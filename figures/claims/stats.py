"""The tests a claim is decided by: one number per seed (the seed is the unit), a one-sided test
per side of the criterion at every map point, and a family decision over a claim's in-regime points
whose error rates are controlled at the seed counts used.

**Per point** (:func:`point_test`), with ``values`` one statistic per seed and the criterion's
boundary ``b``:

* ``median`` (the default) — the **exact sign test**: the number of seeds strictly on one side of
  ``b`` against Binomial(n, 1/2). Distribution-free: exact for any continuous per-seed
  distribution, skewed or not (seeds on the boundary count against the verdict tested, which keeps
  it valid with atoms). Its smallest p-value is ``2**-n``: 5 seeds can give ``holds`` (every seed on
  the holding side, p = 0.031), ``fails`` over m points needs ``2**-n <= alpha/m``.
* ``proportion`` (a 0/1 statistic per seed) — the **exact binomial test** against the boundary
  proportion ``p0``.
* ``mean`` — the one-sample **t-test**. Exact for normal per-seed values only: on gamma(4) data
  (skewness 1) at n = 5 its one-sided level is 0.096 at a nominal 0.05 (measured). The four papers'
  registries use ``median`` or ``proportion``.

Each test gives ``p_holds`` (small: the point holds; its null is "the claim is false here") and
``p_fails`` (small: the point fails; its null is "the claim is true here"). ``inside [lo, hi]``:
``p_holds`` is the larger of the two one-sided p-values (intersection-union), ``p_fails`` twice the
smaller (Bonferroni over the two ways out).

**The family** (:func:`family_decision`) of a claim's m in-regime points at ``alpha``:

* the claim **holds** when *every* in-regime point holds at ``alpha`` (an intersection-union test:
  the chance of a false ``holds`` is at most ``alpha`` whatever m, since it needs the violating
  point's own test to reject);
* it **fails** when Holm's step-down procedure over the m ``p_fails`` rejects at least one point
  (family-wise error of a false ``fails`` at most ``alpha``);
* else it is **inconclusive**. Both cannot happen (``p_holds + p_fails >= 1`` at every point).

The simulation test (``tests/figures/test_claims_stats.py``) runs the whole procedure on normal
and skewed data at the boundary and shows both error rates within ``alpha`` plus Monte-Carlo error,
and the old expanded-bootstrap rule exceeding it.

**Can it fire?** (:func:`can_fire`) — a claim whose test could never give ``holds`` or never
``fails`` at its seed count is refused when its map is planned (:func:`seeds_needed` says how many
seeds it needs). **Minimal detectable effect** (:func:`minimal_detectable_effect`) — the effect at
which the holding (and the failing) test has 80% power at the seeds used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["ALPHA", "POWER", "PointTest", "point_test", "point_estimate", "one_sided_bound", "holm", "family_decision",
           "FamilyDecision", "can_fire", "seeds_needed", "minimal_detectable_effect", "METHODS"]

#: the family-wise level of every claim (a false ``holds`` and a false ``fails`` each at most this)
ALPHA = 0.05
#: the power at which the minimal detectable effect is stated
POWER = 0.8
#: estimator -> the test's name (the JSON's ``test``)
METHODS = {
    "median": "exact sign test on the median (distribution-free), Holm over the in-regime points",
    "proportion": "exact binomial test on the proportion of seeds, Holm over the in-regime points",
    "mean": "one-sample t-test on the mean (assumes near-normal per-seed values), Holm over the in-regime points",
}


@dataclass(frozen=True)
class PointTest:
    """One point's two one-sided tests: the estimate (median / proportion / mean over seeds) and the
    p-values for ``holds`` and for ``fails`` (unadjusted)."""

    estimate: float
    p_holds: float
    p_fails: float
    n: int


@lru_cache(maxsize=65536)
def _binom_sf(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) >= k) (a pure function of three numbers: cached, the simulation calls it often)."""
    from scipy import stats

    return 1.0 if k <= 0 else float(stats.binom.sf(k - 1, n, p))


def _sides(direction: str, boundary) -> list[tuple[str, float]]:
    """The criterion as (holding side, boundary) pairs: ``above b`` -> [(">", b)], ``inside`` ->
    [(">", lo), ("<", hi)]."""
    if direction == "above":
        return [(">", float(boundary))]
    if direction == "below":
        return [("<", float(boundary))]
    lo, hi = boundary
    return [(">", float(lo)), ("<", float(hi))]


def _one_side(x: np.ndarray, estimator: str, side: str, b: float) -> tuple[float, float]:
    """``(p that the estimand lies on ``side`` of b, p that it lies on the other)``: each the
    p-value of a one-sided test whose null is the complement."""
    from scipy import stats

    n = x.size
    if estimator == "median":
        above, below = int(np.sum(x > b)), int(np.sum(x < b))
        k_hold, k_other = (above, below) if side == ">" else (below, above)
        return _binom_sf(k_hold, n, 0.5), _binom_sf(k_other, n, 0.5)
    if estimator == "proportion":
        k = int(np.sum(x))
        p_up, p_down = _binom_sf(k, n, b), float(stats.binom.cdf(k, n, b))  # H0 p <= b; H0 p >= b
        return (p_up, p_down) if side == ">" else (p_down, p_up)
    # mean: one-sample t
    m, s = float(x.mean()), float(x.std(ddof=1))
    if s == 0.0:
        up = 0.0 if m > b else 1.0
        down = 0.0 if m < b else 1.0
    else:
        t = (m - b) / (s / math.sqrt(n))
        up, down = float(stats.t.sf(t, n - 1)), float(stats.t.cdf(t, n - 1))
    return (up, down) if side == ">" else (down, up)


def point_estimate(x: np.ndarray, estimator: str) -> float:
    """The estimand over seeds: the median, else the mean (a proportion is the mean of 0/1 values)."""
    return float(np.median(x)) if estimator == "median" else float(x.mean())


def point_test(values: Any, direction: str, boundary, estimator: str = "median") -> PointTest:
    """The two one-sided tests of one map point (module docstring). ``values``: finite, one per seed."""
    x = np.asarray(values, dtype=np.float64)
    pairs = [_one_side(x, estimator, side, b) for side, b in _sides(direction, boundary)]
    if len(pairs) == 1:
        p_holds, p_fails = pairs[0]
    else:  # inside: holds needs both sides (IUT); fails is either way out (Bonferroni over the two)
        p_holds = max(p for p, _ in pairs)
        p_fails = min(1.0, 2 * min(q for _, q in pairs))
    return PointTest(point_estimate(x, estimator), float(p_holds), float(p_fails), int(x.size))


def one_sided_bound(values: Any, estimator: str, a: float, upper: bool) -> float:
    """The one-sided ``1 - a`` confidence bound of the estimand (lower, or ``upper``) that the test
    of :func:`point_test` reads: the estimand's bound lies beyond ``b`` exactly when that test
    rejects at ``a``. Order statistics for the median (``-inf``/``inf`` when ``2**-n > a``),
    Clopper-Pearson for a proportion, Student t for the mean."""
    from scipy import stats

    x = np.sort(np.asarray(values, dtype=np.float64))
    n = x.size
    if estimator == "median":
        k = _median_rank(n, a)
        if k == 0:
            return math.inf if upper else -math.inf
        return float(x[n - k]) if upper else float(x[k - 1])
    if estimator == "proportion":
        s = int(x.sum())
        if upper:
            return 1.0 if s == n else float(stats.beta.ppf(1 - a, s + 1, n - s))
        return 0.0 if s == 0 else float(stats.beta.ppf(a, s, n - s + 1))
    m, sd = float(x.mean()), float(x.std(ddof=1))
    half = float(stats.t.ppf(1 - a, n - 1)) * sd / math.sqrt(n)
    return m + half if upper else m - half


@lru_cache(maxsize=4096)
def _median_rank(n: int, a: float) -> int:
    """The largest k with P(Bin(n, 1/2) <= k - 1) <= a: x_(k) is then a 1 - a lower bound of the
    median (0: none is)."""
    k = 0
    while k < n and 1 - _binom_sf(k + 1, n, 0.5) <= a:
        k += 1
    return k


def holm(p: Sequence[float], alpha: float = ALPHA) -> tuple[list[bool], list[float]]:
    """Holm's step-down procedure: ``(rejected, the level each point was tested at)``. Sorted by
    p, the r-th smallest is tested at ``alpha / (m - r)`` (r from 0) while every earlier one was
    rejected; the rest are tested at the level where the procedure stopped."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    rejected, level = [False] * m, [alpha / max(m, 1)] * m
    going = True
    for r, i in enumerate(order):
        a = alpha / (m - r)
        level[i] = a
        if going and p[i] <= a:
            rejected[i] = True
        else:
            going = False
    return rejected, level


@dataclass(frozen=True)
class FamilyDecision:
    """The claim's verdict from its in-regime points' tests, with each point's verdict and the
    levels its two sides were tested at (``alpha`` for holding, Holm's for failing)."""

    verdict: str
    point_verdicts: tuple[str, ...]
    fail_levels: tuple[float, ...]


def family_decision(tests: Sequence[PointTest], alpha: float = ALPHA) -> FamilyDecision:
    """``holds`` when every point holds at ``alpha`` (IUT), ``fails`` when Holm rejects some point's
    ``p_fails``, else ``inconclusive`` (module docstring). No points: ``inconclusive``."""
    if not tests:
        return FamilyDecision("inconclusive", (), ())
    rejected, levels = holm([t.p_fails for t in tests], alpha)
    verdicts = tuple("fails" if rj else "holds" if t.p_holds <= alpha else "inconclusive"
                     for t, rj in zip(tests, rejected))
    if any(rejected):
        verdict = "fails"
    elif all(v == "holds" for v in verdicts):
        verdict = "holds"
    else:
        verdict = "inconclusive"
    return FamilyDecision(verdict, verdicts, tuple(levels))


def _min_p(estimator: str, direction: str, boundary, n: int) -> tuple[float, float]:
    """The smallest achievable ``(p_holds, p_fails)`` at ``n`` seeds (t-test: 0)."""
    if estimator == "mean":
        return 0.0, 0.0
    if estimator == "median":
        return 0.5 ** n, (2 if direction == "inside" else 1) * 0.5 ** n
    sides = _sides(direction, boundary)
    hold = max((b ** n if side == ">" else (1 - b) ** n) for side, b in sides)
    fail = min(((1 - b) ** n if side == ">" else b ** n) for side, b in sides) * (2 if direction == "inside" else 1)
    return hold, fail


def can_fire(estimator: str, direction: str, boundary, n: int, m: int, alpha: float = ALPHA) -> dict[str, bool]:
    """Whether some outcome of ``n`` seeds at ``m`` in-regime points gives ``holds`` (at ``alpha``)
    and ``fails`` (Holm's first step, ``alpha/m``)."""
    hold, fail = _min_p(estimator, direction, boundary, n)
    return {"holds": hold <= alpha, "fails": fail <= alpha / max(m, 1)}


def seeds_needed(estimator: str, direction: str, boundary, m: int, alpha: float = ALPHA, least: int = 5) -> int:
    """The fewest seeds (at least ``least``) at which both verdicts can fire over ``m`` points."""
    n = least
    while not all(can_fire(estimator, direction, boundary, n, m, alpha).values()):
        n += 1
        if n > 10_000:
            raise ValueError("no seed count lets this test fire")
    return n


def _critical(n: int, a: float, p0: float) -> int | None:
    """The least count k with P(Bin(n, p0) >= k) <= ``a`` (the sign/binomial test's rejection region)."""
    for k in range(n + 1):
        if _binom_sf(k, n, p0) <= a:
            return k
    return None


def minimal_detectable_effect(estimator: str, direction: str, boundary, n: int, m: int, alpha: float = ALPHA,
                              power: float = POWER, scale: float | None = None) -> dict[str, Any]:
    """The effect each verdict is detected at with ``power`` at ``n`` seeds and ``m`` in-regime
    points: ``holds`` at ``alpha``, ``fails`` at ``alpha/m`` (the hardest step of Holm).

    * median: ``q`` = the probability that a seed lands on the side tested (1/2 at the boundary);
      with ``scale`` (a per-seed standard deviation measured on the map) also the shift of a normal
      statistic, ``scale * Phi^-1(q)``, in the statistic's units;
    * proportion: the proportion's distance from the boundary;
    * mean: the shift in units of ``scale`` (standard deviations) from the noncentral t.
    ``None`` where the verdict cannot fire at all."""
    from scipy import optimize, stats

    out: dict[str, Any] = {"power": power, "seeds": n, "points": m}
    for verdict, a in (("holds", alpha), ("fails", alpha / max(m, 1))):
        if not can_fire(estimator, direction, boundary, n, m, alpha)[verdict]:
            out[verdict] = None
            continue
        if estimator == "mean":
            crit = float(stats.t.ppf(1 - a, n - 1))
            d = optimize.brentq(lambda d: float(stats.nct.sf(crit, n - 1, d * math.sqrt(n))) - power, 0.0, 100.0)
            out[verdict] = {"sd_units": d, "shift": None if scale is None else d * scale}
            continue
        side, b = _sides(direction, boundary)[0]
        if direction == "inside" and verdict == "fails":
            a = a / 2
        if estimator == "median":
            p0 = 0.5
        else:  # the counted event: a success when testing "holds" above or "fails" below
            success = (side == ">") == (verdict == "holds")
            p0 = b if success else 1 - b
        k = _critical(n, a, p0)
        q = optimize.brentq(lambda q: _binom_sf(k, n, q) - power, 1e-12, 1 - 1e-12)
        if estimator == "median":
            out[verdict] = {"q": q, "shift": None if scale is None else float(stats.norm.ppf(q)) * scale}
        else:
            p1 = q if success else 1 - q
            out[verdict] = {"proportion": p1, "distance": abs(p1 - b)}
    return out
