"""theory.topic.derive: the derived stage-1 flow against full-matrix numpy gradient descent, the
headline 1/(v(1-(1-p_c)p_m)), the closed forms of docs/papers/topic.md §3.5 and the embedding version."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp

from theory import topic as tp

SMALL = dict(T=4, v=3, tau=2, p_m=0.3, p_c=0.2, p_r=0.25)


# ------------------------------------------------------------------------------------------------
# Independent numpy model of the stage-1 population problem (full matrices, all documents)
# ------------------------------------------------------------------------------------------------
def context_numpy(T, v, S, p_m, p_c, p_r, keys):
    """Expected key histogram of a long masked document with topic set S, written from the
    masking law position by position (spec §1.2), not from theory.topic."""
    n = T * v
    x = np.zeros(n + 1)
    doc_words = [w for w in range(n) if w // v in S]
    for w in doc_words:  # a position holding word w (prob 1/len(doc_words))
        pw = 1.0 / len(doc_words)
        if keys == "theory":
            x[w] += pw * (1 - p_m)  # unselected
            x[w] += pw * p_m * p_c  # selected, kept
            x[:n] += pw * p_m * p_r / n  # selected, random word
            x[n] += pw * p_m * (1 - p_c - p_r)  # selected, MASK
        else:  # selected positions are not keys: renormalise over unselected positions
            x[w] += pw
    return x


def population(T, v, tau, p_m, p_c, p_r, keys):
    docs = list(itertools.combinations(range(T), tau))
    X = np.array([context_numpy(T, v, S, p_m, p_c, p_r, keys) for S in docs])
    Y = []  # list of per-doc label sets
    for S in docs:
        Y.append([w for w in range(T * v) if w // v in S])
    return X, Y


def full_loss_grad(W, b, X, Y, lam):
    """E_S E_y ||W x_S + b - e_y||^2 + lam ||W||^2 and its gradient, y uniform on S's words."""
    L, gW, gb = 0.0, np.zeros_like(W), np.zeros_like(b)
    for x, ys in zip(X, Y):
        o = W @ x + b
        for y in ys:
            e = o.copy()
            e[y] -= 1.0
            L += e @ e / len(ys)
            gW += 2 * np.outer(e, x) / len(ys)
            gb += 2 * e / len(ys)
    n = len(X)
    return L / n + lam * (W**2).sum(), gW / n + 2 * lam * W, gb / n


@pytest.mark.parametrize("keys", ["theory", "code"])
def test_symbolic_flow_equals_full_matrix_gradient_descent(keys):
    """Acceptance 1: the reduced flow (Euler step = one GD step) tracks full-matrix GD to 1e-10,
    and the loss in symmetric coordinates equals the full-matrix population loss."""
    cfg = tp.TopicConfig(**SMALL, lam=0.01, keys=keys)
    X, Y = population(cfg.T, cfg.v, cfg.tau, cfg.p_m, cfg.p_c, cfg.p_r, keys)
    rng = np.random.default_rng(0)
    coords = dict(zip(["A", "B", "C", "m", "r", "s", "b_w", "b_M"], rng.normal(0, 0.3, 8)))
    W, b = tp.full_value_matrix(coords, cfg.T, cfg.v)
    sysm = tp.stage1_system(keys)
    f = sysm.to_numpy()
    lr = 0.05
    p = sysm.parameter_vector({**tp.system_parameters(cfg), "eta": lr})
    y = np.array([coords[n] for n in sysm.state_names])
    loss_sym = sp.lambdify(sysm.state + sysm.parameters, sysm.expand_definitions(sysm.observables["population_loss"]))
    topics = np.repeat(np.arange(cfg.T), cfg.v)
    for step in range(60):
        L, gW, gb = full_loss_grad(W, b, X, Y, cfg.lam)
        assert loss_sym(*y, *p) == pytest.approx(L, abs=1e-12)
        W, b = W - lr * gW, b - lr * gb
        y = y + f(0.0, y, p)
    red = tp.reduced_coordinates(W, b, topics, mask_id=cfg.T * cfg.v)
    for i, n in enumerate(sysm.state_names):
        assert abs(red[n] - y[i]) < 1e-10, n
    # the subspace is invariant: W is still exactly symmetric
    Wsym, bsym = tp.full_value_matrix({n: y[i] for i, n in enumerate(sysm.state_names)}, cfg.T, cfg.v)
    assert np.abs(W - Wsym).max() < 1e-10 and np.abs(b - bsym).max() < 1e-10


def test_context_frequencies_match_masking_law():
    cfg = tp.TopicConfig(**SMALL)
    for keys in tp.KEY_VARIANTS:
        fr = tp.context_frequencies(keys)
        subs = {tp.T: cfg.T, tp.v: cfg.v, tp.tau: cfg.tau, tp.p_m: cfg.p_m, tp.p_c: cfg.p_c, tp.p_r: cfg.p_r}
        x = context_numpy(cfg.T, cfg.v, (0, 1), cfg.p_m, cfg.p_c, cfg.p_r, keys)
        assert float(fr["f_in"].subs(subs)) == pytest.approx(x[0], abs=1e-14)
        assert float(fr["f_out"].subs(subs)) == pytest.approx(x[-2], abs=1e-14)
        assert float(fr["f_mask"].subs(subs)) == pytest.approx(x[-1], abs=1e-14)
        assert x.sum() == pytest.approx(1.0, abs=1e-14)


