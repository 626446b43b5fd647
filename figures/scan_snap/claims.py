"""Scan & Snap's headline claims, decided over seeds inside the paper's regime.

``claims`` (the row's ``claims`` slot) decides the registry ``claims.toml`` beside this module with
:mod:`figures.claims` (docs/claims.md), then appends the real-text claims (Figs. 7 and 10,
:func:`.text.text_claim_results`): every claim's statement, regime, criterion (with its
derivation), falsifier and validity map are data there. This module holds the functions the
registry names:

* regime quantities (:func:`claim_quantities`): the learning-rate ratio (Assumption 1(c)), the
  overlap eigenvalues of ``E = F^T F - I`` against Assumption 2's bounds, Theorem 1's ``M`` and
  ``eta_Y``; for the snap claim (:func:`snap_quantities`) Theorem 4's large-t condition
  ``4 Gamma(a)/C_0`` with ``C_0`` fitted on the exact flow (:func:`fitted_C0`); and
  :func:`theorem1_error`, the error Theorem 1 allows the reduction (sigma, theta, delta_1, delta_3);
* null controls (shuffled data, or the attention's rate 1000 x smaller) for every claim;
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
``1/eta_Z``, windows of the snap claim units of the snap onset ``t_s`` (``4 Gamma(t_s) = C_0``).
The practice side of every claim is the paper's (Y, Z) reparameterisation trained directly (a
"reduced model"); the theory checks run the exact (un-reduced) T = inf flow of (Y, Z).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import xarray as xr

from figures.claims import RegistryClaims, registry_claims
from figures.context import RunContext
from theory import scan_snap as ss

__all__ = ["claims", "decide_registry", "claim_quantities", "overlap_eigenvalues", "theorem1_error", "eta_Z_time_config",
           "fitted_C0", "snap_onset", "snap_quantities", "reduced_quantities", "snap_time_config", "reduced_null_runs",
           "snap_null_runs", "fig6_null_runs",
           "reduced_runs", "reduced_theory", "reduced_error", "snap_runs", "snap_theory", "snap_deceleration",
           "fig6_runs", "fig6_theory", "entropy_slope", "reduced_table", "snap_table", "LOG_PER_UNIT"]

#: the registry beside this module, decided over seeds with its maps (sweep cells: store, resume)
decide_registry = registry_claims("scan-snap")


@dataclass(frozen=True)
class ScanSnapClaims(RegistryClaims):
    """The row's ``claims`` slot: the registry's claims, Theorem 4's scan-then-snap claim
    (``snap_claims.toml``, :func:`snap_claim_result`: no in-regime point can be run, so it is
    concluded untested with its cost) and the real-text claims of :mod:`.text` (``text_claims.toml``,
    decided on the WikiText protocol's runs; untested without a corpus). ``only`` names registry
    claims (decided alone, no real-text runs)."""

    def __call__(self, ctx: RunContext | None = None, *, quick: bool | None = None, device: str | None = None,
                 progress: bool | None = None, only=None) -> list:
        from .text import text_claim_results

        ctx = RunContext.of(ctx, quick=quick, device=device, progress=progress)
        reg = [n for n in (only or ()) if n != "scan_then_snap"]
        out = list(decide_registry(ctx, only=reg)) if (reg or not only) else []
        if not only or "scan_then_snap" in only:
            out.append(snap_claim_result(quick=ctx.quick, device=ctx.device))
        return out if only else [*out, *text_claim_results(ctx)]


claims = ScanSnapClaims("scan-snap")


#: Theorem 4's claim (concluded outside the sweep: see its header)
SNAP_CLAIMS = __import__("pathlib").Path(__file__).with_name("snap_claims.toml")


def snap_registry():
    """``snap_claims.toml`` loaded and validated."""
    from figures.claims.registry import load_registry

    return load_registry(SNAP_CLAIMS, paper="scan-snap", resolve=True)


#: the closest in-regime configuration for the untested note: Assumption 2 holds (common-token
#: weight 0.55), Assumption 1(c) at its edge (eta_Y/eta_Z = 10)
SNAP_NEAREST = {"common_prob": 0.55, "eta_Y": 10.0}


def snap_claim_result(*, quick: bool = True, device: str = "cpu"):
    """Theorem 4's claim decided on its map (the paper's Fig. 4 settings and the windows before the
    snap) with :func:`figures.claims.conclude`: every point is run (seeds of a config in one call),
    its regime computed (:func:`snap_quantities`), the null control at its point; with no in-regime
    point the verdict is **untested**, with the snap onset of the nearest in-regime configuration and
    what running it costs at the measured rate."""
    import dataclasses
    import time

    from figures.claims import conclude, points_over_seeds

    claim = snap_registry().get("scan_then_snap")
    base = claim.protocol.config(ss.Config, quick)
    n = claim.map.seeds(quick)
    seeds = list(range(n))
    axes = {a.name: a.points(quick) for a in claim.map.axes}
    demos = {tuple(sorted(d.coords.items())): d.label for d in claim.demos}
    cpu, steps_run = 0.0, 0
    cells, insides, trajs = [], {}, {}

    def runs_at(ey):
        nonlocal cpu, steps_run
        if ey not in trajs:
            cfg = base.replace(eta_Y=float(ey))
            t1 = time.process_time()
            trajs[ey] = (cfg, snap_runs(cfg, seeds=seeds, device=device), snap_theory(cfg))
            cpu += time.process_time() - t1
            steps_run += snap_time_config(cfg).steps * n
        return trajs[ey]

    coords_list = [{"eta_Y": ey, "start": a} for ey in axes["eta_Y"] for a in axes["start"]]
    for d in claim.demos:
        if not any(all(c[k] == v for k, v in d.coords.items()) for c in coords_list):
            coords_list.append(dict(d.coords))
    theory = {}
    for c in coords_list:
        cfg, tr, flow = runs_at(c["eta_Y"])
        vals = [snap_deceleration(tr.isel(seed=i), cfg, start=c["start"]) for i in range(n)]
        cells.append((c, vals))
        inside, violated, _ = claim.regime_point(cfg, c)
        insides[tuple(sorted(c.items()))] = (inside, violated)
        theory[tuple(sorted(c.items()))] = snap_deceleration(flow, cfg, start=c["start"])
    pts = points_over_seeds(claim, cells, lambda co: insides[tuple(sorted(co.items()))])
    from figures.claims import decide_exact

    pts = [dataclasses.replace(p, demo=demos.get(tuple(sorted(p.coords.items())), ""),
                               theory=(theory[tuple(sorted(p.coords.items()))],),
                               theory_decision=decide_exact(theory[tuple(sorted(p.coords.items()))], claim.criterion))
           for p in pts]
    # the null control at its point
    nl = claim.null
    cfg = base.replace(eta_Y=float(nl.at["eta_Y"]))
    t1 = time.process_time()
    nr = snap_null_runs(cfg, seeds=seeds, device=device)
    cpu += time.process_time() - t1
    steps_run += snap_time_config(cfg).steps * n
    null = (nl.description, dict(nl.at), [snap_deceleration(nr.isel(seed=i), cfg, start=nl.at["start"]) for i in range(n)])
    # what the nearest in-regime configuration would cost
    near = base.replace(**SNAP_NEAREST)
    ts, C0 = snap_onset(near), fitted_C0(near)
    rate = cpu / max(steps_run, 1)  # CPU-s per seed-step, measured on this call's runs
    need = 10 * ts * claim.map.seeds(quick)
    why = (f"no configuration inside the regime reaches the snap in a runnable time: at the nearest one "
           f"(common-token weight {near.common_prob:g}, the largest Assumption 2 allows on the map; eta_Y/eta_Z = "
           f"{near.eta_Y / near.eta_Z:g}, Assumption 1(c)'s edge) the exact flow's C_0 = {C0:.3g} puts the snap onset "
           f"4 Gamma(t_s) = C_0 at t_s = {ts:.3g} steps, and the statistic needs 10 t_s: {need:.3g} seed-steps, "
           f"~{need * rate / 3600:.3g} CPU core-hours at this run's measured {rate * 1e6:.3g} CPU-us per seed-step "
           f"(a GPU does not help: the steps are sequential). Syn-Small itself (weight 1, the paper's Fig. 4) violates "
           f"Assumption 2 (K max|lambda(E)| = {_base_quantities(base)['K_lambda_max']:.3g} > 1)")
    return conclude(claim, pts, quick=quick, null=null, untested=why)






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


def _Eprime_min(config) -> float:
    """``min_{n != n'} |E'_nn'|``, ``E' = I - (I + E)^{-1}`` (Lemma 14), at the initial attention."""
    E = _overlap(config)
    K = E.shape[0]
    Ep = np.eye(K) - np.linalg.inv(np.eye(K) + E)
    off = np.abs(Ep[~np.eye(K, dtype=bool)])
    return float(off.min()) if off.size else 0.0


def _base_quantities(config) -> dict:
    lam = np.abs(overlap_eigenvalues(config))
    M, K = config.M_theory, config.K
    return {"ratio": config.eta_Y / config.eta_Z, "K_lambda_max": float(K * lam.max()),
            "lambda_min_over_bound": float(lam.min() / math.sqrt(6.0 / M)), "M": float(M), "eta_Y": config.eta_Y}


def claim_quantities(config, coords) -> dict:
    """Derived regime quantities: ``ratio`` = eta_Y/eta_Z (Assumption 1(c)); ``K_lambda_max`` =
    K max|lambda(E)| (Assumption 2 needs < 1); ``lambda_min_over_bound`` = min|lambda(E)|/sqrt(6/M)
    (>= 1); ``M`` (Theorem 1: M >> 100); ``eta_Y`` (Theorem 1: eta_Y < 1)."""
    return _base_quantities(config)


# ------------------------------------------------------------------------------------------------
# Theorem 4's constant C_0, fitted on the exact flow
# ------------------------------------------------------------------------------------------------
#: the fit's times: log-spaced over [t0, 10^4 t0] (Theorem 4's snapping branch, t >= t0)
C0_FIT_DECADES = 4


@lru_cache(maxsize=64)
def _fitted_C0(config) -> tuple[float, float]:
    from .lines import theory_trajectory

    t0 = ss.transition_times(config.M_theory, config.K, config.eta_Y)[1]
    t = np.concatenate([[0.0], t0 * np.logspace(0, C0_FIT_DECADES, 20 * C0_FIT_DECADES + 1)])
    flow = theory_trajectory(config.replace(zero_init=True), t)
    zc = flow["z_c"].values[1:]
    G = ss.Gamma_of_t(t[1:], config.M_theory, config.K, config.eta_Y, config.eta_Z)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(4 * G) - np.log(np.expm1(-4 * zc))
    d = d[np.isfinite(d)]
    return float(math.exp(d.mean())), float(d.std())


def fitted_C0(config) -> float:
    """Theorem 4's constant ``C_0``, fitted on the exact T = inf flow (docs/papers/scan_snap.md §2.5, from zero init) of
    ``config``: along the 1-D snap ODE ``e^{-4 z_ct} - 1 = 4 Gamma(t)/C_0`` (Eqn. 122, Gamma of Eqn.
    128), so ``ln C_0 = ln 4 Gamma(t) - ln(e^{-4 z_c(t)} - 1)``; the fit is its mean over the flow's
    common-token logit at log-spaced times of ``[t0, 10^4 t0]`` (least squares in ``ln C_0``). A
    property of the flow, not a constant of ours (the config's ``C0`` is not used)."""
    return _fitted_C0(config.replace(steps=1, log_every=1, seed=0))[0]


def snap_onset(config) -> float:
    """``t_s``: the time at which the snap term reaches the constant, ``4 Gamma(t_s) = C_0`` (fitted
    C_0: :func:`fitted_C0`), i.e. the common-token logit has fallen by ``1/4 ln 2`` on the snap ODE.
    Closed form through Eqn. 128 and Eqn. 45: ``h(t_s/K) = sqrt(C_0 eta_Y / (2 eta_Z K (M-1)^2))``,
    ``t_s = K (e^{Mh} + (M-1) M h - 1) / (M eta_Y)``."""
    M, K = config.M_theory, config.K
    h = math.sqrt(fitted_C0(config) * config.eta_Y / (2 * config.eta_Z * K * (M - 1) ** 2))
    return K * (math.exp(M * h) + (M - 1) * M * h - 1) / (M * config.eta_Y)


def snap_quantities(config, coords) -> dict:
    """:func:`claim_quantities` and, for the window start ``a = start t_s`` (:func:`snap_onset`):
    ``start_over_t0`` = a / t0 (Theorem 4's snapping branch: t >= t0 = 2K ln M/eta_Y) and
    ``snap_validity`` = 4 Gamma(a)/C_0 with C_0 fitted on the exact flow (the ln ln t form of B_n
    needs the snap term to dominate C_0, Eqn. 132); ``C0_fit`` itself for the report."""
    out = _base_quantities(config)
    a = float(coords["start"]) * snap_onset(config)
    t0 = ss.transition_times(config.M_theory, config.K, config.eta_Y)[1]
    C0 = fitted_C0(config)
    G = float(ss.Gamma_of_t(a, config.M_theory, config.K, config.eta_Y, config.eta_Z))
    # rounded to 9 digits: at start = 1 the ratio is 1 up to the closed forms' round-off
    return {**out, "start_over_t0": a / t0, "snap_validity": round(4 * G / C0, 9), "C0_fit": C0}


# ------------------------------------------------------------------------------------------------
# Theorem 1's error terms (reduced claim)
# ------------------------------------------------------------------------------------------------
#: Theorem 5's failure probability delta in theta ~ K sqrt(ln(K/delta)/N)
THETA_DELTA = 0.05


def reduced_quantities(config, coords) -> dict:
    """:func:`claim_quantities` (the reduced claim's regime: Assumptions 1(c), 2; Theorem 1's M >> 100
    and eta_Y < 1)."""
    return _base_quantities(config)


def theorem1_error(config, *, horizon=100) -> float:
    """The relative error Theorem 1 allows the reduced attention velocity over the late window
    ``[H/2, H]`` (``H = horizon / eta_Z``): ``beta_nn' = (1 + sigma)[E'_nn' (1 + delta_1) + delta_3]``
    (App. Eqn. 86-89) against the kept ``E'_nn'``, i.e. ``max_window |(1 + sigma)(1 + delta_1) - 1| +
    (1 + |sigma|) 3/(M min|E'_nn'|)`` with

    * ``delta_1 = q_1 (1 + theta) - 1 = 1/(M - 1) + theta M/(M - 1)``, ``theta = K sqrt(ln(K/delta)/N)``
      (Theorem 5's sampling fluctuation after ``N`` samples, delta = :data:`THETA_DELTA`, N = batch x
      steps at the window's start);
    * ``sigma`` (Corollary 1) measured on the exact T = inf flow: ``1 - alpha_n[n] = (M - 1)/((M - 1) +
      e^{M h})(1 + sigma)`` with ``h`` the reduced ODE's (Remark 1's effective rate), so ``sigma`` is
      how far the exact decoder is from Theorem 1's form at the theory's ``h``;
    * ``|delta_3| < 3/M``, ``E'`` at the initial attention."""
    run = eta_Z_time_config(config)
    M, K = config.M_theory, config.K
    t = run.ode_times()
    H = horizon / config.eta_Z
    keep = (t >= H / 2 * (1 - 1e-9)) & (t <= H * (1 + 1e-9))
    if keep.sum() < 1:
        return float("nan")
    flow, red = _exact_solution(config), _reduced_solution(config)
    a = flow["correct_prob"].values[keep]
    h = red["h"].values[keep]
    ideal = (M - 1) / ((M - 1) + np.exp(M * h))
    sigma = np.abs((1 - a) / ideal - 1)
    N = config.batch * max(1.0, t[keep][0])
    theta = K * math.sqrt(math.log(K / THETA_DELTA) / N)
    delta1 = 1.0 / (M - 1) + theta * M / (M - 1)
    Epm = _Eprime_min(config)
    d3 = 3.0 / (M * Epm) if Epm > 0 else math.inf
    return float(np.max(np.abs((1 + sigma) * (1 + delta1) - 1) + (1 + sigma) * d3))


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
    """The reduced Lemma-4 system from zero init at the runs' times, with ``h`` at Remark 1's
    effective rate ``(1 - E) eta_Y`` (training follows the original Y-dynamics), cached per config."""
    from .lines import reduced_trajectory

    run = eta_Z_time_config(config)
    return reduced_trajectory(run, run.ode_times(), remark1=True)


@lru_cache(maxsize=32)
def _exact_solution(config):
    """The exact (un-reduced) T = inf flow of (Y, Z) (spec §2.5) from zero init at the runs' times."""
    from .lines import theory_trajectory

    run = eta_Z_time_config(config).replace(zero_init=True)
    return theory_trajectory(run, run.ode_times())


def reduced_theory(config):
    """The theory check's trajectory: the EXACT T = inf flow (un-reduced: full_system), judged by
    the claim's statistic against the reduced ODE (so the check is the reduction's own error)."""
    return _exact_solution(config)


def reduced_null_runs(config, *, seeds, device="cpu"):
    """The null control: the same runs on shuffled data (every sample's next token drawn
    independently of its context): the logits move by noise alone, which the reduced ODE must not
    be found to describe."""
    from empirical.scan_snap.experiment import train_seeds

    return train_seeds(eta_Z_time_config(config), seeds=seeds, device=device, attention_only=True,
                       shuffle_labels=True)


#: the reduced claim's horizon in units of 1/eta_Z (its protocol's steps; the robustness row uses 25)
REDUCED_HORIZON = 100


def reduced_error(traj, config, *, horizon=REDUCED_HORIZON) -> float:
    """How far the z coordinates' increments over the late window ``[H/2, H]`` (``H = horizon /
    eta_Z``) depart from the reduced ODE's (Remark 1's rate), in units of the error Theorem 1
    allows (:func:`theorem1_error`): ``|dz_red - dz| / |dz| / eps``, ``dz(t) = z(t) - z(H/2)`` over
    ``z_dt_j`` and ``z_c`` and the window's logged times. NaN where the run diverged."""
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
        return float(np.linalg.norm(dr - dz) / np.linalg.norm(dz) / theorem1_error(config, horizon=horizon))


def _beside_flow(result, window: str, label: str, statistic: str, flow_config, columns) -> list[dict]:
    """A claim's map beside the exact T = inf flow (one solve per (common_prob, eta_Z), from zero
    init at ``flow_config(config)``'s times): per point the coordinates (``window``, the statistic's
    axis, as ``label``), the training's ``statistic`` (median over seeds, interval, verdict) and
    ``columns(config, flow, window value)``."""
    from .lines import theory_trajectory

    rows, flows = [], {}
    for p in result.points:
        c = dict(p.coords)
        cfg = result.spec.protocol.config(ss.Config, result.quick).with_overrides(
            [f"{k}={v!r}" for k, v in c.items() if k != window])
        w = REDUCED_HORIZON if window is None else c[window]
        key = cfg
        if key not in flows:
            run = flow_config(cfg).replace(zero_init=True)
            flows[key] = theory_trajectory(run, run.ode_times())
        d = p.decision
        rows.append({"common_prob": cfg.common_prob, "M": cfg.M_theory, "eta_Y/eta_Z": cfg.eta_Y / cfg.eta_Z,
                     label: w, "demo": p.demo,
                     "inside_regime": p.inside, f"training_{statistic}": None if d is None else d.estimate,
                     "interval": None if d is None else list(d.interval), "verdict": p.verdict,
                     **columns(cfg, flows[key], w)})
    return rows


def reduced_table(result) -> list[dict]:
    """The reduced claim's map beside the exact T = inf flow: per point (common_prob, ratio,
    M) the training's statistic (median over seeds and its interval), the exact flow's and the
    error Theorem 1 allows. Where the flow fails as the network does, the gap is the reduction's."""
    return _beside_flow(result, None, "horizon_eta_Z_t", "error_over_theorem1", eta_Z_time_config,
                        lambda cfg, flow, h: {"exact_flow_error_over_theorem1": reduced_error(flow, cfg),
                                              "theorem1_error": theorem1_error(cfg)})


# ------------------------------------------------------------------------------------------------
# scan_then_snap
# ------------------------------------------------------------------------------------------------
def snap_time_config(config):
    """The run behind a point of the snap claim: its protocol gives the horizon ``steps`` in units
    of the snap onset ``t_s`` (:func:`snap_onset`; plain SGD, t = step), so one protocol serves
    every learning rate; this config trains ``ceil(steps t_s)`` steps, logged ~400 times."""
    if config.optimizer != "sgd" or config.momentum != 0:
        raise ValueError("the snap claim's time conversion is for plain SGD (t = step)")
    n = int(math.ceil(config.steps * snap_onset(config) - 1e-9))
    return config.replace(steps=n, log_every=max(1, n // 400))


def snap_runs(config, *, seeds, device="cpu"):
    """Every seed of a point of the snap claim in one call (:func:`snap_time_config`)."""
    from empirical.scan_snap.experiment import train_seeds

    return train_seeds(snap_time_config(config), seeds=seeds, device=device, attention_only=True)


def snap_null_runs(config, *, seeds, device="cpu"):
    """The null control ("eta_Z = 0"): the same network and steps with the attention's learning
    rate 1000 x smaller, so the snap term 4 Gamma/C_0 stays ~1000 x below 1: the common-token logit
    follows the scanning branch (z_ct ~ -Gamma/C_0 ~ -ln^2 t, accelerating in ln t), which the
    criterion must not take for a snap."""
    from empirical.scan_snap.experiment import train_seeds

    return train_seeds(snap_time_config(config), seeds=seeds, device=device, attention_only=True,
                       lr_scale=(1.0, 1e-3))


def snap_theory(config):
    """The theory check's trajectory: the EXACT T = inf flow (spec §2.5, un-reduced, from zero init)
    at the run's times, judged by the claim's statistic (not Theorem 4's 1-D ODE, whose fall ratio
    is below 1 by construction once 4 Gamma > C_0)."""
    from .lines import theory_trajectory

    run = snap_time_config(config).replace(zero_init=True)
    return theory_trajectory(run, run.ode_times())


def theorem4_trajectory(config):
    """Theorem 4's own common-token logit on the 1-D snap ODE with the fitted ``C_0``: ``z_ct(t) =
    -1/4 ln(1 + 4 Gamma(t)/C_0) = -B_n(t)`` (Eqn. 122, 124, 128; Decision 5) at the run's times."""
    run = snap_time_config(config)
    t = run.ode_times()
    G = ss.Gamma_of_t(t, config.M_theory, config.K, config.eta_Y, config.eta_Z)
    return xr.Dataset({"z_c": ("time", -0.25 * np.log1p(4 * G / fitted_C0(config)))}, coords={"time": t})


def snap_deceleration(traj, config, *, start) -> float:
    """The common-token logit's fall over the half-decade ``[sqrt(10) a, 10 a]`` over its fall over
    ``[a, sqrt(10) a]``, ``a = start * t_s`` (:func:`snap_onset`). Below 1: the fall decelerates in
    log-time (a snap). ``inf`` where the logit does not fall over the first half-decade (no snap:
    the seed lies on the failing side); NaN where the run is shorter than ``10 a``."""
    a = start * snap_onset(config)
    t = traj["time"].values
    if 10 * a > t[-1] * (1 + 1e-9):
        return float("nan")
    zc = np.interp([a, math.sqrt(10) * a, 10 * a], t, traj["z_c"].values)
    first, second = zc[0] - zc[1], zc[1] - zc[2]
    if not np.all(np.isfinite(zc)):
        return float("nan")
    return float(second / first) if first > 0 else float("inf")


def snap_table(result) -> list[dict]:
    """The snap claim's map beside the exact T = inf flow and Theorem 4's closed form: per point
    (common_prob, ratio, window start) the training's fall ratio (median over seeds, its interval,
    verdict), the exact flow's from zero init on the runs' times and Theorem 4's (:func:`snap_theory`).
    Where the exact flow's ratio is the training's, a failure is Theorem 4's 1-D snap ODE missing
    the flow at those times, not SGD's noise or the finite T."""
    return _beside_flow(result, "start", "start_over_t_s", "fall_ratio", snap_time_config,
                        lambda cfg, flow, a: {"exact_flow_fall_ratio": snap_deceleration(flow, cfg, start=a),
                                              "theorem_4_fall_ratio": snap_deceleration(theorem4_trajectory(cfg), cfg, start=a),
                                              "C0_fit": fitted_C0(cfg)})


# ------------------------------------------------------------------------------------------------
# entropy_falls_with_eta_Z (Fig. 6)
# ------------------------------------------------------------------------------------------------
def _fig6_etas():
    from .fig6 import FIG6_GRID

    return list(FIG6_GRID["eta_Z"])


def fig6_runs(config, *, seeds, device="cpu", shuffle_labels: bool = False):
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
                   rng=[np.random.default_rng([s, k]) for s, k in pairs], shuffle_labels=shuffle_labels)
    try:
        eng.run(config.steps)
        ent = ss.observables_from_parameters(eng.Y, eng.Z, task)["dt_entropy"]
    except DivergenceError:
        ent = np.full(len(pairs), np.nan)
    return xr.Dataset({"dt_entropy": (("seed", "eta_Z"), np.asarray(ent, float).reshape(len(seeds), len(etas)))},
                      coords={"seed": seeds, "eta_Z": etas})


def fig6_null_runs(config, *, seeds, device="cpu"):
    """The null control: the Fig. 6 runs on shuffled data (every sample's next token drawn
    independently of its context): the attention moves by noise alone, larger eta_Z larger noise."""
    return fig6_runs(config, seeds=seeds, device=device, shuffle_labels=True)


def fig6_theory(config):
    """The theory's own entropies: the T = inf flow from zero init (the theory's initial
    condition) at the run's end ``t = ode_time(steps)`` for every eta_Z at the point's ratio. At a
    fixed ratio the flow depends on ``eta_Z t`` only, so one solve at eta_Z = 1 serves all."""
    from .lines import theory_trajectory

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
