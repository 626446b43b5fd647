"""Claims decided as a referee would: over seeds, with a confidence interval, inside the paper's
regime, with a validity map of where the claim holds and where it breaks.

A paper's claims are data (``figures/<p>/claims.toml``, read by
:func:`figures.claims_registry.load_registry`; schema in ``docs/claims.md``) plus the functions
that data names (the statistic of one seed's trajectory; optionally derived quantities, a batched
``runs`` function and the theory's trajectory). This module decides them:

* :func:`decide` — ``holds | fails | inconclusive`` from a confidence interval of the statistic
  over seeds (:func:`interval`): ``holds`` when the interval lies strictly on the criterion's
  holding side, ``fails`` when strictly on the other, ``inconclusive`` when it touches or
  straddles the boundary. Fewer than :data:`MIN_SEEDS` seeds is a :class:`ConfigError`.
* :func:`grade` — evidence grade A (>= 12 seeds and >= 6 regime points), B (>= 5 and >= 3), C.
* :func:`decide_claim` — the validity map (one sweep cell per point of the config axes, all seeds
  of a point in one cell; statistic axes such as a horizon evaluated on the same runs) run through
  :mod:`empirical.sweeps` (store, resume, ``--workers``, ``--ray``), every point decided, the
  claim concluded from its in-regime points: a :class:`ClaimResult`.
* :func:`registry_claims` — a paper's ``claims`` slot in one line.
* :func:`theory_check` / :func:`planted_violation` — the tests every claim needs: the criterion
  applied to the theory's own trajectory holds inside the regime; a planted violation fails.

**Interval** (the documented choice): for the mean, the *expanded percentile bootstrap*
(Hesterberg 2015, *The American Statistician* 69(4)): :func:`scipy.stats.bootstrap` with
``method="percentile"`` at the confidence level whose normal quantile is ``sqrt(n/(n-1)) *
t_{n-1}`` of the requested level. The plain percentile (and BCa) interval is too narrow by the
factors ``sqrt((n-1)/n)`` and ``z/t_{n-1}``: on normal data it covers 0.85 (n=5) and 0.92 (n=12)
at a nominal 0.95; the expanded one covers 0.93 and 0.95 (measured in the tests). No percentile
interval exceeds the data's range, so at n=5 coverage cannot pass ``1 - 2^{1-n} = 0.9375`` for a
symmetric statistic: quick-mode verdicts (5 seeds) are weaker than full ones (12) and the grade
says so. Skewed statistics cover less (0.88 for exponential data at n=5); prefer a statistic that
is a mean of many terms, or the median. **Exact** intervals where the statistic allows: the median
(order statistics, binomial coverage >= level), a proportion of seeds (Clopper-Pearson), and a
statistic identical over seeds (the degenerate interval).

**The claim's verdict** comes from its in-regime map points, decided with simultaneous intervals
(Bonferroni over the m in-regime points: each at level ``1 - (1 - level)/m``): ``fails`` when some
in-regime point fails, ``holds`` when every one holds, else ``inconclusive``. The reported interval
is the deciding point's: the failing point furthest on the failing side, or the holding point
closest to the boundary (the weakest link). Points outside the regime say where it breaks.
"""

from __future__ import annotations

import itertools
import math
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from simulate.trajectory import jsonable
from theory.errors import ConfigError, DivergenceError, SolverError

from .claims_registry import MIN_SEEDS, ClaimSpec, Criterion, Registry, load_registry, resolve_ref

__all__ = ["decide", "decide_exact", "interval", "grade", "Decision", "MapPoint", "ClaimResult", "decide_claim",
           "plan_claim", "MapPlan", "conclude", "points_over_seeds",
           "claim_cell", "registry", "registry_claims", "run_claims", "theory_check", "TheoryCheck",
           "planted_violation", "statistic_values", "VERDICTS", "GRADES", "MIN_SEEDS", "CLAIM_CELL",
           "load_registry", "NoClaims", "map_cost", "too_costly", "NeedsAccelerator", "CPU_CORE_HOURS",
           "cpu_core_hours"]

VERDICTS = ("holds", "fails", "inconclusive")
#: grade -> (least seeds, least in-regime map points)
GRADES = {"A": (12, 6), "B": (MIN_SEEDS, 3)}
#: the sweep-cell function of a map point (``empirical.sweeps`` runs it by reference)
CLAIM_CELL = "figures.claims:claim_cell"
#: bootstrap resamples (scipy's default)
N_RESAMPLES = 9999


# ------------------------------------------------------------------------------------------------
# One decision
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    """A verdict from an interval: ``estimate`` of the statistic's estimand over ``seeds``, its
    ``interval`` at ``level``, and how it was computed (``method``)."""

    verdict: str
    estimate: float
    interval: tuple[float, float]
    seeds: int
    level: float
    method: str

    def to_json(self) -> dict[str, Any]:
        return jsonable({"verdict": self.verdict, "estimate": self.estimate, "interval": list(self.interval),
                         "seeds": self.seeds, "level": self.level, "method": self.method}, finite=True)


