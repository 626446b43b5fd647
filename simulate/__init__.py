"""tdyn.simulate — integrate reduced systems as ODEs (diffrax, scipy) and SDE ensembles.

Nothing here is paper-specific: every function takes a ReducedSystem (or an SDE model) built in
``theory``. Results are Trajectories (xarray Datasets) saved/loaded as NetCDF atomically.
"""

from ._em import METHODS
from .ode import BACKENDS, first_crossing, solve
from .noise_sde import NoiseSDE, noise_sde
from .sde import SDE_BACKENDS, ReducedSDE, solve_sde
from .sweep import sweep
from .trajectory import atomic_write, code_version, config_of, load, make_trajectory, parameters_of, save

__all__ = [
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
    "make_trajectory",
    "parameters_of",
    "save",
    "load",
    "atomic_write",
    "code_version",
    "config_of",
]
