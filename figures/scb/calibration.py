"""SCB's minibatch SDE calibrated against real SGD (docs/papers/scb.md §3.6).

* :func:`calibration` — at the overlay preset (small batch, the SDE's regime): coverage of the SGD
  runs' (t > 0) points by the SDE's central 50/80/90% bands with run-bootstrap intervals and the
  variance ratio Var SDE / Var SGD (pooled, F interval), per correlation observable
  (:mod:`figures.calibration`); the runs are those of :func:`overlay_data` (this module)
  (one computation per process, shared with the overlay figure).
* :func:`calibration_rows` — where the approximation breaks: the same numbers over an
  (eta_A, batch) grid (:func:`figures.calibration.calibration_map`), as ``Break`` rows.
* The SDE claim of ``claims.toml`` (``sde_band_coverage``): :func:`band_coverage_statistic` (one
  run's fraction of (t > 0) points inside the SDE's central 80% band, averaged over the two
  correlation observables), :func:`sde_quantities` (the regime's step size ``eta_A m2 T``) and
  :func:`sde_theory` (fresh SDE paths: the theory's own trajectories, decided over paths).
* :func:`svag` — SVAG (Li, Malladi & Arora 2021; ``l = 1, 2, 4, 8``, :mod:`empirical.scb.svag`)
  against the full SDE solved with step ``1/16`` optimiser step: the weak error of the mean and of
  the variance of ``zeta = <V, P~>`` and ``<a, q>`` at the logged times, per ``l``, and its slope in
  ``l`` (:func:`figures.calibration.weak_error`; theory ``-1``) — a check of the SDE that does not
  use its noise model.

The SDE is the full (V, A) model (:func:`theory.scb.minibatch_sde`, derived noise, Monte-Carlo
per-sample flows); its bands come from :data:`BAND_PATHS` paths, cached per config.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import xarray as xr

import simulate
from empirical import scb as escb
from empirical.trainer import stack_runs
from theory import scb

from ..calibration import LEVELS, calibration_map, coverage, variance_ratio
from ..core import band, band_coverage

__all__ = ["calibration", "overlay_data", "ode_for", "BAND_LEVELS",
           "calibration_rows", "band_coverage_statistic", "sde_quantities", "sde_theory",
           "sde_ensemble", "null_runs", "NULL_BATCH_DIVISOR", "svag", "svag_config", "svag_json", "svag_weak_errors", "BAND_PATHS", "CLAIM_LEVEL", "MAP_GRID", "SVAG"]

#: paths of the reference ensemble whose quantiles are the bands
BAND_PATHS = 512
#: the band level the SDE claim judges (the claim decides 80)
CLAIM_LEVEL = 0.8
#: (eta_A values, batches) of the calibration map: quick, full
MAP_GRID = {True: ((0.1, 0.4), (4, 32)), False: ((0.05, 0.1, 0.2, 0.4), (2, 4, 8, 32, 128))}
#: the SVAG check's setting: the quick overlay task (N=3, T=8, Q=2, batch 32) at eta_V = eta_A =
#: ``eta`` (0.4: 0.69 of the stability bound 2/(m2 T) = 0.576, so SGD's O(eta) weak error at l = 1
#: stands well above the Monte-Carlo floor of ``runs`` runs), ``steps`` optimiser steps logged every
#: ``log_every``; the SDE at step ``dt`` (optimiser steps; Euler-Maruyama's own weak error is O(dt),
#: of the size of SVAG's at l = 1/dt, so the reference sits well below SVAG's step 1/8); ``runs`` SGD
#: runs per l and ``paths`` SDE paths (quick, full)
SVAG = {"eta": 0.4, "steps": 60, "log_every": 10, "dt": 1.0 / 64, "scales": (1, 2, 4, 8),
        "runs": {True: 512, False: 2048}, "paths": {True: 1024, False: 4096}}


@lru_cache(maxsize=16)
def sde_ensemble(config: scb.SCBConfig, paths: int = BAND_PATHS, seed: int = 0) -> xr.Dataset:
    """The full (V, A) SDE of ``config`` (``paths`` paths on ``config.ode_times()``; its compiled numba
    step, ~10x the jax engine's path-steps/s for this model), cached."""
    sde, t = scb.minibatch_sde(config)
    return simulate.solve_sde(sde, t, paths=paths, seed=seed, parameter_values=config.to_dict(), backend="numba")


def _sgd_runs(config: scb.SCBConfig, runs: int, device: str, seed: int) -> xr.Dataset:
    task = scb.make_task(config)
    return stack_runs([escb.train(config, device=device, seed=seed + 1000 + r, task=task)[0] for r in range(runs)])


def _t_min(times: np.ndarray) -> float:
    return float(times[times > 0][0])


#: nominal SDE band levels (central quantile intervals) whose coverage the overlay reports
BAND_LEVELS = (0.5, 0.8, 0.9)


def ode_for(config: scb.SCBConfig, times=None, task=None, init=None, backend: str = "diffrax") -> xr.Dataset:
    """The symmetric 4-D ODE for ``config``'s task (from ``init`` if given) at ``times``
    (default ``config.ode_times()``), with the problem's own solve options."""
    return simulate.solve(scb.problem(config, task=task, init=init, t=times), backend=backend)


def overlay_data(quick: bool = True, *, device: str = "auto", config: scb.SCBConfig | None = None, runs: int = 32,
                 paths: int = 256, seed: int = 0) -> dict[str, Any]:
    """ODE, SDE ensemble (minibatch SGD on the full (V, A), ``paths`` paths) and ``runs`` SGD runs at
    small batch (``SCBConfig.preset("overlay")``). ``coverage[level][name]``: the fraction of
    (run, t > 0) points of the SGD runs inside the SDE's central ``level`` band (t = 0 excluded:
    every run and path starts at the same point); ``coverage_se``: its standard error over runs
    (points of one run are correlated in time, so runs are the independent units; 32 runs give
    ~2-3 points, 8 runs ~5-8). Keys: ``ode, sde, sgd, coverage, coverage_se, config``."""
    return dict(_overlay_data(quick, device, config or scb.SCBConfig.preset("overlay", quick), runs, paths, seed))


@lru_cache(maxsize=4)
def _overlay_data(quick, device, cfg, runs, paths, seed) -> dict[str, Any]:
    task = scb.make_task(cfg)
    sde, t = scb.minibatch_sde(cfg)
    ens = simulate.solve_sde(sde, t, paths=paths, seed=seed, parameter_values=cfg.to_dict())
    sgd = stack_runs([escb.train(cfg, device=device, seed=seed + 1000 + r, task=task)[0] for r in range(runs)])
    ode = ode_for(cfg, t, task)
    names = list(scb.CORRELATION_OBSERVABLES)
    t_min = float(t[t > 0][0])
    per_run = {f"{lvl:g}": {n: np.array([band_coverage(ens, sgd.isel(run=[r]), n, (1 - lvl) / 2, (1 + lvl) / 2,
                                                      t_min=t_min) for r in range(runs)]) for n in names}
               for lvl in BAND_LEVELS}
    coverage = {lvl: {n: float(v.mean()) for n, v in d.items()} for lvl, d in per_run.items()}
    coverage_se = {lvl: {n: float(v.std(ddof=1) / np.sqrt(runs)) if runs > 1 else float("nan") for n, v in d.items()}
                   for lvl, d in per_run.items()}
    return {"ode": ode, "sde": ens, "sgd": sgd, "coverage": coverage, "coverage_se": coverage_se, "config": cfg}


def calibration(quick: bool = True, *, device: str = "auto", config: scb.SCBConfig | None = None, runs: int = 32,
                paths: int = 256, seed: int = 0) -> dict[str, Any]:
    """Coverage at 50/80/90% and the variance ratio per correlation observable at the overlay
    preset, on the overlay's own SDE ensemble and SGD runs. Keys: ``coverage[name][level]``
    (:class:`~figures.calibration.Coverage`), ``variance[name]``
    (:class:`~figures.calibration.VarianceRatio`), ``config``, ``runs``, ``paths``."""
    data = overlay_data(quick, device=device, config=config, runs=runs, paths=paths, seed=seed)
    ens, sgd = data["sde"], data["sgd"]
    t_min = _t_min(sgd["time"].values)
    cov = {n: coverage(ens, sgd, n, LEVELS, t_min=t_min) for n in scb.CORRELATION_OBSERVABLES}
    var = {n: variance_ratio(ens, sgd, n, t_min=t_min) for n in scb.CORRELATION_OBSERVABLES}
    return {"coverage": cov, "variance": var, "config": data["config"], "runs": runs, "paths": paths}


def calibration_json(result: dict[str, Any]) -> dict[str, Any]:
    """:func:`calibration` as plain numbers (the compare report's details)."""
    return {n: {"coverage": {f"{lvl:g}": {"value": c.coverage, "ci": [c.low, c.high]}
                             for lvl, c in result["coverage"][n].items()},
                "variance_ratio": {"pooled": result["variance"][n].pooled,
                                   "ci": [result["variance"][n].pooled_low, result["variance"][n].pooled_high]}}
            for n in result["coverage"]}


def calibration_rows(quick: bool = True, *, device: str = "auto", runs: int | None = None, paths: int = 256,
                     name: str = "attention_target_overlap", seed: int = 0) -> list[dict[str, Any]]:
    """Coverage and variance ratio over the (eta_A, batch) grid :data:`MAP_GRID` (eta_V = eta_A, the
    overlay preset otherwise), one row per cell: ``eta_A, batch, verdict`` (holds | breaks |
    inconclusive, :func:`figures.calibration.calibration_map`), ``coverage`` {level: [value, low,
    high]}, ``variance_ratio`` [pooled, low, high] and ``note``. A cell whose SDE leaves the finite
    numbers (the Euler step beyond stability) *breaks*, with the time it did so in ``note``."""
    from theory.errors import SolverError

    base = scb.SCBConfig.preset("overlay", quick)
    runs = runs if runs is not None else (16 if quick else 64)
    lrs, batches = MAP_GRID[bool(quick)]
    t_min = _t_min(np.asarray(base.ode_times()))
    rows = []
    for lr in lrs:
        for B in batches:
            cfg = base.replace(eta_V=lr, eta_A=lr, batch=B)
            try:
                (c,) = calibration_map(lambda lr_, B_: (sde_ensemble(cfg, paths, seed), _sgd_runs(cfg, runs, device, seed)),
                                       [lr], [B], name, t_min=t_min)
            except SolverError as err:
                rows.append({"eta_A": lr, "batch": B, "verdict": "breaks", "coverage": {}, "variance_ratio": None,
                             "note": f"SDE non-finite: {err}"})
                continue
            rows.append({"eta_A": lr, "batch": B, "verdict": c.verdict,
                         "coverage": {f"{lvl:g}": [v.coverage, v.low, v.high] for lvl, v in c.coverage.items()},
                         "variance_ratio": [c.variance.pooled, c.variance.pooled_low, c.variance.pooled_high],
                         "note": ""})
    return rows


# ------------------------------------------------------------------------------------------------
# The SDE claim (claims.toml: sde_band_coverage)
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=32)
def _bands(config: scb.SCBConfig, level: float) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    ens = sde_ensemble(config)
    return {n: band(ens, n, (1 - level) / 2, (1 + level) / 2) for n in scb.CORRELATION_OBSERVABLES}


