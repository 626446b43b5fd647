"""Scan & Snap's minibatch SDE: finite-T count-vector SGD on the symmetric subspace (docs/papers/scan_snap.md
§1.3, §8 Decision 9). The row's ``sde`` slot is :func:`sde`.

**The noise** is derived in :mod:`.derive` (``full_system(config, noise=True).noise``): the
per-sample loss ``l(theta; q)`` of one sequence — the class objective ``J_n`` with the sequence's
frequencies ``q`` in place of ``P(.|n)`` (docs/papers/scan_snap.md §1.3: a sequence enters only through its count
vector) — differentiated with the metric of the ``T = inf`` flow; ``q ~ Multinomial(T - 1,
P(.|n))/(T - 1)`` exactly (:func:`count_sampler`, a Monte-Carlo law: no closed form). On the
symmetric subspace every class gives the same per-sample flow, so the SDE's noise is the count
vectors' (the class draw moves only the antisymmetric directions, at first order).

**The drift is the finite-T flow** ``b_T(theta) = E_q[g(theta; q)]`` — gradient ascent on
``E_q[J_n(theta; q)]``, the expectation the minibatch gradient has. The loss is not linear in
``q`` (``f = q o e^z / |q o e^z|``), so ``b_T`` is not the ``T = inf`` flow ``b_inf(theta) =
g(theta; E q)``: ``b_T - b_inf = O(1/T)`` and it sets the finite-T shift of the attention. The
delta method (``Moments.multinomial`` with ``linearize=True``) would give ``b_inf`` as the drift and
a first-order covariance; it is not used (``docs/sde.md``: it misses the shift entirely). ``b_T``
has no closed form, so the model estimates it without bias:

* a **reference path** ``theta_ref``, Euler steps of :func:`default_dt` (one optimiser step without
  momentum), ``theta_ref += h b_T(theta_ref)`` with
  ``b_T(theta_ref)`` from fresh exact multinomial draws each step and the delta-method control
  variate ``g(x) - J (x - E x)`` (its mean is exactly ``E g``; it removes all but ``~ (S-1)/(T-1)``
  of the variance) — the draws per optimiser step are set so that the reference's Monte-Carlo error
  is ~0.18 of one SGD run's spread (:func:`reference_draws`);
* per path and step, ``M`` draws ``x_k`` (``samples``) from a pool of exact draws:
  ``drift = b_inf(theta_ref) + delta_ref + mean_k [g(theta; x_k) - g(theta_ref; x_k)]`` with
  ``theta_ref`` and ``delta_ref = b_T(theta_ref) - b_inf(theta_ref)`` interpolated linearly in
  time between the reference's steps — an unbiased estimate of ``b_T(theta)`` (up to that
  interpolation of the small, smooth ``delta_ref``) whose extra variance is second order in
  ``theta - theta_ref``;
* ``diffusion = sqrt(dtau/B) (G - mean G)^T / sqrt(M - 1)`` from the same draws
  (``E[F F^T] = Cov_q[g]``, the exact covariance).

So ``d theta = b_T dt + sqrt(dtau Cov_q[g]/B) dW`` in per-sample time (``dtau = 1/(1 - mu)``, the
ODE time of one optimiser step, :func:`theory.noise.step_time`); the Euler–Maruyama step ``dt``
defaults to ``dtau / ceil(dtau)`` (one optimiser step without momentum). ``T = inf``: the
per-sample flow does not depend on the sample, the SDE is the ODE (:func:`population_path`).
Float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import ConfigError
from .config import PAPER, ScanSnapConfig, make_task
from .derive import _layout_of, full_parameters, full_system

__all__ = ["count_sampler", "count_sampler_no_common", "count_statistics", "draw_statistics", "mean_statistics",
           "population_statistics", "per_sample_flows", "reference_draws", "Reference", "reference", "population_path", "CountSDE",
           "count_sde", "sde", "finite_T_flow", "POOL", "SAMPLES"]

#: exact draws in the pool the paths sample from (only the second-order terms use it)
POOL = 16384
#: per-sample flows per path and Euler step (the diffusion's rank; the control variate's sample)
SAMPLES = 8


# ------------------------------------------------------------------------------------------------
# The count vectors' law
# ------------------------------------------------------------------------------------------------
def _profile(config: ScanSnapConfig) -> tuple[np.ndarray, int, int]:
    """``(p, C, U)``: a class's support distribution, common tokens first (the official generator:
    every class has the same profile)."""
    task = make_task(config)
    sup = task.support(0)
    return task.P[0, sup], config.num_common, config.num_unique_per_next


def count_statistics(counts: np.ndarray, T: int, C: int) -> np.ndarray:
    """Counts ``(N, C + U)`` (common tokens first) -> the sample ``(N, U [+ 2])`` of
    :func:`theory.scan_snap.derive.sample_symbols`: DT frequencies, then ``q_c1``, ``q_c2``."""
    q = np.asarray(counts, np.float64) / (T - 1)
    if not C:
        return q
    return np.concatenate([q[:, C:], q[:, :C].sum(1, keepdims=True), (q[:, :C] ** 2).sum(1, keepdims=True)], 1)


def draw_statistics(config: ScanSnapConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` exact draws of one sequence's sample (``Multinomial(T - 1, P(.|n))``, numpy)."""
    p, C, _ = _profile(config)
    return count_statistics(rng.multinomial(config.T - 1, p, size=n), config.T, C)


