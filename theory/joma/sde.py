"""Minibatch-SGD noise of the JoMA block as an SDE (spec §2.7 — this project's extension, not in
the paper). The drift and the per-sample flows are :func:`.population.block_flow` with
``xp=jax.numpy`` (the formula the tests hold against the sympy derivation)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core import ReducedSystem
from .config import PAPER, JomaConfig
from .derive import block_system
from .population import block_flow, block_initial_state, block_parameters, make_data
from .problem import check_block_variant

__all__ = ["BlockMinibatchSDE", "minibatch_sde"]


@dataclass(frozen=True, eq=False)
class BlockMinibatchSDE:
    """``d theta = f(theta) dt + sqrt(lr/B) Sigma(theta)^{1/2} dW`` in ODE time ``t = lr * step``.

    ``f`` is the block flow (mean over the ``N`` rows of the derived per-sample flow); ``Sigma`` is
    the covariance of the per-sample flows over the rows (minibatches of ``B`` rows drawn with
    replacement). ``Sigma^{1/2} dW`` is realised as ``(F_n - mean F)^T / sqrt(N)`` driven by an
    ``N``-dimensional Brownian motion, so no matrix square root is formed. Float64."""

    config: JomaConfig
    paper: str = PAPER
    name: str = "block_minibatch_sgd"

    def _structure(self):
        c = self.config
        return (c.attention, c.activation, c.Mc, c.K, c.N)

    # Equal (and hashed) by structure: data, learning rate and batch travel in ``args``, so the
    # compiled ensemble solver is reused across them (simulate caches it per SDE object).
    def __eq__(self, other):
        return isinstance(other, BlockMinibatchSDE) and self._structure() == other._structure()

    def __hash__(self):
        return hash(("BlockMinibatchSDE", self._structure()))

    @property
    def noise_dim(self) -> int:
        return self.config.N

    @property
    def system(self) -> ReducedSystem:
        c = self.config
        return block_system(c.attention, c.activation, c.Mc, c.K, c.N)

    def args(self):
        import jax.numpy as jnp

        X, G = make_data(self.config)
        return {"X": jnp.asarray(X), "G": jnp.asarray(G), "tau": jnp.asarray(float(self.config.temperature)),
                "scale": jnp.asarray(math.sqrt(self.config.lr / self.config.batch))}

    def initial_state(self) -> np.ndarray:
        return self.system.state_vector(block_initial_state(self.config))

    def _flows(self, y, args):
        """Per-sample flows (N, dim) in state order ``z, v (k-major), s``."""
        import jax
        import jax.numpy as jnp

        c = self.config
        z, V, s = y[:c.Mc], y[c.Mc:c.Mc + c.K * c.Mc].reshape(c.K, c.Mc), y[c.Mc + c.K * c.Mc:]

        def one(x, g):
            Vd, sd, zd = block_flow(c.attention, c.activation, x[None], g[None], V, s, z, args["tau"], xp=jnp)
            return jnp.concatenate([zd, Vd.ravel(), sd])

        return jax.vmap(one)(args["X"], args["G"])

    def drift(self, t, y, args):
        return self._flows(y, args).mean(0)

    def diffusion(self, t, y, args, key):
        import jax.numpy as jnp

        F = self._flows(y, args)
        return args["scale"] * (F - F.mean(0)).T / jnp.sqrt(F.shape[0])

    def observables(self, Y):
        sysm = self.system
        p = sysm.parameter_vector(block_parameters(self.config))
        out = {n: np.asarray(Y[..., i]) for i, n in enumerate(sysm.state_names)}
        out.update(sysm.observables_numpy()(Y, p))
        return out



def minibatch_sde(config: JomaConfig):
    """``(sde, t)`` for `tdyn simulate joma --sde`: ``t = config.ode_times()`` (spec §2.7)."""
    check_block_variant(config, "minibatch SDE")
    config = config.replace(variant="fixed") if config.variant != "fixed" else config
    return BlockMinibatchSDE(config), config.ode_times()
