"""SCB figures (docs/papers/scb.md §3.4, §4, §6): :data:`FIGURES`, the paper table's ``figures`` slot.
Each ``fig_x(outdir | None, quick, *, device)`` draws data computed in :mod:`.compare` (the same
data the report judges), ends in :func:`~figures.core.finish_figure` (saved when ``outdir`` is
given) and returns the data it plotted, so tests check numbers.

* :func:`fig_overlay` — ODE line, SDE bands (minibatch SGD on the full (V, A)) at nominal 50/80/90%,
  SGD runs; band coverage with t = 0 excluded (:func:`~figures.scb.calibration.overlay_data`).
* :func:`fig_escape_time` — escape time vs T: ODE, the §3.4 formula, the escape claim's SGD runs vs
  their task's ODE (:func:`~figures.scb.compare.escape_time_table`); also ``escape_time.csv``.
* :func:`fig_transfer` — samples to escape from scratch vs from V pretrained for a fraction of t*
  (attention uniform; the transfer claim's runs, :func:`~figures.scb.compare.transfer_table`).
* :func:`fig_softmax_vs_linear` — learned attention patterns and loss curves.
* :func:`figures.scb.l1.fig_l1_vs_sgd` — the l1 claim's runs: distance to ground truth vs samples
  (l1-proximal vs vanilla SGD).
* :func:`fig_svag` — SVAG's weak error against the SDE vs the amplification l (full mode only;
  :func:`~figures.scb.calibration.svag`); also ``svag.csv``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from empirical import scb as escb
from theory import scb

from .. import style
from ..core import finish_figure, overlay, save_table
from .calibration import overlay_data
from .compare import escape_time_table, transfer_table
from .l1 import fig_l1_vs_sgd

__all__ = ["FIGURES", "fig_overlay", "fig_escape_time", "fig_transfer", "fig_softmax_vs_linear", "fig_l1_vs_sgd",
           "fig_svag"]


#: panel labels of SCB's observables (the derivation's symbols, spec §3.2)
YLABELS = {
    "value_transition_correlation": r"value correlation $\zeta = \langle V, \tilde P\rangle$",
    "attention_target_overlap": r"attention overlap $\langle a, q\rangle$",
    "population_loss": r"population loss $L$",
}
STEP = style.axis_label("time", "optimiser steps", "$t$")


# ------------------------------------------------------------------------------------------------
def fig_overlay(outdir: Path | None = None, quick: bool = True, *, device: str = "auto",
                config: scb.SCBConfig | None = None, runs: int = 32, paths: int = 256, seed: int = 0) -> dict[str, Any]:
    """ODE vs SDE band vs SGD runs at small batch (``SCBConfig.preset("overlay")``); the data of
    :func:`~figures.scb.calibration.overlay_data` (coverage of the SDE bands by the SGD points). The
    SDE band is drawn above the runs (figures.core.overlay) so that it stays visible."""
    data = overlay_data(quick, device=device, config=config, runs=runs, paths=paths, seed=seed)
    ode, ens, sgd, coverage, cfg = data["ode"], data["sde"], data["sgd"], data["coverage"], data["config"]
    names = list(scb.CORRELATION_OBSERVABLES)
    symbols = (r"$\zeta$", r"$\langle a, q\rangle$")
    cov80 = ", ".join(f"{sym} {coverage['0.8'][n]:.2f}" for n, sym in zip(names, symbols))
    fig = overlay(ode, sgd, names + ["population_loss"], sde=ens, xlabel=STEP, ylabels=YLABELS,
                  title=f"SCB, batch {cfg.batch}: the SDE ({paths} paths) vs {sgd.sizes['run']} SGD runs\n"
                        f"fraction of the SGD points ($t > 0$) inside the SDE's 10-90% band (nominal 0.80): {cov80}")
    finish_figure(fig, outdir, "overlay.png")
    return data


def fig_escape_time(outdir: Path | None = None, quick: bool = True, *, device: str = "auto") -> pd.DataFrame:
    """Escape time (beta reaches 1/2) vs T (:func:`~figures.scb.compare.escape_time_table`: the
    spec's ODE setting, and the ``escape_time_log_t`` claim's real-SGD runs per batch against
    their tasks' ODE and the formula); also written as ``escape_time.csv``."""
    df = escape_time_table(quick, device=device)
    save_table(df, outdir, "escape_time.csv")
    fig, axes = style.panels(3, size=(4.2, 3.2))
    d = df[df.source == "ode"]
    axes[0].semilogx(d["T"], d["escape_time"], **style.role("theory", marker="o"), label="ODE (4-D reduced flow)")
    axes[0].semilogx(d["T"], d["formula"], **style.role("theory_alt"),
                     label=r"formula $\log(T\sqrt{\rho})/\sqrt{\eta_V\eta_A\rho K}$")
    axes[0].set_title(r"population flow, $K=0.1$, $\rho=1/3$, $\eta_V=\eta_A=1$")
    axes[0].set_ylabel(style.axis_label("escape time", "steps", r"$t_{1/2}$"))
    colours, markers = ("#D55E00", "#0072B2", "#009E73", "#CC79A7", "#E69F00"), ("o", "^", "s", "D", "v")
    for i, (batch, g) in enumerate(df[df.source == "sgd_fast"].groupby("batch")):
        per_T = g.groupby("T").agg(ode=("ode_same_task", "first"), formula=("formula", "first"), lr=("lr", "first"))
        label = f"SGD, batch size $B = {int(batch)}$ (lr $1/(m_2 T)$)"
        c, m = colours[i % len(colours)], markers[i % len(markers)]
        axes[1].plot(g["T"], g["escape_time"] * g["lr"], m, color=c, alpha=0.7, label=label)
        axes[1].plot(per_T.index, per_T.ode * per_T.lr, "s", mfc="none", color="k",
                     label="ODE, same task" if i == 0 else None)
        axes[1].plot(per_T.index, per_T.formula * per_T.lr, "_", color="0.35", ms=14,
                     label="formula, same task" if i == 0 else None)
        axes[2].plot(g["T"], g["rel_err_vs_ode"], m, color=c, label=label)
    axes[1].set_xscale("log")
    axes[1].set_title("real SCB tasks ($N=3$, $Q=2$)")
    axes[1].set_ylabel(style.axis_label("escape time x learning rate", None, r"$\eta\, t_{1/2}$"))
    axes[2].set_xscale("log")
    axes[2].set_yscale("log")
    axes[2].set_title("SGD against the ODE of its task, per run")
    axes[2].set_ylabel(r"relative error $|t^{SGD}_{1/2} - t^{ODE}_{1/2}| / t^{ODE}_{1/2}$")
    for ax in axes:
        ax.set_xlabel(style.axis_label("context length", None, "$T$"))
    style.legend_outside(fig, axes, ncols=3)
    finish_figure(fig, outdir, "escape_time.png")
    return df


def fig_transfer(outdir: Path | None = None, quick: bool = True, *, device: str = "auto") -> pd.DataFrame:
    """Samples to escape (beta >= 1/2) on the correlated downstream task from scratch and from V
    pretrained for a fraction of t* (attention uniform): the ``transfer_skips_stage1`` claim's runs
    (:func:`~figures.scb.compare.transfer_table`), mean over seeds; dashed: the ODE from the same start."""
    df = transfer_table(quick, device=device)
    fig, (ax,) = style.panels(1, size=(5.0, 3.4))
    mean = df.groupby(["start", "T"], sort=False).agg(samples=("samples", "mean"),
                                                       ode=("ode_escape_steps", "first"), batch=("batch", "first"))
    markers = iter(("o", "s", "^", "D", "v", "P"))
    colours = {}
    for label, g in mean.groupby(level="start", sort=False):  # SGD first: the legend's left column
        T = g.index.get_level_values("T")
        at_start = bool((g["samples"] == 0).all())  # beta0 >= 1/2 already: nothing to draw on a log axis
        line, = ax.plot(T, g["samples"], marker=next(markers), linestyle="-",
                        label=f"SGD, {label} (mean over seeds)" + (" (escaped at step 0)" if at_start else ""))
        colours[label] = line.get_color()
    for label, g in mean.groupby(level="start", sort=False):  # its ODE beside it, in the right column
        ax.plot(g.index.get_level_values("T"), g["ode"] * g["batch"], "x--", color=colours[label], alpha=0.6,
                label=f"ODE, {label}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(f"SCB transfer (correlated P, mix {df['mix'].iloc[0]}), batch {int(df['batch'].iloc[0])}")
    ax.set_xlabel(style.axis_label("context length", None, "$T$"))
    ax.set_ylabel(r"samples until $\beta \geq 1/2$")
    style.legend_outside(fig, [ax], ncols=2)  # SGD and its ODE side by side, one start per row
    finish_figure(fig, outdir, "transfer.png")
    return df


def fig_softmax_vs_linear(outdir: Path | None = None, quick: bool = True, *, device: str = "auto") -> dict[str, Any]:
    """Learned attention patterns (normalised columns) and loss curves, linear vs softmax
    attention (spec §6 item 2, §6.1 decision: softmax lr scaled by T^2)."""
    cfg = scb.SCBConfig.preset("softmax_vs_linear", quick)
    task = scb.make_task(cfg)
    out = {}
    for variant in ("preconditioned", "softmax"):
        tr, exp = escb.train(cfg.replace(variant=variant), device=device, task=task)
        out[variant] = {"trajectory": tr, "attention": exp.normalised_parameters()[1], "V": exp.normalised_parameters()[0]}
    fig, axes = style.panels(4, size=(3.6, 2.9))
    vmax = max(0.5, float(task.Qm.max()))
    for ax, (title, M) in zip(axes[:3], [("ground truth $q$", task.Qm),
                                         ("linear attention (preconditioned)", out["preconditioned"]["attention"]),
                                         ("softmax attention", out["softmax"]["attention"])]):
        style.heatmap(ax, M, xlabel="query token $k$", ylabel="position $t$",
                      cbar_label="attention weight, normalised per query\n" r"$a^{(k)}_t / \mathbf{1}^\top a^{(k)}$",
                      cmap="viridis", vmin=0, vmax=vmax)
        ax.set_title(title)
    for (variant, d), rl in zip(out.items(), ("theory", "theory_alt")):
        tr = d["trajectory"]
        axes[3].plot(tr["step"], tr["population_loss"], **style.role(rl),
                     label="linear (preconditioned)" if variant == "preconditioned" else "softmax")
    axes[3].set_title("population loss")
    axes[3].set_xlabel(STEP)
    axes[3].set_ylabel(YLABELS["population_loss"])
    style.legend_outside(fig, [axes[3]])
    finish_figure(fig, outdir, "softmax_vs_linear.png")
    return out


#: the paper table's ``figures`` slot: every SCB figure, in order (collected by figures.make.make_figures)
def fig_svag(outdir: Path | None = None, quick: bool = True, *, device: str = "auto") -> dict[str, Any] | None:
    """SVAG (Li, Malladi & Arora 2021; :func:`~figures.scb.calibration.svag`): the weak error of
    the mean and of the variance of ``zeta`` and ``<a, q>`` against the full SDE vs the
    amplification l, with the fitted slopes (theory -1); one panel per observable; an error the
    runs do not resolve (0 after the Monte-Carlo debiasing; its interval is in the table) is not
    drawn. Returns
    :func:`~figures.scb.calibration.svag`'s result (``svag.csv``: one row per observable,
    statistic and l). Full mode only (quick returns None: 4 x 2048 batched SGD runs up to 8x the
    steps and 4096 SDE paths at 64 steps per optimiser step cost ~1.5 CPU-minutes, beyond the
    quick figures' budget). CPU only (``device`` is not used)."""
    from ..calibration import plot_weak_error, weak_order_verdict
    from .calibration import svag

    if quick:
        return None
    res = svag(False)  # positional: the cache key compare uses
    st = res["setting"]
    names = list(scb.CORRELATION_OBSERVABLES)
    fig, axes = style.panels(len(names), size=(4.2, 3.4))
    rows = []
    symbols = {"value_transition_correlation": r"$\zeta$", "attention_target_overlap": r"$\langle a, q\rangle$"}
    for ax, n in zip(axes, names):
        sym = symbols[n]
        plot_weak_error(ax, res[n]["mean"], label=f"mean of {sym}", color=style.ROLES["practice"]["color"])
        plot_weak_error(ax, res[n]["variance"], label=f"variance of {sym}", color=style.ROLES["band"]["facecolor"],
                        marker="s", reference=False)
        ax.set_title(YLABELS[n], fontsize="medium")
        ax.set_xlabel(style.axis_label("SVAG amplification", symbol="$l$"))
        ax.set_ylabel(style.axis_label("weak error vs SDE"))
        for stat, w in res[n].items():
            rows += [{"observable": n, "statistic": stat, "l": int(l), "error": e, "low": lo, "high": hi,
                      "slope": w.slope, "slope_low": w.slope_low, "slope_high": w.slope_high,
                      "verdict": weak_order_verdict(w)}
                     for l, e, lo, hi in zip(w.scales, w.error, w.error_low, w.error_high)]
    fig.suptitle(f"SVAG vs SDE: N={st['N']} T={st['T']} batch {st['batch']}, $\\eta$={st['eta_A']:g}, "
                 f"{st['runs']} runs per $l$, {st['paths']} SDE paths (step 1/{1 / st['sde_dt']:g})", fontsize="medium")
    style.legend_outside(fig, axes)
    finish_figure(fig, outdir, "svag_weak_error.png")
    save_table(pd.DataFrame(rows), outdir, "svag.csv")
    return res


FIGURES = (fig_overlay, fig_escape_time, fig_transfer, fig_softmax_vs_linear, fig_l1_vs_sgd, fig_svag)