def mean_statistics(config: ScanSnapConfig) -> np.ndarray:
    """``E[x]`` of the sample: ``P_dt``, ``C P_c`` and ``E q_c2 = C (P_c^2 + P_c (1 - P_c)/(T - 1))``."""
    p, C, _ = _profile(config)
    if not C:
        return p.copy()
    pc = p[:C]
    return np.r_[p[C:], pc.sum(), (pc**2).sum() + (pc * (1 - pc)).sum() / (config.T - 1)]


def population_statistics(config: ScanSnapConfig) -> np.ndarray:
    """The sample at ``q = P`` (``T = inf``): ``P_dt``, ``C P_c``, ``C P_c^2``; the per-sample flow
    there is the ``T = inf`` flow."""
    p, C, _ = _profile(config)
    return p.copy() if not C else np.r_[p[C:], p[:C].sum(), (p[:C] ** 2).sum()]


def _sampler(key, n, p, has_common: bool):
    import jax
    import jax.numpy as jnp

    T = p[4]
    if has_common:
        C, Pc, Pdt = p[5], p[7], p[8:]
        probs = jnp.concatenate([jnp.reshape(C * Pc, (1,)), Pdt])
    else:
        Pdt = p[5:]
        probs = Pdt
    k1, k2 = jax.random.split(key)
    counts = jax.random.multinomial(k1, T - 1, probs / probs.sum(), shape=(n, probs.shape[0]))
    names = [f"q_dt_{j}" for j in range(Pdt.shape[0])]
    if not has_common:
        return {nm: counts[:, j] / (T - 1) for j, nm in enumerate(names)}
    mc = counts[:, 0]  # the common tokens' total, split uniformly over the C tokens (conditional binomials)

    def split(i, carry):
        rem, s2, k = carry
        k, kk = jax.random.split(k)
        m = jax.random.binomial(kk, rem, 1.0 / (C - i))
        return rem - m, s2 + m * m, k

    _, s2, _ = jax.lax.fori_loop(0, C.astype(jnp.int32), split, (mc, jnp.zeros_like(mc), k2))
    out = {nm: counts[:, 1 + j] / (T - 1) for j, nm in enumerate(names)}
    out.update({"q_c1": mc / (T - 1), "q_c2": s2 / (T - 1) ** 2})
    return out


@lru_cache(maxsize=1)
def _sampler_jit():
    import jax

    return jax.jit(_sampler, static_argnums=(1, 3))


