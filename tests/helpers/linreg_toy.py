"""A linear-regression toy with closed forms, for the SDE framework (imported as ``helpers.linreg_toy``).

Per-sample loss ``ℓ(w; x, ε) = (w·x - y)²/2``, ``y = w*·x + ε``, features ``x ~ N(0, I₂)``, label
noise ``ε ~ N(0, s²)``. Population loss ``(|w - w*|² + s²)/2``; gradient flow in time
``t = lr·step`` (JoMA's unit: the flow carries no learning rate), ``dw/dt = -(w - w*)``. Closed
forms (Isserlis): ``Cov_x[g] = (|u|² + s²) I + u uᵀ``, ``u = w - w*``; the second moment
``m = E|u|²`` obeys, per SGD step (batch ``B``, learning rate ``η``),
``m ← (1 - 2η + η²(1 + 3/B)) m + 2η² s²/B`` and, under the SDE with ``Δτ = η``,
``dm/dt = -2m + (η/B)(3m + 2s²)``. SVAG with ``l`` replaces ``η`` by ``η/l`` and the noise
covariance by ``l`` times itself (:mod:`empirical.svag`).

:func:`sgd` is the real SGD of the toy, written independently of the sympy derivation (the
gradient ``(w·x - y) x`` typed by hand), vectorised over runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from empirical.svag import SVAG
from theory import ConfigError, ParamsBase, Problem, ReducedSystem
from theory.noise import Moments, MonteCarlo, derive_noise, expectation

w1, w2, ws1, ws2, s = sp.symbols("w1 w2 wstar1 wstar2 s", real=True)
x1, x2, eps = sp.symbols("x1 x2 epsilon", real=True)
STATE, PARAMETERS, SAMPLES = (w1, w2), (ws1, ws2, s), (x1, x2, eps)


@dataclass(frozen=True)
class LinRegConfig(ParamsBase):
    """Time unit: ``lr·step`` (so ``Δτ = lr``)."""

    lr: float = 0.2
    batch: int = 2
    steps: int = 10
    log_every: int = 1
    wstar1: float = 1.0
    wstar2: float = -0.5
    noise: float = 0.7
    w1_0: float = 0.0
    w2_0: float = 0.0
    seed: int = 0

    def validate(self):
        if self.lr <= 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        if self.batch < 1:
            raise ConfigError("batch", f"must be >= 1, got {self.batch}")

    def ode_time(self, step):
        return self.lr * float(step)

    @property
    def params(self) -> dict[str, float]:
        return {"wstar1": self.wstar1, "wstar2": self.wstar2, "s": self.noise}

    @property
    def y0(self) -> dict[str, float]:
        return {"w1": self.w1_0, "w2": self.w2_0}


def per_sample_loss() -> sp.Expr:
    return (w1 * x1 + w2 * x2 - (ws1 * x1 + ws2 * x2 + eps)) ** 2 / 2


def gaussian_data() -> Moments:
    return Moments.gaussian(SAMPLES, cov=[1, 1, s**2])


def sample(key, n, p):
    """The data as a jax sampler (for the Monte-Carlo path): ``p = (wstar1, wstar2, s)``."""
    import jax

    z = jax.random.normal(key, (3, n), dtype="float64")
    return {"x1": z[0], "x2": z[1], "epsilon": p[2] * z[2]}


def system(distribution=None, **noise_options) -> ReducedSystem:
    """The toy's flow derived from the population loss ``E ℓ``, with its noise (exact by default;
    ``distribution=MonteCarlo(...)`` for the sampled path)."""
    dist = gaussian_data() if distribution is None else distribution
    loss = sp.simplify(expectation(per_sample_loss(), gaussian_data()))
    rhs = tuple(sp.simplify(-sp.diff(loss, w)) for w in STATE)
    noise = derive_noise(per_sample_loss(), STATE, SAMPLES, dist, description="x ~ N(0, I), eps ~ N(0, s^2)",
                         **noise_options)
    return ReducedSystem(name="linreg", paper="toy", state=STATE, parameters=PARAMETERS, rhs=rhs,
                         observables={"err2": (w1 - ws1) ** 2 + (w2 - ws2) ** 2}, noise=noise,
                         spec="tests/helpers/linreg_toy.py")


def monte_carlo_system() -> ReducedSystem:
    return system(MonteCarlo(SAMPLES, sample, "helpers.linreg_toy:sample", "x ~ N(0, I), eps ~ N(0, s^2)"))


def problem(config: LinRegConfig, sys: ReducedSystem | None = None) -> Problem:
    return Problem(sys or system(), config.params, config.y0, config.ode_times(), config=config)


def sgd(config: LinRegConfig, runs: int, *, seed: int = 0, l: int = 1) -> np.ndarray:
    """Real minibatch SGD (or SVAG with amplification ``l``) of the toy: ``(runs, len(log_steps), 2)``
    weights at the config's logged times."""
    rng = np.random.default_rng(seed)
    wstar, B = np.array([config.wstar1, config.wstar2]), config.batch

    def minibatch_gradient(W):
        X = rng.standard_normal((runs, B, 2))
        y = X @ wstar + config.noise * rng.standard_normal((runs, B))
        r = np.einsum("rbi,ri->rb", X, W) - y
        return np.einsum("rb,rbi->ri", r, X) / B

    return SVAG(l).run(minibatch_gradient, np.tile([config.w1_0, config.w2_0], (runs, 1)), config)


def second_moment_sgd(config: LinRegConfig, l: int = 1) -> np.ndarray:
    """Exact ``E|w - w*|²`` of SVAG(l)/SGD at the logged steps (closed-form recursion)."""
    eta, B, s2 = config.lr / l, config.batch, config.noise**2
    m = (config.w1_0 - config.wstar1) ** 2 + (config.w2_0 - config.wstar2) ** 2
    a, c = 1 - 2 * eta + eta**2 * (1 + 3 * l / B), 2 * eta**2 * l * s2 / B
    out, log_at = [m], set((np.asarray(config.log_steps()) * l).tolist())
    for k in range(1, config.steps * l + 1):
        m = a * m + c
        if k in log_at:
            out.append(m)
    return np.array(out)


def second_moment_sde(config: LinRegConfig) -> np.ndarray:
    """Exact ``E|w - w*|²`` under the SDE at ``config.ode_times()`` (its linear moment ODE)."""
    eta, B, s2 = config.lr, config.batch, config.noise**2
    m0 = (config.w1_0 - config.wstar1) ** 2 + (config.w2_0 - config.wstar2) ** 2
    rate = -2 + 3 * eta / B
    inf = -(2 * eta * s2 / B) / rate
    return inf + (m0 - inf) * np.exp(rate * config.ode_times())
