"""Scan & Snap: theory vs the trained (Y, Z) model (docs/papers/scan_snap.md §3-§6).

:func:`compare` (the paper row's ``compare`` slot) returns a :class:`~figures.report.Report`:

* **inside the theory's regime** (Syn-Small, zero init, plain SGD, batch 1024, T = 4096 count
  vectors, eta = 1): every moving attention logit (z rows), the Y coordinates, DT entropy and loss
  of the trained model against the full T = inf ODE (``rel_l2 <= COMPARE_TOL``);
* **where agreement breaks** — the official Fig. 4 setting (T = 128, batch 128, momentum 0.9): the
  trained z rows against three theory lines, (1) the T = inf ODE at ``t = step/(1 - mu)``, (2) the
  *discrete momentum map* on the population gradient ``grad J_inf`` (same lr, mu: no ODE limit),
  (3) the momentum map on the finite-T objective ``E_counts[J]`` (Monte Carlo over count vectors,
  spec §1.3); and the momentum map vs the ODE as ``lr -> 0`` at ``mu = 0.9`` (one
  :class:`~figures.report.Break` row per theory line comparison and per learning rate);
* **claims**: the row's claims slot (:mod:`.claims`: the registry ``claims.toml``, then the
  real-text claims of :mod:`.text` when a corpus is present): each
  :class:`~figures.claims.ClaimResult` decided over seeds inside the paper's regime with its map
  (the same cached map cells as ``tdyn claims`` and the figures); the reduced claim's map beside
  the exact T = inf flow (``details["reduced_grid"]``) and the snap claim's beside the flow and
  Theorem 4's closed form (``details["snap_grid"]``) in the details.

Presets (:class:`~theory.scan_snap.ScanSnapConfig`): ``theory`` for the observables, ``official``
for where agreement breaks.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from empirical.scan_snap import train, update
from theory import scan_snap as ss

from ..context import RunContext
from ..core import rel_l2
from ..report import Break, Observable, Report
from .lines import theory_trajectory

__all__ = ["compare", "compare_data", "COMPARE_TOL", "momentum_map",
           "practice_z_rows", "theory_z_rows", "coords", "y_names", "z_names", "regime_agreement",
           "momentum_gap", "sde_calibration"]

#: Acceptance tolerance on rel_l2 inside the theory's regime.
COMPARE_TOL = 0.05

def momentum_map(config: ss.ScanSnapConfig, *, counts_per_class: int = 0, seed: int = 0):
    """The optimiser's discrete map ``v <- mu v + grad J; theta <- theta + lr v`` (PyTorch SGD:
    :mod:`empirical.scan_snap.update`, ``lr = (eta_Y, eta_Z)``) on a *deterministic* objective, from zero init, logged at
    ``config.log_steps()``: ``J_inf`` (``counts_per_class = 0``), or the finite-T objective
    ``E_counts[J]`` estimated by ``counts_per_class`` fixed count vectors ``~ Mult(T - 1, P(.|n))``
    per class (common random numbers, seeded). Returns ``(Y, Z)``: (n_log, M_in, M_out), (n_log,
    M_in, M_in). Float64, jax."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    task = ss.make_task(config)
    if counts_per_class:
        rng = np.random.default_rng(seed)
        weights = np.concatenate([rng.multinomial(config.T - 1, task.P[n], size=counts_per_class)
                                  for n in range(task.K)]).astype(np.float64)
        n_idx = np.repeat(np.arange(task.K), counts_per_class)
    else:
        weights, n_idx = task.P, np.arange(task.K)
    args = (jnp.asarray(weights), jnp.asarray(n_idx), jnp.asarray(task.query), jnp.asarray(task.label))
    grad = jax.grad(lambda Y, Z: ss.objective(Y, Z, *args, xp=jnp), argnums=(0, 1))
    hyper = {"lr": {"Y": config.eta_Y, "Z": config.eta_Z}, "method": "sgd", "momentum": config.momentum,
             "maximize": True}

    def step(carry, _):
        params, state = carry
        gY, gZ = grad(params["Y"], params["Z"])
        params, state = update.update({"Y": gY, "Z": gZ}, state, params, xp=jnp, **hyper)  # ascent on J
        return (params, state), (params["Y"], params["Z"])

    Y0, Z0 = jnp.zeros((task.M_in, task.M_out)), jnp.zeros((task.M_in, task.M_in))
    params = {"Y": Y0, "Z": Z0}
    carry = (params, update.init(params, xp=jnp))
    _, (Ys, Zs) = jax.jit(lambda c: jax.lax.scan(step, c, None, length=config.steps))(carry)
    Ys, Zs = np.concatenate([[np.zeros_like(Y0)], np.asarray(Ys)]), np.concatenate([[np.zeros_like(Z0)], np.asarray(Zs)])
    logs = config.log_steps()
    return Ys[logs], Zs[logs]


