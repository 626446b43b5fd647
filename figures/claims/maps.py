"""Claims decided as a referee would: over seeds (the seed is the unit), by tests whose error rates
are controlled over a claim's in-regime map points at the seed counts used, inside the paper's
regime, against a null control, with the theory checked on the exact flow and a validity map of
where the claim holds and where it breaks.

A paper's claims are data (``figures/<p>/claims.toml``, read by
:func:`figures.claims.registry.load_registry`; schema in ``docs/claims.md``) plus the functions
that data names (the statistic of one seed's trajectory; optionally derived quantities, a batched
``runs`` function and the theory's trajectory). This module decides them:

* :func:`decide` — one point's verdict from one statistic value per seed: the one-sided tests of
  :mod:`figures.claims.stats` (exact sign test on the median by default; exact binomial for a
  proportion; t for a mean), ``holds`` / ``fails`` / ``inconclusive``.
* :func:`decide_claim` — the validity map (one sweep cell per point of the config axes, all seeds
  of a point in one cell; statistic axes evaluated on the same runs; the paper's demonstration
  settings as marked points; the null control and the robustness variants as cells of their own)
  run through :mod:`empirical.sweeps` (store, resume, ``--workers``, ``--ray``) and concluded:

  - **holds** when every in-regime point holds at alpha = 0.05 (intersection-union test),
  - **fails** when Holm's procedure over the in-regime points' failing-side p-values rejects one,
  - **inconclusive** otherwise, **untested** when no in-regime point was run (:func:`conclude`).

  Both a false ``holds`` and a false ``fails`` have probability at most alpha whatever the number
  of points (simulated in ``tests/figures/test_claims_stats.py``). A map whose seeds cannot give
  both verdicts is refused when planned (:func:`figures.claims.stats.can_fire`).
* :func:`registry_claims` — a paper's ``claims`` slot in one line.
* :func:`theory_check` / :func:`planted_violation` — the tests every claim needs: the criterion
  applied to the theory's own trajectory holds inside the regime; a planted violation fails.

The reported interval of a point is the one its tests read: the one-sided bound at alpha on the
holding side and at the point's Holm level on the failing side (order statistics for the median,
Clopper-Pearson for a proportion, Student t for a mean), so the verdict is the interval's position
against the boundary. Points outside the regime are decided alone (a family of one each) and say
where the claim breaks; they never enter the verdict.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from simulate.trajectory import jsonable
from theory.errors import ConfigError, DivergenceError, SolverError

from theory.refs import resolve_ref

from . import stats as st
from ..context import CPU_CORE_HOURS, RunContext
from .registry import MIN_SEEDS, ClaimSpec, Criterion, Registry, load_registry

__all__ = ["decide", "decide_exact", "interval", "grade", "Decision", "MapPoint", "ClaimResult", "decide_claim",
           "plan_claim", "MapPlan", "conclude", "points_over_seeds", "NullResult", "untested",
           "claim_cell", "registry", "registry_claims", "run_claims", "theory_check", "TheoryCheck",
           "planted_violation", "statistic_values", "VERDICTS", "GRADES", "MIN_SEEDS", "CLAIM_CELL", "ALPHA",
           "load_registry", "NoClaims", "map_cost", "too_costly", "NeedsAccelerator", "CPU_CORE_HOURS", "RegistryClaims",
           "RunContext"]

VERDICTS = ("holds", "fails", "inconclusive", "untested")
#: grade -> (least seeds, least in-regime map points)
GRADES = {"A": (12, 6), "B": (MIN_SEEDS, 3)}
#: the sweep-cell function of a map point (``empirical.sweeps`` runs it by reference)
CLAIM_CELL = "figures.claims:claim_cell"
ALPHA = st.ALPHA


# ------------------------------------------------------------------------------------------------
# One decision
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    """A point's verdict: ``estimate`` of the statistic's estimand over ``seeds``, the ``interval``
    its tests read (module docstring), the p-values of the holding and failing tests (``p_fails``
    unadjusted; ``fail_level`` is the level it was compared with: alpha, or Holm's for the point),
    and the test (``method``)."""

    verdict: str
    estimate: float
    interval: tuple[float, float]
    seeds: int
    level: float
    method: str
    p_holds: float = float("nan")
    p_fails: float = float("nan")
    fail_level: float = float("nan")

    def to_json(self) -> dict[str, Any]:
        return jsonable({"verdict": self.verdict, "estimate": self.estimate, "interval": list(self.interval),
                         "seeds": self.seeds, "level": self.level, "method": self.method, "p_holds": self.p_holds,
                         "p_fails": self.p_fails, "fail_level": self.fail_level}, finite=True)


def _values(values: Any, field: str = "values") -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ConfigError(field, f"expected one number per seed (1-D), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        bad = int(np.sum(~np.isfinite(x)))
        raise ConfigError(field, f"{bad} of {x.size} values are not finite (a diverged run has no statistic; "
                                 f"map divergence to a number in the statistic, or report the point undecided)")
    return x


def _check_estimator(x: np.ndarray, estimator: str) -> None:
    if estimator not in st.METHODS:
        raise ConfigError("estimator", f"must be median, proportion or mean, got {estimator!r}")
    if estimator == "proportion" and not np.all((x == 0) | (x == 1)):
        raise ConfigError("values", "a proportion needs a statistic of 0 or 1 per seed")


def interval(values: Any, *, estimator: str = "median", level: float = 0.95) -> tuple[float, tuple[float, float], str]:
    """``(estimate, (lo, hi), method)``: the two-sided ``level`` confidence interval of the estimand
    over seeds, each end the one-sided ``1 - (1 - level)/2`` bound of
    :func:`figures.claims.stats.one_sided_bound` (exact for the median and a proportion; t for the
    mean). A median's end is infinite where ``n`` seeds cannot reach ``level``."""
    x = _values(values)
    if not 0 < level < 1:
        raise ConfigError("level", f"must lie in (0, 1), got {level}")
    _check_estimator(x, estimator)
    a = (1 - level) / 2
    lo, hi = st.one_sided_bound(x, estimator, a, False), st.one_sided_bound(x, estimator, a, True)
    return st.point_estimate(x, estimator), (lo, hi), st.METHODS[estimator].split(",")[0]


def _bounds(x: np.ndarray, criterion: Criterion, estimator: str, hold_a: float, fail_a: float) -> tuple[float, float]:
    """The interval the tests read: the holding side's bound at ``hold_a``, the failing side's at ``fail_a``."""
    if criterion.direction == "above":
        return st.one_sided_bound(x, estimator, hold_a, False), st.one_sided_bound(x, estimator, fail_a, True)
    if criterion.direction == "below":
        return st.one_sided_bound(x, estimator, fail_a, False), st.one_sided_bound(x, estimator, hold_a, True)
    return st.one_sided_bound(x, estimator, hold_a, False), st.one_sided_bound(x, estimator, hold_a, True)


def _decision(x: np.ndarray, criterion: Criterion, estimator: str, t: st.PointTest, verdict: str,
              fail_level: float, alpha: float) -> Decision:
    lo, hi = _bounds(x, criterion, estimator, alpha, fail_level)
    return Decision(verdict, t.estimate, (lo, hi), int(x.size), 1 - alpha, st.METHODS[estimator], t.p_holds,
                    t.p_fails, fail_level)


def decide(values_per_seed: Any, criterion: Criterion, *, level: float = 0.95, estimator: str = "median",
           fail_level: float | None = None) -> Decision:
    """The verdict of ``criterion`` at one point from one statistic value per seed (at least
    :data:`MIN_SEEDS`; fewer is a :class:`ConfigError`, never a verdict): ``holds`` when the
    holding test rejects at ``1 - level``, ``fails`` when the failing test rejects at ``fail_level``
    (default ``1 - level``: a family of one), else ``inconclusive``."""
    x = _values(values_per_seed)
    if x.size < MIN_SEEDS:
        raise ConfigError("seeds", f"a verdict needs >= {MIN_SEEDS} seeds, got {x.size}")
    _check_estimator(x, estimator)
    alpha = 1 - level
    fl = alpha if fail_level is None else fail_level
    t = st.point_test(x, criterion.direction, criterion.boundary, estimator)
    verdict = "fails" if t.p_fails <= fl else "holds" if t.p_holds <= alpha else "inconclusive"
    return _decision(x, criterion, estimator, t, verdict, fl, alpha)


def decide_family(values: Sequence[Any], criterion: Criterion, *, level: float = 0.95,
                  estimator: str = "median") -> tuple[str, list[Decision]]:
    """A claim's verdict over its in-regime points (each ``values[i]`` one number per seed): every
    point holds -> ``holds``; Holm rejects a point's failing test -> ``fails``; else
    ``inconclusive`` (:func:`figures.claims.stats.family_decision`)."""
    xs = [_values(v) for v in values]
    for x in xs:
        if x.size < MIN_SEEDS:
            raise ConfigError("seeds", f"a verdict needs >= {MIN_SEEDS} seeds, got {x.size}")
        _check_estimator(x, estimator)
    alpha = 1 - level
    tests = [st.point_test(x, criterion.direction, criterion.boundary, estimator) for x in xs]
    fam = st.family_decision(tests, alpha)
    decs = [_decision(x, criterion, estimator, t, v, fl, alpha)
            for x, t, v, fl in zip(xs, tests, fam.point_verdicts, fam.fail_levels)]
    return fam.verdict, decs


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


def _decide_values(claim: ClaimSpec, values: np.ndarray, *, level: float) -> Decision:
    if values.size == 1:
        return decide_exact(values[0], claim.criterion)
    return decide(values, claim.criterion, level=level, estimator=claim.statistic.estimator)


# ------------------------------------------------------------------------------------------------
# The validity map: sweep cells
# ------------------------------------------------------------------------------------------------
def train_slot_runs(row, cfg, seeds: Sequence[int], device: str = "cpu") -> list[xr.Dataset | None]:
    """The row's train slot on every seed of ``cfg``: in one call through the row's ``train_seeds``
    where it has one and it batches ``cfg`` (equal to the per-seed runs, tested per paper), else seed
    by seed. A diverged seed is ``None`` (no statistic: the point stays undecided) — the Trainer's
    :class:`DivergenceError`, or a batched seed with a non-finite logged value (what the Trainer
    stops on)."""
    if row.train_seeds is not None:
        try:
            out = row.slot("train_seeds")(cfg, seeds=[int(s) for s in seeds], device=device)
        except ConfigError:  # a config the batched runner does not batch: the plain runs below
            pass
        else:
            return [r if all(np.isfinite(np.asarray(v.values, dtype=float)).all()
                             for v in r.data_vars.values() if v.dtype.kind == "f") else None
                    for r in _split_runs(out, seeds, "train_seeds")]
    train = row.slot("train")
    out = []
    for s in seeds:
        try:
            out.append(train(cfg.replace(seed=int(s)), device=device, variant=getattr(cfg, "variant", None),
                             progress=False))
        except DivergenceError:  # a diverged seed has no statistic: NaN, the point stays undecided
            out.append(None)
    return out


def claim_cell(paper: str, config: dict, *, statistic: str, seeds: Sequence[int], stat_axes: Mapping[str, Sequence],
               runs: str = "", theory: str = "", device: str = "cpu", config_class: str = "",
               stat_kwargs: Mapping[str, Any] | None = None) -> xr.Dataset:
    """One map point of the config axes, all seeds (a sweep cell, run by :mod:`empirical.sweeps`):
    the runs (``runs(config, seeds=, device=)``, batched, or the row's train slot per seed), the
    statistic per seed at every point of the statistic axes (with ``stat_kwargs`` as further
    keywords: a robustness variant's), and the theory's statistic there.
    Returns ``statistic`` (dims ``seed``, *statistic axes) and ``theory`` (dims ``path``, ...)."""
    from ..papers import get

    row = get(paper)
    cfg = (resolve_ref(config_class, "config_class") if config_class else row.Config).from_dict(config)
    stat = resolve_ref(statistic, "statistic")
    extra = dict(stat_kwargs or {})
    if runs:
        trajs = _split_runs(resolve_ref(runs, "runs")(cfg, seeds=list(seeds), device=device), seeds, "runs")
    else:
        trajs = train_slot_runs(row, cfg, seeds, device)
    names = list(stat_axes)
    grid = [list(stat_axes[n]) for n in names]
    shape = [len(g) for g in grid]

    def evaluate(trajectories, config):
        vals = np.empty((len(trajectories), *shape), dtype=np.float64)
        for idx in itertools.product(*[range(k) for k in shape]):
            kw = {n: grid[i][j] for i, (n, j) in enumerate(zip(names, idx))}
            for r, tr in enumerate(trajectories):
                vals[(r, *idx)] = np.nan if tr is None else float(stat(tr, config, **kw, **extra))
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
    undecided, ``note`` says why), the theory's own values and decision there, and ``demo``: the
    paper's demonstration setting it stands for (its label; empty for a grid point)."""

    coords: Mapping[str, Any]
    inside: bool
    violated: tuple[str, ...]
    values: tuple[float, ...]
    decision: Decision | None
    theory: tuple[float, ...] = ()
    theory_decision: Decision | None = None
    note: str = ""
    demo: str = ""

    @property
    def verdict(self) -> str | None:
        return None if self.decision is None else self.decision.verdict

    def to_json(self) -> dict[str, Any]:
        d = self.decision
        return jsonable({"coords": dict(self.coords), "inside": self.inside, "violated": list(self.violated),
                         "verdict": self.verdict, "estimate": None if d is None else d.estimate,
                         "interval": None if d is None else list(d.interval), "seeds": len(self.values),
                         "p_holds": None if d is None else d.p_holds, "p_fails": None if d is None else d.p_fails,
                         "fail_level": None if d is None else d.fail_level,
                         "values": list(self.values), "theory": list(self.theory),
                         "theory_verdict": None if self.theory_decision is None else self.theory_decision.verdict,
                         "note": self.note, "demo": self.demo}, finite=True)


