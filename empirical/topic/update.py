"""The topic paper's update rule, optax style: :func:`init` and :func:`update` are pure functions
of mappings ``name -> array`` (parameters, gradients, state), written once for any array module
``xp`` (``numpy`` or ``torch``).

The official code's optimisers (docs/papers/topic.md §2.2), picked by ``config.optimizer`` with step
size ``config.lr`` (``config.kq_lr_ratio * config.lr`` for ``W_K`` and ``W_Q``: the two-stage
map's learning-rate ratio, :func:`learning_rates`):

* ``"sgd"`` — plain SGD, no momentum: ``p <- p - lr g``;
* ``"adam"`` — Adam (the code's AdamW with ``weight_decay = 0``), betas :data:`ADAM_BETAS`, eps
  :data:`ADAM_EPS`: ``m <- lerp(m, g, 1 - b1)``, ``v <- b2 v + (1 - b2) g^2``,
  ``p <- p - lr/(1 - b1^t) * m / (sqrt(v)/sqrt(1 - b2^t) + eps)``: the shared
  :func:`empirical.optim.adam` with one rate per parameter.

The weight decay ``lam ||W_V||_F^2`` is a term of the loss (gradient-carrying, spec §8 Decision 8),
not part of the update.

With ``xp=torch`` every operation is the kernel ``torch.optim`` uses in its single-tensor path
(``add`` with ``alpha``, ``lerp``, ``addcmul``, ``addcdiv``; fused multiply-adds on CPUs that have
them), so a run is bit for bit the one ``torch.optim.SGD`` / ``torch.optim.Adam`` would give on
CPU. ``xp=numpy`` writes the same formulas with plain arithmetic (equal to rounding).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from theory.topic import TopicConfig

from ..optim import ADAM_BETAS, ADAM_EPS, adam  # torch's and the official code's defaults

__all__ = ["ADAM_BETAS", "ADAM_EPS", "KQ_PARAMETERS", "learning_rates", "init", "update"]

#: the parameters stepped with ``kq_lr_ratio * lr``
KQ_PARAMETERS = ("W_K", "W_Q")


def learning_rates(names, config: TopicConfig) -> dict[str, float]:
    """Step size of each parameter: ``lr``, times ``kq_lr_ratio`` for :data:`KQ_PARAMETERS`."""
    return {k: config.lr * (config.kq_lr_ratio if k in KQ_PARAMETERS else 1.0) for k in names}


def _is_torch(xp) -> bool:
    return getattr(xp, "__name__", "") == "torch"


def _add_scaled(x, alpha: float, y, xp):
    """``x + alpha * y``."""
    return xp.add(x, y, alpha=alpha) if _is_torch(xp) else x + alpha * y


def init(params: Mapping[str, Any], *, config: TopicConfig, xp=np) -> dict[str, Any]:
    """The optimiser state for ``params``: the step count, and for Adam the first and second
    moments (zeros shaped like each parameter)."""
    if config.optimizer == "sgd":
        return {"step": 0}
    return adam(learning_rates(params, config), betas=ADAM_BETAS, eps=ADAM_EPS, xp=xp).init(dict(params))


def update(grads: Mapping[str, Any], state: Mapping[str, Any], params: Mapping[str, Any], *,
           config: TopicConfig, xp=np) -> tuple[dict[str, Any], dict[str, Any]]:
    """One step: ``(new_params, new_state)``; nothing is modified in place. ``grads`` holds a
    gradient for every entry of ``params`` (same shapes)."""
    lr, step = learning_rates(params, config), state["step"] + 1
    if config.optimizer == "sgd":
        return {k: _add_scaled(p, -lr[k], grads[k], xp) for k, p in params.items()}, {"step": step}
    return adam(lr, betas=ADAM_BETAS, eps=ADAM_EPS, xp=xp).update(dict(grads), state, dict(params))
