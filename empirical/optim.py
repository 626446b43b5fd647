"""Update rules shared by the papers, optax style: a rule is built with its hyperparameters bound,
then ``state = rule.init(params)`` and ``new_params, state = rule.update(grads, state, params)``;
nothing is modified in place. ``params``/``grads`` are a list or a dict of arrays (the same kind
back), of any array module ``xp`` (``numpy`` or ``torch``).

* :func:`adam` — ``torch.optim.Adam(lr, betas, eps, weight_decay)`` with L2 weight decay
  ``g <- g + wd p``, written op for op as torch's single-tensor update (``lerp``, ``addcmul``,
  ``addcdiv``; the CPU path), so with ``xp=torch`` it gives torch's numbers bit for bit; with
  ``xp=numpy`` the same formulas in plain arithmetic (equal to rounding). ``lr`` may be one rate or
  one per parameter (a dict keyed as ``params``). State: ``{"step", "m", "v"}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["adam", "Adam", "ADAM_BETAS", "ADAM_EPS"]

#: Adam's moment decay rates and denominator epsilon (torch's defaults)
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def _is_torch(xp) -> bool:
    return getattr(xp, "__name__", "") == "torch"


def _add_scaled(a, alpha: float, b, xp):
    """``a + alpha b`` (torch: ``add(a, b, alpha=)``, one rounding as in ``torch.optim``)."""
    return xp.add(a, b, alpha=alpha) if _is_torch(xp) else a + alpha * b


def _lerp(a, b, weight: float, xp):
    """``a + weight (b - a)`` (torch's ``lerp``, which switches form at ``weight = 1/2``)."""
    if _is_torch(xp):
        return xp.lerp(a, b, weight)
    return a + weight * (b - a) if weight < 0.5 else b - (b - a) * (1 - weight)


def _addcmul(a, value: float, b, c, xp):
    """``a + value b c`` (torch: ``addcmul``)."""
    return xp.addcmul(a, b, c, value=value) if _is_torch(xp) else a + value * b * c


def _addcdiv(a, value: float, b, c, xp):
    """``a + value b / c`` (torch: ``addcdiv``)."""
    return xp.addcdiv(a, b, c, value=value) if _is_torch(xp) else a + value * b / c


def _keys(params) -> list:
    return list(params) if isinstance(params, Mapping) else list(range(len(params)))


def _like(params, values: dict):
    """``values`` (key -> array) as the kind ``params`` is: a dict, else a list in order."""
    return dict(values) if isinstance(params, Mapping) else [values[k] for k in range(len(params))]


@dataclass(frozen=True)
class Adam:
    """Adam with its hyperparameters bound (build it with :func:`adam`)."""

    lr: float | Mapping[Any, float]
    betas: tuple[float, float] = ADAM_BETAS
    eps: float = ADAM_EPS
    weight_decay: float = 0.0
    xp: Any = np

    def _rate(self, key) -> float:
        return float(self.lr[key]) if isinstance(self.lr, Mapping) else float(self.lr)

    def init(self, params) -> dict[str, Any]:
        """Step 0 and zero first/second moments shaped like ``params``."""
        zeros = {k: self.xp.zeros_like(params[k]) for k in _keys(params)}
        return {"step": 0, "m": _like(params, zeros), "v": _like(params, dict(zeros))}

    def update(self, grads, state: Mapping[str, Any], params) -> tuple[Any, dict[str, Any]]:
        """``(new_params, new_state)`` after one step."""
        xp, (b1, b2) = self.xp, self.betas
        step = state["step"] + 1
        bias1, bias2_sqrt = 1 - b1 ** float(step), (1 - b2 ** float(step)) ** 0.5
        new, m_new, v_new = {}, {}, {}
        for k in _keys(params):
            p, g = params[k], grads[k]
            if self.weight_decay != 0:
                g = _add_scaled(g, float(self.weight_decay), p, xp)
            m = _lerp(state["m"][k], g, 1 - b1, xp)
            v = _addcmul(state["v"][k] * b2, 1 - b2, g, g, xp)
            new[k] = _addcdiv(p, -self._rate(k) / bias1, m, xp.sqrt(v) / bias2_sqrt + self.eps, xp)
            m_new[k], v_new[k] = m, v
        return _like(params, new), {"step": step, "m": _like(params, m_new), "v": _like(params, v_new)}


def adam(lr: float | Mapping[Any, float], *, betas: tuple[float, float] = ADAM_BETAS, eps: float = ADAM_EPS,
         weight_decay: float = 0.0, xp=np) -> Adam:
    """The Adam rule (module docstring) with these hyperparameters: ``lr`` one rate or one per
    parameter, ``weight_decay`` L2 (``g + wd p``; skipped at 0, as torch), ``xp`` the array module."""
    return Adam(lr, tuple(betas), float(eps), float(weight_decay), xp)
