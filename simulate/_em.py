"""Fixed-step SDE schemes as a jitted ``lax.scan``, vmapped over paths, chunked over paths.

The engine behind :func:`simulate.solve_sde`. A model has ``drift(t, y, args)`` (dim,) and
``diffusion(t, y, args, noise)`` (dim, noise_dim), or ``drift_and_diffusion(t, y, args, noise) ->
(f, g)`` when both come from the same random samples (a drift term estimated by Monte Carlo, such
as the Itô term of an energy). ``noise`` is the model's own randomness for the step: a PRNG key, or
— when the model declares ``uniforms_per_step = n`` — ``n`` uniforms on [0, 1) drawn by the engine
together with the Brownian increments (one random call per group of output intervals instead of a
key split per step: the fast path). Output times need not be multiples of ``dt``: the interval between two
output times is cut into ``ceil(length/dt)`` equal steps (so every step is <= dt and each output
time is hit exactly). A model whose diffusion is structured (a ``dim x noise_dim`` matrix cheap to
apply but costly to form) may also define ``increment(t, y, h, dW, noise, args) -> f h + g dW`` (the
Euler–Maruyama increment, the same numbers as forming ``g``): Euler–Maruyama then never builds ``g``.

Schemes (:data:`METHODS`, scipy style; ``h`` the step, ``dW = sqrt(h) z``, ``z ~ N(0, I)``, Itô):

* ``"euler_maruyama"`` (default): ``y + f h + g dW``. Strong order 1/2 (1 for additive noise),
  weak order 1. Any model, including diffusions estimated by Monte Carlo from the step's draws.
* ``"milstein"``: ``y + f h + g dW + 1/2 sum_jl (L^j g_l)(dW_j dW_l - delta_jl h)`` with
  ``L^j g_l = (d g_l / dy) g_j`` (forward-mode jvp). Strong order 1 for *commutative* noise
  (scalar, diagonal or additive noise; Kloeden & Platen §10.3), weak order 1. Needs a deterministic
  differentiable ``diffusion`` (no ``drift_and_diffusion``/``uniforms_per_step``): a diffusion
  estimated from random samples has no derivative along the path, so the SCB/JoMA minibatch SDEs
  use Euler–Maruyama.

Randomness: paths come in blocks of :data:`PRNG_BLOCK`; block ``b`` owns the key
``fold_in(key(seed, impl), b)`` and, on a uniform plan, draw ``i`` takes the uniforms of
all its steps and paths from ``fold_in(block_key, i)`` in one unbatched call (``i`` counts
groups of :func:`group_size` intervals, padded at the end with zero-length steps; a model whose
single interval would exceed :data:`GROUP_BYTES` draws per step instead, ``i`` the step) (otherwise step ``n``
uses ``fold_in(block_key, n)``) — never a vmapped random call: XLA's RngBitGenerator batches
over keys by using the first key only, so a vmapped draw would depend on the chunk. Gaussians come from uniforms by Box–Muller (exact, and
cheaper than the inverse error function in float64). So the numbers of a path depend only on
(seed, PRNG implementation, path index, output grid, dt, method, the model's draws per step) —
not on the chunk size or on how many paths run beside it. The PRNG implementation (``prng=`` of :func:`simulate.solve_sde`,
default ``"rbg"``: XLA's RngBitGenerator for bits, threefry for split/fold_in — 3-5x faster than
``"threefry2x32"`` on CPU) changes the numbers, not their distribution. Float64 (x64 enabled).

Parallelism: by default the paths are split into one chunk per CPU core and the chunks run on
threads (XLA executes calls from different threads concurrently); the numbers do not change.
Time is cut into segments of about :data:`SEGMENT_PATH_STEPS` path-steps, one compiled call each,
the state carried from one to the next (the draw counters count over the whole grid, so the numbers
do not change either): the main thread only waits, and a Ctrl-C or SIGTERM stops the solve within
one segment (:func:`run_interruptibly`).

Why not diffrax: a diffrax ``Euler`` SDE solve carries per-step control-flow and Brownian-path
overhead that dominates small SDEs (~200x a plain scan; diffrax issue #517). The ODE solver stays
in diffrax.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from theory.errors import ConfigError
from theory.noise import step_plan

__all__ = ["METHODS", "Method", "step_plan", "em_paths", "chunk_size_for", "integrate_increments", "cpu_cores",
           "run_interruptibly", "segment_plan", "StopFlag"]

#: memory budget for one chunk's saved output (bytes); paths are split into chunks below it.
CHUNK_BYTES = 256 * 2**20
#: paths per PRNG block: one random call per block and output interval (the unit of reproducibility).
PRNG_BLOCK = 8
#: bytes of uniforms one PRNG block draws per call (a group of output intervals, uniform plan)
GROUP_BYTES = 2**16
#: path-steps per compiled call (time segment): about a second of work, so signals are seen
SEGMENT_PATH_STEPS = 2**20


@dataclass(frozen=True)
class Method:
    """A fixed-step scheme: its strong and weak order and the models it applies to."""

    strong_order: float
    weak_order: float
    applies_to: str


METHODS = {
    "euler_maruyama": Method(0.5, 1.0, "any Itô SDE (strong order 1 for additive noise); diffusions estimated "
                                       "by Monte Carlo from the step's draws included"),
    "milstein": Method(1.0, 1.0, "Itô SDEs with a deterministic, differentiable diffusion and commutative "
                                 "noise (scalar, diagonal or additive)"),
}


def _sampled_diffusion(sde: Any) -> bool:
    """Whether the model estimates its diffusion from the step's random samples (no derivative)."""
    return hasattr(sde, "drift_and_diffusion") or bool(getattr(sde, "uniforms_per_step", None))


