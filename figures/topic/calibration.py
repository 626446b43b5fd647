"""The topic SDE held against real SGD: calibration numbers, where it breaks, and the
functions of the SDE's own claim (``sde_calibration`` in ``claims.toml``).

The SDE (:mod:`theory.topic.sde`) is stage 1 in the full ``(W, b)`` space with the noise of the
``N -> inf`` document law (a document's topic set and its labels). It predicts the spread of the
off-symmetric residual ``||W - sum_k omega_k Pi_k||_F`` over time. Two measured versions:

* ``context_residual`` — the residual of the part of ``[W | b]`` in the span of the long-document
  contexts (:func:`theory.topic.context_residual`): everything the derived noise reaches;
* ``off_symmetric_residual`` — the whole word block (docs/papers/topic.md §6). A document of finite length ``N``
  also moves ``W`` outside the context span (its context's within-topic fluctuations, which no
  force pulls back): SGD's total residual exceeds the SDE's by a part that grows with time and
  shrinks with ``N`` — the finite-N break, reported, not hidden.

Numbers (``calibration``): coverage of the SGD runs' (t > 0) points by the SDE's 50/80/90% bands
with run-bootstrap intervals, the variance ratio SDE/SGD per time and pooled with its interval
(:mod:`figures.calibration`), at the ``stage1`` preset; :func:`calibration_cells` over a (lr,
batch) grid gives the ``Break`` rows of where the approximation breaks. Runs are cached per
process (all seeds of a config in one batched run, ``sgd_runs``), so the claim's map cells, the
report and the figures share them.

The SDE's claim, decided over seeds (``figures.claims``): per seed, the fraction of its logged
times (t > 0) at which its context residual lies inside the SDE's central band of level ``band``,
minus ``band`` (:func:`band_fraction`); ``theory`` is an independent SDE ensemble (its paths pass the
criterion by construction, up to Monte-Carlo error).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import xarray as xr

from theory import topic as th
from theory.topic.sde import OBSERVABLES, sde

from ..calibration import LEVELS, calibration_map, coverage, variance_ratio
from ..context import RunContext
from ..core import band as sde_band

__all__ = ["OBSERVABLE", "TOTAL", "SEEDS", "PATHS", "MAP", "sgd_run", "sgd_runs", "wide_batch_runs", "runs_dataset", "sde_ensemble",
           "band_fraction", "theory", "claim_quantities", "lr_curvature", "calibration", "calibration_cells",
           "decided_claim", "report", "CLAIM", "device_type"]

#: the observable the derived noise governs, and the spec's whole-block residual
OBSERVABLE, TOTAL = "context_residual", "off_symmetric_residual"
#: SGD runs and SDE paths per calibration point (quick, full)
SEEDS = {True: 12, False: 32}
PATHS = {True: 256, False: 1000}
#: the (lr, batch) grid of where the approximation breaks (quick, full); SGD runs per cell
MAP = {True: ((0.5, 0.9), (4, 32), 6), False: ((0.1, 0.25, 0.5, 0.9), (1, 4, 32, 128), 16)}
#: the SDE's claim in the registry (``claims.toml``)
CLAIM = "sde_calibration"


def device_type(device: str) -> str:
    """``"cpu"``/``"cuda"`` for ``device`` (``"auto"`` resolved), so cached runs share one key."""
    from empirical.trainer import resolve_device

    return resolve_device(device).type


def _preset(quick: bool) -> th.TopicConfig:
    return th.TopicConfig.preset("stage1", quick)


# ------------------------------------------------------------------------------------------------
# Runs (cached per process and seed) and the SDE ensemble
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def sgd_run(config: th.TopicConfig, seed: int, device: str = "cpu") -> xr.Dataset:
    """One real-network SGD run (``empirical.topic.train``) of ``config`` with ``seed``; a run that
    diverges is returned with NaN from the step it did so (no statistic there)."""
    from empirical import topic as emp
    from theory.errors import DivergenceError

    try:
        return emp.train(config.replace(seed=int(seed)), device=device)[0]
    except DivergenceError as err:
        part = getattr(err, "partial", None)
        if part is None:
            raise
        return part.reindex(time=config.ode_times())


@lru_cache(maxsize=64)
def _seed_runs(config: th.TopicConfig, seeds: tuple[int, ...], device: str) -> tuple[xr.Dataset, ...]:
    """Every seed of ``seeds`` in one vectorised run (:func:`empirical.topic.seeds.train_seeds`:
    the numbers of :func:`sgd_run` to rounding; a seed that diverges is NaN from then on), one
    trajectory per seed."""
    from empirical.topic.seeds import train_seeds

    runs = train_seeds(config, seeds=seeds, device=device)
    runs = runs.drop_vars([n for n in runs.data_vars if n.startswith("final_")])
    return tuple(runs.isel(seed=i, drop=True) for i in range(len(seeds)))


def sgd_runs(config: th.TopicConfig, *, seeds, device: str = "cpu") -> list[xr.Dataset]:
    """The claim's ``runs``: one trajectory per seed, all seeds in one batched run (cached per
    config and seeds)."""
    return list(_seed_runs(config, tuple(int(s) for s in seeds), device))


def wide_batch_runs(config: th.TopicConfig, *, seeds, device: str = "cpu") -> list[xr.Dataset]:
    """The claim's null: SGD at 4 x ``config.batch`` (half the noise's standard deviation), decided
    against the SDE band of ``config`` itself (the statistic reads the claimed batch's band): a
    calibration test that passes this has no power against a wrong noise scale."""
    return sgd_runs(config.replace(batch=4 * config.batch), seeds=seeds, device=device)


def runs_dataset(config: th.TopicConfig, seeds, device: str = "cpu") -> xr.Dataset:
    """The runs of ``seeds`` stacked along ``run`` (the layout :mod:`figures.calibration` reads)."""
    runs = sgd_runs(config, seeds=seeds, device=device)
    return xr.concat([r[[n for n in OBSERVABLES if n in r]] for r in runs], dim="run").assign_coords(run=list(seeds))


@lru_cache(maxsize=64)
def sde_ensemble(config: th.TopicConfig, paths: int, seed: int = 0) -> xr.Dataset:
    """``paths`` paths of the topic SDE on ``config.ode_times()`` (dims path, time); a diverging
    ensemble (outside the step's stability) is returned with NaN after its last finite time."""
    import simulate as sim
    from theory.errors import SolverError

    model, t = sde(config)
    try:
        return sim.solve_sde(model, t, paths=paths, seed=seed)
    except SolverError as err:
        return err.partial.reindex(time=t)


# ------------------------------------------------------------------------------------------------
# The claim's functions
# ------------------------------------------------------------------------------------------------
def lr_curvature(config: th.TopicConfig) -> float:
    """``lr * 2 (lambda_max(E[x~ x~ᵀ]) + lam)``: one SGD step times the fastest relaxation rate of
    the mean dynamics ``W~' = -2 lr (W~ E[x~ x~ᵀ] - E[u x~ᵀ]) - 2 lr lam W`` (``x~ = [x_bar_S; 1]``).
    Below 2 a step contracts every mode; above it SGD (and the SDE's one-step scheme) diverge."""
    _, X, _ = th.document_table(config)
    Xt = np.concatenate([X, np.ones((X.shape[0], 1))], axis=1)
    return float(config.lr * 2 * (np.linalg.eigvalsh(Xt.T @ Xt / X.shape[0]).max() + config.lam))


def claim_quantities(config: th.TopicConfig, coords) -> dict:
    """Derived regime quantity of the claim: :func:`lr_curvature`."""
    return {"lr_curvature": lr_curvature(config)}


def _band_paths(config: th.TopicConfig, quick: bool = True) -> xr.Dataset:
    return sde_ensemble(config, PATHS[True if quick else False], 0)


def band_fraction(traj: xr.Dataset, config: th.TopicConfig, *, band: float) -> float:
    """Fraction of ``traj``'s logged times (t > 0) at which its context residual lies inside the
    SDE's central band of level ``band`` (distribution-free order statistics of 256 paths), minus
    ``band`` (the map's statistic axis; not ``level``, the name of the decision's confidence).
    NaN where the run or the band is not finite (a diverged run)."""
    ens = _band_paths(config)
    t, lo, hi = sde_band(ens, OBSERVABLE, (1 - band) / 2, (1 + band) / 2)
    times = traj["time"].values
    x = traj[OBSERVABLE].values
    keep = times > times[0]
    L, U = np.interp(times, t, lo)[keep], np.interp(times, t, hi)[keep]
    x = x[keep]
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(L)) and np.all(np.isfinite(U))):
        return float("nan")
    return float(np.mean((x >= L) & (x <= U)) - band)


