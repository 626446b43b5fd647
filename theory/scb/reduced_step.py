"""One step's drift and noise of the reduced SCB SDE, written out per component (small N).

The same formulas as :func:`theory.scb.reduced_sde._drift` and
:func:`theory.scb.reduced_sde.projected_per_sample` (spec §3.2-3.3, §3.6), with every sum over
the N tokens and the M samples unrolled into scalar arithmetic. Called under ``jax.vmap`` over
paths, each scalar becomes a (paths,) vector and XLA fuses the whole step into a few
vectorised loops — instead of dozens of tiny (paths, M, N) kernels with reductions over N = 3
(4-5x faster on CPU). Used for N <= :data:`UNROLL_MAX_N`; the array version serves larger N.
"""

from __future__ import annotations

__all__ = ["UNROLL_MAX_N", "reduced_terms_unrolled"]

#: largest vocabulary for which the step is unrolled (the graph grows as N^2 M)
UNROLL_MAX_N = 8


def _drift_list(z, om, xi, eta, EV, Ev, Ea, c, N):
    """Reduced drift (reduced_sde module docstring) as a list of scalars."""
    mu, rho, T, K, m2, lV, lA = c["mu"], c["rho"], c["T"], c["K"], c["m2"], c["lr_V"], c["lr_A"]
    s = [T * xi[i] + eta[i] for i in range(N)]
    n = [T * xi[i] ** 2 + 2 * xi[i] * eta[i] + rho[i] * eta[i] ** 2 + Ea[i] for i in range(N)]
    mn = sum(mu[i] * n[i] for i in range(N))
    mc = sum(mu[i] * (xi[i] + rho[i] * eta[i]) for i in range(N))
    S1 = sum(mu[i] * s[i] for i in range(N))
    S2 = sum(mu[i] * s[i] ** 2 for i in range(N))
    vv, vp, v2, mv = K * z * z + EV, K * z, m2 * om * om + Ev, m2 * om
    return ([-lV * (mn * z - mc), -lV * (S2 * om - S1)]
            + [-lA * (vv * xi[i] + s[i] * v2 - mv) for i in range(N)]
            + [-lA * (vv * eta[i] - vp) for i in range(N)]
            + [-2 * lV * mn * EV, -2 * lV * S2 * Ev] + [-2 * lA * vv * Ea[i] for i in range(N)])


def _per_sample(z, om, xi, eta, F, c, N):
    """Projected per-sample gradient of one sample with features ``F`` (4N,): (koh, b, cnt, yoh).
    Returns (g_zeta, g_omega, g_xi, g_eta, off_R, off_v, off_a) as scalars (g_xi, g_eta, off_a at
    the sample's query k; the caller spreads them with koh)."""
    mu, rho, Pt, T, K, m2, lV, lA = (c["mu"], c["rho"], c["Pt"], c["T"], c["K"], c["m2"], c["lr_V"],
                                     c["lr_A"])
    inv_mu, iK, im2 = [1.0 / v for v in mu], 1.0 / K, 1.0 / m2  # reciprocals: no divisions per path
    koh, b, cnt, yoh = F[:N], F[N:2 * N], F[2 * N:3 * N], F[3 * N:]
    xk = sum(koh[i] * xi[i] for i in range(N))
    ek = sum(koh[i] * eta[i] for i in range(N))
    rk = sum(koh[i] * rho[i] for i in range(N))
    inv_muk = sum(koh[i] * inv_mu[i] for i in range(N))
    inv_det = sum(koh[i] * (1.0 / (T * rho[i] - 1.0)) for i in range(N))
    h = [xk * cnt[i] + ek * b[i] for i in range(N)]
    s = T * xk + ek
    Pth = [sum(Pt[i][j] * h[j] for j in range(N)) for i in range(N)]
    r = [z * Pth[i] + om * s * mu[i] - yoh[i] for i in range(N)]
    r, Pth, h, s = _materialise((r, Pth, h, s), c["lr_V"])
    mr = sum(mu[i] * r[i] for i in range(N))
    rr = sum(r[i] * r[i] for i in range(N))
    g_zeta = lV * iK * sum(Pth[i] * r[i] for i in range(N))
    g_omega = lV * im2 * s * mr
    off_v = lV * lV * s * s * (rr - mr * mr * im2)
    off_R = lV * lV * rr * (sum(h[i] * h[i] * inv_mu[i] for i in range(N)) - s * s) - K * g_zeta * g_zeta
    w = _materialise([z * sum(Pt[i][j] * r[i] for i in range(N)) + om * mr for j in range(N)], c["lr_V"])  # V^T r
    scale = lA * inv_muk
    i1 = scale * sum(w[j] * cnt[j] for j in range(N))
    iq = scale * sum(w[j] * b[j] for j in range(N))
    nn = scale * scale * sum(w[j] * w[j] * cnt[j] for j in range(N))
    g_xi = (rk * i1 - iq) * inv_det
    g_eta = (T * iq - i1) * inv_det
    off_a = nn - (T * g_xi * g_xi + 2 * g_xi * g_eta + rk * g_eta * g_eta)
    return _materialise((g_zeta, g_omega, g_xi, g_eta, off_R, off_v, off_a), c["lr_V"])