@dataclass(frozen=True)
class NullResult:
    """The null control decided: its description, point, per-seed values and decision;
    ``discriminating`` is False when the null passes the claim's criterion (verdict ``holds``)."""

    description: str
    at: Mapping[str, Any]
    values: tuple[float, ...]
    decision: Decision | None
    note: str = ""

    @property
    def verdict(self) -> str | None:
        return None if self.decision is None else self.decision.verdict

    @property
    def discriminating(self) -> bool | None:
        return None if self.decision is None else self.decision.verdict != "holds"

    def to_json(self) -> dict[str, Any]:
        d = self.decision
        return jsonable({"description": self.description, "at": dict(self.at), "verdict": self.verdict,
                         "estimate": None if d is None else d.estimate,
                         "interval": None if d is None else list(d.interval), "values": list(self.values),
                         "discriminating": self.discriminating, "note": self.note}, finite=True)


@dataclass(frozen=True)
class ClaimResult:
    """A claim decided: the JSON keys are documented in ``docs/claims.md`` (``verdict``, ``test``,
    ``family_level``, ``seeds``, ``mde``, ``null``, ``theory_check``, ``practice``, ``demo``,
    ``robustness``, ``interval``, ``regime``, ``falsifier``, ``grade``, ``map`` and the rest)."""

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
    null: NullResult | None = None
    robustness: tuple[dict, ...] = ()
    untested_reason: str = ""
    mde: Mapping[str, Any] = field(default_factory=dict)
    can_fire: Mapping[str, bool] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def statement(self) -> str:
        return self.spec.statement

    @property
    def robust(self) -> bool | None:
        """Whether every robustness variant gives the main verdict (``None``: no variant declared)."""
        return None if not self.robustness else all(r["verdict"] == self.verdict for r in self.robustness)

    @property
    def sensitivity(self) -> list[dict[str, Any]]:
        """For an effect-size criterion: the verdict at 1/2x and 2x its boundary (same values)."""
        crit = self.spec.criterion
        if crit.kind != "effect size":
            return []
        inside = [p for p in self.points if p.inside and p.decision is not None]
        if not inside or self.verdict == "untested":
            return []
        rows = []
        for factor in (0.5, 2.0):
            c = crit.scaled(factor)
            verdict, _ = decide_family([p.values for p in inside], c, level=self.level,
                                       estimator=self.spec.statistic.estimator)
            rows.append({"factor": factor, "holds_when": c.describe(), "verdict": verdict})
        return rows

    def theory_summary(self) -> dict[str, Any]:
        """The criterion on the theory's own trajectory at the in-regime points: its verdict
        (``holds`` when every point holds), on which flow, and whether that flow is the exact one."""
        s = self.spec
        pts = [p for p in self.points if p.inside and p.theory_decision is not None]
        if not s.theory:
            return {"flow": "", "exact": False, "verdict": None, "points": 0,
                    "note": "no theory function: the claim is not checked on the flow"}
        verdicts = [p.theory_decision.verdict for p in pts]
        verdict = (None if not verdicts else "holds" if all(v == "holds" for v in verdicts)
                   else "fails" if "fails" in verdicts else "inconclusive")
        note = "" if s.theory_exact else "not checked on the exact flow (a reduced theory)"
        return {"flow": s.theory_flow, "exact": s.theory_exact, "verdict": verdict, "points": len(pts), "note": note}

    def to_json(self) -> dict[str, Any]:
        s = self.spec
        demos = [{"label": p.demo, "coords": dict(p.coords), "inside": p.inside, "violated": list(p.violated),
                  "verdict": p.verdict, "estimate": None if p.decision is None else p.decision.estimate}
                 for p in self.points if p.demo]
        return jsonable({
            "name": s.name, "statement": s.statement, "source": s.source,
            "verdict": self.verdict, "estimate": self.estimate, "interval": list(self.interval),
            "level": self.level, "point_level": self.point_level, "method": self.method,
            "test": st.METHODS[s.statistic.estimator], "family_level": round(1 - self.level, 12),
            "seeds": self.seeds, "regime_points": self.regime_points, "grade": self.grade,
            "mde": dict(self.mde), "can_fire": dict(self.can_fire),
            "null": self.null.to_json() if self.null is not None else None if s.null is None else {
                "description": s.null.description, "at": dict(s.null.at), "verdict": None, "estimate": None,
                "interval": None, "values": [], "discriminating": None, "note": "not run"},
            "theory_check": self.theory_summary(), "practice": s.practice, "demo": demos,
            "robustness": list(self.robustness), "robust": self.robust, "sensitivity": self.sensitivity,
            "untested_reason": self.untested_reason,
            "at": dict(self.at), "where_it_breaks": self.where_it_breaks,
            "statistic": s.statistic.to_json(), "criterion": s.criterion.to_json(),
            "regime": [r.to_json() for r in s.regime], "falsifier": s.falsifier, "protocol": s.protocol.to_json(),
            "mode": "quick" if self.quick else "full", "failed_cells": self.failed_cells,
            "map": {"axes": [a.to_json() for a in s.map.axes], "points": [p.to_json() for p in self.points]},
        }, finite=True)


