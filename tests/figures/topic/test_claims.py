"""figures.topic.claims (registry claims.toml): per claim, the exact (un-reduced) flow passes its
criterion at every in-regime point of the quick map (figures.claims.theory_check), a planted
violation (one deterministic trajectory, and the claim's seeds of it) is decided ``fails``; the
exact flows of theory.topic.exact against explicit steps and the reduced closed form; every claim
carries its practice label, null control and the median estimator."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr

from figures.claims import planted_violation, theory_check
from figures.topic import claims as C
from theory import topic as th
from theory.topic import onset

REGISTRY = C.claims.registry()
NAMES = ["stage1_block_difference", "two_stage_ordering", "stage2_onset", "attention_topic_wise", "gamma_star",
         "attention_table"]


def _spec(name):
    return REGISTRY.get(name)


def _cfg(name):
    return _spec(name).protocol.config(th.TopicConfig, True)


def _traj(t, **series):
    return xr.Dataset({k: ("time", np.asarray(v, dtype=float)) for k, v in series.items()}, coords={"time": t})


def _seeds(traj, name, scale, n=5):
    """``n`` noisy copies of a planted trajectory (multiplicative noise on ``name``)."""
    rng = np.random.default_rng(0)
    return [traj.assign({name: traj[name] * (1 + scale * rng.normal(size=traj.sizes["time"]))}) for _ in range(n)]


def test_the_registry_names_the_claims():
    # the SDE's own claim is checked in tests/figures/topic/test_sde_calibration.py
    assert [s.name for s in REGISTRY.claims] == [*NAMES, "sde_calibration"]


@pytest.mark.parametrize("name", ["stage1_block_difference", "gamma_star"])
def test_theory_passes_its_own_criterion_inside_the_regime(name):
    """On the exact (un-reduced) flow: the stage-1 full-space flow and the stage-2 K/Q flow."""
    check = theory_check(_spec(name))
    assert check.holds, str(check)
    assert len(check.points) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["two_stage_ordering", "stage2_onset", "attention_topic_wise"])
def test_theory_passes_its_own_criterion_inside_the_regime_joint(name):
    """On the exact joint flow (5 random initialisations per in-regime point)."""
    check = theory_check(_spec(name))
    assert check.holds, str(check)
    assert len(check.points) >= 2


def test_every_claim_labels_its_practice_and_theory_flow():
    for spec in REGISTRY.claims:
        assert spec.practice in ("reduced model", "the paper's network", "standard transformer")
        assert spec.null is not None
        assert spec.statistic.estimator == "median"
    flows = {s.name: s.theory_flow for s in REGISTRY.claims}
    for name in ("stage1_block_difference", "two_stage_ordering", "stage2_onset", "attention_topic_wise", "gamma_star"):
        assert flows[name].startswith("exact:"), name
    assert {d.coords["optimizer"] for d in _spec("attention_table").demos} == {"adam", "sgd"}  # the paper's SGD rows


def test_exact_stage1_flow_is_the_full_space_flow():
    """theory.topic.exact.stage1_flow (closed form) against explicit Euler steps of the full-matrix
    gradient [W | b] <- [W | b] - 2 lr ([W | b] M - C) from W = 0, and its topic mode against the
    reduced closed form omega_2* (1 - e^{-lambda_V t}) (the symmetric subspace is invariant)."""
    from theory.topic import exact

    cfg = _cfg("stage1_block_difference").replace(T=4, v=3, tau=2)
    M, Cm = exact.stage1_moments(cfg)
    h = 0.01
    Wt = np.zeros_like(Cm)
    for _ in range(int(200 / h)):
        Wt = Wt - 2 * cfg.lr * h * (Wt @ M - Cm)
    D = M.shape[0] - 1
    topic_of = np.concatenate([th.word_topics(cfg.T, cfg.v), [-1]])
    euler = th.reduced_coordinates(Wt[:, :D], Wt[:, D], topic_of, mask_id=D - 1)["topic_mode"]
    flow = exact.stage1_flow(cfg, [200.0])["topic_mode"][0]
    assert flow == pytest.approx(euler, rel=1e-3)
    lam, om = onset.stage1_rate(cfg)
    assert flow == pytest.approx(om * (1 - math.exp(-lam * 200.0)), rel=1e-9)


def test_exact_joint_flow_escape_and_gamma():
    """The exact joint flow from one small init: K/Q stay near their init scale while the value
    topic mode converges, then grow; the population gamma at uniform logits is 1."""
    from theory.topic import exact

    cfg = _cfg("two_stage_ordering")
    S0 = np.zeros((cfg.n_words + 1, cfg.n_words + 1))
    assert exact.population_gamma(S0, cfg) == pytest.approx(1.0, abs=1e-12)
    flow = exact.joint_flow(cfg, 0, np.array([0.0, 200.0, cfg.steps]))
    _, om = onset.stage1_rate(cfg)
    assert flow["topic_mode"][1] == pytest.approx(om, rel=0.05)  # 8 time constants: converged
    assert flow["norm_W_K"][1] < 2 * flow["norm_W_K"][0]
    assert flow["norm_W_K"][2] > 5 * flow["norm_W_K"][0] and flow["gamma_hat"][2] > 1.5


def test_stage1_planted_violation_fails():
    """W^V converging to the block difference without the masking factor (omega_2 -> 1, i.e. 1/v)
    gives the statistic -1: outside [-1/2, 1/2]."""
    cfg = _cfg("stage1_block_difference")
    tc = C.stage1_time_constant(cfg)
    t = np.linspace(0.0, 24 * tc, 241)
    planted = _traj(t, topic_mode=1 - np.exp(-t / tc))
    assert C.masking_factor_gap(planted, cfg, horizon=6) == pytest.approx(-1.0, abs=0.03)
    spec = _spec("stage1_block_difference")
    assert planted_violation(spec, planted, horizon=6).verdict == "fails"
    assert planted_violation(spec, _seeds(planted, "topic_mode", 0.01, n=7), horizon=6).verdict == "fails"
    # and the theorem's value holds: omega_2 -> 1/a
    a = C.masking_factor(cfg)
    assert planted_violation(spec, _traj(t, topic_mode=(1 - np.exp(-t / tc)) / a), horizon=6).verdict == "holds"
    # the horizon is counted in time constants of the run's own flow (x4 for the robustness variant)
    assert C.masking_factor_gap(planted, cfg, horizon=1.5, horizon_factor=4) == pytest.approx(-1.0, abs=0.03)


def test_two_stage_ordering_planted_violation_fails():
    """K/Q reach 1 at t = 100 while the topic mode reaches 1 - 1/e of its optimum only at t = 500."""
    cfg = _cfg("two_stage_ordering")
    _, om_star = onset.stage1_rate(cfg)
    t = np.arange(0.0, cfg.steps + 1.0, 10.0)
    planted = _traj(t, topic_mode=om_star * (1 - np.exp(-t / 500)), norm_W_K=0.05 * np.exp(t * math.log(20) / 100),
                    norm_W_Q=0.05 * np.exp(t * math.log(20) / 100))
    ev = C.event_times(planted, cfg)
    assert ev["t_onset"] == pytest.approx(100.0, rel=1e-6) and ev["t_V"] == pytest.approx(500.0, rel=1e-6)
    spec = _spec("two_stage_ordering")
    assert C.stage_separation(planted, cfg) == pytest.approx(math.log(0.2), rel=1e-6)
    assert planted_violation(spec, planted).verdict == "fails"
    assert planted_violation(spec, _seeds(planted, "norm_W_K", 0.02, n=8)).verdict == "fails"


def test_stage2_onset_planted_violation_fails():
    """An onset three e-folds of the escape after the linearised theory's."""
    cfg = _cfg("stage2_onset")
    rho = onset.escape_constants(cfg)["rho_star"]
    late = onset.predicted_onset_time(cfg) + 3.0 / rho
    t = np.linspace(0.0, late + 2.0 / rho, 401)
    norm = np.exp(rho * (t - late))
    planted = _traj(t, topic_mode=1 - np.exp(-t / 50), norm_W_K=norm, norm_W_Q=norm)
    assert C.onset_error_efolds(planted, cfg) == pytest.approx(3.0, rel=1e-3)
    spec = _spec("stage2_onset")
    assert planted_violation(spec, planted).verdict == "fails"
    assert planted_violation(spec, _seeds(planted, "norm_W_K", 0.02, n=8)).verdict == "fails"
    on_time = planted.assign(norm_W_K=planted["norm_W_K"] * math.exp(3.0), norm_W_Q=planted["norm_W_Q"] * math.exp(3.0))
    assert planted_violation(spec, on_time).verdict == "holds"