def theory(config: th.TopicConfig) -> list[xr.Dataset]:
    """The claim's ``theory``: 128 SDE paths independent of the band's (seed 1), one trajectory
    each; calibrated by construction, so their mean band fraction is ``band`` up to Monte Carlo."""
    ens = sde_ensemble(config, 128, 1)
    return [ens.isel(path=i) for i in range(ens.sizes["path"])]


# ------------------------------------------------------------------------------------------------
# Calibration numbers and where the approximation breaks
# ------------------------------------------------------------------------------------------------
def _numbers(sde: xr.Dataset, runs: xr.Dataset, name: str) -> dict:
    cov = coverage(sde, runs, name, LEVELS)
    var = variance_ratio(sde, runs, name)
    return {"coverage": {f"{k:g}": c.to_json() for k, c in cov.items()}, "variance_ratio": var.to_json(),
            "sde_mean_final": float(np.nanmean(sde[name].values[:, -1])),
            "sgd_mean_final": float(runs[name].values[:, -1].mean())}


@lru_cache(maxsize=4)
def calibration(quick: bool = True, device: str = "cpu", config: th.TopicConfig | None = None) -> dict:
    """Coverage (50/80/90 %, run-bootstrap 90 % intervals) and the variance ratio SDE/SGD (per
    time and pooled, 90 % F intervals) of the context residual and of the total residual, at the
    ``stage1`` preset (``config``), with :data:`SEEDS` runs and :data:`PATHS` paths."""
    cfg = config or _preset(quick)
    runs = runs_dataset(cfg, range(SEEDS[quick]), device)
    sde = sde_ensemble(cfg, PATHS[quick], 0)
    return {"config": {k: getattr(cfg, k) for k in ("T", "v", "tau", "N", "batch", "lr", "steps", "log_every")},
            "n_runs": int(runs.sizes["run"]), "n_paths": int(sde.sizes["path"]), "lr_curvature": lr_curvature(cfg),
            OBSERVABLE: _numbers(sde, runs, OBSERVABLE), TOTAL: _numbers(sde, runs, TOTAL), "sde": sde, "runs": runs}


