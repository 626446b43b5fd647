"""Fixed-step Euler–Maruyama as a jitted ``lax.scan``, vmapped over paths, chunked over paths.

The engine behind :func:`simulate.solve_sde`. For a model with ``drift(t, y, args)`` (dim,) and
``diffusion(t, y, args, key)`` (dim, noise_dim), one step is

    y_{n+1} = y_n + f(t_n, y_n) h + g(t_n, y_n) sqrt(h) z_n,   z_n ~ N(0, I_noise_dim)   (Itô)

with ``h`` the step. A model may instead provide ``drift_and_diffusion(t, y, args, key) ->
(f, g)`` when both come from the same random samples (a drift term estimated by Monte Carlo, such
as the Itô term of an energy). Output times need not be multiples of ``dt``: the interval between two
output times is cut into ``ceil(length/dt)`` equal steps (so every step is <= dt and each output
time is hit exactly).

Randomness: path ``p`` owns the key ``split(PRNGKey(seed), paths)[p]``; on a uniform plan output
interval ``i`` draws its step keys and Brownian increments from ``fold_in(path_key, i)`` in one
call each (otherwise step ``n`` uses ``fold_in(path_key, n)``). So the numbers of a path depend
only on (seed, path index, output grid, dt) — not on the chunk size or on how many paths run
beside it. Float64 (x64 enabled).

Why not diffrax: a diffrax ``Euler`` SDE solve carries per-step control-flow and Brownian-path
overhead that dominates small SDEs (~200x a plain scan; diffrax issue #517). The ODE solver stays
in diffrax.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["step_plan", "em_paths", "chunk_size_for"]

#: memory budget for one chunk's saved output (bytes); paths are split into chunks below it.
CHUNK_BYTES = 256 * 2**20


def step_plan(ts: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Steps per output interval and their size: ``(n_i, h_i)`` for the ``len(ts) - 1`` intervals,
    ``n_i = ceil((ts[i+1]-ts[i])/dt)`` (1e-9 relative slack so exact multiples are not split),
    ``h_i = (ts[i+1]-ts[i])/n_i``."""
    gaps = np.diff(ts)
    n = np.maximum(np.ceil(gaps / dt * (1 - 1e-9)), 1).astype(np.int64)
    return n, gaps / n


def chunk_size_for(paths: int, n_save: int, dim: int, noise_dim: int, chunk: int | None) -> int:
    """Paths per vmapped call: ``chunk`` if given, else as many as fit :data:`CHUNK_BYTES` of
    output + per-step working set (float64)."""
    if chunk is not None:
        return max(1, min(int(chunk), paths))
    per_path = 8 * (n_save * dim + 4 * dim * max(noise_dim, 1))
    return int(max(1, min(paths, CHUNK_BYTES // per_path)))


@lru_cache(maxsize=32)
def _chunk_runner(sde: Any, n_static: int | None):
    """``run(keys (P,), y0 (dim,), args, t0, n (I,), h (I,)) -> Y (P, I+1, dim)``, jitted.

    ``n_static``: the common number of steps per output interval (uniform grids, the usual case):
    each interval then draws its keys and Brownian increments in one call (``split`` and
    ``normal`` over the interval) and runs a static inner ``scan``. ``None``: intervals of varying
    length, one ``fold_in`` per step inside a ``fori_loop``."""
    import jax
    import jax.numpy as jnp

    M = int(sde.noise_dim)
    if hasattr(sde, "drift_and_diffusion"):  # both terms from one set of samples (e.g. Itô terms)
        terms = sde.drift_and_diffusion
    else:
        def terms(t, y, args, key):
            return sde.drift(t, y, args), sde.diffusion(t, y, args, key)

    def one_path(key, y0, args, t0, n_steps, h_steps):
        def advance(y, t, h, dkey, z):
            f, g = terms(t, y, args, dkey)
            return y + f * h + g @ (z * jnp.sqrt(h))

        if n_static is not None:
            def interval(carry, xs):
                idx, h = xs
                ks = jax.random.split(jax.random.fold_in(key, idx), n_static + 1)
                Z = jax.random.normal(ks[-1], (n_static, M), dtype=y0.dtype)

                def step(c, kz):
                    y, t = c
                    return (advance(y, t, h, kz[0], kz[1]), t + h), None

                carry, _ = jax.lax.scan(step, carry, (ks[:-1], Z))
                return carry, carry[0]

            carry0 = (y0, t0)
            xs = (jnp.arange(n_steps.shape[0], dtype=jnp.uint32), h_steps)
        else:
            def one_step(carry, h):
                y, t, i = carry
                bkey, dkey = jax.random.split(jax.random.fold_in(key, i))
                z = jax.random.normal(bkey, (M,), dtype=y.dtype)
                return (advance(y, t, h, dkey, z), t + h, i + 1)

            def interval(carry, nh):
                n, h = nh
                carry = jax.lax.fori_loop(0, n, lambda _, c: one_step(c, h), carry)
                return carry, carry[0]

            carry0 = (y0, t0, jnp.asarray(0, dtype=jnp.int64))
            xs = (n_steps, h_steps)
        _, ys = jax.lax.scan(interval, carry0, xs)
        return jnp.concatenate([y0[None], ys], axis=0)

    return jax.jit(jax.vmap(one_path, in_axes=(0, None, None, None, None, None)))


def em_paths(sde: Any, ts: np.ndarray, dt: float, keys, y0: np.ndarray, *, chunk: int | None = None) -> np.ndarray:
    """Integrate one path per key on the grid ``ts``; returns ``Y`` (paths, len(ts), dim), float64.

    Paths run in chunks of equal size (the last one padded, so one compilation serves all)."""
    import jax
    import jax.numpy as jnp

    n, h = step_plan(ts, dt)
    paths = int(keys.shape[0])
    y0 = np.asarray(y0, dtype=np.float64)
    size = chunk_size_for(paths, ts.size, y0.size, int(sde.noise_dim), chunk)
    run = _chunk_runner(sde, int(n[0]) if np.all(n == n[0]) else None)
    args = sde.args()
    jn, jh, jy0, jt0 = jnp.asarray(n), jnp.asarray(h), jnp.asarray(y0), jnp.asarray(float(ts[0]))
    out = np.empty((paths, ts.size, y0.size), dtype=np.float64)
    for start in range(0, paths, size):
        stop = min(start + size, paths)
        k = keys[start:stop]
        if stop - start < size:  # pad with copies of the first key; padded paths are dropped
            k = jnp.concatenate([k, jnp.repeat(keys[start:start + 1], size - (stop - start), axis=0)])
        Y = run(k, jy0, args, jt0, jn, jh)
        out[start:stop] = np.asarray(jax.device_get(Y), dtype=np.float64)[: stop - start]
    return out