def band_coverage_statistic(traj: xr.Dataset, config: scb.SCBConfig, *, level: float = CLAIM_LEVEL) -> float:
    """One run's (or one SDE path's) fraction of (t > 0) points inside the central ``level`` band
    of the SDE of ``config`` (:func:`sde_ensemble`), averaged over the two correlation observables."""
    times = traj["time"].values
    keep = times >= _t_min(times)
    out = []
    for n, (t, lo, hi) in _bands(config, float(level)).items():
        y = np.asarray(traj[n].values, float).reshape(-1)[keep]
        L, U = np.interp(times[keep], t, lo), np.interp(times[keep], t, hi)
        out.append(np.mean((y >= L) & (y <= U)))
    return float(np.mean(out))


def sde_quantities(config: scb.SCBConfig, coords) -> dict[str, float]:
    """The regime's derived quantities: ``eta_A m2 T`` (the attention step's size against its
    stability bound 2, spec §3.3)."""
    task = scb.make_task(config)
    return {"attention_step": float(config.eta_A) * float(task.m2) * float(task.T)}


#: the null control's batch divisor: SGD at batch B / NULL_BATCH_DIVISOR (NULL_BATCH_DIVISOR times the
#: gradient-noise variance) judged against the batch-B SDE band
NULL_BATCH_DIVISOR = 4