@lru_cache(maxsize=4)
def calibration_cells(quick: bool = True, device: str = "cpu"):
    """:func:`figures.calibration.calibration_map` of the context residual over :data:`MAP`'s
    (lr, batch) grid around the ``stage1`` preset (SDE: 256 paths; SGD: the grid's runs per cell)."""
    lrs, batches, n = MAP[quick]
    base = _preset(quick)

    def cell(lr, B):
        cfg = base.replace(lr=lr, batch=B)
        return sde_ensemble(cfg, PATHS[True], 0), runs_dataset(cfg, range(n), device)

    return calibration_map(cell, lrs, batches, OBSERVABLE)


@lru_cache(maxsize=4)
def decided_claim(ctx: RunContext = RunContext(device="cpu")):
    """The SDE's claim (:data:`CLAIM`) decided over seeds with its map under ``ctx``
    (``figures.claims``; the map cells are kept in the claims store, so a second call in the same
    or a later process reuses them)."""
    from ..claims import decide_claim, plan_claim, registry

    return decide_claim(plan_claim(registry("topic").get(CLAIM), quick=ctx.quick), ctx)


def report(quick: bool = True, device: str = "cpu", ctx: RunContext | None = None) -> tuple[dict, list]:
    """``(details, breaks)`` for the compare report: the calibration numbers (without the
    ensembles), the (lr, batch) map, the SDE's claim decided over seeds under ``ctx`` (its JSON)
    and the finite-N break of the total residual."""
    from ..report import Break

    cal = calibration(quick, device)
    cells = calibration_cells(quick, device)
    details = {k: v for k, v in cal.items() if k not in ("sde", "runs")}
    details["map"] = [c.to_break().to_json() for c in cells]
    details["claim"] = decided_claim(RunContext.of(ctx, quick=quick, device=device, progress=False)).to_json()
    tot = cal[TOTAL]["coverage"]
    breaks = [c.to_break() for c in cells]
    breaks.append(Break("finite N (total residual)", {"N": cal["config"]["N"], **{
        f"coverage_{k}": v["coverage"] for k, v in tot.items()}, "sgd_mean_final": cal[TOTAL]["sgd_mean_final"],
        "sde_mean_final": cal[TOTAL]["sde_mean_final"]}, {}, False,
        "the whole off-symmetric residual of SGD exceeds the SDE's: a finite document's context moves W outside "
        "the span of the N -> inf contexts, where no force pulls it back (the context residual is the part the "
        "derived noise governs)"))
    return details, breaks
