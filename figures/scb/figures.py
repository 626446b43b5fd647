"""SCB figures (papers/scb.md §3.4, §4, §6). Each ``fig_x(outdir | None, quick, *, device)``
computes its data, draws it, ends in :func:`~figures.core.finish_figure` (saved when ``outdir`` is
given) and returns the data it plotted, so tests and :func:`figures.scb.compare` check numbers.

* :func:`fig_overlay` — ODE line, SDE bands (minibatch SGD on the full (V, A)) at nominal 50/80/90%,
  SGD runs; band coverage with t = 0 excluded.
* :func:`fig_escape_time` — escape time vs T: ODE, the §3.4 formula, SGD runs vs their task's ODE
  (empirical.scb at small T, the fused-kernel empirical.scb.fast up to T = 4096 with --full).
* :func:`figures.scb.l1.fig_l1_vs_sgd` — the l1 study: distance to ground truth vs samples (l1-proximal vs vanilla SGD).
* :func:`fig_transfer` — samples to escape from scratch vs pretrained V only (attention uniform;
  the paper's claim) vs pretrained V + attention (ablation), on a correlated transition task.
* :func:`fig_softmax_vs_linear` — learned attention patterns and loss curves.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr

import simulate
from empirical import scb as escb
from empirical.scb.fast import escape_time_points
from empirical.trainer import stack_runs
from theory import Problem, scb

from ..core import band_coverage, finish_figure, overlay, save_table
from .l1 import fig_l1_vs_sgd

__all__ = ["fig_overlay", "fig_escape_time", "fig_transfer", "fig_softmax_vs_linear",
           "ode_for", "escape_formula_value", "spec_escape_times", "BAND_LEVELS", "make_figures"]

#: nominal SDE band levels (central quantile intervals) whose coverage is reported
BAND_LEVELS = (0.5, 0.8, 0.9)


def ode_for(config: scb.SCBConfig, times=None, task=None, init=None, backend: str = "diffrax") -> xr.Dataset:
    """The symmetric 4-D ODE for ``config``'s task (from ``init`` if given) at ``times``
    (default ``config.ode_times()``), with the problem's own solve options."""
    return simulate.solve(scb.problem(config, task=task, init=init, t=times), backend=backend)


@lru_cache(maxsize=1)
def _closed_forms():
    return scb.symmetric_system().closed_forms_numpy()


def escape_formula_value(params: dict[str, float]) -> float:
    """``log(T sqrt(rho))/sqrt(eta_V eta_A rho K)`` (spec §3.4) from the system's closed forms."""
    p = scb.symmetric_system().parameter_vector(params)
    return float(_closed_forms()(0.0, p)["escape_time"])


