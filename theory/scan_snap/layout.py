"""Maps between the derived systems' states and full parameters ``Y`` (M_in, M_out), ``Z``
(M_in, M_in) of the official generator's instance (numpy, float64)."""

from __future__ import annotations

import numpy as np

from .config import ScanSnapTask
from .derive import _z_symbol, symmetric_layout

__all__ = ["embed_symmetric_state", "general_state_vector", "unpack_general_state", "z_rows", "z_state_names"]


def general_state_vector(task: ScanSnapTask, Y: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Full parameters ``Y`` (M_in, M_out), ``Z`` (M_in, M_in) -> the full system's state. The
    shared non-label column is read as the mean of the non-label columns (exact when equal)."""
    rows = task.union_support
    others = np.setdiff1d(np.arange(task.M_out), task.label)
    parts = [Y[rows][:, task.label].T.ravel(), Y[rows][:, others].mean(1)]
    parts += [Z[task.query[np.argmax(task.query_index == m)], task.query_support(m)] for m in range(task.num_last)]
    return np.concatenate(parts)


def unpack_general_state(task: ScanSnapTask, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`general_state_vector` on (..., dim) arrays -> ``Y`` (..., M_in, M_out),
    ``Z`` (..., M_in, M_in) (entries outside the state are 0)."""
    y = np.asarray(y, dtype=np.float64)
    lead = y.shape[:-1]
    rows = task.union_support
    nr, K = rows.size, task.K
    Y = np.zeros(lead + (task.M_in, task.M_out))
    Z = np.zeros(lead + (task.M_in, task.M_in))
    lab = y[..., : K * nr].reshape(lead + (K, nr))
    oth = y[..., K * nr: (K + 1) * nr]
    others = np.setdiff1d(np.arange(task.M_out), task.label)
    for k in range(K):
        Y[..., rows, task.label[k]] = lab[..., k, :]
    Y[..., rows[:, None], others[None, :]] = oth[..., :, None]
    i = (K + 1) * nr
    for m in range(task.num_last):
        sup = task.query_support(m)
        q = task.query[np.argmax(task.query_index == m)]
        Z[..., q, sup] = y[..., i: i + sup.size]
        i += sup.size
    return Y, Z


def z_state_names(task: ScanSnapTask) -> list[str]:
    return [str(_z_symbol(m, int(l))) for m in range(task.num_last) for l in task.query_support(m)]


def embed_symmetric_state(task: ScanSnapTask, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric state (..., dim) -> full ``Y`` (..., M_in, M_out), ``Z`` (..., M_in, M_in)."""
    cfg = task.config
    lay = symmetric_layout(cfg.num_unique_per_next, cfg.num_common > 0, cfg.K > 1)
    y = np.asarray(y, np.float64)
    v = {n: y[..., i] for i, n in enumerate(lay.names)}
    lead = y.shape[:-1]
    Y = np.zeros(lead + (task.M_in, task.M_out))
    Z = np.zeros(lead + (task.M_in, task.M_in))
    others = np.setdiff1d(np.arange(task.M_out), task.label)
    for n in range(task.K):
        for j in range(cfg.num_unique_per_next):
            l = task.dt[n, j]
            for n2 in range(task.K):
                Y[..., l, task.label[n2]] = v[f"Y_own_{j}"] if n2 == n else v[f"Y_xlab_{j}"]
            Y[..., l, others] = v[f"Y_o_{j}"][..., None]
            Z[..., task.query[n], l] = v[f"z_dt_{j}"]
    for c in task.common:
        Y[..., c, task.label] = v["Y_c_lab"][..., None]
        Y[..., c, others] = v["Y_c_o"][..., None]
        for q in np.unique(task.query):
            Z[..., q, c] = v["z_c"]
    return Y, Z


def z_rows(task: ScanSnapTask, Z: np.ndarray) -> np.ndarray:
    """The moving attention logits: ``z[psi(n), supp(n)]`` for every class, (..., K, |supp|)."""
    idx = np.stack([task.support(n) for n in range(task.K)])
    return np.stack([Z[..., task.query[n], idx[n]] for n in range(task.K)], axis=-2)


