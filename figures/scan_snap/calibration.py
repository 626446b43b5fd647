"""Scan & Snap's minibatch SDE against count-vector SGD: calibration, the finite-T
shift claim, SVAG.

The SDE is :func:`theory.scan_snap.sde.count_sde` (finite-T drift ``E_q[g]``, diffusion
``sqrt(dtau Cov_q[g]/B)``); the real runs are count-vector SGD
(:func:`empirical.scan_snap.fast.count_sgd_runs`: exact ``Multinomial(T - 1, P(.|n))`` count vectors,
the full ``(Y, Z)`` parameters, no symmetry imposed), both logged on ``config.ode_times()``.

* :func:`calibration` — coverage of the runs by the SDE's 50/80/90% bands and the pooled variance
  ratio, per observable, at ``T = 32, 128, 1024`` — rows for the compare report
  (:class:`figures.report.Break`).
* The SDE's own claim (``sde_finite_t_shift`` at the end of ``claims.toml``): finite ``T`` shifts the
  final DT entropy away from the ``T = inf`` dynamics and the SDE predicts where it goes —
  :func:`median_advantage` per SGD run, :func:`shift_to_spread` the regime's derived quantity,
  :func:`train_seeds` the runs, :func:`theory` the SDE's own paths.
* :func:`svag` — SVAG (``l = 1, 2, 4, 8``) against the SDE solved with a step ``dtau/16``: weak
  error of the final DT entropy's mean per ``l`` and its slope (theory ``-1``).

Everything is cached per config (one SDE solve per process, shared by the claim's map, the report
and the figures). Float64.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from theory import scan_snap as ss

__all__ = ["CALIBRATION", "OBSERVABLES", "calibration_config", "sde_paths", "sgd_runs", "population_final",
           "calibration", "calibration_rows", "train_seeds", "theory", "median_advantage", "shift_to_spread",
           "claim_quantities", "svag"]

#: the observables judged: a DT logit, the common logit, a Y coordinate and the DT entropy (the claim's)
OBSERVABLES = ("z_dt_0", "z_c", "Y_own_0", "dt_entropy")
#: the setting of the calibration (quick, full): Syn-Small, zero init, plain SGD (t = step), batch 32
CALIBRATION = {"quick": dict(steps=60, log_every=5, paths=256, runs=64, Ts=(32, 128, 1024)),
               "full": dict(steps=150, log_every=10, paths=1024, runs=256, Ts=(32, 128, 1024))}
#: SVAG's learning rate (eta_Y = eta_Z)
SVAG_ETA = 4.0
#: SDE paths per config for the claim's median (the theory's ensemble is a subset)
CLAIM_PATHS = 512


def calibration_config(T: int, *, quick: bool = True, batch: int = 32) -> ss.ScanSnapConfig:
    """The calibration's config at ``T``: Syn-Small, zero init, momentum 0, eta_Y = eta_Z = 1."""
    c = CALIBRATION["quick" if quick else "full"]
    return ss.Config(momentum=0.0, zero_init=True, batch=batch, T=T, steps=c["steps"], log_every=c["log_every"])


@lru_cache(maxsize=16)
def sde_paths(config: ss.ScanSnapConfig, paths: int, seed: int = 0, dt: float | None = None):
    """The SDE ensemble (dims ``(path, time)`` on ``config.ode_times()``), cached per config."""
    import simulate

    from theory.scan_snap.sde import count_sde

    model = count_sde(config, dt=dt, seed=seed)
    return simulate.solve_sde(model, config.ode_times(), paths=paths, seed=seed)


@lru_cache(maxsize=16)
def sgd_runs(config: ss.ScanSnapConfig, runs: int, seed: int = 1, l: int = 1):
    """Count-vector SGD runs (dims ``(run, time)``), cached per config."""
    from empirical.scan_snap.fast import count_sgd_runs

    return count_sgd_runs(config, runs, seed=seed, l=l)


@lru_cache(maxsize=16)
def population_final(config: ss.ScanSnapConfig, name: str = "dt_entropy") -> float:
    """``name`` at the last logged time of the ``T = inf`` dynamics with the same step (Euler of the
    ``T = inf`` flow with ``h = dtau``: deterministic GD on ``J_inf``, the no-shift reference)."""
    import simulate

    from theory.scan_snap.sde import count_sde

    tr = simulate.solve_sde(count_sde(config, exact_population=True), config.ode_times(), paths=2, seed=0)
    return float(tr[name].values[0, -1])


def calibration(*, quick: bool = True, observables=OBSERVABLES) -> list[dict]:
    """Per ``T`` and observable: coverage at 50/80/90% (run-bootstrap 90% intervals), the pooled
    variance ratio (90% F interval), the verdict of :func:`figures.calibration.calibration_map`'s
    rule (every level within ±5 points), and the final-time means (SDE, SGD, ``T = inf``)."""
    from ..calibration import CalibrationCell, _verdict, coverage, variance_ratio

    c = CALIBRATION["quick" if quick else "full"]
    rows = []
    for T in c["Ts"]:
        cfg = calibration_config(T, quick=quick)
        sde, runs = sde_paths(cfg, c["paths"]), sgd_runs(cfg, c["runs"])
        for name in observables:
            cov = coverage(sde, runs, name)
            var = variance_ratio(sde, runs, name)
            cell = CalibrationCell(1.0, cfg.batch, name, cov, var, 0.05, _verdict(cov, 0.05))
            rows.append({"T": T, "batch": cfg.batch, "observable": name, "verdict": cell.verdict,
                         "coverage": {f"{k:g}": v.to_json() for k, v in cov.items()},
                         "variance_ratio": [var.pooled, var.pooled_low, var.pooled_high],
                         "final_mean": {"sde": float(sde[name].values[:, -1].mean()),
                                        "sgd": float(runs[name].values[:, -1].mean()),
                                        "t_inf": population_final(cfg, name)},
                         "paths": c["paths"], "runs": c["runs"], "cell": cell})
    return rows


