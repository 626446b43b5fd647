"""SCB's headline claims, decided over seeds inside the paper's regime (docs/papers/scb.md §3.4, §3.5,
§5, §6).

``claims`` (the row's ``claims`` slot) decides the registry ``claims.toml`` beside this module
(the schema: ``docs/claims.md``); the functions it names are below, one group per protocol:

* **l1 vs SGD** (spec §6 item 1, §6.1) — ``l1_beats_sgd``, ``l1_recovers_ground_truth`` (recovery
  to the accuracy eps the paper's lambda = eps K/(Q^2 N^3) is set for, :func:`l1_recovery_error`),
  ``l1_exact_support`` (exact support, a stricter claim). :func:`l1_runs` / :func:`l1_sgd_runs`
  train every seed of a map point (T, batch, lambda) in one batched call
  (:func:`empirical.scb.l1.train_runs`); :func:`l1_theory` is the noise-free population map of the
  same methods on the full (V, A); :func:`sgd_null_runs` is the null control (vanilla SGD in the
  l1 method's place).
* **escape** (spec §3.4) — ``escape_time_log_t``: :func:`escape_runs` trains real SGD (the fused
  numba engine, :mod:`empirical.scb.fast`) at T/4 and T; :func:`escape_slope` is the slope of the
  scaled escape time against ln T; :func:`escape_theory` the exact population map of the full
  (V, A) on the same tasks; :func:`escape_null_runs` the null (a start already correlated with P).
* **transfer** (spec §5) — ``transfer_skips_stage1``: :func:`transfer_runs` pretrains, snapshots
  V, and fine-tunes on a correlated task from each snapshot and from scratch;
  :func:`transfer_null_runs` pretrains on shuffled data instead; :func:`transfer_theory` is the
  exact population map of the same protocol.

The learning-rate rules (spec §2 stability bound, Decision 6): every protocol runs each method at
half *its own* bound: ``eta_V = eta_A = 1/(m2 T)`` preconditioned, ``1/(max_k mu_k m2 T)`` for
vanilla SGD (the Hessian of plain GD along ``1_T`` in ``a_k`` is ``mu_k m2 T``). No rate is chosen
from a grid: with a horizon in e-folds at the rate used, the early-stopped population loss falls
monotonically as the rate falls (measured at T = 16, batch 64, rates 1/16 to 3/4 of the bound, both
methods), so a validation-chosen rate always lands at the grid's lower edge and no grid gives a
verdict. The l1 horizon comes from the theory's two time scales at the l1 method's rate: the
stage-1 escape ``t* = ln(T sqrt(rho))/(eta sqrt(rho K))`` plus one e-fold of the reduced flow's
slowest stage-2 mode at the ground truth (:func:`l1_horizon`); both methods get the same samples;
the runs cover :data:`HORIZON_MAX` horizons and the statistics' ``horizon`` keyword (1: the
protocol; 4: a robustness variant) truncates them, ``stop`` picks the early stop (population loss,
or the claim's own distance). The protocol config's ``eta_V``, ``eta_A``, ``steps`` and
``log_every`` are therefore set by these rules (a config that moves them is refused:
:class:`ConfigError`).

Runs are cached per process (:func:`functools.lru_cache`): the three l1 claims, the figures and
the compare report share one computation per map point.

The SDE's own claim (``sde_band_coverage``, the end of ``claims.toml``) lives in
:mod:`figures.scb.calibration`.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from theory import scb
from theory.errors import ConfigError, check_choice

from ..claims import registry_claims

__all__ = [
    "claims",
    "l1_runs", "l1_sgd_runs", "l1_theory", "l1_quantities", "l1_horizon", "learning_rates",
    "l1_vs_sgd_log_ratio", "l1_recovery_error", "l1_exact_support", "early_stopped", "accuracy_eps",
    "sgd_null_runs", "l1_steps", "HORIZON_MAX", "STOPS",
    "escape_runs", "escape_theory", "escape_null_runs", "WARM_ZETA", "transfer_null_runs", "escape_slope", "escape_quantities", "stage1_noise", "escape_context",
    "escape_formula", "map_runs",
    "attention_noise", "transfer_runs", "transfer_theory", "transfer_log_ratio", "transfer_quantities", "transfer_tasks",
    "PRETRAIN", "LR_FRACTIONS", "TRANSFER_MIX",
    "l1_cost", "l1_sgd_cost", "escape_cost", "transfer_cost", "POSITION_SECONDS",
]

#: the row's claims slot: the registry beside this module, decided over seeds with its maps
claims = registry_claims("scb", Path(__file__).with_name("claims.toml"))

#: each method's learning rate, as a fraction of its own stability bound (module docstring): one
#: rate, not a grid chosen by validation loss (with a horizon in e-folds at the rate used the
#: early-stopped loss falls monotonically as the rate falls - measured at T = 16, batch 64 for
#: rates 1/16..3/4 of the bound - so a validation choice always sits at the grid's lower edge)
LR_FRACTIONS = (0.5,)
#: the l1 runs cover HORIZON_MAX x (t* + one e-fold at the rate used); the statistics' ``horizon``
#: keyword (1 = the protocol, 4 = the robustness variant) truncates them (the same minibatches)
HORIZON_MAX = 4.0
#: pretraining lengths of the transfer protocol, in units of the pretraining task's t* (formula)
PRETRAIN = (0.25, 0.5, 1.0, 3.0)
#: the downstream transition of the transfer protocol: mix * P_pre + (1 - mix) * P_indep (Decision 10)
TRANSFER_MIX = 0.7
_DEFAULT = scb.SCBConfig()
#: the ODE backend of the theory's trajectories: scipy's Radau (no compile: a claims cell may run
#: in a fresh worker process; diffrax agrees, tests/simulate)
_BACKEND = "scipy"
_RULED = ("eta_V", "eta_A", "steps", "log_every")


def _check_ruled(config: scb.SCBConfig, protocol: str) -> None:
    moved = [f for f in _RULED if getattr(config, f) != getattr(_DEFAULT, f)]
    if moved:
        raise ConfigError(moved[0], f"the {protocol} protocol sets {', '.join(_RULED)} from the stability bound and the "
                                    f"theory's time scales (figures/scb/claims.py); do not set them")


def _lr(task: scb.SCBTask) -> float:
    """Half the preconditioned method's stability bound 2/(m2 T) (spec §2)."""
    return 1.0 / (task.m2 * task.T)


