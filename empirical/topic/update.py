"""The topic paper's update rule, optax style: :func:`init` and :func:`update` are pure functions
of mappings ``name -> array`` (parameters, gradients, state), written once for any array module
``xp`` (``numpy`` or ``torch``).

The official code's optimisers (docs/papers/topic.md §2.2), picked by ``config.optimizer`` with step
size ``config.lr`` (``config.kq_lr_ratio * config.lr`` for ``W_K`` and ``W_Q``: the two-stage
map's learning-rate ratio, :func:`learning_rates`):

* ``"sgd"`` — plain SGD, no momentum: ``p <- p - lr g``;
* ``"adam"`` — Adam (the code's AdamW with ``weight_decay = 0``), betas :data:`ADAM_BETAS`, eps
  :data:`ADAM_EPS`: ``m <- lerp(m, g, 1 - b1)``, ``v <- b2 v + (1 - b2) g^2``,
  ``p <- p - lr/(1 - b1^t) * m / (sqrt(v)/sqrt(1 - b2^t) + eps)``.

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

__all__ = ["ADAM_BETAS", "ADAM_EPS", "KQ_PARAMETERS", "learning_rates", "init", "update"]

#: Adam's moment decay rates and denominator offset (torch's and the official code's defaults)
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


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


def _lerp(x, y, weight: float, xp):
    """``x + weight (y - x)`` (torch's ``lerp``, which switches form at ``weight = 1/2``)."""
    if _is_torch(xp):
        return xp.lerp(x, y, weight)
    return x + weight * (y - x) if weight < 0.5 else y - (y - x) * (1 - weight)


def _add_product(x, value: float, y, z, xp):
    """``x + value * y * z``."""
    return xp.addcmul(x, y, z, value=value) if _is_torch(xp) else x + value * (y * z)


def _add_ratio(x, value: float, y, z, xp):
    """``x + value * y / z``."""
    return xp.addcdiv(x, y, z, value=value) if _is_torch(xp) else x + value * (y / z)


def init(params: Mapping[str, Any], *, config: TopicConfig, xp=np) -> dict[str, Any]:
    """The optimiser state for ``params``: the step count, and for Adam the first and second
    moments (zeros shaped like each parameter)."""
    if config.optimizer == "sgd":
        return {"step": 0}
    return {"step": 0, "m": {k: xp.zeros_like(p) for k, p in params.items()},
            "v": {k: xp.zeros_like(p) for k, p in params.items()}}


def update(grads: Mapping[str, Any], state: Mapping[str, Any], params: Mapping[str, Any], *,
           config: TopicConfig, xp=np) -> tuple[dict[str, Any], dict[str, Any]]:
    """One step: ``(new_params, new_state)``; nothing is modified in place. ``grads`` holds a
    gradient for every entry of ``params`` (same shapes)."""
    lr, step = learning_rates(params, config), state["step"] + 1
    if config.optimizer == "sgd":
        return {k: _add_scaled(p, -lr[k], grads[k], xp) for k, p in params.items()}, {"step": step}
    b1, b2 = ADAM_BETAS
    m = {k: _lerp(state["m"][k], grads[k], 1 - b1, xp) for k in params}
    v = {k: _add_product(state["v"][k] * b2, 1 - b2, grads[k], grads[k], xp) for k in params}
    bias2_sqrt = (1 - b2**step) ** 0.5
    new = {k: _add_ratio(p, -lr[k] / (1 - b1**step), m[k], xp.sqrt(v[k]) / bias2_sqrt + ADAM_EPS, xp)
           for k, p in params.items()}
    return new, {"step": step, "m": m, "v": v}
