"""The topic paper's figures (the paper row's ``figures`` slot: :data:`FIGURES`).

Each figure function is ``fig_x(outdir | None, quick, *, device) -> data``: it writes its files
through ``finish_figure`` / ``save_table`` (the collector :func:`figures.core.make_figures` records
them and writes ``report.json``) and returns the data it plotted. The runs come from
:mod:`.compare` (cached per process); the real-text figure from :mod:`.text`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from theory import topic as th

from ..core import finish_figure, overlay, save_table
from .compare import stage1_comparison, table_rows, two_stage_run
from .text import fig_topic_ratios

__all__ = ["FIGURES", "gamma_star_grid", "fig_topic_mode", "fig_value_heatmap", "fig_two_stage",
           "fig_attention_table", "fig_gamma_star", "fig_topic_ratios"]


def gamma_star_grid(quick: bool = True) -> list[dict]:
    """``gamma*`` of the theory variant (numerical optimum, tied MASK logits) for a grid of
    ``T`` and ``tau``; ``1 + T p_c/p_r`` for the code variant."""
    rows = []
    for T_ in ((5, 10) if quick else (5, 10, 20)):
        for tau_ in ((1, 2, 3) if quick else (1, 2, 3, 4, 5)):
            if tau_ >= T_:
                continue
            cfg = th.TopicConfig.preset("gamma_star", quick, T=T_, tau=tau_)
            rows.append({"T": T_, "tau": tau_, "gamma_star": th.stage2_optimum(cfg)["gamma"],
                         "gamma_star_code": 1 + T_ * cfg.p_c / cfg.p_r})
    return rows


def fig_topic_mode(outdir, quick: bool = True, *, device: str = "auto") -> dict:
    st = stage1_comparison(quick=quick, device=device)
    fig = overlay(st["ode"], st["traj"], ["topic_mode", "block_difference", "within_topic_mode"],
                  title="stage 1: W_V eigenvalues, trained (SGD) vs derived ODE", xlabel="SGD step")
    fig.axes[1].axhline(st["block_difference"]["theory_optimum"], color="tab:green", ls=":", lw=1,
                        label="1/(v a) (closed form)")
    fig.axes[1].legend(fontsize=7)
    finish_figure(fig, outdir, "stage1_topic_mode.png")
    return {"rel_l2": st["rel_l2"], "block_difference": st["block_difference"]}


def fig_value_heatmap(outdir, quick: bool = True, *, device: str = "auto") -> np.ndarray:
    matrix = stage1_comparison(quick=quick, device=device)["experiment"].value_like_matrix()
    fig, ax = plt.subplots(figsize=(4.6, 4))
    lim = np.abs(matrix).max()
    im = ax.imshow(matrix, cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set_title("W_V after stage 1 (one-hot, uniform attention)", fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    finish_figure(fig, outdir, "stage1_value_heatmap.png")
    return matrix


def fig_two_stage(outdir, quick: bool = True, *, device: str = "auto") -> dict:
    traj, pred, check = two_stage_run(quick=quick, device=device)
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.3))
    t = traj["time"].values
    for ax, n in zip(axes, ["norm_W_K", "norm_W_Q", "norm_W_V", "gamma_hat"]):
        ax.plot(t, traj[n].values, label="trained")
        ax.axvline(check["onset_predicted"], color="k", ls="--", lw=1, label="predicted onset")
        ax.axvspan(check["onset_predicted"] - check["onset_tolerance"], check["onset_predicted"]
                   + check["onset_tolerance"], color="k", alpha=0.07, label="derived tolerance")
        ax.axvline(pred["stage1_80pct"], color="gray", ls=":", lw=1, label="stage 1 (80%)")
        ax.set_title(n.replace("_", " "), fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    sol = pred["solution"]
    axes[0].plot(sol["time"], np.minimum(sol["kq_scale"].values, 10), color="tab:red", lw=0.8,
                 label="reduced K/Q scale")
    axes[0].set_ylim(0, max(1.5, float(traj["norm_W_K"].max()) * 1.05))
    axes[0].set_xlim(0, t[-1])
    axes[3].axhline(check["gamma_star"], color="tab:green", ls="-.", label="gamma* (theory)")
    axes[0].legend(fontsize=7)
    axes[3].legend(fontsize=7)
    fig.suptitle(f"joint training from small init: measured onset {check['onset_measured']:.0f} vs predicted "
                 f"{check['onset_predicted']:.0f} ± {check['onset_tolerance']:.0f} steps", fontsize=10)
    fig.tight_layout()
    finish_figure(fig, outdir, "two_stage_norms.png")
    return check


def fig_attention_table(outdir, quick: bool = True, *, device: str = "auto") -> list[dict]:
    rows = table_rows(quick, device)
    if outdir is not None:
        save_table(rows, outdir, "attention_table.csv")
    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels = [f"{r['optimizer']} {r['lr']}\nonset " + ("n/a" if r["onset_predicted"] is None
                                                      else f"{r['onset_predicted']:.2g}")
              + ("\n(dropped)" if r["dropped"] else "") for r in rows]
    x = np.arange(len(rows))
    for i, (k, c) in enumerate((("same_word", "tab:blue"), ("same_topic_other_word", "tab:green"),
                                ("different_topic", "tab:red"))):
        ax.bar(x + (i - 1) * 0.25, [r.get(k, np.nan) for r in rows], 0.25, label=k.replace("_", " "), color=c)
    ax.axhline(next(r["uniform"] for r in rows if "uniform" in r), color="k", ls="--", lw=1, label="uniform")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("average attention")
    ax.set_title(f"trained attention (CE, code masking), LDA T=v=10, {rows[0]['steps']} steps"
                 + (" (quick: too short to be meaningful)" if rows[0]["steps"] < 500 else ""), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    finish_figure(fig, outdir, "attention_table.png")
    return rows


def fig_gamma_star(outdir, quick: bool = True, *, device: str = "auto") -> list[dict]:
    rows = gamma_star_grid(quick)
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for T_ in sorted({r["T"] for r in rows}):
        rs = [r for r in rows if r["T"] == T_]
        line, = ax.plot([r["tau"] for r in rs], [r["gamma_star"] for r in rs], "o-", label=f"T={T_} (theory keys)")
        ax.axhline(rs[0]["gamma_star_code"], color=line.get_color(), ls="--", lw=1,
                   label=f"T={T_} code keys: 1+T p_c/p_r")
    ax.set_xlabel("tau (topics per document)")
    ax.set_ylabel("gamma* = ((v-1) alpha + beta)/v")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    finish_figure(fig, outdir, "gamma_star.png")
    return rows


#: the figures of ``tdyn figures topic``, in order (the row's ``figures`` slot)
FIGURES = (fig_topic_mode, fig_value_heatmap, fig_two_stage, fig_attention_table, fig_gamma_star, fig_topic_ratios)
