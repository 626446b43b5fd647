"""SCB minibatch-SGD SDEs for :func:`simulate.solve_sde` (docs/papers/scb.md §3.6), built on the noise
derived from the squared loss of one sequence (:mod:`theory.scb.derive`, :mod:`theory.noise`);
time in optimiser steps (``SCBConfig.ode_time``), sampled at ``config.ode_times()``.

* :class:`FullMinibatchSDE` — minibatch SGD on the full parameters ``(V, A)`` (spec §3.6 option
  A): the generic Monte-Carlo SDE of :func:`theory.scb.derive.full_system` (drift: the derived
  population flow; diffusion ``sqrt(Δτ/B) F``, ``F = (G - Ḡ)ᵀ/sqrt(M-1)`` from ``M`` fresh derived
  per-sample flows per step, :class:`theory.noise_sde.SampledNoiseSDE`). Its compiled step
  (:mod:`theory.scb.sde_numba`, ``backend="numba"``) draws the same law from alias tables and is
  tested equal in increment mean and covariance.
* :class:`ReducedMinibatchSDE` — the reduced SDE of spec §3.6 (the paper table's ``sde`` slot):
  state ``(zeta, omega, xi_k, beta_k, E_V, E_v, E_a,k)``; drift the derived
  :func:`~theory.scb.derive.closure_system` plus the energies' Itô terms; diffusion from the
  derived per-sample flow of :func:`~theory.scb.derive.noise_system` at the on-manifold point.

**Reduced SDE.** Any full state ``(V, A)`` is written, exactly, as (``beta_k``: the spec's
``eta_k``, renamed so that it does not read as a learning rate)

    v = V mu = omega mu + r_v,             mu . r_v = 0,              E_v   = |r_v|^2
    V - v 1^T = zeta P_tilde + R,          tr(R Sigma P_tilde^T) = 0, E_V   = tr(R Sigma R^T)
    a_k = xi_k 1 + beta_k q_k + delta_k,   delta_k _|_ 1, q_k,        E_a,k = |delta_k|^2

(:func:`reduced_coordinates`; ``zeta`` is the Sigma-projection of V onto P_tilde, so
``tr(V Sigma V^T) = K zeta^2 + E_V`` has no cross term). The population flow in these
coordinates is closed and exact (:func:`theory.scb.derive.closure_system`). One SGD step moves the
reduced coordinates by the projection of the minibatch flow, whose per-sample part is the derived
``g`` of :func:`~theory.scb.derive.noise_system`; its off-manifold part raises each energy by its
squared norm: the energies' Itô terms ``Δτ E|g_off|^2 / B``
(:func:`~theory.scb.derive.off_manifold_norms`). Closure (spec §3.6 [inferred]): the noise and the
Itô terms are evaluated at the on-manifold point of the current state (energies 0) and the
energies' own martingale terms ``2<R, dN>`` are dropped (second order in the off-manifold
amplitude). The full and the reduced SDE agree in the mean and variance of zeta and ``<a,q>``
(tests/theory/scb/test_sde.py, slow).

**Sampling.** A sample's flow on the manifold depends only on its statistics ``(kappa, b = X q_k,
nu = X 1, y)`` (:func:`~theory.scb.derive.statistic_symbols`); their exact joint law is tabulated
once (:func:`sample_tables`: query, support tokens and target enumerated, the other tokens' counts
as multinomial compositions) and each sample is one alias draw (:mod:`theory.sampling`) from a
uniform the engine supplies. ``M = mc_samples`` draws per step, centred on the exact mean (the
drift), give the unbiased covariance ``(g_m - E g)(g_m - E g)ᵀ/(M B)``; tables too large fall back
to :func:`draw_statistics` (a PRNG key per step; uniform ``q``). Float64.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache, partial

import numpy as np

from ..core import compile_expressions
from ..errors import ConfigError
from ..noise import step_time
from ..sampling import alias_draw, alias_table, compositions, multinomial_pmf
from . import derive as D
from .config import PAPER, SCBConfig, SCBTask, initial_parameters, make_task
from .population import observables_from_parameters

__all__ = [
    "FullMinibatchSDE",
    "ReducedMinibatchSDE",
    "minibatch_sde",
    "minibatch_sde_reduced",
    "full_parameters",
    "noise_parameters",
    "closure_parameters",
    "reduced_coordinates",
    "reduced_observables",
    "sample_tables",
    "draw_statistics",
    "draw_sequences",
    "check_modelled",
]


def check_modelled(config: SCBConfig) -> None:
    """:class:`ConfigError` for settings the SDEs do not model: they are minibatch SGD of the
    preconditioned rule without l1 or per-step projection (spec §3.6), on data with the query
    outside the context (Decision 1 A)."""
    if config.variant != "preconditioned":
        raise ConfigError("variant", f"the SCB SDEs model the preconditioned rule, not {config.variant!r}")
    if config.lam > 0:
        raise ConfigError("lam", "the SCB SDEs model SGD without the l1 prox (lam = 0)")
    if config.normalise != "end":
        raise ConfigError("normalise", "the SCB SDEs model SGD without the per-step projection (normalise='end')")
    if config.query != "outside":
        raise ConfigError("query", "the SCB SDEs' data law has the query outside the context (Decision 1 A)")


# ------------------------------------------------------------------------------------------------
# Parameter values of the derived systems for a task
# ------------------------------------------------------------------------------------------------
def closure_parameters(task: SCBTask, eta_V: float, eta_A: float) -> dict[str, float]:
    """Values of :func:`~theory.scb.derive.general_system`'s (and the closure's) parameters."""
    out = {"T": float(task.T), "K": task.K, "m2": task.m2, "eta_V": float(eta_V), "eta_A": float(eta_A)}
    out.update({f"mu_{i + 1}": float(m) for i, m in enumerate(task.mu)})
    out.update({f"rho_{i + 1}": float(r) for i, r in enumerate(task.rho)})
    return out


def _transition_values(task: SCBTask) -> dict[str, float]:
    N = task.N
    return {f"P_{i + 1}_{j + 1}": float(task.P[i, j]) for i in range(N) for j in range(N)}


def noise_parameters(task: SCBTask, eta_V: float, eta_A: float) -> dict[str, float]:
    """Values of :func:`~theory.scb.derive.noise_system`'s parameters (the closure's and ``P``)."""
    return {**closure_parameters(task, eta_V, eta_A), **_transition_values(task)}


def full_parameters(task: SCBTask, eta_V: float, eta_A: float) -> dict[str, float]:
    """Values of :func:`~theory.scb.derive.full_system`'s parameters."""
    out = {"eta_V": float(eta_V), "eta_A": float(eta_A), **{f"mu_{i + 1}": float(m) for i, m in enumerate(task.mu)},
           **_transition_values(task)}
    out.update({f"q_{t + 1}_{k + 1}": float(task.Qm[t, k]) for t in range(task.T) for k in range(task.N)})
    return out