def escape_formula(task: scb.SCBTask, lr: float) -> float:
    """``t* = ln(T sqrt(rho)) / (lr sqrt(rho K))`` steps (spec §3.4, eta_V = eta_A = lr)."""
    rho = float(task.rho.mean())
    return math.log(task.T * math.sqrt(rho)) / (lr * math.sqrt(rho * task.K))


# ------------------------------------------------------------------------------------------------
# l1 vs SGD (spec §6 item 1, §6.1)
# ------------------------------------------------------------------------------------------------
def _slowest_rate(task: scb.SCBTask) -> float:
    """The slowest non-neutral relaxation rate (per unit lr) of the reduced flow (spec §3.3) at the
    ground-truth fixed point ``zeta = omega = beta = 1, xi = 0``: the eigenvalues of its Jacobian
    (one is 0, the scale direction a -> c a, V -> V / c). It is ~0.36/T: without the prox the
    off-support mass leaves at a rate O(1/T)."""
    T, rho, K, m2 = float(task.T), float(task.rho.mean()), task.K, task.m2

    def rhs(y):
        z, w, xi, b = y
        n, c, s = T * xi**2 + 2 * xi * b + rho * b**2, xi + rho * b, T * xi + b
        return np.array([c - n * z, -s * (s * w - 1), -(K * z**2 * xi + m2 * w * (s * w - 1)), K * z * (1 - z * b)])

    y0, h = np.array([1.0, 1.0, 0.0, 1.0]), 1e-6
    J = np.stack([(rhs(y0 + h * e) - rhs(y0 - h * e)) / (2 * h) for e in np.eye(4)], 1)
    rates = -np.linalg.eigvals(J).real
    return float(np.min(rates[rates > 1e-9 * np.max(rates)]))


def l1_horizon(task: scb.SCBTask, lr: float) -> float:
    """The protocol's horizon in steps: the stage-1 escape ``t*`` plus one e-fold of the slowest
    stage-2 mode of the reduced flow (:func:`_slowest_rate`), both at the rate ``lr`` the l1 method
    uses (half its stability bound)."""
    return escape_formula(task, lr) + 1.0 / (lr * _slowest_rate(task))