def _store(row, claim: str, ctx: RunContext) -> dict[str, Any]:
    """``{store, workers, ray}`` of a claim's map: a store root ``DIR`` in ``ctx`` ->
    ``DIR/claims/<paper>/<claim>``, default ``<outdir>/claims/store/<claim>`` (the paper's outdir:
    ``ctx.outdir``, else ``figures/out/<module>`` under the working directory)."""
    return ctx.sweep(f"claims/{row.name}/{claim}", ctx.paper_outdir(row.module) / "claims" / "store" / claim)


# ------------------------------------------------------------------------------------------------
# Planning a map: grid points, the paper's demonstration points, the null control, robustness cells
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CellPlan:
    """One sweep cell of a claim's map: its config-axis coordinates, the Config, the statistic
    axes evaluated on its runs (and extra statistic keywords), the runs function (``None``: the
    claim's) and whether the theory is evaluated in it."""

    coords: Mapping[str, Any]
    config: Any
    stat_axes: Mapping[str, list]
    stat_kwargs: Mapping[str, Any] = field(default_factory=dict)
    runs: str | None = None
    theory: bool = True


@dataclass(frozen=True)
class MapPlan:
    """A claim's validity map, validated and not yet run (:func:`plan_claim`): its cells, its
    points (coords in axis order, cell index, statistic coords, demonstration label), each point's
    regime (inside, violated, quantities), the seeds, the null control's (cell, statistic coords)
    and per robustness variant its (point index, cell index, statistic coords)."""

    claim: ClaimSpec
    quick: bool
    cells: tuple[CellPlan, ...]
    points: tuple[tuple[dict, int, dict, str], ...]
    regime: tuple[tuple[bool, tuple[str, ...], dict], ...]
    seeds: tuple[int, ...]
    null: tuple[int, dict] | None = None
    robustness: tuple[tuple[Any, tuple[tuple[int, int, dict], ...]], ...] = ()

    @property
    def inside(self) -> int:
        return sum(r[0] for r in self.regime)

    @property
    def configs(self) -> tuple[tuple[dict, Any], ...]:
        """``(config-axis coords, Config)`` of every cell."""
        return tuple((c.coords, c.config) for c in self.cells)


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-12)


