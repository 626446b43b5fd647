"""JoMA's headline claims, decided over seeds inside the paper's regime, with validity maps.

The registry is ``claims.toml`` beside this module (docs/claims.md); the runs of every map point
are :func:`empirical.joma.seeds.train_seeds` (all seeds in one vectorised call). This module
holds the functions the registry names — per claim a statistic (one seed's trajectory -> a
number, applied identically to the network and to the theory), the regime's derived quantities
and the theory's trajectory — and :func:`claims`, the paper row's ``claims`` slot.

* ``invariant_holds`` / ``invariant_holds_mixture`` — Theorem 1 (softmax):
  :func:`invariant_residual` (and Fig. 2's correlation measure), :func:`invariant_regime` (the
  gradient-flow bound ``lr x curvature < 2`` on the exact flow), :func:`block_theory` (=
  :func:`exact_theory`), the null :func:`invariant_null_runs` (the estimate of another token);
* ``entropy_drops_then_bounces`` — Theorem 4: :func:`entropy_rebound`, :func:`bounce_regime`,
  :func:`bounce_theory` (the probe's exact gradient flow, :func:`probe_flow`);
* ``learning_order_lowest_lca_first`` — §3.4 / Theorem 5: :func:`order_spearman`,
  :func:`hblt_regime`, :func:`hblt_theory` (= :func:`exact_theory` of the HBLT block);
* the real-text claims (Figs. 6 and 8) — :mod:`.text` (``text_claims.toml``).

Every theory is the **exact** gradient flow of the network the claim trains (the back-propagated
gradient recomputed along the path; nothing frozen or reduced), measured by the network's own
observables (:func:`empirical.joma.seeds.observe_at` on the ODE's states), so network and theory
are judged by the same code.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import xarray as xr
from scipy.stats import spearmanr

from theory import joma as J
from theory.errors import SolverError

from ..claims import RegistryClaims, registry_claims
from ..context import RunContext

__all__ = ["claims", "decide_registry", "invariant_residual", "invariant_regime", "invariant_null_runs",
           "block_theory", "exact_theory", "path_curvature", "entropy_rebound", "bounce_regime", "bounce_theory",
           "probe_flow", "order_spearman", "hblt_regime", "hblt_theory", "THEORY_SEEDS", "EXACT_SEEDS",
           "EXACT_HORIZON", "lr_curvature_of_path"]

#: the registry's claims, decided through the sweep machinery (store, resume, --workers, --ray)
decide_registry = registry_claims("joma", Path(__file__).with_name("claims.toml"))

#: the theories' ODE tolerances (scipy DOP853): far below what the claims resolve
THEORY_TOLERANCE = {"rtol": 1e-8, "atol": 1e-10}

#: seeds over which a theory with per-seed randomness (the probe's targets) is evaluated: the
#: regime takes the worst case over them (at least the full map's 12 seeds)
THEORY_SEEDS = tuple(range(12))


@lru_cache(maxsize=4)
def _decided(ctx: RunContext) -> tuple:
    """The registry's claims decided under ``ctx`` (the caller's, without a bar), once per process and context."""
    return tuple(decide_registry(ctx))


@dataclass(frozen=True)
class JomaClaims(RegistryClaims):
    """The row's ``claims`` slot: the registry's claims (decided once per process and context, so
    that ``tdyn figures`` and the compare report share them; the map cells are kept in the store)
    followed by the real-text claims of :mod:`.text` (untested without a corpus)."""

    def __call__(self, ctx: RunContext | None = None, *, quick: bool | None = None, device: str | None = None,
                 progress: bool | None = None, only=None) -> list:
        from .text import text_claim_results

        ctx = RunContext.of(ctx, quick=quick, device=device, progress=progress)
        if only:
            return decide_registry(ctx, only=only)
        return [*_decided(ctx.replace(progress=False)), *text_claim_results(ctx)]


claims = JomaClaims("joma", Path(__file__).with_name("claims.toml"))


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
            try:  # vmap over the Hessian's rows: ~25x faster than one backward pass per row
                H = torch.autograd.functional.hessian(loss, w, vectorize=True)
            except RuntimeError:  # pragma: no cover - an op without a batching rule
                H = torch.autograd.functional.hessian(loss, w)
            worst = max(worst, float(torch.linalg.eigvalsh(0.5 * (H + H.T)).abs().max()))
    return lr * worst


# ------------------------------------------------------------------------------------------------
# Theorem 1 (softmax): invariant_holds, invariant_holds_mixture
# ------------------------------------------------------------------------------------------------
#: ODE time to which the exact flows of the invariant claims' networks (``ce``: the official toy,
#: ``mixture``) are integrated: the official Fig. 2 run's horizon (2000 SGD steps at lr 0.1), where
#: those claims' time axes end; at a larger learning rate the runs go further, the claims do not
EXACT_HORIZON = {"ce": 200.0, "mixture": 200.0}

#: seeds of the exact flows (the theory's own ensemble, decided like the network's seeds; the
#: sign test needs >= 5 to let "holds" fire)
EXACT_SEEDS = tuple(range(5))


def _flat(params) -> np.ndarray:
    return np.concatenate([np.asarray(p.detach().cpu().numpy(), dtype=np.float64).reshape(-1) for p in params])


def _unflat(y, shapes):
    import torch

    out, i = [], 0
    for shape in shapes:
        n = int(np.prod(shape))
        out.append(torch.as_tensor(np.asarray(y[i:i + n]), dtype=torch.float64).reshape(shape))
        i += n
    return out


@lru_cache(maxsize=16)
def _exact_flow(key: str, seeds: tuple) -> tuple:
    """``(times, states)``: the exact gradient flow ``d theta/dt = -grad L(theta)`` of the
    network's own full-batch loss (every seed's, :func:`empirical.joma.seeds.batched_engine`: the
    back-propagated gradient ``G`` recomputed along the path, nothing frozen or reduced), from each
    seed's initialisation and data, at the config's logged times (scipy DOP853, float64; a flow
    that stops early keeps the part solved). ``states`` (n_time, n_state) of the flattened
    ``(z, V, s)`` of all seeds."""
    import torch
    from scipy.integrate import solve_ivp

    from empirical.joma.seeds import batched_engine
    from empirical.trainer import torch_threads

    config = J.JomaConfig.from_dict(json.loads(key))
    eng = batched_engine(config, list(seeds))
    shapes = [tuple(p.shape) for p in eng.p.params]

    def f(t, y):
        ps = [p.requires_grad_(True) for p in _unflat(y, shapes)]
        grads = torch.autograd.grad(eng.loss_of(*ps).sum(), ps)
        return -_flat(grads)

    times = config.ode_times()
    times = times[times <= EXACT_HORIZON.get(config.variant, np.inf) * (1 + 1e-12)]
    with torch_threads(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sol = solve_ivp(f, (0.0, float(times[-1])), _flat(eng.p.params), method="DOP853", t_eval=times,
                        **THEORY_TOLERANCE)
    return sol.t, sol.y.T, shapes


@lru_cache(maxsize=16)
def _exact_theory(key: str, seeds: tuple = EXACT_SEEDS) -> tuple:
    from empirical.joma.seeds import batched_engine, observe_at

    config = J.JomaConfig.from_dict(json.loads(key))
    times, Y, shapes = _exact_flow(key, seeds)
    eng = batched_engine(config, list(seeds))
    rows = [observe_at(eng, *_unflat(y, shapes)) for y in Y]
    out = []
    for i, seed in enumerate(seeds):
        data = {n: np.array([r[n][i] for r in rows]) for n in rows[0]}
        out.append(_trajectory(config, times, data, f"exact_gradient_flow_{config.variant}", seed=int(seed),
                               note="the network's own full-batch gradient flow (nothing frozen or reduced)"))
    return tuple(out)


def exact_theory(config) -> list:
    """The claims' theory for the block networks (``ce``: the official Figs. 2-3 toy, ``mixture``,
    ``hblt``): the **exact** gradient flow of the network's own full-batch loss (the T -> 0 limit
    of its SGD, with the back-propagated gradient recomputed along the path: Assumption 1 is not
    imposed), for the seeds :data:`EXACT_SEEDS` (initialisation and data of each), measured with
    the network's own observables (:func:`empirical.joma.seeds.observe_at`); up to
    :data:`EXACT_HORIZON` for the invariant claims' networks."""
    return list(_exact_theory(_key(config)))


