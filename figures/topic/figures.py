"""The topic paper's figures (the paper row's ``figures`` slot: :data:`FIGURES`).

Each figure function is ``fig_x(outdir | None, quick, *, device) -> data``: it writes its files
through ``finish_figure`` / ``save_table`` (the collector :func:`figures.make.make_figures` records
them and writes ``report.json``) and returns the data it plotted. The runs come from
:mod:`.compare` and :mod:`.calibration` (cached per process); the real-text figure from :mod:`.text`.
Style: :mod:`figures.style` (labels with units and the derivation's symbols, at most three panels a
row, legends outside the data, colourbars on heatmaps).
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from theory import topic as th

from .. import style
from ..core import finish_figure, overlay, save_table
from . import calibration as cal
from .compare import stage1_comparison, table_rows, two_stage_run
from .text import fig_topic_ratios

__all__ = ["FIGURES", "gamma_star_grid", "fig_topic_mode", "fig_value_heatmap", "fig_two_stage",
           "fig_attention_table", "fig_gamma_star", "fig_topic_ratios", "fig_sde_residual", "fig_sde_calibration"]

#: the value matrix and the step axis, as mathtext
W_V = "$W^V$"
STEP = style.axis_label("SGD step", symbol="$t$")


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


def _relegend(fig, axes) -> None:
    """Replace a figure's legends by one below the panels naming every labelled curve."""
    for leg in list(fig.legends):
        leg.remove()
    style.legend_outside(fig, axes)


def fig_topic_mode(outdir, quick: bool = True, *, device: str = "auto") -> dict:
    st = stage1_comparison(quick=quick, device=device)
    system = th.stage1_system(st["config"].keys)
    fig = overlay(st["ode"], st["traj"], ["topic_mode", "block_difference", "within_topic_mode"], system=system,
                  title=f"stage 1: eigen-coordinates of {W_V}, trained by SGD vs the derived ODE",
                  xlabel=STEP, ylabels={"topic_mode": r"topic mode $\omega_2$",
                                        "block_difference": r"block difference $\omega_2 / v$",
                                        "within_topic_mode": r"within-topic mode $\omega_1 = A - B$"})
    fig.axes[1].axhline(st["block_difference"]["theory_optimum"], **style.role("reference"),
                        label="closed-form optimum $1/(v a)$")
    _relegend(fig, fig.axes)
    finish_figure(fig, outdir, "stage1_topic_mode.png")
    return {"rel_l2": st["rel_l2"], "block_difference": st["block_difference"]}