def plan_claim(claim: ClaimSpec, *, quick: bool = True) -> MapPlan:
    """Validate ``claim``'s map before anything runs: references import, every point's config is
    valid, some points lie inside the regime and some outside, the null control's point lies
    inside, and the seeds let the test give both ``holds`` and ``fails`` over the in-regime points
    (:func:`figures.claims.stats.can_fire`); :class:`ConfigError` otherwise."""
    import json

    from ..papers import get

    row = get(claim.paper)
    claim.functions()
    cfg0 = claim.protocol.config(row.Config, quick)
    caxes = [a for a in claim.map.axes if a.target == "config"]
    saxes = [a for a in claim.map.axes if a.target == "statistic"]
    stat_axes = {a.name: list(a.points(quick)) for a in saxes}
    cells: list[CellPlan] = []
    index: dict[str, int] = {}

    def cell(coords, cfg, sax, kwargs=None, runs=None, theory=True) -> int:
        key = json.dumps(jsonable({"c": cfg.to_dict(), "s": dict(sax), "k": dict(kwargs or {}), "r": runs,
                                   "t": theory}), sort_keys=True)
        if key not in index:
            index[key] = len(cells)
            cells.append(CellPlan(dict(coords), cfg, {k: list(v) for k, v in sax.items()}, dict(kwargs or {}),
                                  runs, theory))
        return index[key]

    def config_at(ccoords, where):
        try:
            return cfg0.with_overrides([f"{k}={v!r}" for k, v in ccoords.items()])
        except ConfigError as err:
            raise ConfigError(where, f"point {ccoords}: {err}") from None

    points: list[tuple[dict, int, dict, str]] = []
    for combo in itertools.product(*[a.points(quick) for a in caxes]):
        ccoords = dict(zip([a.name for a in caxes], combo))
        ci = cell(ccoords, config_at(ccoords, f"{claim.field}.map"), stat_axes)
        for scombo in itertools.product(*[stat_axes[n] for n in stat_axes]):
            scoords = dict(zip(stat_axes, scombo))
            merged = {**ccoords, **scoords}
            points.append(({a.name: merged[a.name] for a in claim.map.axes}, ci, scoords, ""))
    for i, d in enumerate(claim.demos):
        hit = next((j for j, p in enumerate(points)
                    if all(_same(p[0][k], d.coords[k]) for k in d.coords)), None)
        if hit is not None:
            points[hit] = (*points[hit][:3], d.label)
            continue
        ccoords = {a.name: d.coords[a.name] for a in caxes}
        scoords = {a.name: d.coords[a.name] for a in saxes}
        ci = cell(ccoords, config_at(ccoords, f"{claim.field}.demo.{i}"), {k: [v] for k, v in scoords.items()})
        points.append(({a.name: d.coords[a.name] for a in claim.map.axes}, ci, scoords, d.label))
    regime = [claim.regime_point(cells[ci].config, coords) for coords, ci, _, _ in points]
    n_in = sum(inside for inside, _, _ in regime)
    if n_in == 0:
        raise ConfigError(f"{claim.field}.map", "no map point lies inside the regime "
                                                f"({claim.regime_text()}): nothing to decide the claim on")
    if n_in == len(points):
        raise ConfigError(f"{claim.field}.map", "every map point lies inside the regime: the map must also "
                                                "reach outside it to show where the claim breaks")
    n = claim.map.seeds(quick)
    est, crit = claim.statistic.estimator, claim.criterion
    fire = st.can_fire(est, crit.direction, crit.boundary, n, n_in)
    if not all(fire.values()):
        need = st.seeds_needed(est, crit.direction, crit.boundary, n_in)
        never = " and ".join(f"'{v}'" for v, ok in fire.items() if not ok)
        raise ConfigError(f"{claim.field}.map.seeds.{'quick' if quick else 'full'}",
                          f"{n} seeds can never give {never} with the {st.METHODS[est].split(',')[0]} over "
                          f"{n_in} in-regime points: give >= {need} seeds, or fewer in-regime points")
    null = None
    if claim.null is not None:
        nl = claim.null
        ccoords = {a.name: nl.at[a.name] for a in caxes}
        scoords = {a.name: nl.at[a.name] for a in saxes}
        cfg = config_at(ccoords, f"{claim.field}.null.at")
        inside, violated, _ = claim.regime_point(cfg, dict(nl.at))
        if not inside:
            raise ConfigError(f"{claim.field}.null.at", f"lies outside the regime ({'; '.join(violated)}): the null "
                                                        "control is run at a point where the claim is made")
        if nl.variant:
            cfg = cfg.replace(variant=nl.variant)
        if nl.settings:
            try:
                cfg = cfg.with_overrides([f"{k}={v!r}" for k, v in nl.settings.items()])
            except ConfigError as err:
                raise ConfigError(f"{claim.field}.null.settings", str(err)) from None
        null = (cell(ccoords, cfg, {k: [v] for k, v in scoords.items()}, runs=nl.runs or None, theory=False),
                scoords)
    robust = []
    for r in claim.robustness:
        entries = []
        for pi, ((coords, ci, scoords, _), (inside, _, _)) in enumerate(zip(points, regime)):
            if not inside:
                continue
            c = cells[ci]
            cfg = c.config
            if r.settings:
                try:
                    cfg = cfg.with_overrides([f"{k}={v!r}" for k, v in r.settings.items()])
                except ConfigError as err:
                    raise ConfigError(f"{claim.field}.robustness.{r.name}", str(err)) from None
            entries.append((pi, cell(c.coords, cfg, c.stat_axes, r.statistic, theory=False), scoords))
        robust.append((r, tuple(entries)))
    return MapPlan(claim, quick, tuple(cells), tuple(points), tuple(regime), tuple(range(n)), null, tuple(robust))


