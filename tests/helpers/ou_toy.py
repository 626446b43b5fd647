"""An Ornstein–Uhlenbeck toy for SVAG's weak error (imported as ``helpers.ou_toy``).

Per-sample loss ``ℓ(θ; x) = (θ - x)²/2`` with ``x ~ N(μ, σ²)``: time ``t = lr·step``, flow
``dθ/dt = μ - θ``, per-sample ``Cov[g] = σ²`` (additive noise), so the SDE is the OU process
``dθ = (μ - θ) dt + sqrt(lr σ²/B) dW``. SGD, SVAG and the SDE are all Gaussian here (the SDE is exact
in distribution: only the variance differs), with closed forms: per SVAG(l) step
``v ← (1 - lr/l)² v + lr² σ²/(l B)``; under the SDE ``v(t) = (lr σ²/2B)(1 - e^{-2t})`` (from
``θ(0) = μ``). Euler–Maruyama with step ``Δτ/L`` has exactly the variance of SVAG(L).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from empirical.svag import SVAG
from theory import ParamsBase, Problem, ReducedSystem
from theory.noise import Moments, derive_noise, expectation

theta, mu, sigma = sp.symbols("theta mu sigma", real=True)
x = sp.Symbol("x", real=True)


@dataclass(frozen=True)
class OUConfig(ParamsBase):
    """Time unit ``lr·step``."""

    lr: float = 0.6
    batch: int = 1
    steps: int = 8
    log_every: int = 4
    mu: float = 0.0
    sigma: float = 1.0
    theta0: float = 0.0

    def ode_time(self, step):
        return self.lr * float(step)


def system() -> ReducedSystem:
    data = Moments.gaussian((x,), mean=[mu], cov=[sigma**2])
    loss = (theta - x) ** 2 / 2
    flow = sp.simplify(-sp.diff(expectation(loss, data), theta))
    return ReducedSystem(name="ou", paper="toy", state=(theta,), parameters=(mu, sigma), rhs=(flow,),
                         noise=derive_noise(loss, (theta,), (x,), data), spec="tests/helpers/ou_toy.py")


def problem(config: OUConfig) -> Problem:
    return Problem(system(), {"mu": config.mu, "sigma": config.sigma}, {"theta": config.theta0},
                   config.ode_times(), config=config)


def sgd(config: OUConfig, runs: int, *, seed: int = 0, l: int = 1) -> np.ndarray:
    """SGD (``l = 1``) or SVAG(l) of the toy, written directly: ``(runs, len(log_steps))`` θ."""
    rng = np.random.default_rng(seed)

    def minibatch_gradient(th):
        return th - (config.mu + config.sigma * rng.standard_normal((runs, config.batch))).mean(1)

    return SVAG(l).run(minibatch_gradient, np.full(runs, float(config.theta0)), config)


def variance_svag(config: OUConfig, l: int) -> np.ndarray:
    """Exact Var θ of SVAG(l) at the logged times (``θ(0)`` deterministic)."""
    eta, v, out = config.lr / l, 0.0, [0.0]
    log_at = set((np.asarray(config.log_steps()) * l).tolist())
    for k in range(1, config.steps * l + 1):
        v = (1 - eta) ** 2 * v + eta**2 * l * config.sigma**2 / config.batch
        if k in log_at:
            out.append(v)
    return np.array(out)


def variance_sde(config: OUConfig) -> np.ndarray:
    return config.lr * config.sigma**2 / (2 * config.batch) * (1 - np.exp(-2 * config.ode_times()))