def spec_escape_times(Ts, *, backend: str = "diffrax") -> pd.DataFrame:
    """ODE escape times (beta reaches 1/2) on the spec's setting (K = 0.1, rho = 1/3, m2 = 1/3,
    eta_V = eta_A = 1; spec §3.4 table) and the formula, for each T in ``Ts``."""
    rows = []
    S = scb.symmetric_system()
    for Tv in Ts:
        p = dict(T=float(Tv), rho=1 / 3, K=0.1, m2=1 / 3, eta_V=1.0, eta_A=1.0)
        prob = Problem(S, p, dict(zeta=0.0, omega=1.0, xi=1 / Tv, beta=0.0), np.linspace(0, 120, 4001),
                       scb.SOLVE_OPTIONS)
        ode = simulate.solve(prob, backend=backend)
        rows.append({"source": "ode", "T": float(Tv), "escape_time": simulate.first_crossing(ode, "beta", scb.ESCAPE_LEVEL),
                     "formula": escape_formula_value(p)})
    return pd.DataFrame(rows)


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
    """ODE vs SDE band vs SGD runs at small batch. ``coverage[level][name]``: the fraction of
    (run, t > 0) points of the SGD runs inside the SDE's central ``level`` band (t = 0 excluded:
    every run and path starts at the same point); ``coverage_se``: its standard error over runs
    (points of one run are correlated in time, so runs are the independent units; 32 runs give
    ~2-3 points, 8 runs ~5-8)."""
    cfg = config or scb.SCBConfig.preset("overlay", quick)
    task = scb.make_task(cfg)
    sde, t = scb.minibatch_sde(cfg)
    ens = simulate.solve_sde(sde, t, paths=paths, seed=seed, parameters=cfg.to_dict())
    sgd = stack_runs([escb.train(cfg, device=device, seed=seed + 1000 + r, task=task)[0] for r in range(runs)])
    ode = ode_for(cfg, t, task)
    names = list(scb.CORRELATION_OBSERVABLES)
    t_min = float(t[t > 0][0])
    per_run = {f"{lvl:g}": {n: np.array([band_coverage(ens, sgd.isel(run=[r]), n, (1 - lvl) / 2, (1 + lvl) / 2,
                                                      t_min=t_min) for r in range(runs)]) for n in names}
               for lvl in BAND_LEVELS}
    coverage = {lvl: {n: float(v.mean()) for n, v in d.items()} for lvl, d in per_run.items()}
    coverage_se = {lvl: {n: float(v.std(ddof=1) / np.sqrt(runs)) if runs > 1 else float("nan") for n, v in d.items()}
                   for lvl, d in per_run.items()}
    fig = overlay(ode, sgd, names + ["population_loss"], sde=ens, xlabel="optimiser step",
                  title=f"SCB: ODE vs SDE ({paths} paths, 10-90% band) vs SGD ({runs} runs), batch {cfg.batch}; "
                        "coverage (t>0) at 50/80/90%: " + "; ".join(
                            "/".join(f"{coverage[f'{lvl:g}'][n]:.2f}" for lvl in BAND_LEVELS) for n in names))
    finish_figure(fig, outdir, "scb_overlay.png")
    return {"ode": ode, "sde": ens, "sgd": sgd, "coverage": coverage, "coverage_se": coverage_se, "config": cfg}