def l1_steps(task: scb.SCBTask, lr: float) -> tuple[int, int]:
    """``(steps, log_every)`` of the l1 runs: :data:`HORIZON_MAX` horizons, logged at ~400 points
    (~100 per horizon)."""
    steps = int(math.ceil(HORIZON_MAX * l1_horizon(task, lr)))
    return steps, max(1, steps // 400)


def learning_rates(task: scb.SCBTask, method: str) -> tuple[float, ...]:
    """The grid of ``method``: :data:`LR_FRACTIONS` of its stability bound, ``2/(m2 T)`` for the
    preconditioned method, ``2/(max_k mu_k m2 T)`` for vanilla SGD (module docstring)."""
    bound = 2.0 / (task.m2 * task.T) if method != "sgd" else 2.0 / (float(task.mu.max()) * task.m2 * task.T)
    return tuple(f * bound for f in LR_FRACTIONS)


@lru_cache(maxsize=64)
def _grid_runs(config: scb.SCBConfig, seeds: tuple[int, ...], device: str, population: bool) -> xr.Dataset:
    """Every rate of :func:`learning_rates` x every seed of ``config``'s method (variant,
    normalisation, lambda) in one batched call: dims (lr, seed, time); no seed dim with
    ``population`` (the exact population gradient: one deterministic path per rate)."""
    from empirical.scb import l1 as el1

    task = scb.make_task(config)
    method = el1.method_of(config)
    steps, every = l1_steps(task, _lr(task))
    lrs = learning_rates(task, method)
    seeds = seeds if not population else (0,)
    runs = [el1.RunSpec(method, lr, float(config.lam), s) for lr in lrs for s in seeds]
    out = el1.train_runs(task, runs, batch=config.batch, steps=steps, log_every=every, lam_switch=config.lam_switch,
                         device=device, population=population)
    n = len(seeds)
    parts = []
    for j, lr in enumerate(lrs):
        sl = {k: (v if k == "step" else v[j * n:(j + 1) * n]) for k, v in out.items()}
        parts.append(el1.trajectory_of_runs(sl, config.replace(eta_V=lr, eta_A=lr, steps=steps, log_every=every),
                                            list(seeds), task=task))
    ds = xr.concat(parts, dim="lr", coords="minimal", compat="override", combine_attrs="drop_conflicts")
    ds = ds.assign_coords(lr=list(lrs))
    return ds.isel(seed=0, drop=True) if population else ds


_KEEP = ("population_loss", "value_relative_distance_to_truth", "attention_distance_to_truth",
         "attention_max_column_distance", "support_exact", "attention_nonzeros", "attention_target_coefficient")


def _prefixed(ds: xr.Dataset, prefix: str) -> xr.Dataset:
    return xr.Dataset({f"{prefix}{k}": ds[k].rename(lr=f"{prefix}lr") for k in _KEEP}, attrs=ds.attrs)


def _l1_dataset(config, seeds, device, *, sgd: bool, population: bool) -> xr.Dataset:
    _check_ruled(config, "l1")
    base = config.replace(seed=0, batch=1 if population else config.batch)
    sgd_key = base.replace(variant="sgd", lam=0.0, lam_switch=2.0, normalise="end")
    if config.variant == "sgd":  # the null control of a claim on the l1 method: vanilla SGD in its place
        parts = [_prefixed(_grid_runs(sgd_key, tuple(seeds), device, population), "l1_")]
    else:
        key = base.replace(variant="preconditioned")
        parts = [_prefixed(_grid_runs(key, tuple(seeds), device, population), "l1_")]
    if sgd:
        parts.append(_prefixed(_grid_runs(sgd_key, tuple(seeds), device, population), "sgd_"))
    return xr.merge(parts, combine_attrs="drop_conflicts")


def l1_runs(config: scb.SCBConfig, *, seeds, device: str = "cpu") -> xr.Dataset:
    """The l1 method (preconditioned proximal SGD, the config's normalisation and lambda, at half its
    stability bound, module docstring) on every seed: ``l1_*`` variables over (l1_lr, seed, time).
    With ``variant="sgd"`` (a null control) vanilla SGD stands in the l1 method's place."""
    return _l1_dataset(config, seeds, device, sgd=False, population=False)


def l1_sgd_runs(config: scb.SCBConfig, *, seeds, device: str = "cpu") -> xr.Dataset:
    """:func:`l1_runs` plus vanilla SGD on the same minibatches (paired seeds) at half its own
    stability bound: ``sgd_*`` variables over (sgd_lr, seed, time)."""
    return _l1_dataset(config, seeds, device, sgd=True, population=False)


def sgd_null_runs(config: scb.SCBConfig, *, seeds, device: str = "cpu") -> xr.Dataset:
    """The null control of the l1 claims: vanilla SGD (no preconditioner, no prox) on the same
    minibatches, in the l1 method's place (``l1_*`` variables), the point's config (and so its
    lambda, which sets the accuracy eps the recovery criterion asks for) unchanged."""
    return _l1_dataset(config.replace(variant="sgd", lam=0.0, lam_switch=2.0, normalise="end"), seeds, device,
                       sgd=False, population=False)


def l1_theory(config: scb.SCBConfig) -> xr.Dataset:
    """The theory's trajectory: the same methods on the exact population gradient of the full
    (V, A) model at finite T (the noise-free discrete maps, spec §3.2-3.5; no reduction), one
    deterministic path with the variables of :func:`l1_sgd_runs`."""
    return _l1_dataset(config, (0,), "cpu", sgd=True, population=True)


STOPS = ("loss", "distance")
_DISTANCES = ("value_relative_distance_to_truth", "attention_distance_to_truth")


def _window(traj: xr.Dataset, config: scb.SCBConfig, horizon: float) -> np.ndarray:
    """The logged times within ``horizon`` x (t* + one e-fold at the l1 method's rate)."""
    if not (0 < horizon <= HORIZON_MAX):
        raise ConfigError("horizon", f"the runs cover {HORIZON_MAX} horizons; got {horizon}")
    task = scb.make_task(config.replace(seed=0))
    return traj["time"].values <= horizon * l1_horizon(task, _lr(task)) + 1e-9


def early_stopped(traj: xr.Dataset, prefix: str, config: scb.SCBConfig | None = None, *, horizon: float = 1.0,
                  stop: str = "loss") -> dict[str, float]:
    """One seed's early stop within ``horizon`` horizons (:func:`l1_horizon`; the whole run without
    ``config``): ``stop="loss"`` the logged point of minimal population loss (spec §6.1 decision:
    early stopping on the exact population loss = an infinite validation set); ``stop="distance"``
    each distance to the ground truth at its own minimum (the claim's own distance, an oracle
    stop). Returns the variables without the prefix and ``lr_index`` (the method's one rate)."""
    check_choice("stop", stop, STOPS)
    loss = traj[f"{prefix}population_loss"].values
    L = np.where(np.isfinite(loss), loss, np.inf)
    if config is not None:
        L = np.where(_window(traj, config, horizon)[None, :], L, np.inf)
    if not np.isfinite(L).any():
        return {k: float("nan") for k in _KEEP} | {"lr_index": float("nan")}
    j, i = np.unravel_index(int(np.argmin(L)), L.shape)  # (lr, time)
    out = {k: float(traj[f"{prefix}{k}"].values[j, i]) for k in _KEEP} | {"lr_index": float(j)}
    if stop == "distance":
        for k in _DISTANCES:
            d = np.where(np.isfinite(L), traj[f"{prefix}{k}"].values, np.inf)
            out[k] = float(np.min(d))
    return out


_FLOOR = 1e-12  # distances below the float noise floor count as this


def l1_vs_sgd_log_ratio(traj: xr.Dataset, config: scb.SCBConfig, *, horizon: float = 1.0, stop: str = "loss") -> float:
    """``max(ln(dist_P^l1 / dist_P^sgd), ln(dist_A^l1 / dist_A^sgd))`` at each method's early stop
    within ``horizon`` horizons (``stop``: :func:`early_stopped`): below 0 when l1 is closer to the
    ground truth on both P and the attention."""
    a, b = (early_stopped(traj, p, config, horizon=horizon, stop=stop) for p in ("l1_", "sgd_"))
    ratios = [math.log(max(a[k], _FLOOR) / max(b[k], _FLOOR)) for k in _DISTANCES]
    return max(ratios) if all(map(math.isfinite, ratios)) else float("nan")


def accuracy_eps(config: scb.SCBConfig) -> float:
    """The accuracy ``eps`` of the paper's regularisation scale ``lambda = eps K/(Q^2 N^3)`` (spec
    §1.3, §6.1: ``lambda = Theta(eps K_P/(Q^2 N^3))``, the Theta's constant taken as 1) at the
    config's lambda and task."""
    task = scb.make_task(config.replace(seed=0))
    return float(config.lam) * config.Q**2 * task.N**3 / task.K


def l1_recovery_error(traj: xr.Dataset, config: scb.SCBConfig, *, horizon: float = 1.0, stop: str = "loss") -> float:
    """``max(d_P, d_Q) / eps`` at the l1 method's early stop: ``d_P = |V/colsum - P|_F / |P - mu
    1^T|_F``, ``d_Q = |A/colsum - Q|_F`` (spec §4, after the final normalisation), ``eps`` the
    accuracy the point's lambda is set for (:func:`accuracy_eps`). Below 1: recovered to eps."""
    a = early_stopped(traj, "l1_", config, horizon=horizon, stop=stop)
    eps = accuracy_eps(config)
    if not eps > 0:
        raise ConfigError("lam", "the recovery criterion needs lambda > 0 (its accuracy eps = lambda Q^2 N^3 / K)")
    return max(a[k] for k in _DISTANCES) / eps


def l1_exact_support(traj: xr.Dataset, config: scb.SCBConfig, *, horizon: float = 1.0) -> float:
    """1 when, at the early stop (population loss, ``horizon`` horizons), every attention column's
    non-zeros are exactly its support S_k."""
    v = early_stopped(traj, "l1_", config, horizon=horizon)["support_exact"]
    return float("nan") if not math.isfinite(v) else float(v > 0.5)


@lru_cache(maxsize=64)
def attention_noise(task_config: scb.SCBConfig) -> float:
    """Per-sample minibatch noise of the l1 method's attention update at the ground truth
    (``V = P``, ``a_k = q_k``), exactly: the RMS over off-support coordinates (t not in S_k) of the
    standard deviation of the preconditioned per-sample gradient ``G_{a_k,t}/mu_k`` (spec §3.2:
    ``G_{a_k} = X^T V^T r`` when the sample's query is k, else 0). An off-support token
    ``x_t ~ mu`` is independent of ``w = P^T (P X q_k - e_y)``, which depends only on the Q
    support tokens, the selected position and the target: enumerated exactly. Divide by sqrt(B)
    for a batch of B (``sigma_B``); it does not depend on T."""
    import itertools

    task = scb.make_task(task_config)
    N, P, mu = task.N, task.P, task.mu
    var = []
    for k in range(N):
        S = task.support[k]
        q = task.Qm[S, k]
        m1 = m2 = 0.0  # E[sum_i mu_i w_i], E[sum_i mu_i w_i^2] given the query k
        for z in itertools.product(range(N), repeat=len(S)):
            pz = float(np.prod(mu[list(z)]))
            h = np.zeros(N)
            np.add.at(h, list(z), q)
            py = P[:, list(z)] @ q  # y ~ sum_j q_j P[:, z_j]
            W = P.T @ (P @ h)[:, None] - P.T  # column y: P^T (P h - e_y)
            m1 += pz * float(py @ (mu @ W))
            m2 += pz * float(py @ (mu @ W**2))
        # the preconditioned gradient of column k: 1[query = k] w_{x_t} / mu_k
        var.append((mu[k] * m2 - (mu[k] * m1) ** 2) / mu[k] ** 2)
    T, Q = task.T, task.support.shape[1]
    return float(np.sqrt(np.sum(np.asarray(var) * (T - Q)) / (N * (T - Q))))


def l1_quantities(config: scb.SCBConfig, coords) -> dict[str, float]:
    """The regime's derived quantity at a map point (claims.toml): ``eps`` = lambda Q^2 N^3 / K, the
    accuracy of the paper's regularisation scale lambda = Theta(eps K/(Q^2 N^3)) (spec §6.1). Shown
    only: ``lam_over_support_limit`` = lambda / (K min q) (spec §3.5: above 1 the prox zeroes the
    support at the ground truth; eps <= 1 keeps it below 1/(Q N^3)) and ``sigma_B``, the
    off-support minibatch noise of the attention update at the ground truth
    (:func:`attention_noise` / sqrt(B))."""
    task = scb.make_task(config)
    lam = float(config.lam)
    q_min = float(task.Qm[task.Qm > 0].min())
    sigma = attention_noise(config.replace(seed=0, lam=0.0, lam_switch=2.0, batch=1, steps=400, log_every=5,
                                           variant="preconditioned", normalise="end")) / math.sqrt(config.batch)
    return {"eps": accuracy_eps(config), "lam_over_support_limit": lam / (task.K * q_min), "sigma_B": sigma}


# ------------------------------------------------------------------------------------------------
# Stage-1 escape (spec §3.4)
# ------------------------------------------------------------------------------------------------
_CONTEXT_RATIO = 4  # the escape slope is measured between T / 4 and T


def _contexts(config: scb.SCBConfig) -> tuple[int, int]:
    lo = config.T // _CONTEXT_RATIO
    if lo < config.Q or lo * _CONTEXT_RATIO != config.T:
        raise ConfigError("T", f"the escape protocol needs T divisible by {_CONTEXT_RATIO} with T/{_CONTEXT_RATIO} "
                               f">= Q, got T={config.T}")
    return lo, config.T


def escape_context(config: scb.SCBConfig, T: int) -> tuple[scb.SCBConfig, scb.SCBTask, float]:
    """``(config, task, lr)`` of the escape protocol at context ``T``: half the stability bound,
    3 t* steps logged at ~400 points (the cell's other fields kept)."""
    base = config.replace(T=T, seed=0, variant="preconditioned", lam=0.0, lam_switch=2.0, normalise="end")
    task = scb.make_task(base)
    lr = _lr(task)
    steps = int(math.ceil(3 * escape_formula(task, lr)))
    return base.replace(eta_V=lr, eta_A=lr, steps=steps, log_every=max(1, steps // 400)), task, lr


@lru_cache(maxsize=64)
def _escape_run(cfg: scb.SCBConfig, seed: int, device: str) -> xr.Dataset:
    """One real-SGD run of the context config ``cfg`` (:func:`_escape_config`): cached, so the
    context T shared by two map cells (the upper end of one, the lower of the next) runs once."""
    from empirical.scb.fast import train_fast

    tr, _ = train_fast(cfg, device=device, seed=seed, task=scb.make_task(cfg),
                       stop_when=lambda o: o["attention_target_coefficient"] >= 0.6)
    return tr


@lru_cache(maxsize=64)
def _escape_population(cfg: scb.SCBConfig) -> float:
    """Escape steps of the exact population-gradient map of the full (V, A) model at finite T
    (:func:`empirical.scb.l1.train_runs` with ``population=True``; no reduction): the theory."""
    return _escape_of_runs(cfg, [0], "cpu", population=True)[0]


def _escape_of_runs(cfg: scb.SCBConfig, seeds, device: str, *, population: bool = False, init=None) -> list[float]:
    """Escape steps (beta reaches 1/2) of the preconditioned method (lambda = 0) at the context
    config ``cfg``, one batched call over ``seeds`` from ``init`` (default: the standard start)."""
    import simulate
    from empirical.scb import l1 as el1

    task = scb.make_task(cfg)
    runs = [el1.RunSpec("l1", float(cfg.eta_A), 0.0, int(s)) for s in seeds]
    out = el1.train_runs(task, runs, batch=cfg.batch, steps=cfg.steps, log_every=cfg.log_every, device=device,
                         population=population, init=init)
    tr = el1.trajectory_of_runs(out, cfg, list(range(len(runs))), task=task, dim="run")
    return [float(v) for v in np.atleast_1d(simulate.first_crossing(tr, "attention_target_coefficient",
                                                                    scb.ESCAPE_LEVEL))]


def _escape_dataset(config, values: dict[str, list[float]]) -> xr.Dataset:
    lo, hi = _contexts(config)
    return xr.Dataset({k: ("context", np.asarray(v, dtype=np.float64)) for k, v in values.items()},
                      coords={"context": [lo, hi]})


def _escape_values(config: scb.SCBConfig, escape) -> xr.Dataset:
    vals: dict[str, list[float]] = {"escape_steps": [], "lr": [], "rate_scale": []}
    for T in _contexts(config):
        cfg, task, lr = escape_context(config, T)
        vals["escape_steps"].append(escape(cfg))
        vals["lr"].append(lr)
        vals["rate_scale"].append(math.sqrt(float(task.rho.mean()) * task.K))
    return _escape_dataset(config, vals)


def escape_runs(config: scb.SCBConfig, *, seeds, device: str = "cpu") -> list[xr.Dataset]:
    """Real minibatch SGD (the fused numba engine, :func:`empirical.scb.fast.train_fast`; the
    preconditioned method, lambda = 0) at T/4 and T, each at half its stability bound for
    3 t* steps (stopping once beta passes 0.6): per seed the escape steps (beta reaches 1/2), the
    learning rate and ``sqrt(rho K)`` per context."""
    import simulate

    _check_ruled(config, "escape")
    key = config.replace(seed=0)
    return [_escape_values(key, lambda cfg, s=int(s): float(simulate.first_crossing(
        _escape_run(cfg, s, device), "attention_target_coefficient", scb.ESCAPE_LEVEL))) for s in seeds]


def escape_theory(config: scb.SCBConfig) -> xr.Dataset:
    """The exact population-gradient map of the full (V, A) model (no reduction, no noise) on the
    same tasks and learning rates: its escape steps at T/4 and T."""
    return _escape_values(config.replace(seed=0), _escape_population)


#: the escape null's start: V = mu 1^T + WARM_ZETA P~ (a value matrix already correlated with P)
WARM_ZETA = 0.5


def escape_null_runs(config: scb.SCBConfig, *, seeds, device: str = "cpu") -> list[xr.Dataset]:
    """The escape claim's null control: the same minibatch SGD at T/4 and T, started from a value
    matrix already correlated with P (``V = mu 1^T + WARM_ZETA P~``, attention uniform): no 1/T drift
    has to be amplified, so the escape does not grow like ln T (spec §3.4, §5)."""
    _check_ruled(config, "escape")
    key = config.replace(seed=0)
    seeds = [int(s) for s in seeds]
    per_context = {}
    for T in _contexts(key):
        cfg, task, _ = escape_context(key, T)
        V0 = np.outer(task.mu, np.ones(task.N)) + WARM_ZETA * task.P_tilde
        per_context[T] = _escape_of_runs(cfg, seeds, device, init=(V0, np.full((task.T, task.N), 1.0 / task.T)))
    return [_escape_values(key, lambda cfg, i=i: per_context[cfg.T][i]) for i in range(len(seeds))]


def escape_slope(traj: xr.Dataset, config: scb.SCBConfig) -> float:
    """Slope of the scaled escape time ``tau = t_escape * eta * sqrt(rho K)`` against ``ln T``
    between T/4 and T (spec §3.4: ``tau* = ln(T sqrt(rho)) + O(1)``, slope 1)."""
    tau = traj["escape_steps"].values * traj["lr"].values * traj["rate_scale"].values
    T = traj["context"].values.astype(float)
    return float((tau[1] - tau[0]) / math.log(T[1] / T[0]))


@lru_cache(maxsize=64)
def stage1_noise(config: scb.SCBConfig, samples: int = 20_000, seed: int = 0) -> float:
    """Per-sample standard deviation of the zeta-projection ``<g, P~>/|P~|^2`` of the preconditioned
    V-gradient ``g = r (X a)^T D^{-1}`` at the initialisation (``V = mu 1^T``, ``a = 1/T``:
    ``r = mu - e_y``, ``X a`` = the token histogram / T), Monte Carlo over ``samples`` draws of
    spec §1.2's sample."""
    task = scb.make_task(config)
    rng = np.random.default_rng(seed)
    N, T, mu, P = task.N, task.T, task.mu, task.P
    Pt = task.P_tilde
    x = rng.choice(N, size=(samples, T), p=mu)
    k = rng.choice(N, size=samples, p=mu)
    cdf = np.cumsum(task.Qm.T, 1)  # row k: the cdf of q^(k) over positions
    pos = (rng.random(samples)[:, None] >= cdf[k]).sum(1).clip(max=T - 1)
    xs = x[np.arange(samples), pos]
    y = (rng.random(samples)[:, None] > np.cumsum(P[:, xs].T, 1)).sum(1).clip(max=N - 1)
    h = np.stack([(x == j).sum(1) for j in range(N)], 1) / T  # (samples, N)
    c = (mu @ Pt)[None, :] - Pt[y]  # c_j(y) = mu^T P~_j - P~_{y j}
    proj = ((h / mu) * c).sum(1) / (Pt**2).sum()
    return float(proj.std(ddof=1))


def escape_quantities(config: scb.SCBConfig, coords) -> dict[str, float]:
    """``stage1_snr`` at the larger context T: the deterministic seed of the unstable stage-1 mode
    (the drift eta/T integrated over the growth time 1/gamma) over its stochastic seed (the
    zeta-noise eta sigma_zeta / sqrt(B) per step accumulated over 1/(2 gamma)):
    ``sqrt(2 B / gamma) / (T sigma_zeta)``, gamma = eta sqrt(rho K) (spec §3.4)."""
    _, task, lr = escape_context(config, config.T)
    gamma = lr * math.sqrt(float(task.rho.mean()) * task.K)
    sigma = stage1_noise(config.replace(seed=0, batch=1, steps=400, log_every=5))
    return {"stage1_snr": math.sqrt(2 * config.batch / gamma) / (config.T * sigma), "sigma_zeta": sigma}


# ------------------------------------------------------------------------------------------------
# Transfer (spec §5, Decision 10)
# ------------------------------------------------------------------------------------------------
def transfer_tasks(config: scb.SCBConfig, mix: float = TRANSFER_MIX):
    """``(pre_task, down_task)``: the pretraining task of ``config`` and the downstream task with
    transition ``mix * P_pre + (1 - mix) * P_indep`` and the same targets q (Decision 10)."""
    from empirical.scb import correlated_transition

    pre = scb.make_task(config)
    P_down = correlated_transition(pre.P, mix, seed=7)
    down = scb.SCBTask(P=P_down, mu=scb.stationary_distribution(P_down), Qm=pre.Qm, support=pre.support,
                       config=config)
    return pre, down


def transfer_start(V_pre: np.ndarray, down_task: scb.SCBTask) -> tuple[np.ndarray, np.ndarray]:
    """The fine-tuning start: the pretrained V after the final normalisation (V/colsum),
    re-centred on the downstream mean (V0 mu_down = mu_down), the attention uniform (spec §5)."""
    N, T = down_task.N, down_task.T
    Vn = V_pre / V_pre.sum(0, keepdims=True)
    V0 = Vn - np.outer(Vn @ down_task.mu - down_task.mu, np.ones(N))
    return V0, np.full((T, N), 1.0 / T)


def _transfer_plan(config: scb.SCBConfig):
    pre, down = transfer_tasks(config)
    lr_pre, lr_down = _lr(pre), _lr(down)
    quarter = max(1, int(round(escape_formula(pre, lr_pre) / 4)))
    snaps = [int(round(p * 4)) for p in PRETRAIN]  # in quarters of t*
    steps_down = int(math.ceil(4 * escape_formula(down, lr_down)))
    return pre, down, lr_pre, lr_down, quarter, snaps, steps_down


def _shuffled(task: scb.SCBTask) -> scb.SCBTask:
    """``task`` with its targets made independent of the context (``P = mu 1^T``: shuffled data)."""
    P = np.outer(task.mu, np.ones(task.N))
    return scb.SCBTask(P=P, mu=task.mu, Qm=task.Qm, support=task.support, config=task.config)


@lru_cache(maxsize=16)
def _transfer_dataset(config: scb.SCBConfig, seeds: tuple[int, ...], device: str, population: bool = False,
                      shuffled: bool = False) -> list[xr.Dataset]:
    import simulate
    from empirical.scb import l1 as el1

    pre, down, lr_pre, lr_down, quarter, snaps, steps_down = _transfer_plan(config)
    S = len(seeds)
    pre_out = el1.train_runs(_shuffled(pre) if shuffled else pre, [el1.RunSpec("l1", lr_pre, 0.0, s) for s in seeds],
                             batch=config.batch, steps=quarter * max(snaps), log_every=quarter, device=device,
                             population=population)
    starts_V, starts_A = [], []
    for s in range(S):  # scratch, then one start per snapshot
        starts_V.append(np.outer(down.mu, np.ones(down.N)))
        starts_A.append(np.full((down.T, down.N), 1.0 / down.T))
        for j in snaps:
            V0, A0 = transfer_start(pre_out["V"][s, j], down)
            starts_V.append(V0)
            starts_A.append(A0)
    runs = [el1.RunSpec("l1", lr_down, 0.0, s) for s in seeds for _ in range(1 + len(snaps))]
    cfg = config.replace(eta_V=lr_down, eta_A=lr_down, steps=steps_down, log_every=max(1, steps_down // 200))
    out = el1.train_runs(down, runs, batch=config.batch, steps=cfg.steps, log_every=cfg.log_every, device=device,
                         init=(np.stack(starts_V), np.stack(starts_A)), population=population)
    tr = el1.trajectory_of_runs(out, cfg, list(range(len(runs))), task=down, dim="run")
    esc = np.asarray(simulate.first_crossing(tr, "attention_target_coefficient", scb.ESCAPE_LEVEL))
    esc = esc.reshape(S, 1 + len(snaps))
    zeta0 = tr["value_transition_correlation"].values[:, 0].reshape(S, 1 + len(snaps))
    return [xr.Dataset({"escape_scratch": ((), esc[s, 0]), "escape_transfer": ("pretrain", esc[s, 1:]),
                        "zeta0": ("pretrain", zeta0[s, 1:])}, coords={"pretrain": list(PRETRAIN)}) for s in range(S)]


def transfer_runs(config: scb.SCBConfig, *, seeds, device: str = "cpu") -> list[xr.Dataset]:
    """Per seed: pretrain (the preconditioned method, lambda = 0, half its stability bound) on
    ``config``'s task, snapshot V at :data:`PRETRAIN` x t*; fine-tune on the correlated downstream
    task (:func:`transfer_tasks`) from scratch and from each snapshot (:func:`transfer_start`),
    same batch, half the downstream bound, 4 t* steps; every run of a map point in one batched
    call. Variables: ``escape_scratch``, ``escape_transfer`` (pretrain), ``zeta0`` (pretrain)."""
    _check_ruled(config, "transfer")
    return list(_transfer_dataset(config.replace(seed=0), tuple(int(s) for s in seeds), device))


def transfer_null_runs(config: scb.SCBConfig, *, seeds, device: str = "cpu") -> list[xr.Dataset]:
    """The transfer claim's null control: :func:`transfer_runs` with the pretraining on shuffled
    data (targets independent of the context, ``P = mu 1^T``; same schedule and minibatch draws):
    the pretrained V carries no correlation with the downstream P, so nothing is transferred."""
    _check_ruled(config, "transfer")
    return list(_transfer_dataset(config.replace(seed=0), tuple(int(s) for s in seeds), device, shuffled=True))


def transfer_theory(config: scb.SCBConfig) -> xr.Dataset:
    """The exact population-gradient map of the full (V, A) model (no reduction, no noise):
    pretraining from the standard start, snapshots, fine-tuning from each and from scratch on the
    downstream task."""
    return _transfer_dataset(config.replace(seed=0), (0,), "cpu", population=True)[0]


def transfer_log_ratio(traj: xr.Dataset, config: scb.SCBConfig, *, pretrain: float) -> float:
    """``ln(t_transfer / t_scratch)``: escape steps (beta reaches 1/2) on the downstream task from
    the snapshot pretrained for ``pretrain`` x t*, over those from scratch."""
    t = float(traj["escape_transfer"].sel(pretrain=pretrain).values)
    return math.log(max(t, 1.0) / float(traj["escape_scratch"].values))


def transfer_quantities(config: scb.SCBConfig, coords) -> dict[str, float]:
    """``transfer_seed_ratio`` = x0 / (b/T) = zeta0 T sqrt(rho K): the transfer start's seed of the
    unstable stage-1 mode (x = sqrt(eta K) zeta) over the seed the 1/T drift makes from scratch
    (b/T = sqrt(eta/rho)/T, spec §3.4); zeta0 from the exact population flow's pretraining (:func:`transfer_theory`)."""
    key = config.replace(seed=0)
    th = transfer_theory(key)
    _, down = transfer_tasks(key)
    zeta0 = float(th["zeta0"].sel(pretrain=coords["pretrain"]).values)
    return {"transfer_seed_ratio": zeta0 * down.T * math.sqrt(float(down.rho.mean()) * down.K), "zeta0": zeta0}


# ------------------------------------------------------------------------------------------------
# A claim's runs, for the figures
# ------------------------------------------------------------------------------------------------
# ------------------------------------------------------------------------------------------------
# Cost of a map cell (the registry's ``map.cost``: --full names the maps a CPU cannot afford)
# ------------------------------------------------------------------------------------------------
#: CPU core-seconds per token position of one run's SGD step on the batched numba engine
#: (:func:`empirical.scb.l1.train_runs`): measured 4.4e-8 (T = 128) to 7.0e-8 (T = 32) at batch 64
#: with 6 runs batched, 2-core machine under load; the larger is used
POSITION_SECONDS = 7e-8


def _positions(task: scb.SCBTask, steps: int, batch: int) -> float:
    return float(steps) * batch * task.T


def l1_cost(config: scb.SCBConfig, seeds: int, *, methods: int = 1) -> float:
    """Estimated CPU core-seconds of one l1 map cell: every rate of :func:`learning_rates` x
    ``seeds`` (x ``methods``) for :func:`l1_horizon` steps of ``batch x T`` positions."""
    task = scb.make_task(config)
    steps, _ = l1_steps(task, _lr(task))
    return methods * len(LR_FRACTIONS) * seeds * _positions(task, steps, config.batch) * POSITION_SECONDS


def l1_sgd_cost(config: scb.SCBConfig, seeds: int) -> float:
    """:func:`l1_cost` of the l1 method and vanilla SGD (the ``l1_beats_sgd`` cells)."""
    return l1_cost(config, seeds, methods=2)


def escape_cost(config: scb.SCBConfig, seeds: int) -> float:
    """Estimated CPU core-seconds of one escape cell: ``seeds`` runs of 3 t* steps at T/4 and at T
    (:func:`escape_context`; the runs stop at beta = 0.6, so this is an upper bound)."""
    total = 0.0
    for T in _contexts(config):
        cfg, task, _ = escape_context(config, T)
        total += seeds * _positions(task, cfg.steps, config.batch)
    return total * POSITION_SECONDS


def transfer_cost(config: scb.SCBConfig, seeds: int) -> float:
    """Estimated CPU core-seconds of one transfer cell: the pretraining to max(PRETRAIN) t* and
    the 1 + len(PRETRAIN) fine-tuning runs of 4 t* steps, per seed (:func:`_transfer_plan`)."""
    pre, down, _, _, quarter, snaps, steps_down = _transfer_plan(config)
    per_seed = _positions(pre, quarter * max(snaps), config.batch) + (1 + len(snaps)) * _positions(
        down, steps_down, config.batch)
    return seeds * per_seed * POSITION_SECONDS


def map_runs(name: str, *, quick: bool = True, device: str = "cpu") -> list[tuple[dict, scb.SCBConfig, Any]]:
    """``[(coords, config, runs)]``: claim ``name``'s runs function on every config point of its
    map (all seeds) — the very call its map cells make, so in one process the figures, the claims
    and the compare report share one computation (the functions above cache their runs)."""
    from ..claims import plan_claim
    from theory.refs import resolve_ref

    spec = claims.registry().get(name)
    plan = plan_claim(spec, quick=quick)
    runs = resolve_ref(spec.runs, f"{spec.field}.runs")
    used = sorted({p[1] for p in plan.points})  # the map's own cells (grid and demonstration points)
    cells = [plan.cells[i] for i in used]
    return [(dict(c.coords), c.config, runs(c.config, seeds=list(plan.seeds), device=device)) for c in cells]
