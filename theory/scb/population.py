"""SCB population quantities of the full parameters ``(V, A)`` (docs/papers/scb.md §3.1-3.3, §4).

Independent of the sympy derivation (tests hold one against the other). Every formula takes an
array module ``xp`` (``numpy`` by default, ``jax.numpy`` in the SDE drift), so numpy observables
and the jax drift share one implementation. ``task`` is anything with the arrays ``P`` (N, N),
``mu`` (N,), ``Qm`` (T, N) and ``Sigma`` (N, N) (an :class:`~theory.scb.config.SCBTask`, or
:class:`TaskArrays` of traced jax arrays). Float64.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..core import ReducedSystem
from ..errors import ConfigError
from .config import SCBConfig, SCBTask, initial_parameters

__all__ = ["TaskArrays", "population_loss", "population_gradient", "preconditioned_flow",
           "observables_from_parameters", "soft_threshold", "proximal_map", "system_parameters",
           "initial_state"]


class TaskArrays(NamedTuple):
    """The task's arrays under the names the formulas use (a jax pytree)."""

    P: Any
    mu: Any
    Qm: Any
    Sigma: Any


def population_loss(V, A, task, *, xp=np):
    """Exact population loss (spec §3.1) for ``V`` (..., N, N), ``A`` (..., T, N):
    ``sum_k mu_k [n_k tr(V S V^T)/2 - c_k tr(V S P^T) + rho_k K/2 + |s_k V mu - mu|^2/2] + const``."""
    mu, P, Qm, Sig = task.mu, task.P, task.Qm, task.Sigma
    K = xp.trace(P @ Sig @ P.T)
    m2 = mu @ mu
    n, c, s = (A**2).sum(-2), (A * Qm).sum(-2), A.sum(-2)
    vv = xp.einsum("...ij,jk,...ik->...", V, Sig, V)  # tr(V Sigma V^T)
    vp = xp.einsum("...ij,jk,ik->...", V, Sig, P)  # tr(V Sigma P^T)
    v = V @ mu
    vmu = v @ mu
    vnorm = (v**2).sum(-1)
    rho = (Qm**2).sum(0)
    per_k = 0.5 * n * vv[..., None] - c * vp[..., None] + 0.5 * rho * K + 0.5 * (
        s**2 * vnorm[..., None] - 2 * s * vmu[..., None] + m2)
    return (per_k * mu).sum(-1) + 0.5 * (1 - m2 - K * (mu * rho).sum())


def population_gradient(V, A, task, *, xp=np):
    """Exact ``(grad_V L, grad_A L)`` of the population loss (spec §3.2); ``V`` (N, N), ``A`` (T, N)."""
    mu, P, Qm, Sig = task.mu, task.P, task.Qm, task.Sigma
    n, c, s = (A**2).sum(0), (A * Qm).sum(0), A.sum(0)
    v = V @ mu
    gV = (mu @ n) * V @ Sig - (mu @ c) * P @ Sig + xp.outer((mu * s**2).sum() * v - (mu * s).sum() * mu, mu)
    vv = xp.trace(V @ Sig @ V.T)
    vp = xp.trace(V @ Sig @ P.T)
    gA = mu * (vv * A - vp * Qm + (s * (v @ v) - mu @ v)[None, :])
    return gV, gA


def preconditioned_flow(V, A, task, eta_V_: float, eta_A_: float, *, xp=np):
    """``(dV/dt, dA/dt) = (-eta_V grad_V L D^{-1}, -eta_A grad_{a_k} L / mu_k)`` (spec §3.3)."""
    gV, gA = population_gradient(V, A, task, xp=xp)
    return -eta_V_ * gV / task.mu[None, :], -eta_A_ * gA / task.mu[None, :]


