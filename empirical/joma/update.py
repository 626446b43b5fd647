"""JoMA's update rule, optax style: two pure functions over lists of arrays, any array module.

* ``init(params, *, config, xp) -> state``
* ``update(grads, state, params, *, config, xp) -> (new_params, new_state)``

``xp`` is ``numpy`` or ``torch``; nothing is modified in place. The config picks the rule:

* **SGD** (every variant but ``hier``): ``p <- p - lr g`` with one learning rate on every parameter
  (Decision 3: equal rates on ``W`` and ``z`` keep Theorem 1's constants, and full-batch SGD is
  the Euler step of the block flow with ``t = lr * step``). State: ``{}``.
* **Adam** (``hier``, Table 1): ``torch.optim.Adam(lr, betas=(0.9, 0.999), eps=1e-8,
  weight_decay=wd)`` with L2 weight decay ``g <- g + wd p``, written op for op as torch's
  single-tensor update (``lerp``, ``addcmul``, ``addcdiv``; the CPU path), so with ``xp=torch`` it
  gives torch's numbers bit for bit. State: ``{"step", "m", "v"}``.

:func:`step_` applies the rule to a torch module (its parameters and their ``.grad``): the one
update every JoMA engine uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["init", "update", "step_", "rule", "ADAM_BETAS", "ADAM_EPS"]

#: Adam's moment decay rates and denominator epsilon (torch's defaults, as the official code)
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def rule(config) -> str:
    """``"adam"`` for the ``hier`` variant (Table 1), else ``"sgd"``."""
    return "adam" if config.variant == "hier" else "sgd"


def _torch(xp) -> bool:
    return getattr(xp, "__name__", "") == "torch"


def _add_scaled(a, alpha: float, b, xp):
    """``a + alpha b`` (torch: ``add(a, b, alpha=)``, one rounding as in ``torch.optim``)."""
    return xp.add(a, b, alpha=alpha) if _torch(xp) else a + alpha * b


def _lerp(a, b, weight: float, xp):
    """``a + weight (b - a)`` (torch: ``lerp``)."""
    return xp.lerp(a, b, weight) if _torch(xp) else a + weight * (b - a)


def _addcmul(a, value: float, b, c, xp):
    """``a + value b c`` (torch: ``addcmul``)."""
    return xp.addcmul(a, b, c, value=value) if _torch(xp) else a + value * b * c


def _addcdiv(a, value: float, b, c, xp):
    """``a + value b / c`` (torch: ``addcdiv``)."""
    return xp.addcdiv(a, b, c, value=value) if _torch(xp) else a + value * b / c


def init(params: list, *, config, xp=np) -> dict[str, Any]:
    """The rule's state for ``params`` (a list of arrays): ``{}`` for SGD; Adam's step count and
    zero first/second moments shaped like ``params``."""
    if rule(config) == "sgd":
        return {}
    return {"step": 0, "m": [xp.zeros_like(p) for p in params], "v": [xp.zeros_like(p) for p in params]}


def update(grads: list, state: dict[str, Any], params: list, *, config, xp=np) -> tuple[list, dict[str, Any]]:
    """``(new_params, new_state)`` after one step with learning rate ``config.lr`` (Adam: weight
    decay ``config.wd``); ``grads`` are the loss gradients (one per parameter, same shapes)."""
    lr = float(config.lr)
    if rule(config) == "sgd":
        return [p - lr * g for p, g in zip(params, grads)], state
    b1, b2 = ADAM_BETAS
    step = state["step"] + 1
    bias1, bias2 = 1 - b1 ** float(step), 1 - b2 ** float(step)
    step_size, bias2_sqrt = lr / bias1, bias2**0.5
    new_p, new_m, new_v = [], [], []
    for p, g, m, v in zip(params, grads, state["m"], state["v"]):
        g = _add_scaled(g, float(config.wd), p, xp)
        m = _lerp(m, g, 1 - b1, xp)
        v = _addcmul(v * b2, 1 - b2, g, g, xp)
        new_p.append(_addcdiv(p, -step_size, m, xp.sqrt(v) / bias2_sqrt + ADAM_EPS, xp))
        new_m.append(m)
        new_v.append(v)
    return new_p, {"step": step, "m": new_m, "v": new_v}


def step_(model, state: dict[str, Any], config) -> dict[str, Any]:
    """One :func:`update` of a torch module from its parameters' ``.grad`` (every parameter must
    have one): the parameters are overwritten with the new values, the gradients cleared. Returns
    the new state."""
    import torch

    params = list(model.parameters())
    with torch.no_grad():
        new, state = update([p.grad for p in params], state, [p.detach() for p in params], config=config, xp=torch)
        for p, q in zip(params, new):
            p.copy_(q)
            p.grad = None
    return state
