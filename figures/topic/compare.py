"""`tdyn compare topic` (the paper row's ``compare`` slot): the runs and the Report.

* :func:`stage1_comparison` — the stage-1 topic mode ``omega_2(t)`` (and ``omega_2/v``, the block
  statistic) of a trained network (squared loss, uniform attention, one-hot, SGD) against the
  derived ODE (``theory.topic.problem``); the final block statistic against the closed form.
* :func:`two_stage_run` — joint training of W_K, W_Q, W_V from small init; the stage-2 onset of
  the linearised theory (:mod:`theory.topic.onset`) against the measured one.
* :func:`attention_table` — the paper's attention statistics (docs/papers/topic.md §5.6) for Adam
  0.003/0.01/0.03 and SGD 0.01/0.03 on the official LDA setting, mean and standard deviation
  over the seeds of the claim ``attention_table``'s map cells; each row carries its predicted
  onset (the SGD rows' lies far past the budget: they stay at their initial attention).
* :func:`compare` — the :class:`~figures.report.Report`: observables, the paper's claims (the
  :class:`~figures.claims.ClaimResult` of every claim of ``claims.toml``, decided over seeds in
  :mod:`.claims`, then the real-text claims of :mod:`.text` (``text_claims.toml``), decided over
  the real-text protocol's seeds when a corpus is present) and where agreement breaks (:class:`~figures.report.Break` rows).

Every run is a map cell's: :func:`empirical.topic.seeds.train_seeds` of a preset config with the
claims' seeds, cached per process, so the report, the figures and the claims' maps share each
run (seed 0 is the one a figure shows). This module never imports :mod:`.figures`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

import simulate as sim
from simulate.trajectory import make_trajectory
from empirical.topic.seeds import ATTENTION_KEYS, train_seeds
from theory import topic as th
from theory.topic import onset

from ..context import RunContext
from ..core import agreement
from ..report import Break, Observable, Report
from . import calibration as sde_calibration
from .claims import claims as decide_claims
from .claims import two_stage_check

__all__ = ["TOLERANCE", "TABLE_ROWS", "SEEDS", "stage1_comparison", "predicted_onset", "two_stage_run",
           "table_onset", "attention_table", "table_rows", "compare"]

#: Acceptance: rel_l2 of the topic mode vs the ODE, and |final/theory - 1| of the block statistic.
TOLERANCE = 0.05

#: the rows of the paper's attention table (spec §5.6): (optimiser, learning rate)
TABLE_ROWS = (("adam", 0.003), ("adam", 0.01), ("adam", 0.03), ("sgd", 0.01), ("sgd", 0.03))

#: the seeds of every run here: those of the two-stage claims' quick maps, so their runs are shared (figures show seed 0)
SEEDS = tuple(range(7))


@dataclass(frozen=True)
class FinalValue:
    """The trained value matrix of one seed (what the heat-map shows)."""

    matrix: np.ndarray

    def value_like_matrix(self) -> np.ndarray:
        return self.matrix


def _seed0(runs):
    """Seed 0 of a batched run as a trajectory, its final attention statistics in the attrs (as
    :func:`empirical.topic.train` puts them)."""
    traj = runs.isel(seed=0).drop_vars([f"final_{k}" for k in ATTENTION_KEYS if f"final_{k}" in runs], errors="ignore")
    for k in ATTENTION_KEYS:
        if f"final_{k}" in runs:
            traj.attrs[k] = float(runs[f"final_{k}"].isel(seed=0))
    return traj


# ------------------------------------------------------------------------------------------------
# Stage 1: lambda_2(t) theory vs trained
# ------------------------------------------------------------------------------------------------
def _closed_forms(cfg: th.TopicConfig) -> dict[str, float]:
    system = th.stage1_system(cfg.keys)
    p = system.parameter_vector(th.system_parameters(cfg))
    return {k: float(x) for k, x in system.closed_forms_numpy()(np.float64(cfg.ode_time(cfg.steps)), p).items()}


@lru_cache(maxsize=4)
def stage1_comparison(quick: bool = True, device: str = "auto", config: th.TopicConfig | None = None) -> dict:
    """Train the stage-1 network (the seeds of the claim ``stage1_block_difference``'s cell at the
    preset) and solve the derived ODE on the Trainer's grid. Returns a dict with ``ode``,
    ``traj`` (seed 0), ``runs`` (every seed), ``experiment`` (seed 0's final ``W_V``),
    ``rel_l2`` per observable and the block statistic."""
    cfg = config or th.TopicConfig.preset("stage1", quick)
    runs = train_seeds(cfg, seeds=SEEDS, device=device)
    traj = _seed0(runs)
    ode = sim.solve(th.problem(cfg), backend="scipy")
    rel = agreement(ode, traj, ["topic_mode", "block_difference"])
    theory_final = _closed_forms(cfg)["block_difference_optimum"]
    measured = float(traj["block_difference"].values[-1])
    return {"config": cfg, "ode": ode, "traj": traj, "runs": runs,
            "experiment": FinalValue(runs["final_value"].isel(seed=0).values), "rel_l2": rel,
            "block_difference": {"trained_final": measured, "ode_final": float(ode["block_difference"].values[-1]),
                                 "theory_optimum": theory_final, "rel_error": measured / theory_final - 1,
                                 "seeds_final": [float(x) for x in runs["block_difference"].values[:, -1]]},
            # where agreement breaks: finite N gives the within-topic mode a gradient (theory: frozen)
            "finite_N": {"within_topic_mode_trained": float(traj["within_topic_mode"].values[-1]),
                         "within_topic_mode_ode": float(ode["within_topic_mode"].values[-1])}}


# ------------------------------------------------------------------------------------------------
# Two stages
# ------------------------------------------------------------------------------------------------
def predicted_onset(config: th.TopicConfig) -> dict:
    """The linearised theory's onset (:func:`theory.topic.onset.predicted_onset_time`: expected
    ``||W_K||_F`` reaches 1), the stage-1 time (80 % of the topic mode), the escape rate ``rho*``
    per step, the spec's heuristic ``t_1 + sqrt(d_a) ln(1/eps)/(eta sigma_max)`` and the theory's
    trajectory (``solution``: ``kq_scale`` is its expected ``||W_K||_F``)."""
    e = onset.escape_constants(config)
    rate, _ = onset.stage1_rate(config)
    t1 = math.log(5.0) / rate
    t, curves = onset.curves(config, np.linspace(0.0, 4.0 * config.steps, 4001))
    sol = make_trajectory(t, curves, paper="topic", system="two_stage_linearised", source="theory", config=config)
    return {"two_stage_ode": onset.predicted_onset_time(config), "stage1_80pct": t1,
            "heuristic": t1 + math.log(1.0 / config.kq_scale) / e["rho_star"],
            "sigma_max": e["sigma_max"], "d_a": e["d_a"], "escape_rate": e["rho_star"],
            "solution": sol.assign(kq_scale=sol["norm_W_K"])}


@lru_cache(maxsize=4)
def two_stage_run(quick: bool = True, device: str = "auto", config: th.TopicConfig | None = None):
    """Joint training from small init (the claims' cell at the preset; seed 0 shown). Returns
    ``(trajectory, prediction, check)``; ``check`` adds the per-seed numbers (``seeds``)."""
    cfg = config or th.TopicConfig.preset("two_stage", quick)
    runs = train_seeds(cfg, seeds=SEEDS, device=device)
    traj = _seed0(runs)
    check = two_stage_check(traj, cfg)
    check["seeds"] = [two_stage_check(runs.isel(seed=i), cfg) for i in range(runs.sizes["seed"])]
    return traj, predicted_onset(cfg), check


# ------------------------------------------------------------------------------------------------
# Attention table (spec §5.6)
# ------------------------------------------------------------------------------------------------
def table_onset(config: th.TopicConfig) -> dict:
    """Predicted stage-2 onset (steps) of one table row: the spec §3.6 escape heuristic for SGD
    (tau-topic, squared-loss theory at the row's sizes; these runs use LDA data and CE), ``None``
    for Adam (the escape-rate theory is for gradient flow; Adam normalises per coordinate)."""
    if config.optimizer != "sgd":
        return {"onset_predicted": None, "onset_note": "Adam: no gradient-flow prediction (docs/papers/topic.md §3.6)"}
    return {"onset_predicted": th.predicted_onset(config)["t2_steps"],
            "onset_note": "SGD escape heuristic (tau-topic law, squared loss; the run uses LDA data and CE)"}


def attention_table(quick: bool = True, device: str = "auto") -> list[dict]:
    """One row per optimiser/lr of the paper's table: predicted onset, then the three average
    attentions (mean and standard deviation over :data:`SEEDS`), ``gamma_hat`` and ``gamma*`` of
    the code variant (``1 + T p_c/p_r``). No row is dropped or rescaled: an SGD row's attention
    stays where it started (its predicted onset is ~1e7 steps), which the row shows."""
    base = th.TopicConfig.preset("attention_table", quick)
    gamma_star = 1 + base.T * base.p_c / base.p_r
    rows = []
    for opt, lr in TABLE_ROWS:
        cfg = base.replace(optimizer=opt, lr=lr)
        runs = train_seeds(cfg, seeds=SEEDS, device=device)
        stat = {k: runs[f"final_{k}"].values for k in ATTENTION_KEYS}
        row = {"optimizer": opt, "lr": lr, "steps": cfg.steps, "seeds": len(SEEDS), "dropped": "", **table_onset(cfg),
               "gamma_star_code_variant": gamma_star, "uniform": float(stat["attention_uniform"][0])}
        for k in ("same_word", "same_topic_other_word", "different_topic"):
            row[k] = float(np.mean(stat[f"attention_{k}"]))
            row[f"{k}_std"] = float(np.std(stat[f"attention_{k}"], ddof=1))
        row.update(gamma_hat=float(np.mean(stat["gamma_hat"])), gamma_hat_std=float(np.std(stat["gamma_hat"], ddof=1)),
                   norm_W_K_init=float(runs["norm_W_K"].values[:, 0].mean()),
                   norm_W_K_final=float(runs["norm_W_K"].values[:, -1].mean()),
                   ordering_holds_seeds=int(np.sum((stat["attention_same_topic_other_word"] > stat["attention_uniform"])
                                                   & (stat["attention_uniform"] > stat["attention_different_topic"]))))
        rows.append(row)
    return rows


@lru_cache(maxsize=4)
def table_rows(quick: bool, device: str) -> list[dict]:
    """:func:`attention_table` of the preset, once per process (compare and the figure share it)."""
    return attention_table(quick, device)


# ------------------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------------------
def compare(ctx: RunContext | None = None, *, quick: bool | None = None, device: str | None = None) -> Report:
    """`tdyn compare topic`: stage-1 agreement (observables), the claims (decided over seeds with
    their maps: ``claims.toml``) and where agreement breaks."""
    ctx = RunContext.of(ctx, quick=quick, device=device)
    quick, device = ctx.quick, ctx.device
    st = stage1_comparison(quick=quick, device=device)
    traj, pred, check = two_stage_run(quick=quick, device=device)
    c1, cj = st["config"], th.TopicConfig.preset("two_stage", quick)
    regime1 = (f"stage 1: squared loss, uniform attention, one-hot, T={c1.T} v={c1.v} tau={c1.tau} N={c1.N} "
               f"batch={c1.batch} SGD lr={c1.lr} steps={c1.steps}, keys={c1.keys}")
    regime2 = (f"joint K/Q/V from init {cj.kq_scale:g}: squared loss, code keys, T={cj.T} v={cj.v} tau={cj.tau} "
               f"N={cj.N} batch={cj.batch} SGD lr={cj.lr} (K/Q x{cj.kq_lr_ratio:g}) steps={cj.steps} "
               f"p_c={cj.p_c} p_r={cj.p_r}")
    bd = st["block_difference"]
    observables = [Observable(n, r, TOLERANCE) for n, r in st["rel_l2"].items()]
    observables.append(Observable("block_difference_final", abs(bd["rel_error"]), TOLERANCE,
                                  "|trained final / closed-form optimum 1/(v a) - 1|"))
    breaks = [Break("finite N", dict(st["finite_N"]), {}, None,
                    "within-topic mode (finite N: own position visible; theory N -> inf keeps it at 0)"),
              Break("joint training after the onset", {"gamma_hat": check["gamma_hat"], "gamma_star": check["gamma_star"]},
                    {}, None, "gamma_hat at the end of the joint run vs the stage-2 optimum gamma* (W_V frozen at the "
                              "stage-1 optimum; in joint training W_V keeps moving after the onset)")]
    details = {"block_difference": bd, "two_stage": {k: v for k, v in check.items() if k != "seeds"},
               "two_stage_seeds": check["seeds"]}
    if not quick:
        details["attention_table"] = table_rows(quick, device)
    # the registry's claims and the real-text claims (when a corpus is there), all decided over seeds
    results = decide_claims(ctx.replace(progress=False))  # shared with the figures' claims step
    # the minibatch SDE against real SGD: coverage, variance ratios, (lr, batch) map, its claim
    details["sde_calibration"], sde_breaks = sde_calibration.report(quick, sde_calibration.device_type(device), ctx)
    breaks += sde_breaks
    return Report("topic", f"{regime1}; {regime2}", observables, results, breaks, details=details)