def fig_escape_time(outdir: Path | None = None, quick: bool = True, *, device: str = "auto",
                    real_sgd_Ts=None, real_sgd_batch: int = 512) -> pd.DataFrame:
    """Escape time (beta reaches 1/2) vs T; also written as ``scb_escape_time.csv``.

    * ``source == "ode"``: ODE and formula on the spec's setting for T = 1e2..1e4 (1e5 with --full);
    * ``"sgd"``: :mod:`empirical.scb` (the reference SGD) at small T, lr = 0.8/T, batch 512/2048;
    * ``"sgd_fast"``: :func:`empirical.scb.fast.escape_time_points` (fused kernels) at larger T
      (``real_sgd_Ts``; quick 64, 256; --full 64..4096), lr = half the stability bound 2/(m2 T)
      (spec §2), batch ``real_sgd_batch`` (512).

    Every SGD row carries its own task's ODE escape (``ode_same_task``) and ``rel_err_vs_ode``.
    Real SGD at T = 1e5 (N = 3) is out of reach: the bound forces lr ~ 1/T, so the escape takes
    ~T log T steps of B*T positions each (~1e14 positions; pass ``real_sgd_Ts`` to try)."""
    df_ode = spec_escape_times([1e2, 1e3, 1e4] if quick else [1e2, 1e3, 1e4, 1e5])
    rows = []
    sgd_T = [8, 16] if quick else [8, 16, 32, 64, 128]
    batch = scb.SCBConfig.preset("escape_time", quick).batch
    seeds = 2 if quick else 5
    for Tv in sgd_T:
        lr = 0.8 / Tv  # a fixed fraction of the stability bound ~ 2N/T
        base = scb.SCBConfig.preset("escape_time", quick, T=Tv, eta_V=lr, eta_A=lr, steps=1, log_every=1)
        task = scb.make_task(base)
        t_form = escape_formula_value(scb.system_parameters(base, task))
        steps = int(3 * t_form)
        cfg = dataclasses.replace(base, steps=steps, log_every=max(1, steps // 200))
        t_ode = simulate.first_crossing(ode_for(cfg, np.linspace(0, steps, 801), task),
                                        "attention_target_coefficient", scb.ESCAPE_LEVEL)
        for s in range(seeds):
            tr, _ = escb.train(cfg, device=device, seed=s, task=task,
                               stop_when=lambda o: o["attention_target_coefficient"] >= 0.6)
            t_sgd = simulate.first_crossing(tr, "attention_target_coefficient", scb.ESCAPE_LEVEL)
            rows.append({"source": "sgd", "T": float(Tv), "seed": s, "lr": lr, "K": task.K, "batch": batch,
                         "escape_time": t_sgd, "ode_same_task": t_ode, "rel_err_vs_ode": abs(t_sgd - t_ode) / t_ode,
                         "formula": t_form})
    fast_T = real_sgd_Ts or ((64, 256) if quick else (64, 256, 1024, 4096))
    fast = pd.DataFrame(escape_time_points(fast_T, batch=real_sgd_batch, seeds=2, device=device))
    fast = fast.assign(source="sgd_fast")
    fast["T"] = fast["T"].astype(float)
    df = pd.concat([df_ode, pd.DataFrame(rows), fast], ignore_index=True)
    save_table(df, outdir, "scb_escape_time.csv")
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    d = df[df.source == "ode"]
    axes[0].semilogx(d["T"], d["escape_time"], "ko-", label="ODE (4-D)")
    axes[0].semilogx(d["T"], d["formula"], "r--", label=r"formula $\log(T\sqrt{\rho})/\sqrt{\eta_V\eta_A\rho K}$")
    axes[0].set_title("population flow, K=0.1, rho=1/3, eta_V=eta_A=1")
    for src, colour, label in (("sgd", "tab:orange", f"SGD empirical.scb (batch {batch}, lr 0.8/T)"),
                               ("sgd_fast", "tab:blue", f"SGD empirical.scb.fast (batch {real_sgd_batch}, lr 1/(m2 T))")):
        g = df[df.source == src]
        per_T = g.groupby("T").agg(sgd=("escape_time", "mean"), ode=("ode_same_task", "first"),
                                   formula=("formula", "first"), lr=("lr", "first"), rel=("rel_err_vs_ode", "mean"))
        axes[1].plot(g["T"], g["escape_time"] * g["lr"], "o", color=colour, alpha=0.7, label=label)
        axes[1].plot(per_T.index, per_T.ode * per_T.lr, "s", mfc="none", color="k",
                     label="ODE, same task" if src == "sgd" else None)
        axes[1].plot(per_T.index, per_T.formula * per_T.lr, "_", color="r", ms=14,
                     label="formula" if src == "sgd" else None)
        axes[2].plot(g["T"], g["rel_err_vs_ode"], "o", color=colour, label=label)
    axes[1].set_xscale("log")
    axes[1].set_title("real SCB tasks (N=3, Q=2): escape time x learning rate")
    axes[2].set_xscale("log")
    axes[2].set_yscale("log")
    axes[2].set_title("|SGD - ODE| / ODE escape, per run")
    axes[2].set(xlabel="T", ylabel="relative error")
    axes[2].grid(alpha=0.3)
    axes[2].legend(fontsize=7)
    _finish(fig, axes[:2], outdir, "scb_escape_time.png", "T", "escape time")
    return df


def transfer_tasks(Tv: int, *, mix: float = 0.7, batch: int = 256):
    """Pretraining and downstream configs/tasks at context ``T`` (Decision 10): the downstream
    transition is ``mix * P_pre + (1 - mix) * P_indep``; the downstream keeps the pretraining
    targets ``q^(k)`` (so the V + attention ablation carries aligned attention)."""
    lr = 0.8 / Tv
    pre = scb.SCBConfig.preset("transfer", T=Tv, eta_V=lr, eta_A=lr, batch=batch, steps=1)
    pre_task = scb.make_task(pre)
    P_down = escb.correlated_transition(pre_task.P, mix, seed=7)
    down_task = scb.SCBTask(P=P_down, mu=scb.stationary_distribution(P_down), Qm=pre_task.Qm,
                            support=pre_task.support, config=pre)
    return pre, pre_task, down_task


def transfer_starts(V_pre: np.ndarray, A_pre: np.ndarray, down_task, config) -> dict[str, Any]:
    """Initial (V0, A0) per start. Pretrained weights get the final normalisation (V/colsum,
    a/1'a); V is re-centred on the downstream mean (V0 mu_down = mu_down, spec §5 transfer)."""
    N = down_task.N
    Vn = V_pre / V_pre.sum(0, keepdims=True)
    V0 = Vn - np.outer(Vn @ down_task.mu - down_task.mu, np.ones(N))
    A_uniform = scb.initial_parameters(config, down_task)[1]
    return {"scratch": None, "pretrained V": (V0, A_uniform),
            "pretrained V + attention": (V0, A_pre / A_pre.sum(0, keepdims=True))}


def fig_transfer(outdir: Path | None = None, quick: bool = True, *, device: str = "auto", Ts=None,
                 mix: float = 0.7) -> pd.DataFrame:
    """Samples to escape (beta >= 1/2) on a downstream task whose transition is correlated with the
    pretraining task's: from scratch, from the pretrained V with the attention re-initialised
    uniform (the paper's transfer claim, spec §5/§6.1), and from pretrained V + attention
    (ablation). Batch 256; each row also carries the ODE's escape from the same start."""
    rows = []
    Ts = Ts or ([8, 16] if quick else [8, 16, 32, 64, 128])
    for Tv in Ts:
        pre, pre_task, down_task = transfer_tasks(Tv, mix=mix)
        steps = int(4 * escape_formula_value(scb.system_parameters(pre, pre_task)))
        pre = dataclasses.replace(pre, steps=steps, log_every=max(1, steps // 100))
        _, exp = escb.train(pre, device=device, task=pre_task)
        starts = transfer_starts(*exp.parameters_numpy(), down_task, pre)
        for label, ini in starts.items():
            tr, _ = escb.train(pre, device=device, task=down_task, init=ini,
                               stop_when=lambda o: o["attention_target_coefficient"] >= 0.6)
            t_esc = simulate.first_crossing(tr, "attention_target_coefficient", scb.ESCAPE_LEVEL)
            ode = ode_for(pre, np.linspace(0, steps, 801), down_task, init=ini)
            y0 = scb.initial_state(pre, down_task, ini)
            rows.append({"T": float(Tv), "start": label, "escape_steps": t_esc, "samples": t_esc * pre.batch,
                         "ode_escape_steps": simulate.first_crossing(ode, "attention_target_coefficient",
                                                                     scb.ESCAPE_LEVEL),
                         "zeta0": y0["zeta"], "beta0": y0["beta"], "batch": pre.batch, "lr": pre.eta_A, "mix": mix})
    df = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, g in df.groupby("start", sort=False):
        at_start = bool((g["samples"] == 0).all())  # beta0 >= 1/2 already: nothing to draw on a log axis
        line, = ax.plot(g["T"], g["samples"], "o-", label=f"SGD, {label}" + (" (escaped at step 0)" if at_start else ""))
        ax.plot(g["T"], g["ode_escape_steps"] * g["batch"], "x--", color=line.get_color(), alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(f"SCB transfer (correlated P, mix {mix}), batch 256; x = ODE", fontsize=9)
    _finish(fig, [ax], outdir, "scb_transfer.png", "T", "samples to escape (beta >= 1/2)")
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
    fig.colorbar(im, ax=axes[2])
    for variant, d in out.items():
        tr = d["trajectory"]
        axes[3].plot(tr["step"], tr["population_loss"], label=variant)
    axes[3].set_title("population loss", fontsize=9)
    axes[3].set_xlabel("step")
    axes[3].legend(fontsize=7)
    fig.tight_layout()
    finish_figure(fig, outdir, "scb_softmax_vs_linear.png")
    return out


def make_figures(outdir: Path, *, quick: bool = True, device: str = "auto") -> list[Path]:
    """Every SCB figure into ``outdir`` (the paper table's ``figures`` slot)."""
    from ..sweep import sweep_settings

    outdir = Path(outdir)
    for fig in (fig_overlay, fig_escape_time, fig_transfer, fig_softmax_vs_linear):
        fig(outdir, quick, device=device)
    # the l1 study is a grid of runs: the CLI's --store/--workers/--ray (default store outdir/scb_l1_store)
    fig_l1_vs_sgd(outdir, quick, device=device, **sweep_settings("scb-l1", outdir / "scb_l1_store"))
    return sorted([*outdir.glob("scb_*.png"), *outdir.glob("scb_*.csv")])
