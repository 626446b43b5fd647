"""The topic paper's claims (docs/papers/topic.md §3-§5), decided over seeds with validity maps.

``claims`` (the row's ``claims`` slot) decides the registry ``claims.toml`` beside this module
(:mod:`figures.claims`; schema in docs/claims.md). Its runs are
:func:`empirical.topic.seeds.train_seeds` (every seed of a map point in one vectorised run, cached
per process: the maps, the compare report and the figures share them). The real-text claims
(:mod:`.text`, registry ``text_claims.toml``) follow the registry's in the slot's list, decided
over the real-text protocol's seeds (none without a corpus). This module holds the functions the registry names:

* statistics — one seed's trajectory -> a number (the same function on the network's runs, the
  theory's trajectory and planted violations): :func:`masking_factor_gap` (stage 1),
  :func:`stage_separation`, :func:`onset_error_efolds`, :func:`log_gamma_hat`,
  :func:`gamma_convergence` (two stages, stage 2), :func:`table_ordering` (the attention table);
* the regime's derived quantities (:func:`stage1_quantities`, :func:`two_stage_quantities`, ...);
* the theory's trajectories, on the exact (un-reduced) population flows of
  :mod:`theory.topic.exact` (:func:`stage1_theory`: the full-space ``(W_V, b)`` flow;
  :func:`two_stage_theory`: the full ``W_K, W_Q, W_V, b`` flow from random initialisations) —
  the reduced ODE and the linearised escape define the criteria, so they are not their checks;
  :func:`table_theory` (the closed-form stage-2 optimum: no exact flow exists for Adam/CE);
* the null controls' runs (:func:`shuffled_topic_runs`) and the claims left *untested* in quick
  mode (:data:`QUICK_UNTESTED`: the paper's own table protocol, with its cost).

The time of an event in a logged trajectory is interpolated between logging points (linearly for
the value matrix's topic mode, in ``log`` for the exponentially growing K/Q norms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import xarray as xr

from theory import topic as th
from theory.topic import onset

from ..claims import RegistryClaims, registry_claims
from ..context import RunContext

__all__ = ["claims", "masking_factor", "stage1_theory", "stage1_quantities", "masking_factor_gap", "two_stage_theory",
           "two_stage_quantities", "horizon_quantities", "gamma_quantities", "event_times", "stage_separation",
           "onset_error_efolds", "log_gamma_hat", "gamma_convergence", "table_theory", "table_ordering",
           "two_stage_check", "crossing", "cell_cost", "table_quantities", "stage1_runs", "stage1_time_constant",
           "shuffled_topic_runs", "quick_untested", "QUICK_UNTESTED", "THEORY_INITS", "STAGE1_RUN_TIME_CONSTANTS"]

_decide = registry_claims("topic", Path(__file__).with_name("claims.toml"))


@dataclass(frozen=True)
class TopicClaims(RegistryClaims):
    """The row's ``claims`` slot: the registry beside this module, decided over seeds with its maps
    (:func:`figures.claims.registry_claims`), once per process and context (:func:`_decided`):
    the figures' claim outputs and the compare report share the decision (as they share the runs);
    then (without ``only``) the real-text claims of :mod:`.text` (untested without a corpus)."""

    def __call__(self, ctx: RunContext | None = None, *, quick: bool | None = None, device: str | None = None,
                 progress: bool | None = None, only=None) -> list:
        from empirical.trainer import resolve_device

        from .text import text_claim_results

        ctx = RunContext.of(ctx, quick=quick, device=device, progress=progress)
        results = _decided(ctx.replace(device=str(resolve_device(ctx.device))), tuple(only) if only else None)
        return list(results) if only else [*results, *text_claim_results(ctx)]


@lru_cache(maxsize=8)
def _decided(ctx: RunContext, only: tuple[str, ...] | None) -> tuple:
    """The registry's claims decided under ``ctx`` (its device resolved), as an immutable tuple,
    once per process (keyed by the context and ``only``; ``ctx.progress`` only shows a bar)."""
    names = list(only) if only else _decide.registry().names
    untested = [n for n in names if ctx.quick and n in QUICK_UNTESTED]
    run = [n for n in names if n not in untested]
    results = _decide(ctx, only=run) if run else []
    by_name = {r.name: r for r in [*results, *(quick_untested(n) for n in untested)]}
    return tuple(by_name[n] for n in names if n in by_name)


claims = TopicClaims("topic", Path(__file__).with_name("claims.toml"))

#: claims whose regime (the paper's own protocol) no quick-mode run reaches at a quick-mode cost:
#: *untested* in quick mode (why, and what the full map costs), decided by ``--full``
QUICK_UNTESTED = ("attention_table",)


def quick_untested(name: str):
    """The quick-mode result of a :data:`QUICK_UNTESTED` claim: ``untested``, with the regime's
    requirement and the cost of its full map (:func:`cell_cost` of every in-regime cell of the full
    map and its null, CPU core-hours; GPU time where measured)."""
    from ..claims import conclude

    spec = _decide.registry().get(name)
    cfg = spec.protocol.config(th.TopicConfig, False)
    rows = [d.coords for d in spec.demos]
    cells = len(rows) + (1 if spec.null is not None else 0)
    seeds = spec.map.seeds(False)
    steps = max(float(c.get("steps", cfg.steps)) for c in rows) if rows else float(cfg.steps)
    cpu = cells * cell_cost(cfg.replace(steps=int(steps)), seeds)
    why = (f"quick mode trains {spec.protocol.config(th.TopicConfig, True).steps} steps on "
           f"{spec.protocol.config(th.TopicConfig, True).n_docs} documents; the regime ({spec.regime_text()}) is the "
           f"paper's table protocol: its {len(rows)} rows ({'; '.join(d.label for d in spec.demos)}) and the null, "
           f"{seeds} seeds each at {steps:.0f} steps, cost ~{cpu / 3600:.1f} CPU core-hours on a 2-core CPU (cell_cost, "
           f"measured per seed-step; GPU time not measured); "
           f"run `tdyn claims topic --full`")
    return conclude(spec, _unrun_points(spec), quick=True, untested=why)


def _unrun_points(spec) -> list:
    """The quick map's points and the paper's demonstration rows of an untested claim, at the quick
    protocol (where they lie outside the regime), not run: no values, the violated bounds named."""
    import itertools

    from ..claims import MapPoint

    quick_cfg = spec.protocol.config(th.TopicConfig, True)
    axes = spec.map.axes
    coords_list = [(dict(zip([a.name for a in axes], combo)), "")
                   for combo in itertools.product(*[a.points(True) for a in axes])]
    coords_list += [(dict(d.coords), d.label) for d in spec.demos]
    points = []
    for coords, label in coords_list:
        cfg = quick_cfg.replace(**{k: v for k, v in coords.items() if hasattr(quick_cfg, k)})
        inside, violated, _ = spec.regime_point(cfg, coords)
        points.append(MapPoint(coords, False, tuple(violated), (), None,
                               note="not run in quick mode (outside the regime at the quick protocol)", demo=label))
    return points


# ------------------------------------------------------------------------------------------------
# Events in a trajectory
# ------------------------------------------------------------------------------------------------
def crossing(t, y, level: float, *, log: bool = False) -> float:
    """First time ``y`` reaches ``level`` (``inf`` if never; ``t[0]`` if already there),
    interpolated between the two logged points around it (in ``log y`` with ``log``)."""
    t, y = np.asarray(t, dtype=np.float64), np.asarray(y, dtype=np.float64)
    idx = np.nonzero(y >= level)[0]
    if not idx.size:
        return math.inf
    i = int(idx[0])
    if i == 0:
        return float(t[0])
    y0, y1 = y[i - 1], y[i]
    if log:
        if y0 <= 0:
            return float(t[i])
        y0, y1, level = math.log(y0), math.log(y1), math.log(level)
    return float(t[i - 1] + (t[i] - t[i - 1]) * (level - y0) / (y1 - y0)) if y1 > y0 else float(t[i])


def _at(traj, name: str, time: float) -> float:
    t = traj["time"].values
    if time > t[-1] + 1e-9 or time < t[0] - 1e-9:
        raise ValueError(f"time {time} outside the trajectory [{t[0]}, {t[-1]}]")
    return float(np.interp(time, t, traj[name].values))


def _finite(*arrays) -> bool:
    return all(np.all(np.isfinite(np.asarray(a, dtype=np.float64))) for a in arrays)


# ------------------------------------------------------------------------------------------------
# Stage 1: the value matrix's topic structure (spec §3.2, §3.5; P1)
# ------------------------------------------------------------------------------------------------
def masking_factor(config: th.TopicConfig) -> float:
    """``a = 1 - (1 - p_c) p_m`` (theory keys; the code key mask: ``a = 1``), the factor of the
    theorem's ``1/(v a)`` (:func:`theory.topic.topic_mode_equation`)."""
    return float(th.topic_mode_equation(config.keys)["a"].subs(th.numeric_subs(config)))


