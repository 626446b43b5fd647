"""Population and per-sample quantities of full parameters, one formula for numpy and jax.

Every function takes ``xp`` (``numpy`` or ``jax.numpy``) so the observables logged from training
(numpy) and the objectives differentiated by ``jax.grad`` (training simulators, the discrete
momentum map) are the same code. Shapes: ``Y`` (..., M_in, M_out), ``Z`` (..., M_in, M_in);
``weights`` (B, M_in) are rows of ``P(.|n)`` (T = inf, docs/papers/scan_snap.md §2.5) or token counts of sampled
sequences (finite T, exact by spec §1.3). Float64 unless the caller passes float32 arrays.
"""

from __future__ import annotations

import numpy as np

from .config import ScanSnapTask

__all__ = ["entropy", "mixture", "objective", "attention_scores", "invariant_spread",
           "observables_from_parameters", "count_vector_objective", "symmetric_y_coordinates"]


def entropy(p, axis: int = -1, xp=np):
    """Entropy of ``p`` normalised along ``axis`` (0 log 0 = 0)."""
    p = p / p.sum(axis, keepdims=True)
    return -(xp.where(p > 0, p * xp.log(xp.where(p > 0, p, 1.0)), 0.0)).sum(axis)


def mixture(weights, zq, xp=np):
    """``X^T b`` in token space: ``w o e^{z} / (w . e^{z})`` (spec §1.3 / Eqn. 5), a softmax over
    tokens with log-weight offsets (``-inf`` where a weight is 0). weights, zq: (..., M_in)."""
    logits = xp.where(weights > 0, zq + xp.log(xp.where(weights > 0, weights, 1.0)), -xp.inf)
    logits = logits - logits.max(-1, keepdims=True)
    e = xp.exp(logits)
    return e / e.sum(-1, keepdims=True)


def objective(Y, Z, weights, n, query, label, xp=np):
    """Batch-mean ``J`` (spec §2.2, Eqn. 2 in (Y, Z)) of samples with context weights ``weights``
    (B, M_in) and classes ``n`` (B,): ``mean_b [w_b[label] - logsumexp(w_b)]``, ``w_b = Y^T
    LN(X^T b)``. With ``weights = P`` and ``n = arange(K)`` it is ``J_inf`` (pi_n = 1/K)."""
    u = mixture(weights, Z[query[n]], xp)
    u = u / xp.sqrt((u * u).sum(-1, keepdims=True))  # LN: l2, no mean subtraction
    w = u @ Y
    wmax = w.max(-1, keepdims=True)
    lse = (wmax + xp.log(xp.exp(w - wmax).sum(-1, keepdims=True)))[..., 0]
    return xp.mean(xp.take_along_axis(w, label[n][:, None], 1)[:, 0] - lse)


def count_vector_objective(Y, Z, counts, n, query, label):
    """:func:`objective` in jax on count vectors ``counts`` (B, M_in) (for ``jax.grad``)."""
    import jax.numpy as jnp

    return objective(Y, Z, counts, n, query, label, xp=jnp)


def attention_scores(task: ScanSnapTask, Z, xp=np):
    """``c_n`` (Eqn. 5) from parameters: (..., K, M_in), normalised over supp(n)."""
    return mixture(xp.asarray(task.P), Z[..., task.query, :], xp)


def invariant_spread(task: ScanSnapTask, Z: np.ndarray, Z0: np.ndarray | None = None, n: int = 0) -> np.ndarray:
    """``max_l I_l / min_l I_l`` over G_DT(n), ``I_l = (1 - e^{-2 dz}) e^{-2 z(0)}/P(l|n)^2``
    (spec §3.4 item 1/4); 1 for the reduced dynamics."""
    q = task.query[n]
    dts = task.dt[n]
    z = Z[..., q, dts]
    z0 = np.zeros_like(z) if Z0 is None else Z0[..., q, dts]
    I = (1 - np.exp(-2 * (z - z0))) * np.exp(-2 * z0) / task.P[n, dts] ** 2
    lo, hi = I.min(-1), I.max(-1)
    with np.errstate(all="ignore"):
        return np.where(np.abs(lo) > 1e-300, hi / np.where(lo == 0, 1.0, lo), 1.0)  # 1 before any move


def symmetric_y_coordinates(task: ScanSnapTask, Y: np.ndarray) -> dict[str, np.ndarray]:
    """Means of ``Y`` (..., M_in, M_out) over the groups of :class:`SymmetricLayout`:
    ``Y_own_j``, ``Y_xlab_j`` (K > 1), ``Y_o_j``, ``Y_c_lab``, ``Y_c_o`` (C > 0). On the symmetric
    subspace each group is constant and the mean is exact; in training it is the natural estimate."""
    K, lab = task.K, task.label
    others = np.setdiff1d(np.arange(task.M_out), lab)
    cross = ~np.eye(K, dtype=bool)
    out = {}
    for j in range(task.dt.shape[1]):
        rows = task.dt[:, j]  # (K,) token dt_j of each class
        block = Y[..., rows, :][..., :, lab]  # (..., K, K): [class n's dt_j, label n']
        out[f"Y_own_{j}"] = np.diagonal(block, axis1=-2, axis2=-1).mean(-1)
        if K > 1:
            out[f"Y_xlab_{j}"] = block[..., cross].mean(-1)
        out[f"Y_o_{j}"] = Y[..., rows, :][..., :, others].mean((-2, -1))
    if task.common.size:
        Yc = Y[..., task.common, :]
        out["Y_c_lab"] = Yc[..., :, lab].mean((-2, -1))
        out["Y_c_o"] = Yc[..., :, others].mean((-2, -1))
    return out


def observables_from_parameters(Y: np.ndarray, Z: np.ndarray, task: ScanSnapTask) -> dict[str, np.ndarray]:
    """Spec §6 observables of full ``Y`` (..., M_in, M_out), ``Z`` (..., M_in, M_in), at T = inf."""
    Y = np.asarray(Y, np.float64)
    Z = np.asarray(Z, np.float64)
    with np.errstate(over="ignore"):
        c = attention_scores(task, Z)
    dt_c = np.take_along_axis(c, np.broadcast_to(task.dt, c.shape[:-1] + (task.dt.shape[1],)), -1)
    f = c / np.linalg.norm(c, axis=-1, keepdims=True)
    logits = np.einsum("...nl,...lk->...nk", f, Y)
    logits = logits - logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    lab = np.take_along_axis(logp, np.broadcast_to(task.label[:, None], logp.shape[:-1] + (1,)), -1)[..., 0]
    ct = Z[..., task.query, :][..., task.common] if task.common.size else np.zeros(Z.shape[:-2] + (task.K, 1))
    return {
        "dt_entropy": entropy(dt_c).mean(-1),
        "support_entropy": entropy(c).mean(-1),
        "population_loss": -lab.mean(-1),
        "correct_prob": np.exp(lab).mean(-1),
        "ct_logit": ct.mean((-2, -1)),
        "invariant_spread": invariant_spread(task, Z),
        "y_rowsum_spread": np.abs(Y.sum(-1)).max(-1),
        "z_rowsum_spread": np.abs(Z.sum(-1)).max(-1),
    }
