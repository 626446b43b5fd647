"""The JoMA block SDE (docs/papers/joma.md §2.7, :mod:`theory.joma.sde`) against real minibatch SGD of the block
(:func:`empirical.joma.minibatch.sgd_seeds`): the SDE's calibration and its own claim.

**Protocol.** The ``fixed`` block (exp attention, linear MLP, ``Mc = 6``, ``K = N = 3``: the
derivation check's block, whose noise is derived from its per-sample loss) from zero
initialisation; SGD on ``B`` rows per step drawn with replacement, learning rate ``lr``; judged at
the logged times ``0 < t <= HORIZON`` (ODE time ``t = lr * step``; the noise-free block blows up
near ``t = 16``). The SDE is integrated at its own resolution — Euler–Maruyama with step
``min(lr, SDE_DT)`` on the fixed output grid ``SDE_GRID`` — so that at large ``lr`` it represents
the SDE, not another discretisation of SGD (at ``lr = SDE_DT`` both take one step per optimiser
step). The runs' logged times lie on that grid when ``lr * log_every`` is a multiple of its
spacing (``lr = 0.01 * 2^j`` with ``log_every = 5``); elsewhere the paths are interpolated.

* :func:`coverage_error` — the claim's statistic: for one run (or one SDE path), the fraction of
  its points (every state coordinate, every judged time) inside the SDE's central band of level ``alpha``,
  minus ``alpha``;
* :func:`bias_ratio` — the regime's derived quantity: the deterministic discretisation bias of SGD
  (full-batch gradient descent at step ``lr`` against the ODE), in units of the SDE's standard
  deviation, at its largest over coordinates and judged times;
* :func:`calibration_report` — coverage at 50/80/90 % with run-bootstrap intervals and the
  variance ratio SDE/SGD over time with F intervals (:mod:`figures.calibration`), per observable
  and pooled over the state; :func:`calibration_breaks` — :func:`figures.calibration.calibration_map`
  over (lr, batch) as :class:`~figures.report.Break` rows;
* :func:`sde_claim` — the SDE's own claim (``sde_band_covers_sgd`` in ``claims.toml``) decided over
  seeds with its validity map (:mod:`figures.claims`).

Everything is computed once per process (cached per config): the claim's map cells, the report and
the figures share the ensembles and runs.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import xarray as xr
from scipy import optimize, stats

from theory import joma as J
from theory.errors import SolverError

from ..context import RunContext

__all__ = ["HORIZON", "SDE_DT", "SDE_GRID", "BAND_PATHS", "THEORY_PATHS", "CLAIM", "BIAS_LIMIT", "shift_limit",
           "protocol_config", "clear_caches", "sde_ensemble", "sgd_runs", "calibration_runs", "null_runs", "coverage_error", "bias_ratio",
           "claim_quantities", "sde_finite", "theory", "calibration_report", "calibration_breaks", "sde_claim", "OBSERVABLES"]

#: ODE time judged (the deterministic block blows up near t = 16; noise brings it earlier)
HORIZON = 10.0
#: the SDE's own Euler–Maruyama step (ODE time): 1000 steps to the horizon
SDE_DT = HORIZON / 1000
#: output grid of the SDE ensembles (spacing 0.05: five SDE steps)
SDE_GRID = np.linspace(0.0, HORIZON, 201)
#: paths whose quantiles make the band; paths held out as the theory's own "runs"
BAND_PATHS, THEORY_PATHS = 1024, 1024
#: the SDE's claim in the registry
CLAIM = "sde_band_covers_sgd"
#: observables of the report (the first unit's weight on the first token, two attention logits,
#: the Theorem-1 invariant of token 1, which SGD noise moves: an Itô effect the SDE predicts)
OBSERVABLES = ("v_1_1", "z_1", "z_3", "invariant_1")
#: the calibration's coverage window (±5 points) and levels
TOLERANCE, LEVELS = 0.05, (0.5, 0.8, 0.9)


def shift_limit(tolerance: float = TOLERANCE, levels=LEVELS) -> float:
    """The largest shift ``delta`` (in standard deviations) of a normal law whose probability of
    falling in the central ``level`` band of the unshifted law stays within ``tolerance`` of
    ``level`` at every level: the regime bound of :func:`bias_ratio` (derived, not chosen)."""
    def deficit(d, lv):
        q = stats.norm.ppf(0.5 + lv / 2)
        return lv - (stats.norm.cdf(q - d) - stats.norm.cdf(-q - d)) - tolerance

    return float(min(optimize.brentq(deficit, 0.0, 5.0, args=(lv,)) for lv in levels))


#: :func:`shift_limit` (0.48 to two decimals: the claim's regime bound in claims.toml)
BIAS_LIMIT = shift_limit()


def protocol_config(*, lr: float = 0.01, batch: int = 1, steps: int = 1000, log_every: int = 5,
                    replacement: bool = True) -> J.JomaConfig:
    """The calibration protocol's config (the claim's protocol point; module docstring)."""
    return J.JomaConfig(variant="fixed", lr=lr, batch=batch, steps=steps, log_every=log_every, replacement=replacement)


def _judged(times: np.ndarray) -> np.ndarray:
    return (times > 0) & (times <= HORIZON * (1 + 1e-12))


def _state_names(config) -> tuple[str, ...]:
    return J.state_names(config.Mc, config.K)


def sde_ensemble(config: J.JomaConfig, paths: int | None = None, seed: int = 12345) -> xr.Dataset:
    """The block SDE of ``config`` (``batch`` rows per step) on :data:`SDE_GRID`: ``paths`` paths,
    Euler–Maruyama step ``min(lr, SDE_DT)``. Paths that blow up before the horizon are cut with the
    rest (the ensemble ends at the last time every path was finite: ``attrs["complete"]`` False).
    The SDE does not read how SGD samples its rows (``replacement``): one ensemble serves both."""
    paths = BAND_PATHS + THEORY_PATHS if paths is None else int(paths)
    return _sde_ensemble(config.replace(replacement=True), paths, seed)


@lru_cache(maxsize=64)
def _sde_ensemble(config: J.JomaConfig, paths: int, seed: int) -> xr.Dataset:
    import simulate as sim

    model = J.sde_model(config)
    try:
        ens = sim.solve_sde(model, SDE_GRID, paths=paths, seed=seed, dt=min(float(config.lr), SDE_DT))
        ens.attrs["complete"] = 1
    except SolverError as err:
        ens = err.partial
        ens.attrs["complete"] = 0
    return ens


def clear_caches() -> None:
    """Forget every cached ensemble, run and band (tests that change the path counts)."""
    for f in (_sde_ensemble, _band, _band_on, sgd_runs, _gd_bias, sde_claim, calibration_report, calibration_breaks):
        f.cache_clear()


def _band_paths(config) -> xr.Dataset:
    """The band's paths: the first :data:`BAND_PATHS` of the ensemble (a path's numbers do not
    depend on how many run beside it). At the protocol's learning rate (the claim's cells) the
    ensemble also holds the theory's paths; elsewhere (the break rows) only the band is solved."""
    paths = BAND_PATHS + THEORY_PATHS if config.lr == protocol_config().lr else BAND_PATHS
    return sde_ensemble(config, paths).isel(path=slice(0, BAND_PATHS))


