"""The paper-table hooks of the topic paper: parameter values of each derived system for a config,
``systems(config)`` (what ``tdyn derive`` prints) and ``problem(config)`` (what ``tdyn simulate``
integrates, on the Trainer's logging grid ``config.ode_times()``)."""

from __future__ import annotations

from ..core import ReducedSystem
from ..problem import Problem
from .config import TopicConfig
from .derive import FULL_SYMBOLIC_MAX_D, STAGE1_STATE, embedding_system, full_space_system, stage1_optimum, stage1_system
from .stage2 import attention_dim, escape_rate_polynomial, stage2_system, two_stage_system

__all__ = ["system_parameters", "stage2_parameters", "two_stage_parameters", "systems", "problem", "two_stage_problem",
           "SOLVE_OPTIONS"]

#: The stage-1 flow is linear and non-stiff at the learning rates used (fastest mode ~ lr per
#: step): explicit Tsit5 in diffrax (no implicit-solver compile), Radau in scipy, tight tolerances.
SOLVE_OPTIONS = {"diffrax": {"method": "Tsit5", "rtol": 1e-10, "atol": 1e-12},
                 "scipy": {"method": "Radau", "rtol": 1e-9, "atol": 1e-12}}


def system_parameters(config: TopicConfig) -> dict[str, float]:
    """Parameters of the stage-1, embedding and two-stage systems: sizes, masking, ``lam``,
    ``eta = lr`` (ODE time = optimiser step, see :mod:`theory.topic.config`)."""
    return {"T": config.T, "v": config.v, "tau": config.tau, "p_m": config.p_m, "p_c": config.p_c,
            "p_r": config.p_r, "lam": config.lam, "eta": config.lr}


def stage2_parameters(config: TopicConfig) -> dict[str, float]:
    """Parameters of :func:`stage2_system`: sizes, masking, ``eta = lr`` and ``W^V*``."""
    opt = stage1_optimum(config.replace(lam=0.0))
    return {**{k: x for k, x in system_parameters(config).items() if k != "lam"}, **opt}


def two_stage_parameters(config: TopicConfig) -> dict[str, float]:
    """Parameter values of :func:`two_stage_system` for ``config`` (``g_1, g_2`` from the escape
    rate of the stage-2 loss along the stage-1 path, ``d_a`` the K/Q dimension)."""
    g1v, g2v = escape_rate_polynomial(config)
    return {**system_parameters(config), "g_1": g1v, "g_2": g2v, "d_a": float(attention_dim(config))}


def systems(config: TopicConfig | None = None) -> list[ReducedSystem]:
    """Stage 1, the embedding version, stage 2 and the two-stage system (symbolic in the sizes);
    for a small vocabulary (``Tv + 1 <=`` :data:`~.derive.FULL_SYMBOLIC_MAX_D`, e.g. ``--set T=2
    v=2 tau=1``) also the full-space stage-1 system with its minibatch noise
    (:func:`~.derive.full_space_system`: ``D^2 + D`` states, so only for a small instance)."""
    config = config or TopicConfig()
    out = [stage1_system(config.keys), embedding_system(config.keys), stage2_system(config.keys),
           two_stage_system(config.keys)]
    if config.n_words + 1 <= FULL_SYMBOLIC_MAX_D and config.tau < config.T:
        out.append(full_space_system(config))
    return out


def problem(config: TopicConfig) -> Problem:
    """`tdyn simulate topic`: the stage-1 flow from ``W = 0, b = 0`` on ``config.ode_times()``."""
    return Problem(stage1_system(config.keys), system_parameters(config), {str(x): 0.0 for x in STAGE1_STATE},
                   config.ode_times(), SOLVE_OPTIONS, config)


def two_stage_problem(config: TopicConfig, horizon: float | None = None, n: int = 4001) -> Problem:
    """The two-stage reduced system from ``omega_2 = 0`` and K/Q scale ``k = kq_scale`` on a fine
    grid up to ``horizon`` steps (default ``4 * config.steps``: the onset may lie past the run)."""
    import numpy as np

    horizon = 4.0 * config.steps if horizon is None else horizon
    return Problem(two_stage_system(config.keys), two_stage_parameters(config),
                   {"omega_2": 0.0, "k": config.kq_scale}, np.linspace(0.0, horizon, n),
                   {"scipy": {"method": "LSODA", "rtol": 1e-8, "atol": 1e-10}}, config)
