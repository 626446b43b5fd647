"""What ``tdyn derive``/``tdyn simulate`` need for linattn: the :class:`~theory.Problem` of a config."""

from __future__ import annotations

from ..errors import ConfigError
from ..problem import Problem
from .config import LinAttnConfig
from .derive import merged_system, separate_system
from .population import aligned_parameters, diagonal_state

__all__ = ["problem", "SOLVE_OPTIONS", "system_parameters"]

#: The plateaus are long and the escapes fast (spec §3.2): adaptive implicit solvers with tight tolerances.
SOLVE_OPTIONS = {
    "diffrax": {"method": "Kvaerno5", "rtol": 1e-9, "atol": 1e-12},
    "scipy": {"method": "Radau", "rtol": 1e-9, "atol": 1e-12},
}


def system_parameters(config: LinAttnConfig) -> dict[str, float]:
    """``lam_i`` and ``N`` by name."""
    return {**{f"lam_{i + 1}": float(x) for i, x in enumerate(config.lams)}, "N": float(config.N)}


def problem(config: LinAttnConfig, *, t=None) -> Problem:
    """The merged or separate flow (``config.variant``) from the aligned initialisation on
    ``config.ode_times()`` (or ``t``). A random start leaves the diagonal set: it is trained, not reduced."""
    if config.init_kind != "aligned":
        raise ConfigError("init_kind", "the reduced flow starts on the aligned set (spec §3); 'random' is trained only")
    system = merged_system(config.D, config.H) if config.variant == "merged" else \
        separate_system(config.D, config.H, config.R)
    y0 = diagonal_state(config, aligned_parameters(config))
    return Problem(system, system_parameters(config), y0, config.ode_times() if t is None else t, SOLVE_OPTIONS,
                   config)
