"""tdyn.theory — reduced gradient-flow systems derived symbolically from each paper's loss.

Public API: :class:`ReducedSystem` and its exporters, the error types, and one module per paper
(``theory.scb``, ...). Paper modules are imported on demand (derivations can be slow).
"""

from .core import ParamsBase, ReducedSystem, systems_to_json
from .errors import ConfigError, DivergenceError, SolverError, TdynError, check_choice

__all__ = [
    "ReducedSystem",
    "ParamsBase",
    "systems_to_json",
    "TdynError",
    "ConfigError",
    "SolverError",
    "DivergenceError",
    "check_choice",
]
