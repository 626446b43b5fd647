"""JoMA's update rule, optax style: two pure functions over lists of arrays, any array module.

* ``init(params, *, config, xp) -> state``
* ``update(grads, state, params, *, config, xp) -> (new_params, new_state)``

``xp`` is ``numpy`` or ``torch``; nothing is modified in place. The config picks the rule:

* **SGD** (every variant but ``hier``): ``p <- p - lr g`` with one learning rate on every parameter
  (Decision 3: equal rates on ``W`` and ``z`` keep Theorem 1's constants, and full-batch SGD is
  the Euler step of the block flow with ``t = lr * step``). State: ``{}``.
* **Adam** (``hier``, Table 1): ``torch.optim.Adam(lr, betas=(0.9, 0.999), eps=1e-8,
  weight_decay=wd)``: the shared :func:`empirical.optim.adam` (torch's numbers bit for bit with
  ``xp=torch``). State: ``{"step", "m", "v"}``.

:func:`step_` applies the rule to a torch module (its parameters and their ``.grad``): the one
update every JoMA engine uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..optim import ADAM_BETAS, ADAM_EPS, Adam, adam  # torch's defaults, as the official code

__all__ = ["init", "update", "step_", "rule", "ADAM_BETAS", "ADAM_EPS"]


def rule(config) -> str:
    """``"adam"`` for the ``hier`` variant (Table 1), else ``"sgd"``."""
    return "adam" if config.variant == "hier" else "sgd"


def init(params: list, *, config, xp=np) -> dict[str, Any]:
    """The rule's state for ``params`` (a list of arrays): ``{}`` for SGD; Adam's step count and
    zero first/second moments shaped like ``params``."""
    if rule(config) == "sgd":
        return {}
    return _adam(config, xp).init(list(params))


def update(grads: list, state: dict[str, Any], params: list, *, config, xp=np) -> tuple[list, dict[str, Any]]:
    """``(new_params, new_state)`` after one step with learning rate ``config.lr`` (Adam: weight
    decay ``config.wd``); ``grads`` are the loss gradients (one per parameter, same shapes)."""
    lr = float(config.lr)
    if rule(config) == "sgd":
        return [p - lr * g for p, g in zip(params, grads)], state
    return _adam(config, xp).update(list(grads), state, list(params))


def _adam(config, xp) -> Adam:
    """The shared Adam (:func:`empirical.optim.adam`) with this config's rate and weight decay."""
    return adam(float(config.lr), betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=float(config.wd), xp=xp)


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