def fig_value_heatmap(outdir, quick: bool = True, *, device: str = "auto") -> np.ndarray:
    st = stage1_comparison(quick=quick, device=device)
    matrix = st["experiment"].value_like_matrix()
    cfg = st["config"]
    fig, ax = style.panels(1, size=(4.6, 3.9))
    ax = ax[0]
    lim = float(np.abs(matrix).max()) or 1.0
    style.heatmap(ax, matrix, xlabel="input token id $j$ (key)", ylabel="output token id $i$",
                  cbar_label=f"entry {W_V}" + "$_{ij}$", cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.invert_yaxis()  # matrix layout: row 0 on top
    for edge in np.arange(cfg.v, cfg.n_words, cfg.v) - 0.5:  # topic blocks (ids t v ... t v + v - 1)
        ax.axhline(edge, color="0.5", lw=0.4)
        ax.axvline(edge, color="0.5", lw=0.4)
    ax.set_title(f"{W_V} after stage 1 ({cfg.T} topics of {cfg.v} words, then [MASK]; one-hot, uniform attention)")
    finish_figure(fig, outdir, "stage1_value_heatmap.png")
    return matrix


def fig_two_stage(outdir, quick: bool = True, *, device: str = "auto") -> dict:
    traj, pred, check = two_stage_run(quick=quick, device=device)
    t = traj["time"].values
    fig, axes = style.panels(3, size=(3.6, 2.8))
    on_m, on_p, tol = check["onset_measured"], check["onset_predicted"], check["onset_tolerance"]
    ax = axes[0]
    n = max(1, t.size // 25)
    ax.plot(t, traj["norm_W_K"].values, **style.role("practice", color="#0072B2", marker="o"), markevery=(0, n),
            label=r"trained $\|W^K\|_F$")
    ax.plot(t, traj["norm_W_Q"].values, **style.role("practice", color="#009E73", marker="s", linestyle="-."),
            markevery=(n // 2, n), label=r"trained $\|W^Q\|_F$")
    ymax = max(1.5, float(max(traj["norm_W_K"].max(), traj["norm_W_Q"].max())) * 1.1)
    sol = pred["solution"]
    k = np.asarray(sol["kq_scale"].values, float)
    ts = np.asarray(sol["time"].values, float)
    inside = (ts <= t[-1]) & (k <= ymax)  # the reduced curve stays inside the panel
    ax.plot(ts[inside], k[inside], **style.role("theory"), label="reduced K/Q scale $k$ (two-stage ODE)")
    ax.set_ylim(0, ymax)
    ax.set_ylabel(r"norms $\|W^K\|_F$, $\|W^Q\|_F$")
    axes[1].plot(t, traj["norm_W_V"].values, **style.role("practice"), markevery=max(1, t.size // 25),
                 label=r"trained $\|W^V\|_F$")
    axes[1].set_ylabel(r"norm $\|W^V\|_F$")
    axes[2].plot(t, traj["gamma_hat"].values, **style.role("practice", color="#CC79A7", marker="^"),
                 markevery=max(1, t.size // 25), label=r"trained $\hat\gamma$")
    axes[2].axhline(check["gamma_star"], **style.role("theory"), label=r"stage-2 optimum $\gamma^*$ ($W^V$ frozen)")
    axes[2].set_ylabel(r"attention ratio $\hat\gamma$")
    marks = ((on_m, dict(color="#D55E00", ls="-"), fr"measured onset ($\|W^K\|_F \geq 1$): {on_m:.0f}"),
             (on_p, dict(color="black", ls="--"), f"predicted onset: {on_p:.0f} ± {tol:.0f} (shaded)"),
             (pred["stage1_80pct"], dict(color="0.4", ls=":"), f"stage 1 at 80 %: {pred['stage1_80pct']:.0f}"))
    for a in axes:
        a.axvspan(on_p - tol, on_p + tol, color="0.5", alpha=0.12, lw=0)
        for x, kw, label in marks:
            a.axvline(x, lw=1.0, label=label, **kw)
        a.set_xlabel(STEP)
        a.set_xlim(0, t[-1])
    axes[0].axhline(1.0, **style.role("reference"), label=r"onset threshold $\|W^K\|_F = 1$")
    style.legend_outside(fig, axes, ncols=3)
    fig.suptitle(f"joint training from small init: stage-2 onset measured at step {on_m:.0f}, "
                 f"predicted {on_p:.0f} ± {tol:.0f}")
    finish_figure(fig, outdir, "two_stage_norms.png")
    return check


#: the table's attention classes: (row key, label, role style)
_CLASSES = (("same_word", "same word (incl. itself)", dict(color="#0072B2", marker="o")),
            ("same_topic_other_word", "same topic, other word", dict(color="#009E73", marker="s")),
            ("different_topic", "different topic", dict(color="#D55E00", marker="^")))


def fig_attention_table(outdir, quick: bool = True, *, device: str = "auto") -> list[dict]:
    """The paper's attention table (docs/papers/topic.md §5.6): the average attention a word query pays to each key
    class, per optimiser row, against uniform attention. Rows whose predicted stage-2 onset is far
    beyond the step budget are not trained (``compare.plan_row``): they are listed under the axes,
    not drawn as empty groups."""
    rows = table_rows(quick, device)
    if outdir is not None:
        save_table(rows, outdir, "attention_table.csv")
    ran = [r for r in rows if not r["dropped"]]
    fig, ax = style.panels(1, size=(5.6, 3.2))
    ax = ax[0]
    x = np.arange(len(ran))
    for i, (key, label, kw) in enumerate(_CLASSES):
        ax.plot(x + (i - 1) * 0.12, [r[key] for r in ran], linestyle="none", markersize=6, label=label, **kw)
    uniform = next(r["uniform"] for r in ran)
    ax.axhline(uniform, **style.role("reference"), label=f"uniform attention 1/L = {uniform:g}")
    ax.set_xticks(x, [f"{r['optimizer'].upper() if r['optimizer'] == 'sgd' else 'Adam'} lr {r['lr']:g}" for r in ran])
    ax.set_xlim(-0.5, len(ran) - 0.5)
    ax.set_xlabel("optimiser and learning rate (table row)")
    ax.set_ylabel("average attention weight")
    dropped = [r for r in rows if r["dropped"]]
    note = ", ".join(f"SGD lr {r['lr']:g} ({r['onset_predicted']:.1e} steps)" for r in dropped)
    ax.set_title(f"trained attention, LDA T = v = 10, CE, code masking, {rows[0]['steps']} steps"
                 + (" (quick: too short to move attention)" if rows[0]["steps"] < 500 else "")
                 + (f"\nnot trained, predicted stage-2 onset far beyond the budget: {note}" if note else ""))
    style.legend_outside(fig, [ax], ncols=2)
    finish_figure(fig, outdir, "attention_table.png")
    return rows


def fig_gamma_star(outdir, quick: bool = True, *, device: str = "auto") -> list[dict]:
    rows = gamma_star_grid(quick)
    fig, ax = style.panels(1, size=(4.4, 3.2))
    ax = ax[0]
    marks = "osD^"
    for i, T_ in enumerate(sorted({r["T"] for r in rows})):
        rs = [r for r in rows if r["T"] == T_]
        line, = ax.plot([r["tau"] for r in rs], [r["gamma_star"] for r in rs], marker=marks[i % 4], linestyle="-",
                        label=f"$T = {T_}$, theory keys (numerical optimum)")
        ax.axhline(rs[0]["gamma_star_code"], color=line.get_color(), ls="--", lw=1,
                   label=f"$T = {T_}$, code keys: $1 + T p_c/p_r$")
    ax.set_xlabel(style.axis_label("topics per document", symbol=r"$\tau$"))
    ax.set_ylabel(style.axis_label("stage-2 optimum", symbol=r"$\gamma^* = ((v-1)\alpha + \beta)/v$"))
    style.integer_ticks(ax, "x")
    ax.set_yscale("log")
    style.legend_outside(fig, [ax], ncols=2)
    finish_figure(fig, outdir, "gamma_star.png")
    return rows


def fig_sde_residual(outdir, quick: bool = True, *, device: str = "auto") -> dict:
    """The minibatch SDE (band of its paths) beside the derived ODE and the real SGD runs: the
    off-symmetric residual in the context span (what the derived noise governs), the whole block's
    residual (SGD's finite-N excess) and the topic mode."""
    c = cal.calibration(quick, cal.device_type(device))
    ode = stage1_comparison(quick=quick, device=device)["ode"]
    labels = {"context_residual": r"residual $\rho_c$ (context span)",
              "off_symmetric_residual": r"residual $\rho$ (whole word block)",
              "topic_mode": r"topic mode $\omega_2$"}
    cfg = c["config"]
    fig = overlay(ode, c["runs"], list(labels), sde=c["sde"], ylabels=labels, xlabel=STEP,
                  title=(r"stage 1, off-symmetric residual $\rho = \|W - \sum_k \omega_k \Pi_k\|_F$: minibatch SDE "
                         f"({c['n_paths']} paths) vs {c['n_runs']} SGD runs (N = {cfg['N']}, B = {cfg['batch']}, "
                         f"lr = {cfg['lr']:g})"))
    finish_figure(fig, outdir, "sde_residual_overlay.png")
    return {k: v for k, v in c.items() if k not in ("sde", "runs")}


def fig_sde_calibration(outdir, quick: bool = True, *, device: str = "auto") -> dict:
    """Coverage of the SGD runs by the SDE's 50/80/90 % bands (run-bootstrap 90 % intervals) and
    the variance ratio SDE/SGD over time (90 % F intervals), context residual vs whole residual."""
    c = cal.calibration(quick, cal.device_type(device))
    fig, axes = style.panels(2, size=(3.8, 2.9))
    levels = np.array(cal.LEVELS)
    for i, (name, label, kw) in enumerate(((cal.OBSERVABLE, "context residual", dict(color="#0072B2", marker="o")),
                                           (cal.TOTAL, "whole residual", dict(color="#D55E00", marker="s")))):
        cov = c[name]["coverage"]
        est = np.array([cov[f"{lv:g}"]["coverage"] for lv in levels])
        lo = np.array([cov[f"{lv:g}"]["low"] for lv in levels])
        hi = np.array([cov[f"{lv:g}"]["high"] for lv in levels])
        x = levels + (i - 0.5) * 0.012
        axes[0].vlines(x, lo, hi, color=kw["color"], lw=1.2)  # 90 % run-bootstrap intervals
        axes[0].plot(x, est, linestyle="none", label=f"{label} (SGD in SDE band)", **kw)
        vr = c[name]["variance_ratio"]
        t = np.asarray(vr["time"])
        axes[1].plot(t, vr["ratio"], linestyle="-" if i == 0 else "--", label=f"{label}: pooled "
                     f"{vr['pooled']:.2f} [{vr['pooled_low']:.2f}, {vr['pooled_high']:.2f}]", color=kw["color"])
        axes[1].fill_between(t, vr["low"], vr["high"], color=kw["color"], alpha=0.15, lw=0)
    grid = np.linspace(0.45, 0.95, 2)
    axes[0].plot(grid, grid, **style.role("theory"), label="nominal (calibrated SDE)")
    axes[0].fill_between(grid, grid - 0.05, grid + 0.05, color="0.5", alpha=0.15, lw=0, label="nominal ± 5 points")
    axes[0].set_xlabel(style.axis_label("band level", symbol=r"$\ell$"))
    axes[0].set_ylabel("fraction of SGD points inside")
    axes[1].axhline(1.0, **style.role("reference"))
    axes[1].set_yscale("log")
    axes[1].yaxis.set_major_locator(LogLocator(base=2))  # 0.25, 0.5, 1, 2, 4 rather than 5 x 10^-1
    axes[1].yaxis.set_major_formatter(FormatStrFormatter("%g"))
    axes[1].yaxis.set_minor_formatter(NullFormatter())
    axes[1].set_xlabel(STEP)
    axes[1].set_ylabel(r"variance ratio $\mathrm{Var}_\mathrm{SDE} / \mathrm{Var}_\mathrm{SGD}$")
    style.legend_outside(fig, axes, ncols=2)
    fig.suptitle(f"SDE calibration against {c['n_runs']} SGD runs (t > 0)")
    finish_figure(fig, outdir, "sde_calibration.png")
    return {k: v for k, v in c.items() if k not in ("sde", "runs")}


#: the figures of ``tdyn figures topic``, in order (the row's ``figures`` slot)
FIGURES = (fig_topic_mode, fig_value_heatmap, fig_two_stage, fig_attention_table, fig_gamma_star, fig_sde_residual,
           fig_sde_calibration, fig_topic_ratios)
