"""The generic minibatch SDE of a :class:`~theory.core.ReducedSystem` with ``noise``
(:mod:`theory.noise`), for :func:`simulate.solve_sde`.

    dθ = rhs(θ) dt + sqrt(Δτ/B) F(θ) dW,       F Fᵀ = Cov_x[g](θ),

in the system's time unit: ``Δτ`` the ODE time of one optimiser step (:func:`theory.noise.step_time`
of the paper's Config — never assumed), ``B`` the batch, so the diffusion covariance is
``Δτ Σ(θ)`` with ``Σ = Cov_x[g]/B`` (the derivation of the scaling is in :mod:`theory.noise`).
The drift is the system's derived ``rhs``; the factor ``F`` (``factor=``):

* ``"outcomes"`` — finite distributions: ``F[:, k] = sqrt(p_k) (g_k - E g)`` over the outcomes
  ``k``; exact, no matrix decomposition (``noise_dim`` = number of outcomes);
* ``"ldl"`` — a closed-form covariance: ``C = L D Lᵀ`` (Cholesky without square roots, unrolled
  in plain arithmetic, no LAPACK call), ``F = L diag(sqrt(D))``. **PSD floor:** a pivot
  ``D_j <= 1e-14 max_i C_ii`` is set to 0 with its column of ``L`` — exact for a PSD matrix, where
  such a pivot is zero up to rounding and so is the rest of its column (a rank-deficient
  covariance, e.g. count frequencies summing to 1, needs no jitter). A genuinely indefinite matrix
  (a derivation defect) would be hidden by the floor, so :meth:`NoiseSDE.psd_defect` reports
  ``min λ / max |λ|`` outside the jitted step (tests hold it near zero). For ``dim >``
  :data:`LDL_UNROLL` the ``"cholesky"`` factor is used instead;
* ``"cholesky"`` — ``cholesky(C + ε I)`` (LAPACK) with ``ε = 1e-12 tr(C)/d`` (a bias of that
  relative size), for large full-rank covariances;
* ``"eigh"`` — ``F = Q diag(sqrt(max(λ, 0)))`` (LAPACK ``eigh``; negative eigenvalues floored at
  0). Caution: jax 0.10's CPU ``eigh`` deadlocked here when ``solve_sde`` ran two chunks of 10^4
  paths on threads (pass ``chunk=paths``); on the numba backend its eigenvector signs differ from
  jax's (same distribution, other numbers);
* ``"samples"`` — Monte-Carlo distributions, or an exact law whose covariance is left implicit and
  that names a sampler (``ref``; :func:`theory.noise.law_sampler`): ``F = (G - Ḡ)ᵀ/sqrt(M - 1)``
  from ``M = mc_samples`` fresh per-sample flows per step (unbiased for ``Cov_x[g]``), drawn by the
  law's jax sampler with the engine's per-step key.

``"auto"``: outcomes when the distribution is :class:`~theory.noise.Finite` with at most
``4 d`` outcomes (or any number, when its covariance is implicit and it names no sampler), ldl
(cholesky above :data:`LDL_UNROLL` states) when a covariance is stored, samples otherwise.

The preferred Euler–Maruyama step (``dt`` attribute, used by ``solve_sde`` when no ``dt`` is given)
is ``Δτ``: one optimiser step. Deterministic factors also run on the ``"numba"`` backend
(:meth:`NoiseSDE.numba_increment`: the sympy expressions printed for ``math`` and compiled). Float64.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp

from theory.core import TIME, ReducedSystem, compile_expressions
from theory.errors import ConfigError
from theory.noise import Finite, law_sampler, step_time

__all__ = ["NoiseSDE", "SampledNoiseSDE", "noise_sde", "FACTORS"]

#: factor methods (module docstring)
FACTORS = ("auto", "outcomes", "ldl", "cholesky", "eigh", "samples")
#: relative jitter of the cholesky factor
CHOLESKY_JITTER = 1e-12
#: relative pivot floor of the ldl factor
LDL_FLOOR = 1e-14
#: largest state unrolled by the ldl factor
LDL_UNROLL = 16


def _noise(system: ReducedSystem):
    noise = getattr(system, "noise", None)
    if noise is None:
        raise ConfigError("noise", f"{system.paper}/{system.name} has no noise (derive it with theory.noise)")
    return noise


@lru_cache(maxsize=None)
def _jax_callables(system: ReducedSystem, factor: str):
    """Jax callables of the noise for ``factor`` (cached per system)."""
    noise = _noise(system)
    args = (TIME, system.state, system.parameters)
    if factor == "outcomes":
        d = noise.distribution
        g_k = [[e.xreplace(o) for e in noise.gradient] for o in d.outcomes]
        return (compile_expressions(args, g_k, "jax", cse=True),
                compile_expressions(args, list(d.probabilities), "jax", cse=True))
    if factor in ("ldl", "eigh", "cholesky"):
        return compile_expressions(args, noise.covariance.tolist(), "jax", cse=True)
    return compile_expressions((*args, noise.samples), list(noise.gradient), "jax", cse=True)


@lru_cache(maxsize=None)
def _jax_rhs(system: ReducedSystem):
    return system.to_jax()


def _resolve_factor(system: ReducedSystem, factor: str) -> str:
    noise = _noise(system)
    if factor not in FACTORS:
        raise ConfigError("factor", f"must be one of {FACTORS}, got {factor!r}")
    d = len(system.state)
    if factor == "auto":
        sampled = law_sampler(noise.distribution) is not None
        if isinstance(noise.distribution, Finite) and (len(noise.distribution.outcomes) <= 4 * d
                                                       or (noise.covariance is None and not sampled)):
            return "outcomes"
        if noise.covariance is None and sampled:
            return "samples"
        if noise.covariance is None:
            raise ConfigError("factor", f"{system.paper}/{system.name}: the covariance is implicit in the law's "
                                        "moments and the law names no sampler; give the law a sampler (ref)")
        return "ldl" if d <= LDL_UNROLL else "cholesky"
    if factor == "outcomes" and not isinstance(noise.distribution, Finite):
        raise ConfigError("factor", "'outcomes' needs a Finite distribution")
    if factor == "ldl" and d > LDL_UNROLL:
        raise ConfigError("factor", f"'ldl' is unrolled up to {LDL_UNROLL} states; use 'cholesky' for {d}")
    if factor in ("ldl", "eigh", "cholesky") and noise.covariance is None:
        raise ConfigError("factor", f"{factor!r} needs a closed-form covariance; this noise is {noise.method}")
    if factor == "samples" and law_sampler(noise.distribution) is None:
        raise ConfigError("factor", "'samples' needs a law that names a sampler (a MonteCarlo law, or an exact "
                                    "one with ref)")
    return factor


def _ldl_factor(C, d: int):
    """``F = L diag(sqrt(D))`` with ``C = L D Lᵀ``, unrolled (module docstring; pivot floor
    :data:`LDL_FLOOR` relative to the largest diagonal entry)."""
    import jax.numpy as jnp

    floor = LDL_FLOOR * jnp.max(jnp.diag(C))
    L = [[None] * d for _ in range(d)]
    D = [None] * d
    for j in range(d):
        Dj = C[j, j] - sum((L[j][k] * L[j][k] * D[k] for k in range(j)), start=0.0)
        ok = Dj > floor
        safe = jnp.where(ok, Dj, 1.0)
        for i in range(j + 1, d):
            Lij = (C[i, j] - sum((L[i][k] * L[j][k] * D[k] for k in range(j)), start=0.0)) / safe
            L[i][j] = jnp.where(ok, Lij, 0.0)
        D[j] = jnp.where(ok, Dj, 0.0)
    root = [jnp.sqrt(Dj) for Dj in D]
    zero = jnp.zeros((), C.dtype)
    return jnp.stack([jnp.stack([root[j] if i == j else (L[i][j] * root[j] if j < i else zero) for j in range(d)])
                      for i in range(d)])


@dataclass(frozen=True, eq=False)
class NoiseSDE:
    """``dθ = rhs dt + sqrt(Δτ/B) F(θ) dW`` (module docstring) as a :func:`simulate.solve_sde` model.

    system:    a ReducedSystem with ``noise``;  params: parameter values by name;
    y0:        initial state (by name or in state order);
    step_time: ``Δτ``, the system time of one optimiser step (:func:`theory.noise.step_time`);
    batch:     the minibatch size ``B``;  factor: a :data:`FACTORS` entry (resolved at construction);
    mc_samples: per-step samples of the ``"samples"`` factor."""

    system: ReducedSystem
    params: Mapping[str, float]
    y0: Any
    step_time: float
    batch: int
    factor: str = "auto"
    mc_samples: int = 64

    def __post_init__(self):
        if not self.step_time > 0:
            raise ConfigError("step_time", f"must be > 0, got {self.step_time}")
        if int(self.batch) < 1:
            raise ConfigError("batch", f"must be >= 1, got {self.batch}")
        object.__setattr__(self, "factor", _resolve_factor(self.system, self.factor))
        if self.factor == "samples" and self.mc_samples < 2:
            raise ConfigError("mc_samples", f"the sample covariance needs >= 2 samples, got {self.mc_samples}")

    # -- the solve_sde model protocol ----------------------------------------------------------
    @property
    def paper(self) -> str:
        return self.system.paper

    @property
    def name(self) -> str:
        return f"{self.system.name}_sde"

    @property
    def dim(self) -> int:
        return len(self.system.state)

    @property
    def dt(self) -> float:
        """Preferred Euler–Maruyama step: one optimiser step (``Δτ``)."""
        return float(self.step_time)

    @property
    def noise_dim(self) -> int:
        if self.factor == "outcomes":
            return len(_noise(self.system).distribution.outcomes)
        return self.mc_samples if self.factor == "samples" else self.dim

    #: deterministic factors: no model randomness per step (the engine skips the keys)
    uniforms_per_step = 0

    def args(self):
        import jax.numpy as jnp

        return {"p": jnp.asarray(self.system.parameter_vector(self.params)),
                "scale": jnp.asarray(math.sqrt(self.step_time / int(self.batch)))}

    def initial_state(self) -> np.ndarray:
        return self.system.state_vector(self.y0)

    def drift(self, t, y, args):
        return _jax_rhs(self.system)(t, y, args["p"])

    def factor_matrix(self, t, y, p, key=None):
        """``F(θ)`` with ``F Fᵀ = Cov_x[g]`` (per sample; no ``Δτ/B``), shape ``(dim, noise_dim)``."""
        import jax.numpy as jnp

        d = self.dim
        if self.factor == "outcomes":
            f_g, f_p = _jax_callables(self.system, "outcomes")
            G = jnp.stack([jnp.stack([jnp.broadcast_to(jnp.asarray(e, y.dtype), ()) for e in row]) for row in f_g(t, y, p)])
            w = jnp.stack([jnp.broadcast_to(jnp.asarray(e, y.dtype), ()) for e in f_p(t, y, p)])
            return (jnp.sqrt(w)[:, None] * (G - w @ G)).T
        C = jnp.stack([jnp.stack([jnp.broadcast_to(jnp.asarray(e, y.dtype), ()) for e in row])
                       for row in _jax_callables(self.system, self.factor)(t, y, p)]).reshape(d, d)
        C = 0.5 * (C + C.T)
        if self.factor == "ldl":
            return _ldl_factor(C, d)
        if self.factor == "cholesky":
            jitter = CHOLESKY_JITTER * jnp.trace(C) / d + jnp.finfo(y.dtype).tiny
            return jnp.linalg.cholesky(C + jitter * jnp.eye(d, dtype=y.dtype))
        lam, Q = jnp.linalg.eigh(C)
        return Q * jnp.sqrt(jnp.maximum(lam, 0.0))[None, :]

    def diffusion(self, t, y, args, key):
        return args["scale"] * self.factor_matrix(t, y, args["p"], key)

    def observables(self, Y):
        p = self.system.parameter_vector(self.params)
        out = {n: Y[..., i] for i, n in enumerate(self.system.state_names)}
        out.update(self.system.observables_numpy()(Y, p))
        return out

    # -- diagnostics (numpy, outside the jitted step) -------------------------------------------
    def per_sample_covariance(self, y, key=None) -> np.ndarray:
        """``Cov_x[g]`` at state ``y`` as the model realises it (``F Fᵀ``), (dim, dim)."""
        import jax
        import jax.numpy as jnp

        from .core import enable_x64

        enable_x64()
        key = jax.random.key(0) if key is None else key
        F = np.asarray(self.factor_matrix(0.0, jnp.asarray(y, jnp.float64), self.args()["p"], key))
        return F @ F.T

    def psd_defect(self, y) -> float:
        """``min λ / max |λ|`` of the stored ``Cov_x[g]`` at ``y`` (0 or tiny negative for a
        covariance; clearly negative: the PSD floor of the ``ldl``/``eigh`` factor is hiding a defect)."""
        noise = _noise(self.system)
        if noise.covariance is None:
            raise ConfigError("noise", "a Monte-Carlo noise stores no covariance")
        f = compile_expressions((self.system.state, self.system.parameters), noise.covariance.tolist(), "numpy")
        C = np.asarray(f(np.asarray(y, float), self.system.parameter_vector(self.params)), float)
        lam = np.linalg.eigvalsh(0.5 * (C + C.T))
        top = float(np.abs(lam).max())
        return float(lam.min() / top) if top > 0 else 0.0

    # -- numba backend ----------------------------------------------------------------------------
    def numba_increment(self):
        """``(increment, params)`` for ``solve_sde(..., backend="numba")``: the same step, the
        sympy expressions printed for ``math`` and compiled by numba (deterministic factors)."""
        if self.factor == "samples":
            raise ConfigError("backend", "the numba backend needs a deterministic factor (not 'samples')")
        return _numba_increment(self.system, self.factor), (self.system.parameter_vector(self.params),
                                                           math.sqrt(self.step_time / int(self.batch)))


@dataclass(frozen=True, eq=False)
class SampledNoiseSDE(NoiseSDE):
    """:class:`NoiseSDE` with the ``"samples"`` factor: each step draws ``mc_samples`` samples with
    the engine's key (``drift_and_diffusion``: the engine treats the diffusion as random, so
    Milstein is refused)."""

    uniforms_per_step = None  # a PRNG key per path and step

    def factor_matrix(self, t, y, p, key=None):
        import jax
        import jax.numpy as jnp

        noise = _noise(self.system)
        xs = law_sampler(noise.distribution)(key, self.mc_samples, p)
        cols = [jnp.asarray(xs[str(s)], y.dtype) for s in noise.samples]
        g = _jax_callables(self.system, "samples")

        def one(*x):
            return jnp.stack([jnp.broadcast_to(jnp.asarray(e, y.dtype), ()) for e in g(t, y, p, x)])

        G = jax.vmap(one)(*cols)  # (M, d)
        return (G - G.mean(0)).T / jnp.sqrt(self.mc_samples - 1.0)

    def drift_and_diffusion(self, t, y, args, key):
        return self.drift(t, y, args), self.diffusion(t, y, args, key)


def noise_sde(problem, *, batch: int | None = None, factor: str = "auto", mc_samples: int = 64,
              config=None) -> tuple[NoiseSDE, np.ndarray]:
    """``(model, t)`` for ``simulate.solve_sde`` from a :class:`theory.Problem` whose system has
    ``noise``: ``Δτ`` from ``config.ode_time`` (:func:`theory.noise.step_time`), ``B`` from
    ``config.batch`` (or ``batch=``), ``t = config.ode_times()`` (``config``: the problem's)."""
    config = problem.config if config is None else config
    if config is None:
        raise ConfigError("config", "the SDE's time per step comes from the paper's config.ode_time; "
                                    "build the Problem with config=")
    B = batch if batch is not None else getattr(config, "batch", None)
    if B is None:
        raise ConfigError("batch", f"{type(config).__name__} has no batch field; pass batch=")
    cls = SampledNoiseSDE if _resolve_factor(problem.system, factor) == "samples" else NoiseSDE
    model = cls(problem.system, dict(problem.params), problem.y0, step_time(config), int(B), factor, mc_samples)
    return model, np.asarray(config.ode_times(), dtype=np.float64)


# ------------------------------------------------------------------------------------------------
# numba: the expressions printed for `math`, one compiled increment per (system, factor)
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _numba_increment(system: ReducedSystem, factor: str):
    from numba import njit
    from sympy.printing.pycode import PythonCodePrinter

    noise = _noise(system)
    d = len(system.state)
    printer = PythonCodePrinter({"fully_qualified_modules": True, "allow_unknown_functions": False})
    names = {s: f"y[{i}]" for i, s in enumerate(system.state)}
    names.update({s: f"p[{i}]" for i, s in enumerate(system.parameters)})
    names[TIME] = "t"

    def code(e) -> str:
        return printer.doprint(sp.sympify(e).xreplace({s: sp.Symbol(v) for s, v in names.items()}))

    rhs = [system.expand_definitions(e) for e in system.rhs]
    lines = ["def increment(t, y, h, dW, key, params, dy):", "    p = params[0]", "    scale = params[1]"]
    lines += [f"    dy[{i}] = ({code(e)}) * h" for i, e in enumerate(rhs)]
    if factor == "outcomes":
        dist = noise.distribution
        K = len(dist.outcomes)
        lines += [f"    G = np.empty(({K}, {d}))", f"    w = np.empty({K})"]
        for k, o in enumerate(dist.outcomes):
            lines += [f"    w[{k}] = {code(dist.probabilities[k])}"]
            lines += [f"    G[{k}, {i}] = {code(e.xreplace(o))}" for i, e in enumerate(noise.gradient)]
        lines += [f"    for i in range({d}):",
                  "        m = 0.0",
                  f"        for k in range({K}):",
                  "            m += w[k] * G[k, i]",
                  "        acc = 0.0",
                  f"        for k in range({K}):",
                  "            acc += math.sqrt(w[k]) * (G[k, i] - m) * dW[k]",
                  "        dy[i] += scale * acc"]
    else:
        lines += [f"    C = np.empty(({d}, {d}))"]
        lines += [f"    C[{i}, {j}] = {code(noise.covariance[i, j])}" for i in range(d) for j in range(d)]
        lines += ["    C = 0.5 * (C + C.T)"]
        if factor == "ldl":
            lines += [f"    floor = {LDL_FLOOR!r} * np.max(np.diag(C))",
                      f"    L = np.zeros(({d}, {d}))",
                      f"    D = np.zeros({d})",
                      f"    for j in range({d}):",
                      "        Dj = C[j, j]",
                      "        for k in range(j):",
                      "            Dj -= L[j, k] * L[j, k] * D[k]",
                      "        if Dj > floor:",
                      "            D[j] = Dj",
                      f"            for i in range(j + 1, {d}):",
                      "                acc = C[i, j]",
                      "                for k in range(j):",
                      "                    acc -= L[i, k] * L[j, k] * D[k]",
                      "                L[i, j] = acc / Dj",
                      f"    F = np.zeros(({d}, {d}))",
                      f"    for j in range({d}):",
                      "        r = math.sqrt(D[j])",
                      "        F[j, j] = r",
                      f"        for i in range(j + 1, {d}):",
                      "            F[i, j] = L[i, j] * r"]
        elif factor == "cholesky":
            lines += [f"    F = np.linalg.cholesky(C + ({CHOLESKY_JITTER} * np.trace(C) / {d} + 1e-300) * np.eye({d}))"]
        else:
            lines += ["    lam, Q = np.linalg.eigh(C)",
                      f"    F = Q * np.sqrt(np.maximum(lam, 0.0)).reshape(1, {d})"]
        lines += [f"    for i in range({d}):",
                  "        acc = 0.0",
                  f"        for j in range({d}):",
                  "            acc += F[i, j] * dW[j]",
                  "        dy[i] += scale * acc"]
    namespace = {"np": np, "math": math}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from the derived expressions
    return njit(nogil=True)(namespace["increment"])