def test_attention_topic_wise_planted_violation_fails():
    """Attention that prefers other topics: gamma_hat falls to 0.8."""
    t = np.arange(0.0, 1001.0, 20.0)
    planted = _traj(t, gamma_hat=1 - 0.2 * (1 - np.exp(-t / 200)))
    spec = _spec("attention_topic_wise")
    assert planted_violation(spec, planted, horizon=1000).verdict == "fails"
    assert planted_violation(spec, _seeds(planted, "gamma_hat", 0.01, n=8), horizon=1000).verdict == "fails"


def test_gamma_star_planted_violation_fails():
    """Attention that stays near uniform (gamma_hat 1.2, gamma* = 1 + T p_c/p_r = 6)."""
    cfg = _cfg("gamma_star")
    assert C._gamma_star(cfg) == pytest.approx(1 + cfg.T * cfg.p_c / cfg.p_r, rel=1e-6)
    t = np.arange(0.0, 1601.0, 20.0)
    planted = _traj(t, gamma_hat=1 + 0.2 * (1 - np.exp(-t / 200)))
    spec = _spec("gamma_star")
    assert planted_violation(spec, planted, horizon=1600).verdict == "fails"
    assert planted_violation(spec, _seeds(planted, "gamma_hat", 0.01, n=7), horizon=1600).verdict == "fails"