# ------------------------------------------------------------------------------------------------
# Samplers of the derived noises' laws (jax; named in the exported systems)
# ------------------------------------------------------------------------------------------------
def _inverse_cdf(u, cdf):
    """Categorical draws from uniforms ``u`` (...) and a cumulative table ``cdf`` (..., n)."""
    import jax.numpy as jnp

    return jnp.sum(u[..., None] > cdf[..., :-1], axis=-1)


def draw_statistics(key, n: int, p) -> dict:
    """``n`` samples of :func:`~theory.scb.derive.noise_system`'s statistics from its parameter
    vector ``p`` (:func:`_draw_statistics`; compiled once per ``n``: jax's multinomial is a loop of
    binomial draws, slow op by op)."""
    return _compiled_statistics()(key, int(n), p)


@lru_cache(maxsize=1)
def _compiled_statistics():
    import jax

    return jax.jit(_draw_statistics, static_argnums=1)


def _draw_statistics(key, n: int, p) -> dict:
    """``n`` samples of :func:`~theory.scb.derive.noise_system`'s statistics from its parameter
    vector ``p`` (uniform ``q`` on ``Q = 1/rho`` positions, Decision 3): query ``k ~ mu``; the
    chosen support token ``x_s ~ mu`` and the target ``y ~ P[:, x_s]``; the other ``Q - 1`` support
    tokens and the ``T - Q`` off-support tokens as multinomial counts; ``b = (e_{x_s} + c_S)/Q``,
    ``nu = e_{x_s} + c_S + c_O``. Exact (inverse CDF; jax's multinomial)."""
    import jax
    import jax.numpy as jnp

    N = int(round(math.sqrt(p.shape[0] - 4))) - 1  # p = (T, K, m2, eta_V, eta_A, mu, rho, P): 5 + 2N + N^2
    T_, mu, rho = p[0], p[5:5 + N], p[5 + N]
    P = p[5 + 2 * N:].reshape(N, N)
    Q_ = jnp.round(1.0 / rho)
    ku, k1, k2 = jax.random.split(key, 3)
    u = jax.random.uniform(ku, (n, 3), dtype=p.dtype)
    cdf = jnp.cumsum(mu)
    k = _inverse_cdf(u[:, 0], cdf)
    xs = _inverse_cdf(u[:, 1], cdf)
    yy = _inverse_cdf(u[:, 2], jnp.cumsum(P.T[xs], axis=-1))
    e = jax.nn.one_hot(xs, N, dtype=p.dtype)
    c_S = jax.random.multinomial(k1, Q_ - 1.0, mu, shape=(n, N), dtype=p.dtype)
    c_O = jax.random.multinomial(k2, T_ - Q_, mu, shape=(n, N), dtype=p.dtype)
    cols = {"kappa": jax.nn.one_hot(k, N, dtype=p.dtype), "b": (e + c_S) / Q_, "nu": e + c_S + c_O,
            "y": jax.nn.one_hot(yy, N, dtype=p.dtype)}
    return {f"{name}_{i + 1}": cols[name][:, i] for name in cols for i in range(N)}


