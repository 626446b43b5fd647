"""Small systems with closed-form solutions, shared by the simulate tests."""

import numpy as np
import sympy as sp

from theory.core import ReducedSystem

x, y = sp.symbols("x y", real=True)
k, w = sp.symbols("k w", positive=True)


def oscillator() -> ReducedSystem:
    """Damped rotation: closed form e^{-kt} (cos wt, sin wt) from (1, 0)."""
    return ReducedSystem(name="damped_rotation", paper="test", state=(x, y), parameters=(k, w),
                         rhs=(-k * x - w * y, w * x - k * y), observables={"radius_sq": x**2 + y**2})


class LinearSDE:
    """dy = -y dt + s dW (1-D OU) with a key-consuming diffusion, for the engine's contract tests."""

    paper, name, noise_dim = "test", "ou", 1

    def args(self):
        import jax.numpy as jnp

        return jnp.asarray(0.5)

    def initial_state(self):
        return np.array([1.0])

    def drift(self, t, y, a):
        return -y

    def diffusion(self, t, y, a, key):
        return a * np.ones((1, 1))

    def observables(self, Y):
        return {"y": Y[..., 0]}
