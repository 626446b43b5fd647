"""Scan & Snap's headline claims, decided over seeds inside the paper's regime (issue 19).

``claims`` (the row's ``claims`` slot) decides the registry ``claims.toml`` beside this module with
:mod:`figures.claims` (docs/claims.md), then appends the real-text claims (Figs. 7 and 10,
:func:`.text.text_claim_results`): every claim's statement, regime, criterion (with its
derivation), falsifier and validity map are data there. This module holds the functions the
registry names:

* regime quantities (:func:`claim_quantities`): the learning-rate ratio (Assumption 1(c)), the
  overlap eigenvalues of ``E = F^T F - I`` against Assumption 2's bounds, and Theorem 4's
  large-t condition ``4 Gamma(t0)/C_0``; and :func:`promised_error`, the explicit part of the
  error Theorem 1 allows the reduction;
* batched runs (every seed of a map point in one call of the count-vector engine,
  :func:`empirical.scan_snap.experiment.train_seeds`), the theory's trajectory and the statistic,
  per claim: ``reduced_ode_matches_training`` (:func:`reduced_runs`, :func:`reduced_theory`,
  :func:`reduced_error`), ``scan_then_snap`` (:func:`snap_runs`, :func:`snap_theory`,
  :func:`snap_deceleration`), ``entropy_falls_with_eta_z`` (the old ``entropy_falls_with_eta_Z``; names are lower_snake_case) (:func:`fig6_runs`,
  :func:`fig6_theory`, :func:`entropy_slope`);
* :func:`reduced_table`: the reduced claim's map next to the exact T = inf flow (the compare
  report's ``reduced_grid`` details: whether a gap is the reduction's or the network's);
  :func:`snap_table` likewise for the snap claim, beside Theorem 4's closed form (``snap_grid``).

Time is per-sample time (``config.ode_time``); horizons of the reduced claim count units of
``1/eta_Z``, windows of the snap claim units of ``t0 = 2 K ln M / eta_Y`` (Theorem 4).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import xarray as xr

from figures.claims import registry_claims
from theory import scan_snap as ss

__all__ = ["claims", "decide_registry", "claim_quantities", "overlap_eigenvalues", "promised_error", "eta_Z_time_config",
           "reduced_runs", "reduced_theory", "reduced_error", "snap_runs", "snap_theory", "snap_deceleration",
           "fig6_runs", "fig6_theory", "entropy_slope", "reduced_table", "snap_table", "LOG_PER_UNIT"]

#: the registry beside this module, decided over seeds with its maps (sweep cells: store, resume)
decide_registry = registry_claims("scan-snap")


def claims(*, quick: bool = True, device: str = "auto", progress: bool = False, only=None) -> list:
    """The row's ``claims`` slot: the registry's claims followed by the real-text claims of
    :mod:`.text` (``text_claims.toml``, decided on the WikiText protocol's runs; none without a
    corpus). ``only`` names registry claims (decided alone, no real-text runs)."""
    from .text import text_claim_results

    out = list(decide_registry(quick=quick, device=device, progress=progress, only=only))
    claims.skipped = list(decide_registry.skipped)  # type: ignore[attr-defined]
    return out if only else [*out, *text_claim_results(quick, device)]


claims.registry = decide_registry.registry  # type: ignore[attr-defined]
claims.skipped = []  # type: ignore[attr-defined]

#: log points per unit of 1/eta_Z in the reduced claim's runs
LOG_PER_UNIT = 4


# ------------------------------------------------------------------------------------------------
# The regime: Assumption 1(c), Assumption 2, Theorem 4's large-t condition
# ------------------------------------------------------------------------------------------------
def _overlap(config) -> np.ndarray:
    """``E = F^T F - I`` (K, K) at the initial attention (z = 0: ``f_n = P(.|n)/|P(.|n)|``)."""
    task = ss.make_task(config)
    F = task.P / np.linalg.norm(task.P, axis=1, keepdims=True)
    return F @ F.T - np.eye(task.K)


def overlap_eigenvalues(config) -> np.ndarray:
    """Eigenvalues of ``E`` (Assumption 2: ``|lambda_1| < 1/K`` and ``|lambda_i| >= sqrt(6/M)``)."""
    return np.linalg.eigvalsh(_overlap(config))


def promised_error(config) -> float:
    """The explicit part of the relative error Theorem 1 allows the reduced attention velocity:
    ``beta_nn' = (1 + sigma)[E'_nn' (1 + delta_1) + delta_3]`` with ``|delta_3| < 3/M`` and, at
    T = inf (no sampling error theta), ``delta_1 = q_1 - 1 = 1/(M - 1)``; relative to the kept
    ``E'_nn'`` that is ``1/(M - 1) + 3/(M min_{n != n'} |E'_nn'|)``, ``E' = I - (I + E)^{-1}``
    (spec §3.1). ``sigma`` (Corollary 1) vanishes as t grows and is not counted."""
    E = _overlap(config)
    K, M = E.shape[0], config.M_theory
    Ep = np.eye(K) - np.linalg.inv(np.eye(K) + E)
    off = np.abs(Ep[~np.eye(K, dtype=bool)])
    return 1.0 / (M - 1) + (3.0 / (M * off.min()) if off.size and off.min() > 0 else math.inf)


def claim_quantities(config, coords) -> dict:
    """Derived regime quantities: ``ratio`` = eta_Y/eta_Z; ``K_lambda_max`` = K max|lambda(E)|
    (Assumption 2 needs < 1); ``lambda_min_over_bound`` = min|lambda(E)|/sqrt(6/M) (>= 1);
    ``snap_validity`` = 4 Gamma(t0)/C_0 (Theorem 4's ln ln branch needs Gamma to dominate C_0)."""
    lam = np.abs(overlap_eigenvalues(config))
    M, K = config.M_theory, config.K
    t0 = ss.transition_times(M, K, config.eta_Y)[1]
    gamma = float(ss.Gamma_of_t(t0, M, K, config.eta_Y, config.eta_Z))
    return {"ratio": config.eta_Y / config.eta_Z, "K_lambda_max": float(K * lam.max()),
            "lambda_min_over_bound": float(lam.min() / math.sqrt(6.0 / M)), "snap_validity": 4 * gamma / config.C0}


def _z_names(config) -> list[str]:
    return [f"z_dt_{j}" for j in range(config.num_unique_per_next)] + (["z_c"] if config.num_common else [])


# ------------------------------------------------------------------------------------------------
# reduced_ode_matches_training
# ------------------------------------------------------------------------------------------------
def eta_Z_time_config(config):
    """The run behind a point of the reduced claim: its protocol gives the horizon ``steps`` in
    units of ``1/eta_Z`` (one protocol for every eta_Z on the map); this is the config that trains
    ``ceil(steps / eta_Z)`` optimiser steps, logging :data:`LOG_PER_UNIT` times per unit."""
    if config.optimizer != "sgd" or config.momentum != 0:
        raise ValueError("the reduced claim's time conversion is for plain SGD (t = step)")
    return config.replace(steps=int(math.ceil(config.steps / config.eta_Z - 1e-9)),
                          log_every=max(1, int(round(1.0 / (LOG_PER_UNIT * config.eta_Z)))))


def reduced_runs(config, *, seeds, device="cpu"):
    """Every seed of a point of the reduced claim (:func:`eta_Z_time_config`), in one call."""
    from empirical.scan_snap.experiment import train_seeds

    return train_seeds(eta_Z_time_config(config), seeds=seeds, device=device, attention_only=True)


@lru_cache(maxsize=32)
def _reduced_solution(config):
    """The reduced Lemma-4 system from zero init at the runs' times (cached per config)."""
    from .compare import reduced_trajectory

    run = eta_Z_time_config(config)
    return reduced_trajectory(run, run.ode_times())


def reduced_theory(config):
    """The theory's own trajectory: the reduced ODE (Lemma 4 / Eqn. 10 with gamma(t) from h)."""
    return _reduced_solution(config)


def reduced_error(traj, config, *, horizon) -> float:
    """How far the z coordinates' increments over the late window ``[H/2, H]`` (``H = horizon /
    eta_Z``) depart from the reduced ODE's, in units of the error Theorem 1 promises:
    ``|dz_red - dz| / |dz| / promised_error``, ``dz(t) = z(t) - z(H/2)`` over ``z_dt_j`` and
    ``z_c`` and the window's logged times. NaN where the run diverged."""
    names = _z_names(config)
    t = traj["time"].values
    H = horizon / config.eta_Z
    keep = (t >= H / 2 * (1 - 1e-9)) & (t <= H * (1 + 1e-9))
    if keep.sum() < 2:
        return float("nan")
    red = _reduced_solution(config)
    z = np.stack([traj[n].values[keep] for n in names])
    zr = np.stack([np.interp(t[keep], red["time"].values, red[n].values) for n in names])
    dz, dr = z - z[:, :1], zr - zr[:, :1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.linalg.norm(dr - dz) / np.linalg.norm(dz) / promised_error(config))


def _beside_flow(result, window: str, label: str, statistic: str, flow_config, columns) -> list[dict]:
    """A claim's map beside the exact T = inf flow (one solve per (common_prob, eta_Z), from zero
    init at ``flow_config(config)``'s times): per point the coordinates (``window``, the statistic's
    axis, as ``label``), the training's ``statistic`` (mean over seeds, interval, verdict) and
    ``columns(config, flow, window value)``."""
    from .compare import theory_trajectory

    rows, flows = [], {}
    for p in result.points:
        c = dict(p.coords)
        cfg = result.spec.protocol.config(ss.Config, result.quick).with_overrides(
            [f"{k}={v!r}" for k, v in c.items() if k != window])
        key = (cfg.common_prob, cfg.eta_Z)
        if key not in flows:
            run = flow_config(cfg).replace(zero_init=True)
            flows[key] = theory_trajectory(run, run.ode_times())
        d = p.decision
        rows.append({"common_prob": cfg.common_prob, "eta_Y/eta_Z": cfg.eta_Y / cfg.eta_Z, label: c[window],
                     "inside_regime": p.inside, f"training_{statistic}": None if d is None else d.estimate,
                     "interval": None if d is None else list(d.interval), "verdict": p.verdict,
                     **columns(cfg, flows[key], c[window])})
    return rows


def reduced_table(result) -> list[dict]:
    """The reduced claim's map beside the exact T = inf flow: per point (common_prob, ratio,
    horizon) the training's statistic (mean over seeds and its interval), the exact flow's and the
    promised error. Where the flow fails as the network does, the gap is the reduction's."""
    return _beside_flow(result, "horizon", "horizon_eta_Z_t", "error_over_promised", eta_Z_time_config,
                        lambda cfg, flow, h: {"exact_flow_error_over_promised": reduced_error(flow, cfg, horizon=h),
                                              "promised_error": promised_error(cfg)})


# ------------------------------------------------------------------------------------------------
# scan_then_snap
# ------------------------------------------------------------------------------------------------
def snap_runs(config, *, seeds, device="cpu"):
    """Every seed of a point of the snap claim in one call (attention logged every step)."""
    from empirical.scan_snap.experiment import train_seeds

    return train_seeds(config, seeds=seeds, device=device, attention_only=True)


def snap_theory(config):
    """Theorem 4's own trajectory: the common-token logit of the 1-D snap ODE, ``z_ct(t) =
    -1/4 ln(1 + 4 Gamma(t)/C_0) = -B_n(t)`` (Eqn. 122, 124, 128; Decision 5), at the run's times."""
    t = config.ode_times()
    G = ss.Gamma_of_t(t, config.M_theory, config.K, config.eta_Y, config.eta_Z)
    return xr.Dataset({"z_c": ("time", -0.25 * np.log1p(4 * G / config.C0))}, coords={"time": t})


def snap_deceleration(traj, config, *, start) -> float:
    """The common-token logit's fall over the half-decade ``[sqrt(10) a, 10 a]`` over its fall over
    ``[a, sqrt(10) a]``, ``a = start * t0``, ``t0 = 2 K ln M / eta_Y`` (Theorem 4). Below 1: the
    fall decelerates in log-time (a snap); NaN where the logit does not fall over the first
    half-decade or the run is shorter than ``10 a``."""
    t0 = ss.transition_times(config.M_theory, config.K, config.eta_Y)[1]
    a = start * t0
    t = traj["time"].values
    if 10 * a > t[-1] * (1 + 1e-9):
        return float("nan")
    zc = np.interp([a, math.sqrt(10) * a, 10 * a], t, traj["z_c"].values)
    first, second = zc[0] - zc[1], zc[1] - zc[2]
    return float(second / first) if first > 0 else float("nan")


def snap_table(result) -> list[dict]:
    """The snap claim's map beside the exact T = inf flow and Theorem 4's closed form: per point
    (common_prob, ratio, window start) the training's fall ratio (mean over seeds, its interval,
    verdict), the exact flow's from zero init on the runs' times and Theorem 4's (:func:`snap_theory`).
    Where the exact flow's ratio is the training's, a failure is Theorem 4's 1-D snap ODE missing
    the flow at those times, not SGD's noise or the finite T."""
    return _beside_flow(result, "start", "start_over_t0", "fall_ratio", lambda cfg: cfg,
                        lambda cfg, flow, a: {"exact_flow_fall_ratio": snap_deceleration(flow, cfg, start=a),
                                              "theorem_4_fall_ratio": snap_deceleration(snap_theory(cfg), cfg, start=a)})


# ------------------------------------------------------------------------------------------------
# entropy_falls_with_eta_Z (Fig. 6)
# ------------------------------------------------------------------------------------------------
def _fig6_etas():
    from .fig6 import FIG6_GRID

    return list(FIG6_GRID["eta_Z"])


def fig6_runs(config, *, seeds, device="cpu"):
    """Fig. 6 at the point's ratio ``eta_Y/eta_Z`` (of ``config``): every eta_Z of the official grid
    x ``seeds`` runs in one call of the count-vector engine (run (seed s, k-th eta_Z) draws from
    ``numpy.random.default_rng([s, k])``). Returns ``dt_entropy`` at the last step, dims
    ``(seed, eta_Z)``; NaN for every run of the call when one diverges."""
    from empirical.scan_snap.fast import CountSGD
    from theory.errors import DivergenceError

    seeds = [int(s) for s in seeds]
    etas = _fig6_etas()
    ratio = config.eta_Y / config.eta_Z
    task = ss.make_task(config)
    pairs = [(s, k) for s in seeds for k in range(len(etas))]
    eng = CountSGD(task, [ratio * etas[k] for _, k in pairs], [etas[k] for _, k in pairs], batch=config.batch,
                   momentum=config.momentum, zero_init=config.zero_init,
                   rng=[np.random.default_rng([s, k]) for s, k in pairs])
    try:
        eng.run(config.steps)
        ent = ss.observables_from_parameters(eng.Y, eng.Z, task)["dt_entropy"]
    except DivergenceError:
        ent = np.full(len(pairs), np.nan)
    return xr.Dataset({"dt_entropy": (("seed", "eta_Z"), np.asarray(ent, float).reshape(len(seeds), len(etas)))},
                      coords={"seed": seeds, "eta_Z": etas})


def fig6_theory(config):
    """The theory's own entropies: the T = inf flow from zero init (the theory's initial
    condition) at the run's end ``t = ode_time(steps)`` for every eta_Z at the point's ratio. At a
    fixed ratio the flow depends on ``eta_Z t`` only, so one solve at eta_Z = 1 serves all."""
    from .compare import theory_trajectory

    etas = _fig6_etas()
    T = config.ode_time(config.steps)
    base = config.replace(eta_Z=1.0, eta_Y=config.eta_Y / config.eta_Z, zero_init=True)
    th = theory_trajectory(base, np.array([0.0, *[T * e for e in etas]]))
    return xr.Dataset({"dt_entropy": ("eta_Z", th["dt_entropy"].values[1:])}, coords={"eta_Z": etas})


def entropy_slope(traj, config) -> float:
    """Least-squares slope of the final DT entropy on ``ln eta_Z`` over the Fig. 6 grid (one
    seed's runs, or the theory's): negative when the entropy falls as eta_Z grows."""
    x = np.log(traj["eta_Z"].values)
    y = traj["dt_entropy"].values
    return float(np.polyfit(x, y, 1)[0]) if np.all(np.isfinite(y)) else float("nan")