def null_runs(config: scb.SCBConfig, *, seeds, device: str = "cpu") -> list[xr.Dataset | None]:
    """The SDE claim's null control: real SGD (the claim's own train slot's runs, through
    :func:`figures.claims.train_slot_runs` as the claim's: every seed in one batched call, a diverged
    seed ``None``) at a quarter of the batch, judged by the statistic against the SDE of ``config``
    (batch B): a noise model off by a factor 4 in variance, which a calibrated band must not cover at 80%."""
    from ..claims import train_slot_runs
    from ..papers import get

    cfg = config.replace(batch=max(1, config.batch // NULL_BATCH_DIVISOR))
    return train_slot_runs(get("scb"), cfg, seeds, device)


def sde_theory(config: scb.SCBConfig, paths: int = 256) -> list[xr.Dataset]:
    """The theory's own trajectories: ``paths`` fresh SDE paths (a seed independent of the band's)."""
    ens = sde_ensemble(config, paths, seed=1)
    return [ens.isel(path=i) for i in range(ens.sizes["path"])]


# ------------------------------------------------------------------------------------------------
# SVAG (Li, Malladi & Arora 2021): weak error of SGD vs the SDE as the amplification l grows
# ------------------------------------------------------------------------------------------------
def svag_config(eta: float = SVAG["eta"]) -> scb.SCBConfig:
    """The SVAG check's config (:data:`SVAG`): the quick overlay task at ``eta_V = eta_A = eta``."""
    return scb.SCBConfig.preset("overlay", True).replace(eta_V=eta, eta_A=eta, steps=SVAG["steps"],
                                                         log_every=SVAG["log_every"])


@lru_cache(maxsize=4)
def svag(quick: bool = True, *, eta: float = SVAG["eta"], scales=SVAG["scales"], runs: int | None = None,
         paths: int | None = None, dt: float = SVAG["dt"], names=scb.CORRELATION_OBSERVABLES, seed: int = 0,
         boot: int = 500) -> dict[str, Any]:
    """SVAG runs (:func:`empirical.scb.svag.svag_runs`, amplification ``l`` in ``scales``, ``runs``
    each, seed ``seed + 1 + l``) against ``paths`` paths of the full (V, A) SDE
    (:func:`theory.scb.minibatch_sde`) integrated with step ``dt`` (in optimiser steps; well below
    SVAG's ``1/max l`` so the SDE's own discretisation does not blur the slope), both on
    :func:`svag_config` ``(eta)`` at its logged times ``t > 0``. Per observable in ``names``:
    ``{"mean": WeakError, "variance": WeakError}`` (:func:`figures.calibration.weak_error`, metric
    ``mean``; ``variance``: test function ``(x - m(t))^2``, ``m`` the SDE's mean at each time), plus
    ``"setting"`` (the numbers that define the check). Float64; same seed -> same numbers. Cached
    per argument set (the report's details and :func:`~figures.scb.figures.fig_svag` share one
    computation; treat the result as read-only)."""
    from empirical.scb.svag import svag_runs

    runs = int(runs or SVAG["runs"][bool(quick)])
    paths = int(paths or SVAG["paths"][bool(quick)])
    cfg = svag_config(eta)
    task = scb.make_task(cfg)
    model, t = scb.minibatch_sde(cfg)
    ens = simulate.solve_sde(model, t, paths=paths, seed=seed, dt=dt, parameter_values=cfg.to_dict(),
                             backend="numba")
    sgd = {int(l): svag_runs(cfg, runs, l=int(l), seed=seed + 1 + int(l), task=task) for l in scales}
    out: dict[str, Any] = {"setting": {"N": cfg.N, "T": cfg.T, "Q": cfg.Q, "batch": cfg.batch, "eta_V": cfg.eta_V,
                                       "eta_A": cfg.eta_A, "attention_step": float(cfg.eta_A) * task.m2 * task.T,
                                       "steps": cfg.steps, "times": [float(x) for x in np.asarray(t)[np.asarray(t) > 0]],
                                       "runs": runs, "paths": paths, "sde_dt": dt, "scales": [int(l) for l in scales],
                                       "seed": seed}}
    return {**out, **svag_weak_errors(sgd, ens, names, boot=boot, seed=seed)}


def svag_weak_errors(sgd: dict[int, xr.Dataset], ens: xr.Dataset, names=scb.CORRELATION_OBSERVABLES, *,
                     boot: int = 500, seed: int = 0) -> dict[str, dict[str, Any]]:
    """The weak errors of :func:`svag` from its runs ``sgd[l]`` (dims ``(run, time)``) and an SDE
    ensemble ``ens`` (dims ``(path, time)``) on the same times (``t > 0`` judged): per observable,
    ``{"mean": WeakError, "variance": WeakError}``."""
    from ..calibration import weak_error

    t = np.asarray(ens["time"].values)
    keep = t > 0
    out = {}
    for n in names:
        Z = np.asarray(ens[n].values, float)[:, keep]
        S = {l: np.asarray(tr[n].values, float)[:, keep] for l, tr in sgd.items()}
        m = Z.mean(0)
        out[n] = {"mean": weak_error(S, Z, metric="mean", boot=boot, seed=seed),
                  "variance": weak_error(S, Z, f=lambda x, m=m: (x - m) ** 2, metric="mean", boot=boot, seed=seed)}
    return out


def svag_json(result: dict[str, Any]) -> dict[str, Any]:
    """:func:`svag` as plain numbers (the compare report's ``details["sde_calibration"]["svag"]``),
    each weak error with its :func:`~figures.calibration.weak_order_verdict`."""
    from ..calibration import weak_order_verdict

    return {k: (v if k == "setting" else {s: {**w.to_json(), "verdict": weak_order_verdict(w)} for s, w in v.items()})
            for k, v in result.items()}
