"""JoMA's headline claims, decided over seeds inside the paper's regime, with validity maps.

The registry is ``claims.toml`` beside this module (docs/claims.md); the runs of every map point
are :func:`empirical.joma.seeds.train_seeds` (all seeds in one vectorised call). This module
holds the functions the registry names — per claim a statistic (one seed's trajectory -> a
number, applied identically to the network and to the theory), the regime's derived quantities
and the theory's trajectory — and :func:`claims`, the paper row's ``claims`` slot.

* ``invariant_holds`` / ``invariant_holds_mixture`` — Theorem 1 (softmax):
  :func:`invariant_residual`, :func:`invariant_regime`, :func:`block_theory`;
* ``entropy_drops_then_bounces`` — Theorem 4: :func:`entropy_rebound`, :func:`bounce_regime`,
  :func:`bounce_theory` (the probe's gradient flow, :func:`probe_flow`);
* ``learning_order_lowest_lca_first`` — §3.4 / Theorem 5: :func:`order_spearman`,
  :func:`hblt_regime`, :func:`hblt_theory`;
* the real-text claims (Figs. 6 and 8) — :mod:`.text` (``text_claims.toml``).

Every theory trajectory is measured by the network's own observables
(:func:`empirical.joma.seeds.observe_at` on the ODE's states), so network and theory are judged
by the same code.
"""

from __future__ import annotations

import json
import math
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import xarray as xr
from scipy.stats import spearmanr

from theory import joma as J
from theory.errors import SolverError

from ..claims import registry_claims

__all__ = ["claims", "decide_registry", "invariant_residual", "invariant_regime", "block_theory", "entropy_rebound",
           "bounce_regime", "bounce_theory", "probe_flow", "order_spearman", "hblt_regime", "hblt_theory",
           "THEORY_SEEDS", "lr_curvature_of_path"]

#: the registry's claims, decided through the sweep machinery (store, resume, --workers, --ray)
decide_registry = registry_claims("joma", Path(__file__).with_name("claims.toml"))

#: the theories' ODE tolerances (scipy DOP853): far below what the claims resolve
THEORY_TOLERANCE = {"rtol": 1e-8, "atol": 1e-10}

#: seeds over which a theory with per-seed randomness (the probe's targets) is evaluated: the
#: regime takes the worst case over them (at least the full map's 12 seeds)
THEORY_SEEDS = tuple(range(12))


@lru_cache(maxsize=4)
def _decided(quick: bool, device: str) -> tuple:
    return tuple(decide_registry(quick=quick, device=device, progress=False))


def claims(*, quick: bool = True, device: str = "auto", progress: bool = False, only=None) -> list:
    """The row's ``claims`` slot: the registry's claims (decided once per process and setting, so
    that ``tdyn figures`` and the compare report share them; the map cells are kept in the store)
    followed by the real-text claims of :mod:`.text` (none without a corpus)."""
    from .text import text_claim_results

    if only:
        return list(decide_registry(quick=quick, device=device, progress=progress, only=only))
    return [*_decided(quick, device), *text_claim_results(quick, device)]


claims.registry = decide_registry.registry  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------------
# Shared helpers: the value of a logged curve at time t, a config as a cache key
# ------------------------------------------------------------------------------------------------
def _at(traj, name: str, t: float) -> float:
    """``traj[name]`` at time ``t`` (linear interpolation between logged times); NaN past the end."""
    time = traj["time"].values
    if t > time[-1] * (1 + 1e-12) or t < time[0]:
        return float("nan")
    return float(np.interp(t, time, np.asarray(traj[name].values, dtype=np.float64)))


def _key(config) -> str:
    return json.dumps(config.to_dict(), sort_keys=True, default=str)


def _trajectory(config, times, variables: dict, system: str, **attrs) -> xr.Dataset:
    from simulate.trajectory import make_trajectory

    return make_trajectory(np.asarray(times, dtype=np.float64), variables, paper="joma", system=system, source="ode",
                           backend="scipy", config=config, extra_attrs=attrs or None)


