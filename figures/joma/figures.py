"""JoMA figures (papers/joma.md §5). Every figure is ``fig_x(outdir | None, quick, *, device) ->
data`` ending in :func:`figures.core.finish_figure` (or writing a table); :data:`FIGURES` is the
paper row's ``figures`` slot, run by the one collector :func:`figures.core.make_figures` (`tdyn
figures joma`), which records every file written and adds ``report.json``. The measurements and
claims are in :mod:`.compare` / :mod:`.claims`, the real-text figures in :mod:`.text`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.special import erfinv  # noqa: E402

import simulate as sim  # noqa: E402
from empirical import joma as E  # noqa: E402
from theory import joma as J  # noqa: E402
from theory.errors import SolverError  # noqa: E402

from ..core import finish_figure, rel_l2, save_table  # noqa: E402
from ..report import Break  # noqa: E402
from .compare import derivation_check, headline, learning_order, stack  # noqa: E402
from .text import fig_wikitext  # noqa: E402

__all__ = ["FIGURES", "fig2_invariant", "fig3_component_growth", "fig4_nonlinear", "fig_theorem2", "fig_block_overlay",
           "fig_headline", "where_agreement_breaks", "fig_learning_order", "fig_layers_and_table1"]


def _dev(device):
    return "cpu" if device == "auto" else device


def fig2_invariant(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Fig. 2: NC(zhat, z) and its two terms over training, Gaussian and random X (softmax toy,
    linear MLP), plus the nonlinear-MLP (ReLU) variant on Gaussian X as a third row."""
    out = {}
    rows = (("gaussian", "linear"), ("random", "linear"), ("gaussian", "relu"))
    fig, axes = plt.subplots(len(rows), 2, figsize=(9, 3.2 * len(rows)))
    for row, (data, act) in enumerate(rows):
        cfg = J.JomaConfig.preset("toy", quick, data=data, activation=act)
        traj, _ = E.train(cfg, device=_dev(device))
        X, _ = J.make_data(cfg)
        axes[row, 0].imshow(X.T, aspect="auto", cmap="viridis")
        axes[row, 0].set_xlabel("Class label y")
        axes[row, 0].set_ylabel("Contextual token index l")
        axes[row, 0].set_title(f"X ({data}), {act} MLP", fontsize=9)
        it = traj["step"].values
        for name, style, lab in (("nc_zhat_z", "r-", "NC(zhat, z)"), ("nc_term1_z", "g--", "first term"),
                                 ("nc_term2_z", "b--", "bbar term"), ("nc_change", "k:", "NC of changes")):
            if name in traj:
                axes[row, 1].plot(it, traj[name].values, style, label=lab)
        axes[row, 1].set_xlabel("Number of Batches")
        axes[row, 1].set_ylim(-1.05, 1.05)
        axes[row, 1].legend(fontsize=7)
        axes[row, 1].grid(alpha=0.3)
        out[data if act == "linear" else f"{data}_{act}"] = traj
    fig.tight_layout()
    finish_figure(fig, outdir, "fig2_invariant_nc.png")
    return out


