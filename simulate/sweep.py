"""Parameter sweeps: one compiled diffrax solve vmapped over a grid of parameter vectors, or
(``backend="numba"``) the compiled DOP853 of :mod:`simulate._numba_ode` in a parallel loop.

``sweep(system, base, {"T": [1e2, 1e3], "K": [0.05, 0.1]}, y0, t)`` solves every combination in
one jit-compiled call and returns a Dataset with one dim per swept parameter plus ``time``. For a
cluster, split the grid and call this per chunk (e.g. one Ray task each); results concatenate
with ``xarray.combine_by_coords``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import xarray as xr

from theory.core import ReducedSystem
from theory.errors import ConfigError

from .ode import AUTO_EXPLICIT_STEPS, STATE_BOUND, check_times, diffrax_solver, stiff_fallback
from .trajectory import make_trajectory

__all__ = ["sweep"]


def _vmapped(system, method, rtol, atol, max_steps):
    """The compiled solve vmapped over (y0, p), kept on the system beside it."""
    def build():
        import jax

        run = diffrax_solver(system, method, rtol, atol, max_steps)
        return jax.jit(jax.vmap(lambda y0, p, ts: run(y0, p, ts).ys, in_axes=(0, 0, None)))

    return system.compiled(("diffrax_sweep", method, rtol, atol, max_steps), build)


def _numba_map(system, Y0, P, ts, method, rtol, atol, max_steps) -> np.ndarray:
    """``Y (B, len(ts), dim)``: compiled DOP853 per row of ``(Y0, P)`` in parallel; under ``"auto"``
    the rows that spend :data:`~simulate.ode.AUTO_EXPLICIT_STEPS` steps again with scipy LSODA."""
    from . import _numba_ode as N

    if method not in ("auto", "DOP853"):
        raise ConfigError("method", f"unknown numba sweep method {method!r}; choose auto or DOP853")
    budget = min(max_steps, AUTO_EXPLICIT_STEPS) if method == "auto" else max_steps
    Y, status = N.batch(system, Y0, P, ts, rtol, atol, budget, STATE_BOUND)
    if method == "auto":
        for b in np.nonzero(status == N.BUDGET)[0]:
            Y[b] = stiff_fallback(system, ts, Y0[b], P[b], rtol, atol)[0]
    return Y


def sweep(
    system: ReducedSystem,
    base: Mapping[str, float],
    grid: Mapping[str, Sequence[float]],
    y0: Mapping[str, float] | Callable[[Mapping[str, float]], Mapping[str, float]],
    t,
    *,
    method: str | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 1_000_000,
    backend: str = "numba",
    observables: bool = True,
) -> xr.Dataset:
    """Solve ``system`` at every point of ``grid`` (a product over the named parameters).
    ``y0`` may be a callable of the parameter values (initial states that depend on them).
    ``backend``: ``"numba"`` (the default; ``method`` ``"auto"``, the default: DOP853 at every
    point, scipy LSODA at the points where it spends its step budget; or ``"DOP853"``) or
    ``"diffrax"`` (``method`` a diffrax solver, default Kvaerno5, vmapped over the grid). A point that fails is NaN after its last good time.
    ``observables=False``: the states only (as :func:`simulate.solve`)."""
    if backend not in ("diffrax", "numba"):
        raise ConfigError("backend", f"unknown sweep backend {backend!r}; choose diffrax or numba")
    ts = check_times(t)
    for name in grid:
        if name not in system.parameter_names:
            raise ConfigError(name, f"not a parameter of {system.paper}/{system.name}")
    names = list(grid)
    combos = list(itertools.product(*(list(grid[n]) for n in names)))
    P = np.stack([system.parameter_vector({**base, **dict(zip(names, c))}) for c in combos])
    Y0 = np.stack([
        system.state_vector(y0({**base, **dict(zip(names, c))}) if callable(y0) else y0) for c in combos
    ])
    if backend == "numba":
        Y = _numba_map(system, Y0, P, ts, method or "auto", rtol, atol, max_steps)
    else:
        import jax.numpy as jnp

        run = _vmapped(system, method or "Kvaerno5", float(rtol), float(atol), int(max_steps))
        Y = np.asarray(run(jnp.asarray(Y0), jnp.asarray(P), jnp.asarray(ts)))
    shape = tuple(len(grid[n]) for n in names)
    Y = Y.reshape(*shape, ts.size, len(system.state))
    variables = {n: Y[..., i] for i, n in enumerate(system.state_names)}
    if observables:
        obs = system.observables_numpy()
        with np.errstate(all="ignore"):
            for n, v in obs(Y.reshape(-1, len(system.state)), P.repeat(ts.size, 0).T).items():
                variables[n] = v.reshape(*shape, ts.size)
    ds = make_trajectory(ts, variables, paper=system.paper, system=system.name, source="ode",
                         backend=backend, parameter_values=dict(base), lead_dims=tuple(names))
    return ds.assign_coords({n: np.asarray(grid[n], dtype=float) for n in names})
