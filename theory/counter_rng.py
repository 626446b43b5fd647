"""Counter-based random numbers and integer alias tables for numba kernels (CPU).

Shared by the numba SDE backend (:mod:`simulate._numba_em`, the SCB step in
:mod:`theory.scb.sde_numba`) and the fused SGD kernels (:mod:`empirical.scb.kernels`).

SplitMix64 (Steele, Lea & Flood 2014, the generator of Java's SplittableRandom) evaluated at counter
``n`` — output ``n`` of the stream seeded with ``seed`` — so any thread can draw any number: results
never depend on the thread count or on how work is split. Sub-streams are keyed by outputs of a
parent stream (``key_path = splitmix64(seed, path)``, ``key_step = splitmix64(key_path, step)``).

Uniforms: ``(z >> 11) 2^-53`` (53 bits, numpy's ``random_double``); Gaussians by the ziggurat
(Marsaglia & Tsang 2000, Doornik's exact ZIGNOR form; ~6x cheaper than Box–Muller here).

Alias tables: Walker/Vose alias method over ``2^nb >= n`` buckets (``p`` padded with zeros): the
top ``nb`` bits of a 32-bit word pick the bucket, the low ``32 - nb`` bits are compared with an
integer acceptance threshold. The sampled distribution differs from ``p`` by at most
``2^-(32-nb)`` per bucket (:func:`implied_distribution` returns the exact implied distribution for
tests).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .sampling import alias_table

__all__ = ["splitmix64", "uniform53", "normals", "alias_pick", "alias_bits", "alias_pick64", "alias_thresholds",
           "alias_rows64", "int_alias_table", "implied_distribution"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(inline="always")
def splitmix64(seed, n):
    """Output ``n`` (0-based) of SplitMix64 seeded with ``seed`` (uint64 arithmetic, wraps)."""
    z = seed + (n + np.uint64(1)) * _GAMMA
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(inline="always")
def uniform53(z):
    """A float64 uniform on [0, 1) from the top 53 bits of the uint64 ``z``."""
    return np.float64(z >> np.uint64(11)) * (2.0 ** -53)


def _ziggurat_tables(n: int = 128, r: float = 3.442619855899, v: float = 9.91256303526217e-3):
    """Layer edges ``x`` (n+1,) and ratios ``x[i+1]/x[i]`` (n,) of the normal ziggurat (Marsaglia &
    Tsang 2000, 128 layers; ``x[0] = v/f(r)`` the base layer's width, ``x[1] = r``, ``x[n] = 0``)."""
    x = np.zeros(n + 1)
    f = math.exp(-0.5 * r * r)
    x[0], x[1] = v / f, r
    for i in range(2, n):
        x[i] = math.sqrt(-2.0 * math.log(v / x[i - 1] + f))
        f = math.exp(-0.5 * x[i] * x[i])
    return x, x[1:] / x[:-1]


_ZX, _ZR = _ziggurat_tables()
_ZIG_R = 3.442619855899


@njit(inline="always")
def _normal(key, c):
    """One standard normal from the stream ``key`` starting at counter ``c``: ``(z, next counter)``
    (Doornik's ZIGNOR form of the ziggurat: exact; one word in ~99% of draws)."""
    while True:
        w = splitmix64(key, c)
        c += np.uint64(1)
        u = 2.0 * uniform53(w) - 1.0  # top 53 bits
        i = np.int64(w & np.uint64(127))  # low 7 bits: the layer
        if abs(u) < _ZR[i]:
            return u * _ZX[i], c
        if i == 0:  # the tail beyond r (Marsaglia 1964)
            while True:
                x = math.log1p(-uniform53(splitmix64(key, c))) / _ZIG_R
                y = math.log1p(-uniform53(splitmix64(key, c + np.uint64(1))))
                c += np.uint64(2)
                if -2.0 * y >= x * x:
                    return (x - _ZIG_R) if u < 0 else (_ZIG_R - x), c
        x = u * _ZX[i]  # a wedge: accept under the density
        f0 = math.exp(-0.5 * (_ZX[i] * _ZX[i] - x * x))
        f1 = math.exp(-0.5 * (_ZX[i + 1] * _ZX[i + 1] - x * x))
        accept = f1 + uniform53(splitmix64(key, c)) * (f0 - f1) < 1.0
        c += np.uint64(1)
        if accept:
            return x, c


@njit(inline="always")
def normals(key, scale, out):
    """``out`` (M,) = ``scale`` x iid standard normals from the stream ``key`` (ziggurat,
    :func:`_normal`, counters 0, 1, ... in order)."""
    c = np.uint64(0)
    for i in range(out.shape[0]):
        z, c = _normal(key, c)
        out[i] = z * scale


@njit(inline="always")
def alias_pick(r, thr, ali, shift, mask):
    """Outcome (int64) of the integer alias table ``(thr, ali, nb)`` for the 32-bit word ``r``
    (a uint64 below 2^32); ``shift, mask = alias_bits(nb)``, computed once outside the caller's loop
    (recomputing them per draw halves the SGD kernel's speed)."""
    i = np.int64(r >> shift)
    return i if (r & mask) < thr[i] else np.int64(ali[i])


@njit(inline="always")
def alias_bits(nb, width=32):
    """``(shift, mask)`` (uint64) of :func:`alias_pick` (``width`` 32) or :func:`alias_pick64`
    (``width`` 64) for a table of ``2^nb`` buckets: bucket = the top ``nb`` bits of the word, coin =
    the low ``width - nb``."""
    return np.uint64(width - nb), np.uint64((1 << (width - nb)) - 1)


@njit(inline="always")
def alias_pick64(z, thr, ali, shift, mask, row):
    """Outcome (int64) of row ``row`` of the 64-bit alias tables ``(thr uint64 (R, 2^nb), ali (R, 2^nb), nb)``
    (:func:`alias_rows64`) for the word ``z``; ``shift, mask = alias_bits(nb, 64)``, computed once
    outside the caller's loop. Exact to ~2^-53 per bucket (the thresholds come from float64
    probabilities)."""
    i = np.int64(z >> shift)
    a = np.int64(ali[row, i])  # loaded unconditionally: a select, not a branch (the coin is random)
    return i if (z & mask) < thr[row, i] else a


def alias_rows64(rows: np.ndarray):
    """64-bit integer alias tables of each categorical row of ``rows`` (R, n) (normalised here,
    padded with zeros to ``2^nb >= n`` buckets): ``(thr uint64 (R, 2^nb), ali int32 (R, 2^nb), nb)``."""
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    nb = max(1, int(rows.shape[1] - 1).bit_length())
    L = 64 - nb
    thr, ali = [], []
    for p in rows:
        acc, al = alias_table(np.concatenate([p, np.zeros(2**nb - p.size)]))
        thr.append([min(int(round(a * 2.0**L)), 2**L) for a in acc])
        ali.append(al)
    return np.array(thr, dtype=np.uint64), np.array(ali, dtype=np.int32), nb


def alias_thresholds(mu: np.ndarray, accept: np.ndarray, alias: np.ndarray):
    """Integer alias table from a float alias table of ``mu`` padded to ``2^nb`` buckets:
    ``(thr uint32 (2^nb,), ali int16 (2^nb,), nb)``; a word ``r`` gives bucket
    ``i = r >> (32 - nb)``, token ``i`` if ``r & (2^(32-nb) - 1) < thr[i]`` else ``ali[i]``."""
    nb = int(accept.size - 1).bit_length() if accept.size > 1 else 1
    if accept.size != 2**nb:
        raise ValueError(f"alias table size {accept.size} is not a power of two")
    L = 32 - nb
    thr = np.minimum(np.round(np.asarray(accept, float) * 2.0**L), 2.0**L).astype(np.uint32)
    return thr, np.asarray(alias, np.int16), nb


def int_alias_table(p: np.ndarray, nb: int | None = None):
    """``(thr, ali, nb)`` for the categorical ``p`` (n,) (normalised here), padded with zeros to
    ``2^nb`` buckets (default: the smallest power of two >= n, at least 2)."""
    p = np.asarray(p, dtype=np.float64)
    nb = max(1, int(p.size - 1).bit_length()) if nb is None else nb
    acc, ali = alias_table(np.concatenate([p, np.zeros(2**nb - p.size)]))
    return alias_thresholds(p, acc, ali)


def implied_distribution(thr: np.ndarray, ali: np.ndarray, nb: int, N: int) -> np.ndarray:
    """The exact distribution (N,) the integer table samples (for tests)."""
    L = 32 - nb
    acc = thr.astype(float) / 2.0**L
    p = np.zeros(max(N, thr.size))
    np.add.at(p, np.arange(thr.size), acc)
    np.add.at(p, ali.astype(int), 1 - acc)
    return p[:N] / thr.size