#: the stage-1 runs cover this many time constants ``1/lambda_V`` of the flow: 4 x the map's
#: largest horizon (6), for the ``horizon x4`` robustness variant
STAGE1_RUN_TIME_CONSTANTS = 24.0


def stage1_time_constant(config: th.TopicConfig) -> float:
    """``1/lambda_V`` in steps: the stage-1 topic mode's time constant on the config's own flow
    (:func:`theory.topic.onset.stage1_rate`; its key variant and learning rate)."""
    return 1.0 / onset.stage1_rate(config)[0]


def stage1_runs(config: th.TopicConfig, *, seeds, device: str = "cpu"):
    """:func:`empirical.topic.seeds.train_seeds` over :data:`STAGE1_RUN_TIME_CONSTANTS` time
    constants of the config's flow (about 200 logged points): the horizon is set by the flow
    (converged stage 1, the theorem's setting), not by a fixed step count."""
    from empirical.topic.seeds import train_seeds

    steps = int(math.ceil(STAGE1_RUN_TIME_CONSTANTS * stage1_time_constant(config)))
    return train_seeds(config.replace(steps=steps, log_every=max(1, steps // 200)), seeds=seeds, device=device)


def masking_factor_gap(traj, config: th.TopicConfig, *, horizon: float, horizon_factor: float = 1.0) -> float:
    """``(a omega_2(t) - 1) / (1 - a)`` at ``t = horizon x horizon_factor`` time constants of the
    config's stage-1 flow (:func:`stage1_time_constant`): the value matrix's average same-topic
    minus different-topic entry (``omega_2/v``) against the theorem's ``1/(v a)``, in units of the
    theorem's masking correction (0: the theorem's value; -1: ``1/v``, the value without the factor
    ``a``). ``a`` is the theorem's (theory keys) whatever the run's key mask, so a run with the
    code key mask (the null: no factor ``a``) is measured against the same value. NaN when the run
    diverged."""
    if not _finite(traj["topic_mode"].values):
        return math.nan
    a = masking_factor(config.replace(keys="theory"))
    t = float(horizon) * float(horizon_factor) * stage1_time_constant(config)
    return (a * _at(traj, "topic_mode", t) - 1.0) / (1.0 - a)


def stage1_quantities(config: th.TopicConfig, coords) -> dict[str, float]:
    """``flow_residual``: ``e^{-lambda_V t}/(1 - a)`` at the horizon (``horizon`` time constants:
    the exact flow's own remaining distance to ``1/(v a)`` from ``W_V = 0``, in the statistic's
    units); ``absent_topics``: ``T - tau`` (topics a document misses: the topic contrasts of
    ``u_S`` have variance ``kappa > 0`` only when ``>= 1``)."""
    a = masking_factor(config.replace(keys="theory"))
    return {"flow_residual": math.exp(-float(coords["horizon"])) / (1.0 - a),
            "absent_topics": float(config.T - config.tau)}


def stage1_theory(config: th.TopicConfig):
    """The exact stage-1 flow (:func:`theory.topic.exact.stage1_flow`: the full-space ``(W_V, b)``
    population gradient flow over all ``C(T, tau)`` documents, closed form) from ``W_V = 0`` over
    :data:`STAGE1_RUN_TIME_CONSTANTS` time constants: ``topic_mode`` per step."""
    from theory.topic import exact

    t = np.linspace(0.0, STAGE1_RUN_TIME_CONSTANTS * stage1_time_constant(config), 481)
    flow = exact.stage1_flow(config, t)
    return xr.Dataset({k: ("time", v) for k, v in flow.items()}, coords={"time": t})


# ------------------------------------------------------------------------------------------------
# Two stages (spec §3.4, §3.6; P8, P9)
# ------------------------------------------------------------------------------------------------
#: initialisations the exact joint flow is run from (one path each): the theory check is decided
#: over them with the claim's own test, whose "holds" needs >= 5
THEORY_INITS = 5


def two_stage_theory(config: th.TopicConfig):
    """The exact joint flow (:func:`theory.topic.exact.joint_flow`: the full ``W_K, W_Q, W_V, b``
    population gradient flow, ``N -> inf``, no reduction or linearisation) from
    :data:`THEORY_INITS` Gaussian initialisations of the config's scales, over the run (201
    logged points): one trajectory per initialisation."""
    return list(_joint_theory(config))


@lru_cache(maxsize=64)
def _joint_theory(config: th.TopicConfig) -> tuple:
    from theory.topic import exact

    t = np.linspace(0.0, float(config.steps), 201)
    out = []
    for seed in range(THEORY_INITS):
        flow = exact.joint_flow(config, seed, t)
        out.append(xr.Dataset({k: ("time", v) for k, v in flow.items()}, coords={"time": t}))
    return tuple(out)


def shuffled_topic_runs(config: th.TopicConfig, *, seeds, device: str = "cpu"):
    """The shuffled-data null: :func:`empirical.topic.seeds.train_seeds` on documents that mix
    every topic (``tau = T``: each word's topic uniform, no topic structure for ``W_V`` to learn
    and no stage-2 gradient), decided by the claim's statistic against the claim's own config
    (its predictions)."""
    from empirical.topic.seeds import train_seeds

    return train_seeds(config.replace(tau=config.T), seeds=seeds, device=device)


def two_stage_quantities(config: th.TopicConfig, coords) -> dict[str, float]:
    """:func:`theory.topic.onset.onset_regime`: ``kq_initial_norm``, ``rate_ratio``,
    ``onset_window`` (over the run)."""
    q = onset.onset_regime(config)
    return {k: q[k] for k in ("kq_initial_norm", "rate_ratio", "onset_window")}


def horizon_quantities(config: th.TopicConfig, coords) -> dict[str, float]:
    """``onset_window`` at the map's horizon: ``(onset + 1/rho*) / horizon``."""
    q = onset.onset_regime(config)
    rho = onset.escape_constants(config)["rho_star"]
    return {"onset_window": (q["onset"] + 1.0 / rho) / float(coords["horizon"])}


@lru_cache(maxsize=64)
def _value_time_level(config: th.TopicConfig) -> float:
    _, om_star = onset.stage1_rate(config)
    return (1.0 - math.exp(-1.0)) * om_star


def event_times(traj, config: th.TopicConfig) -> dict[str, float]:
    """``t_V``: the value matrix's topic mode reaches ``1 - 1/e`` of its stage-1 optimum (one
    time constant of the stage-1 flow); ``t_onset``: ``max(||W_K||_F, ||W_Q||_F)`` reaches 1
    (K/Q of order one: the end of the linear escape, spec §3.6). ``inf`` when not reached."""
    t = traj["time"].values
    kq = np.maximum(traj["norm_W_K"].values, traj["norm_W_Q"].values)
    return {"t_V": crossing(t, traj["topic_mode"].values, _value_time_level(config)),
            "t_onset": crossing(t, kq, 1.0, log=True)}


def stage_separation(traj, config: th.TopicConfig) -> float:
    """``ln(t_onset / t_V)`` (:func:`event_times`): positive when the value matrix has learned its
    first time constant of topic structure before K/Q leave the neighbourhood of 0. Censored
    conservatively: an onset not reached counts at the run's end (a lower bound), a value time not
    reached at the run's end too (the statistic is then <= 0). NaN when the run diverged."""
    if not _finite(traj["topic_mode"].values, traj["norm_W_K"].values, traj["norm_W_Q"].values):
        return math.nan
    end = float(traj["time"].values[-1])
    ev = event_times(traj, config)
    t_on, t_v = min(ev["t_onset"], end), min(ev["t_V"], end)
    return math.log(max(t_on, 1e-9) / max(t_v, 1e-9))


def onset_error_efolds(traj, config: th.TopicConfig) -> float:
    """``rho* (t_onset - t_onset_predicted)``: the measured onset's distance from the theory's
    (:func:`theory.topic.onset.predicted_onset_time`), in e-folds of the K/Q escape at the
    stage-1 optimum (``rho* = eta_KQ sigma_max(G*)/sqrt(d_a)``). An onset not reached counts at
    the run's end (a lower bound)."""
    if not _finite(traj["norm_W_K"].values, traj["norm_W_Q"].values):
        return math.nan
    ev = event_times(traj, config)
    rho = onset.escape_constants(config)["rho_star"]
    return rho * (min(ev["t_onset"], float(traj["time"].values[-1])) - onset.predicted_onset_time(config))


def log_gamma_hat(traj, config: th.TopicConfig, *, horizon: float) -> float:
    """``ln gamma_hat`` at ``horizon`` steps: the trained attention's same-topic over
    different-topic ratio ``((v-1) alpha + beta)/v`` (held-out unmasked documents; 0 = uniform)."""
    g = traj["gamma_hat"].values
    if not _finite(g) or np.any(g <= 0):
        return math.nan
    return math.log(_at(traj, "gamma_hat", float(horizon)))


@lru_cache(maxsize=64)
def _gamma_star(config: th.TopicConfig) -> float:
    return float(th.stage2_optimum(config)["gamma"])


def gamma_convergence(traj, config: th.TopicConfig, *, horizon: float) -> float:
    """``ln gamma_hat(t) / ln gamma*`` at ``horizon`` steps: 0 at uniform attention, 1 at the
    stage-2 optimum (:func:`theory.topic.stage2_optimum`, ``W_V`` at the stage-1 optimum)."""
    return log_gamma_hat(traj, config, horizon=horizon) / math.log(_gamma_star(config))


def gamma_quantities(config: th.TopicConfig, coords) -> dict[str, float]:
    """``theory_residual``: ``|ln gamma(t)/ln gamma* - 1|`` of the exact flow
    (:func:`two_stage_theory`, the median over its initialisations) at the horizon: a constant
    measured on the flow, where the theorem's optimum has been reached."""
    vals = [gamma_convergence(tr, config, horizon=float(coords["horizon"])) for tr in _joint_theory(config)]
    return {"theory_residual": abs(float(np.median(vals)) - 1.0)}


# ------------------------------------------------------------------------------------------------
# The attention table (spec §5.6; P7)
# ------------------------------------------------------------------------------------------------
def table_ordering(traj, config: th.TopicConfig) -> float:
    """``min(ln(a_st / a_u), ln(a_u / a_dt))`` of the final attention statistics (held-out
    unmasked documents): ``a_st`` same topic and another word, ``a_u`` uniform (1/L), ``a_dt``
    different topic. Positive iff same-topic > uniform > different-topic."""
    st, u, dt = (float(np.asarray(traj[f"final_attention_{k}"]).reshape(-1)[0])
                 for k in ("same_topic_other_word", "uniform", "different_topic"))
    if not (math.isfinite(st) and math.isfinite(dt) and st > 0 and dt > 0):
        return math.nan
    return min(math.log(st / u), math.log(u / dt))


def table_quantities(config: th.TopicConfig, coords) -> dict[str, float]:
    """``epochs``: passes over the training set, ``steps x batch / n_docs`` (the official protocol:
    20 epochs, spec §2.2); ``inf`` for fresh documents every step."""
    return {"epochs": config.steps * config.batch / config.n_docs if config.n_docs else math.inf}


def table_theory(config: th.TopicConfig):
    """The stage-2 optimum of the table's setting (code key mask: ``gamma* = 1 + T p_c/p_r``,
    ``s_1 = s_2 = ln gamma*``, spec §3.6) as final attention statistics of a query whose keys are
    half of its topic, half of others: per key ``e^{s}/Z`` (same topic), ``1/Z`` (different),
    uniform ``1/L`` with ``Z = L (e^s + 1)/2``."""
    s = math.log(1.0 + config.T * config.p_c / config.p_r)
    L = 100.0
    Z = L * (math.exp(s) + 1.0) / 2.0
    return xr.Dataset({"final_attention_same_topic_other_word": ((), math.exp(s) / Z),
                       "final_attention_uniform": ((), 1.0 / L), "final_attention_different_topic": ((), 1.0 / Z)})


# ------------------------------------------------------------------------------------------------
# The joint run's summary (the compare report's details and the two-stage figure)
# ------------------------------------------------------------------------------------------------
def two_stage_check(traj, config: th.TopicConfig) -> dict[str, float]:
    """One seed's two-stage numbers: ``t_V``, ``onset_measured``, ``onset_predicted`` (the
    linearised theory), ``onset_tolerance`` (one e-fold, ``1/rho*`` steps), their error in
    e-folds, ``stage_separation``, the final ``gamma_hat`` and ``gamma*``."""
    ev = event_times(traj, config)
    pred = onset.predicted_onset_time(config)
    rho = onset.escape_constants(config)["rho_star"]
    return {"t_V": ev["t_V"], "onset_measured": ev["t_onset"], "onset_predicted": pred,
            "onset_tolerance": 1.0 / rho, "onset_error_efolds": onset_error_efolds(traj, config),
            "stage_separation": stage_separation(traj, config), "two_stages": bool(ev["t_V"] < ev["t_onset"]),
            "gamma_hat": float(traj["gamma_hat"].values[-1]), "gamma_star": _gamma_star(config)}


# ------------------------------------------------------------------------------------------------
# What a map cell costs (the registry's ``cost``: full maps beyond a CPU are named, not run)
# ------------------------------------------------------------------------------------------------
#: CPU seconds per seed-step of :func:`empirical.topic.seeds.train_seeds` (measured on a 2-core
#: CPU, 5-12 seeds batched): a fixed part and parts per document token and per vocabulary pair
_STEP_SECONDS = {"fixed": 3e-5, "token": 2.5e-8, "pair": 1.5e-8}


def cell_cost(config: th.TopicConfig, seeds: int) -> float:
    """Estimated CPU core-seconds of one map cell of ``config`` with ``seeds`` seeds
    (:data:`_STEP_SECONDS` x steps x seeds, plus the logging)."""
    D = config.n_words + (4 if config.vocab == "code" else 1)
    L = max(config.N, config.N_max) + (2 if config.vocab == "code" else 0)
    per = (_STEP_SECONDS["fixed"] + _STEP_SECONDS["token"] * config.batch * L
           + (_STEP_SECONDS["pair"] * config.batch * D * D if config.attention == "trained" else 0.0))
    logs = len(config.log_steps()) * 2e-3
    return seeds * (config.steps * per + logs)
