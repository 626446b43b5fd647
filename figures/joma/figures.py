"""JoMA figures (docs/papers/joma.md §5). Every figure is ``fig_x(outdir | None, quick, *, device) ->
data`` ending in :func:`figures.core.finish_figure` (or writing a table); :data:`FIGURES` is the
paper row's ``figures`` slot, run by the one collector :func:`figures.make.make_figures` (`tdyn
figures joma`), which records every file written and adds ``report.json``. The measurements and
claims are in :mod:`.compare` / :mod:`.claims`, the real-text figures in :mod:`.text`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.special import erfinv  # noqa: E402

import simulate as sim  # noqa: E402
from empirical import joma as E  # noqa: E402
from theory import joma as J  # noqa: E402
from theory.errors import SolverError  # noqa: E402

from ..core import band_coverage, finish_figure, overlay, rel_l2, save_table  # noqa: E402
from ..style import axis_label, heatmap, integer_ticks, legend_outside, panels, role  # noqa: E402
from ..report import Break  # noqa: E402
from .compare import derivation_check, headline, learning_order, stack  # noqa: E402
from .text import fig_wikitext  # noqa: E402

__all__ = ["FIGURES", "fig2_invariant", "fig3_component_growth", "fig4_nonlinear", "fig_theorem2", "fig_block_overlay",
           "fig_headline", "fig_sde_overlay", "where_agreement_breaks", "fig_learning_order", "fig_layers_and_table1"]


def _dev(device):
    return "cpu" if device == "auto" else device


#: x labels of the time axes (ODE time of the SGD variants is ``lr * step``; Adam's is the step)
T_ODE = axis_label("time", symbol=r"$t = \eta\,k$")
STEPS = axis_label("minibatch", symbol="$k$")
ENTROPY = axis_label("attention entropy", "nats", r"$H$")


def _pairs(ax, t_pr, Y_pr, t_th, Y_th, practice: str, theory_label: str):
    """Per component ``l`` (columns of ``Y``), in the component's colour from a sequential map (one
    colour per component; :func:`_component_colourbar` names them): the theory as a dashed line and
    the trained curve on top of it, a thin line with markers, so neither hides the other. Each
    role is named once (``practice``, ``theory_label``). Returns the colour map's mappable."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import BoundaryNorm

    n = Y_pr.shape[1]
    cmap = plt.get_cmap("viridis", n)
    every = max(1, len(t_pr) // 25)
    for l in range(n):
        ax.plot(t_th, Y_th[:, l], color=cmap(l), ls="--", lw=1.2, zorder=2, label=theory_label if l == 0 else None)
        ax.plot(t_pr, Y_pr[:, l], color=cmap(l), ls="-", lw=0.8, marker="o", ms=2.5, markevery=(l % every, every),
                zorder=4, label=practice if l == 0 else None)
    return ScalarMappable(BoundaryNorm(np.arange(0.5, n + 1), n), cmap)


def _component_colourbar(fig, mappable, axes, symbol: str = "$l$"):
    """The colourbar naming each component's colour (integer ticks), and the figure legend's handles
    recoloured neutral: in the legend only the line style (dashed theory, markers trained) speaks."""
    n = mappable.norm.N
    fig.colorbar(mappable, ax=axes, ticks=range(1, n + 1), label=axis_label("component", symbol=symbol))


def _neutral_legend(legend, labels):
    """Recolour the handles of ``labels`` (the roles drawn in every component's colour) neutral."""
    for h, t in [] if legend is None else zip(legend.legend_handles, legend.get_texts()):
        if t.get_text() in labels:
            h.set_color("0.25")

def fig2_invariant(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Fig. 2: NC(zhat, z) and its two terms over training, Gaussian and random X (softmax toy,
    linear MLP), plus the nonlinear-MLP (ReLU) variant on Gaussian X as a third row."""
    out = {}
    rows = (("gaussian", "linear"), ("random", "linear"), ("gaussian", "relu"))
    fig, axes = plt.subplots(len(rows), 2, figsize=(8, 2.6 * len(rows)), layout="constrained", squeeze=False)
    curves = (("nc_zhat_z", "-", r"NC$(\hat{z}, z)$"), ("nc_term1_z", "--", "first term"),
              ("nc_term2_z", "-.", r"$\bar{b}$ term"), ("nc_change", ":", "NC of the changes"))
    for row, (data, act) in enumerate(rows):
        cfg = J.JomaConfig.preset("toy", quick, data=data, activation=act)
        traj, _ = E.train(cfg, device=_dev(device))
        X, _ = J.make_data(cfg)
        heatmap(axes[row, 0], X.T, xlabel=axis_label("class label", symbol="$y$"),
                ylabel=axis_label("contextual token", symbol="$l$"),
                cbar_label=axis_label("probability", symbol=r"$P(l \mid y)$"), cmap="viridis")
        axes[row, 0].set_title(f"{data} X, {act} MLP")
        it = traj["step"].values
        for i, (name, ls, lab) in enumerate(curves):
            if name in traj:
                axes[row, 1].plot(it, traj[name].values, color=f"C{i}", ls=ls, label=lab)
        axes[row, 1].set_xlabel(STEPS)
        axes[row, 1].set_ylabel("normalised correlation")
        axes[row, 1].set_ylim(-1.05, 1.05)
        out[data if act == "linear" else f"{data}_{act}"] = traj
    legend_outside(fig, [ax for ax in axes[:, 1]])
    finish_figure(fig, outdir, "fig2_invariant_nc.png")
    return out


def fig3_component_growth(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Fig. 3: V = (U^T W)^T (K units x Mc tokens) at init and after training, and the first unit's
    first four components over time."""
    cfg = J.JomaConfig.preset("toy", quick)
    traj, exp = E.train(cfg, device=_dev(device))
    W0, _ = J.initial_parameters(cfg)
    V0 = W0[: cfg.Mc].T
    _, V1, _ = exp.model.reduced()
    fig, axes = panels(3, size=(3.6, 3.0))
    for ax, V, when in ((axes[0], V0, "at initialisation"), (axes[1], V1, "after training")):
        lim = float(np.abs(V).max()) or 1.0
        heatmap(ax, V, xlabel=axis_label("contextual token", symbol="$l$"),
                ylabel=axis_label("hidden unit", symbol="$k$"), cbar_label=r"MLP weight $v_{kl} = (U^\top W)_{lk}$",
                cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.set_title(r"$V = (U^\top W)^\top$ " + when)
    axes[1].add_patch(plt.Rectangle((-0.5, -0.5), cfg.Mc, 4, fill=False, ec="k", lw=1.5))
    axes[1].set_title(r"$V$ after training (units 1-4 boxed)")
    for l in range(4):
        axes[2].plot(traj["step"].values, traj[f"v_1_{l + 1}"].values, color=f"C{l}", label=f"$v_{{1,{l + 1}}}$")
    axes[2].set_xlabel(STEPS)
    axes[2].set_ylabel(axis_label("MLP weight", symbol="$v_{1l}$"))
    legend_outside(fig, axes[2:])
    finish_figure(fig, outdir, "fig3_component_growth.png")
    return {"V_init": V0, "V_final": V1, "trajectory": traj}


def _t_min(ds) -> float:
    """Time of the entropy minimum (the drop's bottom; > 0)."""
    H = ds["attention_entropy"].values
    t = ds["time"].values
    return float(t[1:][np.nanargmin(H[1:])])


def fig4_nonlinear(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Fig. 4: reduced nonlinear dynamics (official softmax(v^2/3) variant, eta = 0.02, 5000
    iterations -> ODE time 100; and the paper's exp ODE), components coloured by iteration, and the
    entropy drop and bounce; third panel: the exp ODE, the softmax variant and the converging probe
    toy on one axis, time in units of each curve's own entropy minimum ``t / t_min`` (entropy not
    normalised)."""
    mu = np.array(J.FIG4_MU)
    n = len(mu)
    eta, T = 0.02, 3.0
    t_soft = eta * np.arange(0, 5001, 25)
    soft = sim.solve(J.nonlinear_softmax_system(n), {**{f"mu_{j + 1}": m for j, m in enumerate(mu)}, "T": T},
                     np.full(n, 0.05), t_soft, backend="scipy", method="DOP853", rtol=1e-9, atol=1e-11)
    t_exp = np.linspace(0, 6, 301)
    expo = sim.solve(J.nonlinear_exp_system(n), {f"mu_{j + 1}": m for j, m in enumerate(mu)}, np.zeros(n),
                     t_exp, backend="scipy", method="DOP853", rtol=1e-9, atol=1e-11)
    probe, _ = E.train(J.JomaConfig.preset("probe", quick), device=_dev(device))
    fig, axes = panels(3, size=(3.8, 3.6))  # room for the colourbar above the first panel
    V = stack(soft, [f"v_{j + 1}" for j in range(n)])
    iters = soft["time"].values / eta
    keep = np.arange(0, V.shape[1], 4)
    lines = LineCollection([np.column_stack([np.arange(n), V[:, i]]) for i in keep], cmap="viridis", linewidths=0.8)
    lines.set_array(iters[keep])
    axes[0].add_collection(lines)
    axes[0].autoscale_view()
    # above its panel: beside it, its label would crowd the next panel's y label
    fig.colorbar(lines, ax=axes[0], location="top", label=axis_label("iteration", symbol="$k$"))
    axes[0].plot(np.arange(n), mu, **role("theory_alt"), label=r"target $\mu_j$ of each component")
    axes[0].set_xlabel(axis_label("sorted component", symbol="$j$"))
    axes[0].set_ylabel(axis_label("component", symbol="$v_j$"))
    integer_ticks(axes[0], "x")
    axes[0].set_title("the Fig. 4 script's components, coloured by iteration")
    axes[1].plot(iters, soft["attention_entropy"].values, color="C0",
                 label=r"the authors' Fig. 4 script: softmax$(v^2/3)$ weights")
    axes[1].axhline(J.fixed_point_entropy(mu, temperature=T), **role("reference"),
                    label="its entropy at the fixed point")
    axes[1].set_xlabel(axis_label("iteration", symbol="$k$"))
    axes[1].set_ylabel(ENTROPY)
    curves = {r"the paper's ODE, $\dot v \propto (\mu - v) \circ e^{v^2/2}$": expo,
              r"the authors' Fig. 4 script: softmax$(v^2/3)$ weights": soft,
              "a trained network (one token per class, run to convergence)": probe}
    looks = ({"color": "C1", "ls": "--"}, {"color": "C0", "ls": "-"},  # the script's curve as in panel 2
             {"color": "C3", "ls": ":", "marker": "o", "markersize": 2, "markevery": 8})
    for (lab, ds), look in zip(curves.items(), looks):
        t = ds["time"].values
        axes[2].plot(t[1:] / _t_min(ds), ds["attention_entropy"].values[1:], label=lab, **look)
    axes[2].set_xscale("log")
    axes[2].set_xlabel(axis_label("time / time of the minimum", symbol=r"$t / t_{\min}$"))
    axes[2].set_ylabel(ENTROPY)
    axes[2].set_title("the entropy drops, then bounces")
    legend_outside(fig, axes, ncols=2)
    finish_figure(fig, outdir, "fig4_nonlinear_entropy.png")
    runs = {"exp_ode": expo, "softmax_variant": soft, "trained": probe}  # stable keys, not the legend's words
    return {**runs, "t_min": {k: _t_min(v) for k, v in runs.items()},
            "bounce": {k: J.drops_then_bounces(v["attention_entropy"].values, 1e-9) for k, v in runs.items()}}


def fig_theorem2(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Theorem 2: ODE vs erfinv closed form up to 0.95 of the first blow-up time."""
    Delta = np.array([0.3, 0.2, 0.1, -0.05])
    t = np.linspace(0, 0.95 * J.blow_up_times(Delta).min(), 200)
    ode = sim.solve(J.theorem2_system(len(Delta), 1), {f"Delta_{l + 1}": d for l, d in enumerate(Delta)},
                    np.zeros(len(Delta)), t, backend="scipy", method="DOP853", rtol=1e-12, atol=1e-14)
    fig, (ax,) = panels(1, size=(4.6, 3.2))
    errs = []
    for l, d in enumerate(Delta):
        closed = np.sqrt(2) * erfinv(np.sqrt(2 / np.pi) * d * t)
        ax.plot(t, ode[f"v_{l + 1}"].values, color=f"C{l}", lw=2.5, alpha=0.6, label=rf"ODE, $\Delta_{l + 1} = {d:g}$")
        ax.plot(t, closed, **role("theory_alt", linewidth=0.8), label="closed form (erfinv)")
        errs.append(float(np.abs(ode[f"v_{l + 1}"].values - closed).max() / np.abs(closed).max()))
    ax.set_xlabel(axis_label("time", symbol="$t$"))
    ax.set_ylabel(axis_label("MLP weight", symbol="$v_l$"))
    ax.set_title(f"Theorem 2: largest relative error {max(errs):.1e}")
    legend_outside(fig, ncols=3)
    finish_figure(fig, outdir, "theorem2_closed_form.png")
    return {"relative_errors": errs}


def fig_block_overlay(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Derivation check: the fixed-top block (the ODE's own objective) vs the block ODE."""
    d = derivation_check("scipy", _dev(device))
    cfg, ode, traj = d["config"], d["ode"], d["traj"]
    fig, axes = panels(2, size=(4.0, 3.0))
    zn, vn = [f"z_{l + 1}" for l in range(cfg.Mc)], [f"v_1_{l + 1}" for l in range(cfg.Mc)]
    for ax, names, label in ((axes[0], zn, axis_label("attention logit", symbol="$z_l$")),
                             (axes[1], vn, axis_label("MLP weight", symbol="$v_{1l}$"))):
        sm = _pairs(ax, traj["time"].values, stack(traj, names).T, ode["time"].values, stack(ode, names).T,
                    "trained block (markers)", "block ODE (dashed)")
        ax.set_xlabel(T_ODE)
        ax.set_ylabel(label)
    _component_colourbar(fig, sm, axes)
    fig.suptitle("fixed top (the ODE's own objective): trained block vs block ODE")
    _neutral_legend(legend_outside(fig, axes, ncols=2), ("trained block (markers)", "block ODE (dashed)"))
    finish_figure(fig, outdir, "block_ode_vs_trained.png")
    return {"ode": ode, "trained": traj}


def fig_learning_order(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Learning order on HBLT (spec §3.4): time for the query's attention logit to token l to reach
    half its final change, vs the co-occurrence rho^(2H) of the LCA height H."""
    lo = learning_order((0,) if quick else (0, 1, 2), _dev(device))
    df, rho_s, rho_v = lo["table"], lo["spearman_attention"], lo["spearman_mlp"]
    rho_means = lo["spearman_height_means"]
    fig, (ax,) = panels(1, size=(4.6, 3.4))
    ax.scatter(df["cooccurrence"], df["half_time_attention"], color="C0", label="attention logit $z_l$")
    ax.scatter(df["cooccurrence"], df["half_time_mlp"], color="C1", marker="x", label="MLP weight $v_l$")
    means = df.groupby("cooccurrence")["half_time_attention"].mean()
    ax.plot(means.index, means.values, **role("theory", linewidth=1.0), label="$z_l$: mean per LCA height")
    ax.set_xscale("log")
    ax.set_xlabel(axis_label("co-occurrence excess", symbol=r"$\rho^{2H}$"))
    ax.set_ylabel(axis_label("time to half the final change", symbol=r"$t_{1/2} = \eta\,k$"))
    ax.set_title(f"HBLT learning order: Spearman(H, t) attention {rho_s:.2f}, MLP {rho_v:.2f};\n"
                 f"over per-height means {rho_means:.2f}")
    legend_outside(fig, ncols=3)
    finish_figure(fig, outdir, "hblt_learning_order.png")
    save_table(df, outdir, "hblt_learning_order.csv")
    return {k: v for k, v in lo.items() if k != "by_height"}


def fig_layers_and_table1(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Multi-layer Transformer on the random-combination hierarchy: per-layer attention entropy and
    MLP stable rank over training (colour: layer; line style: seed; every curve in the legend);
    Table 1 analogue (score0/score1, mean +- std over seeds) as CSV."""
    seeds = (0, 1) if quick else (0, 1, 2, 3, 4)
    trajs = [E.train(J.JomaConfig.preset("hier", quick, seed=s), device=_dev(device))[0] for s in seeds]
    fig, axes = panels(2, size=(4.0, 3.0))
    nl = sum(1 for n in trajs[0].data_vars if n.startswith("attention_entropy_"))
    styles = ("-", "--", ":", "-.", (0, (5, 1)))
    for l in range(nl):
        for i, (s, tr) in enumerate(zip(seeds, trajs)):
            kw = dict(color=f"C{l}", ls=styles[i % len(styles)], alpha=0.8, label=f"layer {l}, seed {s}")
            axes[0].plot(tr["time"], tr[f"attention_entropy_{l}"], **kw)
            axes[1].plot(tr["time"], tr[f"stable_rank_{l}"], **kw)
    axes[0].set_ylabel(ENTROPY)
    axes[1].set_ylabel(axis_label("stable rank of the first MLP layer", symbol=r"$\|W\|_F^2 / \|W\|_2^2$"))
    for ax in axes:
        ax.set_xlabel(axis_label("Adam step", symbol="$k$"))
    legend_outside(fig, axes, ncols=len(seeds))
    cols = [n for n in trajs[0].data_vars if n.startswith("score")]
    final = pd.DataFrame([{c: float(tr[c].values[-1]) for c in cols} for tr in trajs])
    table = pd.DataFrame({"mean": final.mean(), "std": final.std(ddof=0), "n_seeds": len(seeds)})
    table.index.name = "score"
    finish_figure(fig, outdir, "layers_entropy_stable_rank.png")
    save_table(table, outdir, "table1_hierarchy_alignment.csv", index=True)
    return {"trajectories": trajs, "table": table}


def where_agreement_breaks(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu") -> list[Break]:
    """Trained block vs block ODE outside the comfortable regime:
    (a) larger SGD steps at the same ODE time, (b) integrating closer to the finite-time blow-up,
    (c) cross-entropy top (Assumption 1 broken: g = onehot - softmax(h) evolves; it equals the
    ODE's centred G only at init). One :class:`~figures.report.Break` per setting (diagnostics:
    no tolerance), also written as ``where_agreement_breaks.csv``."""
    base = J.JomaConfig()
    rows = []
    cases = [("lr", "fixed g", 0.005, 13.0), ("lr", "fixed g", 0.02, 13.0), ("lr", "fixed g", 0.1, 13.0),
             ("horizon", "fixed g", 0.005, 15.5), ("horizon", "fixed g", 0.005, 16.3),
             ("top", "CE top (Assumption 1 broken)", 0.005, 13.0), ("top", "CE top (Assumption 1 broken)", 0.005, 40.0)]
    if quick:
        cases = [c for c in cases if not (c[2] == 0.005 and c[3] == 16.3)]
    for factor, top_label, lr, t_end in cases:
        steps = int(round(t_end / lr))
        cfg = base.replace(lr=lr, steps=steps, log_every=max(steps // 60, 1))
        traj, _ = E.train(cfg, "ce" if top_label.startswith("CE") else "fixed", device=_dev(device))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            try:
                ode = sim.solve(J.problem(cfg), backend="scipy")
            except SolverError as err:  # the ODE blows up inside the window: keep the partial part
                ode = getattr(err, "partial", None)
        if ode is None or ode.sizes["time"] < 2:
            continue
        n = ode.sizes["time"]
        vn = [f"v_{k + 1}_{l + 1}" for k in range(cfg.K) for l in range(cfg.Mc)]
        zn = [f"z_{l + 1}" for l in range(cfg.Mc)]
        t_reached = float(ode["time"].values[-1])
        rows.append(Break(factor, {"regime": top_label, "lr": lr, "t_end": t_reached},
                          {"v": rel_l2(stack(traj, vn)[:, :n], stack(ode, vn)),
                           "z": rel_l2(stack(traj, zn)[:, :n], stack(ode, zn))},
                          note=f"trained block vs block ODE up to t = {t_reached:.4g}"
                               + (f" (the ODE blew up before t = {t_end:g})" if t_reached < t_end else "")))
    save_table(pd.json_normalize([b.to_json() for b in rows]), outdir, "where_agreement_breaks.csv")
    return rows


def fig_headline(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """The headline: the mixture network (softmax over positions, tanh MLP, CE) vs the JoMA block
    ODE with G frozen at G(0): z and the first unit's v, the entropy of the attention the network
    computes vs the ODE's (same time axis, no normalisation), and the drift of G (Assumption 1);
    dotted verticals: where the network leaves the ODE (the compare report's break times)."""
    h = headline(quick, _dev(device))
    cfg, t = h["config"], h["time"]
    fig, grid = plt.subplots(2, 2, figsize=(8.4, 6.0), layout="constrained")  # a 2 x 2 grid
    axes = list(grid.ravel())
    sm = _pairs(axes[0], t, h["net"]["z"], t, h["theory"]["z"], "network (markers)",
                "JoMA ODE, $G$ frozen at $G(0)$ (dashed)")
    _pairs(axes[1], t, h["net"]["v"][:, : cfg.Mc], t, h["theory"]["v"][:, : cfg.Mc], "network (markers)",
           "JoMA ODE, $G$ frozen at $G(0)$ (dashed)")
    _component_colourbar(fig, sm, axes[:2])
    axes[0].set_ylabel(axis_label("attention logit", symbol="$z_l$"))
    axes[1].set_ylabel(axis_label("MLP weight", symbol="$v_{1l}$"))
    axes[2].plot(t, h["H_net"], **role("practice"), markevery=max(1, len(t) // 40), label="network's attention")
    axes[2].plot(t, h["H_ode"], **role("theory"), label="ODE's $z$, same sequences")
    axes[2].set_ylabel(ENTROPY)
    axes[2].set_title("attention entropy over positions")
    axes[3].plot(t, h["drift"], color="C0", label="network's gradient drift")
    axes[3].axhline(0.1, **role("reference"))
    axes[3].set_ylabel(axis_label("gradient drift", symbol=r"$\|G(t) - G(0)\| / \|G(0)\|$"))
    axes[3].set_title("Assumption 1 (dash-dot: 10%)")
    for k, tb in h["t_break"].items():
        if tb is not None:
            for ax in axes[:2]:
                ax.axvline(tb, color="r", ls=":", lw=0.8, label="network leaves the ODE (break time)")
    for ax in axes:
        ax.set_xscale("symlog", linthresh=10.0)
        ax.set_xlim(0, t[-1])
        ax.set_xlabel(T_ODE)
    _neutral_legend(legend_outside(fig, axes, ncols=3),
                    ("network (markers)", "JoMA ODE, $G$ frozen at $G(0)$ (dashed)"))
    finish_figure(fig, outdir, "headline_mixture_vs_ode.png")
    return {k: h[k] for k in ("time", "net", "theory", "H_net", "H_ode", "drift", "t_break", "rel_window", "rel_full")}


#: SGD runs drawn in the SDE overlay (the band and the coverage use all the claim's runs)
SHOWN_RUNS = 16


def fig_sde_overlay(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """The block SDE beside the ODE and real minibatch SGD (spec §2.7; :mod:`.calibration`'s
    protocol point ``lr = 0.01``, one row per step drawn with replacement): the block ODE (solid),
    the SDE's 10-90 % band (shaded, dashed edges, over 1024 paths: the ensemble the claim uses) and
    the first :data:`SHOWN_RUNS` SGD runs of the claim's seeds, for :data:`.calibration.OBSERVABLES`,
    up to the horizon. Returns the ODE, all runs, the band ensemble and, per observable, the
    fraction of the runs' points (``t > 0``) inside the 10-90 % band (:func:`figures.core.band_coverage`)."""
    from . import calibration as C

    cfg = C.protocol_config()
    sde, runs = C.calibration_cell(cfg.lr, cfg.batch, quick)
    ode = sim.solve(J.problem(cfg), backend="scipy")
    ode = ode.isel(time=np.nonzero(ode["time"].values <= C.HORIZON * (1 + 1e-12))[0])
    words = {"v": "MLP weight", "z": "attention logit", "invariant": "Theorem-1 invariant"}
    ylabels = {}
    for n in C.OBSERVABLES:
        kind, idx = n.split("_", 1)
        sym = "I_{%s}" % idx if kind == "invariant" else "%s_{%s}" % (kind, idx.replace("_", ""))
        ylabels[n] = axis_label(words[kind], symbol=f"${sym}$")
    shown = runs.isel(run=slice(0, SHOWN_RUNS))
    fig = overlay(ode, shown, list(C.OBSERVABLES), sde=sde, ylabels=ylabels, xlabel=T_ODE,
                  title=f"block SDE vs minibatch SGD: lr = {cfg.lr:g}, B = {cfg.batch} (band: {sde.sizes['path']} SDE "
                        f"paths; {shown.sizes['run']} of the claim's {runs.sizes['run']} SGD runs drawn)")
    finish_figure(fig, outdir, "sde_band_vs_sgd.png")
    return {"ode": ode, "runs": runs, "sde": sde,
            "coverage_10_90": {n: band_coverage(sde, runs, n, t_min=1e-12) for n in C.OBSERVABLES}}


#: the paper row's ``figures`` slot: every JoMA figure, in order (the real-text ones last)
FIGURES = (fig2_invariant, fig3_component_growth, fig4_nonlinear, fig_theorem2, fig_block_overlay, fig_headline,
           fig_sde_overlay, fig_learning_order, fig_layers_and_table1, where_agreement_breaks, fig_wikitext)
