"""SCB's update rule, optax style (docs/papers/scb.md §2 pseudo-code, Decisions 4-7): pure functions of
arrays, ``xp`` = numpy or torch.

    state = init(params, xp=torch)
    params, state = update(grads, state, params, hyper=hyper(config, task.T), mu=mu,
                           overlap=target_overlap(Qm), xp=torch)

``params = (V, A)``: ``V`` (..., N, N), ``A`` (..., T, N) with column k = a^(k); ``grads`` the same
shapes (batch-mean gradients of the squared loss, spec §3.2). A leading axis holds R runs stepped
at once (the l1 study); every :class:`Hyper` field may then be an (R,) array, one value per run.
One step:

1. gradient step (:func:`descend`): ``V <- V - lr_V G_V D^{-1}``, ``a_k <- a_k - lr_A G_{a_k}/mu_k``
   with ``precondition`` (Decision 4), plain SGD without;
2. the l1 switch (:func:`switch_on`, Decision 7): the prox acts, for good, once
   ``mean_k <a_k, q_k> T >= lam_switch`` (preconditioned runs with ``lam > 0`` only);
3. the prox (:func:`prox`): soft-threshold the attention at ``lr_A lam`` (mu_k-weighted penalty,
   Decision 5; the operator is :func:`theory.scb.soft_threshold`);
4. with ``project``, the projection ``a_k <- a_k + (1 - 1^T a_k)/T`` (Decision 6) after the prox
   (spec §2 pseudo-code; ``normalise="step"``) or, with ``project_before_prox``, between 1 and 2
   (``normalise="step_before_prox"``, the l1 claims' method: the prox then still sets exact zeros).

The arithmetic is fixed: ``x - (lr g) / mu`` — the same as ``theory.scb.preconditioned_flow``, so a
population step of this rule is the theory's discrete map ``V + dV`` bit for bit (tested).

Engines: :mod:`.experiment` and :mod:`.l1` call :func:`update`; :mod:`.fast` calls it in its torch
engine, and in its numba engine uses :func:`descend` for ``V``, :func:`switch_on` and
:func:`threshold` around the kernels of :mod:`.kernels` (tested equal to :func:`update`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from theory.scb import SCBConfig, soft_threshold

__all__ = ["Hyper", "State", "hyper", "init", "update", "descend", "switch_on", "threshold", "prox", "project",
           "target_overlap"]


class Hyper(NamedTuple):
    """Hyper-parameters of one step: numbers, or (R,) arrays (one value per run)."""

    lr_V: Any  #: step size of V
    lr_A: Any  #: step size of the attention (the softmax variant's logits: eta_A T^power)
    precondition: Any = True  #: V D^{-1} and a_k / mu_k (Decision 4); False: plain SGD
    lam: Any = 0.0  #: l1 strength; the prox threshold is lr_A * lam (Decision 5)
    lam_switch: float = 2.0  #: the prox switches on once mean_k <a_k, q_k> T >= lam_switch (Decision 7)
    project: Any = False  #: per-step projection 1^T a_k = 1 (Decision 6)
    project_before_prox: bool = False  #: where the projection goes (module docstring)


class State(NamedTuple):
    """The rule's state: whether the l1 prox has switched on (a bool, or (R,) bools)."""

    lam_on: Any


def hyper(config: SCBConfig, T: int) -> Hyper:
    """The :class:`Hyper` of ``config.variant`` (context length ``T``): ``preconditioned``
    (proximal, with the config's l1 and normalisation settings), ``sgd`` (plain SGD) or ``softmax``
    (plain SGD, attention logits at ``eta_A T^softmax_lr_power``, spec §6.1)."""
    variant = config.variant
    if variant == "preconditioned":
        return Hyper(config.eta_V, config.eta_A, True, config.lam, config.lam_switch, config.normalise != "end",
                     project_before_prox=config.normalise == "step_before_prox")
    if variant == "softmax":
        return Hyper(config.eta_V, config.eta_A * float(T) ** config.softmax_lr_power, False)
    return Hyper(config.eta_V, config.eta_A, False)


