"""What ``tdyn derive``/``tdyn simulate`` need for SCB: the systems and the :class:`~theory.Problem`."""

from __future__ import annotations

from ..core import ReducedSystem
from ..errors import ConfigError
from ..problem import Problem
from .config import SCBConfig, SCBTask, make_task
from .derive import general_system, l1_symmetric_system, noise_system, symmetric_system
from .population import initial_state, system_parameters

__all__ = ["systems", "problem", "SOLVE_OPTIONS"]

#: The reduced system is stiff for large T (the mean block relaxes at rate ~ eta_A (1 + T m2) while
#: the escape takes ~ log T, docs/papers/scb.md §3.4 "Stiffness"): implicit solvers by default.
SOLVE_OPTIONS = {
    "diffrax": {"method": "Kvaerno5", "rtol": 1e-8, "atol": 1e-10},
    "scipy": {"method": "Radau", "rtol": 1e-8, "atol": 1e-10},
}


def systems(config: SCBConfig | None = None) -> list[ReducedSystem]:
    """The systems `tdyn derive scb` prints: symmetric 4-D, general (for config.N), l1 forms and the
    general system with its minibatch noise (``minibatch``, spec §3.6)."""
    N = (config or SCBConfig()).N
    return [symmetric_system(), general_system(N), l1_symmetric_system(), noise_system(N)]


def problem(config: SCBConfig, *, task: SCBTask | None = None, init=None, t=None) -> Problem:
    """The symmetric 4-D ODE for ``config``'s task on ``config.ode_times()`` (or the times ``t``),
    from the standard initialisation or from ``init=(V0, A0)`` projected onto the manifold."""
    task = task or make_task(config)
    if not task.symmetric:
        raise ConfigError("attention", "the 4-D system needs uniform q (symmetric rho_k); use general_system")
    return Problem(symmetric_system(), system_parameters(config, task), initial_state(config, task, init),
                   config.ode_times() if t is None else t, SOLVE_OPTIONS, config)
