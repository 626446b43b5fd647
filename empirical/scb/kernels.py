"""Fused CPU kernels (numba) for SCB real SGD at scale (used by :mod:`empirical.scb.fast`).

One SGD step at N = 500, T = 1e5, batch 256 touches B*T = 2.56e7 token positions three times:
draw the token, add its attention weight to the sample's histogram ``h_b = X_b a^(k_b)`` (docs/papers/scb.md §2),
and, after the residuals are known, add ``(V^T r_b)_{x_{b,t}}`` into the attention gradient of
the sample's query (spec §3.2: ``d l / d a^(k)_t = sum_{b: k_b = k} (V^T r_b)_{x_{b,t}}``). The
gradient needs every position's token (the attention is not constant over positions once training
moves it), so the tokens are drawn, not only their counts; they are kept as int16 between the two
passes. Eager torch spends ~10 memory passes per position (uniforms, alias arithmetic, int64
indices, gathers); the kernels below do each pass once, in parallel over samples (forward) or
over the distinct queries of the batch (backward), with no (B, T) float temporaries.

Random numbers and token tables: :mod:`theory.counter_rng` (SplitMix64 at a counter, so results do
not depend on the thread count; integer alias tables, exact to ``2^-(32-nb)`` per bucket). Each
64-bit output gives two 32-bit words, one token each (sample ``b`` uses outputs ``b*ceil(T/2) ...``).

Accumulators (``h`` and the per-row gradient) are float64 whatever the parameters' dtype.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from theory.counter_rng import alias_bits, alias_pick
from theory.counter_rng import splitmix64 as _splitmix64

__all__ = ["forward_tokens", "attention_update", "soft_threshold_project", "threads", "kernel",
           "PARALLEL_MIN_POSITIONS"]


@njit(parallel=True, cache=True)
def forward_tokens(seed, k, At, thr, ali, nb, x, h):
    """Draw ``x`` (B, T) int16 tokens and write ``h[b] = X_b a^(k_b)`` (B, N) float64 (spec §2),
    with ``At`` (N, T) the attention (row k = a^(k)), ``k`` (B,) the queries, ``seed`` uint64."""
    B, T = x.shape
    lo32 = np.uint64(0xFFFFFFFF)
    shift, mask = alias_bits(nb)
    half = (T + 1) // 2
    seed = np.uint64(seed)
    for b in prange(B):
        row = At[k[b]]
        hb = h[b]
        xb = x[b]
        hb[:] = 0.0
        base = np.uint64(b) * np.uint64(half)
        for j in range(half):
            z = _splitmix64(seed, base + np.uint64(j))
            for m in range(2):
                t = 2 * j + m
                if t < T:
                    r = (z >> np.uint64(32)) if m else (z & lo32)
                    tok = alias_pick(r, thr, ali, shift, mask)
                    xb[t] = tok
                    hb[tok] += row[t]


@njit(parallel=True, cache=True)
def attention_update(At, x, w, rows, starts, order, scale):
    """``At[rows[u]] -= scale[u] * sum_{b in group u} w[b, x[b, :]]`` (spec §3.2 gradient of the
    sampled queries' attention; group ``u`` = ``order[starts[u]:starts[u+1]]``), in parallel over
    the distinct rows (each row written by one thread)."""
    T = x.shape[1]
    for u in prange(rows.size):
        g = np.zeros(T)
        for idx in range(starts[u], starts[u + 1]):
            b = order[idx]
            wb = w[b]
            xb = x[b]
            for t in range(T):
                g[t] += wb[xb[t]]
        r = rows[u]
        s = scale[u]
        for t in range(T):
            At[r, t] -= s * g[t]


@njit(parallel=True, cache=True)
def soft_threshold_project(At, thr, project):
    """In place: ``a <- sign(a) max(|a| - thr, 0)`` (the l1 proximal step), then, if ``project``,
    ``a_k <- a_k + (1 - 1^T a_k)/T`` (Decision 6 projection), row by row."""
    N, T = At.shape
    for k in prange(N):
        row = At[k]
        s = 0.0
        for t in range(T):
            v = row[t]
            if v > thr:
                v -= thr
            elif v < -thr:
                v += thr
            else:
                v = 0.0
            row[t] = v
            s += v
        if project:
            d = (1.0 - s) / T
            for t in range(T):
                row[t] += d


def threads() -> int:
    """Threads the parallel kernels run on (numba's setting)."""
    return numba.get_num_threads()


#: below this many token positions per step the serial kernels are used: a parallel region's
#: start/stop (OpenMP barrier, spinning workers) costs more than the work, and on a shared 2-core
#: machine spinning workers slowed small steps 10x
PARALLEL_MIN_POSITIONS = 1 << 21

_SERIAL = {f.__name__: njit(cache=True)(f.py_func) for f in (forward_tokens, attention_update, soft_threshold_project)}


def kernel(name: str, positions: int):
    """The parallel kernel ``name`` for steps of >= :data:`PARALLEL_MIN_POSITIONS` token positions,
    its serial compilation (same numbers: each output element is computed by one thread in a fixed
    order) otherwise."""
    return globals()[name] if positions >= PARALLEL_MIN_POSITIONS else _SERIAL[name]
