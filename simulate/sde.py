"""``solve_sde``: ensembles of SDE paths (fixed-step Euler-Maruyama as a jitted ``lax.scan``,
vmapped and chunked over paths; the engine is :mod:`simulate._em`).

An SDE model is any object with (shapes: ``y`` (dim,), diffusion (dim, noise_dim)):

* ``drift(t, y, args)`` and ``diffusion(t, y, args, key)`` — jax functions. ``key`` is a fresh
  PRNG key per path and step, for diffusions estimated by Monte Carlo (e.g. minibatch noise from
  sampled per-sample gradients); deterministic diffusions ignore it. A model declaring
  ``uniforms_per_step = n`` receives instead ``n`` uniforms on [0, 1) per step (drawn in bulk by the
  engine: the fast path), ``0`` for none; ``drift_and_diffusion(t, y, args, noise)`` may replace
  the pair when both come from the same samples;
* ``noise_dim``, ``args()`` (a pytree of parameters — passed through ``args`` so new values do not
  recompile), ``initial_state()``, ``paper``, ``name``;
* ``observables(Y) -> {name: array}`` and optionally ``state_variables(Y)`` (numpy, vectorised over
  leading axes).

:class:`ReducedSDE` adapts a :class:`ReducedSystem` whose ``diffusion`` is a sympy matrix.

Brownian increments (and a model's own draws) come from per-block keys ``fold_in(key(seed), block)``
for blocks of 8 paths, drawn in bulk per group of output intervals (:mod:`simulate._em`): same seed
(and PRNG implementation) -> same numbers, whatever the chunk size.
Schemes: :data:`simulate.METHODS` (``"euler_maruyama"`` default, ``"milstein"``).

**Backends** (``backend=`` of :func:`solve_sde`): ``"jax"`` (default; the engine above, any model)
and ``"numba"`` (:mod:`simulate._numba_em`: a compiled path loop, parallel over paths, for models
whose step is many small gathers — the full SCB minibatch SDE). A model opts into ``"numba"`` with

* ``numba_increment() -> (increment, params)``: ``increment(t, y, h, dW, key, params, dy)`` a numba
  ``@njit`` function writing ``dy`` (dim,) = ``f h + g dW`` (one Euler–Maruyama increment) for the
  step's Brownian increments ``dW`` (noise_dim,) and a uint64 stream key ``key`` for its own draws
  (:mod:`theory.counter_rng`); ``params`` a tuple of arrays and scalars;
* ``dim``: the state size (``y0`` is checked against it; the compiled step does not check bounds).

Its numbers come from SplitMix64 keyed by (seed, path, step) — never by chunk or thread count —
and differ from the jax backend's (another generator); the distribution is the same. Same output,
observables and divergence report as the jax backend (``backend`` attribute ``"em_numba"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from theory.core import ReducedSystem
from theory.errors import ConfigError, SolverError

from ._em import em_paths
from .ode import check_times, enable_x64
from .trajectory import make_trajectory

__all__ = ["solve_sde", "ReducedSDE", "SDE_BACKENDS"]

#: SDE backends and the generators (``prng=``) each accepts, its default first
SDE_BACKENDS = {"jax": ("rbg", "threefry2x32", "unsafe_rbg"), "numba": ("splitmix64",)}


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

    #: the diffusion is deterministic: no model randomness per step (the engine skips the keys)
    uniforms_per_step = 0

    @property
    def noise_dim(self) -> int:
        return int(self.system.diffusion.shape[1])

    def args(self):
        import jax.numpy as jnp

        return jnp.asarray(self.system.parameter_vector(self.params))

    def initial_state(self):
        return self.system.state_vector(self.y0)

    def drift(self, t, y, p):
        return self.system.to_jax()(t, y, p)

    def diffusion(self, t, y, p, key):
        return self.system.diffusion_jax()(t, y, p)

    def observables(self, Y):
        p = self.system.parameter_vector(self.params)
        out = {n: Y[..., i] for i, n in enumerate(self.system.state_names)}
        out.update(self.system.observables_numpy()(Y, p))
        return out


def solve_sde(
    sde: Any,
    t,
    *,
    paths: int = 256,
    seed: int = 0,
    dt: float | None = None,
    y0=None,
    parameter_values: Mapping[str, Any] | None = None,
    keep_state: bool = False,
    chunk: int | None = None,
    method: str = "euler_maruyama",
    prng: str | None = None,
    backend: str = "jax",
):
    """Integrate ``paths`` independent paths of ``sde`` on the output grid ``t`` (fixed step ``dt``
    in the model's time units — default: the model's ``dt`` attribute if it has one (e.g. one
    optimiser step, :class:`simulate.NoiseSDE`), else 1.0; ``method`` one of :data:`simulate.METHODS`: Euler–Maruyama by
    default, ``"milstein"`` for deterministic diffusions with commutative noise). Returns a
    Trajectory with dims (path, time).

    ``prng``: jax PRNG implementation (``"rbg"`` default, fastest with good split/fold_in on CPU;
    ``"threefry2x32"``, ``"unsafe_rbg"``). The numbers depend on it and on ``seed``, never on
    ``chunk``. ``backend``: ``"jax"`` (default) or ``"numba"`` (models with ``numba_increment``;
    Euler–Maruyama only; its generator is ``"splitmix64"``, the only ``prng`` it accepts).

    Raises :class:`SolverError` (with the partial ensemble up to the last time at which every path
    was finite) when a path diverges. ``chunk``: paths per compiled call (default: one chunk per
    CPU core, within a 256 MiB output budget; chunks run on threads); it does not change the
    numbers.
    """
    if paths < 1:
        raise ConfigError("paths", f"need at least one path, got {paths}")
    if backend not in SDE_BACKENDS:
        raise ConfigError("backend", f"unknown SDE backend {backend!r}; choose one of {', '.join(SDE_BACKENDS)}")
    allowed = SDE_BACKENDS[backend]
    prng = prng or allowed[0]
    if prng not in allowed:
        raise ConfigError("prng", f"unknown PRNG implementation {prng!r} for the {backend} backend; "
                                  f"choose {' or '.join(allowed)}")
    if dt is None:
        dt = float(getattr(sde, "dt", None) or 1.0)
    if not dt > 0:
        raise ConfigError("dt", f"step must be > 0, got {dt}")
    ts = check_times(t)
    enable_x64()
    y_init = np.asarray(sde.initial_state() if y0 is None else y0, dtype=np.float64)
    if backend == "numba":
        from ._numba_em import numba_paths

        Y = numba_paths(sde, ts, float(dt), int(seed), int(paths), y_init, chunk=chunk, method=method)
    else:
        Y = em_paths(sde, ts, float(dt), int(seed), int(paths), y_init, chunk=chunk, method=method, prng=prng)
    finite = np.all(np.isfinite(Y), axis=(0, 2))
    good = ts.size if finite.all() else int(np.argmin(finite))
    Yg = Y[:, :good]
    variables: dict[str, Any] = {}
    if keep_state and hasattr(sde, "state_variables"):
        variables.update(sde.state_variables(Yg))
    with np.errstate(all="ignore"):
        variables.update(sde.observables(Yg))
    traj = make_trajectory(
        ts[:good], variables, paper=sde.paper, system=sde.name, source="sde",
        backend="em_numba" if backend == "numba" else "em_scan",
        parameter_values=parameter_values or {}, seed=seed, lead_dims=("path",),
        status=0 if good == ts.size else -1,
        message="ok" if good == ts.size else f"a path became non-finite at t={ts[good]:.6g}",
        extra_attrs={"dt": dt, "paths": paths, "method": method, "prng": prng},
    )
    if good < ts.size:
        raise SolverError(sde.paper, sde.name, float(ts[max(good - 1, 0)]), traj.attrs["message"], partial=traj)
    return traj