def draw_sequences(key, n: int, p, *, N: int, T: int) -> dict:
    """``n`` sequences (spec §1.2, query outside the context) for
    :func:`~theory.scb.derive.full_system` (``N`` tokens, context ``T``) from its parameter vector
    ``p = (eta_V, eta_A, mu, P, q)``: ``k ~ mu``, ``x_t ~ mu`` iid, ``s ~ q_k``, ``y ~ P[:, x_s]``,
    as one-hot indicators (inverse CDF; exact)."""
    import jax
    import jax.numpy as jnp

    mu = p[2:2 + N]
    P = p[2 + N:2 + N + N * N].reshape(N, N)
    q = p[2 + N + N * N:].reshape(T, N)
    u = jax.random.uniform(key, (n, T + 3), dtype=p.dtype)
    cdf = jnp.cumsum(mu)
    x = _inverse_cdf(u[:, :T], cdf)
    k = _inverse_cdf(u[:, T], cdf)
    s = _inverse_cdf(u[:, T + 1], jnp.cumsum(q.T[k], axis=-1))
    xs = jnp.take_along_axis(x, s[:, None], axis=1)[:, 0]
    yy = _inverse_cdf(u[:, T + 2], jnp.cumsum(P.T[xs], axis=-1))
    X = jax.nn.one_hot(x, N, dtype=p.dtype)  # (n, T, N)
    out = {f"x_{t + 1}_{i + 1}": X[:, t, i] for t in range(T) for i in range(N)}
    out.update({f"kappa_{i + 1}": (k == i).astype(p.dtype) for i in range(N)})
    out.update({f"y_{i + 1}": (yy == i).astype(p.dtype) for i in range(N)})
    return out


