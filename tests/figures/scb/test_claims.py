"""SCB's claims (figures/scb/claims.toml + claims.py): per claim, the theory's own trajectory passes
its criterion inside the regime and a planted violation fails; the statistics, the regime's
derived quantities and the protocols' runs against independent computations."""

import math

import numpy as np
import pytest
import sympy as sp
import xarray as xr

from figures.claims import planted_violation, registry, theory_check
from figures.scb import claims as C
from theory import scb

REG = registry("scb")
NAMES = ["l1_beats_sgd", "l1_recovers_ground_truth", "l1_exact_support", "escape_time_log_t",
         "transfer_skips_stage1"]


def test_registry_has_the_claims_with_runs_and_theory():
    assert REG.names[:len(NAMES)] == NAMES
    for name in NAMES:
        c = REG.get(name)
        assert c.runs and c.theory and c.quantities
        assert c.map.seeds(True) >= 5 and c.map.seeds(False) >= 12


#: claims whose exact flow does not meet the criterion at the protocol's horizon (one horizon,
#: t* + one e-fold at the l1 rate), measured: recovery to eps = 0.1 sits at 1.001 x eps (it reaches
#: 8e-5 x eps at 4 horizons); no exact zeros yet at one horizon (exact support at 4 horizons)
_THEORY_SHORT = {
    "l1_recovers_ground_truth": "the exact flow's error at eps = 0.1 is 1.001 eps at one horizon (8e-5 eps at four)",
    "l1_exact_support": "the exact flow sets the off-support zeros only after one horizon (exact at four)",
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=_THEORY_SHORT[n]))
                                  if n in _THEORY_SHORT else n for n in NAMES])
def test_theory_passes_its_criterion_inside_the_regime(name):
    check = theory_check(REG.get(name))
    assert check.holds, str(check)


def test_l1_theory_meets_the_claims_at_four_horizons():
    """The exact (V, A) population map at the paper's lambda (eps = 0.1 and 1, T = 32): l1 closer
    than SGD on P and Q, recovery to eps and the exact support once it runs four horizons."""
    base = _cfg("l1_beats_sgd").replace(T=32, batch=64)
    for lam in (8.9993e-5, 8.9993e-4):
        cfg = base.replace(lam=lam)
        th = C.l1_theory(cfg)
        assert C.l1_vs_sgd_log_ratio(th, cfg) < 0 and C.l1_vs_sgd_log_ratio(th, cfg, horizon=4.0) < 0
        assert C.l1_recovery_error(th, cfg, horizon=4.0) < 1
        assert C.l1_exact_support(th, cfg, horizon=4.0) == 1.0


# ------------------------------------------------------------------------------------------------
# Null controls (claims.toml [claims.X.null]): the natural alternative, which must not pass
# ------------------------------------------------------------------------------------------------
def test_sgd_null_is_vanilla_sgd_in_the_l1_place():
    """The recovery claim's null: vanilla SGD's runs under the l1 method's names, the same numbers
    as the SGD arm of the paired runs (same minibatches), the point's lambda kept."""
    cfg = _cfg("l1_beats_sgd").replace(T=8, batch=64, lam=1e-2)
    null, paired = C.sgd_null_runs(cfg, seeds=[0, 1]), C.l1_sgd_runs(cfg, seeds=[0, 1])
    for k in ("population_loss", "attention_distance_to_truth"):
        np.testing.assert_array_equal(null[f"l1_{k}"].values, paired[f"sgd_{k}"].values)
    assert not np.array_equal(null["l1_population_loss"].values, paired["l1_population_loss"].values)


def test_escape_null_does_not_grow_with_ln_t():
    """From a value matrix already correlated with P the escape takes O(1) scaled time at T/4 and
    T alike: the slope lies far below the claim's band [1/2, 2] (the null fails it)."""
    cfg = _cfg("escape_time_log_t").replace(T=32, batch=512)
    for tr in C.escape_null_runs(cfg, seeds=[0, 1]):
        assert abs(C.escape_slope(tr, cfg)) < 0.25