def check_method(sde: Any, method: str) -> None:
    """:class:`ConfigError` for an unknown scheme or one the model does not admit."""
    if method not in METHODS:
        raise ConfigError("method", f"unknown SDE method {method!r}; choose one of {', '.join(METHODS)}")
    if method == "milstein" and _sampled_diffusion(sde):
        raise ConfigError("method", f"milstein needs a deterministic diffusion; {getattr(sde, 'name', 'this model')} "
                                    "estimates its diffusion from random samples (use euler_maruyama)")


def chunk_size_for(paths: int, n_save: int, dim: int, noise_dim: int, chunk: int | None) -> int:
    """Paths per vmapped call: ``chunk`` if given, else as many as fit :data:`CHUNK_BYTES` of
    output + per-step working set (float64)."""
    if chunk is not None:
        return max(1, min(int(chunk), paths))
    per_path = 8 * (n_save * dim + 4 * dim * max(noise_dim, 1)) + 2 * GROUP_BYTES // PRNG_BLOCK
    return int(max(1, min(paths, CHUNK_BYTES // per_path)))


def group_size(n_static: int, n_intervals: int, n_cols: int) -> int:
    """Output intervals per random call on a uniform plan: as many as keep one PRNG block's draws
    under :data:`GROUP_BYTES` (a function of the grid and the model only, never of the chunk)."""
    per_interval = n_static * PRNG_BLOCK * n_cols * 8
    return int(max(1, min(n_intervals, GROUP_BYTES // per_interval)))


def _uniform53(key, shape):
    """Float64 uniforms on [0, 1) with 53 random bits, ``(bits >> 11) 2^-53`` (numpy's
    ``random_double``; one fused op, ~1.5x cheaper than ``jax.random.uniform``)."""
    import jax
    import jax.numpy as jnp

    return (jax.random.bits(key, shape, dtype=jnp.uint64) >> 11).astype(jnp.float64) * (2.0 ** -53)


def _box_muller(u, m: int):
    """``m`` standard normals from ``2 ceil(m/2)`` uniforms on [0, 1) (last axis), exactly."""
    import jax.numpy as jnp

    u1, u2 = u[..., 0::2], u[..., 1::2]
    r = jnp.sqrt(-2.0 * jnp.log1p(-u1))
    th = 2.0 * jnp.pi * u2
    return jnp.concatenate([r * jnp.cos(th), r * jnp.sin(th)], axis=-1)[..., :m]


def _advance(sde: Any, method: str):
    """``advance(t, y, h, dW, noise, args) -> y_next`` for one step of ``method``."""
    import jax
    import jax.numpy as jnp

    if hasattr(sde, "drift_and_diffusion"):  # both terms from one set of samples (e.g. Itô terms)
        terms = sde.drift_and_diffusion
    else:
        def terms(t, y, args, noise):
            return sde.drift(t, y, args), sde.diffusion(t, y, args, noise)

    small = int(sde.noise_dim) <= 8
    if method == "euler_maruyama" and hasattr(sde, "increment"):  # a structured diffusion: g dW without g
        def advance(t, y, h, dW, noise, args):
            return y + sde.increment(t, y, h, dW, noise, args)
    elif method == "euler_maruyama":
        def advance(t, y, h, dW, noise, args):
            f, g = terms(t, y, args, noise)
            return y + f * h + (g * dW).sum(-1) if small else y + f * h + g @ dW  # small: fuses on CPU
    else:  # milstein (commutative noise)
        def advance(t, y, h, dW, noise, args):
            def G(x):
                return sde.diffusion(t, x, args, noise)

            f, g = sde.drift(t, y, args), G(y)
            Lg = jax.vmap(lambda gj: jax.jvp(G, (y,), (gj,))[1], in_axes=1)(g)  # [j, :, l] = L^j g_l
            corr = 0.5 * (jnp.einsum("jil,j,l->i", Lg, dW, dW) - h * jnp.einsum("jij->i", Lg))
            return y + f * h + g @ dW + corr
    return advance


def _draws(sde: Any) -> tuple[int, int, bool]:
    """(uniforms for the Gaussians, uniforms for the model, model takes a key)."""
    M = int(sde.noise_dim)
    n_model = getattr(sde, "uniforms_per_step", None)
    return 2 * ((M + 1) // 2), int(n_model or 0), n_model is None


@lru_cache(maxsize=32)
def _chunk_runner(sde: Any, n_static: int | None, method: str, blocks: int, R: int):
    """``run(block_keys (blocks,), Y0 (P, dim), args, t0, c0, n (S,), h (S,)) -> (Y (S, P, dim), (y, t, c))``:
    one time segment of ``S`` output intervals for ``P = blocks * PRNG_BLOCK`` paths, jitted; the
    step is vmapped over paths. ``Y`` holds the states after each interval, ``(y, t, c)`` the
    states, time and draw counter where the next segment starts. ``c0`` counts draws over the
    whole grid (the interval on a per-step-draw plan, the group of ``R`` intervals on a grouped
    plan, the step on a varying plan), so a path's numbers do not depend on how the grid is cut
    into segments.

    ``n_static``: the common number of steps per output interval (uniform grids, the usual case):
    each group of ``R`` (:func:`group_size` of the whole grid) intervals then draws all its uniforms
    in one call per block and runs a static inner ``scan`` (``S`` is a multiple of ``R``). ``None``:
    intervals of varying length, one ``fold_in`` per step in a ``fori_loop``."""
    import jax
    import jax.numpy as jnp

    M = int(sde.noise_dim)
    nz, nu, wants_key = _draws(sde)
    step_paths = jax.vmap(_advance(sde, method), in_axes=(None, 0, None, 0, 0, None))

    def draw(bkeys, i, shape):
        """For the ``P`` paths of the chunk: dW-uniforms (*shape, P, nz) and the model's noise
        (*shape, P, nu) uniforms or (*shape, P) keys; block ``b``'s draws come from
        ``fold_in(block_keys[b], i)`` alone (one call each in a ``lax.map``, unbatched)."""
        def one_block(bkey):
            k = jax.random.fold_in(bkey, i)
            U = _uniform53(k, (*shape, PRNG_BLOCK, nz + nu))
            if not wants_key:
                return U, U[..., :0]
            # the model's own keys: threefry (its draws run under vmap, where only threefry gives
            # every path its own stream), seeded by 64 fresh bits of the block stream
            seeds = jax.random.bits(jax.random.fold_in(k, 1), (*shape, PRNG_BLOCK, 2), dtype=jnp.uint32)
            return U, seeds

        U, K = jax.lax.map(one_block, bkeys)  # a loop over blocks, never a batched random call
        U = jnp.moveaxis(U, 0, -3).reshape(*shape, blocks * PRNG_BLOCK, nz + nu)
        if wants_key:
            K = jnp.moveaxis(K, 0, -3).reshape(*shape, blocks * PRNG_BLOCK, 2)
            return U[..., :nz], jax.random.wrap_key_data(K, impl="threefry2x32")
        return U[..., :nz], U[..., nz:]

    def run(bkeys, Y0, args, t0, c0, n_steps, h_steps):
        S = h_steps.shape[0]
        if n_static is not None and _per_step_draws(sde, n_static):
            # many draws per step (e.g. the full SCB SDE): draw per step, inside the step, to stay in cache
            def step(c, j):
                y, t, h = c
                Uz, noise = draw(bkeys, j, ())
                return (step_paths(t, y, h, _box_muller(Uz, M) * jnp.sqrt(h), noise, args), t + h, h), None

            def interval(carry, xs_):
                idx, h = xs_
                js = idx * n_static + jnp.arange(n_static, dtype=jnp.uint32)
                (y, t, _), _ = jax.lax.scan(step, (carry[0], carry[1], h), js)
                return (y, t), y

            (y, t), ys = jax.lax.scan(interval, (Y0, t0), (c0 + jnp.arange(S, dtype=jnp.uint32), h_steps))
            return ys, (y, t, c0 + jnp.uint32(S))
        if n_static is not None:
            G = S // R
            hs = h_steps.reshape(G, R)

            def step(c, xs_):
                y, t, h = c
                return (step_paths(t, y, h, xs_[0], xs_[1], args), t + h, h), None

            def interval(carry, xs_):
                h, dW, noise = xs_
                (y, t, _), _ = jax.lax.scan(step, (carry[0], carry[1], h), (dW, noise))
                return (y, t), y

            def group(carry, xs_):
                gidx, hg = xs_
                Uz, noise = draw(bkeys, gidx, (R, n_static))  # one random call per block and group
                dW = _box_muller(Uz, M) * jnp.sqrt(hg)[:, None, None, None]  # (R, n_static, P, M)
                return jax.lax.scan(interval, carry, (hg, dW, noise))

            (y, t), ys = jax.lax.scan(group, (Y0, t0), (c0 + jnp.arange(G, dtype=jnp.uint32), hs))
            return ys.reshape(S, *Y0.shape), (y, t, c0 + jnp.uint32(G))

        def one_step(carry, h):
            y, t, i = carry
            Uz, noise = draw(bkeys, i, ())
            dW = _box_muller(Uz, M) * jnp.sqrt(h)
            return (step_paths(t, y, h, dW, noise, args), t + h, i + 1)

        def interval(carry, nh):
            n, h = nh
            carry = jax.lax.fori_loop(0, n, lambda _, c: one_step(c, h), carry)
            return carry, carry[0]

        end, ys = jax.lax.scan(interval, (Y0, t0, c0), (n_steps, h_steps))
        return ys, end

    return jax.jit(run)


def _per_step_draws(sde: Any, n_static: int) -> bool:
    """Whether one step's draws for a PRNG block exceed :data:`GROUP_BYTES` (then each step draws
    its own, inside the step, instead of a group of intervals drawing at once)."""
    nz, nu, wants_key = _draws(sde)
    return n_static * PRNG_BLOCK * (nz + nu + (2 if wants_key else 0)) * 8 > GROUP_BYTES


def segment_plan(n: np.ndarray, paths_per_call: int, group: int) -> int:
    """Output intervals per compiled call: about :data:`SEGMENT_PATH_STEPS` path-steps (so a
    signal is seen between calls within about a second), a multiple of ``group`` (the grouped
    plan's draw unit), at most the grid rounded up to ``group``."""
    per_interval = max(1, int(np.max(n))) * max(1, paths_per_call)
    seg = max(1, SEGMENT_PATH_STEPS // per_interval)
    seg = min(seg, n.size)
    return int(-(-seg // group) * group)


def em_paths(sde: Any, ts: np.ndarray, dt: float, seed: int, paths: int, y0: np.ndarray, *,
             chunk: int | None = None, method: str = "euler_maruyama", prng: str = "rbg",
             segment: int | None = None) -> np.ndarray:
    """Integrate ``paths`` paths on the grid ``ts``; returns ``Y`` (paths, len(ts), dim), float64.

    Paths come in PRNG blocks of :data:`PRNG_BLOCK`: block ``b`` (paths ``b*PRNG_BLOCK ...``)
    draws from ``fold_in(key(seed, prng), b)``. Chunks are whole blocks (``chunk`` is rounded up
    to a multiple of the block), all of one size so one compilation serves all; padded paths are
    dropped. Time is cut into segments of ``segment`` output intervals (default
    :func:`segment_plan`; rounded up to the draw group), one compiled call each, on worker threads:
    a Ctrl-C or SIGTERM stops the solve within one segment (:func:`run_interruptibly`). Neither
    ``chunk`` nor ``segment`` changes the numbers."""
    import jax
    import jax.numpy as jnp

    from .ode import enable_x64

    enable_x64()
    check_method(sde, method)
    n, h = step_plan(ts, dt)
    y0 = np.asarray(y0, dtype=np.float64)
    workers = cpu_cores()
    size = chunk_size_for(paths, ts.size, y0.size, int(sde.noise_dim), chunk)
    if chunk is None and workers > 1:  # one chunk per core (numbers do not depend on the chunk)
        size = min(size, -(-paths // workers))
    blocks = -(-size // PRNG_BLOCK)
    P = blocks * PRNG_BLOCK
    n_chunks = -(-paths // P)
    I = n.size
    n_static = int(n[0]) if np.all(n == n[0]) else None
    nz, nu, wants_key = _draws(sde)
    grouped = n_static is not None and not _per_step_draws(sde, n_static)
    R = group_size(n_static, I, nz + nu + (2 if wants_key else 0)) if grouped else 1
    seg = segment_plan(n, P, R) if segment is None else min(int(segment), I)  # at most the whole grid
    seg = int(-(-max(1, seg) // R) * R)
    n_seg = -(-I // seg)
    pad = n_seg * seg - I  # zero-length intervals after the end (h = 0, no steps), dropped
    jn = jnp.asarray(np.concatenate([n, np.zeros(pad, n.dtype)]))
    jh = jnp.asarray(np.concatenate([h, np.zeros(pad, h.dtype)]))
    run = _chunk_runner(sde, n_static, method, blocks, R)
    root = jax.random.key(seed, impl=prng)
    args = sde.args()
    jy0, jt0 = jnp.broadcast_to(jnp.asarray(y0), (P, y0.size)), jnp.asarray(float(ts[0]))
    c_first = jnp.asarray(0, dtype=jnp.uint32)
    out = np.empty((ts.size, paths, y0.size), dtype=np.float64)  # returned as a (paths, time, dim) view
    out[0] = y0

    def one_chunk(c, stop):
        bkeys = jax.vmap(lambda b: jax.random.fold_in(root, b))(jnp.arange(c * blocks, (c + 1) * blocks))
        start = c * P
        stop_path = min(start + P, paths)
        y, t, ctr = jy0, jt0, c_first
        for k in range(n_seg):
            if stop.is_set():
                return
            ys, (y, t, ctr) = run(bkeys, y, args, t, ctr, jn[k * seg:(k + 1) * seg], jh[k * seg:(k + 1) * seg])
            hi = min((k + 1) * seg, I)
            out[1 + k * seg:1 + hi, start:stop_path] = np.asarray(jax.device_get(ys))[: hi - k * seg, : stop_path - start]

    key = (run, seg)
    if n_chunks > 1 and key not in _COMPILED:  # compile once (ahead of time) before the threads start
        bk0 = jax.vmap(lambda b: jax.random.fold_in(root, b))(jnp.arange(blocks))
        run.lower(bk0, jy0, args, jt0, c_first, jn[:seg], jh[:seg]).compile()
        _COMPILED.add(key)
    run_interruptibly(one_chunk, range(n_chunks), workers)
    return out.transpose(1, 0, 2)


class StopFlag:
    """A stop request seen by Python (:meth:`is_set`) and by compiled loops (``array[0] != 0``, a
    uint8 array of one element they read between units of work)."""

    def __init__(self):
        self.array = np.zeros(1, dtype=np.uint8)

    def set(self) -> None:
        self.array[0] = 1

    def is_set(self) -> bool:
        return bool(self.array[0])


def run_interruptibly(fn, items, workers: int) -> None:
    """``fn(item, stop)`` for every item on up to ``workers`` threads while the main thread waits,
    so a Ctrl-C or SIGTERM handler runs at once even when the work is one long compiled call.
    ``stop`` (a :class:`StopFlag`) is set when the main thread is interrupted or an item
    fails: queued items never start, running ones return at their next check of ``stop``, and
    the exception propagates. The one path by which the SDE backends run their chunks."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    items = list(items)
    stop = StopFlag()
    ex = ThreadPoolExecutor(max(1, min(int(workers), len(items))))
    try:
        futures = [ex.submit(fn, it, stop) for it in items]
        pending = set(futures)
        while pending:  # short waits: the main thread returns to the interpreter for signal handlers
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
            for f in done:
                f.result()
    except BaseException:
        stop.set()
        raise
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


_COMPILED: set = set()  # (runner, intervals) already compiled


def cpu_cores() -> int:
    """CPU cores this process may use (chunks run on that many threads)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def integrate_increments(sde: Any, y0, t0: float, h: float, dW, *, method: str = "euler_maruyama") -> np.ndarray:
    """Final states ``(paths, dim)`` of ``method`` driven by given Brownian increments ``dW``
    (paths, steps, noise_dim) of step ``h`` — the same step as :func:`em_paths`, for strong
    (pathwise) convergence checks against a closed-form solution. Models with a deterministic
    diffusion only (the key passed to ``diffusion`` is a fixed dummy)."""
    import jax
    import jax.numpy as jnp

    from .ode import enable_x64

    enable_x64()
    check_method(sde, method)
    if _sampled_diffusion(sde):
        raise ConfigError("sde", "integrate_increments needs a model with a deterministic diffusion")
    advance = _advance(sde, method)
    args, dummy = sde.args(), jax.random.PRNGKey(0)

    def one(dw):
        def step(c, d):
            y, t = c
            return (advance(t, y, h, d, dummy, args), t + h), None

        return jax.lax.scan(step, (jnp.asarray(y0, jnp.float64), jnp.asarray(t0, jnp.float64)), dw)[0][0]

    return np.asarray(jax.jit(jax.vmap(one))(jnp.asarray(dW, jnp.float64)))
