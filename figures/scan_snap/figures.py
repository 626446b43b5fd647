"""Scan & Snap figures (docs/papers/scan_snap.md §5): :data:`FIGURES`, the paper row's ``figures`` slot.

Every figure function has the signature ``fig_x(outdir | None, quick, *, device) -> data``: it
returns the data it plots, ends in :func:`figures.core.finish_figure` (saved as
``outdir/<name>.png`` when ``outdir`` is given) and writes its table with
:func:`figures.core.save_table`; :func:`figures.make.make_figures` collects the files and writes
``report.json``. The figures built on the comparison share its one cached run
(:func:`figures.scan_snap.compare.compare_data`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from theory import scan_snap as ss

from .. import style
from ..core import finish_figure, overlay, save_table
from ..context import RunContext
from ..progress import cell_bar
from .compare import compare_data
from .lines import theory_trajectory
from .fig6 import FIG6_GRID, fig6_panel, fig6_table
from .text import fig_scan_snap_entropy_vs_lr, fig_scan_snap_maps

__all__ = ["FIGURES", "fig3_growth", "fig4_heatmaps", "fig6_entropy", "fig8_h", "fig9_B", "fig_overlay",
           "fig_invariant_spread", "fig_momentum_gap", "table_reduced_grid", "fig_sde_overlay", "fig_sde_calibration",
           "fig_svag"]


def _finish(fig, outdir, name: str, rows, csv: str | None = None, *, ncols: int | None = None) -> pd.DataFrame:
    """One legend below the panels (every named curve, ``ncols`` columns), lint + save ``fig`` as
    ``outdir/name``, ``rows`` (a DataFrame or row dicts) as ``outdir/csv`` when given. Returns the table."""
    style.legend_outside(fig, ncols=ncols)
    finish_figure(fig, outdir, name)
    table = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    if csv is not None:
        save_table(table, outdir, csv)
    return table


def fig3_growth(outdir=None, quick: bool = True, *, device: str = "auto", C0: float = 1.0) -> pd.DataFrame:
    """Fig. 3: bounds of chi_{l0}(t) (Eqn. 12) for eta_Y in {0.5, 1, 2, 5}, eta_Z = 0.5, K = 10,
    M = 1000; f_{n l0}(0)^2 of the Syn profile; dotted lines at t0 (Decision 14)."""
    t = np.linspace(0, 700, 701)
    task = ss.make_task(ss.Config())
    p = task.P[0, task.support(0)]
    f0sq = float(task.P[0, task.dt[0, -1]] ** 2 / (p**2).sum())
    rows = []
    fig, axes = style.panels(1, size=(5.0, 3.4))
    ax = axes[0]
    for eta in (0.5, 1, 2, 5):
        lo, hi = ss.chi_bounds(t, 1000, 10, eta, 0.5, f0sq, C0)
        line, = ax.plot(t, hi, ls="-", label=f"upper bound, $\\eta_Y = {eta:g}$")
        ax.plot(t, lo, color=line.get_color(), ls="--", lw=0.8, label=f"lower bound, $\\eta_Y = {eta:g}$")
        ax.axvline(ss.transition_times(1000, 10, eta)[1], color=line.get_color(), ls=":")
        rows += [{"eta_Y": eta, "t": ti, "chi_lower": a, "chi_upper": b} for ti, a, b in zip(t[::10], lo[::10], hi[::10])]
    ax.set_xlabel(style.axis_label("time", "samples", "t"))
    ax.set_ylabel(style.axis_label("growth factor", symbol="$\\chi_{l_0}(t)$"))
    ax.set_title(f"Fig. 3: growth factor bounds ($K = 10$, $M = 1000$, $C_0 = {C0:g}$; dotted: $t_0$)")
    style.legend_outside(fig, axes, ncols=4)
    finish_figure(fig, outdir, "fig3_growth.png")
    return pd.DataFrame(rows)


def fig4_heatmaps(outdir=None, quick: bool = True, *, device: str = "auto", steps: int = 100) -> dict:
    """Fig. 4: c_n over tokens 0-29 at iterations 0, 2, ..., 10 and Final, Syn-Small, SGD momentum
    0.9, batch 128, T = 128, zero init, eta_Y/eta_Z = 1/1 and 10/1 (spec §5.3). Returns
    ``{"maps": {(ratio, class): (7, 30) array}, "dt_entropy": {name: final DT entropy}}``."""
    from empirical.scan_snap import train_grid

    cfg = ss.Config.preset("official", quick, steps=steps, seed=2)  # the official Fig. 4 run
    iters = (0, 2, 4, 6, 8, 10)
    res = train_grid(cfg, [1.0], [1.0, 10.0], 1, device=device, snapshots=iters)
    task = res["task"]
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(task.K, 2, figsize=(8.4, 2.6 * task.K), squeeze=False, layout="constrained")
    axes = list(grid.ravel())  # rows: classes; columns: the two ratios
    data = {}
    for r, ratio in enumerate((1.0, 10.0)):
        for n in range(task.K):
            rows = [ss.attention_scores(task, res["Z"][i][r])[n, :30] for i in (*iters, steps)]
            data[(ratio, n)] = np.array(rows)
            ax = axes[n * 2 + r]
            style.heatmap(ax, data[(ratio, n)], xlabel=style.axis_label("token index", symbol="l"),
                          ylabel="iteration", cbar_label=style.axis_label("attention", symbol="$c_n$"),
                          cmap="viridis", index_axes="x")
            ax.set_yticks(range(len(iters) + 1), [str(i) for i in iters] + ["final"])
            ax.set_title(f"$\\eta_Y/\\eta_Z = {ratio:g}/1$, class {n + 1}")
    fig.suptitle("Fig. 4: $c_n$ on Syn-Small (common tokens 0-9, distinct tokens 10-29)")
    finish_figure(fig, outdir, "fig4_heatmaps.png")
    ent = {f"ratio_{k[0]:g}_class_{k[1]}": float(ss.entropy(v[-1][task.dt[k[1]]])) for k, v in data.items()}
    save_table(pd.DataFrame([ent]), outdir, "fig4_dt_entropy.csv")
    return {"maps": data, "dt_entropy": ent}


def fig6_entropy(outdir=None, quick: bool = True, *, device: str = "auto", seeds: int | None = None,
                 zero_init: bool = False, ctx: RunContext | None = None) -> pd.DataFrame:
    """Fig. 6: DT entropy at iteration 100 vs eta_Y/eta_Z in {1, 2, 5, 10}, one line per eta_Z in
    {0.5, 1, 2, 3}, panels #last = 1, 3, 5, 10 (Syn-Medium), SGD momentum 0.9, batch 128, T = 128,
    default init (official sweep). Quick: 2 seeds in float32; full: 10 seeds in float64. The grid
    runs through the sweep runner (:mod:`figures.scan_snap.fig6`) in a resumable store,
    ``outdir/fig6_store`` unless ``ctx`` names a store root (``<store>/scan-snap-fig6``), workers or
    Ray (without either, in process). Returns the table (num_last, eta_Z, ratio, mean, std, count),
    also written as ``fig6_entropy.csv``."""
    seeds = seeds or (2 if quick else 10)
    panels = FIG6_GRID["num_last"]
    ctx = RunContext.of(ctx)
    opts = ctx.sweep("scan-snap-fig6", None if outdir is None else Path(outdir) / "fig6_store")
    cells_bar = cell_bar if ctx.progress else None
    store, workers, ray = opts["store"], opts["workers"], opts["ray"]
    if store is None and workers == 1 and ray is None:
        tables = [fig6_panel(nl, seeds, device, quick, zero_init) for nl in panels]
    else:
        from empirical.trainer import resolve_device

        dev = resolve_device(device)
        t = fig6_table(panels, seeds, float32=quick, zero_init=zero_init, device=str(dev), store=store,
                       engine="numpy" if dev.type == "cpu" else "torch", workers=workers, ray=ray,
                       bar=cells_bar)
        tables = [t[t.num_last == nl] for nl in panels]
    import matplotlib.pyplot as plt

    ncols = 2 if len(panels) == 4 else min(len(panels), style.MAX_PER_ROW)
    fig, grid = plt.subplots(-(-len(panels) // ncols), ncols, figsize=(3.8 * ncols, 2.8 * -(-len(panels) // ncols)),
                             squeeze=False, sharey=True, layout="constrained")
    axes = list(grid.ravel())
    for ax in axes[len(panels):]:
        fig.delaxes(ax)
    colours = ("#0072B2", "#009E73", "#E69F00", "#CC79A7", "#56B4E9")
    for ax, nl, g in zip(axes, panels, tables):
        for ez, m, col in zip(FIG6_GRID["eta_Z"], "os^Dv", colours):
            s = g[g.eta_Z == ez]
            line, = ax.plot(s.ratio, s["mean"], marker=m, ms=3, ls="-", color=col, label=f"$\\eta_Z = {ez:g}$")
            ax.errorbar(s.ratio, s["mean"], yerr=s["std"], fmt="none", ecolor=line.get_color(), lw=0.8)
        ax.set_xscale("log")
        ratios = sorted(g.ratio.unique())
        ax.set_xticks(ratios, [f"{r:g}" for r in ratios])  # the grid's ratios, not powers of ten
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(labelleft=True)  # shared y, numbers on every panel
        ax.set_xlabel(style.axis_label("learning-rate ratio", symbol="$\\eta_Y / \\eta_Z$"))
        ax.set_ylabel(style.axis_label("DT attention entropy", "nats"))
        ax.set_title(f"last / next tokens = {nl} / {2 * nl}")
    style.legend_outside(fig, axes[:len(panels)])
    table = pd.concat(tables, ignore_index=True)
    finish_figure(fig, outdir, "fig6_entropy.png")
    save_table(table, outdir, "fig6_entropy.csv")
    return table


def fig8_h(outdir=None, quick: bool = True, *, device: str = "auto") -> pd.DataFrame:
    """Fig. 8: discrete h* (Eqn. 33) vs continuous h (Eqn. 45)."""
    fig, axes = style.panels(2, size=(4.2, 3.2))
    rows = []
    panels = ((50, (0.1, 0.2, 0.5, 1, 2), 80), (1000, (0.2, 0.5, 1, 2, 4), 70))
    colour = {eta: f"C{i}" for i, eta in enumerate(sorted({e for _, etas, _ in panels for e in etas}))}  # same in both
    for ax, (M, etas, tmax) in zip(axes, panels):
        s = np.arange(tmax + 1)
        for eta in etas:
            hs, h = ss.h_discrete(tmax, M, eta), ss.h_closed_form(s, M, eta)
            ax.plot(s, hs, color=colour[eta], ls="-", label=f"$h^*$ (Eqn. 33), $\\eta_Y = {eta:g}$")
            ax.plot(s, h, color=colour[eta], ls="--", label=f"$h$ (Eqn. 45), $\\eta_Y = {eta:g}$")
            rows.append({"M": M, "eta_Y": eta, "max_gap": float((hs - h).max()), "bound_2eta_over_M": 2 * eta / M})
        ax.set_title(f"Fig. 8: $M = {M}$")
        ax.set_xlabel(style.axis_label("step", symbol="s"))
        ax.set_ylabel(style.axis_label("decoder growth (logit scale)", symbol="h"))
    return _finish(fig, outdir, "fig8_h.png", rows, "fig8_gap.csv", ncols=4)


def fig9_B(outdir=None, quick: bool = True, *, device: str = "auto", K: int = 2, C0: float = 1.0) -> pd.DataFrame:
    """Fig. 9: B_n(t) at fixed nu = eta_Y/eta_Z for several eta_Z, dots at B_n(t0) (Decision 15).
    B is the snap system's closed form (Eqn. 124, ``closed_forms_numpy``) of h(t/K) (Eqn. 45)."""
    snap = ss.snap_system()
    forms = snap.closed_forms_numpy()

    def B(t, M, ey, ez):
        t = np.atleast_1d(np.asarray(t, float))
        p = snap.parameter_vector({"M": M, "K": K, "eta_Y": ey, "eta_Z": ez, "C_0": C0})
        y = np.zeros((len(snap.state), t.size))
        y[snap.state_names.index("h")] = ss.h_closed_form(t / K, M, ey)
        return forms(t, p, y)["B"]

    fig, axes = style.panels(2, size=(4.2, 3.2))
    rows = []
    for ax, (nu, M, ezs, tmax) in zip(axes, ((10, 100, (0.5, 1, 2, 4, 8), 5), (1, 10000, (0.5, 1, 2, 4, 8), 50))):
        t = np.linspace(0, tmax, 501)
        for ez in ezs:
            ey = nu * ez
            b = B(t, M, ey, ez)
            line, = ax.plot(t, b, ls="-", label=f"$\\eta_Z = {ez:g}$")
            t0 = ss.transition_times(M, K, ey)[1]
            b0 = float(B(t0, M, ey, ez)[0])
            if t0 <= tmax:
                ax.plot([t0], [b0], "o", color=line.get_color(), label=f"$B_n(t_0)$, $\\eta_Z = {ez:g}$")
                ax.axvline(t0, color=line.get_color(), ls=":", lw=0.8)
            rows.append({"nu": nu, "M": M, "eta_Z": ez, "t0": t0, "B_at_t0": b0, "B_end": float(b[-1])})
        ax.set_title(f"Fig. 9: $\\nu = {nu}$, $M = {M}$, $K = {K}$")
        ax.set_xlabel(style.axis_label("time", symbol="t"))
        ax.set_ylabel(style.axis_label("attention sparsity exponent", symbol="$B_n(t)$"))
    return _finish(fig, outdir, "fig9_B.png", rows, "fig9_B.csv", ncols=5)