def test_transfer_null_pretrains_on_shuffled_data():
    """Pretraining on shuffled data (P = mu 1^T) leaves V uncorrelated with the downstream P:
    |zeta0| stays near 0 where the correlated pretraining reaches the flow's zeta0."""
    cfg = _cfg("transfer_skips_stage1").replace(T=8)
    th = C.transfer_theory(cfg)
    for tr in C.transfer_null_runs(cfg, seeds=[0, 1]):
        assert np.all(np.abs(tr["zeta0"].values) < 0.1)
    assert float(th["zeta0"].sel(pretrain=1.0)) > 0.5


def test_sde_null_trains_at_a_quarter_of_the_batch():
    """The null's runs are the Trainer's runs at batch B/4, seed by seed (batched, equal to them)."""
    from empirical.scb import experiment
    from figures.scb import calibration as K

    cfg = REG.get("sde_band_coverage").protocol.config(scb.SCBConfig, True).replace(steps=40, log_every=10)
    out = K.null_runs(cfg, seeds=[3, 4])
    assert [int(r["seed"]) for r in out] == [3, 4]
    for run, s in zip(out, [3, 4]):
        one = experiment.run(cfg.replace(batch=cfg.batch // 4, seed=s), device="cpu", progress=False)
        assert one.attrs["config"] and '"batch": %d' % (cfg.batch // 4) in one.attrs["config"]
        for k in scb.CORRELATION_OBSERVABLES:
            np.testing.assert_allclose(run[k].values, one[k].values, rtol=1e-10, atol=1e-12)
    half = experiment.run(cfg.replace(batch=cfg.batch // 2, seed=3), device="cpu", progress=False)
    assert not np.allclose(out[0]["value_transition_correlation"].values,
                           half["value_transition_correlation"].values)  # the batch is what differs


# ------------------------------------------------------------------------------------------------
# Planted violations
# ------------------------------------------------------------------------------------------------
def _l1_trajectory(l1: dict, sgd: dict, n=5):
    """One seed's trajectory of the l1 protocol: constant curves per rate (l1_lr, sgd_lr)."""
    t = np.arange(n, dtype=float)
    data = {}
    for prefix, vals in (("l1_", l1), ("sgd_", sgd)):
        for k in C._KEEP:
            v = vals.get(k, 0.0)
            data[f"{prefix}{k}"] = ((f"{prefix}lr", "time"), np.full((3, n), float(v)))
        data[f"{prefix}population_loss"] = ((f"{prefix}lr", "time"), np.array([[0.3, 0.28, 0.27, 0.27, 0.27],
                                                                               [0.3, 0.29, 0.28, 0.28, 0.28],
                                                                               [0.3, 0.3, 0.3, 0.3, 0.3]]))
    return xr.Dataset(data, coords={"time": t, "l1_lr": [0.01, 0.02, 0.03], "sgd_lr": [0.01, 0.02, 0.03]})


def _cfg(name):
    return REG.get(name).protocol.config(scb.SCBConfig, True)


def test_l1_beats_sgd_planted_violation_fails():
    rng = np.random.default_rng(0)
    trajs = [_l1_trajectory({"value_relative_distance_to_truth": 0.3 + 0.02 * rng.random(),
                             "attention_distance_to_truth": 0.2},
                            {"value_relative_distance_to_truth": 0.1, "attention_distance_to_truth": 0.25})
             for _ in range(6)]  # l1 closer on Q, farther on P: not smaller on both
    assert planted_violation(REG.get("l1_beats_sgd"), trajs).verdict == "fails"


def test_l1_statistics_read_the_early_stop_of_the_validation_chosen_rate():
    tr = _l1_trajectory({"value_relative_distance_to_truth": 0.1, "attention_distance_to_truth": 0.2},
                        {"value_relative_distance_to_truth": 0.2, "attention_distance_to_truth": 0.3})
    tr["sgd_value_relative_distance_to_truth"][0, 2] = 0.05  # the loss minimum of SGD: rate 0, step 2
    e = C.early_stopped(tr, "sgd_")
    assert e["lr_index"] == 0 and e["value_relative_distance_to_truth"] == 0.05
    cfg = _cfg("l1_beats_sgd").replace(T=32, batch=64, lam=8.9993e-4)
    assert C.l1_vs_sgd_log_ratio(tr, cfg) == pytest.approx(max(math.log(0.1 / 0.05), math.log(0.2 / 0.3)))
    task = scb.make_task(cfg)
    eps = 8.9993e-4 * 2**2 * 3**3 / task.K  # the paper's lambda = eps K / (Q^2 N^3), by hand
    assert eps == pytest.approx(1.0, abs=1e-4)
    assert C.l1_recovery_error(tr, cfg) == pytest.approx(max(0.1, 0.2) / eps)
    # the oracle stop: each distance at its own minimum over the window
    tr["l1_attention_distance_to_truth"][0, 3] = 0.01
    assert C.early_stopped(tr, "l1_", cfg, stop="distance")["attention_distance_to_truth"] == 0.01
    assert C.early_stopped(tr, "l1_", cfg)["attention_distance_to_truth"] == 0.2


def test_l1_recovery_planted_violation_fails():
    cfg = _cfg("l1_recovers_ground_truth").replace(T=32, batch=64, lam=8.9993e-5)  # eps = 0.1
    trajs = [_l1_trajectory({"value_relative_distance_to_truth": 0.15 + 0.01 * s, "attention_distance_to_truth": 0.05},
                            {}) for s in range(6)]  # d_P above eps in every seed
    assert planted_violation(REG.get("l1_recovers_ground_truth"), trajs, config=cfg).verdict == "fails"


def test_l1_horizon_window_truncates_the_runs():
    """The statistics' ``horizon`` keyword: the early stop looks only at logged times within
    horizon x (t* + one e-fold at the l1 rate); the runs cover HORIZON_MAX horizons."""
    cfg = _cfg("l1_beats_sgd").replace(T=32, batch=64, lam=8.9993e-4)
    task = scb.make_task(cfg)
    lr = 1.0 / (task.m2 * task.T)
    h = C.l1_horizon(task, lr)
    assert h == pytest.approx(math.log(32 * math.sqrt(task.rho.mean())) / (lr * math.sqrt(task.rho.mean() * task.K))
                              + 1 / (lr * C._slowest_rate(task)))
    steps, _ = C.l1_steps(task, lr)
    assert steps == math.ceil(C.HORIZON_MAX * h)
    tr = _l1_trajectory({"value_relative_distance_to_truth": 0.1}, {})
    tr = tr.assign_coords(time=[0.0, 0.5 * h, 0.9 * h, 2 * h, 3.9 * h])
    tr["l1_population_loss"][:] = [[0.3, 0.29, 0.28, 0.2, 0.1]] * 3
    tr["l1_value_relative_distance_to_truth"][:] = [[1.0, 0.5, 0.4, 0.3, 0.2]] * 3
    assert C.early_stopped(tr, "l1_", cfg)["value_relative_distance_to_truth"] == 0.4
    assert C.early_stopped(tr, "l1_", cfg, horizon=4.0)["value_relative_distance_to_truth"] == 0.2
    with pytest.raises(Exception, match="horizon"):
        C.early_stopped(tr, "l1_", cfg, horizon=5.0)


def test_l1_exact_support_planted_violation_fails():
    trajs = [_l1_trajectory({"support_exact": 0.0}, {}) for s in range(8)]  # no seed exact (0 of 5 cannot refute)
    assert planted_violation(REG.get("l1_exact_support"), trajs).verdict == "fails"


def _escape_trajectory(steps_lo, steps_hi, cfg):
    out = C.escape_theory(cfg).copy(deep=True)
    out["escape_steps"][:] = [steps_lo, steps_hi]
    return out


def test_escape_planted_violations_fail():
    """An escape that does not grow with T (slope ~0), and one growing like a power of T."""
    cfg = _cfg("escape_time_log_t").replace(T=32)
    th = C.escape_theory(cfg)
    lo = float(th["escape_steps"][0])
    lr = th["lr"].values
    flat = [_escape_trajectory(lo, lo * lr[0] / lr[1] * (1 + 0.01 * s), cfg) for s in range(6)]  # same tau*
    assert planted_violation(REG.get("escape_time_log_t"), flat).verdict == "fails"
    power = [_escape_trajectory(lo, lo * 16 * (1 + 0.01 * s), cfg) for s in range(6)]  # 4x T, 16x steps
    assert planted_violation(REG.get("escape_time_log_t"), power).verdict == "fails"


def test_transfer_planted_violation_fails():
    cfg = _cfg("transfer_skips_stage1")
    th = C.transfer_theory(cfg)
    trajs = []
    for s in range(6):
        t = th.copy(deep=True)
        t["escape_transfer"][:] = float(th["escape_scratch"]) * (1.3 + 0.01 * s)  # slower than scratch
        trajs.append(t)
    assert planted_violation(REG.get("transfer_skips_stage1"), trajs, pretrain=1.0).verdict == "fails"


# ------------------------------------------------------------------------------------------------
# The statistics, quantities and protocols against independent computations
# ------------------------------------------------------------------------------------------------
def test_escape_slope_uses_each_contexts_own_constants():
    """tau* = t eta sqrt(rho K) of each context's own task (no hard-coded rho or K): recomputed here
    from the tasks; the flow's slope between T/4 and T approaches 1 (docs/papers/scb.md §3.4)."""
    cfg = _cfg("escape_time_log_t").replace(T=128)
    th = C.escape_theory(cfg)
    taus = []
    for i, T in enumerate((32, 128)):
        task = scb.make_task(cfg.replace(T=T))
        lr = 1 / (task.m2 * T)
        assert th["lr"].values[i] == pytest.approx(lr)
        taus.append(th["escape_steps"].values[i] * lr * math.sqrt(task.rho.mean() * task.K))
    assert C.escape_slope(th, cfg) == pytest.approx((taus[1] - taus[0]) / math.log(4))
    assert 0.8 < C.escape_slope(th, cfg) < 1.0


def test_attention_noise_is_the_monte_carlo_minibatch_noise():
    """The exact off-support noise of the preconditioned attention gradient at the ground truth
    (enumerated) vs the Monte-Carlo estimate of empirical.scb.l1 over 1500 minibatches."""
    from empirical.scb import l1 as el1

    cfg = scb.SCBConfig(N=3, T=8, Q=2, task_seed=0, batch=1)
    exact = C.attention_noise(cfg)
    mc = el1.attention_noise_scale(scb.make_task(cfg), 64, draws=1500) * 8
    assert exact == pytest.approx(mc, rel=0.04)


def test_stage1_noise_is_the_zeta_projection_of_per_sample_gradients():
    """The zeta-noise at the initialisation vs per-sample gradients of empirical.scb.l1 (an
    independent sampler and gradient code) projected on P~."""
    from empirical.scb import l1 as el1
    import torch

    cfg = scb.SCBConfig(N=3, T=16, Q=2, task_seed=0, batch=1)
    task = scb.make_task(cfg)
    x, k, y = el1.SeedSampler(task, [3], torch.device("cpu")).sample(20_000)
    R = x.shape[1]
    V = torch.as_tensor(np.outer(task.mu, np.ones(3)))[None].expand(R, 3, 3)
    A = torch.full((R, 16, 3), 1 / 16, dtype=torch.float64)
    gV, _, _ = el1.minibatch_gradients(V, A, x[0][:, None], k[0][:, None], y[0][:, None])
    Pt = task.P_tilde
    proj = (gV.numpy() / task.mu[None, None, :] * Pt).sum((1, 2)) / (Pt**2).sum()
    assert C.stage1_noise(cfg) == pytest.approx(proj.std(), rel=0.03)
    assert abs(proj.mean() + 1 / 16) < 4 * proj.std() / np.sqrt(R)  # the drift: -P~/T projected = -1/T


def test_slowest_stage2_rate_is_the_sympy_jacobians():
    """The horizon's slowest rate: eigenvalues of the derived symmetric system's Jacobian at the
    ground truth (sympy, theory.scb.symmetric_system) vs the finite differences in claims.py."""
    S = scb.symmetric_system()
    task = scb.make_task(scb.SCBConfig(N=3, T=32, Q=2, task_seed=0))
    rhs = sp.Matrix(S.expanded_rhs)
    vals = {scb.T: 32, scb.rho: float(task.rho.mean()), scb.K: task.K, scb.m2: task.m2, scb.eta_V: 1, scb.eta_A: 1}
    J = rhs.jacobian(sp.Matrix(S.state)).subs(vals).subs({scb.zeta: 1, scb.omega: 1, scb.xi: 0, scb.beta: 1})
    ev = np.sort(-np.linalg.eigvals(np.array(J.evalf(), dtype=float)).real)
    assert abs(ev[0]) < 1e-9  # the scale direction a -> c a, V -> V / c
    assert C._slowest_rate(task) == pytest.approx(ev[1], rel=1e-6)
    assert ev[1] * 32 == pytest.approx(0.36, abs=0.02)  # O(1/T): why the prox matters


def test_transfer_runs_escape_where_their_ode_says():
    """The transfer protocol's real SGD (batch 256) from scratch and from each pretrained snapshot
    escapes within 15% of the ODE from the same start; the pretrained start carries the
    correlation the theory predicts."""
    cfg = _cfg("transfer_skips_stage1").replace(T=16)
    runs = C.transfer_runs(cfg, seeds=[0, 1])
    th = C.transfer_theory(cfg)
    for r in runs:
        assert abs(float(r["escape_scratch"]) / float(th["escape_scratch"]) - 1) < 0.15
        np.testing.assert_allclose(r["escape_transfer"].values, th["escape_transfer"].values, rtol=0.15)
        np.testing.assert_allclose(r["zeta0"].values, th["zeta0"].values, rtol=0.15, atol=0.02)


def test_protocols_refuse_the_settings_their_rules_own():
    from theory.errors import ConfigError

    with pytest.raises(ConfigError, match="eta_V"):
        C.l1_runs(_cfg("l1_beats_sgd").replace(eta_V=0.1, eta_A=0.1), seeds=[0])
    with pytest.raises(ConfigError, match="steps"):
        C.escape_runs(_cfg("escape_time_log_t").replace(T=32, steps=10), seeds=[0])


def test_map_costs_name_the_full_maps_a_cpu_cannot_afford():
    """The cost of an l1 cell is runs x steps x batch x T positions x POSITION_SECONDS (the closed
    form, by hand); quick maps fit the CPU allowance, the full l1 maps (T up to 5000) do not and
    are named with their cost instead of run (docs/claims.md)."""
    from figures.claims import plan_claim, too_costly
    from figures.context import RunContext
    from figures.scb import claims as C

    cfg = scb.SCBConfig.preset("l1_study").replace(T=32, batch=64)
    task = scb.make_task(cfg)
    steps, _ = C.l1_steps(task, 1.0 / (task.m2 * task.T))
    want = 2 * 1 * 5 * steps * 64 * 32 * C.POSITION_SECONDS
    assert C.l1_sgd_cost(cfg, 5) == pytest.approx(want, rel=1e-12)
    assert C.l1_cost(cfg, 5) == pytest.approx(want / 2, rel=1e-12)
    reg = C.claims.registry()
    for name in ("l1_beats_sgd", "escape_time_log_t"):
        assert too_costly(plan_claim(reg.get(name), quick=True), RunContext(device="cpu")) is None
        need = too_costly(plan_claim(reg.get(name), quick=False), RunContext(device="cpu"))
        assert need is not None and "needs a GPU/cluster: scb/" + name in str(need)