def count_sampler(key, n, p):
    """The noise's Monte-Carlo law (:class:`theory.noise.MonteCarlo` sampler; jax, exact): ``n``
    sequences' samples ``{name: (n,)}`` for the parameter vector ``p`` of ``full_system``
    (``(eta_Y, eta_Z, R, K, T, C, N_q, P_c, P_dt_0, ...)``)."""
    return _sampler_jit()(key, int(n), p, True)


def count_sampler_no_common(key, n, p):
    """:func:`count_sampler` for a layout without common tokens (``(eta_Y, eta_Z, R, K, T, P_dt_0, ...)``)."""
    return _sampler_jit()(key, int(n), p, False)


# ------------------------------------------------------------------------------------------------
# The per-sample flow (jax): full_system's parameters + one sample
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=16)
def _flows(layout: tuple[int, bool, bool]):
    """``(g, G)``: ``g(y, p, x)`` the per-sample flow (dim,) at state ``y``, parameters ``p`` and
    sample ``x``; ``G(Y, p, X)`` the same over pairs of rows of ``Y`` and ``X`` (M, dim) — one
    vmapped call, so a compiled graph holds the flow once (its compilation dominates the cost)."""
    import jax
    import jax.numpy as jnp

    from .derive import _per_sample_system

    f = _per_sample_system(*layout).to_jax()

    def g(y, p, x):
        return f(0.0, y, jnp.concatenate([p, x]))

    return g, jax.vmap(g, in_axes=(0, None, 0))


@lru_cache(maxsize=16)
def _flows_jit(layout):
    import jax

    return jax.jit(_flows(layout)[1])


def per_sample_flows(config: ScanSnapConfig, y, X) -> np.ndarray:
    """``g(y; X_k)`` (N, dim): the per-sample flows of samples ``X`` (N, U [+ 2]) at the state ``y``
    (dim,) (numpy out, jitted; for checks)."""
    import jax.numpy as jnp

    from theory.core import enable_x64

    enable_x64()
    X = np.atleast_2d(np.asarray(X, np.float64))
    G, p = _flows_jit(_layout_of(config)), jnp.asarray(_parameter_vector(config))
    Y = jnp.broadcast_to(jnp.asarray(y, jnp.float64), (BLOCK, len(full_system(config).state)))
    out = []
    for i in range(0, X.shape[0], BLOCK):  # blocks of one shape: one compilation
        block = np.zeros((BLOCK, X.shape[1]))
        block[: min(BLOCK, X.shape[0] - i)] = X[i:i + BLOCK]
        out.append(np.asarray(G(Y, p, jnp.asarray(block))))
    return np.concatenate(out)[: X.shape[0]]


def finite_T_flow(config: ScanSnapConfig, y, X) -> np.ndarray:
    """``mean_k g(y; X_k)``: the finite-T flow's Monte-Carlo estimate on the samples ``X``."""
    return per_sample_flows(config, y, X).mean(0)


def _parameter_vector(config: ScanSnapConfig) -> np.ndarray:
    return full_system(config).parameter_vector(full_parameters(config))


# ------------------------------------------------------------------------------------------------
# The reference path
# ------------------------------------------------------------------------------------------------
def reference_draws(config: ScanSnapConfig) -> int:
    """Exact draws per optimiser step of the reference: ``32 B (S - 1)/(T - 1)`` (S the support
    size), clipped to [256, 16384]. The control variate leaves ~``(S-1)/(T-1)`` of the per-sample
    variance (measured: 0.2-0.5 at T = 32, 0.01-0.02 at T = 1024), so the reference moves like an
    SGD run with batch ``~32 B``: its error is ~``1/sqrt(32) = 0.18`` of one run's spread."""
    S = config.num_common + config.num_unique_per_next
    return int(np.clip(math.ceil(32 * config.batch * (S - 1) / max(config.T - 1, 1)), 256, 16384))


@dataclass(frozen=True, eq=False)
class Reference:
    """The reference path on the Euler grid: ``t`` (n,), ``y`` (n, dim) ``theta_ref``, ``delta``
    (n, dim) ``b_T(theta_ref) - b_inf(theta_ref)``; ``residual`` (n,) the control variate's
    remaining share of the per-sample variance, ``draws`` per Euler step; ``exact``: ``T = inf``."""

    t: np.ndarray
    y: np.ndarray
    delta: np.ndarray
    residual: np.ndarray
    draws: int
    exact: bool = False


