"""``Problem``: everything :func:`simulate.solve` needs for one paper run, built by the paper."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .core import ReducedSystem

__all__ = ["Problem"]


@dataclass(frozen=True, eq=False)
class Problem:
    """A reduced system with its inputs.

    system:        the :class:`ReducedSystem` to integrate.
    params:        parameter values by name (``system.parameter_names``).
    y0:            initial state, by name or in ``system.state_names`` order.
    t:             output times in the system's time unit (``config.ode_times()``), shape ``(n,)``.
    solve_options: ``{backend: {method, rtol, atol, ...}}`` the paper recommends; every caller of
                   :func:`simulate.solve` with this problem uses them (explicit keywords override).
    config:        the paper Config it was built from (optional); ``simulate.solve`` records every
                   field in the trajectory (provenance).
    """

    system: ReducedSystem
    params: Mapping[str, float]
    y0: Any
    t: np.ndarray
    solve_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    config: Any = None

    def options(self, backend: str) -> dict[str, Any]:
        return dict(self.solve_options.get(backend, {}))