# ------------------------------------------------------------------------------------------------
# Agreement numbers
# ------------------------------------------------------------------------------------------------
def practice_z_rows(task, practice) -> np.ndarray:
    """Trained z rows (time, K, |supp|) from the logged ``z_{n}_{l}``."""
    z = np.stack([[practice[f"z_{n}_{l}"].values for l in task.support(n)] for n in range(task.K)])
    return np.moveaxis(z, -1, 0)


def theory_z_rows(task, theory, times) -> np.ndarray:
    """The ODE's z rows (time, K, |supp|) interpolated onto ``times``."""
    y = np.stack([theory[n].values for n in ss.full_system(task.config).state_names], -1)
    _, Z = ss.embed_symmetric_state(task, y)
    z = ss.z_rows(task, Z)
    tt = theory["time"].values
    return np.stack([[np.interp(times, tt, z[:, n, i]) for i in range(z.shape[2])] for n in range(z.shape[1])]
                    ).transpose(2, 0, 1)


def z_rowsregime_agreement(theory, practice, task, worst: bool = False) -> float:
    """rel_l2 over (time, class, support token) of the trained z rows vs the ODE's; with ``worst``
    the largest rel_l2 of a single logit's time series instead."""
    pr = practice_z_rows(task, practice)
    th = theory_z_rows(task, theory, practice["time"].values)
    if worst:
        return max(rel_l2(pr[:, n, i], th[:, n, i]) for n in range(pr.shape[1]) for i in range(pr.shape[2]))
    return rel_l2(pr, th)


def coords(ds, names, times=None) -> np.ndarray:
    """Variables ``names`` of a trajectory, (len(names), time) (interpolated onto ``times``)."""
    tt = ds["time"].values
    return np.stack([ds[n].values if times is None else np.interp(times, tt, ds[n].values) for n in names])


def y_names(config) -> list[str]:
    """The Y coordinates of the full T = inf system (state names)."""
    return [n for n in ss.full_system(config).state_names if n.startswith("Y_")]


def z_names(config) -> list[str]:
    """The z coordinates of the full T = inf system (state names)."""
    return [n for n in ss.full_system(config).state_names if n.startswith("z_")]


def regime_agreement(cfg, device):
    """``(rel_l2 per observable, theory, practice)``: one trained model of ``cfg`` against the full
    T = inf ODE on the same times."""
    task = ss.make_task(cfg)
    practice, _ = train(cfg, device=device)
    theory = theory_trajectory(cfg)
    times = practice["time"].values
    h0 = float(theory.dt_entropy.values[0])
    out = {
        "z_rows": z_rowsregime_agreement(theory, practice, task),
        "z_rows_worst_single_logit": z_rowsregime_agreement(theory, practice, task, worst=True),
        "y_coordinates": rel_l2(coords(practice, y_names(cfg)), coords(theory, y_names(cfg), times)),
        "dt_entropy": rel_l2(practice.dt_entropy.values, theory.dt_entropy.values),
        "dt_entropy_drop": rel_l2(h0 - practice.dt_entropy.values, h0 - theory.dt_entropy.values),
        "population_loss": rel_l2(practice.population_loss.values, theory.population_loss.values),
    }
    return out, theory, practice