def observables_from_parameters(V, A, task: SCBTask) -> dict[str, np.ndarray]:
    """The §4 observables of full parameters, with the theory's names. Works on leading batch
    axes: ``V`` (..., N, N), ``A`` (..., T, N). Attention observables are plain means over
    queries k."""
    V = np.asarray(V, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    mu, Pt = task.mu, task.P_tilde
    N, T_ = task.N, task.T
    Vt = V - (V @ mu)[..., :, None] * np.ones(N)
    zeta_hat = np.einsum("...ij,ij->...", Vt, Pt) / (Pt**2).sum()
    omega_hat = np.einsum("i,...ij,j->...", mu, V, mu) / task.m2
    on = np.zeros((T_, N), dtype=bool)
    for k in range(N):
        on[task.support[k], k] = True
    Qk = on.sum(0)
    mass_on = (A * on).sum(-2)
    mean_on = mass_on / Qk
    mean_off = np.where(T_ > Qk, (A * ~on).sum(-2) / np.maximum(T_ - Qk, 1), 0.0)
    s = A.sum(-2)
    c = (A * task.Qm).sum(-2)
    n = (A**2).sum(-2)
    colsum = V.sum(-2, keepdims=True)
    dist_V = np.sqrt(((V / colsum - task.P) ** 2).sum((-2, -1))) / np.sqrt((Pt**2).sum())
    dist_A = np.sqrt(((A / s[..., None, :] - task.Qm) ** 2).sum(-2).mean(-1))
    return {
        "value_transition_correlation": zeta_hat,
        "value_mean_scale": omega_hat,
        "attention_offsupport_level": mean_off.mean(-1),
        # beta = (mean on-support - mean off-support) / (mean on-support entry of q_k; = rho for uniform q)
        "attention_target_coefficient": ((mean_on - mean_off) / ((task.Qm * on).sum(0) / Qk)).mean(-1),
        "attention_target_overlap": c.mean(-1),
        "attention_sum": s.mean(-1),
        "attention_sq_norm": n.mean(-1),
        "attention_mass_on_support": mass_on.mean(-1),
        "population_loss": population_loss(V, A, task),
        "value_relative_distance_to_truth": dist_V,
        "attention_distance_to_truth": dist_A,
        "value_off_manifold_residual": np.sqrt(((Vt - zeta_hat[..., None, None] * Pt) ** 2).sum((-2, -1))),
    }


def soft_threshold(x, thr, *, xp=np):
    """The l1 proximal operator ``sign(x) max(|x| - thr, 0)`` (``xp``: numpy or torch; ``thr`` a
    number or an array broadcasting against ``x``). The one prox of SCB: the reduced map
    (:func:`proximal_map`) and the training update rule (``empirical.scb.update``) both use it."""
    return xp.sign(x) * xp.clip(xp.abs(x) - thr, 0.0, None)


def proximal_map(system: ReducedSystem):
    """The discrete preconditioned proximal step of an l1 system (spec §2, §3.3):
    ``y <- y + f(y)`` (Euler step of size 1: learning rates are inside ``f``), then soft-threshold
    every attention coordinate (u, w) at ``eta_A * lambda``. Returns ``step(y, p, lam) -> y``."""
    if not system.name.startswith("l1"):
        raise ConfigError("system", "proximal_map needs an l1 system (l1_symmetric or l1_general)")
    f = system.to_numpy()
    i_eta_A = system.parameter_names.index("eta_A")
    att = np.array([n not in ("zeta", "omega") for n in system.state_names])

    def step(y, p, lam_value):
        y_new = np.asarray(y, float) + f(0.0, y, p)
        y_new[att] = soft_threshold(y_new[att], p[i_eta_A] * lam_value)
        return y_new

    return step


# ------------------------------------------------------------------------------------------------
# Inputs of the symmetric system for a task
# ------------------------------------------------------------------------------------------------
def system_parameters(config: SCBConfig, task: SCBTask | None = None) -> dict[str, float]:
    """Values of the symmetric system's parameters for a task."""
    from .config import make_task

    task = task or make_task(config)
    return {"T": float(task.T), "rho": float(task.rho.mean()), "K": task.K, "m2": task.m2,
            "eta_V": float(config.eta_V), "eta_A": float(config.eta_A)}


def initial_state(config: SCBConfig, task: SCBTask | None = None, init=None) -> dict[str, float]:
    """Reduced coordinates of the initial parameters: ``a = 1/T``, ``V = mu 1^T`` (spec §2) give
    zeta = 0, omega = 1, xi = 1/T, beta = 0. ``init=(V0, A0)`` (e.g. a transfer start) or
    ``config.init="uniform"`` (``V = 11^T/N``) start off the manifold; they are projected."""
    from .config import make_task

    task = task or make_task(config)
    V0, A0 = init if init is not None else initial_parameters(config, task)
    obs = observables_from_parameters(V0, A0, task)
    return {"zeta": float(obs["value_transition_correlation"]), "omega": float(obs["value_mean_scale"]),
            "xi": float(obs["attention_offsupport_level"]), "beta": float(obs["attention_target_coefficient"])}