def decide_claim(claim: ClaimSpec | MapPlan, ctx: RunContext | None = None, *, quick: bool | None = None,
                 device: str | None = None, progress: bool | None = None, level: float = 0.95) -> ClaimResult:
    """Run ``claim``'s validity map (or a :class:`MapPlan`) as sweep cells (the store, workers and
    Ray of ``ctx``, :func:`_store`; cells already in the store are not recomputed), decide every
    point, the null control and the robustness variants, and conclude (module docstring).
    ``quick``/``device``/``progress``, when given, override ``ctx``'s (a :class:`MapPlan` keeps its own mode)."""
    from empirical.sweeps import run_cells
    from empirical.trainer import resolve_device

    from .. import progress as bars
    from ..papers import get

    ctx = RunContext.of(ctx, quick=quick, device=device, progress=progress)
    plan = claim if isinstance(claim, MapPlan) else plan_claim(claim, quick=ctx.quick)
    claim, quick = plan.claim, plan.quick
    row = get(claim.paper)
    cells = _cells(plan, resolve_device(ctx.device).type)
    settings = _store(row, claim.name, ctx)
    with bars.enabled(ctx.progress):  # run_cells draws the cells' bar (figures.progress)
        index = run_cells(CLAIM_CELL, cells, settings["store"], workers=settings["workers"], ray=settings["ray"],
                          bar=bars.cell_bar if ctx.progress else None)
    status = dict(zip(index["key"], zip(index["status"], index["error"])))
    root = Path(settings["store"])
    datasets: list[xr.Dataset | str] = []
    for c in cells:
        stt, err = status.get(c.key, ("failed", "not run"))
        datasets.append(xr.load_dataset(root / "cells" / f"{c.key}.nc", engine="h5netcdf") if stt == "ok"
                        else f"cell failed: {err}")
    failed = sum(isinstance(v, str) for v in datasets)
    raw = [_point_values(claim, coords, inside, violated, datasets[ci], scoords, demo, level)
           for (coords, ci, scoords, demo), (inside, violated, _) in zip(plan.points, plan.regime)]
    points = _decide_points(claim, raw, level)
    null = None
    if plan.null is not None:
        ci, scoords = plan.null
        p = _point_values(claim, dict(claim.null.at), True, (), datasets[ci], scoords, "", level)
        null = _null_result(claim, claim.null.description, dict(claim.null.at), p.values, level, p.note)
    robustness = []
    for r, entries in plan.robustness:
        pts = [_point_values(claim, plan.points[pi][0], True, (), datasets[ci], scoords, "", level)
               for pi, ci, scoords in entries]
        robustness.append(_robust_row(claim, r.name, pts, level))
    return _conclude(claim, points, quick=quick, level=level, failed=failed, null=null, robustness=robustness)