def lr_curvature_of_path(engine, path, lr: float, points: int = 8) -> float:
    """``lr`` times the largest |eigenvalue| of the loss Hessian (in ``z, V, s``) at ``points``
    states along ``path`` (a list of ``(z, V, s)``, one seed): gradient descent follows the flow
    only where this stays below 2 (beyond, a step overshoots along that eigenvector)."""
    import torch

    shapes = [p.shape[1:] for p in engine.p.params]
    sizes = [int(np.prod(s)) for s in shapes]

    def loss(w):
        parts, i = [], 0
        for shape, n in zip(shapes, sizes):
            parts.append(w[i:i + n].reshape(1, *shape))
            i += n
        return engine.loss_of(*parts).sum()

    from empirical.trainer import torch_threads

    worst = 0.0
    with torch_threads(1):
        for j in np.unique(np.linspace(0, len(path) - 1, points).astype(int)):
            w = torch.cat([torch.as_tensor(np.asarray(x), dtype=torch.float64).reshape(-1) for x in path[j]])
            H = torch.autograd.functional.hessian(loss, w)
            worst = max(worst, float(torch.linalg.eigvalsh(0.5 * (H + H.T)).abs().max()))
    return lr * worst


# ------------------------------------------------------------------------------------------------
# Theorem 1 (softmax): invariant_holds, invariant_holds_mixture
# ------------------------------------------------------------------------------------------------
def invariant_residual(traj, config, *, t: float) -> float:
    """``|(z(t) - z(0)) - (zhat(t) - zhat(0))| / |z(t) - z(0)|`` at time ``t`` (interpolated
    between logged times): Theorem 1's relative residual, from the logits ``z_l`` and the
    estimate ``zhat_l = sum_k (v_kl^2 - |v_k|^2 E[x_l]) / (2T) + c`` the network and the theory log."""
    n = sum(1 for v in traj.data_vars if v.startswith("zhat_"))
    z = np.array([[_at(traj, f"{p}_{l + 1}", x) for l in range(n)] for p in ("z", "zhat") for x in (0.0, float(t))])
    dz, dzh = z[1] - z[0], z[3] - z[2]
    den = np.linalg.norm(dz)
    return float(np.linalg.norm(dz - dzh) / den) if den > 0 else float("nan")


