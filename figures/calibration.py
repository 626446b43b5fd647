"""Calibration of an SDE ensemble against real SGD runs, and SVAG's weak error.

Inputs are Trajectories: an SDE ensemble with dims ``(path, time)`` and SGD runs with dims
``(run, time)`` (``simulate.solve_sde`` / the Trainer on ``config.ode_times()``); the SDE is
interpolated per path onto the runs' times. The first logged time is excluded by default (every
run and path starts at the same point there, so it says nothing).

* :func:`coverage` — the fraction of (run, t) points inside the SDE's central ``level`` band
  (:func:`figures.core.band`: distribution-free order statistics) at 50/80/90%, with a confidence
  interval: ``"bootstrap"`` (default) resamples *runs* — the independent units; points of one run
  are correlated in time — or ``"binomial"`` (Clopper–Pearson over all points, which treats them
  as independent: too narrow when they are correlated; for comparison).
* :func:`variance_ratio` — ``Var_SDE / Var_SGD`` per time with an F interval (normal data; with
  ``n_paths - 1`` and ``n_runs - 1`` degrees of freedom) and a pooled ratio
  ``Σ_t Var_SDE / Σ_t Var_SGD`` with an F interval on Satterthwaite degrees of freedom
  ``2 S² / Var_jackknife(S)`` per side (runs and paths left out one at a time: time correlation
  and heavy tails lower the degrees of freedom). Measured hit rates of the nominal 90% pooled
  interval with 20 runs: 0.90 (independent normal times), 0.88 (random walks), 0.86 (t₅ tails);
  a percentile bootstrap of the same ratio held the truth only 0.77 of the time.
* :func:`calibration_map` — "where the approximation breaks": coverage and variance ratio over an
  (lr, batch) grid; each cell *holds* when every level's coverage interval lies within
  ``nominal ± tolerance``, *breaks* when some interval misses that window
  entirely, else *inconclusive*; rows convert to :class:`figures.report.Break`.
* :func:`weak_error` — SVAG (:mod:`empirical.svag`) against the SDE at fixed times, for
  amplifications ``l``: the error per ``l`` and the fitted slope of ``log error`` vs ``log l``
  with a bootstrap interval (theory: slope -1, order-1 weak convergence);
  :func:`weak_order_verdict` decides it; :func:`plot_weak_error` draws one on log-log axes (the
  papers' SVAG figures).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr
from scipy import stats

from theory.errors import ConfigError

from .core import band

__all__ = ["Coverage", "coverage", "VarianceRatio", "variance_ratio", "CalibrationCell", "calibration_map",
           "WeakError", "weak_error", "weak_order_verdict", "plot_weak_error", "LEVELS"]

#: the issue's band levels
LEVELS = (0.5, 0.8, 0.9)


def _runs_matrix(runs: xr.Dataset, name: str) -> tuple[np.ndarray, np.ndarray]:
    if name not in runs:
        raise ConfigError("observable", f"{name!r} is not in the SGD runs")
    da = runs[name]
    if "run" not in da.dims:
        raise ConfigError("runs", f"the SGD runs need a 'run' dim (got {da.dims})")
    return runs["time"].values, da.transpose("run", "time").values


def _paths_on(sde: xr.Dataset, name: str, times: np.ndarray) -> np.ndarray:
    """(paths, len(times)): each SDE path interpolated onto ``times`` (NaN outside its span)."""
    if name not in sde:
        raise ConfigError("observable", f"{name!r} is not in the SDE ensemble")
    ts = sde["time"].values
    Y = sde[name].transpose("path", "time").values
    if ts.shape == times.shape and np.allclose(ts, times, rtol=1e-12, atol=0):
        return Y
    return np.stack([np.interp(times, ts, y, left=np.nan, right=np.nan) for y in Y])


def _keep(times: np.ndarray, t_min: float | None) -> np.ndarray:
    return times > times[0] if t_min is None else times >= t_min


# ------------------------------------------------------------------------------------------------
# Coverage
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Coverage:
    """Coverage of SGD points by the SDE's central ``level`` band: ``coverage`` (fraction of
    (run, t) points inside), its ``confidence`` interval ``[low, high]`` (``interval`` method),
    ``per_run`` fractions, ``n_points`` judged."""

    level: float
    coverage: float
    low: float
    high: float
    confidence: float
    interval: str
    per_run: np.ndarray = field(repr=False)
    n_points: int

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "coverage": self.coverage, "low": self.low, "high": self.high,
                "confidence": self.confidence, "interval": self.interval, "n_runs": int(self.per_run.size),
                "n_points": self.n_points}


def _bootstrap_mean_ci(x: np.ndarray, confidence: float, seed: int) -> tuple[float, float]:
    if x.size < 2 or np.all(x == x[0]):
        return float(x.mean()), float(x.mean())  # no spread to resample (degenerate interval)
    res = stats.bootstrap((x,), np.mean, confidence_level=confidence, method="percentile", n_resamples=2000,
                          random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def coverage(sde: xr.Dataset, runs: xr.Dataset, name: str, levels: Sequence[float] = LEVELS, *,
             t_min: float | None = None, confidence: float = 0.9, interval: str = "bootstrap",
             seed: int = 0) -> dict[float, Coverage]:
    """Coverage per ``level`` (module docstring); ``t_min``: first time judged (default: every
    time after the first)."""
    if interval not in ("bootstrap", "binomial"):
        raise ConfigError("interval", f"must be 'bootstrap' or 'binomial', got {interval!r}")
    times, Y = _runs_matrix(runs, name)
    keep = _keep(times, t_min)
    sub = xr.Dataset({name: (("path", "time"), _paths_on(sde, name, times))}, coords={"time": times})
    out = {}
    for level in levels:
        if not 0 < level < 1:
            raise ConfigError("levels", f"a band level must lie in (0, 1), got {level}")
        _, lo, hi = band(sub, name, (1 - level) / 2, (1 + level) / 2)
        inside = (Y >= lo) & (Y <= hi)
        inside = inside[:, keep]
        per_run = inside.mean(1)
        k, n = int(inside.sum()), int(inside.size)
        if interval == "binomial":
            ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
            low, high = float(ci.low), float(ci.high)
        else:
            low, high = _bootstrap_mean_ci(per_run, confidence, seed)
        out[float(level)] = Coverage(float(level), k / n, low, high, confidence, interval, per_run, n)
    return out


# ------------------------------------------------------------------------------------------------
# Variance ratio
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VarianceRatio:
    """``Var_SDE / Var_SGD`` of one observable: per time (``time``, ``ratio``, F interval ``low``,
    ``high``) and pooled over time (``pooled`` with its jackknife-Satterthwaite F interval)."""

    time: np.ndarray
    ratio: np.ndarray
    low: np.ndarray
    high: np.ndarray
    pooled: float
    pooled_low: float
    pooled_high: float
    confidence: float
    n_paths: int
    n_runs: int

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time.tolist(), "ratio": self.ratio.tolist(), "low": self.low.tolist(),
                "high": self.high.tolist(), "pooled": self.pooled, "pooled_low": self.pooled_low,
                "pooled_high": self.pooled_high, "confidence": self.confidence, "n_paths": self.n_paths,
                "n_runs": self.n_runs}


def _sum_of_variances(X: np.ndarray) -> tuple[float, float]:
    """``S = Σ_t Var_t`` of the rows of ``X`` (n, T) and its Satterthwaite degrees of freedom
    ``2 S² / Var_jk(S)`` (leave-one-row-out jackknife, in closed form)."""
    n = X.shape[0]
    v = X.var(0, ddof=1)
    S = float(v.sum())
    if n < 3:
        return S, float(n - 1) * X.shape[1]
    loo = (((n - 1) * v)[None, :] - n / (n - 1) * (X - X.mean(0)) ** 2) / (n - 2)
    Sl = loo.sum(1)
    var_jk = (n - 1) / n * float(((Sl - Sl.mean()) ** 2).sum())
    return S, (2 * S**2 / var_jk if var_jk > 0 else float("inf"))


def variance_ratio(sde: xr.Dataset, runs: xr.Dataset, name: str, *, t_min: float | None = None,
                   confidence: float = 0.9) -> VarianceRatio:
    """``Var_SDE / Var_SGD`` over time (module docstring). Needs >= 2 runs and paths."""
    times, Y = _runs_matrix(runs, name)
    X = _paths_on(sde, name, times)
    keep = _keep(times, t_min)
    X, Y, times = X[:, keep], Y[:, keep], times[keep]
    n1, n2 = X.shape[0], Y.shape[0]
    if n1 < 2 or n2 < 2:
        raise ConfigError("runs", f"a variance ratio needs >= 2 paths and runs, got {n1} and {n2}")
    v1, v2 = X.var(0, ddof=1), Y.var(0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = v1 / v2
    a = 1 - confidence
    low = r / stats.f.ppf(1 - a / 2, n1 - 1, n2 - 1)
    high = r / stats.f.ppf(a / 2, n1 - 1, n2 - 1)
    (S1, d1), (S2, d2) = _sum_of_variances(X), _sum_of_variances(Y)
    pooled = S1 / S2
    p_lo, p_hi = pooled / stats.f.ppf(1 - a / 2, d1, d2), pooled / stats.f.ppf(a / 2, d1, d2)
    return VarianceRatio(times, r, low, high, float(pooled), float(p_lo), float(p_hi), confidence, n1, n2)


# ------------------------------------------------------------------------------------------------
# Where the approximation breaks
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CalibrationCell:
    """One (lr, batch) cell of :func:`calibration_map`."""

    lr: float
    batch: int
    observable: str
    coverage: Mapping[float, Coverage]
    variance: VarianceRatio
    tolerance: float
    verdict: str  # "holds" | "breaks" | "inconclusive"

    def to_break(self):
        """The row as a :class:`figures.report.Break` (the numbers in ``setting``)."""
        from .report import Break

        setting = {"lr": self.lr, "batch": self.batch, "observable": self.observable,
                   **{f"coverage_{lvl:g}": c.coverage for lvl, c in self.coverage.items()},
                   **{f"coverage_{lvl:g}_ci": [c.low, c.high] for lvl, c in self.coverage.items()},
                   "variance_ratio": self.variance.pooled,
                   "variance_ratio_ci": [self.variance.pooled_low, self.variance.pooled_high]}
        within = {"holds": True, "breaks": False}.get(self.verdict)
        return Break("(lr, batch)", setting, {}, within,
                     f"SDE band coverage {self.verdict} within +-{self.tolerance:g} of nominal")


def _verdict(cov: Mapping[float, Coverage], tol: float) -> str:
    states = []
    for level, c in cov.items():
        if c.low >= level - tol and c.high <= level + tol:
            states.append("holds")
        elif c.high < level - tol or c.low > level + tol:
            states.append("breaks")
        else:
            states.append("inconclusive")
    if "breaks" in states:
        return "breaks"
    return "holds" if all(s == "holds" for s in states) else "inconclusive"


def calibration_map(cell: Callable[[float, int], tuple[xr.Dataset, xr.Dataset]], lrs: Iterable[float],
                    batches: Iterable[int], name: str, *, levels: Sequence[float] = LEVELS,
                    tolerance: float = 0.05, confidence: float = 0.9, t_min: float | None = None,
                    seed: int = 0) -> list[CalibrationCell]:
    """Coverage and variance ratio on every ``(lr, batch)``: ``cell(lr, batch) -> (sde, runs)``
    returns the SDE ensemble and the SGD runs of that setting. ``tolerance``: the coverage window
    ``nominal ± tolerance``."""
    rows = []
    for lr in lrs:
        for B in batches:
            sde, runs = cell(float(lr), int(B))
            cov = coverage(sde, runs, name, levels, t_min=t_min, confidence=confidence, seed=seed)
            var = variance_ratio(sde, runs, name, t_min=t_min, confidence=confidence)
            rows.append(CalibrationCell(float(lr), int(B), name, cov, var, tolerance, _verdict(cov, tolerance)))
    return rows


# ------------------------------------------------------------------------------------------------
# SVAG weak error
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WeakError:
    """Weak error of SVAG vs the SDE: ``scales`` (the ``l``), ``error`` per ``l`` with its bootstrap
    interval, ``difference`` (l, time) the signed per-time statistic, and the slope of
    ``log error`` vs ``log l`` (theory -1) with its bootstrap interval."""

    scales: np.ndarray
    error: np.ndarray
    error_low: np.ndarray
    error_high: np.ndarray
    difference: np.ndarray
    slope: float
    slope_low: float
    slope_high: float
    metric: str
    confidence: float

    def to_json(self) -> dict[str, Any]:
        return {"scales": self.scales.tolist(), "error": self.error.tolist(), "error_low": self.error_low.tolist(),
                "error_high": self.error_high.tolist(), "slope": self.slope, "slope_low": self.slope_low,
                "slope_high": self.slope_high, "metric": self.metric, "confidence": self.confidence}


def _w1(a: np.ndarray, b: np.ndarray, q: np.ndarray) -> np.ndarray:
    """1-D Wasserstein distance per column: the mean |quantile difference| on the grid ``q``."""
    return np.abs(np.quantile(a, q, axis=0) - np.quantile(b, q, axis=0)).mean(0)


def _errors(svag: Sequence[np.ndarray], sde: np.ndarray, metric: str, q: np.ndarray):
    """(errors (L,), per-time statistics (L, T))."""
    if metric == "mean":
        m0 = sde.mean(0)
        d = np.stack([s.mean(0) - m0 for s in svag])
        var0 = sde.var(0, ddof=1) / sde.shape[0]
        # squared error debiased by the Monte-Carlo variance of the difference of the two means
        noise = np.stack([s.var(0, ddof=1) / s.shape[0] + var0 for s in svag])
        e2 = (d**2 - noise).mean(1)
        return np.sqrt(np.maximum(e2, 0.0)), d
    d = np.stack([_w1(s, sde, q) for s in svag])
    return d.mean(1), d


def _slope(scales: np.ndarray, err: np.ndarray) -> float:
    ok = err > 0
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(scales[ok]), np.log(err[ok]), 1)[0])


def weak_error(svag: Mapping[int, np.ndarray], sde: np.ndarray, *, f: Callable[[np.ndarray], np.ndarray] | None = None,
               metric: str = "mean", confidence: float = 0.9, boot: int = 500, seed: int = 0) -> WeakError:
    """Weak error of SVAG runs against SDE paths at fixed times.

    ``svag[l]``: (runs, T) observable values of SVAG with amplification ``l`` at the chosen times;
    ``sde``: (paths, T) at the same times (solve the SDE with a step well below ``Δτ/max l`` so
    its own weak error does not blur the slope). ``f``: test function applied elementwise first
    (default identity). ``metric``:

    * ``"mean"`` — ``e_l = sqrt(mean_t (ΔE f)² - MC variance)``: the RMS over times of the mean
      difference, its square debiased by the Monte-Carlo variance of the two sample means (so
      ``e_l`` estimates the true weak error; 0 when the data cannot resolve it);
    * ``"wasserstein"`` — the mean over times of the 1-D Wasserstein distance (quantile grid of
      199 points); it has a Monte-Carlo floor of order ``1/sqrt(n)`` that flattens the slope.

    The interval of each ``e_l`` and of the slope: percentile bootstrap, runs and paths resampled."""
    if metric not in ("mean", "wasserstein"):
        raise ConfigError("metric", f"must be 'mean' or 'wasserstein', got {metric!r}")
    if len(svag) < 2:
        raise ConfigError("svag", "a slope needs at least two amplifications l")
    f = (lambda x: x) if f is None else f
    scales = np.array(sorted(svag), dtype=float)
    S = [np.asarray(f(np.asarray(svag[int(l)], float))) for l in scales]
    Z = np.asarray(f(np.asarray(sde, float)))
    S = [s.reshape(s.shape[0], -1) for s in S]
    Z = Z.reshape(Z.shape[0], -1)
    q = np.linspace(0.005, 0.995, 199)
    err, diff = _errors(S, Z, metric, q)
    rng = np.random.default_rng(seed)
    reps = np.empty((boot, len(scales)))
    slopes = np.empty(boot)
    for b in range(boot):
        Sb = [s[rng.integers(0, s.shape[0], s.shape[0])] for s in S]
        Zb = Z[rng.integers(0, Z.shape[0], Z.shape[0])]
        reps[b], _ = _errors(Sb, Zb, metric, q)
        slopes[b] = _slope(scales, reps[b])
    a = 1 - confidence
    lo, hi = np.quantile(reps, [a / 2, 1 - a / 2], axis=0)
    slopes = slopes[np.isfinite(slopes)]
    s_lo, s_hi = (np.quantile(slopes, [a / 2, 1 - a / 2]) if slopes.size else (np.nan, np.nan))
    return WeakError(scales, err, lo, hi, diff, _slope(scales, err), float(s_lo), float(s_hi), metric, confidence)


def weak_order_verdict(w: WeakError) -> str:
    """SVAG's theorem (weak error ``O(1/l)``) decided on the slope's interval: ``"fails"`` when the
    whole interval lies above ``-1`` (the error shrinks significantly slower than ``1/l``, e.g. a
    plateau: SGD's weak limit is not this SDE), ``"holds"`` when it reaches ``-1`` or below and
    lies below 0 (a resolved decrease at the theorem's order or faster — a steeper slope is a
    higher-order term still large at small ``l``, within the ``O(1/l)`` bound), else
    ``"inconclusive"`` (no decrease resolved, or no slope)."""
    if not (np.isfinite(w.slope_low) and np.isfinite(w.slope_high)):
        return "inconclusive"
    if w.slope_low > -1:
        return "fails"
    return "holds" if w.slope_high < 0 else "inconclusive"


def plot_weak_error(ax, w: WeakError, *, label: str, color: str, marker: str = "o", reference: bool = True,
                    reference_label: str = "slope -1 (theory)") -> None:
    """Draw ``w`` on ``ax`` (log-log, base-2 ``l``): the errors with their bootstrap intervals
    (``label``), the fitted power law (dashed; ``label``, its slope and interval in the legend)
    and, with ``reference``, slope ``-1`` through the first resolved point (dash-dot). Errors of 0
    (not resolved by the data) are not drawn. Axis labels are the caller's."""
    from . import style

    ok = w.error > 0
    yerr = np.maximum(np.vstack([w.error - w.error_low, w.error_high - w.error]), 0)
    pct = f"{100 * w.confidence:.0f}%"
    ax.plot(w.scales[ok], w.error[ok], marker, ls="none", color=color, ms=4, label=f"{label} ({pct} bootstrap)")
    ax.errorbar(w.scales[ok], w.error[ok], yerr=yerr[:, ok], fmt="none", ecolor=color)
    if ok.sum() >= 2 and np.isfinite(w.slope):
        c = np.exp(np.mean(np.log(w.error[ok]) - w.slope * np.log(w.scales[ok])))
        ax.plot(w.scales, c * w.scales**w.slope, color=color, linestyle="--", linewidth=1.2,
                label=f"{label} fit: slope {w.slope:.2f} [{w.slope_low:.2f}, {w.slope_high:.2f}]")
        if reference:
            ax.plot(w.scales, w.error[ok][0] * (w.scales / w.scales[ok][0]) ** -1.0, **style.role("reference"),
                    label=reference_label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