_SEQUENCES = re.compile(r"draw_sequences_(\d+)x(\d+)")


def __getattr__(name: str):
    """``draw_sequences_{N}x{T}``: :func:`draw_sequences` for N tokens and context T (the sampler
    :func:`~theory.scb.derive.full_system` names, so an exported full system can be drawn)."""
    m = _SEQUENCES.fullmatch(name)
    if m is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return partial(draw_sequences, N=int(m.group(1)), T=int(m.group(2)))


# ------------------------------------------------------------------------------------------------
# 1. Minibatch SGD on the full (V, A) (spec §3.6 option A)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class FullMinibatchSDE:
    """The derived Monte-Carlo SDE of :func:`~theory.scb.derive.full_system` on ``task`` (module
    docstring): ``model`` is the generic :class:`theory.noise_sde.SampledNoiseSDE` (drift,
    diffusion and their arguments are its own), with the state split into ``V`` and ``A``, the §4
    observables of the full parameters and the compiled numba step. Build it with
    :func:`minibatch_sde`."""

    model: object  # theory.noise_sde.SampledNoiseSDE
    task: SCBTask
    eta_V: float
    eta_A: float
    paper: str = PAPER
    name: str = "minibatch_sgd"

    uniforms_per_step = None  # a PRNG key per path and step (the model's sampler draws with it)

    @property
    def system(self):
        return self.model.system

    @property
    def dim(self) -> int:
        return self.model.dim

    @property
    def dt(self) -> float:
        return self.model.dt

    @property
    def noise_dim(self) -> int:
        return self.model.noise_dim

    @property
    def batch(self) -> int:
        return self.model.batch

    @property
    def mc_samples(self) -> int:
        return self.model.mc_samples

    def args(self):
        return self.model.args()

    def initial_state(self) -> np.ndarray:
        return self.model.initial_state()

    def drift(self, t, y, args):
        return self.model.drift(t, y, args)

    def diffusion(self, t, y, args, key):
        return self.model.diffusion(t, y, args, key)

    def drift_and_diffusion(self, t, y, args, key):
        return self.model.drift_and_diffusion(t, y, args, key)

    def state_variables(self, Y: np.ndarray) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
        """Split ``Y`` (..., dim) into ``V`` (row, col) and ``A`` (position, query)."""
        N, T_ = self.task.N, self.task.T
        lead = Y.shape[:-1]
        return {"V": (("row", "col"), Y[..., : N * N].reshape(*lead, N, N)),
                "A": (("position", "query"), Y[..., N * N:].reshape(*lead, T_, N))}

    def observables(self, Y: np.ndarray) -> dict[str, np.ndarray]:
        N, T_ = self.task.N, self.task.T
        lead = Y.shape[:-1]
        return observables_from_parameters(Y[..., : N * N].reshape(*lead, N, N),
                                           Y[..., N * N:].reshape(*lead, T_, N), self.task)

    def numba_increment(self):
        """``(increment, params)`` for ``simulate.solve_sde(..., backend="numba")``: the same step
        compiled (:mod:`theory.scb.sde_numba`: the population flow in loops, the per-sample flows
        of alias-drawn sequences), tested equal in increment mean and covariance."""
        from .sde_numba import increment_kernel

        return increment_kernel(self.task.N, self.task.T), self._numba_params

    @cached_property
    def _numba_params(self) -> tuple:
        from .sde_numba import kernel_params

        # the kernel's noise scale 1/sqrt((M-1) B) with B -> B/Δτ is sqrt(Δτ/((M-1) B))
        return kernel_params(self.task, self.eta_V, self.eta_A, self.model.batch / self.model.step_time)