@lru_cache(maxsize=16)
def _block_theory(key: str) -> xr.Dataset:
    import simulate as sim
    from empirical.joma.seeds import batched_engine, observe_at

    config = J.JomaConfig.from_dict(json.loads(key))
    eng = batched_engine(config, [0])
    X, G0 = eng.X[0].numpy(), eng.G0[0].numpy()
    z0, V0, s0 = (p.detach()[0].numpy() for p in eng.p.params)
    prob = J.block_flow_problem(config, X, G0, config.ode_times(), z0=z0, V0=V0, s0=s0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:  # tolerances far below the claims' resolution (residuals, entropies to ~1e-6)
            ds = sim.solve(prob, backend="scipy", **THEORY_TOLERANCE)
        except SolverError as err:  # a blow-up keeps the part solved
            ds = err.partial
    Mc, K = config.Mc, config.K
    Y = np.stack([ds[n].values for n in J.state_names(Mc, K)], axis=1)
    path = [(y[:Mc][None], y[Mc:Mc + K * Mc].reshape(1, K, Mc), y[Mc + K * Mc:][None]) for y in Y]
    rows = [observe_at(eng, *p) for p in path]
    keep = [n for n in rows[0] if not n.startswith(("v_", "s_", "z_"))]
    data = {n: np.array([r[n][0] for r in rows]) for n in keep}
    data.update({f"z_{l + 1}": Y[:, l] for l in range(Mc)})
    out = _trajectory(config, ds["time"].values, data, f"block_flow_frozen_G_{config.variant}",
                      note="block ODE (spec §2.1) from seed 0's init and data, G frozen at G(0) (Assumption 1)")
    out.attrs["lr_curvature_path"] = json.dumps([[np.asarray(a).tolist() for a in p] for p in path[:: max(len(path) // 8, 1)]])
    return out


def block_theory(config) -> xr.Dataset:
    """Theorem 1's (and the JoMA ODE's) trajectory for the block networks (``ce``, ``fixed``,
    ``mixture``): the block flow of spec §2.1 from seed 0's initialisation and data, with the
    back-propagated gradient frozen at ``G(0)`` (Assumption 1), measured with the network's own
    observables (``invariant_residual_rel``, ``attention_entropy``, ``g_drift`` = how far ``G``
    recomputed along the path has moved from ``G(0)``, the logit spreads)."""
    return _block_theory(_key(config))


def invariant_regime(config, coords) -> dict:
    """The regime of Theorem 1 at ``coords["t"]``, on the theory's trajectory: the attention
    logits' spread ``(max z - min z)/T`` (condition (i): ``E[b]`` at its ``z = 0`` value) and the
    output logits' spread ``max_n (max_k h_nk - min_k h_nk)`` (Assumption 1: ``G`` at ``G(0)``),
    and (reported) the drift of ``G`` along the path."""
    th = block_theory(config)
    t = float(coords["t"])
    return {n: _at(th, n, t) for n in ("attention_logit_spread", "output_logit_spread", "g_drift")}


# ------------------------------------------------------------------------------------------------
# Theorem 4: entropy_drops_then_bounces
# ------------------------------------------------------------------------------------------------
def entropy_rebound(traj, config, *, horizon: int) -> float:
    """``H(T) - min_{t <= T/2} H(t)`` (nats) of the attention entropy, ``T`` the ODE time of
    ``horizon`` optimiser steps: positive once the entropy has turned and risen back, negative
    while it is still falling. NaN when the run does not reach ``T`` or logs < 3 times before T/2."""
    T = config.ode_time(int(horizon))
    t, H = traj["time"].values, np.asarray(traj["attention_entropy"].values, dtype=np.float64)
    first = t <= T / 2 * (1 + 1e-12)
    if T > t[-1] * (1 + 1e-12) or first.sum() < 3:
        return float("nan")
    return float(np.interp(T, t, H) - H[first].min())


def probe_flow(mu, temperature: float, activation: str = "linear"):
    """The probe's gradient flow (its loss ``mean_n (mu_n - h_n)^2/2``, ``h_n = phi(v_n e^{z_n/T}
    + s)``, one token per class, exp attention): state ``(z (n), v (n), s)``, with ``g_n = (mu_n -
    h_n) phi'_n / n``: ``dz_n/dt = g_n v_n e^{z_n/T} / T``, ``dv_n/dt = g_n e^{z_n/T}``,
    ``ds/dt = sum_n g_n``. Returns ``f(t, y)``."""
    mu = np.asarray(mu, dtype=np.float64)
    n = mu.size

    def f(t, y):
        z, v, s = y[:n], y[n:2 * n], y[2 * n]
        e = np.exp(z / temperature)
        pre = v * e + s
        if activation == "linear":
            h, dphi = pre, np.ones_like(pre)
        elif activation == "tanh":
            h = np.tanh(pre)
            dphi = 1 - h**2
        else:
            h, dphi = np.maximum(pre, 0), (pre > 0).astype(float)
        g = (mu - h) * dphi / n
        return np.concatenate([g * v * e / temperature, g * e, [g.sum()]])

    return f


@lru_cache(maxsize=64)
def _probe_solution(seed: int, temperature: float, activation: str):
    """Dense solution of :func:`probe_flow` for seed ``seed``'s targets from zero init, to t = 1e5
    (converged long before), its turning time (argmin of the entropy) and the targets."""
    import torch
    from scipy.integrate import solve_ivp

    from empirical.joma.experiment import probe_targets

    mu = probe_targets(torch.Generator().manual_seed(int(seed))).numpy()
    n = mu.size
    sol = solve_ivp(probe_flow(mu, temperature, activation), (0.0, 1e5), np.zeros(2 * n + 1), method="LSODA",
                    rtol=1e-10, atol=1e-12, dense_output=True)
    ts = np.concatenate([np.linspace(0, 50, 5001)[:-1], np.geomspace(50, 1e5, 400)])
    Y = sol.sol(ts)
    H = J.entropy(Y[:n].T / temperature)
    return sol, float(ts[int(np.argmin(H))]), mu


def _probe_path(config, seed: int, times) -> np.ndarray:
    sol, _, _ = _probe_solution(int(seed), float(config.temperature), config.activation)
    return sol.sol(np.clip(np.asarray(times, dtype=np.float64), 0, 1e5)).T  # (n_time, 2n+1)


def bounce_theory(config):
    """The theory of Theorem 4's claim. Probe: the probe's gradient flow (:func:`probe_flow`) for
    the first five seeds' targets, an ensemble decided over its paths (the entropy of
    ``softmax(z/T)``). Mixture (outside the theorem's setting): the JoMA block ODE with ``G``
    frozen (:func:`block_theory`), whose entropy over positions never turns up on this horizon."""
    if config.variant != "probe":
        return block_theory(config)
    t = config.ode_times()
    out = []
    for seed in THEORY_SEEDS[:5]:
        Y = _probe_path(config, seed, t)
        n = (Y.shape[1] - 1) // 2
        H = J.entropy(Y[:, :n] / config.temperature)
        out.append(_trajectory(config, t, {"attention_entropy": H}, "probe_flow", seed=seed))
    return out


def bounce_regime(config, coords) -> dict:
    """Derived quantities of Theorem 4's regime at ``(lr, horizon)``: ``lr_curvature`` — ``lr``
    times the largest Hessian eigenvalue along the theory's path (worst over the theory seeds for
    the probe); ``turn_fraction`` — the theory's latest turning time ``t*`` over the horizon's ODE
    time ``T`` (``inf`` when the theory does not turn before ``T``)."""
    T = config.ode_time(int(coords["horizon"]))
    if config.variant == "probe":
        return {"lr_curvature": config.lr * _probe_curvature(float(config.temperature), config.activation),
                "turn_fraction": max(_probe_solution(s, float(config.temperature), config.activation)[1]
                                     for s in THEORY_SEEDS) / T}
    th = block_theory(config)
    t, H = th["time"].values, th["attention_entropy"].values
    i = int(np.argmin(np.where(t <= T, H, np.inf)))
    t_turn = float(t[i]) if 0 < i and t[i] < min(T, t[-1]) and H[-1] > H[i] else math.inf
    return {"lr_curvature": _block_curvature(_key(config)), "turn_fraction": t_turn / T}


@lru_cache(maxsize=8)
def _probe_curvature(temperature: float, activation: str) -> float:
    """The largest |Hessian eigenvalue| of the probe loss along the flow, worst over the theory seeds."""
    from empirical.joma.seeds import batched_engine

    worst = 0.0
    cfg = J.JomaConfig(variant="probe", temperature=temperature, activation=activation)
    for seed in THEORY_SEEDS:
        eng = batched_engine(cfg, [seed])
        times = np.concatenate([[0.0], np.geomspace(1e-2, 1e3, 11)])
        Y = _probe_path(cfg, seed, times)
        n = (Y.shape[1] - 1) // 2
        path = [(y[:n][None], y[n:2 * n][None, None, :], y[2 * n:][None]) for y in Y]
        worst = max(worst, lr_curvature_of_path(eng, path, 1.0))
    return worst


@lru_cache(maxsize=16)
def _block_curvature(key: str) -> float:
    """``lr`` times the largest |Hessian eigenvalue| of the block network's loss along
    :func:`block_theory`."""
    from empirical.joma.seeds import batched_engine

    config = J.JomaConfig.from_dict(json.loads(key))
    path = json.loads(block_theory(config).attrs["lr_curvature_path"])
    return lr_curvature_of_path(batched_engine(config, [0]), path, float(config.lr))


# ------------------------------------------------------------------------------------------------
# §3.4 / Theorem 5: learning_order_lowest_lca_first
# ------------------------------------------------------------------------------------------------
def _heights(config) -> np.ndarray:
    """LCA height of each contextual token (every leaf but the query, leaf 0) with the query."""
    return J.hblt_leaf_lca_heights(config.depth, config.branching, 0)[1:]


def order_spearman(traj, config, *, horizon: float) -> float:
    """Per seed: the Spearman rank correlation between the LCA height of each *learned* token
    (its attention logit at the horizon ``T`` above its start; suppressed tokens excluded) and its
    half-time (the first logged time its logit reaches half of its change at ``T``). NaN when the
    learned tokens span fewer than two heights (no order to measure) or the run ends before T."""
    T = float(horizon)
    t = traj["time"].values
    if T > t[-1] * (1 + 1e-12):
        return float("nan")
    keep = t <= T * (1 + 1e-12)
    H = _heights(config)
    Z = np.stack([np.asarray(traj[f"z_{l + 1}"].values, dtype=np.float64)[keep] for l in range(H.size)], axis=1)
    d = Z - Z[:1]
    final = d[-1]
    learned = final > 0
    if np.unique(H[learned]).size < 2:
        return float("nan")
    half = np.array([t[keep][int(np.argmax(d[:, l] >= 0.5 * final[l]))] for l in range(H.size)])
    return float(spearmanr(H[learned], half[learned])[0])


def hblt_regime(config, coords) -> dict:
    """``height_resolution``: the smallest gap between the co-occurrence excess of adjacent LCA
    heights (Theorem 5: ``rho^{2H}``, smallest at ``H = depth - 1``: ``rho^{2(depth-1)}(1 -
    rho^2)``) in units of two standard errors of the difference of two sample co-occurrences of
    ``n`` bags (``2 sqrt(2/n)``; a spin product has variance <= 1)."""
    rho, depth, n = float(config.rho), int(config.depth), int(config.hblt_samples)
    gap = rho ** (2 * (depth - 1)) * (1 - rho**2)
    return {"height_resolution": gap / (2 * math.sqrt(2 / n))}


@lru_cache(maxsize=16)
def _hblt_theory(key: str) -> xr.Dataset:
    import simulate as sim
    from empirical.joma.data import hblt_block_data
    from empirical.joma.seeds import seed_config

    config = J.JomaConfig.from_dict(json.loads(key))
    c0 = seed_config(config, 0)
    X, y, _ = hblt_block_data(c0, c0.hblt_samples, np.random.default_rng(c0.data_seed))
    Mc = X.shape[1]
    block = J.JomaConfig(attention=config.attention, Mc=Mc, K=1, N=1, d=Mc + 1, temperature=1.0)
    G0 = (y - 0.5)[:, None]  # -dBCE/dh at h = 0 (zero init): y - sigmoid(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:
            ds = sim.solve(J.block_flow_problem(block, X, G0, config.ode_times()), backend="scipy", **THEORY_TOLERANCE)
        except SolverError as err:
            ds = err.partial
    return _trajectory(config, ds["time"].values, {f"z_{l + 1}": ds[f"z_{l + 1}"].values for l in range(Mc)},
                       "hblt_block_flow_frozen_g", note="block ODE on seed 0's HBLT bags, g frozen at y - 1/2")


def hblt_theory(config) -> xr.Dataset:
    """The learning order's theory: the block ODE (spec §2.1) on seed 0's HBLT bags with the
    logistic gradient frozen at its zero-init value ``g = y - 1/2`` (Assumption 1; ``Delta_l =
    E[g x_l]`` the co-occurrence excess of Theorem 5)."""
    return _hblt_theory(_key(config))
