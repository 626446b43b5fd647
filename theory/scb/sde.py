"""Minibatch-SGD SDE on the full SCB parameters (papers/scb.md §3.6, option A), in jax.

Time unit: optimiser steps (``SCBConfig.ode_time``); :func:`minibatch_sde` samples it at
``config.ode_times()``, the grid the Trainer logs on.

The same step compiled in numba (:mod:`theory.scb.sde_numba`, :meth:`MinibatchSDE.numba_increment`)
runs with ``simulate.solve_sde(sde, t, backend="numba")`` — about 4x the jax engine with the fast
sampler on 2 cores (``make bench``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .config import SCBConfig, SCBTask, initial_parameters, make_task
from .derive import PAPER
from .population import TaskArrays, observables_from_parameters, preconditioned_flow

__all__ = ["MinibatchSDE", "minibatch_sde"]


@dataclass(frozen=True, eq=False)
class MinibatchSDE:
    """``d theta = drift dt + diffusion dW`` on theta = (V, A) flattened, time in optimiser steps.

    * drift: the preconditioned population flow (exact, spec §3.2-3.3);
    * diffusion: minibatch noise. Its covariance is ``lr^2 Cov_sample(preconditioned g)/B``; the
      covariance is estimated at the current theta from ``mc_samples`` fresh per-sample gradients
      (spec §3.6 option A), and enters as the matrix ``lr * (g_m - mean g)/sqrt((M-1) B)`` driven by
      an M-dimensional Brownian motion, so no covariance matrix or square root is ever formed.
    Float64 throughout.
    """

    task: SCBTask
    eta_V: float
    eta_A: float
    batch: int
    mc_samples: int = 64
    paper: str = PAPER
    name: str = "minibatch_sgd"

    @property
    def dim(self) -> int:
        return self.task.N ** 2 + self.task.T * self.task.N

    @property
    def noise_dim(self) -> int:
        return self.mc_samples

    def initial_state(self) -> np.ndarray:
        V0, A0 = initial_parameters(self.task.config, self.task)
        return np.concatenate([V0.ravel(), A0.ravel()])

    def args(self):
        import jax.numpy as jnp

        t = self.task
        return {
            "P": jnp.asarray(t.P), "mu": jnp.asarray(t.mu), "Qm": jnp.asarray(t.Qm),
            "Sig": jnp.asarray(t.Sigma),
            "lr_V": jnp.asarray(self.eta_V), "lr_A": jnp.asarray(self.eta_A),
            "batch": jnp.asarray(float(self.batch)),
        }

    def _unflatten(self, y):
        N, T_ = self.task.N, self.task.T
        return y[: N * N].reshape(N, N), y[N * N:].reshape(T_, N)

    def drift(self, t, y, args):
        import jax.numpy as jnp

        V, A = self._unflatten(y)
        task = TaskArrays(args["P"], args["mu"], args["Qm"], args["Sig"])
        dV, dA = preconditioned_flow(V, A, task, args["lr_V"], args["lr_A"], xp=jnp)  # spec §3.3
        return jnp.concatenate([dV.ravel(), dA.ravel()])

    def per_sample_gradients(self, y, args, key):
        """(M, dim) preconditioned per-sample gradients at theta (spec §3.2), M = mc_samples.
        Data drawn exactly as spec §1.2 (query outside the context)."""
        import jax
        import jax.numpy as jnp

        N, T_, M = self.task.N, self.task.T, self.mc_samples
        V, A = self._unflatten(y)
        mu, P, Qm = args["mu"], args["P"], args["Qm"]
        kx, kk, ks, ko = jax.random.split(key, 4)
        logmu = jnp.log(mu)
        x = jax.random.categorical(kx, logmu, shape=(M, T_))
        k = jax.random.categorical(kk, logmu, shape=(M,))
        logq = jnp.where(Qm.T[k] > 0, jnp.log(jnp.where(Qm.T[k] > 0, Qm.T[k], 1.0)), -jnp.inf)
        pos = jax.random.categorical(ks, logq, axis=-1)
        xs = jnp.take_along_axis(x, pos[:, None], axis=1)[:, 0]
        logP = jnp.log(jnp.maximum(P.T[xs], 1e-300))
        xo = jax.random.categorical(ko, logP, axis=-1)

        # batched over the M samples; X a via a one-hot contraction over the N token ids
        Xoh = jax.nn.one_hot(x, N, dtype=y.dtype)  # (M, T, N)
        a = A.T[k]  # (M, T): a^(k_m)
        Xa = jnp.einsum("mtn,mt->mn", Xoh, a)
        r = Xa @ V.T - jax.nn.one_hot(xo, N, dtype=y.dtype)  # (M, N)
        gV = r[:, :, None] * Xa[:, None, :] / mu[None, None, :]  # r (X a)^T D^-1
        ga = jnp.take_along_axis(r @ V, x, axis=1) / mu[k][:, None]  # (X^T V^T r) / mu_k, (M, T)
        gA = ga[:, :, None] * jax.nn.one_hot(k, N, dtype=y.dtype)[:, None, :]  # only column k_m
        return jnp.concatenate([args["lr_V"] * gV.reshape(M, -1), args["lr_A"] * gA.reshape(M, -1)], axis=1)

    def diffusion(self, t, y, args, key):
        import jax.numpy as jnp

        G = self.per_sample_gradients(y, args, key)
        G = G - G.mean(0, keepdims=True)
        return (G / jnp.sqrt((self.mc_samples - 1) * args["batch"])).T  # (dim, M)

    def numba_increment(self):
        """``(increment, params)`` for ``simulate.solve_sde(..., backend="numba")``: the same
        step as :meth:`drift` + :meth:`diffusion` (same distribution), compiled
        (:mod:`theory.scb.sde_numba`)."""
        from .sde_numba import increment_kernel

        return increment_kernel(self.task.N, self.task.T), self._numba_params

    @cached_property
    def _numba_params(self) -> tuple:
        """The kernel's constants and alias tables (built once per model: ~50 ms)."""
        from .sde_numba import kernel_params

        return kernel_params(self.task, self.eta_V, self.eta_A, self.batch)

    def state_variables(self, Y: np.ndarray) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
        """Split ``Y`` (..., dim) into named variables with extra dims for the Dataset."""
        N, T_ = self.task.N, self.task.T
        lead = Y.shape[:-1]
        return {
            "V": (("row", "col"), Y[..., : N * N].reshape(*lead, N, N)),
            "A": (("position", "query"), Y[..., N * N:].reshape(*lead, T_, N)),
        }

    def observables(self, Y: np.ndarray) -> dict[str, np.ndarray]:
        N, T_ = self.task.N, self.task.T
        lead = Y.shape[:-1]
        V = Y[..., : N * N].reshape(*lead, N, N)
        A = Y[..., N * N:].reshape(*lead, T_, N)
        return observables_from_parameters(V, A, self.task)


def minibatch_sde(config: SCBConfig, mc_samples: int = 64) -> tuple[MinibatchSDE, np.ndarray]:
    """``(sde, t)`` for `tdyn simulate scb --sde`: minibatch SGD on the full (V, A), sampled at
    ``config.ode_times()``."""
    task = make_task(config)
    return MinibatchSDE(task, config.eta_V, config.eta_A, config.batch, mc_samples), config.ode_times()