def fig_overlay(outdir=None, quick: bool = True, *, device: str = "auto", ctx: RunContext | None = None):
    """T = inf ODE (dashed) vs the trained model in the theory regime (the comparison's run): DT
    logits, common logit, a Y coordinate, DT entropy, loss. Returns ``(theory, practice)``."""
    data = compare_data(RunContext.of(ctx, quick=quick, device=device))[1:]
    names = ["z_dt_0", "z_dt_9", "z_c", "Y_own_9", "dt_entropy", "population_loss"]
    labels = _sde_labels(ss.Config.preset("theory", quick))
    labels["population_loss"] = "population loss $-J_\\infty$"
    fig = overlay(*data, names, title="Scan & Snap: the $T = \\infty$ ODE vs the trained $(Y, Z)$ model",
                  xlabel=style.axis_label("per-sample time", symbol="t"), ylabels=labels)
    finish_figure(fig, outdir, "overlay_ode_vs_trained.png")
    return data


def fig_invariant_spread(outdir=None, quick: bool = True, *, device: str = "auto", ratios=(1, 10, 100),
                         eta_Z: float = 0.2) -> pd.DataFrame:
    """Reduced-vs-full: spread max/min of the scanning invariant I_l over class 1's DTs in the full
    T = inf flow (zero init) as eta_Y/eta_Z grows; the reduced ODE keeps it at exactly 1."""
    t_end = float(ss.Config.preset("spread", quick).steps)
    rows = []
    task = ss.make_task(ss.Config())
    t = np.linspace(0, t_end, 61)
    fig, axes = style.panels(1, size=(4.6, 3.2))
    ax = axes[0]
    for r in ratios:
        cfg = ss.Config.preset("spread", quick, eta_Z=eta_Z, eta_Y=eta_Z * r)
        th = theory_trajectory(cfg, t)
        y = np.stack([th[n].values for n in ss.full_system(cfg).state_names], -1)
        _, Z = ss.embed_symmetric_state(task, y)
        spread = ss.invariant_spread(task, Z)
        ax.plot(t, spread, ls="-", label=f"full flow, $\\eta_Y/\\eta_Z = {r}$")
        rows.append({"ratio": r, "eta_Z": eta_Z, "t_end": t_end, "spread_end": float(spread[-1]),
                     "dt_entropy_end": float(th.dt_entropy.values[-1])})
    ax.axhline(1.0, **style.role("theory_alt"), label="reduced ODE (exactly 1)")
    ax.set_xlabel(style.axis_label("time", symbol="t"))
    ax.set_ylabel(style.axis_label("invariant spread", symbol="$\\max_l I_l / \\min_l I_l$"))
    return _finish(fig, outdir, "invariant_spread.png", rows, "invariant_spread.csv", ncols=2)


