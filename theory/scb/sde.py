"""SCB minibatch-SGD SDEs for :func:`simulate.solve_sde` (papers/scb.md §3.6), time in optimiser
steps (``SCBConfig.ode_time``), sampled at ``config.ode_times()``.

* :class:`MinibatchSDE` — minibatch SGD on the full parameters ``(V, A)`` (spec §3.6 option A), in
  jax; the same step compiled in numba (:mod:`theory.scb.sde_numba`,
  :meth:`MinibatchSDE.numba_increment`) runs with ``simulate.solve_sde(sde, t, backend="numba")``
  — about 4x the jax engine with the fast sampler on 2 cores (``make bench``);
* :class:`FastMinibatchSDE` — the same model with the data drawn from uniforms (alias tables);
* :class:`ReducedMinibatchSDE` — the reduced SDE of spec §3.6 (the paper table's ``sde`` slot), with
  its per-component (unrolled) step for small N (:func:`reduced_terms_unrolled`).

**Reduced SDE** (spec §3.6 "Reduced SDE", with the exact decomposition below). Any full state
``(V, A)`` is written, exactly, as (``beta_k``: the spec's ``eta_k``, renamed so that it does not
read as a learning rate)

    v = V mu = omega mu + r_v,             mu . r_v = 0,              E_v   = |r_v|^2
    V - v 1^T = zeta P_tilde + R,          tr(R Sigma P_tilde^T) = 0, E_V   = tr(R Sigma R^T)
    a_k = xi_k 1 + beta_k q_k + delta_k,   delta_k _|_ 1, q_k,        E_a,k = |delta_k|^2

(``zeta`` is the Sigma-projection of V onto P_tilde; with it ``tr(V Sigma V^T) = K zeta^2 + E_V``
has no cross term). The preconditioned population flow (spec §3.2-3.3) in these coordinates is
*closed* and exact — the off-manifold parts decay isotropically:

    zeta'  = -eta_V [(mu.n) zeta - mu.c]          E_V'    = -2 eta_V (mu.n) E_V
    omega' = -eta_V [S2 omega - S1]               E_v'    = -2 eta_V S2 E_v
    xi_k'  = -eta_A [vv xi_k + s_k |v|^2 - mu.v]  beta_k' = -eta_A [vv beta_k - vp]
    E_a,k' = -2 eta_A vv E_a,k

with ``n_k = T xi_k^2 + 2 xi_k beta_k + rho_k beta_k^2 + E_a,k``, ``s_k = T xi_k + beta_k``,
``c_k = xi_k + rho_k beta_k``, ``vv = K zeta^2 + E_V``, ``vp = K zeta``, ``|v|^2 = m2 omega^2 + E_v``,
``mu.v = m2 omega``, ``S1 = sum mu_k s_k``, ``S2 = sum mu_k s_k^2``.

Noise (the closure, spec §3.6 [inferred]): minibatch noise is estimated from ``mc_samples``
per-sample gradients evaluated at the on-manifold point of the current reduced state (energies
set to 0), drawn from sufficient statistics only (query k, the Q support tokens, the off-support
token counts, the target) and projected onto (zeta, omega, xi_k, beta_k); they are centred on the
exact population mean, so ``(g_m - E g)(g_m - E g)^T / (M B)`` is an unbiased covariance estimate.
Each energy gains its Itô term ``tr Cov(off-manifold part)/B = E|g_off|^2/B`` (the population
gradient has no off-manifold part on the manifold); the energies' own martingale terms
``2<R, dN>`` are dropped (second order in the off-manifold amplitude). Float64.

Sampling: a sample's projected gradient depends only on (k, b = X q_k, cnt = X 1, y); their exact
joint law is tabulated once (:func:`sample_tables`: query, support tokens and target enumerated,
off-support counts as multinomial compositions) and each sample is one alias draw
(:mod:`theory.sampling`) from a uniform the engine supplies (``uniforms_per_step``); tables too
large fall back to the key sampler (inverse CDF per token, ``jax.random.multinomial``). For
N <= :data:`UNROLL_MAX_N` the step is evaluated per component (:func:`reduced_terms_unrolled`).

**FastMinibatchSDE**: :class:`MinibatchSDE` with the data drawn from uniforms (context
tokens in alias-drawn tuples, the rest by inverse CDF): the same per-sample-gradient distribution.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..sampling import alias_draw, alias_table, compositions, multinomial_pmf, tuple_length
from .config import PAPER, SCBConfig, SCBTask, initial_parameters, make_task
from .population import TaskArrays, observables_from_parameters, preconditioned_flow

__all__ = [
    "MinibatchSDE",
    "FastMinibatchSDE",
    "ReducedMinibatchSDE",
    "minibatch_sde",
    "minibatch_sde_fast",
    "minibatch_sde_reduced",
    "reduced_coordinates",
    "reduced_drift_numpy",
    "projected_per_sample",
    "reduced_terms_unrolled",
    "sample_tables",
    "UNROLL_MAX_N",
]


# ------------------------------------------------------------------------------------------------
# 1. Minibatch SGD on the full (V, A) (spec §3.6 option A)
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class MinibatchSDE:
    """``d theta = drift dt + diffusion dW`` on theta = (V, A) flattened, time in optimiser steps.

    * drift: the preconditioned population flow (exact, spec §3.2-3.3);
    * diffusion: minibatch noise. Its covariance is ``lr^2 Cov_sample(preconditioned g)/B``; the
      covariance is estimated at the current theta from ``mc_samples`` fresh per-sample gradients
      (spec §3.6 option A), and enters as the matrix ``lr * (g_m - mean g)/sqrt((M-1) B)`` driven by
      an M-dimensional Brownian motion, so no covariance matrix or square root is ever formed.
    Float64 throughout.
    """

    task: SCBTask
    eta_V: float
    eta_A: float
    batch: int
    mc_samples: int = 64
    paper: str = PAPER
    name: str = "minibatch_sgd"

    @property
    def dim(self) -> int:
        return self.task.N ** 2 + self.task.T * self.task.N

    @property
    def noise_dim(self) -> int:
        return self.mc_samples

    def initial_state(self) -> np.ndarray:
        V0, A0 = initial_parameters(self.task.config, self.task)
        return np.concatenate([V0.ravel(), A0.ravel()])

    def args(self):
        import jax.numpy as jnp

        t = self.task
        return {
            "P": jnp.asarray(t.P), "mu": jnp.asarray(t.mu), "Qm": jnp.asarray(t.Qm),
            "Sig": jnp.asarray(t.Sigma),
            "lr_V": jnp.asarray(self.eta_V), "lr_A": jnp.asarray(self.eta_A),
            "batch": jnp.asarray(float(self.batch)),
        }

    def _unflatten(self, y):
        N, T_ = self.task.N, self.task.T
        return y[: N * N].reshape(N, N), y[N * N:].reshape(T_, N)

    def drift(self, t, y, args):
        import jax.numpy as jnp

        V, A = self._unflatten(y)
        task = TaskArrays(args["P"], args["mu"], args["Qm"], args["Sig"])
        dV, dA = preconditioned_flow(V, A, task, args["lr_V"], args["lr_A"], xp=jnp)  # spec §3.3
        return jnp.concatenate([dV.ravel(), dA.ravel()])

    def per_sample_gradients(self, y, args, key):
        """(M, dim) preconditioned per-sample gradients at theta (spec §3.2), M = mc_samples.
        Data drawn exactly as spec §1.2 (query outside the context)."""
        import jax
        import jax.numpy as jnp

        N, T_, M = self.task.N, self.task.T, self.mc_samples
        V, A = self._unflatten(y)
        mu, P, Qm = args["mu"], args["P"], args["Qm"]
        kx, kk, ks, ko = jax.random.split(key, 4)
        logmu = jnp.log(mu)
        x = jax.random.categorical(kx, logmu, shape=(M, T_))
        k = jax.random.categorical(kk, logmu, shape=(M,))
        logq = jnp.where(Qm.T[k] > 0, jnp.log(jnp.where(Qm.T[k] > 0, Qm.T[k], 1.0)), -jnp.inf)
        pos = jax.random.categorical(ks, logq, axis=-1)
        xs = jnp.take_along_axis(x, pos[:, None], axis=1)[:, 0]
        logP = jnp.log(jnp.maximum(P.T[xs], 1e-300))
        xo = jax.random.categorical(ko, logP, axis=-1)

        # batched over the M samples; X a via a one-hot contraction over the N token ids
        Xoh = jax.nn.one_hot(x, N, dtype=y.dtype)  # (M, T, N)
        a = A.T[k]  # (M, T): a^(k_m)
        Xa = jnp.einsum("mtn,mt->mn", Xoh, a)
        r = Xa @ V.T - jax.nn.one_hot(xo, N, dtype=y.dtype)  # (M, N)
        gV = r[:, :, None] * Xa[:, None, :] / mu[None, None, :]  # r (X a)^T D^-1
        ga = jnp.take_along_axis(r @ V, x, axis=1) / mu[k][:, None]  # (X^T V^T r) / mu_k, (M, T)
        gA = ga[:, :, None] * jax.nn.one_hot(k, N, dtype=y.dtype)[:, None, :]  # only column k_m
        return jnp.concatenate([args["lr_V"] * gV.reshape(M, -1), args["lr_A"] * gA.reshape(M, -1)], axis=1)

    def diffusion(self, t, y, args, key):
        import jax.numpy as jnp

        G = self.per_sample_gradients(y, args, key)
        G = G - G.mean(0, keepdims=True)
        return (G / jnp.sqrt((self.mc_samples - 1) * args["batch"])).T  # (dim, M)

    def numba_increment(self):
        """``(increment, params)`` for ``simulate.solve_sde(..., backend="numba")``: the same
        step as :meth:`drift` + :meth:`diffusion` (same distribution), compiled
        (:mod:`theory.scb.sde_numba`)."""
        from .sde_numba import increment_kernel

        return increment_kernel(self.task.N, self.task.T), self._numba_params

    @cached_property
    def _numba_params(self) -> tuple:
        """The kernel's constants and alias tables (built once per model: ~50 ms)."""
        from .sde_numba import kernel_params

        return kernel_params(self.task, self.eta_V, self.eta_A, self.batch)

    def state_variables(self, Y: np.ndarray) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
        """Split ``Y`` (..., dim) into named variables with extra dims for the Dataset."""
        N, T_ = self.task.N, self.task.T
        lead = Y.shape[:-1]
        return {
            "V": (("row", "col"), Y[..., : N * N].reshape(*lead, N, N)),
            "A": (("position", "query"), Y[..., N * N:].reshape(*lead, T_, N)),
        }

    def observables(self, Y: np.ndarray) -> dict[str, np.ndarray]:
        N, T_ = self.task.N, self.task.T
        lead = Y.shape[:-1]
        V = Y[..., : N * N].reshape(*lead, N, N)
        A = Y[..., N * N:].reshape(*lead, T_, N)
        return observables_from_parameters(V, A, self.task)