def fig3_component_growth(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Fig. 3: U^T W at init and after training, and v_0's first components over time."""
    cfg = J.JomaConfig.preset("toy", quick)
    traj, exp = E.train(cfg, device=_dev(device))
    W0, _ = J.initial_parameters(cfg)
    V0 = W0[: cfg.Mc].T
    _, V1, _ = exp.model.reduced()
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    axes[0].imshow(V0, cmap="RdBu_r")
    axes[0].set_title("U^T W at init", fontsize=9)
    axes[1].imshow(V1, cmap="RdBu_r")
    axes[1].add_patch(plt.Rectangle((-0.5, -0.5), cfg.Mc, 4, fill=False, ec="k", lw=1.5))
    axes[1].set_title("U^T W after training (first 4 rows boxed)", fontsize=9)
    for l in range(4):
        axes[2].plot(traj["step"].values, traj[f"v_1_{l + 1}"].values, label=f"component {l}")
    axes[2].set_xlabel("Number of MiniBatches")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    finish_figure(fig, outdir, "fig3_component_growth.png")
    return {"V_init": V0, "V_final": V1, "trajectory": traj}


def fig4_nonlinear(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Fig. 4: reduced nonlinear dynamics (official softmax(v^2/3) variant, eta = 0.02, 5000
    iterations -> ODE time 100; and the paper's exp ODE), components coloured by iteration, and the
    entropy drop and bounce; third panel: the converging probe toy on its own time axis (no
    per-curve normalisation) against the exp ODE."""
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
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    cmap = plt.get_cmap("rainbow")
    V = stack(soft, [f"v_{j + 1}" for j in range(n)])
    for i in range(0, V.shape[1], 4):
        axes[0].plot(np.arange(n), V[:, i], color=cmap(i / V.shape[1]), lw=0.8)
    axes[0].plot(np.arange(n), mu, "k--", label="mu")
    axes[0].set_xlabel("Sorted index of v components")
    axes[0].set_title("softmax(v^2/3) variant, coloured by iteration", fontsize=9)
    axes[1].plot(soft["time"].values / eta, soft["attention_entropy"].values)
    axes[1].axhline(J.fixed_point_entropy(mu, temperature=T), color="k", ls=":", label="fixed point")
    axes[1].set_xlabel("#iteration")
    axes[1].set_ylabel("entropy(v(t))")
    axes[1].legend(fontsize=7)
    curves = {"exp ODE (paper)": expo, "softmax(v^2/3) ODE (code)": soft, "trained converging toy": probe}
    for lab, ds in curves.items():
        t = ds["time"].values
        axes[2].plot(t[1:], ds["attention_entropy"].values[1:], label=lab)
    axes[2].set_xscale("log")
    axes[2].set_xlabel("ODE time (each curve its own: t = lr*step for the toy)")
    axes[2].set_ylabel("attention entropy")
    axes[2].set_title("drop and bounce (headline network: fig_headline)", fontsize=9)
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    finish_figure(fig, outdir, "fig4_nonlinear_entropy.png")
    return {"softmax_variant": soft, "exp_ode": expo, "trained": probe,
            "bounce": {k: J.drops_then_bounces(v["attention_entropy"].values, 1e-9) for k, v in curves.items()}}


def fig_theorem2(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Theorem 2: ODE vs erfinv closed form up to 0.95 of the first blow-up time."""
    Delta = np.array([0.3, 0.2, 0.1, -0.05])
    t = np.linspace(0, 0.95 * J.blow_up_times(Delta).min(), 200)
    ode = sim.solve(J.theorem2_system(len(Delta), 1), {f"Delta_{l + 1}": d for l, d in enumerate(Delta)},
                    np.zeros(len(Delta)), t, backend="scipy", method="DOP853", rtol=1e-12, atol=1e-14)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    errs = []
    for l, d in enumerate(Delta):
        closed = np.sqrt(2) * erfinv(np.sqrt(2 / np.pi) * d * t)
        ax.plot(t, ode[f"v_{l + 1}"].values, lw=2, alpha=0.6, label=f"ODE, Delta={d:g}")
        ax.plot(t, closed, "k--", lw=0.8)
        errs.append(float(np.abs(ode[f"v_{l + 1}"].values - closed).max() / np.abs(closed).max()))
    ax.set_xlabel("t")
    ax.set_title(f"Theorem 2 (dashed: erfinv); max rel err {max(errs):.1e}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    finish_figure(fig, outdir, "theorem2_closed_form.png")
    return {"relative_errors": errs}


def fig_block_overlay(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Derivation check: the fixed-top block (the ODE's own objective) vs the block ODE."""
    d = derivation_check("scipy", _dev(device))
    cfg, ode, traj = d["config"], d["ode"], d["traj"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for l in range(cfg.Mc):
        axes[0].plot(traj["time"], traj[f"z_{l + 1}"], lw=2, alpha=0.5)
        axes[0].plot(ode["time"], ode[f"z_{l + 1}"], "k--", lw=0.8)
        axes[1].plot(traj["time"], traj[f"v_1_{l + 1}"], lw=2, alpha=0.5)
        axes[1].plot(ode["time"], ode[f"v_1_{l + 1}"], "k--", lw=0.8)
    axes[0].set_title("z_l: trained (colour) vs block ODE (dashed)", fontsize=9)
    axes[1].set_title("v_1l: trained vs block ODE", fontsize=9)
    for ax in axes:
        ax.set_xlabel("t = lr x step")
    fig.tight_layout()
    finish_figure(fig, outdir, "block_ode_vs_trained.png")
    return {"ode": ode, "trained": traj}


def fig_learning_order(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Learning order on HBLT (spec §3.4): time for the query's attention logit to token l to reach
    half its final change, vs the co-occurrence rho^(2H) of the LCA height H."""
    lo = learning_order((0,) if quick else (0, 1, 2), _dev(device))
    df, rho_s, rho_v = lo["table"], lo["spearman_attention"], lo["spearman_mlp"]
    rho_means = lo["spearman_height_means"]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.scatter(df["cooccurrence"], df["half_time_attention"], label="attention logit z_l")
    ax.scatter(df["cooccurrence"], df["half_time_mlp"], marker="x", label="MLP weight v_l")
    means = df.groupby("cooccurrence")["half_time_attention"].mean()
    ax.plot(means.index, means.values, "k-", lw=1, label="mean per LCA height")
    ax.set_xscale("log")
    ax.set_xlabel("co-occurrence excess rho^(2H)")
    ax.set_ylabel("time to half the final change")
    ax.set_title(f"HBLT learning order; Spearman(H, t): attention {rho_s:.2f}, MLP {rho_v:.2f}\n"
                 f"(over per-height means: {rho_means:.2f})", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    finish_figure(fig, outdir, "hblt_learning_order.png")
    save_table(df, outdir, "hblt_learning_order.csv")
    return {k: v for k, v in lo.items() if k != "by_height"}


def fig_layers_and_table1(outdir: Path | None = None, quick: bool = True, *, device: str = "cpu"):
    """Multi-layer Transformer on the random-combination hierarchy: per-layer attention entropy and
    MLP stable rank over training; Table 1 analogue (score0/score1, mean +- std over seeds) as CSV."""
    seeds = (0, 1) if quick else (0, 1, 2, 3, 4)
    trajs = [E.train(J.JomaConfig.preset("hier", quick, seed=s), device=_dev(device))[0] for s in seeds]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    nl = sum(1 for n in trajs[0].data_vars if n.startswith("attention_entropy_"))
    for l in range(nl):
        for i, tr in enumerate(trajs):
            axes[0].plot(tr["time"], tr[f"attention_entropy_{l}"], color=f"C{l}", alpha=0.7,
                         label=f"layer {l}" if i == 0 else None)
            axes[1].plot(tr["time"], tr[f"stable_rank_{l}"], color=f"C{l}", alpha=0.7,
                         label=f"layer {l}" if i == 0 else None)
    axes[0].set_title("attention entropy per layer", fontsize=9)
    axes[1].set_title("stable rank of fc1 per layer", fontsize=9)
    for ax in axes:
        ax.set_xlabel("minibatch")
        ax.legend(fontsize=7)
    fig.tight_layout()
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
    computes vs the ODE's (same time axis, no normalisation), and the drift of G (Assumption 1)."""
    h = headline(quick, _dev(device))
    cfg, t = h["config"], h["time"]
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    for l in range(cfg.Mc):
        axes[0].plot(t, h["net"]["z"][:, l], color=f"C{l % 10}", lw=2, alpha=0.5)
        axes[0].plot(t, h["theory"]["z"][:, l], "k--", lw=0.7)
        axes[1].plot(t, h["net"]["v"][:, l], color=f"C{l % 10}", lw=2, alpha=0.5)
        axes[1].plot(t, h["theory"]["v"][:, l], "k--", lw=0.7)
    axes[0].set_title("z_l: network (colour) vs JoMA ODE (dashed)", fontsize=9)
    axes[1].set_title("v_1l: network vs JoMA ODE", fontsize=9)
    axes[2].plot(t, h["H_net"], label="network's attention")
    axes[2].plot(t, h["H_ode"], "k--", label="ODE z, same sequences")
    axes[2].set_title("attention entropy over positions", fontsize=9)
    axes[2].legend(fontsize=7)
    axes[3].plot(t, h["drift"], label="|G(t) - G(0)| / |G(0)|")
    axes[3].axhline(0.1, color="k", ls=":", lw=0.8)
    for k, tb in h["t_break"].items():
        if tb is not None:
            for ax in axes[:2]:
                ax.axvline(tb, color="r", ls=":", lw=0.8)
    axes[3].set_title("Assumption-1 drift of the network's gradient", fontsize=9)
    for ax in axes:
        ax.set_xscale("symlog", linthresh=10.0)
        ax.set_xlim(0, t[-1])
        ax.set_xlabel("t = lr x step")
    fig.tight_layout()
    finish_figure(fig, outdir, "headline_mixture_vs_ode.png")
    return {k: h[k] for k in ("time", "net", "theory", "H_net", "H_ode", "drift", "t_break", "rel_window", "rel_full")}


#: the paper row's ``figures`` slot: every JoMA figure, in order (the real-text ones last)
FIGURES = (fig2_invariant, fig3_component_growth, fig4_nonlinear, fig_theorem2, fig_block_overlay, fig_headline,
           fig_learning_order, fig_layers_and_table1, where_agreement_breaks, fig_wikitext)
