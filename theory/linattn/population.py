"""linattn population quantities in numpy, written from the model (docs/papers/linattn.md §2-§3), not from sympy:
the derivation is checked against them.

Shapes: ``lam`` ``(D,)``; ``Gamma`` ``(..., D, D)``; merged parameters ``v`` ``(H,)``, ``U`` ``(H, D, D)``;
separate ``v`` ``(H,)``, ``K``, ``Q`` ``(H, R, D)``. Loss in the units of ``(1/2) E[(y_q - ŷ_q)^2]``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["context_moment", "loss_of_gamma", "grad_of_gamma", "gamma_merged", "gamma_separate",
           "merged_gradient", "separate_gradient", "aligned_parameters", "diagonal_state", "optimum",
           "plateau_levels"]


def context_moment(lam, N):
    """``M = D E[c c^T] = (1 + 1/N) Λ^2 + (tr Λ / N) Λ`` for ``c = (1/N) sum_n y_n x_n`` (fourth Gaussian
    moments: ``E[(w^T x)^2 x x^T | w] = (w^T Λ w) Λ + 2 Λ w w^T Λ``), shape ``(D, D)``."""
    lam = np.asarray(lam, dtype=np.float64)
    return np.diag((1 + 1 / N) * lam ** 2 + lam.sum() / N * lam)


def loss_of_gamma(Gamma, lam, N):
    """``L(Γ) = (1/(2D)) [tr Λ - 2 tr(Γ Λ^2) + tr(Γ Λ Γ^T M)]`` (``E[w w^T] = I/D``, ``E[c w^T] = Λ/D``)."""
    lam = np.asarray(lam, dtype=np.float64)
    D, Lam, M = lam.size, np.diag(lam), context_moment(lam, N)
    G = np.asarray(Gamma, dtype=np.float64)
    quad = np.einsum("...ij,jk,...lk,li->...", G, Lam, G, M)
    return (lam.sum() - 2 * np.einsum("...ij,ji->...", G, Lam @ Lam) + quad) / (2 * D)


def grad_of_gamma(Gamma, lam, N):
    """``∂L/∂Γ = (1/D) (M Γ Λ - Λ^2)``."""
    lam = np.asarray(lam, dtype=np.float64)
    D, Lam, M = lam.size, np.diag(lam), context_moment(lam, N)
    return (M @ np.asarray(Gamma, dtype=np.float64) @ Lam - Lam @ Lam) / D


def gamma_merged(v, U):
    """``Γ = sum_h v_h U_h``."""
    return np.einsum("h,hij->ij", np.asarray(v, dtype=np.float64), np.asarray(U, dtype=np.float64))


def gamma_separate(v, K, Q):
    """``Γ = sum_h v_h K_h^T Q_h``."""
    return np.einsum("h,hri,hrj->ij", *(np.asarray(a, dtype=np.float64) for a in (v, K, Q)))


def merged_gradient(v, U, lam, N):
    """``(∂L/∂v_h, ∂L/∂U_h) = (<G, U_h>, v_h G)`` with ``G = ∂L/∂Γ``."""
    G = grad_of_gamma(gamma_merged(v, U), lam, N)
    return np.einsum("ij,hij->h", G, U), np.einsum("h,ij->hij", v, G)


def separate_gradient(v, K, Q, lam, N):
    """``(∂L/∂v_h, ∂L/∂K_h, ∂L/∂Q_h) = (<G, K_h^T Q_h>, v_h Q_h G^T, v_h K_h G)``."""
    G = grad_of_gamma(gamma_separate(v, K, Q), lam, N)
    dv = np.einsum("ij,hri,hrj->h", G, K, Q)
    return dv, np.einsum("h,hrj,ij->hri", v, Q, G), np.einsum("h,hri,ij->hrj", v, K, G)


def aligned_parameters(config):
    """The aligned initialisation of ``config`` (spec §5): merged ``(v, U)`` with ``U_h = init I``,
    ``v_h = sqrt(D) init``; separate ``(v, K, Q)`` with ``v_h = init``, row ``r`` of head ``h`` equal to
    ``init e_i``, ``i = (h R + r) mod D``."""
    D, H, s = config.D, config.H, float(config.init)
    if config.variant == "merged":
        return np.full(H, np.sqrt(D) * s), np.broadcast_to(s * np.eye(D), (H, D, D)).copy()
    R = config.R
    K = np.zeros((H, R, D))
    for h in range(H):
        for r in range(R):
            K[h, r, (h * R + r) % D] = s
    return np.full(H, s), K, K.copy()


def diagonal_state(config, params) -> np.ndarray:
    """The reduced state (order of ``derive.merged_system`` / ``separate_system``) of parameters on the
    diagonal set: merged ``(v_h, u_h1..u_hD)`` per head; separate ``(v_h, a_h1..a_hR, b_h1..b_hR)``."""
    if config.variant == "merged":
        v, U = params
        return np.concatenate([np.r_[v[h], np.diagonal(U[h])] for h in range(config.H)])
    v, K, Q = params
    R, D = config.R, config.D
    rows = []
    for h in range(config.H):
        idx = [(h * R + r) % D for r in range(R)]
        rows.append(np.r_[v[h], K[h, range(R), idx], Q[h, range(R), idx]])
    return np.concatenate(rows)


def optimum(lam, N):
    """``γ_i* = λ_i / M_i``."""
    lam = np.asarray(lam, dtype=np.float64)
    return lam / np.diagonal(context_moment(lam, N))


def plateau_levels(lam, N):
    """``L_k``, ``k = 0..D``: the first ``k`` components at their optimum, the rest at zero."""
    lam = np.asarray(lam, dtype=np.float64)
    D, opt = lam.size, optimum(lam, N)
    return np.array([loss_of_gamma(np.diag(np.r_[opt[:k], np.zeros(D - k)]), lam, N) for k in range(D + 1)])
