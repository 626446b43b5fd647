"""SCB — sparse contextual bigrams learned by a linear transformer (Ren, Wang, Lee, NeurIPS 2024).

Spec: ``docs/papers/scb.md``. Conventions (spec §1.2, Decisions 1–5): column-stochastic ``P`` with
stationary ``mu``; query ``k = x_{T+1}`` outside the context; ``q^(k)`` uniform on ``Q`` random
positions per query (``rho = 1/Q``); model ``yhat = V X a^(k)``; squared loss; preconditioners
``V D^{-1}`` and ``a_k / mu_k``; mu_k-weighted l1 penalty (uniform threshold ``eta_A * lam``).

Modules, by concern:

* :mod:`.config` — ``PAPER``/``SPEC``, :class:`SCBConfig` (all variants' settings; time unit =
  optimiser step), the task instance and the size estimator;
* :mod:`.derive` — loss -> reduced flows (symmetric, general, l1), stage-1 linearisation, escape time;
  the squared loss of one sequence -> the minibatch noise (on the manifold, on the full ``(V, A)``);
* :mod:`.population` — population loss/gradient/observables of the full ``(V, A)`` (``xp=`` numpy/jax);
* :mod:`.problem` — ``systems(config)`` and ``problem(config) -> Problem`` for the paper table;
* :mod:`.sde` — the minibatch-SGD SDEs on the derived noise: full ``(V, A)`` and reduced (the table's
  ``sde`` slot);
* :mod:`.sde_numba` — the full SDE's step compiled in numba (a separate job: a compiled kernel).
"""

from .config import (
    PAPER,
    SPEC,
    SCBConfig,
    SCBTask,
    initial_parameters,
    make_task,
    stationary_distribution,
)
from .derive import (
    CORRELATION_OBSERVABLES,
    ESCAPE_LEVEL,
    K,
    Q,
    T,
    escape_time_formula,
    beta,
    eta_A,
    eta_V,
    general_system,
    l1_general_system,
    l1_symmetric_system,
    loss_symmetric,
    m2,
    omega,
    rho,
    stage1_linearisation,
    symmetric_system,
    u,
    w,
    xi,
    zeta,
)
from .population import (
    TaskArrays,
    initial_state,
    observables_from_parameters,
    population_gradient,
    population_loss,
    preconditioned_flow,
    proximal_map,
    soft_threshold,
    system_parameters,
)
from .problem import SOLVE_OPTIONS, problem, systems
from .derive import closure_system, full_system, noise_system, per_sample_loss
from .sde import (
    FullMinibatchSDE,
    ReducedMinibatchSDE,
    minibatch_sde,
    minibatch_sde_reduced,
)

#: the paper table's ``config`` slot
Config = SCBConfig

__all__ = [
    "PAPER", "SPEC", "Config", "SCBConfig", "SCBTask", "make_task", "stationary_distribution", "initial_parameters",
    "symmetric_system", "general_system", "l1_symmetric_system", "l1_general_system", "loss_symmetric",
    "stage1_linearisation", "escape_time_formula", "CORRELATION_OBSERVABLES", "ESCAPE_LEVEL",
    "TaskArrays", "population_loss", "population_gradient", "preconditioned_flow",
    "observables_from_parameters", "soft_threshold", "proximal_map", "system_parameters", "initial_state",
    "systems", "problem", "SOLVE_OPTIONS", "FullMinibatchSDE", "minibatch_sde",
    "ReducedMinibatchSDE", "minibatch_sde_reduced",
    "per_sample_loss", "noise_system", "closure_system", "full_system",
    # symbols of the reduced systems (tests and exports refer to them)
    "zeta", "omega", "xi", "beta", "u", "w", "T", "Q", "rho", "K", "m2", "eta_V", "eta_A",
]
