"""SCB theory vs practice: :func:`compare` -> :class:`~figures.report.Report` (papers/scb.md §3.4, §5, §6).

* observables — one network trained inside the theory's regime (small lr, large batch, lambda = 0)
  against the 4-D ODE on ``config.ode_times()``; the correlation observables are judged at rel_l2
  <= :data:`TOLERANCE`, the rest are diagnostics;
* where_agreement_breaks — the same rel_l2 as the batch shrinks (noise) and as the learning rate
  approaches the stability bound 2/(m2 T) (discretisation);
* claims — ``escape_time_log_T`` (spec §3.4), ``transfer_skips_stage1`` (spec §5, pretrained V
  only), ``sde_band_calibrated`` (spec §3.6), plus the l1 study's claims
  (``figures/scb/l1.py``: ``l1_beats_sgd``, ``l1_recovers_support``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import simulate
from empirical import scb as escb
from theory import scb

from ..core import agreement
from ..report import Claim, Observable, Report
from .figures import BAND_LEVELS, escape_formula_value, fig_escape_time, fig_overlay, fig_transfer, ode_for

__all__ = ["compare", "agreement_breakdown", "escape_time_claim", "transfer_claim",
           "band_claim", "TOLERANCE", "ESCAPE_TOL", "SGD_ESCAPE_TOL", "BAND_TOL", "TRANSFER_RATIO"]

#: rel_l2 threshold for the correlation observables (small lr, large batch)
TOLERANCE = 0.05
#: escape_time_log_T: ODE vs formula (relative), ODE slope per decade vs ln(10)/sqrt(rho K) (relative)
ESCAPE_TOL = 0.10
#: escape_time_log_T: mean SGD escape vs its own task's ODE escape (relative)
SGD_ESCAPE_TOL = 0.15
#: sde_band_calibrated: |coverage - nominal| in probability (the issue's +-5 points)
BAND_TOL = 0.05
#: transfer_skips_stage1: samples to escape from the pretrained V at most this fraction of scratch
TRANSFER_RATIO = 0.5

DIAGNOSTICS = ("attention_target_coefficient", "value_mean_scale", "attention_sum", "population_loss")


def _regime(cfg: scb.SCBConfig, task) -> str:
    return (f"N={cfg.N} T={cfg.T} Q={cfg.Q} eta_V={cfg.eta_V} eta_A={cfg.eta_A} batch={cfg.batch} "
            f"steps={cfg.steps} (K={task.K:.4g}, m2={task.m2:.4g}, stability eta_A<{2 / (task.m2 * cfg.T):.3g})")


def compare(*, quick: bool = True, device: str = "auto", config: scb.SCBConfig | None = None,
            breakdown: bool = True, claims: bool = True) -> Report:
    """Train one network in the regime, compare it with the ODE over the whole trajectory (through
    the stage-1 escape), report where agreement breaks and decide the paper's claims."""
    cfg = config or scb.SCBConfig.preset("compare", quick)
    task = scb.make_task(cfg)
    traj, _ = escb.train(cfg, device=device, task=task)
    ode = ode_for(cfg, task=task)
    names = list(scb.CORRELATION_OBSERVABLES) + list(DIAGNOSTICS)
    rel = agreement(ode, traj, names)
    observables = [Observable(n, rel[n], TOLERANCE if n in scb.CORRELATION_OBSERVABLES else None) for n in names]
    t_ode = simulate.first_crossing(ode, "attention_target_coefficient", scb.ESCAPE_LEVEL)
    t_sgd = simulate.first_crossing(traj, "attention_target_coefficient", scb.ESCAPE_LEVEL)
    details: dict[str, Any] = {
        "escape_time": {"ode": t_ode, "trained": t_sgd,
                        "formula": escape_formula_value(scb.system_parameters(cfg, task))},
        "K": task.K, "m2": task.m2,
    }
    report = Report("scb", _regime(cfg, task), observables, details=details)
    if breakdown:
        report.where_agreement_breaks = agreement_breakdown(cfg, device=device, task=task)
    if claims:
        overlay = fig_overlay(None, quick, device=device)
        details["band_coverage"] = overlay["coverage"]
        report.claims = [escape_time_claim(fig_escape_time(None, quick, device=device)),
                         transfer_claim(fig_transfer(None, quick, device=device)),
                         band_claim(overlay),
                         *_extra_claims(quick, device)]
    return report


