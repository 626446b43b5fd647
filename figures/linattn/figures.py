"""linattn's figures (docs/papers/linattn.md §3-§5): each ``fig_x(outdir | None, quick, *, device) -> data``; the
collector (``figures.make.make_figures``) runs :data:`FIGURES` and records every file written.

* :func:`fig_merged` — ATTN_M: loss and per-component projections, the derived flow against trained attention
  (seeds), the theory's plateau levels dotted on the loss panel: one drop;
* :func:`fig_separate` — ATTN_S: the same panels: one plateau per principal component, in eigenvalue order.
"""

from __future__ import annotations

from figures.core import finish_figure, overlay
from theory.linattn.population import plateau_levels

from .compare import theory_and_practice

__all__ = ["fig_merged", "fig_separate", "FIGURES"]


def _fig(variant: str, outdir, quick, device):
    cfg, ode, trained = theory_and_practice(variant, quick, "cpu" if device == "auto" else device)
    names = ["loss", *(f"gamma_{i + 1}" for i in range(cfg.D))]
    ylabels = {"loss": "population loss $L$", **{f"gamma_{i + 1}": f"$\\gamma_{i + 1}$ (component {i + 1})"
                                                  for i in range(cfg.D)}}
    title = {"merged": "Merged key-query attention", "separate": "Separate key and query"}[variant]
    eig = ", ".join(f"{x:g}" for x in cfg.lams)
    fig = overlay(ode, trained.rename(seed="run"), names, ylabels=ylabels,
                  title=f"{title}: eigenvalues {eig}, {cfg.H} heads", xlabel="time $t$ = lr x steps")
    levels = plateau_levels(cfg.lam, cfg.N)
    for level in levels:
        fig.axes[0].axhline(level, color="0.6", lw=0.6, ls=":")
    finish_figure(fig, outdir, f"{variant}.png")
    return {"time": ode["time"].values, **{f"ode_{n}": ode[n].values for n in names},
            **{f"trained_{n}": trained[n].values for n in names}, "levels": levels}


def fig_merged(outdir, quick, *, device="cpu"):
    """ATTN_M: the derived flow and trained attention (aligned start, online SGD)."""
    return _fig("merged", outdir, quick, device)


def fig_separate(outdir, quick, *, device="cpu"):
    """ATTN_S: the staircase, the derived flow and trained attention."""
    return _fig("separate", outdir, quick, device)


FIGURES = (fig_merged, fig_separate)
