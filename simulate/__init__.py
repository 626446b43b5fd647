"""tdyn.simulate — integrate reduced systems as ODEs (diffrax, scipy) and SDE ensembles.

Nothing here is paper-specific: every function takes a ReducedSystem (or an SDE model) built in
``theory``. Results are Trajectories (xarray Datasets) saved/loaded as NetCDF atomically.

Tables (scipy ``METHODS`` style, the default first): :data:`BACKENDS` and :data:`ODE_METHODS`
(per backend, the ODE solvers of :func:`solve`), :data:`SDE_BACKENDS` and :data:`METHODS` (the SDE
schemes of :func:`solve_sde`).
"""

from ._em import METHODS
from .ode import BACKENDS, ODE_METHODS, enable_x64, first_crossing, solve
from theory.noise_sde import NoiseSDE, noise_sde
from .sde import SDE_BACKENDS, ReducedSDE, solve_sde
from .sweep import sweep
from .trajectory import (WriteFailed, atomic_write, code_version, config_of, load, make_trajectory, parameter_values_of,
                         save, save_or_rescue)

__all__ = [
    "save_or_rescue",
    "WriteFailed",
    "solve",
    "solve_sde",
    "sweep",
    "ReducedSDE",
    "NoiseSDE",
    "noise_sde",
    "first_crossing",
    "BACKENDS",
    "SDE_BACKENDS",
    "METHODS",
    "ODE_METHODS",
    "enable_x64",
    "make_trajectory",
    "parameter_values_of",
    "save",
    "load",
    "atomic_write",
    "code_version",
    "config_of",
]
