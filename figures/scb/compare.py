"""SCB theory vs practice: :func:`compare` -> :class:`~figures.report.Report` (docs/papers/scb.md §3.4,
§5, §6), and the computations the report and the figures share.

* observables — one network trained inside the theory's regime (``SCBConfig.preset("compare")``:
  small lr, large batch, lambda = 0) against the 4-D ODE on ``config.ode_times()``; the
  correlation observables are judged at rel_l2 <= :data:`TOLERANCE`, the rest are diagnostics;
* where_agreement_breaks — :class:`~figures.report.Break` rows: the same rel_l2 as the batch
  shrinks (noise) and as the learning rate approaches the stability bound 2/(m2 T)
  (discretisation);
* claims — the registry's :class:`~figures.claims.ClaimResult` (:mod:`.claims`, decided over seeds
  with their validity maps; the map cells are in the claims' store, so after ``tdyn claims`` or
  the figures' claims step the report only reads them), then ``sde_band_calibrated`` (spec §3.6,
  a single-run claim on :func:`~figures.scb.calibration.overlay_data` until a registry entry replaces it);
* :func:`escape_time_table` and :func:`transfer_table` — the escape and transfer claims' runs (the
  same cached computation their map cells use) as tables for the figures.

The data functions are computed once per process and arguments (the figures of
:mod:`.figures` draw the same data the report judged; ``tdyn figures scb`` computes it once).
Treat what they return as read-only. This module never imports :mod:`.figures`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

import simulate
from empirical import scb as escb
from theory import Problem, scb

from ..context import RunContext
from ..core import agreement
from ..report import Break, Observable, Report
from . import claims as C
from .calibration import calibration, calibration_json, ode_for, overlay_data, svag, svag_json

__all__ = ["compare", "agreement_breakdown", "escape_time_table", "transfer_table", "escape_formula_value",
           "spec_escape_times", "TOLERANCE", "DIAGNOSTICS"]

#: rel_l2 threshold for the correlation observables (small lr, large batch)
TOLERANCE = 0.05
#: observables reported without a tolerance
DIAGNOSTICS = ("attention_target_coefficient", "value_mean_scale", "attention_sum", "population_loss")


def _regime(cfg: scb.SCBConfig, task) -> str:
    return (f"N={cfg.N} T={cfg.T} Q={cfg.Q} eta_V={cfg.eta_V} eta_A={cfg.eta_A} batch={cfg.batch} "
            f"steps={cfg.steps} (K={task.K:.4g}, m2={task.m2:.4g}, stability eta_A<{2 / (task.m2 * cfg.T):.3g})")


def compare(ctx: RunContext | None = None, *, quick: bool | None = None, device: str | None = None,
            config: scb.SCBConfig | None = None, breakdown: bool = True, claims: bool = True) -> Report:
    """Train one network in the regime, compare it with the ODE over the whole trajectory (through
    the stage-1 escape), report where agreement breaks and decide the paper's claims."""
    ctx = RunContext.of(ctx, quick=quick, device=device)
    quick, device = ctx.quick, ctx.device
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
        if not quick:  # SVAG's weak error vs l (~1.5 CPU-minutes; cached, shared with fig_svag)
            details["sde_calibration"]["svag"] = svag_json(svag(False))
        # the registry's claims, decided over seeds (the SDE's own claim, sde_band_coverage, among them)
        report.claims = list(C.claims(ctx.replace(progress=False)))  # no bar: under the report's
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
def escape_time_table(quick: bool = True, *, device: str = "auto") -> pd.DataFrame:
    """Escape time (beta reaches 1/2) vs T, one row per source and run:

    * ``source == "ode"``: ODE and formula on the spec's setting for T = 1e2..1e4 (1e5 with --full);
    * ``"sgd_fast"``: the ``escape_time_log_t`` claim's runs (:func:`figures.scb.claims.escape_runs`:
      real SGD, fused kernels, lr = half the stability bound 2/(m2 T)), every context T of its map
      at every batch and seed, with the escape of its task's exact population-gradient map of the full
      (V, A) (``ode_same_task``: the claim's theory, :func:`figures.scb.claims.escape_theory`) and the
      formula."""
    return _escape_time_table(quick, _device(device)).copy()


def _device(device: str) -> str:
    from empirical.trainer import resolve_device

    return resolve_device(device).type


@lru_cache(maxsize=4)
def _escape_time_table(quick, device) -> pd.DataFrame:
    df_ode = spec_escape_times([1e2, 1e3, 1e4] if quick else [1e2, 1e3, 1e4, 1e5])
    rows = []
    for _, cfg, runs in C.map_runs("escape_time_log_t", quick=quick, device=device):
        theory = C.escape_theory(cfg)
        for i, Tv in enumerate(theory["context"].values):
            _, task, lr = C.escape_context(cfg, int(Tv))
            t_ode = float(theory["escape_steps"].values[i])
            for s, r in enumerate(runs):
                esc = float(r["escape_steps"].values[i])
                rows.append({"source": "sgd_fast", "T": float(Tv), "batch": cfg.batch, "seed": s, "lr": lr,
                             "K": task.K, "rho": float(task.rho.mean()), "escape_time": esc, "ode_same_task": t_ode,
                             "rel_err_vs_ode": abs(esc - t_ode) / t_ode, "formula": C.escape_formula(task, lr)})
    df = pd.concat([df_ode, pd.DataFrame(rows)], ignore_index=True)
    return df.drop_duplicates(subset=["source", "T", "batch", "seed"], ignore_index=True)


def transfer_table(quick: bool = True, *, device: str = "auto") -> pd.DataFrame:
    """The ``transfer_skips_stage1`` claim's runs (:func:`figures.scb.claims.transfer_runs`) as rows
    ``T, start, seed, escape_steps, samples, ode_escape_steps, zeta0, batch, mix``: per seed the
    escape (beta >= 1/2) on the downstream task from scratch and from V pretrained for
    ``pretrain`` x t* (attention uniform), with the theory's escape from the theory's start (the exact
    population-gradient map of the full (V, A), :func:`figures.scb.claims.transfer_theory`)."""
    return _transfer_table(quick, _device(device)).copy()


@lru_cache(maxsize=4)
def _transfer_table(quick, device) -> pd.DataFrame:
    rows = []
    for _, cfg, runs in C.map_runs("transfer_skips_stage1", quick=quick, device=device):
        th = C.transfer_theory(cfg)
        for s, r in enumerate(runs):
            starts = [("scratch", float(r["escape_scratch"]), float(th["escape_scratch"]), 0.0)] + [
                (f"pretrained V ({p:g} t*)", float(r["escape_transfer"].sel(pretrain=p)),
                 float(th["escape_transfer"].sel(pretrain=p)), float(r["zeta0"].sel(pretrain=p)))
                for p in r["pretrain"].values]
            for label, esc, ode, z0 in starts:
                rows.append({"T": float(cfg.T), "start": label, "seed": s, "escape_steps": esc,
                             "samples": esc * cfg.batch, "ode_escape_steps": ode, "zeta0": z0, "batch": cfg.batch,
                             "mix": C.TRANSFER_MIX})
    return pd.DataFrame(rows)
