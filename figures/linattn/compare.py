"""linattn theory vs practice: :func:`compare` -> :class:`~figures.report.Report` (docs/papers/linattn.md §3-§5), and
the data the report and the figures share.

* observables — for each parametrisation (merged, separate), real multi-head linear attention trained by online
  SGD from the aligned initialisation (``LinAttnConfig.preset("compare")``, seeds batched) against the derived
  flow on ``config.ode_times()``: ``loss`` and the per-component projections ``gamma_i`` (seed mean), judged at
  rel_l2 <= :data:`TOLERANCE`;
* where_agreement_breaks — the same rel_l2 as the batch shrinks (SGD noise) and as the learning rate grows
  (discretisation of the flow), one seed each;
* claims — measured on the same runs: the merged loss has one drop, the separate loss one plateau per principal
  component in eigenvalue order, at the theory's levels (:mod:`.claims`).

:func:`theory_and_practice` is computed once per process and arguments (the figures draw the data the report
judged); treat what it returns as read-only. This module never imports :mod:`.figures`.
"""

from __future__ import annotations

from functools import lru_cache

import simulate
from empirical.linattn import train_seeds
from theory.linattn import LinAttnConfig, problem

from ..context import RunContext
from ..core import agreement
from ..report import Break, Observable, Report
from . import claims as C

__all__ = ["compare", "theory_and_practice", "TOLERANCE", "SEEDS", "VARIANTS"]

#: rel_l2 threshold of the judged observables (aligned start, large batch, lr well inside the stable range)
TOLERANCE = 0.05
#: seeds of the comparison runs
SEEDS = (0, 1, 2)
VARIANTS = ("merged", "separate")


@lru_cache(maxsize=None)
def theory_and_practice(variant: str, quick: bool = True, device: str = "cpu", changes: tuple = ()):
    """``(config, ODE trajectory, trained trajectory with a seed dim)`` in the ``compare`` preset (plus
    ``changes``, a tuple of ``(field, value)``)."""
    cfg = LinAttnConfig.preset("compare", quick=quick, variant=variant, **dict(changes))
    seeds = SEEDS if not changes else SEEDS[:1]
    return cfg, simulate.solve(problem(cfg), backend="scipy"), train_seeds(cfg, seeds=seeds, device=device)


def _names(cfg) -> list[str]:
    return ["loss", *(f"gamma_{i + 1}" for i in range(cfg.D))]


def compare(ctx: RunContext | None = None, *, quick: bool | None = None, device: str | None = None) -> Report:
    """Train both parametrisations in the compare regime, compare them with the derived flows, report where
    agreement breaks and decide the claims on the same runs."""
    ctx = RunContext.of(ctx, quick=quick, device=device)
    quick, device = ctx.quick, ctx.device
    dev = "cpu" if device == "auto" else device
    observables, breaks, claims, regime = [], [], [], ""
    for variant in VARIANTS:
        cfg, ode, trained = theory_and_practice(variant, quick, dev)
        regime = (f"D={cfg.D} N={cfg.N} H={cfg.H} lams={list(cfg.lams)} init={cfg.init} ({cfg.init_kind}) "
                  f"lr={cfg.lr} batch={cfg.batch} steps={cfg.steps} mode={cfg.mode} seeds={len(SEEDS)}")
        for name, err in agreement(ode, trained, _names(cfg)).items():
            observables.append(Observable(f"{variant}/{name}", err, TOLERANCE))
        for factor, value in (("batch", 16), ("lr", 1.5)):
            _, ode_b, tr_b = theory_and_practice(variant, quick, dev, ((factor, value),))
            errs = agreement(ode_b, tr_b, _names(cfg))
            breaks.append(Break(factor, {"variant": variant, factor: value}, errs,
                                all(e <= TOLERANCE for e in errs.values()),
                                "SGD noise" if factor == "batch" else "the discrete step leaves the flow"))
    claims += [C.single_drop(*theory_and_practice("merged", quick, dev)),
               C.staircase(*theory_and_practice("separate", quick, dev))]
    return Report("linattn", regime, observables, claims, breaks)