def _robust_row(claim: ClaimSpec, name: str, pts: Sequence[MapPoint], level: float) -> dict[str, Any]:
    """One robustness variant re-decided over its in-regime points."""
    ok = [p for p in pts if not _decidable(p)]
    if len(ok) < len(pts) or not pts:
        return {"name": name, "verdict": "inconclusive", "points": len(pts),
                "note": f"{len(pts) - len(ok)} of {len(pts)} points undecided"}
    verdict, decs = decide_family([p.values for p in ok], claim.criterion, level=level,
                                  estimator=claim.statistic.estimator)
    worst = min(decs, key=lambda d: claim.criterion.margin(*d.interval))
    return {"name": name, "verdict": verdict, "points": len(pts), "estimate": worst.estimate,
            "interval": list(worst.interval), "note": ""}


def _point_values(claim: ClaimSpec, coords, inside, violated, ds, scoords, demo, level) -> MapPoint:
    """A map point's per-seed values and the theory's (decided) from its cell; undecided here."""
    if isinstance(ds, str):
        return MapPoint(coords, inside, violated, (), None, note=ds, demo=demo)
    sel = {n: _index_of(ds[n].values, v) for n, v in scoords.items()}
    values = ds["statistic"].isel(sel).values.astype(np.float64)
    theory, theory_dec = (), None
    if "theory" in ds:
        th = ds["theory"].isel(sel).values.astype(np.float64)
        theory = tuple(th.tolist())
        if th.size == 1 or th.size >= MIN_SEEDS:
            theory_dec = _decide_values(claim, th, level=level) if np.all(np.isfinite(th)) \
                else decide_exact(float("nan"), claim.criterion)
    return MapPoint(coords, inside, violated, tuple(values.tolist()), None, theory, theory_dec, demo=demo)


def _decidable(p: MapPoint) -> str:
    """Why ``p`` cannot be decided ("" when it can)."""
    if p.note and not p.values:
        return p.note
    if len(p.values) < MIN_SEEDS:
        return f"{len(p.values)} seed(s): a verdict needs >= {MIN_SEEDS}"
    bad = sum(not math.isfinite(v) for v in p.values)
    if bad:
        return f"{bad} of {len(p.values)} seeds have no finite statistic (a diverged run, or a statistic undefined there)"
    return ""


def _decide_points(claim: ClaimSpec, points: Sequence[MapPoint], level: float) -> list[MapPoint]:
    """Every point decided from its values: the in-regime ones as one family (Holm), each one
    outside alone; a point without enough finite values stays undecided with the reason."""
    est = claim.statistic.estimator
    out = list(points)
    fam = [i for i, p in enumerate(points) if p.inside and not _decidable(p)]
    if fam:
        _, decs = decide_family([points[i].values for i in fam], claim.criterion, level=level, estimator=est)
        for i, d in zip(fam, decs):
            out[i] = dataclasses.replace(points[i], decision=d, note="")
    for i, p in enumerate(points):
        why = _decidable(p)
        if why:
            out[i] = dataclasses.replace(p, decision=None, note=why)
        elif not p.inside:
            out[i] = dataclasses.replace(p, decision=decide(p.values, claim.criterion, level=level, estimator=est),
                                         note="")
    return out


def _null_result(claim: ClaimSpec, description: str, at: Mapping[str, Any], values: Sequence[float], level: float,
                 note: str = "") -> NullResult:
    p = MapPoint(dict(at), True, (), tuple(float(v) for v in values), None, note=note)
    why = _decidable(p)
    if why:
        return NullResult(description, dict(at), p.values, None, why)
    return NullResult(description, dict(at), p.values,
                      decide(p.values, claim.criterion, level=level, estimator=claim.statistic.estimator))


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


def _where_it_breaks(points: Sequence[MapPoint], null: NullResult | None = None) -> str:
    inside = [p for p in points if p.inside]
    outside = [p for p in points if not p.inside]
    parts = []
    if null is not None and null.discriminating is False:
        parts.append(f"NOT DISCRIMINATING: the null control ({null.description}) passes the criterion too")
    theory_bad = [p for p in inside if p.theory_decision is not None and p.theory_decision.verdict != "holds"]
    if theory_bad:
        parts.append(f"THEORY MISSES ITS OWN CRITERION: the theory's trajectory does not pass it at "
                     f"{_list_points(theory_bad)} (the statement fails on the theory itself, or the criterion is wrong)")
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
    for p in outside:
        if p.demo:
            parts.append(f"the paper's demonstration point ({p.demo}) lies outside the computed regime "
                         f"({'; '.join(p.violated)}): {p.verdict or 'undecided'} there")
    return "; ".join(parts)


def conclude(claim: ClaimSpec, points: Sequence[MapPoint], *, quick: bool = True, level: float = 0.95,
             failed: int = 0, null: tuple[str, Mapping[str, Any], Sequence[float]] | NullResult | None = None,
             untested: str = "") -> ClaimResult:
    """A claim's verdict from map points whose values were measured outside the sweep cells — for
    runs a paper's protocol already makes (e.g. real-text runs shared with its figures). Every point
    is (re-)decided from its ``values`` with the family rule of :func:`decide_claim`. ``null``: the
    null control as ``(description, coords, per-seed values)``. With no point inside the regime the
    claim is **untested**: ``untested`` says why and what running it costs (on what hardware)."""
    pts = _decide_points(claim, list(points), level)
    if null is not None and not isinstance(null, NullResult):
        desc, at, values = null
        null = _null_result(claim, desc, at, values, level)
    return _conclude(claim, pts, quick=quick, level=level, failed=failed, null=null, untested=untested)


def untested(claim: ClaimSpec, reason: str, *, quick: bool = True, level: float = 0.95) -> ClaimResult:
    """A claim that was not run at all (no corpus, or a protocol that needs hardware this run does
    not have): verdict **untested**, ``reason`` saying why and what running it takes."""
    return _conclude(claim, [], quick=quick, level=level, failed=0, untested=reason)


