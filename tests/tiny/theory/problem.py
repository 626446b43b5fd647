"""What ``simulate.solve`` integrates for a tiny config: the derived flow on ``config.ode_times()``."""

from __future__ import annotations

from theory import Problem

from .config import TinyConfig
from .derive import systems

__all__ = ["problem"]


def problem(config: TinyConfig) -> Problem:
    return Problem(systems()[0], {"p": config.p, "lr": config.lr}, {"a": config.a0}, config.ode_times(),
                   {"scipy": {"method": "RK45"}}, config)