def _grid(t: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """The Euler grid of :func:`simulate.solve_sde` on output times ``t`` with step ``dt``:
    ``(step start times, steps)``."""
    from theory.noise import step_plan

    n, h = step_plan(np.asarray(t, np.float64), dt)
    hs = np.repeat(h, n)
    return float(t[0]) + np.r_[0.0, np.cumsum(hs)[:-1]], hs


#: draws per compiled call of the reference (one shape: one compilation per layout)
BLOCK = 256


@lru_cache(maxsize=8)
def _reference_block(layout):
    """``block(y, p, xbar, xpop, X (BLOCK, k))`` for draws ``X`` at state ``y``: the sums over the
    draws of the control-variate residuals ``R = g(x) - g(xbar) - J (x - xbar)`` and of ``R^2``,
    of ``g(x)`` and ``g(x)^2``, then ``g(xbar)`` and ``g(xpop)``. ``J`` comes from central
    differences in the sample: whatever ``J`` is, ``R``'s mean is ``E g - g(xbar)`` exactly (``E[x
    - xbar] = 0``); ``J``'s accuracy only sets how much variance ``R`` keeps."""
    import jax
    import jax.numpy as jnp

    _, G = _flows(layout)

    def block(y, p, xbar, xpop, X):
        k, n = xbar.shape[0], X.shape[0]
        eps = 1e-5 * jnp.maximum(jnp.abs(xbar), 1e-3)
        E = jnp.eye(k) * eps[None, :]
        pts = jnp.concatenate([X, xbar + E, xbar - E, xbar[None], xpop[None]])
        out = G(jnp.broadcast_to(y, (pts.shape[0], y.shape[0])), p, pts)
        Gs, g0, gp = out[:n], out[-2], out[-1]
        J = (out[n:n + k] - out[n + k:n + 2 * k]) / (2 * eps[:, None])  # (k, dim): dg/dx_i
        R = Gs - g0 - (X - xbar) @ J
        return R.sum(0), (R**2).sum(0), Gs.sum(0), (Gs**2).sum(0), g0, gp

    return jax.jit(block)


def reference(config: ScanSnapConfig, t, dt: float, *, draws: int | None = None, seed: int = 0,
              y0=None) -> Reference:
    """The reference path of :class:`CountSDE` on the Euler grid of output times ``t`` and step
    ``dt`` from ``y0`` (default zero init): ``draws`` exact multinomial draws per optimiser step
    (default :func:`reference_draws`; ``draws * h / dtau`` per Euler step of size ``h``, rounded up
    to blocks of :data:`BLOCK`), fresh each step (seeded)."""
    import jax.numpy as jnp

    from theory.core import enable_x64

    from ..noise import step_time

    enable_x64()
    starts, hs = _grid(t, dt)
    per_step = draws or reference_draws(config)
    n_blocks = max(1, int(math.ceil(per_step * float(hs.max()) / step_time(config) / BLOCK)))
    rng = np.random.default_rng([int(config.seed), int(seed), 0x5C5D])
    block = _reference_block(_layout_of(config))
    p = jnp.asarray(_parameter_vector(config))
    xbar, xpop = jnp.asarray(mean_statistics(config)), jnp.asarray(population_statistics(config))
    y = np.zeros(len(full_system(config).state)) if y0 is None else np.asarray(y0, np.float64)
    n = n_blocks * BLOCK
    ys, ds, rs = [], [], []
    for h in hs:
        sums = [0.0] * 4
        for _ in range(n_blocks):
            *parts, g0, gp = block(jnp.asarray(y), p, xbar, xpop, jnp.asarray(draw_statistics(config, BLOCK, rng)))
            sums = [a + np.asarray(b) for a, b in zip(sums, parts)]
        sR, sR2, sG, sG2 = sums
        bT = np.asarray(g0) + sR / n
        share = float((sR2 - sR**2 / n).sum() / max(float((sG2 - sG**2 / n).sum()), 1e-300))
        ys.append(y), ds.append(bT - np.asarray(gp)), rs.append(share)
        y = y + h * bT
    ys.append(y), ds.append(ds[-1]), rs.append(rs[-1])  # the last step's correction held to the end
    return Reference(np.r_[starts, starts[-1] + hs[-1]], np.stack(ys), np.stack(ds), np.asarray(rs), n)


def population_path(config: ScanSnapConfig, t, dt: float, *, y0=None) -> Reference:
    """``T = inf``: the Euler path of the ``T = inf`` flow on the same grid (the SDE there is this
    ODE: the per-sample flow does not depend on the sample on the subspace)."""
    import jax
    import jax.numpy as jnp

    from theory.core import enable_x64

    enable_x64()
    starts, hs = _grid(t, dt)
    g, _ = _flows(_layout_of(config))
    p, x = jnp.asarray(_parameter_vector(config)), jnp.asarray(population_statistics(config))

    def step(y, h):
        return y + h * g(y, p, x), y

    start = jnp.zeros(len(full_system(config).state)) if y0 is None else jnp.asarray(y0, jnp.float64)
    y_end, ys = jax.jit(lambda y, h: jax.lax.scan(step, y, h))(start, jnp.asarray(hs))
    y = np.concatenate([np.asarray(ys), np.asarray(y_end)[None]])
    return Reference(np.r_[starts, starts[-1] + hs[-1]], y, np.zeros_like(y), np.zeros(len(y)), 0, exact=True)


# ------------------------------------------------------------------------------------------------
# The SDE model
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CountSDE:
    """The finite-T count-vector SDE (module docstring) as a :func:`simulate.solve_sde` model.

    Compared (and hashed) by ``layout`` and ``samples`` only: every config of one layout shares the
    engine's compiled step (the numbers travel in :meth:`args`). ``config`` the setting;
    ``reference`` its :class:`Reference` (built on the grid of step ``dt``); ``pool`` (POOL, k)
    exact draws; ``step_time`` ``dtau``; ``batch`` ``B``."""

    layout: tuple[int, bool, bool]
    samples: int = SAMPLES
    config: Any = field(default=None, compare=False)
    reference: Reference | None = field(default=None, compare=False, repr=False)
    pool: np.ndarray | None = field(default=None, compare=False, repr=False)
    step_time: float = field(default=1.0, compare=False)
    batch: int = field(default=1, compare=False)
    dt: float = field(default=1.0, compare=False)

    paper = PAPER
    name = "counts_sde"

    @property
    def dim(self) -> int:
        return len(full_system(self.config).state)

    @property
    def noise_dim(self) -> int:
        return self.samples

    @property
    def uniforms_per_step(self) -> int:
        """Uniforms per path and step: the pool indices of the step's ``samples`` draws."""
        return self.samples

    def args(self):
        import jax.numpy as jnp

        ref = self.reference
        return {"p": jnp.asarray(_parameter_vector(self.config)),
                "x_pop": jnp.asarray(population_statistics(self.config)), "pool": jnp.asarray(self.pool),
                "t_ref": jnp.asarray(ref.t), "y_ref": jnp.asarray(ref.y), "d_ref": jnp.asarray(ref.delta),
                "scale": jnp.asarray(0.0 if ref.exact else math.sqrt(self.step_time / self.batch))}

    def initial_state(self) -> np.ndarray:
        """The reference's start (zero init unless the model was built from another state)."""
        return np.asarray(self.reference.y[0], np.float64).copy()

    def drift_and_diffusion(self, t, y, args, u):
        import jax.numpy as jnp

        _, G = _flows(self.layout)
        pool, tr, M = args["pool"], args["t_ref"], self.samples
        X = pool[jnp.minimum((u * pool.shape[0]).astype(jnp.int32), pool.shape[0] - 1)]
        i = jnp.clip(jnp.searchsorted(tr, t, side="right") - 1, 0, tr.shape[0] - 2)
        w = jnp.clip((t - tr[i]) / (tr[i + 1] - tr[i]), 0.0, 1.0)
        y_ref = (1 - w) * args["y_ref"][i] + w * args["y_ref"][i + 1]
        d_ref = (1 - w) * args["d_ref"][i] + w * args["d_ref"][i + 1]
        # one vmapped call: g(y; x_k) and g(y_ref; x_k) for the M draws, and g(y_ref; x_pop) = b_inf(y_ref)
        Ys = jnp.concatenate([jnp.broadcast_to(y, (M, y.shape[0])), jnp.broadcast_to(y_ref, (M + 1, y.shape[0]))])
        out = G(Ys, args["p"], jnp.concatenate([X, X, args["x_pop"][None]]))
        Gy, Gr, b_inf = out[:M], out[M:2 * M], out[-1]
        drift = b_inf + d_ref + (Gy - Gr).mean(0)
        F = (Gy - Gy.mean(0)).T * (args["scale"] / math.sqrt(M - 1))
        return drift, F

    def observables(self, Y):
        system = full_system(self.config)
        p = _parameter_vector(self.config)
        out = {n: Y[..., i] for i, n in enumerate(system.state_names)}
        out.update(system.observables_numpy()(Y, p))
        return out


def _check(config: ScanSnapConfig) -> None:
    if not config.zero_init:
        raise ConfigError("zero_init", "the SDE lives on the symmetric subspace, exact only from Y(0) = Z(0) = 0 "
                                       "(or from a state on it: count_sde(..., y0=))")
    if config.optimizer != "sgd":
        raise ConfigError("optimizer", "the minibatch SDE models SGD (Adam normalises its steps: no SDE limit)")


def default_dt(config: ScanSnapConfig) -> float:
    """``dtau / ceil(dtau)``: one optimiser step without momentum; momentum ``mu`` (``dtau = 1/(1 -
    mu)``): steps of at most one unit of per-sample time (the slow-momentum limit)."""
    from ..noise import step_time

    dtau = step_time(config)
    return dtau / math.ceil(dtau - 1e-9)


def count_sde(config: ScanSnapConfig, *, dt: float | None = None, samples: int = SAMPLES, draws: int | None = None,
              seed: int = 0, t=None, y0=None, exact_population: bool = False) -> CountSDE:
    """The :class:`CountSDE` of ``config``: Euler–Maruyama step ``dt`` (default :func:`default_dt`:
    one optimiser step without momentum; smaller for the SDE's own limit), its reference on the
    grid of :func:`default_dt` over ``t`` (default ``config.ode_times()``; the model interpolates it
    at other steps), from ``y0`` (default zero init: the paths start where the reference does);
    ``draws``: :func:`reference`'s; ``exact_population``: the ``T = inf`` model (no noise: every
    step is Euler on the ``T = inf`` flow)."""
    from ..noise import step_time

    _check(config)
    if samples < 2:
        raise ConfigError("samples", f"the sample covariance needs >= 2 draws per step, got {samples}")
    dt = float(default_dt(config) if dt is None else dt)
    if not dt > 0:
        raise ConfigError("dt", f"step must be > 0, got {dt}")
    t = config.ode_times() if t is None else np.asarray(t, np.float64)
    h = default_dt(config)
    ref = (population_path(config, t, h, y0=y0) if exact_population
           else reference(config, t, h, draws=draws, seed=seed, y0=y0))
    rng = np.random.default_rng([int(config.seed), int(seed), 0x9001])
    pool = (np.broadcast_to(population_statistics(config), (POOL, len(population_statistics(config)))).copy()
            if exact_population else draw_statistics(config, POOL, rng))
    return CountSDE(_layout_of(config), samples, config, ref, pool, step_time(config), int(config.batch), dt)


def sde(config: ScanSnapConfig):
    """The row's ``sde`` slot: ``(model, config.ode_times())`` for :func:`simulate.solve_sde`."""
    return count_sde(config), config.ode_times()