def minibatch_sde(config: SCBConfig, mc_samples: int = 64) -> tuple[FullMinibatchSDE, np.ndarray]:
    """``(sde, t)``: minibatch SGD on the full (V, A) (:class:`FullMinibatchSDE`, ``mc_samples``
    per-sample flows per step), sampled at ``config.ode_times()``."""
    from theory.noise_sde import SampledNoiseSDE

    check_modelled(config)
    task = make_task(config)
    system = D.full_system(task.N, task.T)
    V0, A0 = initial_parameters(config, task)
    generic = SampledNoiseSDE(system, full_parameters(task, config.eta_V, config.eta_A),
                              np.concatenate([V0.ravel(), A0.ravel()]), step_time(config), int(config.batch),
                              "samples", int(mc_samples))
    return FullMinibatchSDE(generic, task, float(config.eta_V), float(config.eta_A)), config.ode_times()


# ------------------------------------------------------------------------------------------------
# 2. The reduced SDE (module docstring)
# ------------------------------------------------------------------------------------------------
#: largest outcome table drawn by alias (one uniform per draw); larger ones use the key sampler
TABLE_MAX = 2**16
#: the (sample, off-support counts) tables are merged into one draw when their product fits
JOINT_MAX = 2**15


def reduced_coordinates(V, A, task: SCBTask) -> np.ndarray:
    """The exact reduced coordinates (zeta, omega, xi_1..N, beta_1..N, E_V, E_v, E_a,1..N) of full
    parameters ``V`` (..., N, N), ``A`` (..., T, N) (module docstring; spec §3.6)."""
    V, A = np.asarray(V, float), np.asarray(A, float)
    mu, Pt, Sig, Qm, K, m2 = task.mu, task.P_tilde, task.Sigma, task.Qm, task.K, task.m2
    v = V @ mu
    omega = v @ mu / m2
    E_v = (v**2).sum(-1) - m2 * omega**2
    Vt = V - v[..., :, None]
    zeta = np.einsum("...ij,jk,ik->...", Vt, Sig, Pt) / K
    R = Vt - zeta[..., None, None] * Pt
    E_V = np.einsum("...ij,jk,...ik->...", R, Sig, R)
    rho = task.rho
    i1, iq = A.sum(-2), (A * Qm).sum(-2)  # <a_k, 1>, <a_k, q_k>
    det = task.T * rho - 1.0
    xi = (rho * i1 - iq) / det
    beta = (task.T * iq - i1) / det
    n = (A**2).sum(-2)
    E_a = n - (task.T * xi**2 + 2 * xi * beta + rho * beta**2)
    return np.concatenate([zeta[..., None], omega[..., None], xi, beta, E_V[..., None], E_v[..., None], E_a], -1)


def _support_weights(task: SCBTask) -> np.ndarray:
    """``w[k, j] = q_k`` at its j-th support position, (N, Q)."""
    return task.Qm[task.support, np.arange(task.N)[:, None]]


def sample_tables(task: SCBTask):
    """Exact outcome tables of one sample's statistics (spec §1.2), for alias draws.

    A sample is (query k ~ mu, the Q support tokens ~ mu iid, target y ~ sum_j q_k[j] P[:, x_j],
    the T - Q off-support token counts ~ Multinomial(T - Q, mu)); its flow on the manifold depends
    only on the features ``(kappa = e_k, b = X q_k, nu = X 1, y = e_y)`` (4N,). Returns a list of
    ``(prob (n,), features (n, 4N))`` whose draws are independent and whose features add — one
    joint table when it has at most :data:`JOINT_MAX` outcomes, else two — or ``None`` when a
    table would exceed :data:`TABLE_MAX` (the model then samples with a key)."""
    N, T_, Q_ = task.N, task.T, task.support.shape[1]
    n_off = T_ - Q_
    n_comp = math.comb(n_off + N - 1, N - 1)  # compositions of n_off into N parts
    if N ** (Q_ + 2) > TABLE_MAX or n_comp > TABLE_MAX:
        return None
    w, mu, P, eye = _support_weights(task), task.mu, task.P, np.eye(N)
    import itertools

    idx = np.array(list(itertools.product(range(N), repeat=Q_ + 2)))  # (k, x_1..x_Q, y)
    k, xs, yt = idx[:, 0], idx[:, 1:Q_ + 1], idx[:, -1]
    pA = mu[k] * mu[xs].prod(1) * (w[k] * P[yt[:, None], xs]).sum(1)
    FA = np.concatenate([eye[k], np.einsum("aq,aqn->an", w[k], eye[xs]), eye[xs].sum(1), eye[yt]], axis=1)
    C = compositions(n_off, N)
    pC = multinomial_pmf(C, mu)
    FC = np.concatenate([np.zeros((len(C), 2 * N)), C, np.zeros((len(C), N))], axis=1)
    tables = [(pA, FA), (pC, FC)]
    tables = [(p[p > 0], F[p > 0]) for p, F in tables]
    if len(tables[0][0]) * len(tables[1][0]) <= JOINT_MAX:
        (pa, fa), (pc, fc) = tables
        tables = [(np.outer(pa, pc).ravel(), (fa[:, None, :] + fc[None, :, :]).reshape(-1, 4 * N))]
    return tables


