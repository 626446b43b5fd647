"""The tiny paper's figures: each ``fig_x(outdir | None, quick, *, device) -> data``; the collector
(``figures.make.make_figures``) runs :data:`FIGURES` and records every file written."""

from __future__ import annotations

from figures.core import finish_figure, overlay

from .compare import theory_and_practice

__all__ = ["fig_logit", "FIGURES"]


def fig_logit(outdir, quick, *, device="cpu"):
    """The predicted probability: ODE (dashed) and the trained network."""
    cfg, ode, trained = theory_and_practice(quick, "cpu" if device == "auto" else device)
    fig = overlay(ode, trained, ["prob"], title=f"tiny: p={cfg.p}, lr={cfg.lr}", xlabel="optimiser steps")
    finish_figure(fig, outdir, "logit.png")
    return {"time": ode["time"].values, "ode": ode["prob"].values, "trained": trained["prob"].values}


FIGURES = (fig_logit,)