@lru_cache(maxsize=64)
def sgd_runs(config: J.JomaConfig, seeds: tuple[int, ...]) -> xr.Dataset:
    """Minibatch SGD of the block for ``seeds`` (dims ``(run, time)``, all logged times)."""
    from empirical.joma.minibatch import sgd_seeds

    return sgd_seeds(config, seeds=list(seeds)).rename({"seed": "run"})


def calibration_runs(config: J.JomaConfig, *, seeds, device: str = "cpu") -> xr.Dataset:
    """The claim's ``runs`` (all seeds of a map point in one vectorised call; dim ``seed``)."""
    return sgd_runs(config, tuple(int(s) for s in seeds)).rename({"run": "seed"})


def null_runs(config: J.JomaConfig, *, seeds, device: str = "cpu") -> xr.Dataset:
    """The SDE claim's null control: noise-free full-batch gradient descent (all ``N`` rows every
    step, the deterministic alternative the SDE's diffusion term excludes), one copy per seed,
    judged against the ``B``-row SDE band of ``config`` by the same statistic."""
    full = config.replace(batch=int(config.N), replacement=False)
    return sgd_runs(full, tuple(int(s) for s in seeds)).rename({"run": "seed"})


@lru_cache(maxsize=256)
def _band(config: J.JomaConfig, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(t, lo, hi)``: the SDE's central ``level`` band per state coordinate, ``lo``/``hi``
    (n_state, n_t) on :data:`SDE_GRID` (as far as the ensemble reaches)."""
    if not config.replacement:
        return _band(config.replace(replacement=True), level)
    ens = _band_paths(config)
    Y = np.sort(np.stack([ens.variables[n].values for n in _state_names(config)]), axis=1)  # (state, path, time)
    n = Y.shape[1]  # the order statistics of figures.core.band (distribution-free prediction interval)
    i = max(int(np.floor((n + 1) * (1 - level) / 2)), 1)
    j = min(int(np.ceil((n + 1) * (1 + level) / 2)), n)
    return ens["time"].values, Y[:, i - 1], Y[:, j - 1]


@lru_cache(maxsize=256)
def _band_on(config: J.JomaConfig, level: float, times: bytes):
    """``(keep, lo, hi)``: the band on the judged ones of ``times`` (float64 bytes); ``None``
    when the ensemble does not reach the last judged time."""
    t = np.frombuffer(times, dtype=np.float64)
    keep = _judged(t)
    tb, lo, hi = _band(config, level)
    tk = t[keep]
    if tk.size == 0 or tb[-1] < tk[-1] * (1 - 1e-12):
        return None
    return keep, np.stack([np.interp(tk, tb, r) for r in lo]), np.stack([np.interp(tk, tb, r) for r in hi])


def coverage_error(traj: xr.Dataset, config: J.JomaConfig, *, alpha: float) -> float:
    """The claim's statistic on one trajectory (an SGD run or an SDE path): the fraction of its
    points ``(coordinate, t)`` with ``0 < t <= HORIZON`` inside the SDE's central band of level
    ``alpha`` for ``config``, minus ``alpha``. NaN when the trajectory or the SDE ensemble does not
    reach the horizon finitely (a diverged run: the point stays undecided)."""
    t = np.ascontiguousarray(traj.variables["time"].values, dtype=np.float64)
    band = _band_on(config, float(alpha), t.tobytes())
    if band is None:
        return float("nan")
    keep, lo, hi = band
    Y = np.stack([np.asarray(traj.variables[n].values, float)[keep] for n in _state_names(config)])
    if not np.isfinite(Y).all():
        return float("nan")
    return float(np.mean((Y >= lo) & (Y <= hi)) - alpha)


def theory(config: J.JomaConfig) -> list[xr.Dataset]:
    """The theory's own "runs": :data:`THEORY_PATHS` SDE paths held out of the band, at the
    config's logged times (the claim's ``theory``: the criterion holds for the SDE itself)."""
    ens = sde_ensemble(config).isel(path=slice(BAND_PATHS, BAND_PATHS + THEORY_PATHS))
    t = np.asarray(config.ode_times(), float)
    t = t[t <= ens["time"].values[-1] * (1 + 1e-12)]
    on = ens.interp(time=t)
    return [on.isel(path=i) for i in range(on.sizes["path"])]


@lru_cache(maxsize=64)
def _gd_bias(config: J.JomaConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(t, |GD - ODE|)`` (n_t, n_state) at the judged logged times: full-batch gradient descent
    at step ``lr`` (the Euler map of the derived flow: SGD's mean step) against the ODE."""
    import dataclasses
    import warnings

    import simulate as sim

    prob = J.problem(config)
    f = prob.system.to_numpy()
    p = prob.system.parameter_vector(prob.params)
    t_all = np.asarray(config.ode_times(), float)
    keep = _judged(t_all)
    if not keep.any():
        return t_all[keep], np.zeros((0, len(prob.system.state)))
    steps = np.asarray(config.log_steps())[keep]
    y = np.asarray(prob.system.state_vector(prob.y0), float)
    out, k = [], 0
    with np.errstate(all="ignore"):
        for target in steps:
            while k < target:
                y = y + config.lr * np.asarray(f(0.0, y, p), float)
                k += 1
            out.append(y.copy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ode = sim.solve(dataclasses.replace(prob, t=t_all[: int(np.nonzero(keep)[0][-1]) + 1]), backend="scipy")
    Yo = np.stack([ode[n].values for n in prob.system.state_names], 1)[keep[: ode.sizes["time"]]]
    return t_all[keep], np.abs(np.asarray(out) - Yo)


def bias_ratio(config: J.JomaConfig) -> float:
    """``max_{t, l} |GD_lr(t) - ODE(t)|_l / sd_SDE(t)_l`` over the judged times: SGD's
    deterministic O(lr) bias against the SDE's O(sqrt(lr/B)) spread (inf where the SDE does not
    reach the horizon)."""
    t, bias = _gd_bias(config)
    ens = _band_paths(config)
    if t.size == 0:
        return float("nan")
    if ens["time"].values[-1] < t[-1] * (1 - 1e-12):
        return float("inf")
    sd = np.stack([np.interp(t, ens["time"].values, ens[n].std("path").values) for n in _state_names(config)], 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(sd > 0, bias / sd, np.where(bias > 0, np.inf, 0.0))
    return float(np.max(r))


def sde_finite(config: J.JomaConfig) -> int:
    """1 when every path of the SDE ensemble stays finite up to the horizon, else 0 (the noise has
    carried a path into the block's finite-time blow-up)."""
    return int(bool(sde_ensemble(config).attrs["complete"]))


def claim_quantities(config: J.JomaConfig, coords) -> dict:
    """The regime's derived quantities of a map point: :func:`sde_finite`, :func:`bias_ratio`."""
    return {"sde_finite": sde_finite(config), "bias_ratio": bias_ratio(config)}


# ------------------------------------------------------------------------------------------------
# The SDE's claim, the calibration report and where the approximation breaks
# ------------------------------------------------------------------------------------------------
def _claim_spec():
    from figures.claims import registry

    return registry("joma").get(CLAIM)


def claim_seeds(quick: bool = True) -> tuple[int, ...]:
    """The seeds of the claim's map (0 .. n-1); the report and the map share these runs."""
    return tuple(range(_claim_spec().map.seeds(quick)))


@lru_cache(maxsize=4)
def sde_claim(ctx: RunContext = RunContext(device="cpu")):
    """The SDE's own claim (:data:`CLAIM` in ``claims.toml``) decided over seeds with its validity
    map under ``ctx`` (:func:`figures.claims.decide_claim`: sweep cells in the claims store)."""
    from figures.claims import decide_claim, plan_claim

    return decide_claim(plan_claim(_claim_spec(), quick=ctx.quick), ctx)


def _cut(ds: xr.Dataset) -> xr.Dataset:
    t = ds["time"].values
    return ds.isel(time=np.nonzero(t <= HORIZON * (1 + 1e-12))[0])


def calibration_cell(lr: float, batch: int, quick: bool = True) -> tuple[xr.Dataset, xr.Dataset]:
    """``(sde band ensemble, SGD runs)`` of one (lr, batch) setting up to the horizon, for
    :func:`figures.calibration.calibration_map` (shares the claim's cached runs)."""
    cfg = protocol_config(lr=lr, batch=batch)
    return _cut(_band_paths(cfg)), _cut(sgd_runs(cfg, claim_seeds(quick)))


def _pooled_coverage(covs: dict, seed: int = 0) -> dict:
    """Coverage over several observables: per run, the mean of the observables' fractions; the
    run-bootstrap interval as :func:`figures.calibration.coverage`'s."""
    from figures.calibration import _bootstrap_mean_ci

    out = {}
    for level in LEVELS:
        per_run = np.mean([c[level].per_run for c in covs.values()], axis=0)
        lo, hi = _bootstrap_mean_ci(per_run, 0.9, seed)
        out[level] = {"level": level, "coverage": float(per_run.mean()), "low": lo, "high": hi, "confidence": 0.9,
                      "interval": "bootstrap", "n_runs": int(per_run.size)}
    return out


@lru_cache(maxsize=4)
def calibration_report(quick: bool = True) -> dict:
    """Coverage of the SGD runs by the SDE's 50/80/90 % bands (t = 0 excluded; run-bootstrap 90 %
    intervals) and the variance ratio SDE/SGD over time (F intervals; pooled over time with the
    jackknife-Satterthwaite interval), at the protocol point, per observable of :data:`OBSERVABLES`
    and pooled over the whole state (the claim's statistic)."""
    from figures.calibration import coverage, variance_ratio

    cfg = protocol_config()
    sde, runs = calibration_cell(cfg.lr, cfg.batch, quick)
    names = _state_names(cfg)
    covs = {n: coverage(sde, runs, n) for n in (*names, *[o for o in OBSERVABLES if o not in names])}
    var = {n: variance_ratio(sde, runs, n) for n in OBSERVABLES}
    return {"setting": {"lr": cfg.lr, "batch": cfg.batch, "horizon": HORIZON, "runs": runs.sizes["run"],
                        "sde_paths": sde.sizes["path"], "sde_dt": min(cfg.lr, SDE_DT)},
            "coverage": {n: {f"{lv:g}": c.to_json() for lv, c in covs[n].items()} for n in OBSERVABLES},
            "coverage_state_pooled": {f"{lv:g}": v for lv, v in _pooled_coverage({n: covs[n] for n in names}).items()},
            "variance_ratio": {n: v.to_json() for n, v in var.items()},
            "_objects": {"coverage": covs, "variance": var, "sde": sde, "runs": runs}}


#: the (lr, batch) grid of "where it breaks" (quick; full: the claim's full axes)
BREAK_LRS = {True: (0.01, 0.04, 0.32), False: (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64)}
BREAK_BATCHES = {True: (1, 3), False: (1, 2, 3)}


def _cell_or_nan(lr, batch, quick):
    """A calibration cell whose SDE or runs do not reach the horizon finitely gives NaN rows."""
    sde, runs = calibration_cell(lr, batch, quick)
    ok = sde["time"].values[-1] >= runs["time"].values[-1] * (1 - 1e-12)
    if not ok:
        runs = runs.isel(time=np.nonzero(runs["time"].values <= sde["time"].values[-1] * (1 + 1e-12))[0])
    return sde, runs


@lru_cache(maxsize=4)
def calibration_breaks(quick: bool = True, observable: str = "v_1_1"):
    """:func:`figures.calibration.calibration_map` over (lr, batch) for ``observable``: one
    :class:`~figures.calibration.CalibrationCell` per setting (verdict holds / breaks /
    inconclusive against nominal ± 0.05) — settings whose SDE leaves the horizon early are judged
    on the times it reaches, settings whose runs diverge are left out (noted)."""
    from figures.calibration import calibration_map

    rows, skipped = [], []
    for lr in BREAK_LRS[quick]:
        for B in BREAK_BATCHES[quick]:
            sde, runs = _cell_or_nan(lr, B, quick)
            vals = runs[observable].values[:, 1:]
            if runs.sizes["time"] < 2 or not np.isfinite(vals).all():
                keep = np.isfinite(vals).all(1)
                if keep.sum() < 2 or runs.sizes["time"] < 2:
                    skipped.append({"lr": lr, "batch": B, "why": "the SGD runs or the SDE diverge before any judged time"})
                    continue
                runs = runs.isel(run=np.nonzero(keep)[0])
                skipped.append({"lr": lr, "batch": B, "why": f"{int((~keep).sum())} diverged runs left out"})
            rows += calibration_map(lambda a, b, s=sde, r=runs: (s, r), [lr], [B], observable)
    return rows, skipped


def breaks_json(quick: bool = True) -> list[dict]:
    """The :func:`calibration_breaks` rows as :class:`~figures.report.Break` JSON, for every
    observable of the report."""
    out = []
    for name in OBSERVABLES:
        rows, skipped = calibration_breaks(quick, name)
        out += [r.to_break().to_json() for r in rows]
        out += [{"factor": "(lr, batch)", "setting": {**s, "observable": name}, "rel_l2": {},
                 "within_tolerance": None, "note": s["why"]} for s in skipped]
    return out


def details(quick: bool = True, device: str = "cpu", ctx: RunContext | None = None) -> dict:
    """The calibration numbers for ``tdyn compare joma``'s details: the SDE's claim (verdict,
    interval, grade, where it breaks, its map points without per-seed values), the report at the
    protocol point and the (lr, batch) break rows."""
    claim = sde_claim(RunContext.of(ctx, quick=quick, device=device, progress=False)).to_json()
    points = [{k: p[k] for k in ("coords", "inside", "violated", "verdict", "estimate", "interval", "seeds",
                                 "theory_verdict", "note")} for p in claim["map"]["points"]]
    rep = {k: v for k, v in calibration_report(quick).items() if not k.startswith("_")}
    return {"claim": {**{k: claim[k] for k in ("name", "statement", "verdict", "estimate", "interval", "level",
                                               "point_level", "seeds", "regime_points", "grade", "at",
                                               "where_it_breaks", "criterion", "regime", "mode")},
                      "points": points},
            **rep, "breaks": breaks_json(quick)}