def _values(values: Any, field: str = "values") -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ConfigError(field, f"expected one number per seed (1-D), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        bad = int(np.sum(~np.isfinite(x)))
        raise ConfigError(field, f"{bad} of {x.size} values are not finite (a diverged run has no statistic; "
                                 f"map divergence to a number in the statistic, or report the point undecided)")
    return x


def interval(values: Any, *, estimator: str = "mean", level: float = 0.95, seed: int = 0
             ) -> tuple[float, tuple[float, float], str]:
    """``(estimate, (lo, hi), method)``: a two-sided ``level`` confidence interval of the
    estimand over seeds (module docstring: expanded percentile bootstrap of the mean; exact for the
    median, a proportion, or identical values). ``seed`` seeds the bootstrap (same seed, same
    interval)."""
    from scipy import stats

    x = _values(values)
    n = x.size
    if not 0 < level < 1:
        raise ConfigError("level", f"must lie in (0, 1), got {level}")
    if estimator == "proportion":
        if not np.all((x == 0) | (x == 1)):
            raise ConfigError("values", "a proportion needs a statistic of 0 or 1 per seed")
        k = int(x.sum())
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
        return k / n, (float(ci.low), float(ci.high)), "exact (Clopper-Pearson)"
    if estimator == "median":
        # [x_(k), x_(n+1-k)] covers the median with probability 1 - 2 P(Bin(n, 1/2) <= k-1)
        xs = np.sort(x)
        best = 0
        for k in range(1, n // 2 + 1):
            if 1 - 2 * stats.binom.cdf(k - 1, n, 0.5) >= level:
                best = k
        if best == 0:
            need = next(m for m in itertools.count(n) if 1 - 2 * 0.5 ** m >= level)
            raise ConfigError("seeds", f"an exact {level:g} interval of the median needs >= {need} seeds, got {n}")
        return float(np.median(x)), (float(xs[best - 1]), float(xs[n - best])), "exact (order statistics)"
    if estimator != "mean":
        raise ConfigError("estimator", f"must be mean, median or proportion, got {estimator!r}")
    if np.all(x == x[0]):
        return float(x[0]), (float(x[0]), float(x[0])), "exact (identical over seeds)"
    alpha = 1 - level
    z = math.sqrt(n / (n - 1)) * stats.t.ppf(1 - alpha / 2, n - 1)
    expanded = min(1 - 2 * stats.norm.sf(z), 1 - 1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap((x,), np.mean, method="percentile", confidence_level=expanded,
                              n_resamples=N_RESAMPLES, vectorized=True, rng=np.random.default_rng(seed))
    lo, hi = res.confidence_interval
    return float(x.mean()), (float(lo), float(hi)), f"bootstrap (expanded percentile, {N_RESAMPLES} resamples)"


def decide(values_per_seed: Any, criterion: Criterion, *, level: float = 0.95, seed: int = 0,
           estimator: str = "mean") -> Decision:
    """The verdict of ``criterion`` on one statistic value per seed (at least :data:`MIN_SEEDS`;
    fewer is a :class:`ConfigError`, never a verdict)."""
    x = _values(values_per_seed)
    if x.size < MIN_SEEDS:
        raise ConfigError("seeds", f"a verdict needs >= {MIN_SEEDS} seeds, got {x.size}")
    est, (lo, hi), method = interval(x, estimator=estimator, level=level, seed=seed)
    return Decision(criterion.verdict(lo, hi), est, (lo, hi), int(x.size), float(level), method)


def decide_exact(value: float, criterion: Criterion) -> Decision:
    """The verdict on one deterministic value (the theory's own trajectory: no sampling error,
    so the interval is the point). Not for a network's single seed: use :func:`decide`."""
    v = float(value)
    if not math.isfinite(v):
        return Decision("inconclusive", v, (v, v), 0, 1.0, "deterministic (not finite)")
    return Decision(criterion.verdict(v, v), v, (v, v), 0, 1.0, "deterministic")


def grade(seeds: int, regime_points: int) -> str:
    """Evidence grade: A (>= 12 seeds and >= 6 in-regime map points), B (>= 5 and >= 3), else C."""
    for g, (s, p) in GRADES.items():
        if seeds >= s and regime_points >= p:
            return g
    return "C"


# ------------------------------------------------------------------------------------------------
# The statistic on trajectories (network seeds, the theory, planted violations)
# ------------------------------------------------------------------------------------------------
def _split_runs(out: Any, seeds: Sequence[int], field: str) -> list[xr.Dataset]:
    """A runs function's output -> one Dataset per seed (a list, or one Dataset with dim ``seed``)."""
    if isinstance(out, xr.Dataset):
        if "seed" not in out.dims:
            raise ConfigError(field, "a batched runs function returns a Dataset with a 'seed' dim (or a list)")
        runs = [out.isel(seed=i) for i in range(out.sizes["seed"])]
    else:
        runs = list(out)
    if len(runs) != len(seeds):
        raise ConfigError(field, f"returned {len(runs)} runs for {len(seeds)} seeds")
    return runs


def _trajectories(out: Any) -> list[xr.Dataset]:
    return [out] if isinstance(out, xr.Dataset) else list(out)


def statistic_values(claim: ClaimSpec, trajectories: Sequence[xr.Dataset] | xr.Dataset, config,
                     **coords) -> np.ndarray:
    """The claim's statistic (the very function the map uses) on each trajectory."""
    stat = resolve_ref(claim.statistic.function, f"{claim.field}.statistic.function")
    return np.array([float(stat(tr, config, **coords)) for tr in _trajectories(trajectories)], dtype=np.float64)


def _decide_values(claim: ClaimSpec, values: np.ndarray, *, level: float, seed: int = 0) -> Decision:
    if values.size == 1:
        return decide_exact(values[0], claim.criterion)
    return decide(values, claim.criterion, level=level, seed=seed, estimator=claim.statistic.estimator)


# ------------------------------------------------------------------------------------------------
# The validity map: sweep cells
# ------------------------------------------------------------------------------------------------
def claim_cell(paper: str, config: dict, *, statistic: str, seeds: Sequence[int], stat_axes: Mapping[str, Sequence],
               runs: str = "", theory: str = "", device: str = "cpu", config_class: str = "") -> xr.Dataset:
    """One map point of the config axes, all seeds (a sweep cell, run by :mod:`empirical.sweeps`):
    the runs (``runs(config, seeds=, device=)``, batched, or the row's train slot per seed), the
    statistic per seed at every point of the statistic axes, and the theory's statistic there.
    Returns ``statistic`` (dims ``seed``, *statistic axes) and ``theory`` (dims ``path``, ...)."""
    from .papers import get

    row = get(paper)
    cfg = (resolve_ref(config_class, "config_class") if config_class else row.Config).from_dict(config)
    stat = resolve_ref(statistic, "statistic")
    if runs:
        out = resolve_ref(runs, "runs")(cfg, seeds=list(seeds), device=device)
    else:
        train = row.slot("train")
        out = []
        for s in seeds:
            try:
                out.append(train(cfg.replace(seed=int(s)), device=device, variant=getattr(cfg, "variant", None),
                                 progress=False))
            except DivergenceError:  # a diverged seed has no statistic: NaN, the point stays undecided
                out.append(None)
    trajs = _split_runs(out, seeds, "runs")
    names = list(stat_axes)
    grid = [list(stat_axes[n]) for n in names]
    shape = [len(g) for g in grid]

    def evaluate(trajectories, config):
        vals = np.empty((len(trajectories), *shape), dtype=np.float64)
        for idx in itertools.product(*[range(k) for k in shape]):
            kw = {n: grid[i][j] for i, (n, j) in enumerate(zip(names, idx))}
            for r, tr in enumerate(trajectories):
                vals[(r, *idx)] = np.nan if tr is None else float(stat(tr, config, **kw))
        return vals

    data = {"statistic": (("seed", *names), evaluate(trajs, cfg))}
    if theory:
        try:
            th = _trajectories(resolve_ref(theory, "theory")(cfg))
        except SolverError:  # the theory fails here (e.g. blows up outside its regime): NaN
            th = [None]
        data["theory"] = (("path", *names), evaluate(th, cfg))
    coords = {"seed": list(seeds), **{n: list(stat_axes[n]) for n in names}}
    return xr.Dataset(data, coords=coords, attrs={"paper": paper, "statistic": statistic})


@dataclass(frozen=True)
class MapPoint:
    """One point of a validity map: its coordinates (axis -> value), whether it lies inside the
    regime (and which assumptions it violates), the per-seed values and their decision (``None``:
    undecided, ``note`` says why), and the theory's own values and decision there."""

    coords: Mapping[str, Any]
    inside: bool
    violated: tuple[str, ...]
    values: tuple[float, ...]
    decision: Decision | None
    theory: tuple[float, ...] = ()
    theory_decision: Decision | None = None
    note: str = ""

    @property
    def verdict(self) -> str | None:
        return None if self.decision is None else self.decision.verdict

    def to_json(self) -> dict[str, Any]:
        d = self.decision
        return jsonable({"coords": dict(self.coords), "inside": self.inside, "violated": list(self.violated),
                         "verdict": self.verdict, "estimate": None if d is None else d.estimate,
                         "interval": None if d is None else list(d.interval), "seeds": len(self.values),
                         "values": list(self.values), "theory": list(self.theory),
                         "theory_verdict": None if self.theory_decision is None else self.theory_decision.verdict,
                         "note": self.note}, finite=True)


@dataclass(frozen=True)
class ClaimResult:
    """A claim decided: the JSON keys are documented in ``docs/claims.md`` (``verdict``,
    ``interval``, ``seeds``, ``regime``, ``falsifier``, ``grade``, ``statement``, ``estimate``,
    ``statistic``, ``where_it_breaks``, ``map`` and the rest)."""

    spec: ClaimSpec
    verdict: str
    estimate: float
    interval: tuple[float, float]
    level: float
    point_level: float
    seeds: int
    regime_points: int
    grade: str
    at: Mapping[str, Any]
    where_it_breaks: str
    points: tuple[MapPoint, ...]
    quick: bool
    failed_cells: int = 0
    method: str = ""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def statement(self) -> str:
        return self.spec.statement

    def to_json(self) -> dict[str, Any]:
        s = self.spec
        return jsonable({
            "name": s.name, "statement": s.statement, "source": s.source,
            "verdict": self.verdict, "estimate": self.estimate, "interval": list(self.interval),
            "level": self.level, "point_level": self.point_level, "method": self.method,
            "seeds": self.seeds, "regime_points": self.regime_points, "grade": self.grade,
            "at": dict(self.at), "where_it_breaks": self.where_it_breaks,
            "statistic": s.statistic.to_json(), "criterion": s.criterion.to_json(),
            "regime": [r.to_json() for r in s.regime], "falsifier": s.falsifier, "protocol": s.protocol.to_json(),
            "mode": "quick" if self.quick else "full", "failed_cells": self.failed_cells,
            "map": {"axes": [a.to_json() for a in s.map.axes], "points": [p.to_json() for p in self.points]},
        }, finite=True)


@contextmanager
def _cells_progress(enabled: bool, total: int, desc: str):
    """Progress over a map's cells: the shared bars of ``figures.progress`` (which draw
    ``run_cells``' cell bar) where that module exists, else a tqdm bar (yielded) on a terminal."""
    try:
        from . import progress as shared  # output-core's module (tqdm-based)
    except ImportError:
        shared = None
    if shared is not None and hasattr(shared, "enabled"):
        with shared.enabled(enabled):
            yield None
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=desc, leave=False, disable=not enabled or not sys.stderr.isatty())
    try:
        yield bar
    finally:
        bar.close()


def _store(row, claim: str) -> dict[str, Any]:
    """``{store, workers, ray}`` of a claim's map: ``--store DIR`` -> ``DIR/claims/<paper>/<claim>``,
    default ``figures/out/<paper>/claims/store/<claim>``."""
    from .core import OUT_DIR
    from .sweep import sweep_settings

    return sweep_settings(f"claims/{row.name}/{claim}", OUT_DIR / row.module / "claims" / "store" / claim)


def _plan(claim: ClaimSpec, row, *, quick: bool):
    """Config points (validated configs, in axis order) and the statistic axes' values."""
    cfg0 = claim.protocol.config(row.Config, quick)
    caxes = [a for a in claim.map.axes if a.target == "config"]
    saxes = [a for a in claim.map.axes if a.target == "statistic"]
    configs = []
    for combo in itertools.product(*[a.points(quick) for a in caxes]):
        coords = dict(zip([a.name for a in caxes], combo))
        try:
            cfg = cfg0.with_overrides([f"{k}={v!r}" for k, v in coords.items()])
        except ConfigError as err:
            raise ConfigError(f"{claim.field}.map", f"point {coords}: {err}") from None
        configs.append((coords, cfg))
    return configs, {a.name: list(a.points(quick)) for a in saxes}


def _points_of(claim: ClaimSpec, configs, stat_axes) -> list[tuple[dict, Any, dict]]:
    """Every map point as ``(coords in axis order, config, statistic coords)``."""
    names = list(stat_axes)
    out = []
    for ccoords, cfg in configs:
        for combo in itertools.product(*[stat_axes[n] for n in names]):
            scoords = dict(zip(names, combo))
            merged = {**ccoords, **scoords}
            out.append(({a.name: merged[a.name] for a in claim.map.axes}, cfg, scoords))
    return out


@dataclass(frozen=True)
class MapPlan:
    """A claim's validity map, validated and not yet run (:func:`plan_claim`)."""

    claim: ClaimSpec
    quick: bool
    configs: tuple[tuple[dict, Any], ...]          # (config-axis coords, Config) per sweep cell
    stat_axes: Mapping[str, list]                  # statistic axis -> values (evaluated in every cell)
    points: tuple[tuple[dict, Any, dict], ...]     # (coords in axis order, Config, statistic coords)
    regime: tuple[tuple[bool, tuple[str, ...], dict], ...]  # per point: inside, violated, quantities
    seeds: tuple[int, ...]

    @property
    def inside(self) -> int:
        return sum(r[0] for r in self.regime)


def plan_claim(claim: ClaimSpec, *, quick: bool = True) -> MapPlan:
    """Validate ``claim``'s map before anything runs: references import, every point's config is
    valid, some points lie inside the regime and some outside (:class:`ConfigError` otherwise)."""
    from .papers import get

    row = get(claim.paper)
    claim.functions()
    configs, stat_axes = _plan(claim, row, quick=quick)
    points = _points_of(claim, configs, stat_axes)
    regime = [claim.regime_point(cfg, coords) for coords, cfg, _ in points]
    n_in = sum(inside for inside, _, _ in regime)
    if n_in == 0:
        raise ConfigError(f"{claim.field}.map", "no map point lies inside the regime "
                                                f"({claim.regime_text()}): nothing to decide the claim on")
    if n_in == len(points):
        raise ConfigError(f"{claim.field}.map", "every map point lies inside the regime: the map must also "
                                                "reach outside it to show where the claim breaks")
    return MapPlan(claim, quick, tuple(configs), stat_axes, tuple(points), tuple(regime),
                   tuple(range(claim.map.seeds(quick))))


def decide_claim(claim: ClaimSpec | MapPlan, *, quick: bool = True, device: str = "auto", progress: bool = False,
                 level: float = 0.95) -> ClaimResult:
    """Run ``claim``'s validity map (or a :class:`MapPlan`) as sweep cells (the store,
    ``--workers`` and ``--ray`` of :func:`figures.sweep.using_sweep`; cells already in the store
    are not recomputed), decide every point and conclude (module docstring)."""
    from empirical.sweeps import run_cells
    from empirical.trainer import resolve_device

    from .papers import get

    plan = claim if isinstance(claim, MapPlan) else plan_claim(claim, quick=quick)
    claim, quick = plan.claim, plan.quick
    row = get(claim.paper)
    point_level = 1 - (1 - level) / plan.inside
    cells = _cells(plan, resolve_device(device).type)
    settings = _store(row, claim.name)
    with _cells_progress(progress, len(cells), f"{claim.paper}/{claim.name}") as bar:
        index = run_cells(CLAIM_CELL, cells, settings["store"], workers=settings["workers"], ray=settings["ray"],
                          progress=None if bar is None else lambda key, status, err: bar.update(1))
    status = dict(zip(index["key"], zip(index["status"], index["error"])))
    root = Path(settings["store"])
    datasets: dict[int, xr.Dataset | str] = {}
    for (_, cfg), c in zip(plan.configs, cells):
        st, err = status.get(c.key, ("failed", "not run"))
        datasets[id(cfg)] = (xr.load_dataset(root / "cells" / f"{c.key}.nc", engine="h5netcdf") if st == "ok"
                             else f"cell failed: {err}")
    failed = sum(isinstance(v, str) for v in datasets.values())
    results = [_decide_point(claim, coords, inside, violated, datasets[id(cfg)], scoords, point_level)
               for (coords, cfg, scoords), (inside, violated, _) in zip(plan.points, plan.regime)]
    return _conclude(claim, results, quick=quick, level=level, point_level=point_level, failed=failed)


def _decide_point(claim: ClaimSpec, coords, inside, violated, ds, scoords, level) -> MapPoint:
    if isinstance(ds, str):
        return MapPoint(coords, inside, violated, (), None, note=ds)
    sel = {n: _index_of(ds[n].values, v) for n, v in scoords.items()}
    values = ds["statistic"].isel(sel).values.astype(np.float64)
    theory, theory_dec = (), None
    if "theory" in ds:
        th = ds["theory"].isel(sel).values.astype(np.float64)
        theory = tuple(th.tolist())
        if th.size == 1 or th.size >= MIN_SEEDS:
            theory_dec = _decide_values(claim, th, level=level) if np.all(np.isfinite(th)) \
                else decide_exact(float("nan"), claim.criterion)
    bad = int(np.sum(~np.isfinite(values)))
    if bad:
        return MapPoint(coords, inside, violated, tuple(values.tolist()), None, theory, theory_dec,
                        f"{bad} of {values.size} seeds have no finite statistic (diverged?)")
    dec = decide(values, claim.criterion, level=level, estimator=claim.statistic.estimator)
    return MapPoint(coords, inside, violated, tuple(values.tolist()), dec, theory, theory_dec)


def _index_of(values: np.ndarray, v: Any) -> int:
    for i, x in enumerate(values.tolist()):
        if x == v or (isinstance(x, float) and isinstance(v, (int, float)) and math.isclose(x, v, rel_tol=1e-12)):
            return i
    raise KeyError(v)


def _fmt_coords(coords: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in coords.items())


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _list_points(points: Sequence[MapPoint], most: int = 3) -> str:
    text = "; ".join(_fmt_coords(p.coords) for p in points[:most])
    return text + (f" and {len(points) - most} more" if len(points) > most else "")


def _where_it_breaks(points: Sequence[MapPoint]) -> str:
    inside = [p for p in points if p.inside]
    outside = [p for p in points if not p.inside]
    parts = []
    theory_bad = [p for p in inside if p.theory_decision is not None and p.theory_decision.verdict != "holds"]
    if theory_bad:
        parts.append(f"CRITERION INVALID: the theory's own trajectory does not pass it at {_list_points(theory_bad)}")
    fails_in = [p for p in inside if p.verdict == "fails"]
    if fails_in:
        parts.append(f"fails inside the regime at {_list_points(fails_in)}")
    open_in = [p for p in inside if p.verdict in ("inconclusive", None)]
    if open_in:
        parts.append(f"undecided inside the regime at {_list_points(open_in)}")
    fails_out = [p for p in outside if p.verdict == "fails"]
    if fails_out:
        why = fails_out[0].violated[0] if fails_out[0].violated else ""
        parts.append(f"fails outside the regime at {_list_points(fails_out)} ({why})")
    holds_out = [p for p in outside if p.verdict == "holds"]
    if not fails_in and not fails_out:
        parts.append(f"no break found on the map: holds at {sum(p.verdict == 'holds' for p in inside)} of "
                     f"{len(inside)} points inside the regime and {len(holds_out)} of {len(outside)} outside")
    elif holds_out and not fails_in:
        parts.append(f"still holds outside at {_list_points(holds_out, 2)}")
    return "; ".join(parts)


def conclude(claim: ClaimSpec, points: Sequence[MapPoint], *, quick: bool = True, level: float = 0.95,
             failed: int = 0) -> ClaimResult:
    """A claim's verdict from map points decided outside the sweep cells — for runs a paper's
    protocol already makes (e.g. real-text runs shared with its figures): each in-regime point's
    decision should be :func:`decide` at the simultaneous level ``1 - (1 - level)/m`` (``m`` the
    in-regime points); the verdict, deciding point, grade and where it breaks follow the rule of
    :func:`decide_claim`. With no point inside the regime the claim is ``inconclusive`` (grade C)."""
    m = sum(p.inside for p in points)
    return _conclude(claim, list(points), quick=quick, level=level, point_level=1 - (1 - level) / max(m, 1),
                     failed=failed)


def points_over_seeds(claim: ClaimSpec, cells, inside: Callable[[dict], tuple], level: float) -> list[MapPoint]:
    """Map points for :func:`conclude` from ``cells`` (``(coords, per-seed values)`` pairs):
    ``inside(coords) -> (inside, violated assumptions)``; each point :func:`decide` d at ``level``
    (the simultaneous one) where it has >= :data:`MIN_SEEDS` finite values, inside the regime or
    not (the verdict reads only the inside ones), else undecided with the reason in its note."""
    pts = []
    for coords, values in cells:
        ok, violated = inside(coords)
        vals = tuple(float(v) for v in values)
        if len(vals) >= MIN_SEEDS and all(map(math.isfinite, vals)):
            dec, note = decide(vals, claim.criterion, level=level, estimator=claim.statistic.estimator), ""
        else:
            dec, note = None, (f"{len(vals)} seed(s): a verdict needs >= {MIN_SEEDS}" if len(vals) < MIN_SEEDS
                               else "a seed's statistic is not finite")
        pts.append(MapPoint(coords, ok, tuple(violated), vals, dec, note=note))
    return pts


def _conclude(claim: ClaimSpec, points: list[MapPoint], *, quick: bool, level: float, point_level: float,
              failed: int) -> ClaimResult:
    inside = [p for p in points if p.inside]
    if not inside:  # nothing to decide on (only via conclude: plan_claim refuses such a map)
        # the statistic and interval shown are those of the decided point (outside the regime) nearest
        # the criterion's boundary: information, not a verdict
        out = [p for p in points if p.decision is not None]
        at = min(out, key=lambda p: abs(claim.criterion.margin(*p.decision.interval))) if out else None
        dec = None if at is None else at.decision
        return ClaimResult(
            spec=claim, verdict="inconclusive", estimate=float("nan") if dec is None else dec.estimate,
            interval=(float("nan"), float("nan")) if dec is None else dec.interval,
            level=level, point_level=point_level, seeds=max((len(p.values) for p in points), default=0),
            regime_points=0, grade="C", at={} if at is None else dict(at.coords),
            where_it_breaks="no map point lies inside the regime; " + _where_it_breaks(points), points=tuple(points),
            quick=quick, failed_cells=failed, method="" if dec is None else dec.method)
    decided = [p for p in inside if p.decision is not None]
    crit = claim.criterion
    margin = {id(p): crit.margin(*p.decision.interval) for p in decided}
    fails = [p for p in decided if p.verdict == "fails"]
    if fails:
        verdict, at = "fails", min(fails, key=lambda p: margin[id(p)])
    elif decided and len(decided) == len(inside) and all(p.verdict == "holds" for p in decided):
        verdict, at = "holds", min(decided, key=lambda p: margin[id(p)])
    else:
        verdict = "inconclusive"
        open_ = [p for p in decided if p.verdict == "inconclusive"]
        at = min(open_, key=lambda p: abs(margin[id(p)])) if open_ else next(
            (p for p in inside if p.decision is None), inside[0])
    dec = at.decision
    seeds = min((p.decision.seeds for p in decided), default=0)
    return ClaimResult(
        spec=claim, verdict=verdict, estimate=float("nan") if dec is None else dec.estimate,
        interval=(float("nan"), float("nan")) if dec is None else dec.interval, level=level,
        point_level=point_level, seeds=seeds, regime_points=len(decided), grade=grade(seeds, len(decided)),
        at=dict(at.coords), where_it_breaks=_where_it_breaks(points), points=tuple(points), quick=quick,
        failed_cells=failed, method="" if dec is None else dec.method)


# ------------------------------------------------------------------------------------------------
# A paper's claims slot, and the CLI's entry point
# ------------------------------------------------------------------------------------------------
def registry(paper: str, path: str | Path | None = None) -> Registry:
    """``paper``'s registry (default ``figures/<module>/claims.toml``, package data), validated
    against the row's Config with every reference resolved."""
    from importlib.resources import files

    from .papers import get

    row = get(paper)
    if path is None:
        path = Path(str(files(f"figures.{row.module}") / "claims.toml"))
    return load_registry(path, paper=row.name, config=row.Config, resolve=True)


def map_cost(plan: MapPlan) -> float | None:
    """CPU core-seconds of running ``plan``'s map (every cell, its seeds) from the map's ``cost``
    (``None``: the map declares none). Cells already in the store are not counted."""
    cost = plan.claim.map.cost
    if cost is None:
        return None
    from .papers import get

    row = get(plan.claim.paper)
    store = Path(_store(row, plan.claim.name)["store"])
    n = len(plan.seeds)
    done = _stored_keys(plan, store)
    return sum(cost.cell_seconds(cfg, n, f"{plan.claim.field}.map.cost")
               for (coords, cfg), key in zip(plan.configs, _cell_keys(plan)) if key not in done)


def _cells(plan: MapPlan, device_type: str) -> list:
    """The sweep cells of ``plan``'s map: one per point of its config axes, all seeds."""
    from empirical.sweeps import Cell

    claim = plan.claim
    options = {"statistic": claim.statistic.function, "seeds": list(plan.seeds), "stat_axes": dict(plan.stat_axes),
               "runs": claim.runs, "theory": claim.theory, "device": device_type}
    if claim.protocol.config_class:  # only then: the other claims' cell keys stay as they were
        options["config_class"] = claim.protocol.config_class
    return [Cell(claim.paper, cfg.to_dict(), "claim", options, coords) for coords, cfg in plan.configs]


def _cell_keys(plan: MapPlan) -> list[str]:
    return [c.key for c in _cells(plan, "cpu")]


def _stored_keys(plan: MapPlan, store: Path) -> set[str]:
    cells = store / "cells"
    return {p.stem for p in cells.glob("*.nc")} if cells.is_dir() else set()


#: a full map whose estimated cost (:func:`map_cost`) exceeds this many CPU core-hours is not run on
#: a CPU (``tdyn claims/figures --full`` name it with its cost instead); env ``TDYN_CPU_CORE_HOURS``
CPU_CORE_HOURS = 2.0


def cpu_core_hours() -> float:
    """The CPU allowance of one full map in core-hours (:data:`CPU_CORE_HOURS`, or the environment
    variable ``TDYN_CPU_CORE_HOURS``)."""
    import os

    raw = os.environ.get("TDYN_CPU_CORE_HOURS", "")
    try:
        return float(raw) if raw.strip() else CPU_CORE_HOURS
    except ValueError:
        raise ConfigError("TDYN_CPU_CORE_HOURS", f"expected a number of core-hours, got {raw!r}") from None


@dataclass(frozen=True)
class NeedsAccelerator:
    """A full map too costly for this machine's CPU: the claim, its estimated cost and its cells."""

    paper: str
    claim: str
    core_hours: float
    cells: int
    seeds: int
    note: str = ""

    def __str__(self) -> str:
        return (f"needs a GPU/cluster: {self.paper}/{self.claim} ~{self.core_hours:.3g} core-hours "
                f"({self.cells} cells x {self.seeds} seeds on a CPU{'; ' + self.note if self.note else ''}); "
                f"run it with --device cuda or --ray ADDRESS")


def too_costly(plan: MapPlan, device: str = "auto") -> NeedsAccelerator | None:
    """A full-mode ``plan`` that does not fit a CPU (:func:`map_cost` above :func:`cpu_core_hours`)
    when neither a GPU (``device``) nor a Ray cluster (``--ray``) is at hand; else ``None``."""
    from empirical.trainer import resolve_device

    from .papers import get

    if plan.quick:
        return None
    sec = map_cost(plan)
    if sec is None or sec <= cpu_core_hours() * 3600:
        return None
    if resolve_device(device).type != "cpu" or _store(get(plan.claim.paper), plan.claim.name)["ray"] is not None:
        return None
    cost = plan.claim.map.cost
    return NeedsAccelerator(plan.claim.paper, plan.claim.name, sec / 3600, len(plan.configs), len(plan.seeds),
                            cost.note if cost else "")


def registry_claims(paper: str, path: str | Path | None = None) -> Callable[..., list[ClaimResult]]:
    """A row's ``claims`` slot: ``claims(*, quick, device, progress, only=None) -> list[ClaimResult]``
    deciding every claim of the registry (or those named in ``only``), in file order. A paper's
    ``figures/<p>/claims.py`` is ``claims = registry_claims("<p>")`` plus its statistic functions.
    In full mode a map whose estimated cost exceeds the CPU allowance (:func:`too_costly`) is not
    run: its line ``needs a GPU/cluster: <paper>/<claim> ~N core-hours`` goes to stderr and into
    ``claims.skipped`` (the function's attribute, reset on each call)."""

    def claims(*, quick: bool = True, device: str = "auto", progress: bool = False,
               only: Sequence[str] | None = None) -> list[ClaimResult]:
        reg = registry(paper, path)
        specs = [reg.get(n) for n in only] if only else list(reg.claims)
        plans = [plan_claim(s, quick=quick) for s in specs]  # every claim validated before any runs
        claims.skipped = []  # type: ignore[attr-defined]
        out = []
        for p in plans:
            need = too_costly(p, device)
            if need is not None:
                claims.skipped.append(need)  # type: ignore[attr-defined]
                print(str(need), file=sys.stderr)
                continue
            out.append(decide_claim(p, device=device, progress=progress))
        return out

    claims.registry = lambda: registry(paper, path)  # type: ignore[attr-defined]
    claims.skipped = []  # type: ignore[attr-defined]
    claims.__doc__ = f"The claims of {paper}, decided over seeds with their validity maps (figures.claims)."
    return claims


class NoClaims(ConfigError):
    """The paper's row has no ``claims`` slot yet (transitional; the message says why)."""


def run_claims(paper: str, *, quick: bool = True, device: str = "auto", progress: bool = False) -> list[ClaimResult]:
    """The row's ``claims`` slot, called; :class:`NoClaims` when the row does not fill it."""
    from .papers import get

    row = get(paper)
    if row.claims is None:
        raise NoClaims("claims", f"{row.name} has no claims: {row.missing.get('claims', 'not provided')}")
    return list(row.slot("claims")(quick=quick, device=device, progress=progress))


# ------------------------------------------------------------------------------------------------
# The tests every claim needs
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TheoryCheck:
    """The criterion applied to the theory's own trajectory at the in-regime map points:
    ``holds`` when every point holds; ``str()`` lists the points that do not."""

    claim: str
    points: tuple[MapPoint, ...] = field(default_factory=tuple)

    @property
    def holds(self) -> bool:
        return bool(self.points) and all(p.theory_decision is not None and p.theory_decision.verdict == "holds"
                                         for p in self.points)

    def __str__(self) -> str:
        bad = [p for p in self.points if p.theory_decision is None or p.theory_decision.verdict != "holds"]
        if not bad:
            return f"{self.claim}: the theory passes its criterion at all {len(self.points)} in-regime points"
        return f"{self.claim}: the theory does not pass its criterion at " + "; ".join(
            f"{_fmt_coords(p.coords)} (statistic {', '.join(_fmt(v) for v in p.theory[:3])}: "
            f"{p.theory_decision.verdict if p.theory_decision else 'undecided'})" for p in bad)


def theory_check(claim: ClaimSpec, *, quick: bool = True, level: float = 0.95) -> TheoryCheck:
    """The claim's statistic on its ``theory`` trajectory (one deterministic trajectory: exact;
    an ensemble of >= 5 paths: decided over paths) at every in-regime point of the quick (or full)
    map. Every claim's test asserts ``theory_check(claim).holds``."""
    from .papers import get

    if not claim.theory:
        raise ConfigError(f"{claim.field}.theory", "the claim names no theory function to check")
    row = get(claim.paper)
    configs, stat_axes = _plan(claim, row, quick=quick)
    theory = resolve_ref(claim.theory, f"{claim.field}.theory")
    cache: dict[int, list[xr.Dataset]] = {}
    out = []
    for coords, cfg, scoords in _points_of(claim, configs, stat_axes):
        inside, violated, _ = claim.regime_point(cfg, coords)
        if not inside:
            continue
        if id(cfg) not in cache:
            cache[id(cfg)] = _trajectories(theory(cfg))
        th = statistic_values(claim, cache[id(cfg)], cfg, **scoords)
        dec = _decide_values(claim, th, level=level) if np.all(np.isfinite(th)) else None
        out.append(MapPoint(coords, True, violated, (), None, tuple(th.tolist()), dec))
    return TheoryCheck(claim.name, tuple(out))


def planted_violation(claim: ClaimSpec, trajectories: Sequence[xr.Dataset] | xr.Dataset, *, config=None,
                      quick: bool = True, level: float = 0.95, **coords) -> Decision:
    """The claim's decision on planted trajectories (one deterministic trajectory, or >= 5 seeds'
    worth) that violate the claim: every claim's test asserts ``.verdict == "fails"``. ``config``
    defaults to the protocol's; ``coords`` are the statistic axes' values."""
    from .papers import get

    cfg = config if config is not None else claim.protocol.config(get(claim.paper).Config, quick)
    values = statistic_values(claim, trajectories, cfg, **coords)
    if values.size != 1 and values.size < MIN_SEEDS:
        raise ConfigError("seeds", f"plant one deterministic trajectory or >= {MIN_SEEDS}, got {values.size}")
    return _decide_values(claim, values, level=level)