def block_theory(config) -> list:
    """Theorem 1's theory on the block networks: :func:`exact_theory` (kept as the registry's name)."""
    return exact_theory(config)


@lru_cache(maxsize=256)
def _state_curvature(key: str, index: int) -> float:
    """``lr`` times the largest |Hessian eigenvalue| of the loss at seed 0's exact-flow state number
    ``index`` (of the config's logged times)."""
    config = J.JomaConfig.from_dict(json.loads(key))
    times, Y, shapes = _exact_flow(key, EXACT_SEEDS)
    S = len(EXACT_SEEDS)
    parts, i = [], 0
    for shape in shapes:  # seed 0's parameters: the first row of each (S, ...) block
        n = int(np.prod(shape[1:]))
        parts.append(Y[index, i:i + S * n].reshape(S, *shape[1:])[:1])
        i += S * n
    return lr_curvature_of_path(_loss_engine(key, EXACT_SEEDS[0]), [tuple(parts)], float(config.lr), points=1)


@lru_cache(maxsize=16)
def _loss_engine(key: str, seed: int):
    """The batched engine of one seed of config ``key``, built once: only its ``loss_of`` is used
    (which reads the data, never the engine's parameters), so every state of a path shares it."""
    from empirical.joma.seeds import batched_engine

    return batched_engine(J.JomaConfig.from_dict(json.loads(key)), [int(seed)])