#: tokens drawn jointly by one alias draw in the full SDE's sampler: the longest tuple with at
#: most this many outcomes
TUPLE_OUTCOMES = 4096


def _token_tuples(N: int, T_: int) -> list[int]:
    """Lengths of the token tuples that cover the T context positions (each drawn jointly)."""
    L = tuple_length(N, T_, TUPLE_OUTCOMES)
    return [L] * (T_ // L) + ([T_ % L] if T_ % L else [])


@dataclass(frozen=True, eq=False)
class FastMinibatchSDE(MinibatchSDE):
    """:class:`MinibatchSDE` (full (V, A), spec §3.6 option A) with the data of spec
    §1.2 drawn from uniforms: context tokens in tuples of L by one exact alias draw each
    (:func:`theory.sampling.alias_draw`, ``N^L <= TUPLE_OUTCOMES`` outcomes with probability
    ``prod mu``), query, support slot and target by inverse CDF. The same per-sample-gradient
    distribution as MinibatchSDE; ``len(tuples) + 3`` uniforms per sample instead of N T Gumbels."""

    def args(self):
        import jax.numpy as jnp

        a = super().args()
        t = self.task
        a["cdf_mu"] = jnp.asarray(np.cumsum(t.mu))
        a["cdf_q"] = jnp.asarray(np.cumsum(t.Qm, axis=0).T)  # row k: cdf of q^(k) over positions
        a["cdf_P"] = jnp.asarray(np.cumsum(t.P, axis=0).T)  # row j: cdf of P[:, j]
        tabs = {}
        for L in sorted(set(_token_tuples(t.N, t.T))):
            tup = np.array(list(itertools.product(range(t.N), repeat=L)))  # (N^L, L)
            prob, alias = alias_table(t.mu[tup].prod(1))
            tabs[L] = (jnp.asarray(prob), jnp.asarray(alias), jnp.asarray(np.eye(t.N)[tup]))  # one-hot (N^L, L, N)
        a["tuples"] = tabs
        return a

    @property
    def uniforms_per_step(self) -> int:
        """The engine hands each step ``mc_samples * (tuples + 3)`` uniforms."""
        return self.mc_samples * (len(_token_tuples(self.task.N, self.task.T)) + 3)

    def per_sample_gradients(self, y, args, key):
        """(M, dim) per-sample gradients; ``key``: a PRNG key, or the step's uniforms."""
        import jax
        import jax.numpy as jnp

        N, T_, M = self.task.N, self.task.T, self.mc_samples
        V, A = self._unflatten(y)
        mu = args["mu"]
        lens = _token_tuples(N, T_)
        n_u = len(lens) + 3
        if jnp.issubdtype(key.dtype, jnp.floating):  # the engine's uniforms
            u = key.reshape(M, n_u)
        else:
            u = jax.random.uniform(key, (M, n_u), dtype=y.dtype)
        X = jnp.concatenate([args["tuples"][L][2][alias_draw(u[:, i], *args["tuples"][L][:2])]
                             for i, L in enumerate(lens)], axis=1)  # (M, T, N) one-hot context
        k = _inverse_cdf(u[:, -3], args["cdf_mu"])  # (M,)
        pos = _inverse_cdf(u[:, -2], args["cdf_q"][k])  # s ~ q^(k)
        xs = jnp.argmax(jnp.take_along_axis(X, pos[:, None, None], axis=1)[:, 0], axis=-1)
        xo = _inverse_cdf(u[:, -1], args["cdf_P"][xs])  # target ~ P[:, x_s]
        a = A.T[k]  # (M, T)
        Xa = jnp.einsum("mtn,mt->mn", X, a)  # X a^(k_m)
        r = Xa @ V.T - jax.nn.one_hot(xo, N, dtype=y.dtype)
        gV = r[:, :, None] * Xa[:, None, :] / mu[None, None, :]
        ga = jnp.einsum("mtn,mn->mt", X, r @ V) / mu[k][:, None]
        gA = ga[:, :, None] * jax.nn.one_hot(k, N, dtype=y.dtype)[:, None, :]
        return jnp.concatenate([args["lr_V"] * gV.reshape(M, -1), args["lr_A"] * gA.reshape(M, -1)], axis=1)


# ------------------------------------------------------------------------------------------------
# 2. The reduced SDE (module docstring)
# ------------------------------------------------------------------------------------------------
#: largest outcome table drawn by alias (one uniform per draw); larger ones use the key path
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


def _split(y, N):
    return y[0], y[1], y[2:2 + N], y[2 + N:2 + 2 * N], y[2 + 2 * N], y[3 + 2 * N], y[4 + 2 * N:4 + 3 * N]


def _drift(y, c, xp):
    """Reduced drift (module docstring), ``c``: dict of task constants; ``xp``: numpy or jax.numpy."""
    N = c["mu"].shape[0]
    zeta, omega, xi, beta, E_V, E_v, E_a = _split(y, N)
    mu, T, rho, K, m2 = c["mu"], c["T"], c["rho"], c["K"], c["m2"]
    s = T * xi + beta
    n = T * xi**2 + 2 * xi * beta + rho * beta**2 + E_a
    cc = xi + rho * beta
    vv, vp = K * zeta**2 + E_V, K * zeta
    v2, mv = m2 * omega**2 + E_v, m2 * omega
    mn, S1, S2 = mu @ n, mu @ s, mu @ s**2
    lV, lA = c["lr_V"], c["lr_A"]
    return xp.concatenate([
        xp.stack([-lV * (mn * zeta - mu @ cc), -lV * (S2 * omega - S1)]),
        -lA * (vv * xi + s * v2 - mv), -lA * (vv * beta - vp),
        xp.stack([-2 * lV * mn * E_V, -2 * lV * S2 * E_v]), -2 * lA * vv * E_a,
    ])


def _support_weights(task: SCBTask) -> np.ndarray:
    """``w[k, j] = q_k`` at its j-th support position, (N, Q)."""
    return task.Qm[task.support, np.arange(task.N)[:, None]]


def _constants(task: SCBTask, eta_V: float, eta_A: float, batch: int, xp=np):
    return {
        "mu": xp.asarray(task.mu), "T": float(task.T), "rho": xp.asarray(task.rho), "K": task.K, "m2": task.m2,
        "P": xp.asarray(task.P), "Pt": xp.asarray(task.P_tilde), "Qw": xp.asarray(_support_weights(task)),
        "lr_V": xp.asarray(float(eta_V)), "lr_A": xp.asarray(float(eta_A)), "batch": xp.asarray(float(batch)),
    }


def reduced_drift_numpy(y, task: SCBTask, eta_V: float, eta_A: float) -> np.ndarray:
    """The reduced drift at one reduced state ``y`` (numpy; used by the tests)."""
    return _drift(np.asarray(y, float), _constants(task, eta_V, eta_A, 1), np)


def projected_per_sample(y, koh, b, cnt, yoh, c, xp=np):
    """Per-sample preconditioned gradients at the on-manifold point of ``y``, projected.

    Sufficient statistics of one sample: query ``koh`` (one-hot, (N,)), ``b = X q_k`` (N,),
    all-context token counts ``cnt = X 1`` (N,), target ``yoh`` (one-hot, (N,)). Returns ``(g_red (2+2N,), off (2+N,))``: the gradient's (zeta, omega, xi,
    beta) components (xi, beta nonzero at query k only) and the squared norms of its off-manifold
    parts (R in the Sigma norm, r_v, delta_k at query k), learning rates included (spec §3.2, §3.6)."""
    N = c["mu"].shape[0]
    zeta, omega, xi, beta, *_ = _split(y, N)
    mu, T, rho, K, m2, Pt = c["mu"], c["T"], c["rho"], c["K"], c["m2"], c["Pt"]
    xk, ek, rk, muk = koh @ xi, koh @ beta, koh @ rho, koh @ mu
    h = xk * cnt + ek * b  # X a_k
    s = T * xk + ek
    Pth = Pt @ h
    r = zeta * Pth + omega * s * mu - yoh  # V X a - e_y
    mr = mu @ r
    lV, lA = c["lr_V"], c["lr_A"]
    g_zeta = lV * (Pth @ r) / K
    g_omega = lV * s * mr / m2
    off_v = lV**2 * s**2 * (r @ r - mr**2 / m2)
    off_R = lV**2 * (r @ r) * ((h**2 / mu).sum() - s**2) - K * g_zeta**2
    w = zeta * (Pt.T @ r) + omega * mr  # V^T r
    scale = lA / muk
    i1, iq, nn = scale * (w @ cnt), scale * (w @ b), scale**2 * ((w**2) @ cnt)
    det = T * rk - 1.0
    g_xi = (rk * i1 - iq) / det
    g_eta = (T * iq - i1) / det
    off_a = nn - (T * g_xi**2 + 2 * g_xi * g_eta + rk * g_eta**2)
    onehot = koh
    g = xp.concatenate([xp.stack([g_zeta, g_omega]), g_xi * onehot, g_eta * onehot])
    return g, xp.concatenate([xp.stack([off_R, off_v]), off_a * onehot])


def sample_tables(task: SCBTask):
    """Exact outcome tables of one sample's sufficient statistics (spec §1.2), for alias draws.

    A sample is (query k ~ mu, the Q support tokens ~ mu iid, target y ~ sum_j q_k[j] P[:, x_j],
    the T - Q off-support token counts ~ Multinomial(T - Q, mu)); its projected gradient depends
    only on the features ``(e_k, b = X q_k, cnt = X 1, e_y)`` (4N,). Returns a list of
    ``(prob (n,), features (n, 4N))`` whose draws are independent and whose features add — one
    joint table when it has at most :data:`JOINT_MAX` outcomes, else two — or ``None`` when a
    table would exceed :data:`TABLE_MAX` (the model then samples with a key)."""
    N, T_, Q_ = task.N, task.T, task.support.shape[1]
    n_off = T_ - Q_
    n_comp = math.comb(n_off + N - 1, N - 1)  # compositions of n_off into N parts
    if N ** (Q_ + 2) > TABLE_MAX or n_comp > TABLE_MAX:
        return None
    w, mu, P, eye = _support_weights(task), task.mu, task.P, np.eye(N)
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


def _inverse_cdf(u, cdf):
    """Categorical draws from uniforms ``u`` (...) and a cumulative table ``cdf`` (..., n)."""
    import jax.numpy as jnp

    return jnp.sum(u[..., None] > cdf[..., :-1], axis=-1)


@dataclass(frozen=True, eq=False)
class ReducedMinibatchSDE:
    """The reduced minibatch-SGD SDE (module docstring), state (zeta, omega, xi_1..N, beta_1..N,
    E_V, E_v, E_a,1..N), time in optimiser steps. ``noise_dim = mc_samples``."""

    task: SCBTask
    eta_V: float
    eta_A: float
    batch: int
    mc_samples: int = 2  # centred on the exact mean, any M >= 1 gives the right covariance in mean
    paper: str = PAPER
    name: str = "minibatch_sgd_reduced"

    @property
    def noise_dim(self) -> int:
        return self.mc_samples

    @cached_property
    def _tables(self):
        return sample_tables(self.task)

    @property
    def uniforms_per_step(self) -> int | None:
        """One uniform per sample and outcome table (alias draws, :func:`sample_tables`); ``None``
        (a PRNG key per step) when the tables would be too large."""
        return None if self._tables is None else self.mc_samples * len(self._tables)

    @property
    def state_names(self) -> tuple[str, ...]:
        N = self.task.N
        return ("zeta", "omega", *(f"xi_{i}" for i in range(1, N + 1)), *(f"beta_{i}" for i in range(1, N + 1)),
                "E_V", "E_v", *(f"E_a_{i}" for i in range(1, N + 1)))

    def initial_state(self) -> np.ndarray:
        V0, A0 = initial_parameters(self.task.config, self.task)
        return reduced_coordinates(V0, A0, self.task)

    def args(self):
        import jax.numpy as jnp

        c = _constants(self.task, self.eta_V, self.eta_A, self.batch, jnp)
        c["support"] = jnp.asarray(self.task.support)
        c["cdf_mu"] = jnp.asarray(np.cumsum(self.task.mu))
        c["cdf_q"] = jnp.asarray(np.cumsum(_support_weights(self.task), axis=1))  # (N, Q)
        c["cdf_P"] = jnp.asarray(np.cumsum(self.task.P, axis=0).T)  # row j: cdf of P[:, j]
        if self._tables is not None:
            c["tables"] = [(jnp.asarray(pr), jnp.asarray(al), jnp.asarray(F))
                           for pr, al, F in ((*alias_table(p), F) for p, F in self._tables)]
        return c

    def drift(self, t, y, args):
        import jax.numpy as jnp

        return _drift(y, args, jnp)

    def _table_features(self, args, u):
        """(M, 4N) features (e_k, X q_k, X 1, e_y) of ``mc_samples`` samples: one alias draw per
        sample and outcome table (``u``: the step's uniforms, (mc_samples * tables,)); the tables'
        features add (:func:`sample_tables`)."""
        u = u.reshape(self.mc_samples, len(args["tables"]))
        return sum(Ft[alias_draw(u[:, i], pr, al)] for i, (pr, al, Ft) in enumerate(args["tables"]))

    def _table_samples(self, y, args, u):
        """Projected per-sample gradients from ``mc_samples`` alias draws per table (``u``: the
        step's uniforms, (mc_samples * tables,))."""
        import jax
        import jax.numpy as jnp

        N = self.task.N
        F = self._table_features(args, u)
        koh, b, cnt, yoh = F[:, :N], F[:, N:2 * N], F[:, 2 * N:3 * N], F[:, 3 * N:]
        return jax.vmap(lambda kk, bb, cc, yy: projected_per_sample(y, kk, bb, cc, yy, args, jnp))(koh, b, cnt, yoh)

    def _samples(self, y, args, key):
        """Projected per-sample gradients of ``mc_samples`` samples drawn from sufficient statistics
        (spec §1.2): k ~ mu, the Q support tokens ~ mu, the T - Q off-support tokens as counts,
        the target ~ P[:, x_s] with s ~ q_k. All uniforms come from one draw."""
        import jax
        import jax.numpy as jnp

        N, T_, Q_ = self.task.N, self.task.T, self.task.support.shape[1]
        n_off = T_ - Q_
        M = self.mc_samples
        many = n_off > 64
        u = jax.random.uniform(key, (M, Q_ + 3 + (0 if many else n_off)), dtype=y.dtype)
        ids = jnp.arange(N)
        k = _inverse_cdf(u[:, 0], args["cdf_mu"])  # (M,)
        xs = _inverse_cdf(u[:, 1:Q_ + 1], args["cdf_mu"])  # (M, Q)
        koh = (k[:, None] == ids).astype(y.dtype)  # (M, N)
        j = _inverse_cdf(u[:, Q_ + 1], koh @ args["cdf_q"])  # support slot s ~ q_k
        xsj = jnp.take_along_axis(xs, j[:, None], axis=1)[:, 0]
        yt = _inverse_cdf(u[:, Q_ + 2], ((xsj[:, None] == ids).astype(y.dtype)) @ args["cdf_P"])
        xs_oh = (xs[..., None] == ids).astype(y.dtype)  # (M, Q, N)
        if many:
            c_off = jax.random.multinomial(jax.random.fold_in(key, 1), float(n_off), args["mu"],
                                           shape=(M, N)).astype(y.dtype)
        else:
            off = _inverse_cdf(u[:, Q_ + 3:], args["cdf_mu"])
            c_off = (off[..., None] == ids).astype(y.dtype).sum(1)
        cnt = c_off + xs_oh.sum(1)
        b = jnp.einsum("mq,mqn->mn", koh @ args["Qw"], xs_oh)  # X q_k
        yoh = (yt[:, None] == ids).astype(y.dtype)
        return jax.vmap(lambda kk, bb, cc, yy: projected_per_sample(y, kk, bb, cc, yy, args, jnp))(koh, b, cnt, yoh)

    def drift_and_diffusion(self, t, y, args, noise):
        """One step's ``(f (dim,), g (dim, M))`` from one set of samples: ``g`` the centred projected
        per-sample gradients (energy rows 0); ``f`` the exact drift plus the energies' Itô terms
        ``mean_m |g_off,m|^2 / B`` (an unbiased estimate of ``tr Cov(off)/B``). ``noise``: the
        step's uniforms (:attr:`uniforms_per_step`) or, without tables, a PRNG key."""
        import jax.numpy as jnp

        N, M = self.task.N, self.mc_samples
        if self._tables is not None and N <= UNROLL_MAX_N:  # the same terms, per component (fast)
            F = self._table_features(args, noise)
            t_ = self.task
            c = {"mu": t_.mu.tolist(), "rho": t_.rho.tolist(), "Pt": t_.P_tilde.tolist(), "T": float(t_.T),
                 "K": float(t_.K), "m2": float(t_.m2), "lr_V": args["lr_V"], "lr_A": args["lr_A"],
                 "batch": args["batch"]}
            return reduced_terms_unrolled(y, F, c, N, M)
        G, off = (self._samples if self._tables is None else self._table_samples)(y, args, noise)
        y_on = y.at[2 + 2 * N:].set(0.0)
        f = _drift(y, args, jnp)
        mean = -_drift(y_on, args, jnp)[: 2 + 2 * N]  # exact population mean of g on the manifold
        D = -(G - mean).T / jnp.sqrt(M * args["batch"])  # (2+2N, M); the update is -g
        f = f.at[2 + 2 * N:].add(off.mean(0) / args["batch"])
        return f, jnp.concatenate([D, jnp.zeros((2 + N, M), y.dtype)], axis=0)

    def diffusion(self, t, y, args, key):
        """The noise matrix alone (the engine calls :meth:`drift_and_diffusion`)."""
        return self.drift_and_diffusion(t, y, args, key)[1]

    def observables(self, Y: np.ndarray) -> dict[str, np.ndarray]:
        N, task = self.task.N, self.task
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
        out = {name: Y[..., i] for i, name in enumerate(self.state_names)}
        out.update({
            "value_transition_correlation": zeta,
            "value_mean_scale": omega,
            "attention_target_overlap": cc.mean(-1),
            "attention_sum": s.mean(-1),
            "attention_sq_norm": n.mean(-1),
            "population_loss": loss,
        })
        return out


# ------------------------------------------------------------------------------------------------
# 3. The reduced step per component (small N)
# ------------------------------------------------------------------------------------------------
# One step's drift and noise of the reduced SDE written out per component (small N): the same
# formulas as :func:`_drift` and :func:`projected_per_sample`, with every sum over the N tokens and
# the M samples unrolled into scalar arithmetic. Called under ``jax.vmap`` over paths, each scalar
# becomes a (paths,) vector and XLA fuses the whole step into a few vectorised loops -- instead of
# dozens of tiny (paths, M, N) kernels with reductions over N = 3 (4-5x faster on CPU). Used for
# N <= UNROLL_MAX_N; the array version serves larger N.

#: largest vocabulary for which the step is unrolled (the graph grows as N^2 M)
UNROLL_MAX_N = 8


def _drift_list(z, om, xi, beta, EV, Ev, Ea, c, N):
    """Reduced drift (module docstring) as a list of scalars."""
    mu, rho, T, K, m2, lV, lA = c["mu"], c["rho"], c["T"], c["K"], c["m2"], c["lr_V"], c["lr_A"]
    s = [T * xi[i] + beta[i] for i in range(N)]
    n = [T * xi[i] ** 2 + 2 * xi[i] * beta[i] + rho[i] * beta[i] ** 2 + Ea[i] for i in range(N)]
    mn = sum(mu[i] * n[i] for i in range(N))
    mc = sum(mu[i] * (xi[i] + rho[i] * beta[i]) for i in range(N))
    S1 = sum(mu[i] * s[i] for i in range(N))
    S2 = sum(mu[i] * s[i] ** 2 for i in range(N))
    vv, vp, v2, mv = K * z * z + EV, K * z, m2 * om * om + Ev, m2 * om
    return ([-lV * (mn * z - mc), -lV * (S2 * om - S1)]
            + [-lA * (vv * xi[i] + s[i] * v2 - mv) for i in range(N)]
            + [-lA * (vv * beta[i] - vp) for i in range(N)]
            + [-2 * lV * mn * EV, -2 * lV * S2 * Ev] + [-2 * lA * vv * Ea[i] for i in range(N)])


def _per_sample(z, om, xi, beta, F, c, N):
    """Projected per-sample gradient of one sample with features ``F`` (4N,): (koh, b, cnt, yoh).
    Returns (g_zeta, g_omega, g_xi, g_eta, off_R, off_v, off_a) as scalars (g_xi, g_eta, off_a at
    the sample's query k; the caller spreads them with koh)."""
    mu, rho, Pt, T, K, m2, lV, lA = (c["mu"], c["rho"], c["Pt"], c["T"], c["K"], c["m2"], c["lr_V"],
                                     c["lr_A"])
    inv_mu, iK, im2 = [1.0 / v for v in mu], 1.0 / K, 1.0 / m2  # reciprocals: no divisions per path
    koh, b, cnt, yoh = F[:N], F[N:2 * N], F[2 * N:3 * N], F[3 * N:]
    xk = sum(koh[i] * xi[i] for i in range(N))
    ek = sum(koh[i] * beta[i] for i in range(N))
    rk = sum(koh[i] * rho[i] for i in range(N))
    inv_muk = sum(koh[i] * inv_mu[i] for i in range(N))
    inv_det = sum(koh[i] * (1.0 / (T * rho[i] - 1.0)) for i in range(N))
    h = [xk * cnt[i] + ek * b[i] for i in range(N)]
    s = T * xk + ek
    Pth = [sum(Pt[i][j] * h[j] for j in range(N)) for i in range(N)]
    r = [z * Pth[i] + om * s * mu[i] - yoh[i] for i in range(N)]
    r, Pth, h, s = _materialise((r, Pth, h, s), c["lr_V"])
    mr = sum(mu[i] * r[i] for i in range(N))
    rr = sum(r[i] * r[i] for i in range(N))
    g_zeta = lV * iK * sum(Pth[i] * r[i] for i in range(N))
    g_omega = lV * im2 * s * mr
    off_v = lV * lV * s * s * (rr - mr * mr * im2)
    off_R = lV * lV * rr * (sum(h[i] * h[i] * inv_mu[i] for i in range(N)) - s * s) - K * g_zeta * g_zeta
    w = _materialise([z * sum(Pt[i][j] * r[i] for i in range(N)) + om * mr for j in range(N)], c["lr_V"])  # V^T r
    scale = lA * inv_muk
    i1 = scale * sum(w[j] * cnt[j] for j in range(N))
    iq = scale * sum(w[j] * b[j] for j in range(N))
    nn = scale * scale * sum(w[j] * w[j] * cnt[j] for j in range(N))
    g_xi = (rk * i1 - iq) * inv_det
    g_eta = (T * iq - i1) * inv_det
    off_a = nn - (T * g_xi * g_xi + 2 * g_xi * g_eta + rk * g_eta * g_eta)
    return _materialise((g_zeta, g_omega, g_xi, g_eta, off_R, off_v, off_a), c["lr_V"])


def _materialise(x, positive):
    """``x`` computed once: XLA's CPU fusion would otherwise recompute the whole shared chain
    inside every consumer's kernel (~10x the arithmetic; ``lax.optimization_barrier`` is expanded
    away before fusion on CPU). A conditional on an unbatched runtime value (``positive > 0``, a
    learning rate, always true) is a boundary fusion cannot cross; its other branch is never taken."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten(x)
    out = jax.lax.cond(positive > 0, lambda v: v, lambda v: [u * 0.0 for u in v], leaves)
    return jax.tree_util.tree_unflatten(tree, out)


def reduced_terms_unrolled(y, F, c, N: int, M: int):
    """``(f (dim,), g (dim, M))`` of one path's step: ``y`` the reduced state (4 + 3N,), ``F``
    (M, 4N) the M samples' features, ``c`` the constants (``mu``, ``rho``, ``Pt`` as nested
    Python floats; ``T``, ``K``, ``m2`` floats; ``lr_V``, ``lr_A``, ``batch`` scalars). Same
    definition as ``ReducedMinibatchSDE.drift_and_diffusion``."""
    import jax.numpy as jnp

    z, om = y[0], y[1]
    xi, beta = [y[2 + i] for i in range(N)], [y[2 + N + i] for i in range(N)]
    EV, Ev, Ea = y[2 + 2 * N], y[3 + 2 * N], [y[4 + 2 * N + i] for i in range(N)]
    f = _drift_list(z, om, xi, beta, EV, Ev, Ea, c, N)
    mean = [-v for v in _drift_list(z, om, xi, beta, 0.0, 0.0, [0.0] * N, c, N)[: 2 + 2 * N]]  # E g on the manifold
    inv_norm = 1.0 / jnp.sqrt(M * c["batch"])
    # all M samples at once: every per-sample scalar is an (M,) vector
    koh = [F[:, i] for i in range(N)]
    gz, go, gx, ge, oR, ov, oa = _per_sample(z, om, xi, beta, [F[:, j] for j in range(4 * N)], c, N)
    g = [gz, go] + [gx * koh[i] for i in range(N)] + [ge * koh[i] for i in range(N)]
    zero = jnp.zeros_like(gz)
    D = jnp.stack([(mean[i] - g[i]) * inv_norm for i in range(2 + 2 * N)] + [zero] * (2 + N))  # (dim, M)
    off = [oR, ov] + [oa * koh[i] for i in range(N)]
    inv_mb = 1.0 / (M * c["batch"])
    f = f[: 2 + 2 * N] + [f[2 + 2 * N + i] + off[i].sum() * inv_mb for i in range(2 + N)]
    return jnp.stack(f), D


# ------------------------------------------------------------------------------------------------
# Entry points: (sde, t) for `tdyn simulate scb --sde`
# ------------------------------------------------------------------------------------------------

def minibatch_sde(config: SCBConfig, mc_samples: int = 64) -> tuple[MinibatchSDE, np.ndarray]:
    """``(sde, t)`` for `tdyn simulate scb --sde`: minibatch SGD on the full (V, A), sampled at
    ``config.ode_times()``."""
    task = make_task(config)
    return MinibatchSDE(task, config.eta_V, config.eta_A, config.batch, mc_samples), config.ode_times()


def minibatch_sde_reduced(config: SCBConfig, mc_samples: int = 2):
    """``(sde, t)`` for `tdyn simulate scb --sde` (the paper table's ``sde`` slot): the reduced
    minibatch-SGD SDE (spec §3.6), sampled at ``config.ode_times()``."""
    task = make_task(config)
    return ReducedMinibatchSDE(task, config.eta_V, config.eta_A, config.batch, mc_samples), config.ode_times()


def minibatch_sde_fast(config: SCBConfig, mc_samples: int = 64):
    """``(sde, t)``: minibatch SGD on the full (V, A) (spec §3.6 option A), fast sampler, sampled at
    ``config.ode_times()``."""
    task = make_task(config)
    return FastMinibatchSDE(task, config.eta_V, config.eta_A, config.batch, mc_samples), config.ode_times()
