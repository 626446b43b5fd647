"""The topic SDE's step (:meth:`theory.topic.sde.TopicSDE.increment`) as a numba function, for
``simulate.solve_sde(..., backend="numba")`` (the engine's path loop: :mod:`simulate._numba_em`).

Same formula, written in loops over one path (``D`` rows of ``Y``, ``r`` basis coordinates, ``n_S``
topic sets, ``m`` sets per topic): the weights ``w_S``, the ``r x r`` matrix ``X~ᵀ diag(w) X~``, each
row times it, the per-topic sums for ``Uᵀ`` and the gathered label noises — about
``n_S r^2 + D r^2 + T m v r`` multiply-adds a step; the ``D r^2`` product through BLAS (``np.dot``),
the rest in loops (``fastmath`` reassociation and contraction only — no finite-math assumption, so a
diverging path still turns non-finite — hence results that differ from the jax step in the last bits).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["increment", "kernel_params"]


def kernel_params(numbers: dict, config) -> tuple:
    """The kernel's ``params`` from :meth:`~theory.topic.sde.TopicSDE._numbers` (contiguous float64
    and int64 arrays, then scalars)."""
    f = lambda k: np.ascontiguousarray(numbers[k], dtype=np.float64)  # noqa: E731
    index = np.ascontiguousarray(numbers["label_index"], dtype=np.int64).reshape(config.T, -1, config.v)
    return (f("Xh"), np.ascontiguousarray(numbers["holders"], dtype=np.int64), index, f("Xk"), f("lam_decay"),
            float(numbers["eta"]), float(numbers["scale"]), float(numbers["label_scale"]), int(config.tau))


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def increment(t, y, h, dW, key, params, dy):
    """``dy = f h + sqrt(Δτ/B) F dW`` (:meth:`~theory.topic.sde.TopicSDE.increment`); ``dW``: the
    ``n_S`` topic-set noises, then the ``n_S tau v`` label noises."""
    Xh, holders, index, Xk, lam_decay, eta, scale, label_scale, tau = params
    nS, r = Xh.shape
    T, m, v = index.shape
    D = y.size // r
    tv = tau * v
    sc = scale * label_scale
    mean = 0.0
    for s in range(nS):
        mean += dW[s]
    mean /= nS
    w = np.empty(nS)
    a = np.empty(nS)
    root = math.sqrt(nS)
    for s in range(nS):
        w[s] = h / nS + scale * (dW[s] - mean) / root
        z = 0.0
        for j in range(tv):
            z += dW[nS + s * tv + j]
        a[s] = 2 * eta * w[s] - sc * z
    M = np.zeros((r, r))  # -2 eta X~ᵀ diag(w) X~
    for s in range(nS):
        for i in range(r):
            wi = -2 * eta * w[s] * Xh[s, i]
            for j in range(r):
                M[i, j] += wi * Xh[s, j]
    YM = np.dot(y.reshape((D, r)), M)  # the (D, r) x (r, r) product through BLAS: 1.9x the loops
    for d in range(D):
        o = d * r
        for j in range(r):
            dy[o + j] = -h * eta * y[o + j] * lam_decay[j] + YM[d, j]
    UX = np.empty(r)
    for k in range(T):
        UX[:] = 0.0
        for q in range(m):
            s = holders[k, q]
            for j in range(r):
                UX[j] += a[s] * Xh[s, j] / tv
        for i in range(v):
            o = (k * v + i) * r
            for j in range(r):
                dy[o + j] += UX[j]
            for q in range(m):
                z = sc * dW[nS + index[k, q, i]]
                for j in range(r):
                    dy[o + j] += z * Xk[k, q, j]
