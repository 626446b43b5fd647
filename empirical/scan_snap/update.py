"""Scan & Snap's update rule, optax style (docs/papers/scan_snap.md §2.3, §7).

The official code steps the decoder ``Y`` and the attention ``Z`` with two optimisers of the same
kind and their own learning rates ``eta_Y``, ``eta_Z``: PyTorch's SGD (momentum ``mu``, dampening
0, no weight decay) or Adam (betas ``mu``/0.999, eps 1e-8: the config's ``momentum`` is Adam's
beta1, 0.9 by default as PyTorch's). Here that is one pair of pure functions on dicts of arrays
(name -> array, any shape; learning rates broadcast against them, e.g. (R, 1, 1) per run):

* :func:`init` ``(params, *, xp) -> state``;
* :func:`update` ``(grads, state, params, *, lr, method, momentum, maximize, xp) -> (new_params,
  new_state)``: one step down the loss whose gradients are ``grads`` (the cross-entropy), or, with
  ``maximize=True`` (PyTorch's flag), up the objective whose gradients they are (``J``).

``xp`` is the array module (``numpy``, ``torch`` or ``jax.numpy``). Every engine of the paper
steps through it: the torch experiment and grid (:func:`step_torch`), the jax SGD map
(:func:`empirical.scan_snap.experiment.sgd_ensemble`) and the momentum map of the comparison
(:func:`figures.scan_snap.compare.momentum_map`), both ``maximize=True`` on ``dJ``; the compiled
count-vector engine (:mod:`.fast`) keeps its own kernel, tested equal to this rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["init", "update", "step_torch", "METHODS"]

#: the optimisers of the official code
METHODS = ("sgd", "adam")


def init(params: Mapping[str, Any], *, xp=np) -> dict[str, Any]:
    """The optimiser state of ``params``: ``step`` = 0 updates done, first moments ``m`` (SGD's
    momentum buffer, Adam's mean) and second moments ``v`` (Adam only) at zero, shaped as ``params``."""
    return {"step": 0, "m": {k: xp.zeros_like(p) for k, p in params.items()},
            "v": {k: xp.zeros_like(p) for k, p in params.items()}}


def update(grads: Mapping[str, Any], state: Mapping[str, Any], params: Mapping[str, Any], *, lr: Mapping[str, Any],
           method: str = "sgd", momentum: float = 0.9, maximize: bool = False,
           xp=np) -> tuple[dict[str, Any], dict[str, Any]]:
    """One step of ``method`` on every parameter: ``lr[name]`` its learning rate (a scalar or an
    array that broadcasts against it). Pure: the inputs are not modified.

    * ``sgd`` (PyTorch's): ``m = mu m + g``; ``p = p - lr m`` (PyTorch copies ``g`` into the
      buffer at the first step: the same numbers, since ``m`` starts at 0);
    * ``adam`` (PyTorch's, bias-corrected): ``m = mu m + (1 - mu) g``, ``v = 0.999 v + 0.001 g^2``,
      ``p = p - lr m^ / (sqrt(v^) + 1e-8)`` with ``m^ = m / (1 - mu^t)``, ``v^ = v / (1 - 0.999^t)``.

    ``maximize``: ``p + ...`` instead of ``p - ...`` (ascent; the moments are those of ``g``).
    """
    t = state["step"] + 1
    mu = momentum
    new_params, m_new, v_new = {}, {}, {}
    for k, p in params.items():
        g, m, v = grads[k], state["m"][k], state["v"][k]
        if method == "sgd":
            m = mu * m + g
            p = p + lr[k] * m if maximize else p - lr[k] * m
        elif method == "adam":
            m = mu * m + (1 - mu) * g
            v = 0.999 * v + 0.001 * g * g
            mh = m / (1 - mu**t)
            vh = v / (1 - 0.999**t)
            delta = lr[k] * mh / (xp.sqrt(vh) + 1e-8)
            p = p + delta if maximize else p - delta
        else:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        new_params[k], m_new[k], v_new[k] = p, m, v
    return new_params, {"step": t, "m": m_new, "v": v_new}


def step_torch(parameters: Mapping[str, Any], state: Mapping[str, Any], **hyper) -> dict[str, Any]:
    """:func:`update` on torch ``Parameter``\\ s (the torch engines' step): reads their ``.grad``,
    writes the new values into them; returns the new state. ``hyper``: ``lr``, ``method``,
    ``momentum``."""
    import torch

    with torch.no_grad():
        params = {k: p.detach() for k, p in parameters.items()}
        new, state = update({k: p.grad for k, p in parameters.items()}, state, params, xp=torch, **hyper)
        for k, p in parameters.items():
            p.copy_(new[k])
    return state
