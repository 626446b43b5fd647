"""tdyn.theory — reduced gradient-flow systems derived symbolically from each paper's loss.

Public API: :class:`ReducedSystem` and its exporters (:func:`load_system` reads the JSON back),
:class:`Problem` (what ``simulate.solve`` needs), :class:`ParamsBase` (every paper's Config), the
error types, :func:`resolve_ref` (``"module:attribute"`` -> the object), and one package per
paper (``theory.scb``, ...), imported on demand (derivations can be slow).
"""

from .core import ReducedSystem
from .errors import ConfigError, DivergenceError, SolverError, TdynError, check_choice
from .export import systems_to_json
from .load import load_system
from .params import ParamsBase
from .problem import Problem
from .refs import resolve_ref

__all__ = [
    "ReducedSystem",
    "Problem",
    "ParamsBase",
    "load_system",
    "systems_to_json",
    "TdynError",
    "ConfigError",
    "SolverError",
    "DivergenceError",
    "check_choice",
    "resolve_ref",
]
