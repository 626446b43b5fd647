"""theory.topic.stage2: the stage-2 optimum (docs/papers/topic.md §3.6 table; code variant 1 + T p_c/p_r), the
escape rate, and the class-counted tied loss and its flow."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from theory import topic as tp


@pytest.mark.parametrize("T,v,tau,p_c,p_r", [(10, 10, 2, 0.1, 0.1), (6, 3, 3, 0.2, 0.3)])
def test_stage2_gamma_code_variant_closed_form(T, v, tau, p_c, p_r):
    """Acceptance 1: code masking variant gamma* = 1 + T p_c / p_r."""
    cfg = tp.TopicConfig(T=T, v=v, tau=tau, p_c=p_c, p_r=p_r, keys="code")
    opt = tp.stage2_optimum(cfg)
    assert opt["gamma"] == pytest.approx(1 + T * p_c / p_r, rel=1e-6)
    assert opt["loss"] < opt["loss_uniform"]


def test_stage2_theory_variant_matches_spec_table():
    opt = tp.stage2_optimum(tp.TopicConfig(T=10, v=10, tau=2))
    assert opt["loss_uniform"] == pytest.approx(0.95, abs=1e-12)
    assert opt["loss"] == pytest.approx(0.945894, abs=2e-6)
    assert opt["gamma"] == pytest.approx(6.637, abs=2e-3)
    assert opt["alpha"] == pytest.approx(7.264, abs=2e-3)
    assert opt["beta"] == pytest.approx(1.0, abs=1e-4)


def test_escape_rate_code_variant_closed_form():
    """Spec §3.6: sigma_max(G) = |dL/dgamma|/((T-1)v), dL/dgamma = -2 p_c (tau-1)/(tau^2 v)."""
    cfg = tp.TopicConfig(T=6, v=4, tau=2, p_c=0.2, p_r=0.3, keys="code")
    sig = tp.escape_rate(cfg)["sigma_max"]
    dL = 2 * cfg.p_c * (cfg.tau - 1) / (cfg.tau**2 * cfg.v)
    assert sig == pytest.approx(dL / ((cfg.T - 1) * cfg.v), rel=1e-10)


@pytest.mark.parametrize("keys", ["theory", "code"])
def test_stage2_tied_sympy_loss_equals_full_vocabulary_loss(keys):
    """The class-counted sympy stage-2 loss equals the full-vocabulary population loss (all
    documents) at random tied logits and a generic W^V; its s2-derivative at S = 0 is the sum of
    G = dL/dS over the same-topic/different-word entries (autodiff of the full loss)."""
    cfg = tp.TopicConfig(T=5, v=3, tau=2, p_m=0.2, p_c=0.15, p_r=0.2, keys=keys)
    loss = tp.stage2_tied_loss(keys)
    rng = np.random.default_rng(0)
    coords = dict(zip(["A", "B", "C", "m", "r", "s", "b_w", "b_M"], rng.normal(0, 0.3, 8)))
    W, b = tp.full_value_matrix(coords, cfg.T, cfg.v)
    syms = tp.STAGE2_STATE + tp.STAGE2_VALUE + (tp.T, tp.v, tp.tau, tp.p_m, tp.p_c, tp.p_r)
    vals = [coords[str(x)] for x in tp.STAGE2_VALUE] + [cfg.T, cfg.v, cfg.tau, cfg.p_m, cfg.p_c, cfg.p_r]
    L = sp.lambdify(syms, loss)
    for _ in range(2):
        sc = rng.normal(0, 1, 6)
        full = float(tp.stage2_loss(tp.tied_logits(cfg.T, cfg.v, *sc, xp=np), W, b, cfg, documents="all", xp=np))
        assert L(*sc, *vals) == pytest.approx(full, rel=1e-12)
    dL_ds2 = sp.lambdify(syms, sp.diff(loss, tp.s2))
    G = tp.escape_rate(cfg, W, b)["G"]
    top = np.repeat(np.arange(cfg.T), cfg.v)
    same_other = (top[:, None] == top[None, :]) & ~np.eye(cfg.T * cfg.v, dtype=bool)
    assert dL_ds2(*np.zeros(6), *vals) == pytest.approx(G[:-1, :-1][same_other].sum(), rel=1e-9)


@pytest.mark.parametrize("keys", ["theory", "code"])
def test_stage2_flow_converges_to_gamma_star(keys):
    import simulate as sim

    cfg = tp.TopicConfig(T=5, v=3, tau=2, p_m=0.2, p_c=0.15, p_r=0.2, keys=keys, lr=1.0)
    sysm = tp.stage2_system(keys)
    sol = sim.solve(sysm, tp.stage2_parameters(cfg), np.zeros(2), np.linspace(0, 3e5, 20), backend="scipy",
                    method="DOP853")
    assert sol["gamma"].values[-1] == pytest.approx(tp.stage2_optimum(cfg)["gamma"], rel=1e-5)
    if keys == "code":
        assert sol["gamma"].values[-1] == pytest.approx(1 + cfg.T * cfg.p_c / cfg.p_r, rel=1e-6)
    assert np.all(np.diff(sol["stage2_loss"].values) <= 1e-15)  # gradient flow: loss never increases


@pytest.mark.parametrize("keys", ["theory", "code"])
def test_stage2_softmax_form_equals_direct_differentiation(keys):
    """The exported stage-2 rhs (key masses h, outputs o, u_k = h_k dL/dh_k, the softmax identity)
    equals -eta n^{-1} dL/ds of the expanded tied loss, differentiated directly, at random points."""
    sysm = tp.stage2_system(keys)
    loss = tp.stage2_tied_loss(keys).subs(tp.STAGE2_TYING).subs({tp.m: 0, tp.r: 0, tp.s: 0, tp.b_M: 0})
    n = tp.logit_multiplicities()
    direct = sp.lambdify((sysm.state, sysm.parameters), [-tp.eta * sp.diff(loss, x) / n[x] for x in (tp.s1, tp.s2)])
    loss_f = sp.lambdify((sysm.state, sysm.parameters), loss)
    f = sysm.to_numpy()
    obs = sysm.observables_numpy()
    rng = np.random.default_rng(3)
    for _ in range(4):
        y = rng.normal(0, 1, 2)
        p = np.array([5, 3, 2, 0.2, 0.15, 0.2, 0.7, *rng.normal(0, 0.3, 4)])
        np.testing.assert_allclose(f(0.0, y, p), direct(y, p), rtol=1e-10, atol=1e-15)
        assert obs(y[None, :], p)["stage2_loss"][0] == pytest.approx(loss_f(y, p), rel=1e-12)