@lru_cache(maxsize=None)
def _reduced_terms(N: int, modules: str):
    """``f(theta, p, x) -> [g (2+2N), off (2+N)]``: the derived per-sample flow on the manifold and
    the squared norms of its off-manifold parts (:func:`~theory.scb.derive.noise_system`,
    :func:`~theory.scb.derive.off_manifold_norms`), lambdified once per N."""
    S = D.noise_system(N, exact=False)
    exprs = [*S.noise.gradient, *D.off_manifold_norms(N)]
    return compile_expressions((S.state, S.parameters, S.noise.samples), exprs,
                               "jax" if modules == "jax" else "numpy", cse=True)


@dataclass(frozen=True, eq=False)
class ReducedMinibatchSDE:
    """The reduced minibatch-SGD SDE (module docstring), state (zeta, omega, xi_1..N, beta_1..N,
    E_V, E_v, E_a,1..N), time in optimiser steps; ``step_time`` = ``Δτ`` (one step: 1).
    ``noise_dim = mc_samples``. Build it with :func:`minibatch_sde_reduced`."""

    task: SCBTask
    eta_V: float
    eta_A: float
    batch: int
    mc_samples: int = 2  # centred on the exact mean: any M >= 1 gives the right covariance in mean
    step_time: float = 1.0
    paper: str = PAPER
    name: str = "minibatch_sgd_reduced"

    def __post_init__(self):
        if int(self.batch) < 1 or int(self.mc_samples) < 1:
            raise ConfigError("batch", f"batch and mc_samples must be >= 1, got {self.batch}, {self.mc_samples}")

    def _structure(self) -> tuple:
        """What the compiled step depends on beyond its ``args``: sizes and the tables' shapes (the
        learning rates, the batch, the task's numbers and tables travel in ``args``)."""
        tables = None if self._tables is None else tuple(len(p) for p, _ in self._tables)
        return (self.N, self.task.T, self.task.support.shape[1], int(self.mc_samples), tables)

    def __eq__(self, other) -> bool:
        """Equal structure: the engine's compiled step (cached per model) is reused across learning
        rates, batches and tasks of the same sizes (a calibration map's cells)."""
        return isinstance(other, ReducedMinibatchSDE) and self._structure() == other._structure()

    def __hash__(self) -> int:
        return hash(("ReducedMinibatchSDE", self._structure()))

    @property
    def N(self) -> int:
        return self.task.N

    @property
    def dim(self) -> int:
        return 4 + 3 * self.N

    @property
    def dt(self) -> float:
        """Preferred Euler–Maruyama step: one optimiser step."""
        return float(self.step_time)

    @property
    def noise_dim(self) -> int:
        return self.mc_samples

    @cached_property
    def system(self):
        """The drift's system (:func:`~theory.scb.derive.closure_system`)."""
        return D.closure_system(self.N)

    @cached_property
    def _tables(self):
        return sample_tables(self.task)

    @property
    def uniforms_per_step(self) -> int | None:
        """One uniform per sample and outcome table (alias draws, :func:`sample_tables`); ``None``
        (a PRNG key per step, :func:`draw_statistics`) when the tables would be too large."""
        return None if self._tables is None else self.mc_samples * len(self._tables)

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.system.state_names

    def initial_state(self) -> np.ndarray:
        V0, A0 = initial_parameters(self.task.config, self.task)
        return reduced_coordinates(V0, A0, self.task)

    def parameter_values(self) -> dict[str, float]:
        return noise_parameters(self.task, self.eta_V, self.eta_A)

    def args(self):
        import jax.numpy as jnp

        if self._tables is None and not np.allclose(self.task.rho, 1.0 / self.task.support.shape[1]):
            raise ConfigError("attention", "outcome tables too large and q not uniform: no sampler for this task")
        c = {"p": jnp.asarray(self.system.parameter_vector(closure_parameters(self.task, self.eta_V, self.eta_A))),
             "pn": jnp.asarray(D.noise_system(self.N, exact=False).parameter_vector(self.parameter_values())),
             "batch": jnp.asarray(float(self.batch)), "dtau": jnp.asarray(float(self.step_time))}
        if self._tables is not None:
            c["tables"] = [(jnp.asarray(pr), jnp.asarray(al), jnp.asarray(F))
                           for pr, al, F in ((*alias_table(p), F) for p, F in self._tables)]
        return c

    def drift(self, t, y, args):
        """The closure's drift without the energies' Itô terms (the engine calls
        :meth:`drift_and_diffusion`)."""
        return self.system.to_jax()(t, y, args["p"])

    def _features(self, args, noise):
        """(M, 4N) statistics (kappa, b, nu, y) of ``mc_samples`` samples: one alias draw per sample
        and table (``noise``: the step's uniforms), or :func:`draw_statistics` (``noise``: a key)."""
        import jax.numpy as jnp

        M, N = self.mc_samples, self.N
        if self._tables is None:
            xs = draw_statistics(noise, M, args["pn"])
            return jnp.stack([xs[f"{n}_{i + 1}"] for n in ("kappa", "b", "nu", "y") for i in range(N)], axis=1)
        u = noise.reshape(M, len(args["tables"]))
        return sum(Ft[alias_draw(u[:, i], pr, al)] for i, (pr, al, Ft) in enumerate(args["tables"]))

    def drift_and_diffusion(self, t, y, args, noise):
        """One step's ``(f (dim,), g (dim, M))`` from one set of samples: ``g`` the centred derived
        per-sample flows ``(g_m - E g) sqrt(Δτ/(M B))`` (energy rows 0; ``E g`` the exact drift on
        the manifold); ``f`` the closure's drift plus the energies' Itô terms
        ``Δτ mean_m |g_off,m|^2 / B`` (unbiased for ``Δτ tr Cov(g_off)/B``)."""
        import jax.numpy as jnp

        N, M = self.N, self.mc_samples
        d = 2 + 2 * N
        F = self._features(args, noise)
        vals = _reduced_terms(N, "jax")(tuple(y[i] for i in range(d)), args["pn"], [F[:, j] for j in range(4 * N)])
        vals = [jnp.broadcast_to(jnp.asarray(v, y.dtype), (M,)) for v in vals]
        G, off = jnp.stack(vals[:d]), jnp.stack(vals[d:])
        rhs = self.system.to_jax()
        f = rhs(t, y, args["p"])
        mean = rhs(t, y.at[d:].set(0.0), args["p"])[:d]  # E g: the flow at the on-manifold point
        scale = jnp.sqrt(args["dtau"] / (M * args["batch"]))
        Dm = (G - mean[:, None]) * scale
        f = f.at[d:].add(args["dtau"] * off.mean(1) / args["batch"])
        return f, jnp.concatenate([Dm, jnp.zeros((2 + N, M), y.dtype)], axis=0)

    def diffusion(self, t, y, args, noise):
        """The noise matrix alone (the engine calls :meth:`drift_and_diffusion`)."""
        return self.drift_and_diffusion(t, y, args, noise)[1]

    # -- diagnostics (numpy) ------------------------------------------------------------------------
    def exact_moments(self, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(E g, Cov g, E off)`` per sample at the on-manifold point of ``y``, summed exactly over
        the outcome tables (every combination of the tables' outcomes; for tests and diagnostics)."""
        if self._tables is None:
            raise ConfigError("T", "the outcome tables are too large to sum")
        p, F = self._tables[0]
        for p2, F2 in self._tables[1:]:
            p = np.outer(p, p2).ravel()
            F = (F[:, None, :] + F2[None, :, :]).reshape(-1, F.shape[1])
        N, d = self.N, 2 + 2 * self.N
        pn = D.noise_system(N, exact=False).parameter_vector(self.parameter_values())
        vals = _reduced_terms(N, "numpy")(tuple(np.asarray(y, float)[:d]), pn, [F[:, j] for j in range(4 * N)])
        V = np.stack([np.broadcast_to(np.asarray(v, float), p.shape) for v in vals], axis=1)
        G, off = V[:, :d], V[:, d:]
        mean = p @ G
        cov = (p[:, None] * (G - mean)).T @ (G - mean)
        return mean, cov, p @ off

    def observables(self, Y: np.ndarray) -> dict[str, np.ndarray]:
        return reduced_observables(Y, self.task)


def reduced_observables(Y: np.ndarray, task: SCBTask) -> dict[str, np.ndarray]:
    """The reduced SDE's state by name and the §4 observables of reduced states ``Y`` (..., 4 + 3N)
    (the population loss with the energies; spec §3.1, §3.6)."""
    N = task.N
    Y = np.asarray(Y, float)
    zeta, omega = Y[..., 0], Y[..., 1]
    xi, beta = Y[..., 2:2 + N], Y[..., 2 + N:2 + 2 * N]
    E_V, E_v, E_a = Y[..., 2 + 2 * N], Y[..., 3 + 2 * N], Y[..., 4 + 2 * N:]
    rho, T_, mu = task.rho, task.T, task.mu
    s, cc = T_ * xi + beta, xi + rho * beta
    n = T_ * xi**2 + 2 * xi * beta + rho * beta**2 + E_a
    vv, vp = task.K * zeta**2 + E_V, task.K * zeta
    v2, mv = task.m2 * omega**2 + E_v, task.m2 * omega
    # population loss sum_k mu_k per_k (spec §3.3) with the mu-sums taken first (fewer (..., N) temporaries):
    # 0.5 n vv - cc vp + 0.5 rho K + 0.5 (s^2 |v|^2 - 2 s mu.v + m2), plus 0.5 (1 - m2 - K mu.rho)
    loss = 0.5 * vv * (n @ mu) - vp * (cc @ mu) + 0.5 * (v2 * ((s * s) @ mu) - 2 * mv * (s @ mu)) + 0.5
    out = {name: Y[..., i] for i, name in enumerate(D.closure_system(N).state_names)}
    out.update({
        "value_transition_correlation": zeta,
        "value_mean_scale": omega,
        "attention_target_overlap": cc.mean(-1),
        "attention_sum": s.mean(-1),
        "attention_sq_norm": n.mean(-1),
        "population_loss": loss,
    })
    return out


def minibatch_sde_reduced(config: SCBConfig, mc_samples: int = 2):
    """``(sde, t)`` for `tdyn simulate scb --sde` (the paper table's ``sde`` slot): the reduced
    minibatch-SGD SDE (:class:`ReducedMinibatchSDE`), sampled at ``config.ode_times()``."""
    check_modelled(config)
    task = make_task(config)
    return (ReducedMinibatchSDE(task, config.eta_V, config.eta_A, config.batch, mc_samples, step_time(config)),
            config.ode_times())
