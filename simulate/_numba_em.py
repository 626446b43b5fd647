"""Fixed-step Euler–Maruyama as a compiled numba path loop, parallel over paths (the ``"numba"``
backend of :func:`simulate.solve_sde`).

For models whose step is cheap to write as scalar loops and costly as array programs (many small
per-sample gathers, e.g. the full SCB minibatch SDE: XLA-CPU spends its time on (M, T, N) one-hot
temporaries there). A model opts in with ``numba_increment() -> (increment, params)``:

    increment(t, y, h, dW, key, params, dy)   # a numba @njit function; writes dy (dim,) = f h + g dW

and a state size ``dim`` (``y0`` is checked against it: the compiled step does not check bounds).
``dW`` (noise_dim,): the step's Brownian increments (``sqrt(h) z``, ``z ~ N(0, I)``); ``key``: a
uint64 stream key for the model's own draws (:func:`theory.counter_rng.splitmix64` at counters
0, 1, ...); ``params``: a tuple of arrays and scalars (constant over the solve).

Randomness (:mod:`theory.counter_rng`, SplitMix64 at a counter): path ``p`` has the key
``kp = splitmix64(seed, p)``; step ``n`` (counted from 0 over the whole grid) draws its Gaussians
from the stream ``splitmix64(kp, 2n)`` (:func:`theory.counter_rng.normals`) and hands the model the key
``splitmix64(kp, 2n + 1)``. So a path's numbers depend only on (seed, path index, step grid) —
never on the chunk size, the thread count or the other paths. Different numbers from the jax
backend (another generator), the same distribution.

Steps: :func:`theory.noise.step_plan` (each output interval cut into equal steps <= dt). A path
whose state becomes non-finite stops; its later outputs are NaN (the caller reports the partial
ensemble). Float64. Parallel over paths: one chunk of paths per CPU core, on threads (the
compiled loop releases the GIL; a serial loop compiles in about half a ``prange`` one's time).
Compilation: ~5 s per process (the loop is specialised to the model's step, so it is not cached
on disk).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from numba import njit

from theory.counter_rng import normals, splitmix64
from theory.errors import ConfigError

from ._em import cpu_cores, run_interruptibly, step_plan

__all__ = ["numba_paths", "has_numba_step"]


def has_numba_step(sde: Any) -> bool:
    """Whether ``sde`` provides a numba step (``numba_increment``)."""
    return callable(getattr(sde, "numba_increment", None))


@njit(nogil=True)  # not cache=True: a dispatcher argument never hits the cache (one entry per process)
def _run(increment, params, y0, t0, n_steps, h_steps, seed, first_path, noise_dim, out, stop):
    """``out[p, i]`` (paths, 1 + intervals, dim): path ``first_path + p`` after interval ``i``;
    returns early (``out`` partly written) once ``stop[0]`` is set (checked after every interval)."""
    P, S, D = out.shape
    for p in range(P):
        kp = splitmix64(seed, np.uint64(first_path + p))
        y = y0.copy()
        dy = np.empty(D)
        dW = np.empty(noise_dim)
        out[p, 0] = y
        t = t0
        n = np.uint64(0)
        for i in range(S - 1):
            h = h_steps[i]
            sh = math.sqrt(h)
            for _ in range(n_steps[i]):
                normals(splitmix64(kp, np.uint64(2) * n), sh, dW)
                increment(t, y, h, dW, splitmix64(kp, np.uint64(2) * n + np.uint64(1)), params, dy)
                for d in range(D):
                    y[d] += dy[d]
                t += h
                n += np.uint64(1)
            out[p, i + 1] = y
            if stop[0]:
                return
            finite = True
            for d in range(D):
                if not math.isfinite(y[d]):
                    finite = False
            if not finite:
                out[p, i + 2:] = np.nan
                break


def numba_paths(sde: Any, ts: np.ndarray, dt: float, seed: int, paths: int, y0: np.ndarray, *,
                chunk: int | None = None, method: str = "euler_maruyama") -> np.ndarray:
    """Integrate ``paths`` paths on the grid ``ts``; returns ``Y`` (paths, len(ts), dim), float64.
    ``chunk``: paths per compiled call (default: one chunk per CPU core; it does not change the
    numbers). Chunks run on threads (the compiled loop releases the GIL)."""
    if method != "euler_maruyama":
        raise ConfigError("method", f"the numba backend runs euler_maruyama only, got {method!r}")
    if not has_numba_step(sde):
        raise ConfigError("backend", f"{getattr(sde, 'name', 'this model')} has no numba step (numba_increment)")
    y0 = np.ascontiguousarray(y0, dtype=np.float64)
    dim = getattr(sde, "dim", None)
    if dim is None:
        raise ConfigError("sde", f"{getattr(sde, 'name', 'this model')} declares no state size (dim)")
    if y0.ndim != 1 or y0.size != int(dim):  # the compiled step does not check bounds
        raise ConfigError("y0", f"{getattr(sde, 'name', 'the model')} has state size {dim}, got shape {y0.shape}")
    increment, params = sde.numba_increment()
    n, h = step_plan(ts, dt)
    out = np.empty((paths, ts.size, y0.size), dtype=np.float64)
    workers = cpu_cores()
    size = -(-paths // workers) if chunk is None else max(1, min(int(chunk), paths))
    seed_u = np.uint64(int(seed) % 2**64)

    def one_chunk(start, stop):
        if stop.is_set():
            return
        end = min(start + size, paths)
        _run(increment, params, y0, float(ts[0]), n, h, seed_u, start, int(sde.noise_dim), out[start:end], stop.array)

    # compile in this thread (a call on no paths), then run the chunks on threads while this one waits
    _run(increment, params, y0, float(ts[0]), n, h, seed_u, 0, int(sde.noise_dim), out[:0], np.zeros(1, np.uint8))
    run_interruptibly(one_chunk, range(0, paths, size), workers)
    return out