def calibration_rows(rows) -> list:
    """:func:`calibration`'s rows as :class:`figures.report.Break` (the setting carries T)."""
    out = []
    for r in rows:
        b = r["cell"].to_break()
        out.append(type(b)("(T, observable)", {"T": r["T"], **b.setting}, b.agreement, b.within, b.note))
    return out


# ------------------------------------------------------------------------------------------------
# The SDE's claim: the finite-T shift of the final DT entropy
# ------------------------------------------------------------------------------------------------
def train_seeds(config: ss.ScanSnapConfig, *, seeds, device: str = "cpu"):
    """The claim's runs: count-vector SGD, one independent run per seed (each its own generator,
    seeded by the seed and ``config.seed``), all in one batched call, dims ``(seed, time)``."""
    return _seed_runs(config, seeds)


def _seed_runs(config: ss.ScanSnapConfig, seeds, t_inf: bool = False):
    """:func:`~empirical.scan_snap.fast.count_sgd_runs` with run ``i`` seeded ``seeds[i] * 7919 +
    config.seed`` (each exactly the run made alone), as dims ``(seed, time)``."""
    from empirical.scan_snap.fast import count_sgd_runs

    seeds = [int(s) for s in seeds]
    out = count_sgd_runs(config, len(seeds), seeds=[s * 7919 + int(config.seed) for s in seeds], t_inf=t_inf)
    return out.rename({"run": "seed"}).assign_coords(seed=seeds)


def null_runs(config: ss.ScanSnapConfig, *, seeds, device: str = "cpu"):
    """The null control: the claim's runs with the population frequencies in place of the count
    vectors (T = inf, the same minibatch class draws): no finite-T shift, which the statistic, judged
    at the point's T, must not take for one."""
    return _seed_runs(config, seeds, t_inf=True)


def _sde_final(config, name="dt_entropy") -> np.ndarray:
    return sde_paths(config.replace(seed=0), CLAIM_PATHS)[name].values[:, -1]


def theory(config: ss.ScanSnapConfig):
    """The theory's ensemble for the claim: 16 SDE paths (independent of the paths whose median the
    statistic uses: they come from another seed)."""
    tr = sde_paths(config.replace(seed=0), 16, seed=1)
    return [tr.isel(path=i) for i in range(tr.sizes["path"])]


def median_advantage(traj, config: ss.ScanSnapConfig) -> float:
    """``|H - m_SDE| - |H - H_inf|`` of one run's final DT entropy ``H``: ``m_SDE`` the SDE's median
    final entropy (:data:`CLAIM_PATHS` paths), ``H_inf`` the ``T = inf`` dynamics' (no shift).
    Negative: the run is nearer the SDE's prediction than the unshifted value."""
    H = float(np.asarray(traj["dt_entropy"].values)[..., -1])
    return abs(H - float(np.median(_sde_final(config)))) - abs(H - population_final(config.replace(seed=0)))


def shift_to_spread(config: ss.ScanSnapConfig) -> float:
    """The SDE's predicted shift of the final DT entropy over its spread: ``|m_SDE - H_inf| / sd_SDE``
    (theory only: no SGD run enters)."""
    h = _sde_final(config)
    return float(abs(np.median(h) - population_final(config.replace(seed=0))) / h.std(ddof=1))


def claim_quantities(config: ss.ScanSnapConfig, coords) -> dict:
    return {"shift_to_spread": shift_to_spread(config)}


# ------------------------------------------------------------------------------------------------
# SVAG
# ------------------------------------------------------------------------------------------------
def svag(*, quick: bool = True, T: int = 32, batch: int = 32, eta: float = SVAG_ETA, scales=(1, 2, 4, 8),
         runs: int | None = None, paths: int | None = None, name: str = "dt_entropy"):
    """SVAG runs with amplification ``l`` (:mod:`empirical.svag`) against the SDE solved with step
    ``dtau/16`` (its own discretisation error well below SVAG's at ``l = 8``), at ``eta_Y = eta_Z =
    eta`` (large enough that SGD's O(eta) discretisation gap rises above the Monte-Carlo floor): the weak error of
    ``E[name]`` over the logged times and its slope in ``l`` (:func:`figures.calibration.weak_error`,
    metric ``mean``; theory ``-1``). Returns the :class:`~figures.calibration.WeakError`."""
    from ..calibration import weak_error

    runs = runs or (256 if quick else 1024)
    paths = paths or (1024 if quick else 4096)
    cfg = calibration_config(T, quick=quick, batch=batch).replace(eta_Y=eta, eta_Z=eta)
    sde = sde_paths(cfg, paths, 0, 1.0 / 16)[name].values[:, 1:]
    sv = {l: sgd_runs(cfg, runs, 1 + l, l)[name].values[:, 1:] for l in scales}
    return weak_error(sv, sde, metric="mean")
