"""SVAG: Stochastic Variance Amplified Gradient (Li, Malladi & Arora 2021, "On the validity of
modeling SGD with stochastic differential equations (SDEs)", NeurIPS 2021, arXiv:2102.12470).

An SGD step ``θ ← θ - η ∇L_γ(θ)`` (``γ`` a minibatch) becomes, for an amplification ``l >= 1``,

    θ ← θ - (η/l) [ c₁ ∇L_γ₁(θ) + c₂ ∇L_γ₂(θ) ],   c₁,₂ = (1 ± sqrt(2l - 1)) / 2,

with ``γ₁, γ₂`` two independent minibatches of the same size, run for ``l`` times as many steps.
``c₁ + c₂ = 1`` keeps the mean gradient; ``c₁² + c₂² = l`` multiplies the gradient-noise covariance
by ``l``, so ``l`` SVAG steps move ``θ`` with the mean and covariance of one SGD step while each
step is ``l`` times smaller. The paper proves SVAG is an order-1 weak approximation of the Itô SDE
``dX = -∇L dt + (η Σ)^{1/2} dW`` (time ``t = η k``), with weak error ``O(1/l)`` at fixed time —
a check of the SDE that does not use our own noise model. ``l = 1`` is plain SGD (``c₂ = 0``).

This module only transforms a step (engine-agnostic: numpy, torch or jax arrays and pytrees of
them); a paper's SVAG runs use it in their own engine. Times: SVAG step ``k`` sits at the system
time ``ode_time(0) + k Δτ / l`` (:meth:`SVAG.step_time`), so SVAG logged every ``l * log_every``
steps lands on ``config.ode_times()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from theory.errors import ConfigError

__all__ = ["SVAG", "svag_coefficients", "svag_combine", "svag_gradient"]


def svag_coefficients(l: float) -> tuple[float, float]:
    """``(c₁, c₂) = ((1 + sqrt(2l - 1))/2, (1 - sqrt(2l - 1))/2)``; :class:`ConfigError` for ``l < 1``."""
    if not l >= 1:
        raise ConfigError("l", f"SVAG's amplification must be >= 1, got {l}")
    r = math.sqrt(2.0 * l - 1.0)
    return (1.0 + r) / 2.0, (1.0 - r) / 2.0


def _tree_map(fn, a, b):
    if isinstance(a, dict):
        return {k: _tree_map(fn, a[k], b[k]) for k in a}
    if isinstance(a, (list, tuple)):
        return type(a)(_tree_map(fn, x, y) for x, y in zip(a, b))
    return fn(a, b)


def svag_combine(g1: Any, g2: Any, l: float) -> Any:
    """``c₁ g₁ + c₂ g₂`` for two independent minibatch gradients (arrays or dict/list/tuple pytrees)."""
    c1, c2 = svag_coefficients(l)
    return _tree_map(lambda x, y: c1 * x + c2 * y, g1, g2)


def svag_gradient(minibatch_gradient: Callable[..., Any], l: float) -> Callable[..., Any]:
    """The SVAG gradient of a minibatch-gradient function: calls ``minibatch_gradient(*args,
    **kwargs)`` twice — each call must draw its own fresh minibatch (e.g. from a generator it is
    passed) — and combines the two with :func:`svag_combine`. ``l = 1`` makes one call."""
    svag_coefficients(l)

    def gradient(*args, **kwargs):
        if l == 1:
            return minibatch_gradient(*args, **kwargs)
        return svag_combine(minibatch_gradient(*args, **kwargs), minibatch_gradient(*args, **kwargs), l)

    return gradient


@dataclass(frozen=True)
class SVAG:
    """The schedule of SVAG with amplification ``l``: learning rate ``lr/l``, ``l`` times the
    steps and the logging interval, ``Δτ/l`` system time per step."""

    l: int

    def __post_init__(self):
        if isinstance(self.l, bool) or int(self.l) != self.l or self.l < 1:
            raise ConfigError("l", f"SVAG's amplification must be an integer >= 1, got {self.l!r}")

    @property
    def coefficients(self) -> tuple[float, float]:
        return svag_coefficients(self.l)

    def lr(self, lr: float) -> float:
        return lr / self.l

    def steps(self, steps: int) -> int:
        return int(steps) * self.l

    def step_time(self, dtau: float) -> float:
        """System time of one SVAG step, ``Δτ/l`` (``Δτ``: :func:`theory.noise.step_time`)."""
        return dtau / self.l

    def log_steps(self, config) -> np.ndarray:
        """The SVAG steps at which to log: ``l * config.log_steps()`` (same system times)."""
        return np.asarray(config.log_steps(), dtype=np.int64) * self.l

    def run(self, minibatch_gradient: Callable[[Any], Any], theta0, config, *, lr: float | None = None) -> np.ndarray:
        """Plain SGD with SVAG's schedule on ``config``: ``θ ← θ - (lr/l) ĝ(θ)`` for ``l * steps``
        steps, ``ĝ`` = :func:`svag_gradient` of ``minibatch_gradient(θ)`` (each call draws a fresh
        minibatch), ``lr`` = ``config.lr`` unless given. Returns the states at
        :meth:`log_steps`, stacked on a new axis 1 (numpy; ``θ`` of shape ``(runs, ...)`` gives
        ``(runs, len(log_steps), ...)``). For toys and engines without an optimiser of their own."""
        grad = svag_gradient(minibatch_gradient, self.l)
        eta = self.lr(float(config.lr if lr is None else lr))
        log_at = set(self.log_steps(config).tolist())
        theta = np.array(theta0, dtype=float)
        out = [theta.copy()]
        for k in range(1, self.steps(config.steps) + 1):
            theta = theta - eta * grad(theta)
            if k in log_at:
                out.append(theta.copy())
        return np.stack(out, axis=1)
