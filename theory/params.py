"""The configuration base every paper's Config derives from.

A Config is a frozen dataclass, validated at construction (an invalid config never exists), that
owns *all* the settings of its paper's variants and the paper's **time convention**:

* :meth:`ParamsBase.log_steps` — the optimiser steps at which training logs observables
  (``0, log_every, 2 log_every, ..., steps``; the last step always);
* :meth:`ParamsBase.ode_time` — the reduced system's time of an optimiser step (each paper states
  its unit and reason in its config's docstring);
* :meth:`ParamsBase.ode_times` — ``[ode_time(s) for s in log_steps()]``: the theory is solved on
  exactly the grid the Trainer logs on.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ConfigError

__all__ = ["ParamsBase", "log_steps"]


def log_steps(steps: int, log_every: int) -> np.ndarray:
    """``0, log_every, 2*log_every, ...`` plus ``steps`` itself (int64, strictly increasing)."""
    if steps < 1:
        raise ConfigError("steps", f"must be >= 1, got {steps}")
    if log_every < 1:
        raise ConfigError("log_every", f"must be >= 1, got {log_every}")
    grid = np.arange(0, steps + 1, log_every, dtype=np.int64)
    return grid if grid[-1] == steps else np.append(grid, np.int64(steps))


@dataclass(frozen=True)
class ParamsBase:
    """Base for a paper's frozen configuration dataclass.

    Subclasses implement :meth:`validate` (raise :class:`ConfigError` naming the field) and
    :meth:`ode_time`; configs with ``steps`` and ``log_every`` fields get :meth:`log_steps` for free.
    :meth:`with_overrides` parses the CLI's ``--set key=value`` strings into typed fields.
    """

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:  # pragma: no cover - overridden
        pass

    # -- time: one place per paper -------------------------------------------------------------
    def log_steps(self) -> np.ndarray:
        """Optimiser steps at which training logs (0 and the last step included)."""
        try:
            return log_steps(int(self.steps), int(self.log_every))
        except AttributeError:  # pragma: no cover - a config without steps must override
            raise NotImplementedError(f"{type(self).__name__} defines no steps/log_every; override log_steps")

    def ode_time(self, step: int | float) -> float:  # pragma: no cover - overridden
        """The reduced system's time at optimiser step ``step``."""
        raise NotImplementedError(f"{type(self).__name__} must define ode_time(step)")

    def ode_times(self, steps: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """``[ode_time(s) for s in steps]`` (default: :meth:`log_steps`), float64."""
        steps = self.log_steps() if steps is None else steps
        return np.array([self.ode_time(int(s)) for s in steps], dtype=np.float64)

    # -- dict / overrides ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "ParamsBase":
        known = {f.name for f in dataclasses.fields(self)}
        for k in changes:
            if k not in known:
                raise ConfigError(k, f"unknown parameter; known: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **changes)

    def with_overrides(self, assignments: Sequence[str]) -> "ParamsBase":
        """Apply ``["key=value", ...]`` with values parsed as Python/JSON literals and coerced to
        the field's type."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for item in assignments:
            if "=" not in item:
                raise ConfigError(item, "expected key=value")
            key, raw = (s.strip() for s in item.split("=", 1))
            if key not in fields:
                raise ConfigError(key, f"unknown parameter; known: {', '.join(sorted(fields))}")
            current = getattr(self, key)
            try:
                value = ast.literal_eval(raw)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                value = raw
            changes[key] = _coerce(key, value, current)
        return self.replace(**changes)


def _coerce(key: str, value: Any, current: Any) -> Any:
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false", "1", "0", "yes", "no"}:
            return value.lower() in {"true", "1", "yes"}
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ConfigError(key, f"expected true/false, got {value!r}")
    if isinstance(current, int):
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (isinstance(value, float) and not math.isfinite(value)) or float(value) != int(value)):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        return int(value)
    if isinstance(current, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {value!r}")
        return float(value)
    if isinstance(current, str):
        return str(value)
    if isinstance(current, tuple) or current is None:
        if isinstance(value, list):
            return _to_tuple(value)
        return value
    return value


def _to_tuple(v):
    return tuple(_to_tuple(x) for x in v) if isinstance(v, (list, tuple)) else v
