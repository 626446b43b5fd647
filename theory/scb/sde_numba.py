"""The full (V, A) SCB minibatch-SGD SDE step as a numba kernel (docs/papers/scb.md §3.6 option A), for
``simulate.solve_sde(..., backend="numba")``.

One Euler–Maruyama increment ``dy = f h + g dW`` of :class:`theory.scb.FullMinibatchSDE` (the SDE
of the derived :func:`theory.scb.derive.full_system`), the same model and distribution as its jax
step (tested: increment mean and covariance, ensemble moments):

* ``f``: the exact preconditioned population flow (spec §3.2-3.3; :func:`flow` restates
  :func:`theory.scb.population.preconditioned_flow` in loops);
* ``g dW = sum_m (dW_m - mean dW) g_m / sqrt((M-1) B)`` with ``g_m`` the preconditioned per-sample
  gradients of M = mc_samples fresh samples (spec §3.2: ``g_V = lr_V r (X a)^T D^-1``,
  ``g_{a_k} = lr_A X^T V^T r / mu_k`` with ``r = V X a^(k) - e_y``) — accumulated sample by sample,
  no (M, dim) matrix. ``sum_m (g_m - mean g) dW_m = sum_m g_m (dW_m - mean dW)``.

Data per sample (spec §1.2, query outside the context): query ``k ~ mu``, T context tokens iid
``mu``, support slot ``s ~ q^(k)``, target ``y ~ P[:, x_s]`` — 64-bit integer alias draws
(:func:`theory.counter_rng.alias_pick64`, one SplitMix64 word of the step's stream ``key`` each, in
order): the context in tuples of L tokens (one draw over the ``N^L <= TUPLE_OUTCOMES`` tuples,
probability ``prod mu``; the last ``T mod L`` tokens one by one), then k, s and y. Exact to ~2^-53
per outcome. Float64.

Speed (N = 3, T = 16, M = 64): ~4.3 us per step on one core, ~70 ns per sample (``make bench``
reports it beside the derived model's jax engine).
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np
from numba import njit

from ..counter_rng import alias_bits, alias_pick64, alias_rows64, splitmix64
from ..sampling import tuple_length

__all__ = ["flow", "increment_kernel", "kernel_params", "token_tuple_length", "TUPLE_OUTCOMES"]

@njit(cache=True)
def flow(y, N, T, mu, P, Sig, PSig, Qm, lr_V, lr_A, out):
    """``out`` (dim,) = the preconditioned population flow at ``y = (V.ravel(), A.ravel())``
    (spec §3.3: ``dV = -lr_V grad_V L D^-1``, ``da_k = -lr_A grad_{a_k} L / mu_k``; the gradient
    of spec §3.2 as in :func:`theory.scb.population.population_gradient`). ``PSig = P Sigma``."""
    NN = N * N
    n = np.zeros(N)
    c = np.zeros(N)
    s = np.zeros(N)
    for t in range(T):
        for k in range(N):
            a = y[NN + t * N + k]
            n[k] += a * a
            c[k] += a * Qm[t, k]
            s[k] += a
    mn = mc = S1 = S2 = 0.0
    for k in range(N):
        mn += mu[k] * n[k]
        mc += mu[k] * c[k]
        S1 += mu[k] * s[k]
        S2 += mu[k] * s[k] * s[k]
    v = np.zeros(N)
    vv = vp = 0.0  # tr(V Sigma V^T), tr(V Sigma P^T)
    for i in range(N):
        for j in range(N):
            v[i] += y[i * N + j] * mu[j]
            vs = 0.0
            for l in range(N):
                vs += y[i * N + l] * Sig[l, j]
            vv += vs * y[i * N + j]
            vp += vs * P[i, j]
            out[i * N + j] = vs  # (V Sigma)_ij, used below
    v2 = mv = 0.0
    for i in range(N):
        v2 += v[i] * v[i]
        mv += mu[i] * v[i]
    for i in range(N):
        for j in range(N):
            g = mn * out[i * N + j] - mc * PSig[i, j] + (S2 * v[i] - S1 * mu[i]) * mu[j]
            out[i * N + j] = -lr_V * g / mu[j]
    for t in range(T):
        for k in range(N):
            a = y[NN + t * N + k]
            out[NN + t * N + k] = -lr_A * (vv * a - vp * Qm[t, k] + s[k] * v2 - mv)


@lru_cache(maxsize=16)
def increment_kernel(N: int, T: int):
    """The compiled increment for a task of N tokens and context length T (N, T and the tuple
    length are compile-time constants: the small loops unroll):
    ``increment(t, y, h, dW, key, params, dy)`` writes ``dy`` (dim,) = ``f h + g dW`` (module
    docstring) at state ``y`` for the Brownian increments ``dW`` (M,) of a step of size ``h``;
    ``key``: the step's uint64 stream key; ``params``: :func:`kernel_params`."""
    NN = N * N
    L = token_tuple_length(N, T)
    n_tup = T // L

    def increment(t, y, h, dW, key, params, dy):
        """``dy`` (dim,) = ``f h + g dW`` (module docstring) at state ``y`` for the Brownian increments
        ``dW`` (M,) of a step of size ``h``; ``key``: the step's uint64 stream key; ``params``:
        :func:`kernel_params`."""
        (_, _, mu, P, Sig, PSig, Qm, lr_V, lr_A, batch,
         mu_thr, mu_ali, mu_nb, tup_thr, tup_ali, tup_nb, tup_tok, q_thr, q_ali, q_nb, P_thr, P_ali, P_nb) = params
        M = dW.shape[0]
        mu_sh, mu_mk = alias_bits(mu_nb, 64)
        tup_sh, tup_mk = alias_bits(tup_nb, 64)
        q_sh, q_mk = alias_bits(q_nb, 64)
        P_sh, P_mk = alias_bits(P_nb, 64)
        flow(y, N, T, mu, P, Sig, PSig, Qm, lr_V, lr_A, dy)
        for i in range(dy.shape[0]):
            dy[i] *= h
        dWbar = 0.0
        for m in range(M):
            dWbar += dW[m]
        dWbar /= M
        scale = 1.0 / math.sqrt((M - 1) * batch)
        # one scratch buffer: a^(k) rows (N, T) | accA (N, T) | accV (N, N) | X a (N) | r (N) | w (N)
        buf = np.zeros(2 * N * T + NN + 3 * N)
        for tt in range(T):
            for k in range(N):
                buf[k * T + tt] = y[NN + tt * N + k]  # a^(k)_t
        oA, oV, oX, oR, oW = N * T, 2 * N * T, 2 * N * T + NN, 2 * N * T + NN + N, 2 * N * T + NN + 2 * N
        x = np.empty(T, np.int64)
        ctr = np.uint64(0)
        for m in range(M):
            for j in range(n_tup):  # context tokens: L at a time
                o = alias_pick64(splitmix64(key, ctr), tup_thr, tup_ali, tup_sh, tup_mk, 0)
                ctr += np.uint64(1)
                for l in range(L):
                    x[j * L + l] = np.int64(tup_tok[o, l])
            for tt in range(n_tup * L, T):
                x[tt] = alias_pick64(splitmix64(key, ctr), mu_thr, mu_ali, mu_sh, mu_mk, 0)
                ctr += np.uint64(1)
            k = alias_pick64(splitmix64(key, ctr), mu_thr, mu_ali, mu_sh, mu_mk, 0)
            slot = alias_pick64(splitmix64(key, ctr + np.uint64(1)), q_thr, q_ali, q_sh, q_mk, k)
            yo = alias_pick64(splitmix64(key, ctr + np.uint64(2)), P_thr, P_ali, P_sh, P_mk, x[slot])
            ctr += np.uint64(3)
            for i in range(N):
                buf[oX + i] = 0.0
            for tt in range(T):
                buf[oX + x[tt]] += buf[k * T + tt]  # X a^(k)
            for i in range(N):
                acc = -1.0 if i == yo else 0.0
                for j in range(N):
                    acc += y[i * N + j] * buf[oX + j]
                buf[oR + i] = acc  # r = V X a - e_y
            cm = (dW[m] - dWbar) * scale
            cmk = cm / mu[k]
            for j in range(N):
                acc = 0.0
                for i in range(N):
                    acc += y[i * N + j] * buf[oR + i]
                buf[oW + j] = acc * cmk  # c_m (V^T r)_j / mu_k
            for i in range(N):
                ri = cm * buf[oR + i]
                for j in range(N):
                    buf[oV + i * N + j] += ri * buf[oX + j]  # c_m r (X a)^T
            for tt in range(T):
                buf[oA + k * T + tt] += buf[oW + x[tt]]  # c_m (V^T r)_{x_t} / mu_k at query k
        for i in range(N):
            for j in range(N):
                dy[i * N + j] += lr_V * buf[oV + i * N + j] / mu[j]
        for tt in range(T):
            for k in range(N):
                dy[NN + tt * N + k] += lr_A * buf[oA + k * T + tt]

    return njit(increment)


