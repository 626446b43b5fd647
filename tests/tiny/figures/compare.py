"""The tiny paper's comparison: the ODE against the trained network, in the compare preset."""

from __future__ import annotations

import simulate
from figures.context import RunContext
from figures.core import agreement
from figures.report import Observable, Report

from ..empirical.experiment import run
from ..theory import TinyConfig, problem
from .claims import converges_to_p

__all__ = ["theory_and_practice", "compare"]


def theory_and_practice(quick: bool = True, device: str = "cpu"):
    """``(config, ODE trajectory, trained trajectory)`` in the ``compare`` preset."""
    cfg = TinyConfig.preset("compare", quick=quick)
    return cfg, simulate.solve(problem(cfg), backend="scipy"), run(cfg, device=device)


def compare(ctx: RunContext | None = None, *, quick: bool | None = None, device: str | None = None) -> Report:
    """The row's ``compare`` slot: agreement of the ODE and the trained network under ``ctx``
    (``quick``/``device`` override its fields)."""
    ctx = RunContext.of(ctx, quick=quick, device=device)
    cfg, ode, trained = theory_and_practice(ctx.quick, "cpu" if ctx.device == "auto" else ctx.device)
    regime = f"p={cfg.p}, lr={cfg.lr}, batch={cfg.batch}, {cfg.steps} steps"
    claim = converges_to_p(float(trained["prob"].values[-1]), cfg.p, float(ode["prob"].values[-1]), regime)
    return Report("tiny", regime, [Observable("prob", agreement(ode, trained, ["prob"])["prob"], 0.05)], [claim])