def init(params, *, xp=np) -> State:
    """The initial state: the prox off (for each of the runs along the leading axis, if any)."""
    V = params[0]
    return State(False if V.ndim == 2 else xp.zeros_like(V[..., 0, 0], dtype=bool))


def _scalar(*values) -> bool:
    return all(isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)) for v in values)


def _per_run(value, x):
    """``value`` broadcast against ``x`` (..., rows, cols): an (R,) array becomes (R, 1, 1)."""
    return value if _scalar(value) else value[..., None, None]


def descend(x, g, lr, precondition, mu, *, xp=np):
    """``x - (lr g) / mu`` (preconditioned: ``V D^{-1}``, ``a_k / mu_k``; ``mu`` (N,) divides the
    last axis) or ``x - lr g`` (plain SGD)."""
    step = _per_run(lr, x) * g
    if _scalar(precondition):
        return x - step / mu if precondition else x - step
    return x - step / xp.where(_per_run(precondition, x), mu, 1.0)


def target_overlap(q) -> Callable:
    """``A -> <a_k, q_k>`` (..., N) for the dense targets ``q`` (T, N) (column k = q^(k))."""
    return lambda A: (A * q).sum(-2)


def switch_on(lam_on, hyper: Hyper, overlap, T: int):
    """Decision 7: ``lam_on`` after this step — on once ``mean_k <a_k, q_k> T >= lam_switch``
    (and for good), for preconditioned runs with ``lam > 0``. ``overlap``: the (..., N) overlaps
    ``<a_k, q_k>`` or a callable returning them (called only while a run may still switch)."""
    if _scalar(hyper.lam, hyper.precondition):
        if lam_on or not (hyper.precondition and hyper.lam > 0):
            return lam_on
        c = overlap() if callable(overlap) else overlap
        return bool(c.mean(-1) * T >= hyper.lam_switch)
    c = overlap() if callable(overlap) else overlap
    return lam_on | (hyper.precondition & (hyper.lam > 0) & (c.mean(-1) * T >= hyper.lam_switch))


def threshold(hyper: Hyper, lam_on):
    """The prox threshold of this step: ``lr_A lam`` where the prox is on, else 0."""
    if _scalar(hyper.lr_A, hyper.lam, lam_on):
        return hyper.lr_A * hyper.lam if lam_on else 0.0
    return hyper.lr_A * hyper.lam * lam_on


def prox(A, thr, *, xp=np):
    """Soft-threshold the attention at ``thr`` (a number, or (R,) per run; 0: nothing to do)."""
    if _scalar(thr):
        return soft_threshold(A, thr, xp=xp) if thr > 0 else A
    return soft_threshold(A, thr[..., None, None], xp=xp)


def project(A, which=True):
    """Decision 6: ``a_k <- a_k + (1 - 1^T a_k)/T`` for the runs ``which`` (True, or (R,) bools)."""
    T = A.shape[-2]
    if _scalar(which):
        return A + (1.0 - A.sum(-2)[..., None, :]) / T if which else A
    return A + _per_run(which, A) * (1.0 - A.sum(-2)[..., None, :]) / T


def update(grads, state: State, params, *, hyper: Hyper, mu, overlap: Callable, xp=np):
    """One step of the rule (module docstring): ``(params, state) -> (new params, new state)``.
    ``mu`` (N,) the stationary distribution; ``overlap(A)`` the (..., N) overlaps ``<a_k, q_k>``
    (:func:`target_overlap`)."""
    (gV, gA), (V, A) = grads, params
    T = A.shape[-2]
    V = descend(V, gV, hyper.lr_V, hyper.precondition, mu, xp=xp)
    A = descend(A, gA, hyper.lr_A, hyper.precondition, mu, xp=xp)
    if hyper.project_before_prox:
        A = project(A, hyper.project)
    lam_on = switch_on(state.lam_on, hyper, lambda: overlap(A), T)
    A = prox(A, threshold(hyper, lam_on), xp=xp)
    if not hyper.project_before_prox:
        A = project(A, hyper.project)
    return (V, A), State(lam_on)