def points_over_seeds(claim: ClaimSpec, cells, inside: Callable[[dict], tuple], level: float | None = None
                      ) -> list[MapPoint]:
    """Map points for :func:`conclude` from ``cells`` (``(coords, per-seed values)`` pairs):
    ``inside(coords) -> (inside, violated assumptions)``. Each point is decided alone (for the
    figures); :func:`conclude` re-decides the in-regime ones as one family. ``level`` defaults to 0.95."""
    pts = [MapPoint(coords, ok, tuple(violated), tuple(float(v) for v in values), None)
           for coords, values in cells for ok, violated in [inside(coords)]]
    alone = _decide_points(claim, [dataclasses.replace(p, inside=False) for p in pts], level or 0.95)
    return [dataclasses.replace(d, inside=p.inside, violated=p.violated) for p, d in zip(pts, alone)]


def _scale(points: Sequence[MapPoint]) -> float | None:
    """The per-seed spread on the map (median over the decided in-regime points of the seeds'
    standard deviation): the unit the minimal detectable effect is stated in."""
    sds = [float(np.std(p.values, ddof=1)) for p in points if p.inside and p.decision is not None
           and len(p.values) > 1]
    return float(np.median(sds)) if sds else None


def _conclude(claim: ClaimSpec, points: list[MapPoint], *, quick: bool, level: float, failed: int,
              null: NullResult | None = None, robustness: Sequence[dict] = (), untested: str = "") -> ClaimResult:
    crit, est = claim.criterion, claim.statistic.estimator
    inside = [p for p in points if p.inside]
    m = max(len(inside), 1)
    seeds_run = max((len(p.values) for p in points), default=0)
    n = max(seeds_run, claim.map.seeds(quick))
    fire = st.can_fire(est, crit.direction, crit.boundary, n, m)
    mde = st.minimal_detectable_effect(est, crit.direction, crit.boundary, n, m, 1 - level, scale=_scale(points))
    common = dict(spec=claim, level=level, point_level=1 - (1 - level) / m, quick=quick, failed_cells=failed,
                  null=null, robustness=tuple(robustness), mde=mde, can_fire=fire, points=tuple(points))
    if not inside:  # nothing run inside the regime: untested (only via conclude: plan_claim refuses such a map)
        # the statistic and interval shown are those of the decided point (outside the regime) nearest
        # the criterion's boundary: information, not a verdict
        out = [p for p in points if p.decision is not None]
        at = min(out, key=lambda p: abs(crit.margin(*p.decision.interval))) if out else None
        dec = None if at is None else at.decision
        reason = untested or "no map point lies inside the regime"
        return ClaimResult(
            verdict="untested", estimate=float("nan") if dec is None else dec.estimate,
            interval=(float("nan"), float("nan")) if dec is None else dec.interval,
            seeds=seeds_run, regime_points=0, grade="C", at={} if at is None else dict(at.coords),
            where_it_breaks=f"untested: {reason}" + (f"; {_where_it_breaks(points, null)}" if points else ""),
            method="" if dec is None else dec.method, untested_reason=reason, **common)
    decided = [p for p in inside if p.decision is not None]
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
    where = _where_it_breaks(points, null)
    other = [r for r in robustness if r["verdict"] != verdict]
    if other:
        where = ("NOT ROBUST: " + ", ".join(f"{r['name']} gives {r['verdict']}" for r in other) + "; " + where)
    return ClaimResult(
        verdict=verdict, estimate=float("nan") if dec is None else dec.estimate,
        interval=(float("nan"), float("nan")) if dec is None else dec.interval,
        seeds=seeds, regime_points=len(decided), grade=grade(seeds, len(decided)),
        at=dict(at.coords), where_it_breaks=where,
        method="" if dec is None else dec.method, **common)


# ------------------------------------------------------------------------------------------------
# A paper's claims slot, and the CLI's entry point
# ------------------------------------------------------------------------------------------------
def registry(paper: str, path: str | Path | None = None) -> Registry:
    """``paper``'s registry (default ``figures/<module>/claims.toml``, package data), validated
    against the row's Config with every reference resolved."""
    from importlib.resources import files

    from ..papers import get

    row = get(paper)
    if path is None:
        path = Path(str(files(f"figures.{row.module}") / "claims.toml"))
    return load_registry(path, paper=row.name, config=row.Config, resolve=True)


def map_cost(plan: MapPlan, ctx: RunContext | None = None) -> float | None:
    """CPU core-seconds of running ``plan``'s map (every cell, its seeds) from the map's ``cost``
    (``None``: the map declares none). Cells already in ``ctx``'s store are not counted."""
    cost = plan.claim.map.cost
    if cost is None:
        return None
    from ..papers import get

    row = get(plan.claim.paper)
    store = Path(_store(row, plan.claim.name, RunContext.of(ctx))["store"])
    n = len(plan.seeds)
    done = _stored_keys(plan, store)
    return sum(cost.cell_seconds(cfg, n, f"{plan.claim.field}.map.cost")
               for (coords, cfg), key in zip(plan.configs, _cell_keys(plan)) if key not in done)


def _cells(plan: MapPlan, device_type: str) -> list:
    """The sweep cells of ``plan``'s map: one per cell of the plan (grid points of the config
    axes, off-grid demonstration points, the null control, robustness variants), all seeds."""
    from empirical.sweeps import Cell

    claim = plan.claim
    out = []
    for c in plan.cells:
        options = {"statistic": claim.statistic.function, "seeds": list(plan.seeds), "stat_axes": dict(c.stat_axes),
                   "runs": claim.runs if c.runs is None else c.runs, "theory": claim.theory if c.theory else "",
                   "device": device_type}
        if claim.protocol.config_class:  # only then: the other claims' cell keys stay as they were
            options["config_class"] = claim.protocol.config_class
        if c.stat_kwargs:
            options["stat_kwargs"] = dict(c.stat_kwargs)
        out.append(Cell(claim.paper, c.config.to_dict(), "claim", options, dict(c.coords)))
    return out