def _materialise(x, positive):
    """``x`` computed once: XLA's CPU fusion would otherwise recompute the whole shared chain
    inside every consumer's kernel (~10x the arithmetic; ``lax.optimization_barrier`` is expanded
    away before fusion on CPU). A conditional on an unbatched runtime value (``positive > 0``, a
    learning rate, always true) is a boundary fusion cannot cross; its other branch is never taken."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten(x)
    out = jax.lax.cond(positive > 0, lambda v: v, lambda v: [u * 0.0 for u in v], leaves)
    return jax.tree_util.tree_unflatten(tree, out)


def reduced_terms_unrolled(y, F, c, N: int, M: int):
    """``(f (dim,), g (dim, M))`` of one path's step: ``y`` the reduced state (4 + 3N,), ``F``
    (M, 4N) the M samples' features, ``c`` the constants (``mu``, ``rho``, ``Pt`` as nested
    Python floats; ``T``, ``K``, ``m2`` floats; ``lr_V``, ``lr_A``, ``batch`` scalars). Same
    definition as ``ReducedMinibatchSDE.drift_and_diffusion``."""
    import jax.numpy as jnp

    z, om = y[0], y[1]
    xi, eta = [y[2 + i] for i in range(N)], [y[2 + N + i] for i in range(N)]
    EV, Ev, Ea = y[2 + 2 * N], y[3 + 2 * N], [y[4 + 2 * N + i] for i in range(N)]
    f = _drift_list(z, om, xi, eta, EV, Ev, Ea, c, N)
    mean = [-v for v in _drift_list(z, om, xi, eta, 0.0, 0.0, [0.0] * N, c, N)[: 2 + 2 * N]]  # E g on the manifold
    inv_norm = 1.0 / jnp.sqrt(M * c["batch"])
    # all M samples at once: every per-sample scalar is an (M,) vector
    koh = [F[:, i] for i in range(N)]
    gz, go, gx, ge, oR, ov, oa = _per_sample(z, om, xi, eta, [F[:, j] for j in range(4 * N)], c, N)
    g = [gz, go] + [gx * koh[i] for i in range(N)] + [ge * koh[i] for i in range(N)]
    zero = jnp.zeros_like(gz)
    D = jnp.stack([(mean[i] - g[i]) * inv_norm for i in range(2 + 2 * N)] + [zero] * (2 + N))  # (dim, M)
    off = [oR, ov] + [oa * koh[i] for i in range(N)]
    inv_mb = 1.0 / (M * c["batch"])
    f = f[: 2 + 2 * N] + [f[2 + 2 * N + i] + off[i].sum() * inv_mb for i in range(2 + N)]
    return jnp.stack(f), D