def test_attention_table_planted_violation_fails():
    """Same-topic attention below uniform: the ordering's statistic is negative."""
    planted = xr.Dataset({"final_attention_same_topic_other_word": ((), 0.009), "final_attention_uniform": ((), 0.01),
                          "final_attention_different_topic": ((), 0.008)})
    spec = _spec("attention_table")
    assert C.table_ordering(planted, _cfg("attention_table")) == pytest.approx(math.log(0.9), rel=1e-9)
    assert planted_violation(spec, planted).verdict == "fails"


def test_crossing_interpolates_in_log():
    t = np.array([0.0, 10.0, 20.0])
    assert C.crossing(t, [0.1, 0.5, 2.0], 1.0, log=True) == pytest.approx(10 + 10 * math.log(2) / math.log(4))
    assert C.crossing(t, [0.1, 0.5, 0.9], 1.0) == math.inf


def test_cell_cost_scales_with_seeds_and_steps():
    cfg = _cfg("two_stage_ordering")
    assert C.cell_cost(cfg, 10) == pytest.approx(2 * C.cell_cost(cfg, 5))
    assert C.cell_cost(cfg.replace(steps=2 * cfg.steps), 5) > 1.9 * C.cell_cost(cfg, 5)


def test_attention_table_is_untested_in_quick_mode_with_its_cost():
    """The table's regime is the paper's protocol (20 epochs of 10,000 documents): no quick run
    reaches it, so quick mode reports it untested with the full map's cost; the full map holds the
    paper's five rows (SGD included) inside the regime."""
    r = C.quick_untested("attention_table")
    assert r.verdict == "untested" and "CPU core-hours" in r.untested_reason
    assert "SGD, lr 0.01" in r.untested_reason and "SGD, lr 0.03" in r.untested_reason
    spec = _spec("attention_table")
    full = spec.protocol.config(th.TopicConfig, False)
    for d in spec.demos:
        inside, violated, _ = spec.regime_point(full.replace(**d.coords), dict(d.coords))
        assert inside, (d.label, violated)
