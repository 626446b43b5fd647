"""Fused CPU kernels (numba) for SCB real SGD at scale (used by :mod:`empirical.scb_fast`).

One SGD step at N = 500, T = 1e5, batch 256 touches B*T = 2.56e7 token positions three times:
draw the token, add its attention weight to the sample's histogram ``h_b = X_b a^(k_b)`` (spec §2),
and, after the residuals are known, add ``(V^T r_b)_{x_{b,t}}`` into the attention gradient of
the sample's query (spec §3.2: ``d l / d a^(k)_t = sum_{b: k_b = k} (V^T r_b)_{x_{b,t}}``). The
gradient needs every position's token (the attention is not constant over positions once training
moves it), so the tokens are drawn, not only their counts; they are kept as int16 between the two
passes. Eager torch spends ~10 memory passes per position (uniforms, alias arithmetic, int64
indices, gathers); the kernels below do each pass once, in parallel over samples (forward) or
over the distinct queries of the batch (backward), with no (B, T) float temporaries.

Random numbers: SplitMix64 (Steele, Lea & Flood 2014, the generator of Java's SplittableRandom)
evaluated at counter ``n`` — output ``n`` of the stream seeded with ``seed`` — so any thread can
draw any position's bits: results do not depend on the thread count. Each 64-bit output gives two
32-bit words, one token each (sample ``b`` uses outputs ``b*ceil(T/2) ...``).

Tokens: Walker/Vose alias method over ``2^nb >= N`` buckets (``mu`` padded with zeros): the top
``nb`` bits of a word pick the bucket, the low ``32 - nb`` bits are compared with an integer
acceptance threshold. The sampled distribution differs from ``mu`` by at most ``2^-32`` per bucket
(:func:`alias_thresholds` returns the exact implied distribution for tests).

Accumulators (``h`` and the per-row gradient) are float64 whatever the parameters' dtype.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

__all__ = ["alias_thresholds", "forward_tokens", "attention_update", "soft_threshold_project", "implied_distribution",
           "threads", "kernel", "PARALLEL_MIN_POSITIONS"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(inline="always")
def _splitmix64(seed, n):
    """Output ``n`` (0-based) of SplitMix64 seeded with ``seed`` (uint64 arithmetic, wraps)."""
    z = seed + (n + np.uint64(1)) * _GAMMA
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def alias_thresholds(mu: np.ndarray, accept: np.ndarray, alias: np.ndarray):
    """Integer alias table for :func:`forward_tokens` from a float alias table of ``mu`` padded to
    ``2^nb`` buckets: ``(thr uint32 (2^nb,), ali int16 (2^nb,), nb)``; a word ``r`` gives bucket
    ``i = r >> (32 - nb)``, token ``i`` if ``r & (2^(32-nb) - 1) < thr[i]`` else ``ali[i]``."""
    nb = int(accept.size - 1).bit_length() if accept.size > 1 else 1
    if accept.size != 2**nb:
        raise ValueError(f"alias table size {accept.size} is not a power of two")
    L = 32 - nb
    thr = np.minimum(np.round(np.asarray(accept, float) * 2.0**L), 2.0**L).astype(np.uint32)
    return thr, np.asarray(alias, np.int16), nb


def implied_distribution(thr: np.ndarray, ali: np.ndarray, nb: int, N: int) -> np.ndarray:
    """The exact distribution (N,) the integer table samples (for tests)."""
    L = 32 - nb
    acc = thr.astype(float) / 2.0**L
    p = np.zeros(max(N, thr.size))
    np.add.at(p, np.arange(thr.size), acc)
    np.add.at(p, ali.astype(int), 1 - acc)
    return p[:N] / thr.size


@njit(parallel=True, cache=True)
def forward_tokens(seed, k, At, thr, ali, nb, x, h):
    """Draw ``x`` (B, T) int16 tokens and write ``h[b] = X_b a^(k_b)`` (B, N) float64 (spec §2),
    with ``At`` (N, T) the attention (row k = a^(k)), ``k`` (B,) the queries, ``seed`` uint64."""
    B, T = x.shape
    L = np.uint64(32 - nb)
    mask = np.uint64((1 << (32 - nb)) - 1)
    lo32 = np.uint64(0xFFFFFFFF)
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
                    i = np.int64(r >> L)
                    tok = i if (r & mask) < thr[i] else np.int64(ali[i])
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
