"""SCB theory vs practice: :func:`compare` -> :class:`~figures.report.Report` (papers/scb.md §3.4,
§5, §6), and the computations the report and the figures share.

* observables — one network trained inside the theory's regime (``SCBConfig.preset("compare")``:
  small lr, large batch, lambda = 0) against the 4-D ODE on ``config.ode_times()``; the
  correlation observables are judged at rel_l2 <= :data:`TOLERANCE`, the rest are diagnostics;
* where_agreement_breaks — :class:`~figures.report.Break` rows: the same rel_l2 as the batch
  shrinks (noise) and as the learning rate approaches the stability bound 2/(m2 T)
  (discretisation);
* claims — decided in :mod:`.claims` from the data computed here: :func:`escape_time_table`
  (``escape_time_log_T``, spec §3.4), :func:`transfer_table` (``transfer_skips_stage1``, spec §5),
  :func:`overlay_data` (``sde_band_calibrated``, spec §3.6) and the l1 study (:mod:`.l1`).

The data functions are computed once per process and arguments (the figures of
:mod:`.figures` draw the same data the report judged; ``tdyn figures scb`` computes it once).
Treat what they return as read-only. This module never imports :mod:`.figures`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

import simulate
from empirical import scb as escb
from empirical.scb.fast import escape_time_points
from empirical.trainer import stack_runs
from theory import Problem, scb

from ..core import agreement, band_coverage
from ..report import Break, Observable, Report
from . import claims as C
from .calibration import calibration, calibration_json  # the overlay's cached runs: no new training

__all__ = ["compare", "agreement_breakdown", "overlay_data", "escape_time_table", "transfer_table",
           "transfer_tasks", "transfer_starts", "ode_for", "escape_formula_value", "spec_escape_times",
           "TOLERANCE", "DIAGNOSTICS", "BAND_LEVELS"]

#: rel_l2 threshold for the correlation observables (small lr, large batch)
TOLERANCE = 0.05
#: observables reported without a tolerance
DIAGNOSTICS = ("attention_target_coefficient", "value_mean_scale", "attention_sum", "population_loss")
#: nominal SDE band levels (central quantile intervals) whose coverage is reported
BAND_LEVELS = (0.5, 0.8, 0.9)


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
        overlay = overlay_data(quick, device=device)
        details["band_coverage"] = overlay["coverage"]
        details["sde_calibration"] = calibration_json(calibration(quick, device=device))
        report.claims = [C.escape_time_claim(escape_time_table(quick, device=device)),
                         C.transfer_claim(transfer_table(quick, device=device)),
                         C.band_claim(overlay),
                         *C.l1_claims(quick, device)]
    return report


def agreement_breakdown(cfg: scb.SCBConfig, device: str = "auto", task=None) -> list[Break]:
    """Where agreement breaks: rel_l2 of the correlation observables as the batch shrinks (noise)
    and as the learning rate approaches the stability bound 2/(m2 T) (discretisation)."""
    task = task or scb.make_task(cfg)
    names = list(scb.CORRELATION_OBSERVABLES)
    runs = [("batch", f"batch {B}", cfg.replace(batch=B)) for B in (cfg.batch, 256, 16)]
    bound = 2 / (task.m2 * cfg.T)
    for frac in (0.25, 0.9):
        lr = frac * bound
        steps = int(np.ceil(cfg.steps * cfg.eta_A / lr))
        runs.append(("learning_rate", f"eta_V = eta_A = {frac:g} x the stability bound 2/(m2 T) = {bound:.3g}, "
                                      f"{steps} steps (the same time)",
                     cfg.replace(eta_V=lr, eta_A=lr, steps=steps, log_every=max(1, steps // 120))))
    rows = []
    for factor, note, c in runs:
        tr, _ = escb.train(c, device=device, task=task)
        rel = agreement(ode_for(c, task=task), tr, names)
        rows.append(Break(factor, {"batch": c.batch, "lr": c.eta_A}, {n: rel[n] for n in names},
                          bool(all(rel[n] <= TOLERANCE for n in names)), note))
    return rows


# ------------------------------------------------------------------------------------------------
# The theory's side
# ------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------
# Data of the claims (and of the figures)
# ------------------------------------------------------------------------------------------------
def overlay_data(quick: bool = True, *, device: str = "auto", config: scb.SCBConfig | None = None, runs: int = 32,
                 paths: int = 256, seed: int = 0) -> dict[str, Any]:
    """ODE, SDE ensemble (minibatch SGD on the full (V, A), ``paths`` paths) and ``runs`` SGD runs at
    small batch (``SCBConfig.preset("overlay")``). ``coverage[level][name]``: the fraction of
    (run, t > 0) points of the SGD runs inside the SDE's central ``level`` band (t = 0 excluded:
    every run and path starts at the same point); ``coverage_se``: its standard error over runs
    (points of one run are correlated in time, so runs are the independent units; 32 runs give
    ~2-3 points, 8 runs ~5-8). Keys: ``ode, sde, sgd, coverage, coverage_se, config``."""
    return dict(_overlay_data(quick, device, config or scb.SCBConfig.preset("overlay", quick), runs, paths, seed))


@lru_cache(maxsize=4)
def _overlay_data(quick, device, cfg, runs, paths, seed) -> dict[str, Any]:
    task = scb.make_task(cfg)
    sde, t = scb.minibatch_sde(cfg)
    ens = simulate.solve_sde(sde, t, paths=paths, seed=seed, parameter_values=cfg.to_dict())
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
    return {"ode": ode, "sde": ens, "sgd": sgd, "coverage": coverage, "coverage_se": coverage_se, "config": cfg}


def escape_time_table(quick: bool = True, *, device: str = "auto", real_sgd_Ts=None,
                      real_sgd_batch: int = 512) -> pd.DataFrame:
    """Escape time (beta reaches 1/2) vs T, one row per source and run:

    * ``source == "ode"``: ODE and formula on the spec's setting for T = 1e2..1e4 (1e5 with --full);
    * ``"sgd"``: :func:`empirical.scb.train` (the reference SGD) at small T, lr = 0.8/T, batch of
      ``SCBConfig.preset("escape_time")`` (512 / 2048);
    * ``"sgd_fast"``: :func:`empirical.scb.fast.escape_time_points` (fused kernels) at larger T
      (``real_sgd_Ts``; quick 64, 256; --full 64..4096), lr = half the stability bound 2/(m2 T)
      (spec §2), batch ``real_sgd_batch`` (512).

    Every SGD row carries its own task's ODE escape (``ode_same_task``) and ``rel_err_vs_ode``.
    Real SGD at T = 1e5 (N = 3) is out of reach: the bound forces lr ~ 1/T, so the escape takes
    ~T log T steps of B*T positions each (~1e14 positions; pass ``real_sgd_Ts`` to try)."""
    Ts = None if real_sgd_Ts is None else tuple(real_sgd_Ts)
    return _escape_time_table(quick, device, Ts, real_sgd_batch).copy()


@lru_cache(maxsize=4)
def _escape_time_table(quick, device, real_sgd_Ts, real_sgd_batch) -> pd.DataFrame:
    df_ode = spec_escape_times([1e2, 1e3, 1e4] if quick else [1e2, 1e3, 1e4, 1e5])
    rows = []
    sgd_T = [8, 16] if quick else [8, 16, 32, 64, 128]
    seeds = 2 if quick else 5
    for Tv in sgd_T:
        lr = 0.8 / Tv  # a fixed fraction of the stability bound ~ 2N/T
        base = scb.SCBConfig.preset("escape_time", quick, T=Tv, eta_V=lr, eta_A=lr, steps=1, log_every=1)
        task = scb.make_task(base)
        t_form = escape_formula_value(scb.system_parameters(base, task))
        steps = int(3 * t_form)
        cfg = base.replace(steps=steps, log_every=max(1, steps // 200))
        t_ode = simulate.first_crossing(ode_for(cfg, np.linspace(0, steps, 801), task),
                                        "attention_target_coefficient", scb.ESCAPE_LEVEL)
        for s in range(seeds):
            tr, _ = escb.train(cfg, device=device, seed=s, task=task,
                               stop_when=lambda o: o["attention_target_coefficient"] >= 0.6)
            t_sgd = simulate.first_crossing(tr, "attention_target_coefficient", scb.ESCAPE_LEVEL)
            rows.append({"source": "sgd", "T": float(Tv), "seed": s, "lr": lr, "K": task.K, "batch": cfg.batch,
                         "escape_time": t_sgd, "ode_same_task": t_ode, "rel_err_vs_ode": abs(t_sgd - t_ode) / t_ode,
                         "formula": t_form})
    fast_T = real_sgd_Ts or ((64, 256) if quick else (64, 256, 1024, 4096))
    fast = pd.DataFrame(escape_time_points(fast_T, batch=real_sgd_batch, seeds=2, device=device))
    fast = fast.assign(source="sgd_fast")
    fast["T"] = fast["T"].astype(float)
    return pd.concat([df_ode, pd.DataFrame(rows), fast], ignore_index=True)


def transfer_tasks(Tv: int, *, mix: float = 0.7, batch: int = 256):
    """Pretraining and downstream configs/tasks at context ``T`` (Decision 10,
    ``SCBConfig.preset("transfer")``): the downstream transition is ``mix * P_pre + (1 - mix) *
    P_indep``; the downstream keeps the pretraining targets ``q^(k)`` (so the V + attention
    ablation carries aligned attention)."""
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


def transfer_table(quick: bool = True, *, device: str = "auto", Ts=None, mix: float = 0.7) -> pd.DataFrame:
    """Samples to escape (beta >= 1/2) on a downstream task whose transition is correlated with the
    pretraining task's: from scratch, from the pretrained V with the attention re-initialised
    uniform (the paper's transfer claim, spec §5/§6.1), and from pretrained V + attention
    (ablation). Batch 256; each row also carries the ODE's escape from the same start. Columns
    ``T, start, escape_steps, samples, ode_escape_steps, zeta0, beta0, batch, lr, mix``."""
    return _transfer_table(quick, device, None if Ts is None else tuple(Ts), mix).copy()


@lru_cache(maxsize=4)
def _transfer_table(quick, device, Ts, mix) -> pd.DataFrame:
    rows = []
    Ts = Ts or ([8, 16] if quick else [8, 16, 32, 64, 128])
    for Tv in Ts:
        pre, pre_task, down_task = transfer_tasks(Tv, mix=mix)
        steps = int(4 * escape_formula_value(scb.system_parameters(pre, pre_task)))
        pre = pre.replace(steps=steps, log_every=max(1, steps // 100))
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
    return pd.DataFrame(rows)