def momentum_gap(quick: bool, device: str) -> dict:
    """Training in the official regime vs the ODE, the momentum map on J_inf and on E_counts[J]; and
    the momentum map vs the ODE as lr -> 0 at mu = 0.9 (same ODE-time horizon). ``rows``: the
    :class:`~figures.report.Break` rows; ``lr_sweep``: every number per learning rate."""
    cfg = ss.Config.preset("official", quick)
    task = ss.make_task(cfg)
    mc = 256 if quick else 1024
    rows, lr_rows = [], []
    for lr in ((1.0, 0.3, 0.1) if quick else (1.0, 0.3, 0.1, 0.03)):
        c = cfg.replace(eta_Y=lr, eta_Z=lr, steps=int(round(cfg.steps / lr)), log_every=int(round(cfg.log_every / lr)))
        practice, _ = train(c, device=device)
        pr = practice_z_rows(task, practice)
        th = theory_z_rows(task, theory_trajectory(c), practice["time"].values)
        _, Z_inf = momentum_map(c)
        _, Z_T = momentum_map(c, counts_per_class=mc)
        m_inf, m_T = ss.z_rows(task, Z_inf), ss.z_rows(task, Z_T)
        lr_rows.append({"lr": lr, "steps": c.steps, "map_Jinf_vs_ode": rel_l2(m_inf, th),
                        "map_EcountsJ_vs_ode": rel_l2(m_T, th), "training_vs_ode": rel_l2(pr, th),
                        "training_vs_map_Jinf": rel_l2(pr, m_inf), "training_vs_map_EcountsJ": rel_l2(pr, m_T)})
    first = lr_rows[0]
    rows = [Break("theory line", {"regime": f"official Fig. 4: T={cfg.T}, batch {cfg.batch}, momentum {cfg.momentum}, "
                                            f"lr 1, {cfg.steps} steps"},
                  {"vs_ode_T_inf": first["training_vs_ode"], "vs_momentum_map_J_inf": first["training_vs_map_Jinf"],
                   "vs_momentum_map_E_counts_J": first["training_vs_map_EcountsJ"],
                   "momentum_map_J_inf_vs_ode": first["map_Jinf_vs_ode"]},
                  None, "z rows of training vs each theory line (vs_*), and of the momentum map on J_inf vs the ODE")]
    rows += [Break("learning rate", {"lr": r["lr"]},
                   {"momentum_map_vs_ode": r["map_Jinf_vs_ode"], "training_vs_ode": r["training_vs_ode"],
                    "training_vs_map_E_counts_J": r["training_vs_map_EcountsJ"]},
                   None, f"lr -> 0 at momentum {cfg.momentum} (steps = {cfg.steps}/lr): z rows rel_l2")
             for r in lr_rows]
    return {"rows": rows, "lr_sweep": lr_rows, "mc_counts_per_class": mc}


# ------------------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------------------
def sde_calibration(quick: bool = True) -> list[dict]:
    """The minibatch SDE against count-vector SGD at T = 32, 128, 1024 (:mod:`.calibration`):
    coverage at 50/80/90% with intervals, pooled variance ratio, final means — the report's details."""
    from .calibration import calibration

    return [{k: v for k, v in r.items() if k != "cell"} for r in calibration(quick=quick)]


@lru_cache(maxsize=4)
def compare_data(ctx: RunContext = RunContext()):
    """``(report, theory, practice)`` under ``ctx``: the report and the theory-regime trajectories it
    was built on. Cached per process and context: the figures and ``report.json`` share one run."""
    from ..claims import run_claims
    from .claims import reduced_table, snap_table

    quick, device = ctx.quick, ctx.device
    cfg = ss.Config.preset("theory", quick)
    inside, theory, practice = regime_agreement(cfg, device)
    judged = {"z_rows", "y_coordinates", "dt_entropy", "dt_entropy_drop", "population_loss"}
    observables = [Observable(k, v, COMPARE_TOL if k in judged else None) for k, v in inside.items()]
    gap = momentum_gap(quick, device)
    claims = run_claims(ss.PAPER, ctx.replace(progress=False))
    named = {c.name: c for c in claims}
    report = Report(
        paper=ss.PAPER,
        regime=(f"Syn-Small, zero init, SGD momentum 0, eta_Y = eta_Z = {cfg.eta_Y}, batch {cfg.batch}, "
                f"T = {cfg.T} (count vectors), {cfg.steps} steps (t = step) vs the full T = inf ODE"),
        observables=observables, claims=claims, where_agreement_breaks=gap["rows"],
        details={"momentum_gap_lr_sweep": gap["lr_sweep"], "mc_counts_per_class": gap["mc_counts_per_class"],
                 "reduced_grid": reduced_table(named["reduced_ode_matches_training"]),
                 "snap_grid": snap_table(named["scan_then_snap"]),
                 "sde_calibration": sde_calibration(quick)})
    return report, theory, practice


def compare(ctx: RunContext | None = None, *, quick: bool | None = None, device: str | None = None) -> Report:
    """``tdyn compare scan-snap``: agreement with the T = inf ODE, where it breaks and why, and the
    paper's claims (see the module docstring), under ``ctx`` (``quick``/``device`` override it)."""
    return compare_data(RunContext.of(ctx, quick=quick, device=device))[0]
