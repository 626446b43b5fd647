"""SCB figures (papers/scb.md §3.4, §4, §6): :data:`FIGURES`, the paper table's ``figures`` slot.
Each ``fig_x(outdir | None, quick, *, device)`` draws data computed in :mod:`.compare` (the same
data the report judges), ends in :func:`~figures.core.finish_figure` (saved when ``outdir`` is
given) and returns the data it plotted, so tests check numbers.

* :func:`fig_overlay` — ODE line, SDE bands (minibatch SGD on the full (V, A)) at nominal 50/80/90%,
  SGD runs; band coverage with t = 0 excluded (:func:`~figures.scb.compare.overlay_data`).
* :func:`fig_escape_time` — escape time vs T: ODE, the §3.4 formula, the escape claim's SGD runs vs
  their task's ODE (:func:`~figures.scb.compare.escape_time_table`); also ``scb_escape_time.csv``.
* :func:`fig_transfer` — samples to escape from scratch vs from V pretrained for a fraction of t*
  (attention uniform; the transfer claim's runs, :func:`~figures.scb.compare.transfer_table`).
* :func:`fig_softmax_vs_linear` — learned attention patterns and loss curves.
* :func:`figures.scb.l1.fig_l1_vs_sgd` — the l1 claim's runs: distance to ground truth vs samples
  (l1-proximal vs vanilla SGD).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from empirical import scb as escb
from theory import scb

from ..core import finish_figure, overlay, save_table
from .compare import BAND_LEVELS, escape_time_table, overlay_data, transfer_table
from .l1 import fig_l1_vs_sgd

__all__ = ["FIGURES", "fig_overlay", "fig_escape_time", "fig_transfer", "fig_softmax_vs_linear", "fig_l1_vs_sgd"]


def _finish(fig, axes, outdir, name: str, xlabel: str, ylabel: str):
    for ax in axes:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return finish_figure(fig, outdir, name)


# ------------------------------------------------------------------------------------------------
def fig_overlay(outdir: Path | None = None, quick: bool = True, *, device: str = "auto",
                config: scb.SCBConfig | None = None, runs: int = 32, paths: int = 256, seed: int = 0) -> dict[str, Any]:
    """ODE vs SDE band vs SGD runs at small batch (``SCBConfig.preset("overlay")``); the data of
    :func:`~figures.scb.compare.overlay_data` (coverage of the SDE bands by the SGD points)."""
    data = overlay_data(quick, device=device, config=config, runs=runs, paths=paths, seed=seed)
    ode, ens, sgd, coverage, cfg = data["ode"], data["sde"], data["sgd"], data["coverage"], data["config"]
    names = list(scb.CORRELATION_OBSERVABLES)
    fig = overlay(ode, sgd, names + ["population_loss"], sde=ens, xlabel="optimiser step",
                  title=f"SCB: ODE vs SDE ({paths} paths, 10-90% band) vs SGD ({runs} runs), batch {cfg.batch}; "
                        "coverage (t>0) at 50/80/90%: " + "; ".join(
                            "/".join(f"{coverage[f'{lvl:g}'][n]:.2f}" for lvl in BAND_LEVELS) for n in names))
    finish_figure(fig, outdir, "scb_overlay.png")
    return data


def fig_escape_time(outdir: Path | None = None, quick: bool = True, *, device: str = "auto") -> pd.DataFrame:
    """Escape time (beta reaches 1/2) vs T (:func:`~figures.scb.compare.escape_time_table`: the
    spec's ODE setting, and the ``escape_time_log_t`` claim's real-SGD runs per batch against
    their tasks' ODE and the formula); also written as ``scb_escape_time.csv``."""
    df = escape_time_table(quick, device=device)
    save_table(df, outdir, "scb_escape_time.csv")
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    d = df[df.source == "ode"]
    axes[0].semilogx(d["T"], d["escape_time"], "ko-", label="ODE (4-D)")
    axes[0].semilogx(d["T"], d["formula"], "r--", label=r"formula $\log(T\sqrt{\rho})/\sqrt{\eta_V\eta_A\rho K}$")
    axes[0].set_title(r"population flow, $K=0.1$, $\rho=1/3$, $\eta_V=\eta_A=1$")
    g_all = df[df.source == "sgd_fast"]
    for (batch, g), colour in zip(g_all.groupby("batch"), ("tab:orange", "tab:blue", "tab:green", "tab:purple", "tab:red")):
        per_T = g.groupby("T").agg(ode=("ode_same_task", "first"), formula=("formula", "first"), lr=("lr", "first"))
        label = f"SGD, batch {batch} (lr = 1/(m2 T))"
        axes[1].plot(g["T"], g["escape_time"] * g["lr"], "o", color=colour, alpha=0.7, label=label)
        axes[1].plot(per_T.index, per_T.ode * per_T.lr, "s", mfc="none", color="k",
                     label="ODE, same task" if colour == "tab:orange" else None)
        axes[1].plot(per_T.index, per_T.formula * per_T.lr, "_", color="r", ms=14,
                     label="formula" if colour == "tab:orange" else None)
        axes[2].plot(g["T"], g["rel_err_vs_ode"], "o", color=colour, label=label)
    axes[1].set_xscale("log")
    axes[1].set_title("real SCB tasks (N=3, Q=2): escape time x learning rate")
    axes[2].set_xscale("log")
    axes[2].set_yscale("log")
    axes[2].set_title("|SGD - ODE| / ODE escape, per run")
    axes[2].set(xlabel="context length T", ylabel="relative error")
    axes[2].grid(alpha=0.3)
    axes[2].legend(fontsize=7)
    _finish(fig, axes[:2], outdir, "scb_escape_time.png", "context length T", r"escape time ($\beta$ reaches 1/2)")
    return df


def fig_transfer(outdir: Path | None = None, quick: bool = True, *, device: str = "auto") -> pd.DataFrame:
    """Samples to escape (beta >= 1/2) on the correlated downstream task from scratch and from V
    pretrained for a fraction of t* (attention uniform): the ``transfer_skips_stage1`` claim's runs
    (:func:`~figures.scb.compare.transfer_table`), mean over seeds; x = the ODE from the same start."""
    df = transfer_table(quick, device=device)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    mean = df.groupby(["start", "T"], sort=False).agg(samples=("samples", "mean"),
                                                       ode=("ode_escape_steps", "first"), batch=("batch", "first"))
    for label, g in mean.groupby(level="start", sort=False):
        T = g.index.get_level_values("T")
        line, = ax.plot(T, g["samples"], "o-", label=f"SGD, {label}")
        ax.plot(T, g["ode"] * g["batch"], "x--", color=line.get_color(), alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(f"SCB transfer (correlated P, mix {df['mix'].iloc[0]}), batch {int(df['batch'].iloc[0])}; x = ODE",
                 fontsize=9)
    _finish(fig, [ax], outdir, "scb_transfer.png", "context length T", r"samples to escape ($\beta \geq 1/2$)")
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
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.6))
    for ax, (title, M) in zip(axes[:3], [("ground truth q", task.Qm), ("linear (preconditioned)", out["preconditioned"]["attention"]),
                                         ("softmax", out["softmax"]["attention"])]):
        im = ax.imshow(M, aspect="auto", cmap="viridis", vmin=0, vmax=max(0.5, float(task.Qm.max())))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("query k")
        ax.set_ylabel("position")
    fig.colorbar(im, ax=axes[2], label=r"$a^{(k)}_t / \mathbf{1}^\top a^{(k)}$")
    for variant, d in out.items():
        tr = d["trajectory"]
        axes[3].plot(tr["step"], tr["population_loss"], label=variant)
    axes[3].set_title("population loss", fontsize=9)
    axes[3].set_xlabel("optimiser step")
    axes[3].legend(fontsize=7)
    fig.tight_layout()
    finish_figure(fig, outdir, "scb_softmax_vs_linear.png")
    return out


#: the paper table's ``figures`` slot: every SCB figure, in order (collected by figures.core.make_figures)
FIGURES = (fig_overlay, fig_escape_time, fig_transfer, fig_softmax_vs_linear, fig_l1_vs_sgd)