#: context tokens drawn jointly by one alias draw: the longest tuple with at most this many outcomes
TUPLE_OUTCOMES = 2**13


def token_tuple_length(N: int, T: int) -> int:
    """Tokens per jointly drawn tuple: the largest ``L <= T`` with ``N^L <= TUPLE_OUTCOMES``."""
    return tuple_length(N, T, TUPLE_OUTCOMES)


def kernel_params(task, eta_V: float, eta_A: float, batch: int) -> tuple:
    """The constant tuple :func:`increment` takes: task arrays and 64-bit alias tables
    (:func:`theory.counter_rng.alias_rows64`) of ``mu``, of L-token tuples (probability
    ``prod mu``; token ids ``tup_tok`` (N^L, L)), of ``q^(k)`` over positions (row k) and of
    ``P[:, j]`` (row j)."""
    f = np.ascontiguousarray
    N, T_ = int(task.N), int(task.T)
    L = token_tuple_length(N, T_)
    tup = np.array(list(itertools.product(range(N), repeat=L)), dtype=np.int16)  # (N^L, L)
    return (N, T_, f(task.mu, float), f(task.P, float), f(task.Sigma, float), f(task.P @ task.Sigma, float),
            f(task.Qm, float), float(eta_V), float(eta_A), float(batch),
            *alias_rows64(task.mu), *alias_rows64(task.mu[tup].prod(1)), tup,
            *alias_rows64(task.Qm.T), *alias_rows64(task.P.T))