def agreement_breakdown(cfg: scb.SCBConfig, device: str = "auto", task=None) -> list[dict[str, Any]]:
    """Where agreement breaks: rel_l2 of the correlation observables as the batch shrinks (noise)
    and as the learning rate approaches the stability bound 2/(m2 T) (discretisation)."""
    task = task or scb.make_task(cfg)
    names = list(scb.CORRELATION_OBSERVABLES)
    runs = [("batch", dataclasses.replace(cfg, batch=B)) for B in (cfg.batch, 256, 16)]
    bound = 2 / (task.m2 * cfg.T)
    for frac in (0.25, 0.9):
        lr = frac * bound
        steps = int(np.ceil(cfg.steps * cfg.eta_A / lr))
        runs.append((f"learning_rate ({frac:g} x bound)",
                     dataclasses.replace(cfg, eta_V=lr, eta_A=lr, steps=steps, log_every=max(1, steps // 120))))
    rows = []
    for factor, c in runs:
        tr, _ = escb.train(c, device=device, task=task)
        rel = agreement(ode_for(c, task=task), tr, names)
        rows.append({"factor": factor, "batch": c.batch, "lr": c.eta_A, **{f"rel_l2 {n}": rel[n] for n in names},
                     "within_tolerance": bool(all(rel[n] <= TOLERANCE for n in names))})
    return rows


# ------------------------------------------------------------------------------------------------
# Claims
# ------------------------------------------------------------------------------------------------
def escape_time_claim(df) -> Claim:
    """Stage 1 takes time ~ log T (spec §3.4): the ODE escape matches the formula within
    :data:`ESCAPE_TOL` at every T and grows by ln(10)/sqrt(rho K) per decade (same tolerance);
    trained SGD escapes (mean over seeds) within :data:`SGD_ESCAPE_TOL` of their own task's ODE,
    for the reference SGD at small T and the fused-kernel SGD (``sgd_fast``) at larger T.
    Evidence also gives the real-SGD slope of ``escape x lr x sqrt(rho K)`` against ``ln T``
    (population prediction: 1)."""
    ode = df[df.source == "ode"].sort_values("T")
    rel_formula = np.abs(ode.escape_time.values - ode.formula.values) / ode.formula.values
    slope = np.polyfit(np.log10(ode["T"].values), ode.escape_time.values, 1)[0]
    slope_pred = np.log(10) / np.sqrt(1 / 3 * 0.1)  # the spec's setting rho = 1/3, K = 0.1

    def per_T(src):
        g = df[df.source == src]
        t = g.groupby("T").agg(sgd=("escape_time", "mean"), ode=("ode_same_task", "first"))
        return t, (np.abs(t.sgd - t.ode) / t.ode).values

    ref, rel_sgd = per_T("sgd")
    fast, rel_fast = per_T("sgd_fast")
    f = df[df.source == "sgd_fast"]
    scaled = (f.escape_time * f.lr * np.sqrt(f.rho * f.K)).values
    sgd_slope = float(np.polyfit(np.log(f["T"].values), scaled, 1)[0]) if f["T"].nunique() > 1 else float("nan")
    rels = np.concatenate([rel_sgd, rel_fast])
    holds = bool(np.all(rel_formula <= ESCAPE_TOL) and abs(slope / slope_pred - 1) <= ESCAPE_TOL
                 and np.all(np.isfinite(rels)) and np.all(rels <= SGD_ESCAPE_TOL))
    return Claim(
        "escape_time_log_T",
        "Trained from scratch, the initial (sample-intensive) stage lasts a time growing like log T: "
        "t* ~ log(T sqrt(rho))/sqrt(eta_V eta_A rho K) in the population flow.",
        holds,
        {"T_ode": ode["T"].tolist(), "ode_escape": ode.escape_time.tolist(), "formula": ode.formula.tolist(),
         "ode_vs_formula_rel": rel_formula.tolist(), "ode_slope_per_decade": slope,
         "predicted_slope_per_decade": slope_pred, "T_sgd": ref.index.tolist(),
         "sgd_escape_mean": ref.sgd.tolist(), "ode_same_task": ref.ode.tolist(),
         "sgd_vs_ode_rel": rel_sgd.tolist(), "T_sgd_fast": fast.index.tolist(),
         "sgd_fast_escape_mean": fast.sgd.tolist(), "sgd_fast_ode_same_task": fast.ode.tolist(),
         "sgd_fast_vs_ode_rel": rel_fast.tolist(), "sgd_fast_slope_vs_lnT": sgd_slope,
         "predicted_sgd_fast_slope_vs_lnT": 1.0, "tolerance_ode": ESCAPE_TOL, "tolerance_sgd": SGD_ESCAPE_TOL},
        f"ODE: spec setting K=0.1 rho=1/3 eta_V=eta_A=1, T={ode['T'].tolist()}; SGD (empirical.scb): N=3 Q=2 lr=0.8/T "
        f"batch {int(df[df.source == 'sgd'].batch.iloc[0])}, T={ref.index.tolist()}; SGD (empirical.scb.fast): N=3 Q=2 "
        f"lr=2/(m2 T)/2 batch {int(f.batch.iloc[0])}, T={fast.index.tolist()}; "
        f"{int(df[df.source == 'sgd'].seed.nunique())}/{int(f.seed.nunique())} seeds",
    )


def transfer_claim(df) -> Claim:
    """Transfer (spec §5): from the pretrained V with uniform attention, samples to escape are at
    most :data:`TRANSFER_RATIO` x those from scratch at every T (V + attention reported as ablation)."""
    piv = df.pivot(index="T", columns="start", values="samples")
    ode = df.pivot(index="T", columns="start", values="ode_escape_steps")
    ratio = (piv["pretrained V"] / piv["scratch"]).values
    ratio_va = (piv["pretrained V + attention"] / piv["scratch"]).values
    zeta0 = df[df.start == "pretrained V"].groupby("T").zeta0.first()
    lr = df.groupby("T").lr.first().values  # escape steps x lr: time in units of the flow
    holds = bool(np.all(np.isfinite(ratio)) and np.all(ratio <= TRANSFER_RATIO))
    return Claim(
        "transfer_skips_stage1",
        "Finetuning from a model pretrained on a task with a correlated transition matrix bypasses the "
        "initial sample-intensive stage (pretrained V only; attention re-initialised uniform).",
        holds,
        {"T": piv.index.tolist(), "samples_scratch": piv["scratch"].tolist(),
         "samples_pretrained_V": piv["pretrained V"].tolist(),
         "samples_pretrained_V_and_attention": piv["pretrained V + attention"].tolist(),
         "ratio_V_over_scratch": ratio.tolist(), "ratio_V_and_attention_over_scratch": ratio_va.tolist(),
         "ode_ratio_V_over_scratch": (ode["pretrained V"] / ode["scratch"]).tolist(),
         "escape_x_lr_scratch": (piv["scratch"] / df.batch.iloc[0] * lr).tolist(),
         "escape_x_lr_pretrained_V": (piv["pretrained V"] / df.batch.iloc[0] * lr).tolist(),
         "zeta0_pretrained_V": zeta0.tolist(), "threshold_ratio": TRANSFER_RATIO},
        f"N=3 Q=2 lr=0.8/T batch {int(df.batch.iloc[0])}, downstream P = {df.mix.iloc[0]} P_pre + "
        f"{1 - df.mix.iloc[0]:.2g} P_indep, same q; escape = beta reaches 1/2; one seed per T",
    )


def band_claim(overlay: dict[str, Any]) -> Claim:
    """SDE bands calibrated: coverage of SGD points (t > 0) by the central 50/80/90% bands of the
    minibatch SDE within :data:`BAND_TOL` of nominal, for every correlation observable
    (``overlay`` = :func:`fig_overlay`'s data)."""
    coverage, se, cfg = overlay["coverage"], overlay["coverage_se"], overlay["config"]
    gaps = {f"{lvl}:{n}": cov - float(lvl) for lvl, d in coverage.items() for n, cov in d.items()}
    return Claim(
        "sde_band_calibrated",
        "Minibatch SGD is described by the SDE with the minibatch-noise diffusion (spec §3.6): its "
        "nominal 50/80/90% bands cover that fraction of SGD points.",
        bool(all(abs(g) <= BAND_TOL for g in gaps.values())),
        {**{f"coverage_{lvl}_{n}": cov for lvl, d in coverage.items() for n, cov in d.items()},
         **{f"se_{lvl}_{n}": v for lvl, d in se.items() for n, v in d.items()},
         "max_abs_gap": max(abs(g) for g in gaps.values()), "tolerance": BAND_TOL},
        f"N={cfg.N} T={cfg.T} Q={cfg.Q} lr={cfg.eta_A} batch={cfg.batch} steps={cfg.steps}; "
        f"levels {list(BAND_LEVELS)}; t = 0 excluded; "
        f"{overlay['sgd'].sizes['run']} SGD runs vs {overlay['sde'].sizes['path']} SDE paths",
    )


def _extra_claims(quick: bool, device: str) -> list[Claim]:
    """The l1 study's claims (``figures.scb.l1.l1_claims``: l1_beats_sgd, l1_recovers_support)."""
    from .l1 import l1_claims

    return list(l1_claims(quick, device))
