"""Parameter sweeps: one compiled diffrax solve, vmapped over a grid of parameter vectors.

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

from .ode import diffrax_solver, check_times
from .trajectory import make_trajectory

__all__ = ["sweep"]


def _vmapped(system, method, rtol, atol, max_steps):
    """The compiled solve vmapped over (y0, p), kept on the system beside it."""
    def build():
        import jax

        run = diffrax_solver(system, method, rtol, atol, max_steps)
        return jax.jit(jax.vmap(lambda y0, p, ts: run(y0, p, ts).ys, in_axes=(0, 0, None)))

    return system.compiled(("diffrax_sweep", method, rtol, atol, max_steps), build)


def sweep(
    system: ReducedSystem,
    base: Mapping[str, float],
    grid: Mapping[str, Sequence[float]],
    y0: Mapping[str, float] | Callable[[Mapping[str, float]], Mapping[str, float]],
    t,
    *,
    method: str = "Kvaerno5",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 1_000_000,
) -> xr.Dataset:
    """Solve ``system`` at every point of ``grid`` (a product over the named parameters).
    ``y0`` may be a callable of the parameter values (initial states that depend on them)."""
    import jax.numpy as jnp

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
    run = _vmapped(system, method, float(rtol), float(atol), int(max_steps))
    Y = np.asarray(run(jnp.asarray(Y0), jnp.asarray(P), jnp.asarray(ts)))
    shape = tuple(len(grid[n]) for n in names)
    Y = Y.reshape(*shape, ts.size, len(system.state))
    obs = system.observables_numpy()
    variables = {n: Y[..., i] for i, n in enumerate(system.state_names)}
    with np.errstate(all="ignore"):
        for n, v in obs(Y.reshape(-1, ts.size, len(system.state)).reshape(-1, len(system.state)), P.repeat(ts.size, 0).T).items():
            variables[n] = v.reshape(*shape, ts.size)
    ds = make_trajectory(ts, variables, paper=system.paper, system=system.name, source="ode",
                         backend="diffrax", parameter_values=dict(base), lead_dims=tuple(names))
    return ds.assign_coords({n: np.asarray(grid[n], dtype=float) for n in names})
