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