def _cell_keys(plan: MapPlan) -> list[str]:
    return [c.key for c in _cells(plan, "cpu")]


def _stored_keys(plan: MapPlan, store: Path) -> set[str]:
    cells = store / "cells"
    return {p.stem for p in cells.glob("*.nc")} if cells.is_dir() else set()


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


def too_costly(plan: MapPlan, ctx: RunContext | None = None, *, device: str | None = None) -> NeedsAccelerator | None:
    """A full-mode ``plan`` that does not fit a CPU (:func:`map_cost` above ``ctx.cpu_core_hours``)
    when neither a GPU (``ctx.device``, or ``device``) nor a Ray cluster (``ctx.ray``) is at hand; else ``None``."""
    from empirical.trainer import resolve_device

    if plan.quick:
        return None
    ctx = RunContext.of(ctx, device=device)
    sec = map_cost(plan, ctx)
    if sec is None or sec <= ctx.cpu_core_hours * 3600:
        return None
    if resolve_device(ctx.device).type != "cpu" or ctx.ray is not None:
        return None
    cost = plan.claim.map.cost
    return NeedsAccelerator(plan.claim.paper, plan.claim.name, sec / 3600, len(plan.configs), len(plan.seeds),
                            cost.note if cost else "")


@dataclass(frozen=True)
class RegistryClaims:
    """A row's ``claims`` slot (:func:`registry_claims`): ``claims(ctx, *, only=None) ->
    list[ClaimResult]`` decides every claim of the paper's registry (or those named in ``only``), in
    file order, under the :class:`~figures.context.RunContext` ``ctx`` (``quick=``, ``device=``,
    ``progress=`` override its fields); ``claims.registry()`` is the loaded registry."""

    paper: str
    path: str | Path | None = None

    def registry(self) -> Registry:
        return registry(self.paper, self.path)

    def __call__(self, ctx: RunContext | None = None, *, quick: bool | None = None, device: str | None = None,
                 progress: bool | None = None, only: Sequence[str] | None = None) -> list[ClaimResult]:
        ctx = RunContext.of(ctx, quick=quick, device=device, progress=progress)
        reg = self.registry()
        specs = [reg.get(n) for n in only] if only else list(reg.claims)
        plans = [plan_claim(s, quick=ctx.quick) for s in specs]  # every claim validated before any runs
        out = []
        for p in plans:
            need = too_costly(p, ctx)
            if need is not None:  # reported, not dropped: untested, with what running it takes
                print(str(need), file=sys.stderr)
                out.append(untested(p.claim, str(need), quick=ctx.quick))
                continue
            out.append(decide_claim(p, ctx))
        return out


def registry_claims(paper: str, path: str | Path | None = None) -> RegistryClaims:
    """A row's ``claims`` slot deciding the registry ``path`` (default ``figures/<p>/claims.toml``)
    of ``paper`` over seeds with its validity maps. A paper's ``figures/<p>/claims.py`` is
    ``claims = registry_claims("<p>")`` plus its statistic functions. In full mode a map whose
    estimated cost exceeds the CPU allowance (:func:`too_costly`) is not run: its line ``needs a
    GPU/cluster: <paper>/<claim> ~N core-hours`` goes to stderr and the claim is concluded
    **untested** with that reason."""
    return RegistryClaims(paper, path)


class NoClaims(ConfigError):
    """The paper's row has no ``claims`` slot yet (transitional; the message says why)."""


def run_claims(paper: str, ctx: RunContext | None = None) -> list[ClaimResult]:
    """The row's ``claims`` slot, called with ``ctx``; :class:`NoClaims` when the row does not fill it."""
    from ..papers import get

    row = get(paper)
    if row.claims is None:
        raise NoClaims("claims", f"{row.name} has no claims: {row.missing.get('claims', 'not provided')}")
    return list(row.slot("claims")(RunContext.of(ctx)))


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
    map, the paper's demonstration points included. Every claim's test asserts
    ``theory_check(claim).holds``; the registry's ``theory_flow`` says whether that theory is the
    exact flow."""
    if not claim.theory:
        raise ConfigError(f"{claim.field}.theory", "the claim names no theory function to check")
    plan = plan_claim(claim, quick=quick)
    theory = resolve_ref(claim.theory, f"{claim.field}.theory")
    cache: dict[int, list[xr.Dataset]] = {}
    out = []
    for (coords, ci, scoords, demo), (inside, violated, _) in zip(plan.points, plan.regime):
        if not inside:
            continue
        cfg = plan.cells[ci].config
        if ci not in cache:
            cache[ci] = _trajectories(theory(cfg))
        th = statistic_values(claim, cache[ci], cfg, **scoords)
        dec = _decide_values(claim, th, level=level) if np.all(np.isfinite(th)) else None
        out.append(MapPoint(coords, True, violated, (), None, tuple(th.tolist()), dec, demo=demo))
    return TheoryCheck(claim.name, tuple(out))


def planted_violation(claim: ClaimSpec, trajectories: Sequence[xr.Dataset] | xr.Dataset, *, config=None,
                      quick: bool = True, level: float = 0.95, **coords) -> Decision:
    """The claim's decision on planted trajectories (one deterministic trajectory, or >= 5 seeds'
    worth) that violate the claim: every claim's test asserts ``.verdict == "fails"``. ``config``
    defaults to the protocol's; ``coords`` are the statistic axes' values."""
    from ..papers import get

    cfg = config if config is not None else claim.protocol.config(get(claim.paper).Config, quick)
    values = statistic_values(claim, trajectories, cfg, **coords)
    if values.size != 1 and values.size < MIN_SEEDS:
        raise ConfigError("seeds", f"plant one deterministic trajectory or >= {MIN_SEEDS}, got {values.size}")
    return _decide_values(claim, values, level=level)