def fig_momentum_gap(outdir=None, quick: bool = True, *, device: str = "auto",
                     ctx: RunContext | None = None) -> pd.DataFrame:
    """Where the T = inf ODE and training part in the official Fig. 4 regime (momentum 0.9): z-row
    rel_l2 vs the learning rate (steps = 50/lr, same ODE-time horizon) of the discrete momentum map
    on grad J_inf against the ODE, and of training against the ODE and the E_counts[J] map (the
    comparison's numbers, ``momentum_gap.csv``)."""
    df = pd.DataFrame(compare_data(RunContext.of(ctx, quick=quick, device=device))[0].details["momentum_gap_lr_sweep"])
    fig, axes = style.panels(1, size=(4.6, 3.2))
    ax = axes[0]
    for (col, label), m in zip((("map_Jinf_vs_ode", "momentum map on $\\nabla J_\\infty$ vs ODE"),
                                ("training_vs_ode", "training vs ODE"),
                                ("training_vs_map_EcountsJ", "training vs momentum map on $\\nabla E_q[J]$")), "os^"):
        ax.plot(df.lr, df[col], marker=m, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(style.axis_label("learning rate", symbol="$\\eta_Y = \\eta_Z$") + ", momentum 0.9")
    ax.set_ylabel(style.axis_label("relative $L^2$ error of the $z$ rows"))
    ax.set_title("Scan & Snap: the momentum gap closes as $\\eta \\to 0$")
    style.legend_outside(fig, axes, ncols=1)
    finish_figure(fig, outdir, "momentum_gap.png")
    save_table(df, outdir, "momentum_gap.csv")
    return df


def table_reduced_grid(outdir=None, quick: bool = True, *, device: str = "auto",
                       ctx: RunContext | None = None) -> pd.DataFrame:
    """The reduced Lemma-4 system vs the full flow vs training over eta_Y/eta_Z (the comparison's
    ``reduced_grid``, :func:`figures.scan_snap.claims.reduced_grid`): ``reduced_vs_full_vs_training.csv``."""
    df = pd.DataFrame(compare_data(RunContext.of(ctx, quick=quick, device=device))[0].details["reduced_grid"])
    save_table(df, outdir, "reduced_vs_full_vs_training.csv")
    return df


#: the SDE figures' observables and their labels
_SDE_NAMES = ("z_dt_0", "z_c", "Y_own_0", "dt_entropy")  # = calibration.OBSERVABLES


def _sde_labels(config) -> dict[str, str]:
    """Each state in words with its symbol (the derivation's layout, ``theory.scan_snap.derive``):
    distinct token ``j`` of a class (``j = 0`` the rarest), a common token, the decoder's weight
    from a distinct token to its class's label."""
    labels = style.symbol_labels(ss.full_system(config))
    U = config.num_unique_per_next
    for j in range(U):
        rank = ", the rarest" if j == 0 else ", the most frequent" if j == U - 1 else ""
        labels[f"z_dt_{j}"] = (r"attention logit $z_{m,\mathrm{dt}_{%d}}$" % j + f"\n(distinct token {j}{rank})")
        labels[f"Y_own_{j}"] = (r"decoder weight $Y_{\mathrm{dt}_{%d},\,n}$" % j
                                + f"\n(distinct token {j} to its class)")
    labels["z_c"] = "attention logit $z_{m,c}$\n(a common token)"
    labels["dt_entropy"] = "DT attention entropy (nats)"
    return labels


def fig_sde_overlay(outdir=None, quick: bool = True, *, device: str = "auto", T: int = 32):
    """The minibatch SDE beside the ``T = inf`` ODE and count-vector SGD at finite ``T``
    (Syn-Small, zero init, plain SGD, batch 32; :mod:`.calibration`): the SDE's 10-90% band, 24 of
    the SGD runs, the ODE. The ODE's logit of the rarest distinct token drifts the other way from
    SGD's: the finite-T drift ``E_q[g]`` (the SDE's) differs from the ``T = inf`` gradient by the
    sampling of count vectors (docs/papers/scan_snap.md §5.3), which the title says. Returns
    ``(ode, sde, runs)``."""
    from . import calibration as cal

    c = cal.CALIBRATION["quick" if quick else "full"]
    cfg = cal.calibration_config(T, quick=quick)
    sde, runs = cal.sde_paths(cfg, c["paths"]), cal.sgd_runs(cfg, c["runs"])
    ode = theory_trajectory(cfg)
    task = ss.make_task(cfg)
    rare = (T - 1) * float(task.P[0, task.dt[0, 0]])  # expected count of the rarest distinct token per sequence
    fig = overlay(ode, runs.isel(run=slice(0, 24)), _SDE_NAMES, sde=sde, ylabels=_sde_labels(cfg),
                  title=f"Scan & Snap at $T = {T}$, batch {cfg.batch}: the SDE vs count-vector SGD vs the "
                        "$T = \\infty$ ODE\n"
                        f"The rarest distinct token appears {rare:.2f} times per sequence on average at $T = {T}$: "
                        "the finite-$T$ drift\nmoves its logit the other way from the $T = \\infty$ ODE's (sampling "
                        "makes attention sparser); the SDE has that drift.",
                  xlabel=style.axis_label("time", "steps", "t"))
    finish_figure(fig, outdir, "sde_overlay.png")
    return ode, sde, runs


def fig_sde_calibration(outdir=None, quick: bool = True, *, device: str = "auto") -> pd.DataFrame:
    """Coverage of count-vector SGD by the SDE's 50/80/90% bands (run-bootstrap 90% intervals)
    against the nominal level, per observable, at T = 32, 128, 1024 (:func:`.calibration.calibration`;
    ``sde_calibration.csv`` also holds the pooled variance ratios)."""
    from . import calibration as cal

    rows = cal.calibration(quick=quick, observables=_SDE_NAMES)  # cached runs: the report's details share them
    labels = _sde_labels(cal.calibration_config(32, quick=quick))
    Ts = sorted({r["T"] for r in rows})
    fig, axes = style.panels(len(Ts), sharey=True)
    for ax, T in zip(axes, Ts):
        for k, name in enumerate(_SDE_NAMES):
            r = next(r for r in rows if r["T"] == T and r["observable"] == name)
            lv = np.array([float(x) for x in r["coverage"]])
            cov = np.array([v["coverage"] for v in r["coverage"].values()])
            err = np.array([[v["coverage"] - v["low"], v["high"] - v["coverage"]] for v in r["coverage"].values()]).T
            x = lv + 0.012 * (k - 1.5)
            line, = ax.plot(x, cov, "osD^"[k], ls="none", ms=4, label=labels[name])
            ax.errorbar(x, cov, yerr=err, fmt="none", ecolor=line.get_color(), lw=1)
        grid = np.array([0.45, 0.95])
        ax.plot(grid, grid, **style.role("theory", linewidth=1.0), label="nominal")
        ax.fill_between(grid, grid - 0.05, grid + 0.05, color="0.85", zorder=0, label="nominal $\\pm$ 5 points")
        ax.set_title(f"T = {T}")
        ax.set_xlabel(style.axis_label("band level"))
    axes[0].set_ylabel(style.axis_label("coverage of SGD points"))
    style.legend_outside(fig, axes)
    table = pd.DataFrame([{"T": r["T"], "observable": r["observable"], "verdict": r["verdict"],
                           **{f"coverage_{k}": v["coverage"] for k, v in r["coverage"].items()},
                           **{f"coverage_{k}_low": v["low"] for k, v in r["coverage"].items()},
                           **{f"coverage_{k}_high": v["high"] for k, v in r["coverage"].items()},
                           "variance_ratio": r["variance_ratio"][0], "variance_ratio_low": r["variance_ratio"][1],
                           "variance_ratio_high": r["variance_ratio"][2],
                           **{f"final_mean_{k}": v for k, v in r["final_mean"].items()}} for r in rows])
    finish_figure(fig, outdir, "sde_calibration.png")
    save_table(table, outdir, "sde_calibration.csv")
    return table


def fig_svag(outdir=None, quick: bool = True, *, device: str = "auto"):
    """SVAG (Li, Malladi & Arora 2021; :func:`.calibration.svag`): the weak error of the mean DT
    entropy against the SDE (step dtau/16) vs the amplification l, with its fitted slope (theory -1).
    Returns the :class:`~figures.calibration.WeakError` (``svag.csv``); full mode only (quick
    returns None: 4 x 256 SGD runs up to 8x the steps and an SDE at 16 steps per optimiser step
    cost ~2.5 CPU-minutes, beyond the quick figures' budget)."""
    from ..calibration import plot_weak_error
    from . import calibration as cal

    if quick:
        return None
    w = cal.svag(quick=quick)
    fig, axes = style.panels(1, size=(4.2, 3.2))
    ax = axes[0]
    plot_weak_error(ax, w, label="SVAG vs SDE", color=style.ROLES["practice"]["color"])
    ax.set_xlabel(style.axis_label("SVAG amplification", symbol="l"))
    ax.set_ylabel(style.axis_label("weak error of mean DT entropy"))
    style.legend_outside(fig, axes)
    finish_figure(fig, outdir, "svag_weak_error.png")
    save_table(pd.DataFrame({"l": w.scales, "error": w.error, "low": w.error_low, "high": w.error_high,
                             "slope": w.slope, "slope_low": w.slope_low, "slope_high": w.slope_high}), outdir, "svag.csv")
    return w


#: The paper row's ``figures`` slot, in the order they are made (:func:`figures.make.make_figures`).
FIGURES = (fig3_growth, fig8_h, fig9_B, fig4_heatmaps, fig6_entropy, fig_overlay, fig_momentum_gap, table_reduced_grid,
           fig_invariant_spread, fig_scan_snap_maps, fig_scan_snap_entropy_vs_lr, fig_sde_overlay,
           fig_sde_calibration, fig_svag)