def test_headline_comes_out_of_the_derivation():
    """Slides: average same-topic minus different-topic = 1/(v(1-(1-p_c)p_m)); code variant 1/v."""
    v, p_m, p_c = tp.v, tp.p_m, tp.p_c
    spec = 1 / (v * (1 - (1 - p_c) * p_m))
    assert sp.simplify(tp.headline_block_difference("theory") - spec) == 0
    assert sp.simplify(tp.headline_block_difference("code") - 1 / v) == 0
    # defaults: 0.115607
    val = tp.headline_block_difference("theory").subs({v: 10, p_m: sp.Rational(15, 100), p_c: sp.Rational(1, 10)})
    assert float(val) == pytest.approx(0.115607, abs=1e-6)


def test_finite_weight_decay_optimum_and_kappa_match_spec():
    """Spec §3.5/P4: omega_2*/v = a(T-tau)/(v[(T-tau)a^2 + lam v tau T (T-1)]); kappa of the tau-model."""
    T, v, tau, lam, p_m, p_c = tp.T, tp.v, tp.tau, tp.lam, tp.p_m, tp.p_c
    a = 1 - (1 - p_c) * p_m
    spec = a * (T - tau) / (v * ((T - tau) * a**2 + lam * v * tau * T * (T - 1)))
    assert sp.simplify(tp.headline_block_difference("theory", limit=False) - spec) == 0
    eq = tp.topic_mode_equation("theory")
    assert sp.simplify(eq["kappa"] - (T - tau) / (tau * T * (T - 1) * v)) == 0
    assert sp.simplify(eq["a"] - a) == 0
    # rate 2 eta (kappa a^2 + lam); closed form solves the ODE from 0
    kap = eq["kappa"]
    assert sp.simplify(eq["rate"] - 2 * tp.eta * (kap * a**2 + lam)) == 0
    sol = tp.topic_mode_solution("theory")["omega_2"]
    assert sp.simplify(sp.diff(sol, tp.t_sym) - eq["rhs"].subs(tp.omega_2, sol)) == 0
    assert sol.subs(tp.t_sym, 0) == 0
    spec_sol = kap * a / (kap * a**2 + lam) * (1 - sp.exp(-2 * tp.eta * (kap * a**2 + lam) * tp.t_sym))
    num = {T: 10, v: 10, tau: 2, p_m: 0.15, p_c: 0.1, tp.p_r: 0.1, lam: 0.003, tp.eta: 0.3, tp.t_sym: 77.0}
    assert float(sol.subs(num)) == pytest.approx(float(spec_sol.subs(num)), rel=1e-12)
    # T = v = 10, tau = 2: 2 kappa a^2 = 0.00665
    assert float((2 * kap * a**2).subs(num)) == pytest.approx(0.00665, abs=5e-6)


def test_optimum_block_statistic_is_one_over_va_numpy_ridge():
    """Acceptance 1: the lam -> 0 optimum's block statistic equals 1/(v a), checked by an
    independent full-matrix ridge solve (numpy lstsq) over all documents."""
    cfg = tp.TopicConfig(**SMALL)
    for keys, a in (("theory", 1 - (1 - cfg.p_c) * cfg.p_m), ("code", 1.0)):
        X, Y = population(cfg.T, cfg.v, cfg.tau, cfg.p_m, cfg.p_c, cfg.p_r, keys)
        n = cfg.T * cfg.v
        # targets: E[e_y|S] = u_S (the variance term does not depend on W, b)
        U = np.zeros((len(X), n + 1))
        for i, ys in enumerate(Y):
            U[i, ys] = 1 / len(ys)
        lam = 1e-9
        Xa = np.hstack([X, np.ones((len(X), 1))])
        reg = np.diag([lam * len(X)] * (n + 1) + [0.0])
        Wb = np.linalg.solve(Xa.T @ Xa + reg, Xa.T @ U).T
        W = Wb[:, :-1]
        red = tp.reduced_coordinates(W, Wb[:, -1], np.repeat(np.arange(cfg.T), cfg.v), mask_id=n)
        assert red["block_difference"] == pytest.approx(1 / (cfg.v * a), rel=1e-6)
        opt = tp.stage1_optimum(cfg.replace(keys=keys))
        assert (opt["A"] + (cfg.v - 1) * opt["B"]) / cfg.v - opt["C"] == pytest.approx(1 / (cfg.v * a), rel=1e-12)
        assert opt["A"] == pytest.approx(red["A"], abs=1e-6) and opt["C"] == pytest.approx(red["C"], abs=1e-6)


def test_embedding_mode_is_logistic_as_in_spec():
    e2, eta, a, kap = tp.e_2, tp.eta, 1 - (1 - tp.p_c) * tp.p_m, tp.topic_mode_equation()["kappa"]
    em = tp.embedding_topic_mode("theory")
    spec = -8 * eta * kap * a * e2 * (a * e2 - 1)
    assert sp.simplify((em["rhs"] - spec).subs(tp.lam, 0)) == 0
    assert sp.simplify(em["fixed_point"].subs(tp.lam, 0) - 1 / a) == 0


@pytest.mark.parametrize("keys", ["theory", "code"])
def test_stage1_flow_through_definitions_is_the_gradient_of_the_expanded_loss(keys):
    """The exported rhs (written with a, f_in, ..., o_M) expands to -eta n_k^{-1} dL/dtheta_k of the
    loss in state and parameters only (sympy, exact), and the named a is 1-(1-p_c)p_m."""
    sysm = tp.stage1_system(keys)
    L = tp.stage1_loss(keys)
    n = tp.multiplicities()
    for x, f in zip(sysm.state, sysm.expanded_rhs):
        assert sp.cancel(f - (-tp.eta * sp.diff(L, x) / n[x])) == 0, x
    if keys == "theory":
        defs = dict((str(q), e) for q, e in sysm.definitions)
        assert sp.simplify(defs["a"] - (1 - (1 - tp.p_c) * tp.p_m)) == 0
