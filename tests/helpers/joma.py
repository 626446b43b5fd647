"""JoMA test helpers (imported as ``helpers.joma``): the spec's §2.1 block-flow listing typed
independently of the sympy derivation, random block states, and the packing of a state and its data
into a derived system's ``(y, params)``."""

from __future__ import annotations

import numpy as np


# ---- the spec's §2.1 listing, typed here (independent of the sympy derivation) -------------------
def spec_block_rhs(attention, activation, X, G, V, s, z, temperature=1.0):
    N = X.shape[0]
    E = X * np.exp(z / temperature)
    B = {"linear": X * z, "exp": E, "softmax": E / E.sum(1, keepdims=True)}[attention]
    pre = B @ V.T + s
    dphi = {"linear": np.ones_like(pre), "tanh": 1 - np.tanh(pre) ** 2, "relu": (pre > 0).astype(float)}[activation]
    C = G * dphi / N
    Vdot = C.T @ B
    sdot = C.sum(0)
    Uv = C @ V
    zdot = {"linear": (X * Uv).sum(0), "exp": (B * Uv).sum(0) / temperature,
            "softmax": ((B * Uv).sum(0) - (B * (B * Uv).sum(1, keepdims=True)).sum(0)) / temperature}[attention]
    return Vdot, sdot, zdot


def random_point(rng, Mc, K, N):
    X = rng.dirichlet(np.ones(Mc), size=N)
    G = rng.standard_normal((N, K))
    V = rng.standard_normal((K, Mc)) * 0.7
    s = rng.standard_normal(K) * 0.3
    z = rng.standard_normal(Mc) * 0.5
    return X, G, V, s, z


def pack(X, G, V, s, z, tau, Mc, K, N):
    y = np.concatenate([z, V.ravel(), s])
    params = {f"x_{n + 1}_{l + 1}": X[n, l] for n in range(N) for l in range(Mc)}
    params.update({f"g_{n + 1}_{k + 1}": G[n, k] for n in range(N) for k in range(K)})
    params["tau"] = tau
    params.update({f"bbar_{l + 1}": X.mean(0)[l] for l in range(Mc)})
    return y, params


# ---- the block SDE as it was built by hand before the derived noise (the reference "today's model") ------
class RowCovarianceSDE:
    """The pre-issue-20 JoMA SDE (``theory/joma/sde.py`` until the noise was derived): drift the
    mean over the ``N`` rows of :func:`theory.joma.block_flow`'s per-row flows ``F_n``, diffusion
    ``sqrt(lr/B) (F - mean F)^T / sqrt(N)`` on an ``N``-dimensional Brownian motion. Kept here,
    typed as it was, so the derived SDE can be held against it (same numbers within Monte-Carlo
    error)."""

    paper = "joma"
    name = "block_minibatch_sgd_reference"

    def __init__(self, config):
        from theory.joma import block_initial_state, block_system

        self.config = config
        c = config
        self.system = block_system(c.attention, c.activation, c.Mc, c.K, c.N)
        self._y0 = self.system.state_vector(block_initial_state(config))

    @property
    def noise_dim(self) -> int:
        return self.config.N

    def args(self):
        import math

        import jax.numpy as jnp

        from theory.joma import make_data

        X, G = make_data(self.config)
        return {"X": jnp.asarray(X), "G": jnp.asarray(G), "tau": jnp.asarray(float(self.config.temperature)),
                "scale": jnp.asarray(math.sqrt(self.config.lr / self.config.batch))}

    def initial_state(self):
        return self._y0

    def _flows(self, y, args):
        import jax
        import jax.numpy as jnp

        from theory.joma import block_flow

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
        return {n: np.asarray(Y[..., i]) for i, n in enumerate(self.system.state_names)}


def network_row_flows(attention, activation, X, G, V, s, z, tau=1.0, d=None):
    """``(N, dim)``: minus the gradient of each row's loss ``-G_n . h(x_n)`` of the real network
    (:class:`empirical.joma.model.JomaBlock`, torch autograd) in the reduced coordinates
    ``(z, v_k_l, s_k)`` (``W[:Mc] = V^T``, ``W[Mc] = s``, the embedding's identity block) — the
    per-sample flows, computed without the sympy derivation."""
    import torch

    from empirical.joma.model import JomaBlock

    N, Mc = X.shape
    K = G.shape[1]
    d = d or Mc + 3
    W0 = np.zeros((d, K))
    W0[:Mc] = V.T
    W0[Mc] = s
    rows = []
    for n in range(N):
        net = JomaBlock(W0, z, attention, activation, tau)
        h = net(torch.as_tensor(X[n:n + 1]))
        loss = -(torch.as_tensor(G[n:n + 1]) * h).sum()
        loss.backward()
        gW, gz = -net.W.grad.numpy(), -net.z.grad.numpy()
        rows.append(np.concatenate([gz, gW[:Mc].T.ravel(), gW[Mc]]))
    return np.stack(rows)