def path_curvature(config, t: float, points: int = 8) -> float:
    """``lr`` times the largest |Hessian eigenvalue| of the loss along seed 0's exact flow up to time
    ``t``: the worst of ``points`` logged states spread geometrically over ``(0, t]`` (``t``'s own
    state included) and the initial state."""
    key = _key(config)
    times = _exact_flow(key, EXACT_SEEDS)[0]
    upto = np.nonzero(times <= float(t) * (1 + 1e-12))[0]
    pos = times[upto] > 0
    idx = {0, int(upto[-1])}
    if pos.any():
        grid = np.geomspace(times[upto][pos][0], times[upto[-1]], points)
        idx |= {int(upto[np.argmin(np.abs(times[upto] - g))]) for g in grid}
    return max(_state_curvature(key, i) for i in sorted(idx))


def invariant_residual(traj, config, *, t: float, measure: str = "residual") -> float:
    """``|(z(t) - z(0)) - (zhat(t) - zhat(0))| / |z(t) - z(0)|`` at time ``t`` (interpolated
    between logged times): Theorem 1's relative residual, from the logits ``z_l`` and the
    estimate ``zhat_l = sum_k (v_kl^2 - |v_k|^2 E[x_l]) / (2T) + c`` the network and the theory log.
    ``measure="nc"``: ``1 - NC(dzhat, dz)`` instead (Fig. 2's measure, the normalised correlation
    over tokens, which ignores the magnitude; the same boundary 1 = no correlation)."""
    n = sum(1 for v in traj.data_vars if v.startswith("zhat_"))
    z = np.array([[_at(traj, f"{p}_{l + 1}", x) for l in range(n)] for p in ("z", "zhat") for x in (0.0, float(t))])
    dz, dzh = z[1] - z[0], z[3] - z[2]
    if measure == "nc":
        return float(1 - J.normalised_correlation(dzh, dz)) if np.ptp(dz) > 0 and np.ptp(dzh) > 0 else float("nan")
    den = np.linalg.norm(dz)
    return float(np.linalg.norm(dz - dzh) / den) if den > 0 else float("nan")


