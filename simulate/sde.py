"""``solve_sde``: ensembles of SDE paths (Euler-Maruyama in diffrax, vmapped over paths).

An SDE model is any object with (shapes: ``y`` (dim,), diffusion (dim, noise_dim)):

* ``drift(t, y, args)`` and ``diffusion(t, y, args, key)`` — jax functions. ``key`` is a fresh
  PRNG key per path and step, for diffusions estimated by Monte Carlo (e.g. minibatch noise from
  sampled per-sample gradients); deterministic diffusions ignore it;
* ``noise_dim``, ``args()`` (a pytree of parameters — passed through ``args`` so new values do not
  recompile), ``initial_state()``, ``paper``, ``name``;
* ``observables(Y) -> {name: array}`` and optionally ``state_variables(Y)`` (numpy, vectorised over
  leading axes).

:class:`ReducedSDE` adapts a :class:`ReducedSystem` whose ``diffusion`` is a sympy matrix.

Brownian motion: ``UnsafeBrownianPath`` with ``ForwardMode`` adjoint (forward-only ensembles;
``VirtualBrownianTree`` is ~20x slower). Same seed -> same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from theory.core import ReducedSystem, jax_modules
from theory.errors import ConfigError, SolverError

from .ode import _enable_x64, _validate_time
from .trajectory import make_trajectory

__all__ = ["solve_sde", "ReducedSDE"]


@dataclass(frozen=True, eq=False)
class ReducedSDE:
    """A ReducedSystem with a sympy ``diffusion`` matrix, as an SDE model for :func:`solve_sde`."""

    system: ReducedSystem
    params: Mapping[str, float]
    y0: Mapping[str, float]

    def __post_init__(self):
        if self.system.diffusion is None:
            raise ConfigError("system", f"{self.system.paper}/{self.system.name} has no diffusion")

    @property
    def paper(self):
        return self.system.paper

    @property
    def name(self):
        return self.system.name

    @property
    def noise_dim(self) -> int:
        return int(self.system.diffusion.shape[1])

    def args(self):
        import jax.numpy as jnp

        return jnp.asarray(self.system.parameter_vector(self.params))

    def initial_state(self):
        return self.system.state_vector(self.y0)

    @property
    def _g(self):
        return _lambdified_diffusion(self.system)

    def drift(self, t, y, p):
        return _jax_rhs(self.system)(t, y, p)

    def diffusion(self, t, y, p, key):
        import jax.numpy as jnp

        return jnp.asarray(self._g(t, y, p), dtype=y.dtype).reshape(len(self.system.state), self.noise_dim)

    def observables(self, Y):
        p = self.system.parameter_vector(self.params)
        out = {n: Y[..., i] for i, n in enumerate(self.system.state_names)}
        out.update(self.system.observables_numpy()(Y, p))
        return out


@lru_cache(maxsize=None)
def _jax_rhs(system):
    return system.to_jax()


@lru_cache(maxsize=None)
def _lambdified_diffusion(system):
    import sympy as sp

    return sp.lambdify((sp.Symbol("t", real=True), system.state, system.parameters), system.diffusion.tolist(),
                       modules=jax_modules(), cse=True)


@lru_cache(maxsize=32)
def _runner(sde, n_paths: int, dt: float, max_steps: int):
    _enable_x64()
    import diffrax
    import jax
    import jax.numpy as jnp

    M = sde.noise_dim

    def one_path(key, y0, args, ts):
        bkey, dkey = jax.random.split(key)

        def diff(t, y, a):
            idx = jnp.round((t - ts[0]) / dt).astype(jnp.int32)
            return sde.diffusion(t, y, a, jax.random.fold_in(dkey, idx))

        bm = diffrax.UnsafeBrownianPath(shape=(M,), key=bkey)
        terms = diffrax.MultiTerm(diffrax.ODETerm(sde.drift), diffrax.ControlTerm(diff, bm))
        sol = diffrax.diffeqsolve(
            terms, diffrax.Euler(), t0=ts[0], t1=ts[-1], dt0=dt, y0=y0, args=args,
            saveat=diffrax.SaveAt(ts=ts), adjoint=diffrax.ForwardMode(), max_steps=max_steps,
            throw=False,
        )
        return sol.ys

    return jax.jit(jax.vmap(one_path, in_axes=(0, None, None, None)))


def solve_sde(
    sde: Any,
    t,
    *,
    paths: int = 256,
    seed: int = 0,
    dt: float = 1.0,
    y0=None,
    parameters: Mapping[str, Any] | None = None,
    keep_state: bool = False,
):
    """Integrate ``paths`` independent paths of ``sde`` on the output grid ``t`` (Euler-Maruyama,
    fixed step ``dt`` in the model's time units). Returns a Trajectory with dims (path, time).

    Raises :class:`SolverError` (with the partial ensemble up to the last time at which every path
    was finite) when a path diverges.
    """
    if paths < 1:
        raise ConfigError("paths", f"need at least one path, got {paths}")
    if not dt > 0:
        raise ConfigError("dt", f"step must be > 0, got {dt}")
    ts = _validate_time(t)
    _enable_x64()
    import jax
    import jax.numpy as jnp

    n_steps = int(np.ceil((ts[-1] - ts[0]) / dt)) + 1
    run = _runner(sde, int(paths), float(dt), n_steps + 8)
    y_init = np.asarray(sde.initial_state() if y0 is None else y0, dtype=np.float64)
    keys = jax.random.split(jax.random.PRNGKey(seed), paths)
    Y = np.asarray(run(keys, jnp.asarray(y_init), sde.args(), jnp.asarray(ts)), dtype=np.float64)
    finite = np.all(np.isfinite(Y), axis=(0, 2))
    good = ts.size if finite.all() else int(np.argmin(finite))
    Yg = Y[:, :good]
    variables: dict[str, Any] = {}
    if keep_state and hasattr(sde, "state_variables"):
        variables.update(sde.state_variables(Yg))
    with np.errstate(all="ignore"):
        variables.update(sde.observables(Yg))
    traj = make_trajectory(
        ts[:good], variables, paper=sde.paper, system=sde.name, source="sde", backend="diffrax",
        parameters=parameters or {}, seed=seed, lead_dims=("path",),
        status=0 if good == ts.size else -1,
        message="ok" if good == ts.size else f"a path became non-finite at t={ts[good]:.6g}",
        extra_attrs={"dt": dt, "paths": paths},
    )
    if good < ts.size:
        raise SolverError(sde.paper, sde.name, float(ts[max(good - 1, 0)]), traj.attrs["message"], partial=traj)
    return traj