def invariant_regime(config, coords) -> dict:
    """Theorem 1's assumptions at ``coords["t"]``, measured on the exact flow (:func:`exact_theory`):
    ``lr_curvature`` — the learning rate times the largest |Hessian eigenvalue| of the loss at the
    states of seed 0's flow up to ``t`` (SGD with one learning rate on ``W`` and ``z`` follows the
    gradient flow the theorem describes only below 2; equal rates, ``M_Q = 1`` and orthonormal
    fixed embeddings hold by construction of the network). Reported alongside, not part of the
    regime (the theorem's conditions (i)-(ii) and Assumption 1 are what the claim's residual
    tests): the largest over the theory seeds of ``g_drift`` (how far ``G`` has moved from
    ``G(0)``) and of the attention/output logit spreads at ``t``."""
    key = _key(config)
    t = float(coords["t"])
    out = {"lr_curvature": path_curvature(config, t)}
    for n in ("g_drift", "attention_logit_spread", "output_logit_spread"):
        out[n] = float(max(_at(tr, n, t) for tr in _exact_theory(key)))
    return out


def invariant_null_runs(config, *, seeds, device: str = "cpu"):
    """The invariant's null control: the same runs, with Theorem 1's estimate of token ``l`` taken
    from token ``l + Mc/2`` (a fixed rotation of the token labels, pairing each "distinct" token with
    a "common" one): the alternative the theorem excludes, that a logit follows the MLP weights of
    *another* token. Its residual must not pass the criterion."""
    from empirical.joma.seeds import train_seeds

    runs = train_seeds(config, seeds=seeds, device=device)
    n = sum(1 for v in runs.data_vars if v.startswith("zhat_"))
    shift = max(n // 2, 1)
    return runs.assign({f"zhat_{l + 1}": runs[f"zhat_{(l + shift) % n + 1}"] for l in range(n)})


# ------------------------------------------------------------------------------------------------
# Theorem 4: entropy_drops_then_bounces
# ------------------------------------------------------------------------------------------------
def entropy_rebound(traj, config, *, horizon: int, horizon_factor: float = 1.0) -> float:
    """``H(T) - min_{t <= T/2} H(t)`` (nats) of the attention entropy, ``T`` the ODE time of
    ``horizon`` optimiser steps (times ``horizon_factor``: the robustness row "horizon x4"):
    positive once the entropy has turned and risen back, negative while it is still falling. NaN
    when the run does not reach ``T`` or logs < 3 times before T/2."""
    T = config.ode_time(float(horizon) * float(horizon_factor))
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
    th = block_theory(config)[0]
    t, H = th["time"].values, th["attention_entropy"].values
    i = int(np.argmin(np.where(t <= T, H, np.inf)))
    t_turn = float(t[i]) if 0 < i and t[i] < min(T, t[-1]) and H[-1] > H[i] else math.inf
    return {"lr_curvature": path_curvature(config, T), "turn_fraction": t_turn / T}


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


# ------------------------------------------------------------------------------------------------
# §3.4 / Theorem 5: learning_order_lowest_lca_first
# ------------------------------------------------------------------------------------------------
def _heights(config) -> np.ndarray:
    """LCA height of each contextual token (every leaf but the query, leaf 0) with the query."""
    return J.hblt_leaf_lca_heights(config.depth, config.branching, 0)[1:]


def order_spearman(traj, config, *, horizon: float, horizon_factor: float = 1.0) -> float:
    """Per seed: the Spearman rank correlation between the LCA height of each *learned* token
    (its attention logit at the horizon ``T`` above its start; suppressed tokens excluded) and its
    half-time (the first logged time its logit reaches half of its change at ``T``). NaN when the
    learned tokens span fewer than two heights (no order to measure) or the run ends before T.
    ``T = horizon x horizon_factor`` (the robustness row "horizon x4")."""
    T = float(horizon) * float(horizon_factor)
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


def hblt_theory(config) -> list:
    """The learning order's theory: the exact gradient flow of the HBLT block's own logistic loss
    (:func:`exact_theory`: the gradient ``g = y - sigmoid(h)`` recomputed along the path, nothing
    frozen), on the bags of the seeds :data:`EXACT_SEEDS`."""
    return exact_theory(config)
